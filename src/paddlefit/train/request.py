"""``paddlefit train``'s options as a request: the job spec with the command line applied, checked field by field.

A library user gets the checks and messages a CLI user gets::

    from paddlefit.train.request import TrainRequest
    from paddlefit.train.run import run_job

    req = TrainRequest(config="examples/digits.yaml", run_dir="runs/from-python", max_steps=100).resolve()
    outcome = run_job(req.spec, gpu_ids=req.gpu_ids, resume=req.resume)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field

from paddlefit import options
from paddlefit.catalog.prices import instance_price
from paddlefit.errors import PaddlefitError
from paddlefit.jobspec.spec import JobSpec, load_job_spec
from paddlefit.validation import RequestModel, first_problem

__all__ = ["ResolvedTrain", "TrainRequest", "parse_devices"]


def parse_devices(text: str) -> tuple[int, list[int] | None]:
    """``"2"`` -> (2, None): two devices, GPU ids 0..1 when GPUs exist, else two CPU processes;
    ``"0,1"`` or ``"3"``-style lists with a comma -> (2, [0, 1]) explicit GPU ids.

    Raises:
        PaddlefitError: not a positive count or a comma-separated list of distinct non-negative ids.
    """
    t = text.strip()
    try:
        if "," in t:
            ids = [int(x) for x in t.split(",") if x.strip()]
            twice = sorted({i for i in ids if ids.count(i) > 1})
            if twice:
                raise PaddlefitError(
                    f"`--devices {text}` names GPU {twice[0]} twice; it must be a count such as 2 "
                    "or distinct GPU ids such as 0,1."
                )
            if not ids or min(ids) < 0:
                raise ValueError
            return len(ids), ids
        n = int(t)
        if n < 1:
            raise PaddlefitError(
                f"`--devices {text}` must be a count >= 1 (e.g. 2), or GPU ids with a comma (0,1; "
                "one GPU: `--devices 0,`)."
            )
        return n, None
    except ValueError:
        raise PaddlefitError(f"`--devices {text}` must be a count such as 2 or GPU ids such as 0,1.") from None


@dataclass
class ResolvedTrain:
    """The job to run: the spec with the options applied, the explicit GPU ids (or None), the resume mode, and
    notes for the user (e.g. the catalog price used)."""

    spec: JobSpec
    gpu_ids: list[int] | None
    resume: str
    notes: list[str] = field(default_factory=list)


class TrainRequest(RequestModel):
    """``paddlefit train``'s options (None = the spec's value); :meth:`resolve` checks them against the spec.

    Raises (when built):
        PaddlefitError: a field of the wrong type or out of range, named by its option (``--max-hours``).
    """

    config: Path | str = Field(description="The job spec YAML.", json_schema_extra=options.CONFIG_ARG.field())
    devices: str | None = Field(
        None, description='``"2"`` (a count) or ``"0,1"`` (GPU ids).', json_schema_extra=options.DEVICES_TRAIN.field()
    )
    run_dir: str | None = Field(
        None, description="Run directory (None: the spec's ``run_dir``).", json_schema_extra=options.RUN_DIR.field()
    )
    resume: str = Field(
        options.RESUME.default,
        description="``auto``, ``never`` or a checkpoint directory.",
        json_schema_extra=options.RESUME.field(),
    )
    max_steps: int | None = Field(
        None, ge=1, description="Replaces the spec's ``max_steps``.", json_schema_extra=options.MAX_STEPS.field()
    )
    max_hours: float | None = Field(
        None, gt=0, description="``budget.max_hours``, hours.", json_schema_extra=options.MAX_HOURS.field()
    )
    max_cost: float | None = Field(
        None, gt=0, description="``budget.max_cost_usd``, USD.", json_schema_extra=options.MAX_COST.field()
    )
    price_per_hour: float | None = Field(
        None,
        gt=0,
        description="``budget.price_usd_per_hour``, USD/hour.",
        json_schema_extra=options.PRICE_PER_HOUR.field(),
    )
    instance: str | None = Field(
        None,
        description="Take the price from the price catalog (with ``cloud``, ``spot``) instead of ``price_per_hour``.",
        json_schema_extra=options.INSTANCE.field(),
    )
    cloud: str | None = Field(
        None, description="Cloud of ``instance`` when the name is ambiguous.", json_schema_extra=options.CLOUD.field()
    )
    spot: bool = Field(
        options.SPOT.default, description="The spot price of ``instance``.", json_schema_extra=options.SPOT.field()
    )
    checkpoint_interval: str | None = Field(
        None, description="``auto`` (Daly) or minutes.", json_schema_extra=options.CHECKPOINT_INTERVAL.field()
    )
    interruptions_per_hour: float | None = Field(
        None,
        description="Spot interruptions per instance-hour for ``checkpoint_interval: auto``.",
        **options.INTERRUPTIONS_PER_HOUR.bounds,
        json_schema_extra=options.INTERRUPTIONS_PER_HOUR.field(),
    )
    spot_bucket: str | None = Field(
        None,
        description="Or an AWS Spot Instance Advisor bucket such as ``5-10%`` for ``auto``.",
        json_schema_extra=options.SPOT_BUCKET.field(),
    )

    def resolve(self) -> ResolvedTrain:
        """Load the spec and apply the options.

        Raises:
            PaddlefitError: a bad spec or option, named as on the command line (``--max-hours``...), with the fix.
        """
        spec = load_job_spec(self.config, option="CONFIG")
        n, gpu_ids = parse_devices(self.devices) if self.devices is not None else (spec.devices, None)
        if not self.resume.strip():
            raise PaddlefitError("`--resume` is empty; give auto, never or a checkpoint directory.")
        if self.resume not in ("auto", "never") and not Path(self.resume).is_dir():
            raise PaddlefitError(f"`--resume {self.resume}` is not `auto`, `never` or a checkpoint directory.")
        if self.run_dir is not None and not self.run_dir.strip():
            raise PaddlefitError("`--run-dir` is empty; give a directory such as runs/digits.")
        notes: list[str] = []
        update: dict[str, Any] = {
            "devices": n,
            "run_dir": str(self.run_dir if self.run_dir is not None else spec.run_dir),
        }
        if self.max_steps is not None:  # the command line replaces the spec's max_steps (epochs still bound the run)
            update["max_steps"] = self.max_steps
        budget = _budget(
            spec, self.max_hours, self.max_cost, self.price_per_hour, self.instance, self.cloud, self.spot, notes
        )
        if budget is not None:
            update["budget"] = budget
        ckpt = _checkpoint(spec, self.checkpoint_interval, self.interruptions_per_hour, self.spot_bucket)
        if ckpt is not None:
            update["checkpoint"] = ckpt
        return ResolvedTrain(_merged(spec, update), gpu_ids, self.resume, notes)


def _budget(
    spec: JobSpec,
    max_hours: float | None,
    max_cost: float | None,
    price: float | None,
    instance: str | None,
    cloud: str | None,
    spot: bool,
    notes: list[str],
) -> Any:
    """The spec's budget with the command-line limits applied, or None when no option was given."""
    if (spot or cloud) and instance is None:
        raise PaddlefitError("`--spot`/`--cloud` go with `--instance` (the price of a catalog instance type).")
    if price is not None and instance is not None:
        raise PaddlefitError("Give `--price-per-hour` or `--instance`, not both.")
    if instance is not None:
        price = instance_price(instance, cloud, spot)
        notes.append(f"price: {instance}{' spot' if spot else ''} {price:g} USD/hour (catalog)")
    upd = {
        k: v
        for k, v in (("max_hours", max_hours), ("max_cost_usd", max_cost), ("price_usd_per_hour", price))
        if v is not None
    }
    merged = spec.budget.model_dump() | upd
    if merged["max_cost_usd"] is not None and merged["price_usd_per_hour"] is None:
        raise PaddlefitError(
            "a cost limit (`--max-cost` or budget.max_cost_usd) needs the price: `--price-per-hour "
            "USD`, `--instance TYPE` or budget.price_usd_per_hour."
        )
    if not upd:
        return None
    return _validated(spec.budget, merged, "budget")


