"""The DataLoader options a command takes beside a job spec (``doctor`` and ``image`` size ``/dev/shm`` and the
CPU cores with them): one request model both requests extend, merged with the spec by
:func:`paddlefit.jobspec.spec.merge_loader_options`."""

from __future__ import annotations

from pydantic import Field

from paddlefit import options
from paddlefit.validation import RequestModel


class LoaderRequest(RequestModel):
    """Workers, prefetch, batch, inputs and trainer processes of a job's DataLoader (None = the job spec's, then
    Paddle's DataLoader defaults).

    Raises:
        PaddlefitError: (on construction) a value out of range, named by its option (``--num-workers``).
    """

    num_workers: int | None = Field(
        None,
        description="DataLoader workers per trainer.",
        **options.NUM_WORKERS.bounds,
        json_schema_extra=options.NUM_WORKERS.field(),
    )
    prefetch_factor: int | None = Field(
        None,
        description="Batches per DataLoader worker ahead.",
        **options.PREFETCH_FACTOR.bounds,
        json_schema_extra=options.PREFETCH_FACTOR.field(),
    )
    batch_size: int | None = Field(
        None,
        description="Per-device batch size, samples.",
        **options.BATCH_SIZE.bounds,
        json_schema_extra=options.BATCH_SIZE.field(),
    )
    inputs: list[str] = Field(
        default_factory=list,
        description="Per-sample input specs (``float32[3,224,224]``).",
        json_schema_extra=options.INPUT.field(),
    )
    devices: int | None = Field(
        None,
        description="Trainer processes (on this machine, or in the container).",
        **options.DEVICES.bounds,
        json_schema_extra=options.DEVICES.field(),
    )
