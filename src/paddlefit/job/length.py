"""A job's length in optimizer steps, counted alike by ``plan``, ``cost`` and ``train``:

- :func:`steps_per_epoch`: optimizer steps per epoch (whole global batches; the last one padded without
  ``drop_last``), and :func:`batches_per_rank`, the micro-batches one rank loads for them;
- :func:`job_steps` / :func:`total_steps`: the run's optimizer steps from ``epochs`` and ``max_steps``.

They are the trainer's arithmetic (:class:`paddlefit.train.data.ResumableBatchSampler` uses them;
``tests/job/test_length.py`` checks them against it).
"""

from __future__ import annotations

import math

from paddlefit.errors import PaddlefitError
from paddlefit.jobspec.spec import JobSpec


def steps_per_epoch(
    train_size: int, batch_size: int, world: int = 1, grad_accum_steps: int = 1, drop_last: bool = True
) -> int:
    """Optimizer steps in one epoch of ``train_size`` samples at global batch ``G = batch_size x world x
    grad_accum_steps``: ``floor(train_size / G)`` with ``drop_last``, else ``ceil(train_size / G)`` (the last step
    filled up by repeating the epoch's order from its start). It depends on the layout only through ``G``, so a run
    resumed with another device count and the same global batch keeps its length and LR schedule
    (:class:`paddlefit.train.data.ResumableBatchSampler` deals the samples). 0 means ``data.train`` holds less than
    one global batch: the trainer refuses such a job, with or without ``drop_last``.
    """
    g = batch_size * world * grad_accum_steps
    if train_size < g:
        return 0
    return train_size // g if drop_last else math.ceil(train_size / g)


def batches_per_rank(
    train_size: int, batch_size: int, world: int = 1, grad_accum_steps: int = 1, drop_last: bool = True
) -> int:
    """Micro-batches of ``batch_size`` samples each rank's train loader yields per epoch: :func:`steps_per_epoch` x
    ``grad_accum_steps`` (``len()`` of the trainer's sampler)."""
    return steps_per_epoch(train_size, batch_size, world, grad_accum_steps, drop_last) * grad_accum_steps


def job_steps(per_epoch: int, epochs: float | None, max_steps: int | None) -> int | None:
    """Optimizer steps of a run: min(max(1, round(epochs x per_epoch)), max_steps) over the limits that are set
    (the trainer's rule); None when neither is."""
    limits = []
    if epochs is not None:
        limits.append(max(1, round(epochs * per_epoch)))
    if max_steps is not None:
        limits.append(max_steps)
    return min(limits) if limits else None


def total_steps(
    spec: JobSpec, train_size: int | None, batch_size: int | None = None, world: int | None = None
) -> int | None:
    """Optimizer steps the trainer runs for ``spec`` (``epochs``/``max_steps``) over ``train_size`` samples.

    Args:
        spec: the job (``grad_accum_steps``, ``data.drop_last``, ``epochs``, ``max_steps``).
        train_size: samples in ``data.train``; None = unknown (then only ``max_steps`` gives the length).
        batch_size: per-device micro-batch; None = ``spec.batch_size``.
        world: data-parallel devices; None = ``spec.devices``.

    Returns:
        the steps, or None when the length is unknown (neither limit set, or only ``epochs`` without data).

    Raises:
        PaddlefitError: ``data.train`` holds less than one global batch (the trainer's message).
    """
    batch = batch_size if batch_size is not None else spec.batch_size
    world = world if world is not None else spec.devices
    if train_size is None:
        return spec.max_steps
    per_epoch = steps_per_epoch(train_size, batch, world, spec.grad_accum_steps, spec.data.drop_last)
    if per_epoch < 1:
        raise PaddlefitError(
            f"`data.train` has {train_size} samples, fewer than one global batch ({batch} x {world} devices x "
            f"{spec.grad_accum_steps} accumulation); lower `batch_size` or `grad_accum_steps`."
        )
    return job_steps(per_epoch, spec.epochs, spec.max_steps)


def plan_job_length(
    spec: JobSpec, train_size: int | None, batch_size: int, devices: int
) -> tuple[int | None, float | None]:
    """(samples per epoch, epochs) for :class:`~paddlefit.plan.request.PlanRequest` that make the planner's time
    to train cover :func:`total_steps` optimizer steps: that many global batches as one "epoch"; (None, None) when
    the length is unknown."""
    steps = total_steps(spec, train_size, batch_size, devices)
    if steps is None:
        return None, None
    return steps * batch_size * devices * spec.grad_accum_steps, 1.0
