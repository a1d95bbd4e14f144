"""Hours and money of a planned job on every priced cloud instance type, on-demand and spot.

Joins a :class:`~paddlefit.plan.planner.Plan` (per-GPU step time and memory, built for one device) with the price
catalog (:mod:`paddlefit.catalog.prices`). Per instance type with ``n`` GPUs of one catalog model:

- fits: the plan's per-GPU peak under data parallel (each GPU holds a full replica, so the single-GPU peak);
- time: the trainer's optimizer steps on n ranks (:func:`paddlefit.job.length.steps_per_epoch`, ``epochs``,
  ``max_steps``), each taking accumulation x the plan's micro-step time + the gradient all-reduce after the
  backward as ``paddlefit train`` runs it, in 128 MiB fused buckets over the instance's GPU interconnect (NVLink when
  all n GPUs share it, else PCIe; NCCL's latency, protocols and NVLS:
  :func:`~paddlefit.estimate.collectives.train_gradient_allreduce`, the function ``plan --devices`` uses);
- checkpoints: ``train`` writes them on-demand and on spot alike, so both count the same writes: one per Daly
  optimal interval of work (:func:`checkpoint_writes_s`, the interval ``train --checkpoint-interval auto`` uses);
- on-demand cost = hours (work + checkpoint writes) x on-demand USD/hour;
- spot expected cost = expected wall time under exponential interruptions x spot USD/hour, where the wall time
  adds to the same work and writes only what interruptions cost: lost work and restarts
  (:func:`expected_spot_wall_s`, which tends to the on-demand hours as interruptions become rare), at the
  instance's own interruption rate (:func:`paddlefit.cost.spot_risk.spot_rate`: the published AWS Spot
  Instance Advisor bucket where there is one, else ``default (no published rate)``), carried by the row.

Every constant used is in :func:`assumptions` and printed with the result.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from paddlefit.catalog.gpus import GPU
from paddlefit.catalog.price_csv import InstancePrice
from paddlefit.catalog.prices import catalog_gpu, gpu_for_instance
from paddlefit.catalog.published import figure
from paddlefit.cost.checkpoint_interval import daly_interval_s, young_interval_s
from paddlefit.cost.spot_risk import (  # noqa: F401 (SPOT_BUCKETS, rate_from_bucket: importable from here too)
    DEFAULT_INTERRUPTIONS_PER_HOUR,
    DEFAULT_SOURCE,
    HOURS_PER_MONTH,
    SPOT_BUCKETS,
    InterruptionRate,
    rate_from_bucket,
    spot_rate,
)
from paddlefit.estimate.collectives import train_gradient_allreduce
from paddlefit.job.length import job_steps, steps_per_epoch
from paddlefit.plan.request import TIE_FACTOR, Plan, Target
from paddlefit.units import MIB, cost_usd, hours

#: Checkpoint write bandwidth, bytes/s: ``checkpoint_disk_mib_s`` of ``catalog/data/published_figures.csv`` (125
#: MiB/s, AWS EBS gp3's baseline throughput); a local NVMe disk is faster, a network bucket often slower. Set with
#: --disk-mib-s.
DEFAULT_DISK_BYTES_PER_S = int(figure("checkpoint_disk_mib_s").value * MIB)
#: Restart time after an interruption: 10 min to get a replacement instance, start the container and load the
#: checkpoint. An assumption, not a measurement (no published figure covers it); set with --restart-minutes.
DEFAULT_RESTART_S = 600.0


def expected_spot_wall_s(work_s: float, interval_s: float, delta_s: float, mtbi_s: float, restart_s: float) -> float:
    """Expected wall time to finish ``work_s`` seconds of training under exponential interruptions.

    The work is cut into segments of ``interval_s`` seconds of work, each followed by a checkpoint write of
    ``delta_s``; an interruption loses the current segment's progress and costs a restart of ``restart_s`` (which
    can itself be interrupted). The expected time of one segment of length L = interval + delta is
    ``M e^(R/M) (e^(L/M) - 1)`` (Daly 2006, FGCS 22(3), the complete model; derivation: E = E[min(X, L)] +
    P(X < L) M (e^((R+L)/M) - 1) with X ~ Exp(M)), so the total is that times work / interval. An interval longer
    than the work is cut to the work (one segment, one final checkpoint). Returns ``inf`` when restart + segment
    exceed 50 mean times between interruptions (a factor e^50 ~ 5e21: it would practically never complete).

    Args:
        work_s, interval_s, delta_s, mtbi_s, restart_s: seconds; all finite, work/interval/mtbi > 0, the rest >= 0.

    Raises:
        ValueError: a non-finite or out-of-range argument.
    """
    vals = (work_s, interval_s, delta_s, mtbi_s, restart_s)
    if (
        not all(math.isfinite(v) for v in vals)
        or work_s <= 0
        or interval_s <= 0
        or mtbi_s <= 0
        or delta_s < 0
        or restart_s < 0
    ):
        raise ValueError(f"expected_spot_wall_s: bad arguments {vals}")
    tau = _segment_s(work_s, interval_s)
    m = mtbi_s
    if (restart_s + tau + delta_s) / m > 50:  # a factor e^50 ~ 5e21 on the work: it practically never finishes
        return math.inf
    return m * math.exp(restart_s / m) * math.expm1((tau + delta_s) / m) * work_s / tau


def _segment_s(work_s: float, interval_s: float) -> float:
    """Seconds of work between two checkpoint writes: the interval, cut to the work when it is longer."""
    return min(interval_s, work_s)


def cadence_interval_s(every_steps: int, every_minutes: float, step_s: float, work_s: float) -> float:
    """Seconds of work between two checkpoint writes under a job spec's fixed cadence: every ``every_steps``
    optimizer steps of ``step_s`` seconds or every ``every_minutes`` minutes, whichever comes first, as
    :class:`paddlefit.train.guards.CheckpointSchedule` writes them (its minutes count wall time; the few seconds of
    writes in them are neglected); ``work_s`` (the final write alone) when both are off (0)."""
    due = [x for x in (every_steps * step_s, every_minutes * 60.0) if x > 0]
    return min(due) if due else work_s


def checkpoint_writes_s(work_s: float, interval_s: float, delta_s: float) -> float:
    """Seconds spent writing checkpoints while training ``work_s`` seconds: one write of ``delta_s`` after every
    ``interval_s`` of work (an interval longer than the work: one, final write), as in
    :func:`expected_spot_wall_s` without interruptions. The same writes on-demand and spot (``train`` writes them
    either way). Seconds in, seconds out; 0 for no work. Raises nothing (``interval_s`` > 0 assumed)."""
    return delta_s * work_s / _segment_s(work_s, interval_s) if work_s > 0 else 0.0


@dataclass
class CostRow:
    """One instance type. Seconds, hours, bytes, USD; spot fields are None when the instance has no spot price.

    ``cost_usd`` / ``cost_hours`` are what the ranking uses: spot expected values with ``use_spot`` when the
    instance has a spot price, else on-demand (``cost_basis`` says which).

    Spot rows carry their interruption rate: ``interruptions_per_hour`` (per instance-hour),
    ``mean_time_between_interruptions_h`` (hours), ``interruption_rate_source`` (the published data set, the option
    given, or ``default (no published rate)``) and ``interruption_rate_basis`` (bucket and conversion, or why the
    default); all None without a spot price.
    """

    cloud: str
    instance_type: str
    region: str
    gpu: str
    gpu_basis: str
    gpu_count: int
    fits: bool
    peak_bytes: int
    capacity_bytes: int
    max_batch_size: int | None
    step_time_s: float
    allreduce_s: float
    interconnect: str
    samples_per_s: float
    hours: float
    on_demand_usd_per_hour: float
    on_demand_usd: float
    spot_usd_per_hour: float | None
    spot_hours: float | None
    spot_expected_usd: float | None
    expected_interruptions: float | None
    checkpoint_write_s: float
    checkpoint_interval_s: float | None
    checkpoint_interval_young_s: float | None
    checkpoint_interval_daly_s: float | None
    cost_usd: float
    cost_hours: float
    cost_basis: str
    source: str
    notes: list[str] = field(default_factory=list)
    cheapest: bool = False
    fastest: bool = False
    pareto: bool = False
    interruptions_per_hour: float | None = None
    mean_time_between_interruptions_h: float | None = None
    interruption_rate_source: str | None = None
    interruption_rate_basis: str | None = None


@dataclass
class CostReport:
    """The result of :func:`build_cost`; ``to_dict()`` is ``paddlefit cost --json``. ``skipped``: one
    ``{cloud, instance_type, accelerator, reason}`` per instance not priced, and (added by
    :func:`paddlefit.cost.job.cost_job`) one ``{gpu, reason}`` per requested GPU no priced instance has."""

    assumptions: dict[str, Any]
    rows: list[CostRow]
    skipped: list[dict[str, str]]
    cheapest: str | None
    fastest: str | None
    pareto: list[str]
    tie_breaks: list[str] = field(default_factory=list)  # what decided cheapest/fastest among ties (1%)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document."""
        return {
            "assumptions": self.assumptions,
            "rows": [asdict(r) for r in self.rows],
            "skipped": self.skipped,
            "cheapest": self.cheapest,
            "fastest": self.fastest,
            "pareto": self.pareto,
            "tie_breaks": self.tie_breaks,
        }


