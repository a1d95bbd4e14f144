"""The rows of a plan: one :class:`~paddlefit.plan.request.Target` per device from a
:class:`~paddlefit.plan.measure.ModelMeasure`, their time breakdown, and the recommendation.

GPU adjustments to the CPU-probe peak: model states for the precision, activations x the AMP ratio
(:func:`amp_activation_memory`), + the cuDNN conv workspace (:data:`CONV_WORKSPACE_BYTES`) for models with
convolutions; capacity minus the CUDA context (:data:`CUDA_CONTEXT_BYTES`). Time: the per-operator model
(:mod:`paddlefit.estimate.gpu_model`), never below the host floor, + the all-reduce the backward does not hide.
"""

from __future__ import annotations

import math
import os
from dataclasses import replace
from typing import Any

from paddlefit.catalog.gpus import GPU, XPU_UNCALIBRATED
from paddlefit.estimate.amp import saved_activation_bytes
from paddlefit.estimate.collectives import dataparallel_gradient_allreduce, train_gradient_allreduce
from paddlefit.estimate.gpu_model import (
    StepEstimate,
    dp_exposed_allreduce_s,
    estimate_step,
)
from paddlefit.estimate.model_states import model_state_bytes
from paddlefit.estimate.optrace import OpTrace
from paddlefit.estimate.perf_params import PerfParams, kernel_fit_architectures
from paddlefit.jobspec.spec import Precision
from paddlefit.plan.calibration import Calibration
from paddlefit.plan.document import Recommendation
from paddlefit.plan.measure import ModelMeasure
from paddlefit.plan.request import TIE_FACTOR, PlanRequest, Target
from paddlefit.process.mklpath import mkl_path_note
from paddlefit.units import GIB, MIB, capacity_gib

#: cuDNN conv workspace limit, ``FLAGS_conv_workspace_size_limit`` = 512 MiB (Paddle ``paddle/phi/core/flags.cc``
#: default), added for models with convolutions (an upper bound).
CONV_WORKSPACE_BYTES = 512 * MIB
#: CUDA context and kernel images, 1.3 GB (Hugging Face "Model training anatomy" docs, BERT-large on V100:
#: nvidia-smi total minus allocator; a PyTorch figure, replaced by a calibration).
CUDA_CONTEXT_BYTES = int(1.3e9)


def max_batch(phases: list[tuple[float, float]], limit: float) -> int | None:
    """Largest integer b >= 0 with fixed + per_sample * b <= limit for every (fixed, per_sample) phase;
    None if no phase grows with the batch and all fit."""
    best: float = math.inf
    for fixed, slope in phases:
        if fixed > limit:
            return 0
        if slope > 0:
            best = min(best, (limit - fixed) / slope)
    return None if best == math.inf else math.floor(best)


def amp_activation_memory(
    trace: OpTrace, precision: Precision, gpu_trace: OpTrace | None = None
) -> tuple[float, float]:
    """(activation ratio, cast-weight bytes) of ``precision`` against fp32 for the traced model.

    The ratio is the per-sample growth of the bytes the forward keeps for the backward at the AMP dtypes
    (:func:`~paddlefit.estimate.amp.saved_activation_bytes`) over the same growth in fp32; the cast-weight
    bytes are O1's half copies of white-list weights (fixed). ``gpu_trace``: the trace as the GPU runs it when it
    differs from the probed one (flash attention, :func:`~paddlefit.estimate.fused.flash_trace`: no S x S
    probabilities kept); the numerator is then its bytes, the denominator the probed trace's fp32 bytes (what the
    probe measured). fp32 without ``gpu_trace``: (1.0, 0.0).
    """
    if not precision.is_amp and gpu_trace is None:
        return 1.0, 0.0
    run = gpu_trace or trace
    a1, cast = saved_activation_bytes(run.at(1), precision.value)
    a2, _ = saved_activation_bytes(run.at(2), precision.value)
    f1, _ = saved_activation_bytes(trace.at(1), "fp32")
    f2, _ = saved_activation_bytes(trace.at(2), "fp32")
    if f2 - f1 > 0:
        return (a2 - a1) / (f2 - f1), cast
    return (a1 / f1 if f1 > 0 else 1.0), cast


