"""Plan a job as the ``plan`` command describes it: options (+ ``--config``) ->
:func:`paddlefit.job.resolve.resolve_job` -> :class:`~paddlefit.plan.request.PlanRequest` ->
:func:`~paddlefit.plan.planner.build_plan`, in one call (:func:`plan_job`); ``cost`` prices it
(:func:`paddlefit.cost.job.cost_job`).

Dataset and model code may print on stdout; a caller that keeps stdout for a ``--json`` result redirects it
around these calls. What the job resolution inferred (inputs and label from ``data.train``) is in ``notes``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from paddlefit.errors import PaddlefitError
from paddlefit.job.resolve import JobOptions, ResolvedJob, resolve_job
from paddlefit.jobspec.spec import OptimizerName, Precision, parse_enum
from paddlefit.plan.planner import build_plan
from paddlefit.plan.request import DEFAULT_SAFETY_MARGIN, MAX_PROBE_MEMORY_BYTES, Plan, PlanRequest
from paddlefit.units import GIB


@dataclass
class JobPlan:
    """:func:`plan_job`'s result: the plan, the resolved job, and notes for the user (one line each)."""

    plan: Plan
    job: ResolvedJob
    notes: list[str] = field(default_factory=list)


def plan_request(job: ResolvedJob, **fields: object) -> PlanRequest:
    """The :class:`PlanRequest` of ``job`` (model, batch, calling fields, optimizer and its settings, precision,
    TF32, attention, devices) plus ``fields``.

    Raises:
        PaddlefitError: a bad ``--optimizer``/``--precision`` value or a field out of range (the request's checks).
    """
    base: dict[str, object] = {
        "model": job.model,
        "batch_size": job.batch_size,
        **job.call_fields(),
        "model_args": job.model_args,
        "optimizer": parse_enum(OptimizerName, job.optimizer, "--optimizer"),
        "precision": parse_enum(Precision, job.precision, "--precision"),
        "devices": job.devices,
        "tf32": job.tf32,
        "attention": job.attention,
        "lr": job.lr,
        "weight_decay": job.weight_decay,
        "lazy_mode": job.lazy_mode,
    }
    return PlanRequest(**{**base, **fields})  # type: ignore[arg-type]


def plan_job(
    options: JobOptions,
    *,
    gpus: Iterable[str] = (),
    dataset_size: int | None = None,
    epochs: float | None = None,
    catalog_files: Iterable[str] = (),
    calibration_files: Iterable[str] = (),
    safety_margin: float = DEFAULT_SAFETY_MARGIN,
    max_probe_gib: float | None = None,
    explain: Iterable[str] = (),
    progress: Callable[[str], None] | None = None,
    cpu_only: bool = False,
    use_runs: bool = True,
    probe_timeout_s: float | None = None,
    probe_memory_gib: float | None = None,
) -> JobPlan:
    """``paddlefit plan`` without the rendering: resolve the job, take its length from the spec when neither
    ``dataset_size`` nor ``epochs`` is given (:meth:`~paddlefit.job.resolve.ResolvedJob.length`, the trainer's steps),
    then :func:`~paddlefit.plan.planner.build_plan`.

    Args:
        options: the model and job options.
        gpus: GPU names (empty = the whole catalog); catalog_files, calibration_files: user files.
        dataset_size, epochs: samples per epoch and epochs, for the time to train.
        safety_margin: fraction of device memory a peak may use; max_probe_gib: probe limit, GiB.
        explain: GPUs whose predicted top kernels the plan lists.
        progress: ``progress(message)`` for long steps.
        cpu_only: the CPU row only (no GPU targets).
        use_runs: correct each device by the run registry's recorded runs (``--no-runs`` turns it off).
        probe_timeout_s, probe_memory_gib: the CPU probe child's limits, seconds and GiB (None = the request's
            defaults: :data:`~paddlefit.plan.request.DEFAULT_PROBE_TIMEOUT_S`, 90% of the available RAM).

    Raises:
        PaddlefitError: see :func:`~paddlefit.job.resolve.resolve_job`, :class:`PlanRequest` and ``build_plan``.
    """
    most = MAX_PROBE_MEMORY_BYTES // GIB  # a GiB figure past it is no limit, and its bytes may not fit an int
    for opt, gib in (("--max-probe-gib", max_probe_gib), ("--probe-memory-gib", probe_memory_gib)):
        if gib is not None and (not math.isfinite(gib) or gib * GIB < 1 or gib > most):
            raise PaddlefitError(f"`{opt}` must be a finite number > 0 and at most {most:,} (got {gib:g}).")
    limits: dict[str, object] = {} if probe_timeout_s is None else {"probe_timeout_s": probe_timeout_s}
    if probe_memory_gib is not None:
        limits["probe_memory_bytes"] = int(probe_memory_gib * GIB)
    job = resolve_job(options)
    if dataset_size is None and epochs is None:
        dataset_size, epochs = job.length()
    req = plan_request(
        job,
        gpus=list(gpus),
        dataset_size=dataset_size,
        epochs=epochs,
        catalog_files=[str(p) for p in catalog_files],
        calibration_files=[str(p) for p in calibration_files],
        safety_margin=safety_margin,
        max_probe_bytes=int(max_probe_gib * GIB) if max_probe_gib is not None else None,
        explain=list(explain),
        cpu_only=cpu_only,
        use_runs=use_runs,
        **limits,
    )
    return JobPlan(build_plan(req, progress=progress), job, list(job.notes))