def row_key(row: CostRow) -> str:
    """``cloud/instance_type`` plus ``:<n>x<accelerator>`` where one type carries several GPU options (GCP n1)."""
    return f"{row.cloud}/{row.instance_type}" + (
        f":{row.gpu_count}x{row.gpu}" if row.instance_type.startswith("n1-") else ""
    )


def build_cost(
    plan: Plan,
    prices: list[InstancePrice],
    gpus: list[GPU],
    *,
    dataset_size: int | None,
    epochs: float | None,
    grad_accum_steps: int = 1,
    rate: InterruptionRate | None = None,
    disk_bytes_per_s: float = DEFAULT_DISK_BYTES_PER_S,
    restart_s: float = DEFAULT_RESTART_S,
    use_spot: bool = False,
    price_source: str = "",
    drop_last: bool = False,
    max_steps: int | None = None,
    checkpoint_every: tuple[int, float] | None = None,
) -> CostReport:
    """Time and cost of ``plan``'s job on every instance in ``prices``.

    Args:
        plan: built for one device (``devices=1``) with every GPU the instances use among its targets.
        prices: instance rows (:func:`~paddlefit.catalog.prices.load_prices`).
        gpus: the GPU catalog the plan used (to resolve instance GPUs and their interconnect).
        dataset_size: samples per epoch; epochs: epochs (> 0); both None when ``max_steps`` alone is the length.
        grad_accum_steps: micro-batches per optimizer step (one all-reduce per optimizer step).
        max_steps: the job's ``max_steps`` (the run stops there if it comes first), or None.
        rate: spot interruptions for every instance (a rate the user gave); None = each instance's own
            (:func:`~paddlefit.cost.spot_risk.spot_rate`: published AWS bucket, else
            :data:`DEFAULT_INTERRUPTIONS_PER_HOUR` as ``default (no published rate)``).
        disk_bytes_per_s: checkpoint write bandwidth, bytes/s.
        restart_s: seconds lost per interruption besides the lost work.
        use_spot: rank by spot expected cost where a spot price exists.
        price_source: where the prices came from, for the assumptions.
        drop_last: the trainer's ``data.drop_last`` (an epoch's last partial micro-batch is dropped).
        checkpoint_every: the job spec's (``checkpoint.every_steps``, ``checkpoint.every_minutes``) when it does
            not set ``auto_interval``: the run checkpoints at that cadence (:func:`cadence_interval_s`), on-demand
            and spot; None: at Daly's optimum for each instance's interruption rate (``train
            --checkpoint-interval auto``).

    The optimizer steps on an instance of n GPUs are the trainer's (:func:`paddlefit.job.length.steps_per_epoch` on n
    ranks, :func:`paddlefit.job.length.job_steps`); an instance whose global batch exceeds the data is skipped.

    Returns:
        CostReport with rows sorted: fitting first, then by ranking cost, then hours.

    Raises:
        ValueError: non-positive dataset_size/epochs/grad_accum_steps/max_steps/disk bandwidth, negative restart
            time, or no job length.
    """
    by_epochs = dataset_size is not None and epochs is not None
    if not by_epochs and not (dataset_size is None and epochs is None and max_steps is not None):
        raise ValueError("give dataset_size and epochs, or max_steps")
    if by_epochs and (dataset_size < 1 or not (math.isfinite(epochs) and epochs > 0)):  # type: ignore[operator]
        raise ValueError("dataset_size and epochs must be positive")
    if grad_accum_steps < 1 or (max_steps is not None and max_steps < 1):
        raise ValueError("grad_accum_steps and max_steps must be positive")
    if not (math.isfinite(disk_bytes_per_s) and disk_bytes_per_s > 0) or not (
        math.isfinite(restart_s) and restart_s >= 0
    ):
        raise ValueError("disk_bytes_per_s must be > 0 and restart_s >= 0")
    targets: dict[str, Target] = {t.name: t for t in plan.targets if t.kind == "gpu"}
    b = plan.batch_size
    rows: list[CostRow] = []
    skipped: list[dict[str, str]] = []
    for p in prices:
        ig = gpu_for_instance(p)
        gpu = catalog_gpu(p, gpus)
        if gpu is None:
            skipped.append(
                {
                    "cloud": p.cloud,
                    "instance_type": p.instance_type,
                    "accelerator": p.accelerator,
                    "reason": f"GPU {ig.gpu!r} is not in the GPU catalog (`paddlefit gpus`); add it with "
                    "--catalog to price this instance",
                }
            )
            continue
        t = targets.get(gpu.name)
        if t is None:
            skipped.append(
                {
                    "cloud": p.cloud,
                    "instance_type": p.instance_type,
                    "accelerator": p.accelerator,
                    "reason": f"GPU {gpu.name} was not planned",
                }
            )
            continue
        global_batch = b * p.gpu_count * grad_accum_steps
        steps = max_steps
        if dataset_size is not None:
            per_epoch = steps_per_epoch(dataset_size, b, p.gpu_count, grad_accum_steps, drop_last)
            if per_epoch < 1:
                skipped.append(
                    {
                        "cloud": p.cloud,
                        "instance_type": p.instance_type,
                        "accelerator": p.accelerator,
                        "reason": f"global batch {global_batch} exceeds the {dataset_size} samples"
                        + (" (drop_last)" if drop_last else ""),
                    }
                )
                continue
            steps = job_steps(per_epoch, epochs, max_steps)
        rows.append(
            _row(
                p,
                ig.basis,
                gpu,
                t,
                b,
                steps,
                grad_accum_steps,
                rate,
                disk_bytes_per_s,  # type: ignore
                restart_s,
                use_spot,
                checkpoint_every,
            )
        )
    fit = [r for r in rows if r.fits]
    ties: list[str] = []
    cheapest = tie_to_headroom(fit, lambda r: r.cost_usd, "cheapest", ties)
    fastest = tie_to_headroom(fit, lambda r: r.cost_hours, "fastest", ties)
    rows.sort(key=lambda r: (not r.fits, r is not cheapest, r.cost_usd, r.cost_hours))
    front = [r for r in fit if not any(_dominates(o, r) for o in fit)]
    for r in front:
        r.pareto = True
    if cheapest:
        cheapest.cheapest = True
    if fastest:
        fastest.fastest = True
    doc = assumptions(
        plan,
        rate,
        disk_bytes_per_s,
        restart_s,
        use_spot,
        dataset_size,
        epochs,
        grad_accum_steps,
        price_source,
        max_steps,
        checkpoint_every,
    )
    return CostReport(
        assumptions=doc,
        rows=rows,
        skipped=skipped,
        cheapest=row_key(cheapest) if cheapest else None,
        fastest=row_key(fastest) if fastest else None,
        pareto=[row_key(r) for r in front],
        tie_breaks=ties,
    )


