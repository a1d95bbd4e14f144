"""The verdict on a profiled step: statistics, the bottleneck named with its evidence, and ranked fixes (pure:
no Paddle calls; :func:`summarise` takes what :func:`paddlefit.profiling.profiler.profile_job` measured).

Verdict rules (:mod:`~paddlefit.profiling.verdict_rules` holds them and their thresholds, stated in the output):

- input-bound: the data pipeline is >= 25% of the step: the measured wait, or the CPU time to read and collate one
  batch (timed separately in this thread), whichever is larger. The second catches Paddle's single-process loader,
  whose prefetch thread hides the wait but takes the cores from training. Gain bound by Amdahl's law: taking a
  fraction d off the critical path speeds the step up by at most 1 / (1 - d), and never by more than the core
  count.
- host-overhead-bound (GPU): GPU utilisation < 50% while data waits < 25%.
- communication-bound (``devices`` > 1, GPU): the gradient all-reduce, *estimated* (the profile runs one device)
  as ``plan --devices`` estimates it: NCCL's all-reduce of the gradient bytes in ``paddlefit train``'s 128 MiB
  fused buckets over the GPU's NVLink/PCIe from the catalog
  (:func:`paddlefit.estimate.collectives.train_gradient_allreduce`, not overlapped with backward, as
  ``oom_backoff: true`` runs it; an upper bound for DataParallel's overlap), would be >= 25% of the step. On CPU
  (gloo) no bandwidth is known and this is not decided.
- memory-bound (GPU): compute dominates (>= 60%) and the step's arithmetic intensity is below the GPU's ridge
  point (roofline, Williams et al., CACM 2009): FLOPs per step / (2 x peak allocated bytes, the planner's
  lower bound of DRAM traffic) < peak FLOP/s / memory bandwidth (datasheet figures from the catalog).
- compute-bound: otherwise, when forward + loss + backward + optimizer >= 60% of the step AND the step's achieved
  FLOP/s reach >= 10% of what the device attains on a dense GEMM (CPU: a 1024^3 float32 matmul timed here at the
  job's thread count; GPU: the datasheet dense peak of the precision). Below that the arithmetic is not what
  takes the time: overhead-bound (per-op dispatch, element-wise and memory-bound kernels, a heavy loss).
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from paddlefit.jobspec.spec import JobSpec
from paddlefit.profiling.verdict_rules import (
    COMM_BOUND_SHARE,
    COMPUTE_SHARE,
    INPUT_BOUND_WAIT,
    LOSS_HEAVY,
    LOW_GPU_UTIL,
    MIN_COMPUTE_EFFICIENCY,
    OPTIMIZER_HEAVY,
    StepFacts,
    judge,
)
from paddlefit.units import MIB

COMPONENTS = ("data", "h2d", "forward", "loss", "backward", "optimizer")
#: how ``profile`` labels a component in its table (the rest by their key): ``data`` is the step's wait for a batch,
#: not the time producing one (the evidence's "batch production")
COMPONENT_LABELS = {"data": "data wait"}


@dataclass
class ProfileResult:
    """``paddlefit profile`` result; seconds, samples/s, FLOP/s, percent. ``to_dict()`` is the ``--json`` document.

    Attributes:
        breakdown: component -> {mean_s, p95_s, share} over the measured steps (share of the mean step).
        per_step: one dict per step (warm-up included, flagged) with every component's seconds.
        verdict: input-bound | host-overhead-bound | communication-bound | memory-bound | overhead-bound |
            compute-bound | undetermined.
        evidence: sentences with the numbers behind the verdict.
        fixes: ranked [{fix, why, expected_gain, basis, settings?}]: the gain as text with its evidence; ``basis``
            ``hypothesis`` (profile runs no fix); ``settings`` (dotted spec keys) where ``tune --profile`` can test it.
    """

    model: str
    device: str
    steps: int
    warmup: int
    batch_size: int
    global_batch: int
    step_mean_s: float
    step_p95_s: float
    samples_per_s: float
    data_wait_fraction: float
    data_production_s: float
    breakdown: dict[str, dict[str, float]]
    cpu: dict[str, float]
    gpu: dict[str, float] | None
    train_flops_per_sample: float
    achieved_flops_per_s: float
    mfu: float | None
    verdict: str
    evidence: list[str]
    fixes: list[dict[str, str]]
    per_step: list[dict[str, float]] = field(default_factory=list)
    assumptions: dict[str, Any] = field(default_factory=dict)
    operators: list[dict[str, Any]] | None = None  # --ops K: [{name, calls, ms_per_step, share}], busiest first

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document."""
        return asdict(self)


