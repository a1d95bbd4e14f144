"""``paddlefit doctor`` without the rendering: options (and a job spec) -> snapshot -> findings.

Example:
    >>> report = run_doctor(DoctorRequest(num_workers=8, inputs=["float32[3,224,224]"]))  # doctest: +SKIP
    >>> [f.check_id for f in report.errors]  # doctest: +SKIP
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field

from paddlefit import options
from paddlefit.diagnose.checks import run_checks
from paddlefit.diagnose.registry import Finding, JobContext
from paddlefit.diagnose.snapshot import Snapshot, collect_snapshot, load_snapshot
from paddlefit.errors import ModelError
from paddlefit.jobspec.loader import LoaderRequest


class DoctorRequest(LoaderRequest):
    """What to check. Job options left None come from ``config`` (a job spec), then Paddle's DataLoader defaults.

    Raises (when built):
        PaddlefitError: a field of the wrong type or out of range, named by its option (``--num-workers``).
    """

    model_config = ConfigDict(frozen=True)

    from_file: Path | None = Field(
        None,
        description="Check this saved snapshot (JSON) instead of this machine.",
        json_schema_extra=options.FROM.field(),
    )
    snapshot_file: Path | None = Field(
        None, description="Save the collected snapshot here (JSON).", json_schema_extra=options.SNAPSHOT.field()
    )
    config: Path | None = Field(
        None, description="Job spec YAML filling the job options below.", json_schema_extra=options.CONFIG.field()
    )
    model: str | None = Field(
        None,
        description="Zoo model or ``pkg.mod:factory`` whose checkpoint size the disk check uses.",
        json_schema_extra=options.MODEL.field(),
    )
    run_dir: Path | None = Field(
        None,
        description="Where checkpoints will be written (disk check; default the spec's run_dir, else ``.``).",
        json_schema_extra=options.RUN_DIR.field(),
    )
    measure: bool = Field(
        True,
        description="Time a small CPU step under each OpenMP wait policy (PF121; fresh processes, a few seconds).",
        json_schema_extra=options.MEASURE.field(),
    )


@dataclass(frozen=True)
class DoctorReport:
    """The snapshot checked and every finding, in check-ID order."""

    snapshot: Snapshot
    findings: list[Finding]

    @property
    def errors(self) -> list[Finding]:
        """The findings of severity ``error`` (``doctor`` exits 1 when there is one)."""
        return [f for f in self.findings if f.severity == "error"]

    def to_dict(self) -> dict[str, Any]:
        """``{snapshot, findings}`` as plain JSON types (``doctor --json``)."""
        return {"snapshot": self.snapshot.to_dict(), "findings": [f.to_dict() for f in self.findings]}


def checkpoint_bytes(model: str, model_args: dict | None = None) -> int:
    """Weights + Adam states of ``model`` (built under paddle.LazyGuard, or for real when that fails), bytes: what
    a checkpoint holds (fp32 Adam: 4 + 8 bytes per parameter, ZeRO paper section 3.1).

    Raises:
        ModelError: the model cannot be resolved or built (the message names ``--model``).
    """
    from paddlefit.estimate.model_states import model_state_bytes
    from paddlefit.jobspec.spec import OptimizerName, Precision
    from paddlefit.models.build import param_inventory
    from paddlefit.models.zoo import resolve_model

    ref = resolve_model(model, model_args)
    try:
        info, _ = param_inventory(ref)
    except ModelError as exc:
        raise ModelError(f"`--model {model}`: {exc}") from None
    st = model_state_bytes(info, OptimizerName.ADAM, Precision.FP32)
    return st.weights_bytes + st.optimizer_bytes


def run_doctor(req: DoctorRequest) -> DoctorReport:
    """Collect (or load) the snapshot, size the job from the options and the spec, run every check, and save the
    snapshot when asked.

    Raises:
        PaddlefitError: a bad option value (named), a bad spec, snapshot or output path, or a model that does
            not build.
    """
    from paddlefit.fileio import atomic_write_text, check_output_path
    from paddlefit.jobspec.inputs import parse_input_spec
    from paddlefit.jobspec.spec import load_job_spec, merge_loader_options

    spec = load_job_spec(req.config) if req.config is not None else None
    opts = merge_loader_options(
        spec,
        num_workers=req.num_workers,
        prefetch_factor=req.prefetch_factor,
        batch_size=req.batch_size,
        inputs=req.inputs,
        devices=req.devices,
    )
    model, run_dir = req.model, req.run_dir
    if spec is not None:
        model = model or spec.model
        run_dir = run_dir or Path(spec.run_dir)
    run_dir = run_dir or Path(".")  # the ranges of opts: the request's and the spec's fields
    specs = [parse_input_spec(x) for x in opts.inputs or []]
    if req.snapshot_file is not None:
        check_output_path(req.snapshot_file, "--snapshot", ours='"shm_total_bytes"')
    if req.from_file is not None:
        snap = load_snapshot(req.from_file, "--from")
    else:
        snap = collect_snapshot(run_dir, measure_omp=req.measure)
    ckpt = None
    if model:
        ckpt = checkpoint_bytes(model, dict(spec.model_args) if spec is not None and model == spec.model else None)
    batch = opts.batch_size
    batch_bytes = batch * sum(s.bytes_per_sample for s in specs) if batch and specs else None
    job = JobContext(
        num_workers=opts.num_workers or None,
        prefetch_factor=opts.prefetch_factor,
        batch_bytes=batch_bytes,
        devices=opts.devices,
        checkpoint_bytes=ckpt,
        use_shared_memory=opts.use_shared_memory,
    )
    findings = run_checks(snap, job)
    if req.snapshot_file is not None:
        # as jsondoc.to_json writes it (a snapshot holds no NaN)
        atomic_write_text(req.snapshot_file, json.dumps(snap.to_dict(), indent=2) + "\n", option="--snapshot")
    return DoctorReport(snap, findings)