def tie_to_headroom(
    fit: list[CostRow], value: Callable[[CostRow], float], what: str, said: list[str]
) -> CostRow | None:
    """The row with the lowest ``value`` (USD or hours), except that rows within 1% of it (:data:`TIE_FACTOR`) tie
    and the tie goes to headroom: fewer GPUs, then more free memory per GPU (capacity - peak, bytes), then the lower
    value. Appends to ``said`` what the tie-break decided when it chose another row than the lowest value."""
    if not fit:
        return None
    low = min(fit, key=lambda r: (value(r), r.gpu_count))
    ties = [r for r in fit if value(r) <= value(low) * TIE_FACTOR] or [low]  # NaN: no tie
    best = min(ties, key=lambda r: (r.gpu_count, r.peak_bytes - r.capacity_bytes, value(r)))
    if best is not low:
        why = "fewer GPUs" if best.gpu_count < low.gpu_count else "more free memory per GPU"
        said.append(
            f"{what}: {len(ties)} instances within 1% of the lowest {'cost' if what == 'cheapest' else 'time'}"
            f" tie; the tie goes to headroom (fewer GPUs, then more free memory per GPU): {row_key(best)} "
            f"({why}) over {row_key(low)}" + (f" ({1 - value(low) / value(best):.2%} lower)" if value(best) > 0 else "")
        )
    return best


