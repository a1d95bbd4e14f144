"""Plan and cost a job as the commands describe it: options (+ ``--config``) -> :func:`paddlefit.job.resolve_job`
-> :class:`~paddlefit.plan.request.PlanRequest` -> :func:`~paddlefit.plan.planner.build_plan` (-> prices ->
:func:`~paddlefit.plan.cost.build_cost`). One call per command: :func:`plan_job`, :func:`cost_job`.

Dataset and model code may print on stdout; a caller that keeps stdout for a ``--json`` result redirects it
around these calls. What the job resolution inferred (inputs and label from ``data.train``) is in ``notes``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from paddlefit.catalog.gpus import load_gpus
from paddlefit.catalog.prices import catalog_gpu, check_price_gpus, rows_with_gpus, select_prices, unpriced_gpus
from paddlefit.catalog.skypilot import SKYPILOT_CACHE
from paddlefit.errors import PaddlefitError
from paddlefit.job import JobOptions, ResolvedJob, resolve_job
from paddlefit.plan.cost import CostReport, build_cost
from paddlefit.plan.cost_request import CostRequest
from paddlefit.plan.planner import build_plan
from paddlefit.plan.request import DEFAULT_SAFETY_MARGIN, Plan, PlanRequest, check_job_length
from paddlefit.spec import OptimizerName, Precision, parse_enum
from paddlefit.units import GIB


@dataclass
class JobPlan:
    """:func:`plan_job`'s result: the plan, the resolved job, and notes for the user (one line each)."""

    plan: Plan
    job: ResolvedJob
    notes: list[str] = field(default_factory=list)


@dataclass
class JobCost:
    """:func:`cost_job`'s result: the cost report, the plan it rests on, the resolved job, and notes."""

    report: CostReport
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
    ``dataset_size`` nor ``epochs`` is given (:meth:`~paddlefit.job.ResolvedJob.length`, the trainer's steps),
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
        PaddlefitError: see :func:`~paddlefit.job.resolve_job`, :class:`PlanRequest` and ``build_plan``.
    """
    for opt, gib in (("--max-probe-gib", max_probe_gib), ("--probe-memory-gib", probe_memory_gib)):
        if gib is not None and (not math.isfinite(gib) or gib * GIB < 1):
            raise PaddlefitError(f"`{opt}` must be a finite number > 0 (got {gib}).")
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


def cost_job(options: JobOptions, request: CostRequest, progress: Callable[[str], None] | None = None) -> JobCost:
    """``paddlefit cost`` without the rendering: prices first (a bad price file fails before the model is built),
    then the job and its length (the options', else the spec's ``data.train``, ``epochs`` and ``max_steps``), a
    one-device plan of every GPU the instances have, and :func:`~paddlefit.plan.cost.build_cost`.

    Raises:
        PaddlefitError: a bad price or catalog file, a ``--gpu`` no instance has, no job length, and see
            :func:`plan_job`.
    """
    gpus_all = load_gpus(request.catalog_files)
    rows, source = select_prices(
        request.price_files,
        region=request.region,
        clouds=list(request.clouds),
        skypilot_root=None if request.shipped_prices else SKYPILOT_CACHE,
        rates=request.rates(),
    )
    unpriced = unpriced_gpus(rows, request.gpus, gpus_all)  # said in the report, not dropped silently
    if request.gpus:
        rows = rows_with_gpus(rows, request.gpus, gpus_all)
    check_price_gpus(rows, gpus_all)
    # one-device plan: the instances set the data-parallel degree
    job = resolve_job(options.model_copy(update={"devices": 1}))
    spec = job.spec if job.own_job else None
    accum = spec.grad_accum_steps if spec else 1
    drop_last = bool(spec and spec.data.drop_last)
    dataset_size, epochs, max_steps = request.dataset_size, request.epochs, None
    if dataset_size is None and epochs is None and spec is not None:
        if job.train_size and spec.epochs:
            dataset_size, epochs = job.train_size, float(spec.epochs)
        max_steps = spec.max_steps
    if (dataset_size is None) != (epochs is None) or (dataset_size is None and max_steps is None):
        from paddlefit.models.zoo import resolve_model

        job.call_fields()  # a bad `--input` or model name is said first: one fix at a time, the first one first
        resolve_model(job.model, job.model_args)
        if job.spec is not None and not job.own_job:
            raise PaddlefitError(
                f"MODEL {job.model} is not the spec's model ({job.spec.model}), so the spec's data "
                "and epochs do not apply: give `--dataset-size N --epochs E`."
            )
        raise PaddlefitError(
            "Give the job length: `--dataset-size N --epochs E` (or a --config whose data.train and "
            "epochs/max_steps give it)."
        )
    if dataset_size is not None:
        check_job_length(dataset_size, epochs)  # type: ignore[arg-type]
    needed = sorted({g.name for r in rows if (g := catalog_gpu(r, gpus_all)) is not None})
    req = plan_request(
        job,
        gpus=needed,
        devices=1,
        catalog_files=list(request.catalog_files),
        calibration_files=list(request.calibration_files),
        safety_margin=request.safety_margin,
        use_runs=request.use_runs,
    )
    plan = build_plan(req, progress=progress)
    ck = spec.checkpoint if spec else None
    every = None if ck is None or ck.auto_interval else (ck.every_steps, ck.every_minutes)
    report = build_cost(
        plan,
        rows,
        gpus_all,
        dataset_size=dataset_size,
        epochs=epochs,
        grad_accum_steps=accum,
        rate=request.rate(),
        use_spot=request.spot,
        price_source=source,
        drop_last=drop_last,
        max_steps=max_steps,
        checkpoint_every=every,
        **request.cost_overrides(),
    )
    report.skipped[:0] = unpriced
    return JobCost(report, plan, job, list(job.notes))