def effective_precision(gpu: GPU, precision: Precision) -> Precision:
    """The precision Paddle really trains in on ``gpu``: fp32 where ``paddle.amp.auto_cast`` disables AMP on it
    (:meth:`GPU.amp_blocked`, the rule in :data:`paddlefit.catalog.units.AMP_MIN_CC`), else ``precision``."""
    if gpu.amp_blocked(precision.value):
        return Precision.FP32
    return precision


def gpu_notes(gpu: GPU, asked: Precision, prec: Precision, unit: str, tf32: bool = True) -> list[str]:
    """Short per-row notes; the long form of each is in the README ("Notes in plan rows").

    ``unit``: the unit :meth:`GPU.peak_flops` picked (``fp32`` when the catalog has no tensor peak for the
    precision: the row is then timed at the FP32 peak, slower than the card is); ``tf32``: Paddle's TF32 switch.
    """
    notes = []
    if prec is not asked:
        notes.append(gpu.amp_blocked(asked.value) or f"{asked.value} runs as {prec.value}")
    if gpu.is_xpu:
        notes.append(XPU_UNCALIBRATED)
    missing = gpu.missing_peak(prec.value, tf32)
    if missing:
        notes.append(missing)
    if prec is Precision.FP32 and unit.startswith("tf32"):
        notes.append("fp32 runs as TF32")
    elif prec is Precision.FP32 and gpu.tf32_tflops:  # a TF32 GPU whose fp32 peak is the CUDA cores': tf32 off
        notes.append("TF32 off: fp32 on CUDA cores")
    if not gpu.is_xpu and (gpu.compute_capability or 0) < 7.5:
        notes.append("no CUDA 13 build (Volta): use cu126/cu129")
    if gpu.verified != "datasheet":
        notes.append(f"specs {gpu.verified}")
    return notes


class AmpMemory:
    """:func:`amp_activation_memory` of one trace (and the GPU's version of it, ``gpu_trace``), computed once per
    precision (the GPU rows share it)."""

    def __init__(self, trace: OpTrace, gpu_trace: OpTrace | None = None) -> None:
        self.trace = trace
        self.gpu_trace = gpu_trace
        self.cache: dict[Precision, tuple[float, float]] = {}

    def __call__(self, precision: Precision) -> tuple[float, float]:
        """(activation ratio, cast-weight bytes) of ``precision``."""
        if precision not in self.cache:
            self.cache[precision] = amp_activation_memory(self.trace, precision, self.gpu_trace)
        return self.cache[precision]


def flash_runs(gpu: GPU, precision: Precision) -> str | None:
    """Why ``attention: flash`` cannot run on ``gpu`` at ``precision`` (the row note), or None when it runs:
    FlashAttention-2 needs compute capability 8.0+ (Dao 2023, arXiv 2307.08691; Paddle's ``can_use_flash_attention``
    checks SM 8.0-12.1, ``python/paddle/nn/functional/sdpa.py``; no XPU kernel is modelled: :meth:`GPU.flash_blocked`)
    and fp16/bf16 tensors (its ``check_dtypes_low_precision_fa``); the row is then planned with eager attention, as
    the parallel planner does."""
    blocked = gpu.flash_blocked()
    if blocked:
        return blocked
    if not precision.is_amp:
        return "FlashAttention-2 needs fp16/bf16: eager attention in fp32"
    return None


def phases_for(req: PlanRequest, m: ModelMeasure, precision: Precision, amp: AmpMemory) -> list[tuple[float, float]]:
    """Probe lines re-based on the precision's model states, activations x its AMP ratio, + O1's weight copies in
    the forward and backward phases. (fixed bytes, bytes per sample) per segment."""
    st = model_state_bytes(m.info, req.optimizer, precision).total_bytes
    f, cast = amp(precision)
    return [
        (st + f * (fx - m.states32.total_bytes) + (cast if p != "optimizer_step" else 0.0), f * sl)
        for p, (fx, sl) in m.phase_lines_bytes
    ]


def cpu_fixed_bytes(m: ModelMeasure, batch: int) -> float:
    """The CPU peak at ``batch`` minus model states and activations: workspace and temporaries, bytes (so the
    memory breakdown adds up to the peak)."""
    cpu_peak = max(fx + sl * batch for _, (fx, sl) in m.phase_lines_bytes)
    return cpu_peak - m.states32.total_bytes - m.act_bytes_per_sample * batch