def _dominates(o: CostRow, r: CostRow) -> bool:
    """``o`` is at least as fast and as cheap as ``r`` and strictly better in one."""
    return (
        o.cost_hours <= r.cost_hours
        and o.cost_usd <= r.cost_usd
        and (o.cost_hours < r.cost_hours or o.cost_usd < r.cost_usd)
    )


#: The plan row notes a cost row repeats (what the GPU's specs and its time rest on): the spec source, AMP that
#: Paddle turns off, an XPU's uncalibrated speed, a tensor peak the catalog lacks (:meth:`GPU.missing_peak`).
COST_NOTES = ("specs ", "fp16 AMP", "bf16 AMP", "uncalibrated:", "no fp16 peak", "no bf16 peak", "no TF32 peak")


def _row(
    p: InstancePrice,
    basis: str,
    gpu: GPU,
    t: Target,
    b: int,
    steps: int,
    accum: int,
    override: InterruptionRate | None,
    disk_bps: float,
    restart_s: float,
    use_spot: bool,
    every: tuple[int, float] | None = None,
) -> CostRow:
    n = p.gpu_count
    train_ar = train_gradient_allreduce(gpu, t.grads_bytes, n)  # the figure `plan --devices n` charges
    ar, link = train_ar.seconds, train_ar.link
    micro = t.step_time_s - t.allreduce_exposed_s  # the plan's one-device step
    step = accum * micro + ar  # paddlefit train (oom_backoff: true) all-reduces after the backward
    work_s = steps * step
    delta = t.checkpoint_bytes / disk_bps
    notes = list(p.notes) + [
        f"GPU {n} (not checked against the datasheet)" if n.startswith("specs ") else n
        for n in t.notes
        if n.startswith(COST_NOTES)
    ]
    if basis and ("assumed" in basis or "column" in basis):
        notes.append(basis.split(" (")[0])
    spot_hours = spot_usd = interruptions = rate = None
    m = spot_rate(p, override).mtbi_s  # the interval the run checkpoints at, on-demand or spot
    daly, young = daly_interval_s(max(delta, 1e-9), m), young_interval_s(max(delta, 1e-9), m)
    interval = daly if every is None else cadence_interval_s(*every, step, work_s)
    if p.spot_usd_per_hour is not None and work_s > 0:
        rate = spot_rate(p, override)
        if rate.label:
            notes.append(f"spot interruptions: {rate.label}, mean {rate.mtbi_h:,.0f} h between them")
        wall = expected_spot_wall_s(work_s, interval, delta, m, restart_s)
        if math.isfinite(wall):
            spot_hours = hours(wall)
            spot_usd = cost_usd(wall, p.spot_usd_per_hour)
            interruptions = wall / m
        else:
            notes.append("spot: would practically never finish at this interruption rate")
    wall_s = work_s + checkpoint_writes_s(work_s, interval, delta)
    on_demand_h, on_demand = hours(wall_s), cost_usd(wall_s, p.on_demand_usd_per_hour)
    by_spot = use_spot and spot_usd is not None
    if use_spot and spot_usd is None:
        notes.append("priced on-demand" if p.spot_usd_per_hour is not None else "no spot price: on-demand")
    return CostRow(
        cloud=p.cloud,
        instance_type=p.instance_type,
        region=p.region,
        gpu=gpu.name,
        gpu_basis=basis,
        gpu_count=n,
        fits=t.fits,
        peak_bytes=t.peak_bytes,
        capacity_bytes=t.capacity_bytes,
        max_batch_size=t.max_batch_size,
        step_time_s=step,
        allreduce_s=ar,
        interconnect=link if n > 1 else "-",
        samples_per_s=b * n * accum / step,
        hours=on_demand_h,
        on_demand_usd_per_hour=p.on_demand_usd_per_hour,
        on_demand_usd=on_demand,
        spot_usd_per_hour=p.spot_usd_per_hour,
        spot_hours=spot_hours,
        spot_expected_usd=spot_usd,
        expected_interruptions=interruptions,
        checkpoint_write_s=delta,
        checkpoint_interval_s=interval,
        checkpoint_interval_young_s=young,
        checkpoint_interval_daly_s=daly,
        cost_usd=spot_usd if by_spot else on_demand,  # type: ignore[arg-type]
        cost_hours=spot_hours if by_spot else on_demand_h,  # type: ignore[arg-type]
        cost_basis="spot (expected)" if by_spot else "on-demand",
        source=p.source,
        notes=notes,
        interruptions_per_hour=rate.per_hour if rate else None,
        mean_time_between_interruptions_h=rate.mtbi_h if rate else None,
        interruption_rate_source=rate.source if rate else None,
        interruption_rate_basis=rate.basis if rate else None,
    )


