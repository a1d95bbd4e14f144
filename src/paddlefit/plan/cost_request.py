"""What ``paddlefit cost`` takes besides the job: :class:`CostRequest`, which validates itself.

The messages name the command-line option of each field (``--disk-mib-s`` for ``disk_mib_s``), so a library user
reads what a CLI user reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from paddlefit.errors import PaddlefitError
from paddlefit.fieldcheck import check_field_types
from paddlefit.plan.request import DEFAULT_SAFETY_MARGIN
from paddlefit.plan.spot_risk import InterruptionRate, rate_from_bucket

#: Largest job length ``cost`` accepts: samples per epoch and epochs (beyond them the numbers mean nothing).
MAX_DATASET_SIZE = 10**13
MAX_EPOCHS = 1e6


def check_positive(value: float | None, option: str, allow_zero: bool = False) -> None:
    """None passes; otherwise ``value`` must be finite and > 0 (>= 0 with ``allow_zero``).

    Raises:
        PaddlefitError: naming ``option`` and the value.
    """
    if value is None:
        return
    if not (math.isfinite(value) and (value >= 0 if allow_zero else value > 0)):
        raise PaddlefitError(f"`{option}` must be a finite number {'>= 0' if allow_zero else '> 0'} (got {value}).")


def check_job_length(dataset_size: int, epochs: float) -> None:
    """``dataset_size`` in 1..:data:`MAX_DATASET_SIZE` samples, ``epochs`` finite in (0, :data:`MAX_EPOCHS`].

    Raises:
        PaddlefitError: naming ``--dataset-size`` and ``--epochs``.
    """
    if not 1 <= dataset_size <= MAX_DATASET_SIZE or not math.isfinite(epochs) or not 0 < epochs <= MAX_EPOCHS:
        raise PaddlefitError("`--dataset-size` must be 1..1e13 and `--epochs` a number in (0, 1e6].")


@dataclass
class CostRequest:
    """Everything ``paddlefit cost`` takes besides the job (:class:`paddlefit.job.JobOptions`).

    Attributes:
        dataset_size, epochs: samples per epoch and epochs; None = from the job spec (``data.train``, ``epochs``,
            ``max_steps``).
        clouds: only these clouds (empty = all); gpus: only instances with these GPUs (names or aliases).
        region: one region for every cloud; None = each cloud's default.
        spot: rank by spot expected cost (on-demand where no spot price).
        interruptions_per_hour: spot interruptions per instance-hour; or ``spot_bucket``, an AWS Spot Instance
            Advisor bucket (not both), for every instance; neither = each instance's own rate
            (:func:`paddlefit.plan.spot_risk.spot_rate`: the published AWS bucket, else 1/24 h as
            ``default (no published rate)``).
        disk_mib_s: checkpoint write bandwidth, MiB/s (None = 125, EBS gp3).
        restart_minutes: minutes lost per interruption besides the lost work (None = 10).
        price_files: extra price CSVs; shipped_prices: ignore SkyPilot's cached catalogs.
        catalog_files, calibration_files: user GPU catalog and calibration files.
        safety_margin: fraction of GPU memory a peak may use, in (0, 1]; top: table rows to show (>= 1).
        use_runs: correct each GPU's step time by the run registry's recorded runs (``--no-runs``: off).

    Raises:
        PaddlefitError: (on construction) a field out of range or two that exclude each other, naming the option.
    """

    dataset_size: int | None = None
    epochs: float | None = None
    clouds: list[str] = field(default_factory=list)
    gpus: list[str] = field(default_factory=list)
    region: str | None = None
    spot: bool = False
    interruptions_per_hour: float | None = None
    spot_bucket: str | None = None
    disk_mib_s: float | None = None
    restart_minutes: float | None = None
    price_files: list[str] = field(default_factory=list)
    shipped_prices: bool = False
    catalog_files: list[str] = field(default_factory=list)
    calibration_files: list[str] = field(default_factory=list)
    safety_margin: float = DEFAULT_SAFETY_MARGIN
    top: int = 15
    use_runs: bool = True

    def __post_init__(self) -> None:
        check_field_types(self, {"dataset_size": "--dataset-size", "epochs": "--epochs", "clouds": "--cloud",
                                 "gpus": "--gpu", "region": "--region", "spot_bucket": "--spot-bucket",
                                 "interruptions_per_hour": "--interruptions-per-hour", "disk_mib_s": "--disk-mib-s",
                                 "restart_minutes": "--restart-minutes", "price_files": "--prices",
                                 "catalog_files": "--catalog", "calibration_files": "--calibration",
                                 "safety_margin": "--safety-margin", "top": "--top"})  # fmt: skip
        if not (math.isfinite(self.safety_margin) and 0 < self.safety_margin <= 1):
            raise PaddlefitError(f"`--safety-margin` must be in (0, 1] (got {self.safety_margin}).")
        if self.top < 1:
            raise PaddlefitError(f"`--top` must be >= 1 (got {self.top}).")
        check_positive(self.interruptions_per_hour, "--interruptions-per-hour")
        check_positive(self.disk_mib_s, "--disk-mib-s")
        check_positive(self.restart_minutes, "--restart-minutes", allow_zero=True)
        for opt, value, lo, hi in (("--interruptions-per-hour", self.interruptions_per_hour, 1e-6, 3600),
                                   ("--disk-mib-s", self.disk_mib_s, 1e-3, 1e7),
                                   ("--restart-minutes", self.restart_minutes, 0, 1e5)):  # fmt: skip
            if value is not None and not lo <= value <= hi:
                raise PaddlefitError(f"`{opt} {value:g}` is outside {lo:g}..{hi:g}.")
        if self.region is not None and not self.region.strip():
            raise PaddlefitError("`--region` is empty; give a region such as us-east-1 or leave it out.")
        if self.interruptions_per_hour is not None and self.spot_bucket is not None:
            raise PaddlefitError("Give `--interruptions-per-hour` or `--spot-bucket`, not both.")
        self.rate()  # an unknown bucket fails here, before any model is built
        if self.dataset_size is not None and self.epochs is not None:
            check_job_length(self.dataset_size, self.epochs)

    def rate(self) -> InterruptionRate | None:
        """The spot interruption rate the options give for every instance; None = each instance's own
        (:func:`~paddlefit.plan.spot_risk.spot_rate`).

        Raises:
            PaddlefitError: an unknown ``spot_bucket``.
        """
        if self.spot_bucket is not None:
            return rate_from_bucket(self.spot_bucket)
        if self.interruptions_per_hour is not None:
            opt = f"--interruptions-per-hour {self.interruptions_per_hour:g}"
            return InterruptionRate(self.interruptions_per_hour, opt, opt)
        return None

    def cost_overrides(self) -> dict[str, Any]:
        """The :func:`~paddlefit.plan.cost.build_cost` keywords the options set: ``disk_bytes_per_s`` (bytes/s) and
        ``restart_s`` (seconds)."""
        kwargs: dict[str, Any] = {}
        if self.disk_mib_s is not None:
            kwargs["disk_bytes_per_s"] = self.disk_mib_s * 1024**2
        if self.restart_minutes is not None:
            kwargs["restart_s"] = self.restart_minutes * 60
        return kwargs