#: a CPU step the probe's time fit puts under this (seconds) is no measurement: the fit of a loaded machine's noisy
#: times reached zero ("64,000,000,000 samples/s" on the CPU row of a plan made under load)
MIN_CPU_STEP_S = 1e-6


def cpu_step_s(cpu_time: tuple[float, float] | None, batch: int) -> float:
    """The CPU step at ``batch`` from the probe's time fit ``cpu_time`` (fixed s, s per sample), seconds; NaN
    without a probe or when the fit puts it under :data:`MIN_CPU_STEP_S`."""
    if cpu_time is None:
        return float("nan")
    step = cpu_time[0] + cpu_time[1] * batch
    return step if step >= MIN_CPU_STEP_S else float("nan")


def machine_busy() -> str:
    """``load average X on N cores`` when the 1-minute load average (``os.getloadavg``) exceeds the core count (other
    work shares the cores the CPU probe timed), else ``""``."""
    try:
        load, cores = os.getloadavg()[0], os.cpu_count() or 1
    except OSError:  # not available on this platform
        return ""
    return f"load average {load:.1f} on {cores} cores" if load > cores else ""


def cpu_target(req: PlanRequest, m: ModelMeasure) -> Target:
    """The CPU row (fp32: AMP has no effect on CPU); its time is the probe's, measured here."""
    b = req.batch_size
    lines = [seg for _, seg in m.phase_lines_bytes]
    total_ram, probe, states32 = m.total_ram_bytes, m.probe, m.states32
    cpu_cap = int(total_ram)
    cpu_peak = max(fx + sl * b for fx, sl in lines)
    cpu_notes = [f"{os.cpu_count()} cores, {capacity_gib(total_ram)} GiB RAM"]
    if m.stand_ins:  # the probe's memory and time are those of the stand-ins (probe/fused_ref.py)
        cpu_notes.append(
            f"Paddle cannot run {', '.join(m.stand_ins)} on a CPU (no CPU kernel or backward): `train` "
            "cannot run this model here; the row is the probe's CPU stand-ins for them"
        )
    if req.precision.is_amp:
        cpu_notes.append("AMP has no effect on CPU: fp32 planned")
    if req.devices > 1:
        cpu_notes.append("one CPU process; --devices applies to GPUs")
    if m.method == "cpu-probe":
        cpu_notes.append(f"{probe.threads} Paddle CPU thread(s)" + ("" if req.cpu_threads else " (all cores)"))
        mkl = mkl_path_note()
        if mkl:
            cpu_notes.append(mkl)
        busy = machine_busy()
        if busy:
            cpu_notes.append(
                f"measured while the machine was busy ({busy}): the CPU row is slower than this machine "
                "is idle; rerun `plan` on an idle machine for its time"
            )
        ts = probe.thread_step_s
        if ts:
            best = min(ts, key=ts.__getitem__)
            if probe.threads in ts and ts[probe.threads] > 1.10 * ts[best]:
                said = f"measured at batch {max(req.probe_batch_sizes)}: " + ", ".join(
                    f"{n} thread(s) {v * 1e3:,.0f} ms" for n, v in sorted(ts.items())
                )
                cpu_notes.append(
                    said
                    + (
                        "; under load, so no advice on `cpu_threads`"
                        if busy
                        else f"; set `cpu_threads: {best}` ({ts[probe.threads] / ts[best]:.2f}x faster)"
                    )
                )
    cpu_step = cpu_step_s(m.cpu_time_line_s, b)
    cpu_calibrated = cpu_step == cpu_step
    if m.cpu_time_line_s is None:
        cpu_notes.append("no probe: CPU step time not measured")
    elif not cpu_calibrated:
        cpu_notes.append(
            f"CPU step time not measured: the probe's step times (taken under this machine's load) fit "
            f"a line that reaches zero at batch {b}; rerun `plan` on an idle machine"
        )
    return Target(
        name="cpu",
        kind="cpu",
        fits=cpu_peak <= req.safety_margin * cpu_cap,
        peak_bytes=int(cpu_peak),
        capacity_bytes=cpu_cap,
        max_batch_size=max_batch(lines, req.safety_margin * cpu_cap),
        step_time_s=cpu_step,
        samples_per_s=b / cpu_step if cpu_step == cpu_step else float("nan"),
        calibrated=cpu_calibrated,
        notes=tuple(cpu_notes),
        bound=None,
        grads_bytes=states32.grads_bytes,
        checkpoint_bytes=states32.weights_bytes + states32.optimizer_bytes,
        calibration="device" if cpu_calibrated else "none",
    )