#: How the assumptions' ``checkpoint_interval`` starts when the job spec's cadence is used (the cost table's legend
#: reads it).
SPEC_CADENCE = "the job spec's checkpoint cadence"


def _cadence_text(every: tuple[int, float] | None) -> str:
    """What ``checkpoint_interval_s`` is, for the assumptions."""
    if every is None:
        return (
            "Daly (2006) higher-order optimum for each instance's interruption rate, used (as `train "
            "--checkpoint-interval auto` writes); Young (1974) shown beside it"
        )
    due = [
        f"every {every[0]:,} optimizer steps" if every[0] > 0 else "",
        f"every {every[1]:g} minutes" if every[1] > 0 else "",
    ]
    said = " or ".join(d for d in due if d) or "at the end only"
    return (
        f"{SPEC_CADENCE}, used: {said}, whichever comes first (as train writes them); the "
        "Daly (2006) optimum is each row's own (`checkpoint_interval_daly_s` in --json; `checkpoint: "
        "{auto_interval: true}` or `train --checkpoint-interval auto` writes at it), Young (1974) beside it"
    )


def assumptions(
    plan: Plan,
    rate: InterruptionRate | None,
    disk_bps: float,
    restart_s: float,
    use_spot: bool,
    dataset_size: int | None,
    epochs: float | None,
    accum: int,
    price_source: str,
    max_steps: int | None = None,
    every: tuple[int, float] | None = None,
) -> dict[str, Any]:
    """Every assumption behind the numbers, as printed with the result (``every``: as ``build_cost``'s
    ``checkpoint_every``).

    ``rate`` is the rate the user gave for every instance, or None (each spot row's own rate: the
    ``interruption_*`` fields of :class:`CostRow`); ``interruptions_per_hour`` /
    ``mean_time_between_interruptions_h`` are then the default of rows with no published rate.
    """
    shown = rate or InterruptionRate(DEFAULT_INTERRUPTIONS_PER_HOUR, "", DEFAULT_SOURCE)
    policy = (
        f"every instance: {rate.basis}"
        if rate
        else "per instance (each spot row's interruption_rate_source): the AWS Spot Instance Advisor bucket of its "
        "region and type where published (share of instances reclaimed per month f, upper edge; "
        f"r = -ln(1 - f) / {HOURS_PER_MONTH:g} h), else {DEFAULT_SOURCE}: one per 24 h (an assumption; "
        "no other cloud publishes a rate this package can ship; set --interruptions-per-hour or "
        "--spot-bucket)"
    )
    length = f"{dataset_size:,} samples x {epochs:g} epochs" if dataset_size is not None and epochs is not None else ""
    if max_steps is not None:
        length += (", at most " if length else "") + f"{max_steps:,} optimizer steps (max_steps)"
    return {
        "job": f"{plan.model['name']}, micro-batch {plan.batch_size} per GPU, {plan.precision}, {plan.optimizer}, "
        f"{length}; loss: {plan.model.get('loss')}",
        "global_batch": f"micro-batch x GPUs in the instance x {accum} accumulation (it changes with the instance)",
        "step_time": "plan's per-GPU step (per-operator model, published-fit unless a calibration was given) + the "
        "gradient all-reduce per optimizer step in 128 MiB fused buckets, not overlapped (paddlefit "
        "train's default oom_backoff: true all-reduces after the backward; NCCL model of "
        "paddlefit.estimate.collectives: latency per bucket, protocols, ring ceiling, NVLS)",
        "tf32": plan.assumptions.get("tf32"),
        "tf32_means": plan.assumptions.get("tf32_means"),
        "gpu_model_params": plan.assumptions.get("gpu_model_params"),
        "gpu_model_params_by_generation": plan.assumptions.get("gpu_model_params_by_generation"),
        "memory": "data parallel: every GPU holds a full replica, so the per-GPU peak is the one-GPU plan's",
        "prices": price_source,
        "ranking": "spot expected cost where a spot price exists, else on-demand" if use_spot else "on-demand cost",
        "interruptions_per_hour": shown.per_hour,
        "interruption_rate_basis": policy,
        "interruption_rate_source": rate.source if rate else "per instance",
        "mean_time_between_interruptions_h": shown.mtbi_h,
        "checkpoint_bytes": "weights + optimizer states (fp32 master weights under O2) of one replica",
        "disk_bytes_per_s": disk_bps,
        "disk_basis": "AWS EBS gp3 baseline throughput; set --disk-mib-s"
        if disk_bps == DEFAULT_DISK_BYTES_PER_S
        else "--disk-mib-s",
        "restart_s": restart_s,
        "restart_basis": (
            "an assumption: new instance + container start + checkpoint load; set --restart-minutes"
            if restart_s == DEFAULT_RESTART_S
            else "--restart-minutes"
        ),
        "checkpoint_interval": _cadence_text(every),
        "checkpoint_writes": "on-demand and spot hours both include one checkpoint write per checkpoint interval of "
        "work (train writes them either way); spot adds only lost work and restarts",
        "spot_model": "exponential interruptions; an interruption loses the work since the last checkpoint and "
        "costs a restart (Daly 2006 complete model)",
        "not_included": "storage, egress, data download, instance start-up before training, evaluation time",
    }
