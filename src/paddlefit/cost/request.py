"""What ``paddlefit cost`` takes besides the job: :class:`CostRequest`, which validates itself.

The messages name the command-line option of each field (``--disk-mib-s`` for ``disk_mib_s``), so a library user
reads what a CLI user reads.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from paddlefit import options
from paddlefit.catalog.currency import MoneyOptions
from paddlefit.cost.spot_risk import InterruptionRate, rate_from_bucket
from paddlefit.errors import PaddlefitError
from paddlefit.plan.request import DEFAULT_SAFETY_MARGIN, check_job_length
from paddlefit.units import MIB
from paddlefit.validation import plausible


class CostRequest(MoneyOptions):
    """Everything ``paddlefit cost`` takes besides the job (:class:`paddlefit.job.resolve.JobOptions`).

    Raises:
        PaddlefitError: (on construction) a field of the wrong type or out of range, or two that exclude each
            other, naming the option.
    """

    dataset_size: int | None = Field(
        None,
        description="Samples per epoch; None = from the job spec (``data.train``).",
        **options.DATASET_SIZE.bounds,
        json_schema_extra=options.DATASET_SIZE.field(),
    )
    epochs: float | None = Field(
        None,
        description="Epochs; None = from the job spec (``epochs``, ``max_steps``).",
        **options.EPOCHS.bounds,
        json_schema_extra=options.EPOCHS.field(),
    )
    clouds: list[str] = Field(
        default_factory=list, description="Only these clouds (empty = all).", json_schema_extra=options.CLOUD.field()
    )
    gpus: list[str] = Field(
        default_factory=list,
        description="Only instances with these GPUs (names or aliases).",
        json_schema_extra=options.GPU.field(),
    )
    region: str | None = Field(
        None,
        description="One region for every cloud; None = each cloud's default.",
        json_schema_extra=options.REGION.field(),
    )
    spot: bool = Field(
        False,
        description="Rank by spot expected cost (on-demand where no spot price).",
        json_schema_extra=options.SPOT.field(),
    )
    interruptions_per_hour: Annotated[float | None, plausible(1e-6, 3600)] = Field(
        None,
        description="Spot interruptions per instance-hour for every instance (or ``spot_bucket``, not "
        "both); neither = each instance's own rate (:func:`paddlefit.cost.spot_risk.spot_rate`: the published AWS "
        "bucket, else 1/24 h as ``default (no published rate)``).",
        **options.INTERRUPTIONS_PER_HOUR.bounds,
        json_schema_extra=options.INTERRUPTIONS_PER_HOUR.field(),
    )
    spot_bucket: str | None = Field(
        None,
        description="An AWS Spot Instance Advisor bucket for every instance.",
        json_schema_extra=options.SPOT_BUCKET.field(),
    )
    disk_mib_s: Annotated[float | None, plausible(1e-3, 1e7)] = Field(
        None,
        gt=0,
        description="Checkpoint write bandwidth, MiB/s (None = 125, EBS gp3).",
        json_schema_extra=options.DISK_MIB_S.field(),
    )
    restart_minutes: Annotated[float | None, plausible(0, 1e5)] = Field(
        None,
        ge=0,
        description="Minutes lost per interruption besides the lost work (None = 10).",
        json_schema_extra=options.RESTART_MINUTES.field(),
    )
    price_files: list[str] = Field(
        default_factory=list, description="Extra price CSVs.", json_schema_extra=options.PRICES.field()
    )
    shipped_prices: bool = Field(
        False, description="Ignore SkyPilot's cached catalogs.", json_schema_extra=options.SHIPPED_PRICES.field()
    )
    catalog_files: list[str] = Field(
        default_factory=list, description="User GPU catalog files.", json_schema_extra=options.CATALOG.field()
    )
    calibration_files: list[str] = Field(
        default_factory=list, description="User calibration files.", json_schema_extra=options.CALIBRATION.field()
    )
    safety_margin: float = Field(
        DEFAULT_SAFETY_MARGIN,
        description="Fraction of GPU memory a peak may use.",
        **options.SAFETY_MARGIN.bounds,
        json_schema_extra=options.SAFETY_MARGIN.field(),
    )
    top: int = Field(
        options.TOP_COST.default,
        **options.TOP_COST.bounds,
        description="Table rows to show.",
        json_schema_extra=options.TOP_COST.field(),
    )
    use_runs: bool = Field(
        True, description="Correct each GPU's step time by the run registry's recorded runs (``--no-runs``: off)."
    )

    @model_validator(mode="after")
    def _consistent(self) -> CostRequest:
        """The checks across fields: an empty region, a rate and a bucket, an unknown bucket, the job length."""
        if self.region is not None and not self.region.strip():
            raise PaddlefitError("`--region` is empty; give a region such as us-east-1 or leave it out.")
        if self.interruptions_per_hour is not None and self.spot_bucket is not None:
            raise PaddlefitError("Give `--interruptions-per-hour` or `--spot-bucket`, not both.")
        self.rate()  # an unknown bucket fails here, before any model is built
        if self.dataset_size is not None and self.epochs is not None:
            check_job_length(self.dataset_size, self.epochs)
        return self

    def rate(self) -> InterruptionRate | None:
        """The spot interruption rate the options give for every instance; None = each instance's own
        (:func:`~paddlefit.cost.spot_risk.spot_rate`).

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
        """The :func:`~paddlefit.cost.instances.build_cost` keywords the options set: ``disk_bytes_per_s`` (bytes/s) and
        ``restart_s`` (seconds)."""
        kwargs: dict[str, Any] = {}
        if self.disk_mib_s is not None:
            kwargs["disk_bytes_per_s"] = self.disk_mib_s * MIB
        if self.restart_minutes is not None:
            kwargs["restart_s"] = self.restart_minutes * 60
        return kwargs