def row_params(cal: Calibration | None, published: PerfParams) -> PerfParams:
    """The GPU model's parameters a row uses: the device's own (``paddlefit calibrate``'s kernel timings) when its
    calibration has them, else the published fit."""
    return cal.perf_params if cal and cal.perf_params is not None else published


def gpu_target(
    req: PlanRequest,
    m: ModelMeasure,
    gpu: GPU,
    cal: Calibration | None,
    published: PerfParams,
    host_s: float,
    amp: AmpMemory,
    ops_b: Any,
) -> tuple[Target, StepEstimate]:
    """One GPU row: memory rebased on the precision Paddle runs there, the per-operator step time (calibrated when
    ``cal`` has kernel timings, else ``published``), never below ``host_s``, + the exposed all-reduce; and the
    step estimate (for ``--explain``)."""
    b, info = req.batch_size, m.info
    prec = effective_precision(gpu, req.precision)
    g_states = model_state_bytes(info, req.optimizer, prec)
    ph = phases_for(req, m, prec, amp)
    if m.has_conv:
        ph = [(fx + CONV_WORKSPACE_BYTES, sl) for fx, sl in ph]
    ratio = cal.memory_ratio if cal else 1.0
    ph = [(fx * ratio, sl * ratio) for fx, sl in ph]
    context = cal.cuda_context_bytes if cal and cal.cuda_context_bytes else CUDA_CONTEXT_BYTES
    cap = gpu.capacity_bytes
    usable = req.safety_margin * (cap - context)
    peak = max(fx + sl * b for fx, sl in ph)
    peak_flops, unit = gpu.peak_flops(prec.value, req.tf32)
    params = row_params(cal, published)
    est = estimate_step(
        ops_b, prec.value, gpu, req.optimizer.value, info.trainable_params, info.trainable_tensors, params, req.tf32
    )
    train_ar = train_gradient_allreduce(gpu, g_states.grads_bytes, req.devices)
    ar = train_ar.seconds
    # paddlefit train (its default oom_backoff: true) all-reduces after the backward, as `cost` prices it; plain
    # DataParallel would hide all but ar_dp
    dp_ar = dataparallel_gradient_allreduce(gpu, g_states.grads_bytes, req.devices)
    ar_dp = dp_exposed_allreduce_s(dp_ar, est.by_phase.get("backward", 0.0))
    step = max(est.device_s, host_s) + ar
    bound, notes = _bound_and_notes(req, gpu, prec, unit, est, host_s, cal, params)
    if req.devices > 1:
        notes.append(
            f"all-reduce {ar * 1e3:.1f} ms over {train_ar.link} ({train_ar.buckets} x <= 128 MiB, "
            f"{train_ar.algorithm}) after the backward, as paddlefit train runs it (oom_backoff: true); "
            f"DataParallel's overlap (oom_backoff: false) leaves {ar_dp * 1e3:.1f} ms"
        )
    breakdown = time_breakdown(est, ar if req.devices > 1 else None)
    mfu = m.train_flops_per_sample * b / step / peak_flops
    if mfu > 1.0:  # only Winograd does fewer multiplies than the model counts
        notes.append(
            "MFU above 100%: its FP32 3x3 convolutions run as Winograd, which does up to 4x fewer "
            "multiplies than the model's FLOPs count (MFU counts the model's FLOPs)"
        )
    lower = gpu.missing_peak(prec.value, req.tf32) is not None  # timed at a slower unit's peak than the card's
    calibration = params.calibration  # "device" only with kernel timings measured on this GPU
    if gpu.is_xpu and calibration != "device":  # the CUDA kernel fit carried to an XPU: not grounded, say so
        calibration = "uncalibrated"
    return Target(
        name=gpu.name,
        kind="gpu",
        fits=peak <= usable,
        peak_bytes=int(peak),
        capacity_bytes=cap,
        max_batch_size=max_batch(ph, usable),
        step_time_s=step,
        samples_per_s=req.devices * b / step,
        calibrated=calibration == "device",
        notes=tuple(notes),
        bound=bound,
        allreduce_s=ar,
        grads_bytes=g_states.grads_bytes,
        checkpoint_bytes=g_states.weights_bytes + g_states.optimizer_bytes,
        calibration=calibration,
        predicted_mfu=None if lower else mfu,
        time_breakdown=breakdown,
        allreduce_exposed_s=ar,
        speed_lower_bound=lower,
        peak_unit=unit,
        peak_flops=peak_flops,
    ), est