def _pct(v: float) -> str:
    """A sampled percentage, or n/a when no sample was taken."""
    return f"{v:.0f}%" if math.isfinite(v) else "n/a"


def _stats(values: list[float]) -> tuple[float, float]:
    arr = np.asarray(values, dtype=float)
    return float(arr.mean()), float(np.percentile(arr, 95))


def _catalog_gpu(gpu_name: str | None) -> Any:
    """The catalog entry for the device name Paddle reports (:func:`paddlefit.catalog.device_name.match_gpu`, family
    match allowed: only its peak FLOP/s and bandwidths are used), or None."""
    if not gpu_name:
        return None
    from paddlefit.catalog.device_name import match_gpu
    from paddlefit.catalog.gpus import load_gpus
    from paddlefit.errors import UnknownNameError

    try:
        return match_gpu(gpu_name, load_gpus(), family=True)
    except UnknownNameError:
        return None


def _breakdown(measured: list[dict[str, float]]) -> tuple[dict[str, dict[str, float]], float, float]:
    """component -> {mean_s, p95_s, share} over the measured steps, ``other`` = the untimed rest; and the step's
    mean and p95 seconds."""
    step_mean, step_p95 = _stats([r["step"] for r in measured])
    breakdown = {}
    for c in COMPONENTS:
        mean, p95 = _stats([r.get(c, 0.0) for r in measured])
        breakdown[c] = {"mean_s": mean, "p95_s": p95, "share": mean / step_mean if step_mean else 0.0}
    other = max(0.0, step_mean - sum(b["mean_s"] for b in breakdown.values()))
    breakdown["other"] = {"mean_s": other, "p95_s": other, "share": other / step_mean if step_mean else 0.0}
    return breakdown, step_mean, step_p95


def _device_figures(
    spec: JobSpec, entry: Any, flops_per_step: float, peak_bytes: int, grads_bytes: float, devices: int
) -> tuple[float | None, float | None, float | None, tuple[float, float, str] | None]:
    """From the catalog GPU ``entry``: its peak FLOP/s at the job's precision, the step's arithmetic intensity and
    the ridge point (FLOP/byte; DRAM traffic taken as 2 x peak allocated bytes, the roofline lower bound), and the
    estimated gradient all-reduce (seconds, the link's per-direction GB/s, link) for ``devices`` > 1. All None
    without an entry."""
    if entry is None:
        return None, None, None, None
    peak_flops = entry.peak_flops(spec.precision.value)[0]
    intensity = ridge = allreduce = None
    if peak_bytes > 0 and flops_per_step > 0:
        intensity = flops_per_step / (2 * peak_bytes)
        ridge = peak_flops / (entry.mem_bw_gb_s * 1e9)
    if devices > 1 and grads_bytes > 0:
        from paddlefit.estimate.collectives import train_gradient_allreduce

        bw, _ = entry.interconnect_gb_s(devices)
        ar = train_gradient_allreduce(entry, grads_bytes, devices)
        allreduce = (ar.seconds, bw, ar.link)
    return peak_flops, intensity, ridge, allreduce


def _evidence(
    f: StepFacts, sps: float, step_p95: float, produce_s: float, produce_raw: float, cpu: dict[str, float], sampler: Any
) -> list[str]:
    """The sentences every verdict shows: the step, the data wait and batch production, compute's share, CPU and
    GPU use (GPU: ``f.gpu`` gains ``memory_busy_mean_percent``)."""
    spec, bd = f.spec, f.breakdown
    evidence = [
        f"mean step {f.step_mean * 1e3:,.1f} ms (p95 {step_p95 * 1e3:,.1f} ms) for {f.gb} samples: {sps:,.0f} "
        "samples/s",
        f"data wait {f.wait:.0%} of the step (mean {bd['data']['mean_s'] * 1e3:,.1f} ms, p95 "
        f"{bd['data']['p95_s'] * 1e3:,.1f} ms) with num_workers {spec.data.num_workers}",
        f"batch production (dataset + collate) takes {produce_s * spec.grad_accum_steps * 1e3:,.1f} ms of CPU per "
        f"step, {produce_raw:.0%} of a step's time (timed alone, after the steps), whether the step waits for it or "
        "a prefetch thread/worker competes with training for the cores",
        f"forward + loss + backward + optimizer {f.compute:.0%} of the step (loss alone {bd['loss']['share']:.0%})",
        f"CPU: main process {_pct(cpu['main_process_percent'])}, DataLoader workers {_pct(cpu['workers_percent'])} "
        f"(100% = one core; {f.cores} cores; n/a = the run was shorter than one 0.2 s sample)",
    ]
    if f.gpu is not None:
        busy = float(np.mean(sampler.gpu_mem_busy)) if sampler.gpu_mem_busy else float("nan")
        f.gpu["memory_busy_mean_percent"] = busy
        evidence.append(
            f"GPU utilisation {_pct(f.gpu['util_mean_percent'])}, device memory busy {_pct(busy)} of "
            "the time (NVML, means of 0.2 s samples)"
        )
    return evidence


