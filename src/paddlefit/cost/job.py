"""Cost a job as the ``cost`` command describes it: prices first, then the job and its length, a one-device plan
(:func:`paddlefit.plan.jobs.plan_request`, :func:`~paddlefit.plan.planner.build_plan`) of every GPU the instances
have, and :func:`~paddlefit.cost.instances.build_cost`, in one call (:func:`cost_job`).

Dataset and model code may print on stdout; a caller that keeps stdout for a ``--json`` result redirects it
around this call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from paddlefit.catalog.gpus import load_gpus
from paddlefit.catalog.prices import catalog_gpu, check_price_gpus, rows_with_gpus, select_prices, unpriced_gpus
from paddlefit.catalog.skypilot import SKYPILOT_CACHE
from paddlefit.cost.instances import CostReport, build_cost
from paddlefit.cost.request import CostRequest
from paddlefit.errors import PaddlefitError
from paddlefit.job.resolve import JobOptions, ResolvedJob, resolve_job
from paddlefit.plan.jobs import plan_request
from paddlefit.plan.planner import build_plan
from paddlefit.plan.request import Plan, check_job_length


@dataclass
class JobCost:
    """:func:`cost_job`'s result: the cost report, the plan it rests on, the resolved job, and notes."""

    report: CostReport
    plan: Plan
    job: ResolvedJob
    notes: list[str] = field(default_factory=list)


def cost_job(options: JobOptions, request: CostRequest, progress: Callable[[str], None] | None = None) -> JobCost:
    """``paddlefit cost`` without the rendering: prices first (a bad price file fails before the model is built),
    then the job and its length (the options', else the spec's ``data.train``, ``epochs`` and ``max_steps``), a
    one-device plan of every GPU the instances have, and :func:`~paddlefit.cost.instances.build_cost`.

    Raises:
        PaddlefitError: a bad price or catalog file, no row with a catalog GPU, a ``--gpu`` no instance has, no
            job length, and see
            :func:`paddlefit.plan.jobs.plan_job`.
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
    if not needed:  # an empty table is no answer: say why before the model is planned
        names = ", ".join(sorted({f"{r.cloud} {r.instance_type} ({r.gpu or r.accelerator})" for r in rows})[:3])
        raise PaddlefitError(
            f"No instance can be priced: none of the {len(rows)} price row(s) names a GPU of the catalog ({names}). "
            "Name a catalog GPU (`paddlefit gpus`) in the price file's `gpu` column, or add the GPU with `--catalog`."
        )
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