def _bound_and_notes(
    req: PlanRequest,
    gpu: GPU,
    prec: Precision,
    unit: str,
    est: StepEstimate,
    host_s: float,
    cal: Calibration | None,
    params: PerfParams,
) -> tuple[str | None, list[str]]:
    """What bounds the GPU row's step (``host``, else the costliest op class's ``compute``/``memory``) and the row's
    notes on the card, the bound and the GPU model's grounding (calibration, unfitted parameters, architecture)."""
    top_cls = max(est.by_class, key=lambda c: est.by_class[c]["seconds"]) if est.by_class else None
    bound = "host" if host_s > est.device_s else (est.by_class[top_cls]["bound"] if top_cls else None)
    notes = gpu_notes(gpu, req.precision, prec, unit, req.tf32)
    if bound == "host":
        notes.append("host-bound")
    elif bound == "memory":
        notes.append(f"memory-bound ({top_cls})")
    if cal is not None and cal.perf_params is None:
        notes.append(
            "memory calibrated on this device; the calibration file has no kernel timings, so time is the published fit"
        )
    unfit = [k for k, n in (params.provenance.get("rows_constraining_each_parameter") or {}).items() if n == 0]
    dw = est.by_class.get("dwconv")
    if params.calibration == "published-fit" and "dwconv" in unfit and dw and dw["bound"] == "compute":
        # memory-bound depthwise kernels are timed by the kernel-fitted bandwidth; only compute-bound ones by the prior
        notes.append("depthwise conv compute-bound at an efficiency no published run constrains (a prior)")
    fitted_archs = params.provenance.get("architectures")
    if (
        params.calibration == "published-fit"
        and fitted_archs
        and gpu.architecture not in fitted_archs
        and gpu.architecture not in kernel_fit_architectures()
        and not gpu.is_xpu
    ):
        notes.append(f"no measured kernel or published run on {gpu.architecture}: timed from its datasheet")
    return bound, notes


def time_breakdown(est: StepEstimate, allreduce_exposed_s: float | None) -> dict[str, Any]:
    """Op class -> predicted device ``seconds``, ``bound`` (compute or memory) and ``kernels``, slowest first;
    plus ``allreduce_exposed`` (communication) when given (data parallel)."""
    breakdown = {
        c: {"seconds": v["seconds"], "bound": v["bound"], "kernels": v["kernels"]}
        for c, v in sorted(est.by_class.items(), key=lambda kv: -kv[1]["seconds"])
    }
    if allreduce_exposed_s is not None:
        breakdown["allreduce_exposed"] = {"seconds": allreduce_exposed_s, "bound": "communication", "kernels": 0}
    return breakdown


def set_time_to_train(targets: list[Target], req: PlanRequest) -> list[Target]:
    """The rows with ``time_to_train_s`` set on every row with a step time: ceil(samples / (batch x devices)) x
    epochs steps (the CPU row is one device); the rows as they are without ``dataset_size`` and ``epochs``. New
    rows (a :class:`~paddlefit.plan.request.Target` is frozen)."""
    if not (req.dataset_size and req.epochs):
        return list(targets)
    out = []
    for t in targets:
        per_step = req.batch_size * (req.devices if t.kind == "gpu" else 1)
        if t.step_time_s == t.step_time_s:
            t = replace(t, time_to_train_s=math.ceil(req.dataset_size / per_step) * req.epochs * t.step_time_s)
        out.append(t)
    return out