def summarise(
    spec: JobSpec,
    rows: list[dict[str, float]],
    warmup: int,
    device: str,
    gpu_name: str | None,
    flops_per_sample: float,
    sampler: Any,
    produce_s: float,
    peak_bytes: int = 0,
    grads_bytes: float = 0.0,
    devices: int = 1,
    params: dict[str, Any] | None = None,
    cpu_gemm_flops_per_s: float | None = None,
) -> ProfileResult:
    """Statistics, verdict, evidence and fixes from the measured ``rows`` (pure: no Paddle calls).

    ``sampler`` needs the lists ``main``, ``children``, ``gpu_util``, ``gpu_mem``, ``gpu_mem_busy`` (percent, bytes).
    ``peak_bytes``: peak allocated bytes of the run; ``grads_bytes``: bytes one all-reduce moves per rank for the
    gradients; ``devices``: the job's data-parallel degree (the all-reduce is estimated when > 1 on a GPU);
    ``params``: {count, largest, largest_shape, largest_count} of the trainable parameters (for the optimizer fix);
    ``cpu_gemm_flops_per_s``: what this CPU attains on a dense GEMM (for a CPU run:
    :func:`~paddlefit.profiling.profiler.cpu_gemm_flops_per_s`).
    """
    measured = [r for r in rows if not r["warmup"]]
    breakdown, step_mean, step_p95 = _breakdown(measured)
    gb = spec.batch_size * spec.grad_accum_steps
    sps = gb / step_mean
    wait = breakdown["data"]["share"]
    produce_raw = produce_s * spec.grad_accum_steps / step_mean if step_mean else 0.0
    produce = min(1.0, produce_raw)  # the share of the step it can take off the critical path
    cores = os.cpu_count() or 1
    cpu = {
        "cores": float(cores),
        "main_process_percent": float(np.mean(sampler.main)) if sampler.main else float("nan"),
        "workers_percent": float(np.mean(sampler.children)) if sampler.children else 0.0,
    }
    gpu = (
        None
        if device != "gpu"
        else {
            "util_mean_percent": float(np.mean(sampler.gpu_util)) if sampler.gpu_util else float("nan"),
            "memory_used_max_bytes": float(max(sampler.gpu_mem)) if sampler.gpu_mem else float("nan"),
        }
    )
    achieved = flops_per_sample * sps
    entry = _catalog_gpu(gpu_name)
    peak_flops, intensity, ridge, allreduce = _device_figures(
        spec, entry, flops_per_sample * gb, peak_bytes, grads_bytes, devices
    )
    if allreduce is not None:
        breakdown["allreduce"] = {
            "mean_s": allreduce[0],
            "p95_s": allreduce[0],
            "share": allreduce[0] / (step_mean + allreduce[0]),
            "estimated": 1.0,
        }
    compute = sum(breakdown[c]["share"] for c in ("forward", "loss", "backward", "optimizer"))
    attainable = (
        entry.peak_flops(spec.precision.value if spec.precision.is_amp else "fp32")[0]
        if entry is not None
        else cpu_gemm_flops_per_s
        if device == "cpu"
        else None
    )
    facts = StepFacts(
        spec,
        device,
        cores,
        step_mean,
        gb,
        breakdown,
        wait,
        produce,
        max(wait, produce),
        compute,
        gpu,
        achieved / attainable if attainable and flops_per_sample > 0 else None,
        intensity,
        ridge,
        breakdown["allreduce"]["share"] if allreduce else 0.0,
        grads_bytes,
        params,
        [],
    )
    facts.evidence += _evidence(facts, sps, step_p95, produce_s, produce_raw, cpu, sampler)
    facts.evidence += _device_evidence(
        facts, entry, achieved, attainable, flops_per_sample * gb, peak_bytes, allreduce, devices
    )
    verdict, fixes = judge(facts)
    return ProfileResult(
        model=spec.model,
        device=gpu_name or device,
        steps=len(measured),
        warmup=warmup,
        batch_size=spec.batch_size,
        global_batch=gb,
        step_mean_s=step_mean,
        step_p95_s=step_p95,
        samples_per_s=sps,
        data_wait_fraction=wait,
        data_production_s=produce_s,
        breakdown=breakdown,
        cpu=cpu,
        gpu=gpu,
        train_flops_per_sample=flops_per_sample,
        achieved_flops_per_s=achieved,
        mfu=achieved / peak_flops if peak_flops else None,
        verdict=verdict,
        evidence=facts.evidence,
        fixes=fixes,
        per_step=rows,
        assumptions=_assumptions(attainable),
    )


