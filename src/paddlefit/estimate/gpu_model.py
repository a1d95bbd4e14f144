"""Per-operator GPU step time: every op of the training step timed on a GPU's compute units and memory.

A training step is the forward trace (:mod:`paddlefit.estimate.optrace`), its backward ops derived per class,
the AMP casts and the optimizer update. Each kernel takes

    t = max(FLOPs / (peak of its unit x efficiency x wave efficiency), bytes / (DRAM bandwidth x bw_eff)) + kernel_s

(the roofline, Williams et al., CACM 2009, per kernel), and the step is the sum over kernels, never below the
host floor measured on this machine (:class:`~paddlefit.estimate.timing.HostOverhead`).

Wave quantization (Habitat, Yu et al., USENIX ATC 2021, §4.2; NVIDIA "Matrix Multiplication Background"
guide, "Wave Quantization"): a GEMM is cut into output tiles (:data:`TILE_SIZES`); the GPU runs
``sm_count`` tiles at a time, so ``tiles / (ceil(tiles / sm_count) x sm_count)`` of the last wave is filled.
Small or skinny GEMMs therefore reach a fraction of the peak.

The kernels of a step (which unit each runs on, the backward rules, the optimizer update) are built by
:func:`~paddlefit.estimate.kernels.step_kernels`; the dtypes under AMP by :mod:`paddlefit.estimate.amp`; the
fitted efficiencies are :class:`~paddlefit.estimate.perf_params.PerfParams`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from paddlefit.estimate.kernels import (
    Kernel,
    step_kernels,
)
from paddlefit.estimate.optrace import TracedOp
from paddlefit.estimate.perf_params import (
    PARAM_KEYS,
    PerfParams,
)

#: Tile edges of one thread block's output for tensor-core GEMMs: 128 x 128 is the default CUTLASS threadblock
#: shape for FP16/TF32 GEMMs on Volta to Hopper (CUTLASS ``default_gemm_configuration.h``) and the tile NVIDIA's
#: guide uses for its wave-quantization example; its configurations also carry 32- and 64-wide tiles, and a
#: dimension below 128 uses the smallest that covers it.
TILE_SIZES = (32, 64, 128)
#: Shortest K slice of a split-K GEMM: 4 k-iterations of CUTLASS's default 32-deep FP16 threadblock tile, so
#: each slice still amortises its prologue and the final reduction of the partial tiles.
SPLIT_K_MIN = 128


def _tile(d: int) -> int:
    """Tile edge a GEMM library picks for a dimension of ``d``: the smallest of :data:`TILE_SIZES` that covers
    it, else the largest (cuBLAS/CUTLASS heuristics carry 32-, 64- and 128-wide threadblock tiles)."""
    return next((t for t in TILE_SIZES if d <= t), TILE_SIZES[-1])


def wave_efficiency(gemm: tuple[int, int, int, int] | None, sm_count: int | None) -> float:
    """Fraction of the tensor-core work that is useful: tile fill x wave fill; 1 without an SM count.

    Tile fill: an M x N output is cut into tiles of ``_tile(M) x _tile(N)``; a dimension that is not a
    multiple of its tile wastes the rest (N = 18 output channels fill 18 of a 32-wide tile).
    Wave fill: units / (ceil(units / SMs) x SMs), units = batch x tiles x split, where a GEMM with fewer tiles
    than SMs and a long reduction is split along K into ``min(ceil(SMs / tiles), K // SPLIT_K_MIN)`` slices
    (split-K: CUTLASS ``GemmSplitKParallel``, cuBLAS's split-K heuristics; stream-K, Osama et al. 2023,
    arXiv 2301.03598). Split-K matters for weight gradients, whose K is samples x pixels (or tokens).
    """
    if not gemm or not sm_count:
        return 1.0
    g, m, n, k = (max(int(x), 1) for x in gemm)
    tm, tn = _tile(m), _tile(n)
    mt, nt = math.ceil(m / tm), math.ceil(n / tn)
    fill = (m / (mt * tm)) * (n / (nt * tn))
    tiles = g * mt * nt
    split = 1
    if tiles < sm_count:
        split = max(1, min(math.ceil(sm_count / tiles), k // SPLIT_K_MIN))
    units = tiles * split
    return fill * units / (math.ceil(units / sm_count) * sm_count)


def unit_peak(gpu: Any, unit: str, precision: str) -> float:
    """Dense peak FLOP/s of a unit on ``gpu`` (datasheet figures from the catalog)."""
    if unit == "half":
        tf = gpu.bf16_tflops if precision.startswith("bf16") else gpu.fp16_tflops
        return (tf or gpu.fp32_tflops) * 1e12
    if unit == "tf32":
        return (gpu.tf32_tflops or gpu.fp32_tflops) * 1e12
    return gpu.fp32_tflops * 1e12


def _param_key(k: Kernel) -> str | None:
    """The efficiency parameter that sets a kernel's compute rate (None: memory-bound kernel)."""
    if k.unit == "memory" or not k.flops:
        return None
    if k.unit == "dwconv":
        return "dwconv"
    return ("conv_" if k.cls == "conv" else "gemm_") + k.unit


@dataclass
class CompiledStep:
    """The kernels of a step on one GPU as arrays, so that timing them under many parameter sets is cheap
    (``bench/gpu_fit.py`` evaluates thousands). Everything that does not depend on the parameters is here.

    Attributes:
        kernels: the kernels (:func:`step_kernels`).
        flops, nbytes, count: per kernel.
        peak: the unit's dense peak FLOP/s x the GEMM's wave efficiency (0 for memory-bound kernels).
        key: index of the kernel's efficiency parameter in :data:`PARAM_KEYS` (-1: memory-bound).
        backward: True for backward-phase kernels.
        bandwidth: datasheet DRAM bandwidth, bytes/s.
        architecture: GPU architecture (for ``PerfParams.by_generation``).
    """

    kernels: list[Kernel]
    flops: np.ndarray
    nbytes: np.ndarray
    count: np.ndarray
    peak: np.ndarray
    key: np.ndarray
    backward: np.ndarray
    bandwidth: float
    architecture: str | None

    def times(self, params: PerfParams) -> tuple[np.ndarray, np.ndarray]:
        """(seconds per kernel, compute-bound flag per kernel): max(compute, memory) + count x kernel_s."""
        arch = self.architecture
        eff = np.array([params.get(k, arch) for k in PARAM_KEYS])
        mem_s = self.nbytes / (self.bandwidth * params.get("bw_eff", arch))
        rate = np.where(self.key >= 0, self.peak * eff[np.maximum(self.key, 0)], np.inf)
        comp_s = np.where(self.key >= 0, self.flops / rate, 0.0)
        return np.maximum(comp_s, mem_s) + self.count * params.get("kernel_s", arch), comp_s >= mem_s


def compile_step(kernels: list[Kernel], gpu: Any, precision: str) -> CompiledStep:
    """Arrays of ``kernels`` on ``gpu`` (see :class:`CompiledStep`)."""
    sm = getattr(gpu, "sm_count", None)
    keys = [_param_key(k) for k in kernels]
    # depthwise/grouped convolutions run Paddle's direct CUDA-core kernel, not GEMM tiles: no tile or wave model
    peak = [0.0 if key is None else unit_peak(gpu, "fp32" if k.unit == "dwconv" else k.unit, precision)
            * (1.0 if k.unit == "dwconv" else wave_efficiency(k.gemm, sm))
            for k, key in zip(kernels, keys, strict=True)]  # fmt: skip
    return CompiledStep(
        kernels=kernels,
        flops=np.array([float(k.flops) for k in kernels]),
        nbytes=np.array([float(k.bytes) for k in kernels]),
        count=np.array([float(k.count) for k in kernels]),
        peak=np.array(peak),
        key=np.array([-1 if key is None else PARAM_KEYS.index(key) for key in keys]),
        backward=np.array([k.phase == "backward" for k in kernels]),
        bandwidth=gpu.mem_bw_gb_s * 1e9,
        architecture=getattr(gpu, "architecture", None),
    )


def kernel_time_s(k: Kernel, gpu: Any, params: PerfParams, precision: str) -> tuple[float, str]:
    """(seconds, ``compute``|``memory``) of one kernel (times ``k.count`` fixed costs)."""
    t, comp = compile_step([k], gpu, precision).times(params)
    return float(t[0]), ("compute" if comp[0] else "memory")


@dataclass
class StepEstimate:
    """Predicted device time of one training step on one GPU.

    Attributes:
        device_s: sum of the kernel times, seconds.
        by_class: seconds per op class, and whether compute or memory bound it (the larger share).
        by_phase: seconds per phase (forward, backward, optimizer).
        flops: FLOPs of the step (forward + backward GEMM/conv FLOPs and the rest), for MFU.
        kernels: the kernels with their seconds and bound (for ``plan --explain``).
    """

    device_s: float
    by_class: dict[str, dict[str, Any]]
    by_phase: dict[str, float]
    flops: float
    kernels: list[tuple[Kernel, float, str]]


def estimate_step(ops: list[TracedOp], precision: str, gpu: Any, optimizer: str, trainable_params: int,
                  trainable_tensors: int, params: PerfParams, tf32: bool = True) -> StepEstimate:  # fmt: skip
    """Predicted device seconds of one training step of ``ops`` on ``gpu`` (see the module docstring); ``tf32``:
    Paddle's TF32 switches (:func:`~paddlefit.estimate.kernels.step_kernels`)."""
    kernels = step_kernels(ops, precision, gpu, optimizer, trainable_params, trainable_tensors, tf32)
    t_arr, comp = compile_step(kernels, gpu, precision).times(params)
    timed = [(k, float(t), "compute" if c else "memory") for k, t, c in zip(kernels, t_arr, comp, strict=True)]
    by_class: dict[str, dict[str, Any]] = {}
    by_phase: dict[str, float] = {}
    for k, t, bound in timed:
        c = by_class.setdefault(k.cls, {"seconds": 0.0, "compute_s": 0.0, "memory_s": 0.0, "kernels": 0})
        c["seconds"] += t
        c[bound + "_s"] += t
        c["kernels"] += k.count
        by_phase[k.phase] = by_phase.get(k.phase, 0.0) + t
    for c in by_class.values():
        c["bound"] = "compute" if c.pop("compute_s") >= c.pop("memory_s") else "memory"
    total = float(t_arr.sum())
    return StepEstimate(total, by_class, by_phase, sum(k.flops for k in kernels), timed)


def dp_exposed_allreduce_s(allreduce_s: float, backward_s: float, grads_bytes: float,
                           last_bucket_bytes: float = 1024**2) -> float:  # fmt: skip
    """Seconds of a data-parallel gradient all-reduce that the backward pass does not hide.

    ``paddle.DataParallel`` groups gradients into buckets (``comm_buffer_size`` = 25 MB, and a
    ``last_comm_buffer_size`` = 1 MB bucket for the first parameters, whose gradients are ready last;
    ``python/paddle/distributed/parallel.py``) and a reducer hook all-reduces each bucket asynchronously as
    soon as its gradients are accumulated (``paddle/fluid/distributed/collective/reducer.cc``), overlapping
    the rest of the backward pass. What stays exposed: the last bucket, which has no backward left to hide
    behind, or all of the all-reduce that outlasts the backward, whichever is larger:
    max(allreduce x last-bucket share, allreduce - backward).
    """
    if allreduce_s <= 0:
        return 0.0
    last = allreduce_s * min(1.0, last_bucket_bytes / max(grads_bytes, 1.0))
    return max(last, allreduce_s - backward_s)