def tied_fastest(gpu_fit: list[Target]) -> tuple[Target, str]:
    """The card to recommend among ``gpu_fit`` (the rows that fit) and the tie-break said (empty when no other card
    ties): those within 1% of the fastest samples/s (:data:`TIE_FACTOR`: host-bound rows at the host floor, or
    cards the model cannot tell apart) tie, and the tie goes to the smallest card that fits (the least memory: the
    cheaper class of card, leaving the larger ones for the jobs that need them), then the faster."""
    fastest = max(
        gpu_fit, key=lambda t: (t.samples_per_s if t.samples_per_s == t.samples_per_s else -1.0, -t.capacity_bytes)
    )
    ties = [t for t in gpu_fit if t.samples_per_s * TIE_FACTOR >= fastest.samples_per_s] or [fastest]
    if len(ties) < 2:
        return fastest, ""
    best = min(ties, key=lambda t: (t.capacity_bytes, -t.samples_per_s))
    said = (
        f"{best.name} ({capacity_gib(best.capacity_bytes)} GiB) is also the fastest"
        if best is fastest
        else f"{best.name} ({capacity_gib(best.capacity_bytes)} GiB) over {fastest.name} "
        f"({capacity_gib(fastest.capacity_bytes)} GiB, {fastest.samples_per_s / best.samples_per_s - 1:.1%} "
        "faster)"
    )
    return best, (
        f"{len(ties)} GPUs within 1% of the fastest samples/s tie (below the model's resolution); the tie "
        f"goes to the smallest card that fits (the least memory), then the faster: {said}"
    )


def recommend(targets: list[Target], batch: int) -> Recommendation:
    """The plan's recommendation: the fastest GPU that fits, the tie among those within 1% of it going to the
    smallest card (:func:`tied_fastest`, said in ``tie_break``), and the smallest card that fits; else what to
    change. Rows whose time no measurement grounds (``calibration`` ``uncalibrated``: Kunlunxin XPUs) or whose speed
    is a lower bound (``speed_lower_bound``) are recommended only when no other GPU fits: their samples/s cannot be
    ranked against the other rows'."""
    fitting = [t for t in targets if t.kind == "gpu" and t.fits]
    gpu_fit = [t for t in fitting if t.calibration != "uncalibrated" and not t.speed_lower_bound] or fitting
    if gpu_fit:
        best, tie = tied_fastest(gpu_fit)
        smallest = min(gpu_fit, key=lambda t: (t.capacity_bytes, -t.samples_per_s))
        reason = (
            f"{'fastest GPU that fits' if not tie else 'fastest GPU that fits, within 1% (tie-break below)'}: "
            f"{best.samples_per_s:,.0f} samples/s predicted, peak "
            f"{best.peak_bytes / GIB:.1f} of {capacity_gib(best.capacity_bytes)} GiB"
        )
        if smallest.name != best.name:
            reason += (
                f"; smallest card that fits: {smallest.name} ({smallest.samples_per_s:,.0f} samples/s, "
                f"peak {smallest.peak_bytes / GIB:.1f} of {capacity_gib(smallest.capacity_bytes)} GiB)"
            )
        unranked = [t.name for t in fitting if t.speed_lower_bound and t not in gpu_fit]
        if unranked:
            reason += (
                f"; not ranked: {', '.join(unranked)} (the catalog lacks the peak of the precision's unit: "
                "the speed shown is a lower bound)"
            )
        return Recommendation(best.name, reason, smallest.name, tie)
    gpus = [t for t in targets if t.kind == "gpu"]
    if not gpus:
        cpu = targets[0]
        return Recommendation("cpu" if cpu.fits else None, "no GPU targets selected", None, "")
    roomiest = max(gpus, key=lambda t: t.max_batch_size or 0)
    mb = roomiest.max_batch_size or 0
    if mb >= 1:
        reason = (
            f"batch {batch} fits no GPU; largest that fits is {mb} on {roomiest.name}: lower --batch-size "
            "with gradient accumulation, use AMP (--precision bf16-o1/fp16-o1), or shard across devices"
        )
    else:
        reason = "model states alone exceed every GPU: use AMP O2, sharding or tensor/pipeline parallel"
    return Recommendation(None, reason, None, "")