def _device_evidence(
    f: StepFacts,
    entry: Any,
    achieved: float,
    attainable: float | None,
    flops_per_step: float,
    peak_bytes: int,
    allreduce: tuple[float, float, str] | None,
    devices: int,
) -> list[str]:
    """The sentences on the step's FLOP/s against the attainable, its arithmetic intensity against the ridge
    point, and the estimated all-reduce."""
    out = []
    if f.efficiency is not None:
        what = (
            "a dense 1024^3 float32 matmul on this CPU at the same threads"
            if entry is None
            else f"the {entry.name} dense peak"
        )
        out.append(
            f"achieved {achieved / 1e9:,.2f} GFLOP/s ({flops_per_step / 1e9:,.3g} GFLOPs per step / mean "
            f"step) = {f.efficiency:.1%} of {attainable / 1e9:,.1f} GFLOP/s, {what}"
        )  # type: ignore[operator]
    if f.intensity is not None and f.ridge is not None:
        out.append(
            f"arithmetic intensity {f.intensity:,.1f} FLOP/byte (FLOPs per step / 2 x peak allocated "
            f"{peak_bytes / MIB:,.0f} MiB) vs the {entry.name} ridge point {f.ridge:,.1f} FLOP/byte"
        )
    if allreduce is not None:
        seconds, bw, link = allreduce
        out.append(
            f"gradient all-reduce over {devices} GPUs (estimated: NCCL all-reduce of "
            f"{f.grads_bytes / MIB:,.1f} MiB in 128 MiB buckets over {link}, {bw:,.0f} GB/s per "
            f"direction, not overlapped): {seconds * 1e3:,.1f} ms, "
            f"{f.comm_share:.0%} of the step"
        )
    elif devices > 1:
        out.append(
            f"the job runs on {devices} devices; the profile measured one, and the all-reduce is estimated "
            "only on a catalog GPU (no bandwidth is known for CPU/gloo)"
        )
    return out


def _assumptions(attainable: float | None) -> dict[str, Any]:
    """The thresholds and conventions behind the verdict (the ``--json`` document's ``assumptions``)."""
    return {
        "input_bound_wait_share": INPUT_BOUND_WAIT,
        "compute_bound_share": COMPUTE_SHARE,
        "low_gpu_util_percent": LOW_GPU_UTIL,
        "communication_bound_share": COMM_BOUND_SHARE,
        "optimizer_heavy_share": OPTIMIZER_HEAVY,
        "min_compute_efficiency": MIN_COMPUTE_EFFICIENCY,
        "loss_heavy_share": LOSS_HEAVY,
        "attainable_flops_per_s": attainable,
        "allreduce": "estimated for devices > 1 on a catalog GPU: NCCL model of paddlefit train's 128 MiB "
        "fused buckets (paddlefit.estimate.collectives), no overlap",
        "memory_traffic": "2 x peak allocated bytes per step (roofline lower bound, as `plan`)",
        "sync": "paddle.device.synchronize() between phases on GPU; none on CPU (eager CPU kernels are synchronous)",
        "flops": "paddlefit's counter (forward + backward, optimizer not counted)",
    }