def _checkpoint(spec: JobSpec, interval: str | None, rate: float | None, bucket: str | None) -> Any:
    """The spec's checkpoint section with ``--checkpoint-interval`` applied, or None when not given."""
    auto = interval is not None and interval.strip().lower() == "auto"
    if (rate is not None or bucket is not None) and not auto:
        raise PaddlefitError("`--interruptions-per-hour`/`--spot-bucket` go with `--checkpoint-interval auto`.")
    if interval is None:
        return None
    if auto:
        if rate is not None and bucket is not None:
            raise PaddlefitError("Give `--interruptions-per-hour` or `--spot-bucket`, not both.")
        if bucket is not None:
            from paddlefit.cost.spot_risk import rate_from_bucket

            rate = rate_from_bucket(bucket).per_hour
        upd: dict[str, Any] = {"auto_interval": True, **({"interruptions_per_hour": rate} if rate is not None else {})}
    else:
        try:
            minutes = float(interval)
        except ValueError:
            minutes = -1.0
        if not (math.isfinite(minutes) and minutes > 0):
            raise PaddlefitError(f"`--checkpoint-interval {interval}` must be `auto` or minutes > 0 (e.g. 15).")
        upd = {"auto_interval": False, "every_minutes": minutes, "every_steps": 0}
    return _validated(spec.checkpoint, spec.checkpoint.model_dump() | upd, "checkpoint")


#: job-spec keys the command line sets, and the option that sets each (for messages)
_OPTION_OF = {"max_steps": "--max-steps", "devices": "--devices", "run_dir": "--run-dir"}


def _merged(spec: JobSpec, update: dict[str, Any]) -> JobSpec:
    """``spec`` with the command-line values, validated as a whole (the ranges of the spec apply to options).

    Raises:
        PaddlefitError: an option's value outside its job-spec field's range, naming the option.
    """
    from pydantic import ValidationError

    try:
        return JobSpec.model_validate({**spec.model_dump(), **update})
    except ValidationError as exc:
        where, problem = first_problem(exc, {k: f"`{o}` ({k})" for k, o in _OPTION_OF.items()})
        raise PaddlefitError(f"{where}: {problem}.") from None


def _validated(model: Any, values: dict[str, Any], section: str) -> Any:
    """``values`` validated as ``model``'s class; a range error names the option's spec key."""
    from pydantic import ValidationError

    try:
        return model.model_validate(values)
    except ValidationError as exc:
        where, problem = first_problem(exc)
        raise PaddlefitError(f"{section}.{where}: {problem}.") from None
