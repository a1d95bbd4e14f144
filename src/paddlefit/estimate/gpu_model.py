"""Per-operator GPU step time: every kernel of the training step timed from its shape and the GPU's datasheet.

A training step is the forward trace (:mod:`paddlefit.estimate.optrace`), its backward ops derived per class,
the AMP casts and the optimizer update (:func:`~paddlefit.estimate.kernels.step_kernels`; dtypes under AMP by
:mod:`paddlefit.estimate.amp`). Each kernel takes

    t = max(compute_s, memory_s) + kernel_s

(the roofline, Williams et al., CACM 2009, per kernel) with ``compute_s`` from GEMM tiles, waves and the unit's
peak and ``memory_s`` from its bytes, DRAM bandwidth and L2 (:mod:`paddlefit.estimate.kernel_model`, whose
constants are fitted op class by op class on measured kernels; :class:`~paddlefit.estimate.perf_params.PerfParams`).
The step is the sum over kernels; ``plan`` keeps it above the host floor
(:func:`paddlefit.estimate.timing.host_floor_s`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from paddlefit.catalog.ceilings import gemm_ceiling
from paddlefit.catalog.units import unit_peak
from paddlefit.estimate.collectives import BucketedCollective
from paddlefit.estimate.kernel_model import (
    FUSED_BLOCK_H,
    FUSED_BLOCK_W,
    WINOGRAD_TILE,
    batched_sgemm_tile,
    fp32_issue_share,
    gemm_compute_s,
    memory_s,
    sustained_fp32_flops,
    tuned_gemm_compute_s,
    winograd_eligible,
    winograd_fused_s,
    winograd_s,
)
from paddlefit.estimate.kernels import (
    Kernel,
    step_kernels,
)
from paddlefit.estimate.optrace import TracedOp
from paddlefit.estimate.perf_params import (
    PARAM_KEYS,
    PerfParams,
    batched_sgemm_tiles,
)
from paddlefit.units import MIB

#: Memory-bound op classes with their own bandwidth efficiency (the rest use ``bw_eff``).
MEMORY_KEYS = {"norm": "norm_bw_eff", "softmax": "softmax_bw_eff"}


def param_key(k: Kernel) -> str | None:
    """The efficiency parameter that sets a kernel's compute rate (None: a memory-bound kernel, whose bandwidth
    efficiency is ``MEMORY_KEYS.get(k.cls, "bw_eff")``)."""
    if k.unit == "memory" or not k.flops:
        return None
    if k.unit == "dwconv":
        return "dwconv"
    # INT8 tensor-core kernels take the FP16 ones' efficiencies: no INT8 kernel was measured (an assumption)
    unit = "half" if k.unit == "int8" else k.unit
    if k.cls == "conv" and k.conv and tuple(k.conv[:2]) == (1, 1):
        return "gemm_" + unit  # a 1x1 convolution is a GEMM (no im2col): C_out x C_in times C_in x pixels
    return ("conv_" if k.cls == "conv" else "gemm_") + unit


def winograd_dims(k: Kernel) -> tuple[float, float, float, float, float, float] | None:
    """(4x4 output tiles, C_in, C_out, input elements, output elements, 8x16 pixel blocks of the fused kernel) of an
    FP32 CUDA-core convolution kernel that cuDNN can run as Winograd F(4x4, 3x3) or fused F(2x2, 3x3)
    (:func:`~paddlefit.estimate.kernel_model.winograd_eligible`, one group),
    read from its implicit-GEMM shape (:func:`~paddlefit.estimate.kernels.step_kernels`: forward (1, M, C_out,
    9 C_in), data gradient (1, M, 9 C_in, C_out), weight gradient (1, 9 C_in, C_out, M), M = samples x output
    pixels). The data gradient of a stride-1 3x3 convolution is one too; the input is counted at the output's
    size (padding 1, the usual case). None for any other kernel."""
    if k.unit != "fp32" or k.cls != "conv" or not k.gemm or not winograd_eligible(k.conv):
        return None
    g, a, b, c = k.gemm
    if g != 1:
        return None
    if k.op.endswith(".wgrad"):
        m, cin, cout = c, a / 9, b
    elif k.op.endswith(".dgrad"):
        m, cin, cout = a, b / 9, c
    else:
        m, cin, cout = a, c / 9, b
    oh, ow = k.conv[6], k.conv[7]
    samples = m / max(oh * ow, 1)
    tiles = samples * -(-oh // WINOGRAD_TILE) * -(-ow // WINOGRAD_TILE)
    blocks = samples * -(-oh // FUSED_BLOCK_H) * -(-ow // FUSED_BLOCK_W)
    return tiles, cin, cout, m * cin, m * cout, blocks


@dataclass
class CompiledStep:
    """The kernels of a step on one GPU as arrays, so that timing them under many parameter sets is cheap
    (``bench/gpu_fit.py`` evaluates thousands). Everything that does not depend on the parameters is here.

    Attributes:
        kernels: the kernels (:func:`step_kernels`).
        flops, nbytes, count: per kernel (FLOPs, bytes, kernels the row stands for).
        peak: the unit's dense peak FLOP/s (0 for memory-bound kernels).
        key: index of the kernel's efficiency parameter in :data:`PARAM_KEYS` (-1: memory-bound).
        mem_key: index of its bandwidth-efficiency parameter.
        gemm: (4, kernels) array of batch, M, N, K for tiled GEMMs (0 where the kernel is not one).
        cuda_core: FP32 on CUDA cores (held to the board power).
        winograd: (6, kernels) array of :func:`winograd_dims` (0 where the kernel cannot run as Winograd).
        backward: True for backward-phase kernels.
        bandwidth, l2_bytes, sm, tdp_w, process_nm: datasheet DRAM bytes/s, L2 bytes, SMs, board watts, process
            node nm (0 when unknown).
        fp32_peak, issue_share, base_clock_mhz, boost_clock_mhz: the FP32 peak FLOP/s at the boost clock, the share
            of it SGEMM can issue (:func:`~paddlefit.estimate.kernel_model.fp32_issue_share`) and the datasheet
            clocks (0 when unknown), for :meth:`sustained_fp32_flops`.
        architecture: GPU architecture (for ``PerfParams.by_generation``).
        batched_tile: the tile of the architecture's FP32 batched SGEMMs (None: the general tile rule;
            :func:`~paddlefit.estimate.kernel_model.batched_sgemm_tile`).
        autotuned: per kernel, True where the engine timed every GEMM kernel candidate and kept the fastest
            (TensorRT's builder on matmul/fully-connected layers;
            :func:`~paddlefit.estimate.kernel_model.tuned_gemm_compute_s`) instead of cuBLAS's rule; None: nowhere.
        launches: per kernel, the kernels it runs one after another (None: one each): a grouped convolution run
            as one kernel per group (:func:`group_launches`) takes at least ``launches x kernel_s``.
        winograd_kernels: kernels of a Winograd convolution, (F(4x4, 3x3), fused F(2x2, 3x3)): cuDNN launches the
            transforms and the GEMMs apart (4) and its fused kernel with a filter transform (2); TensorRT's Volta
            tactic ``volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1`` is one kernel with the
            activation fused (its builder log, NVIDIA/TensorRT issue 1090): (1, 1).
    """

    kernels: list[Kernel]
    flops: np.ndarray
    nbytes: np.ndarray
    count: np.ndarray
    peak: np.ndarray
    key: np.ndarray
    mem_key: np.ndarray
    gemm: np.ndarray
    cuda_core: np.ndarray
    winograd: np.ndarray
    backward: np.ndarray
    bandwidth: float
    l2_bytes: float
    sm: int
    tdp_w: float
    process_nm: float
    architecture: str | None
    fp32_peak: float = 0.0
    issue_share: float = 1.0
    base_clock_mhz: float = 0.0
    boost_clock_mhz: float = 0.0
    batched_tile: tuple[float, float] | None = None
    autotuned: np.ndarray | None = None
    launches: np.ndarray | None = None
    winograd_kernels: tuple[int, int] = (4, 2)

    def sustained_fp32_flops(self, params: PerfParams) -> float:
        """FP32 FLOP/s this GPU's CUDA cores sustain in a long GEMM: its clock under the board power and its
        FFMA issue share (:func:`~paddlefit.estimate.kernel_model.sustained_fp32_flops`)."""
        get = lambda k: params.get(k, self.architecture)  # noqa: E731
        return sustained_fp32_flops(
            self.fp32_peak,
            self.issue_share,
            self.tdp_w,
            self.process_nm,
            self.base_clock_mhz,
            self.boost_clock_mhz,
            get("fp32_gflops_per_w"),
            get("fp32_node_exponent"),
        )

    def compute_s(
        self, params: PerfParams, values: np.ndarray | None = None, sustained: float | None = None
    ) -> np.ndarray:
        """Compute seconds per kernel (0 for memory-bound kernels); see :mod:`~paddlefit.estimate.kernel_model`.
        ``values``: ``params`` for this architecture in :data:`PARAM_KEYS` order, ``sustained``: its
        :meth:`sustained_fp32_flops` (computed when not given)."""
        get = lambda k: params.get(k, self.architecture)  # noqa: E731
        vals = _param_values(params, self.architecture) if values is None else values
        eff = vals[np.maximum(self.key, 0)]
        cap = np.where(self.cuda_core, self.sustained_fp32_flops(params) if sustained is None else sustained, np.inf)
        out = np.zeros(len(self.kernels))
        tiled = (self.key >= 0) & (self.gemm[0] > 0)
        if tiled.any():  # a kernel doing more FLOPs than its GEMM shape (flash attention: two GEMMs) scales
            g, m, n, k = self.gemm[:, tiled]
            per_shape = self.flops[tiled] / (2 * g * m * n * k)
            peak, e, c, simt = self.peak[tiled], eff[tiled], cap[tiled], self.cuda_core[tiled]
            tuned = self.autotuned[tiled] if self.autotuned is not None else np.zeros(len(g), dtype=bool)
            t = np.empty(len(g))  # each kernel timed once: by cuBLAS's rule, or as the engine's tuner picks
            r = ~tuned
            t[r] = gemm_compute_s(
                g[r],
                m[r],
                n[r],
                k[r],
                peak[r],
                self.sm,
                e[r],
                get("gemm_k0"),
                get("tile_h0"),
                c[r],
                self.batched_tile,
                simt[r],
            )
            if tuned.any():
                u = tuned
                t[u] = tuned_gemm_compute_s(
                    g[u], m[u], n[u], k[u], peak[u], self.sm, e[u], get("gemm_k0"), get("tile_h0"), c[u], simt[u]
                )
            out[tiled] = per_shape * t
        flat = (self.key >= 0) & ~tiled
        out[flat] = np.maximum(self.flops[flat] / (self.peak[flat] * eff[flat]), self.flops[flat] / cap[flat])
        return out

    def times(self, params: PerfParams) -> tuple[np.ndarray, np.ndarray]:
        """(seconds per kernel, compute-bound flag per kernel): max(compute, memory) + count x kernel_s, or for a
        convolution that can run as Winograd the lowest of that, :func:`winograd_s` and :func:`winograd_fused_s`,
        each + its :attr:`winograd_kernels` x kernel_s."""
        vals = _param_values(params, self.architecture)
        get = lambda k: params.get(k, self.architecture)  # noqa: E731
        per = np.maximum(self.count, 1)
        mem_s = per * memory_s(self.nbytes / per, self.bandwidth, vals[self.mem_key], self.l2_bytes, get("l2_gain"))
        sustained = self.sustained_fp32_flops(params)
        comp_s = self.compute_s(params, vals, sustained)
        t, bound = np.maximum(comp_s, mem_s) + self.count * get("kernel_s"), comp_s >= mem_s
        w = self.winograd[0] > 0
        if w.any() and self.sm > 0:  # the Winograd GEMMs are tiled over SMs: without an SM count (B200, XPU rows)
            # the convolution keeps its implicit-GEMM time instead of a division by zero
            tiles, cin, cout, x, y, blocks = self.winograd[:, w]
            mem = (self.bandwidth, get("bw_eff"), self.l2_bytes, get("l2_gain"))
            tw, cw = winograd_s(
                tiles,
                cin,
                cout,
                x,
                y,
                self.peak[w],
                self.sm,
                get("winograd_fp32"),
                get("gemm_k0"),
                get("tile_h0"),
                sustained,
                *mem,
                get("winograd_transform"),
                self.batched_tile,
            )
            tf, cf = winograd_fused_s(
                blocks,
                cin,
                cout,
                x,
                y,
                self.peak[w],
                self.sm,
                get("winograd_fused_fp32"),
                get("gemm_k0"),
                sustained,
                *mem,
            )
            for tc, cc, n in ((tw, cw, self.winograd_kernels[0]), (tf, cf, self.winograd_kernels[1])):
                tc = per[w] * tc + self.count[w] * n * get("kernel_s")
                faster = tc < t[w]
                t[w], bound[w] = np.where(faster, tc, t[w]), np.where(faster, cc, bound[w])
        if self.launches is not None:  # a loop of small kernels: each takes at least the per-kernel cost
            floor = self.launches * get("kernel_s")
            bound &= t >= floor
            t = np.maximum(t, floor)
        return t, bound


#: Tensor-core efficiencies bounded by the architecture's measured GEMM ceiling (:mod:`paddlefit.catalog.ceilings`).
HALF_KEYS = ("gemm_half", "conv_half")


def _param_values(params: PerfParams, architecture: str | None) -> np.ndarray:
    """``params`` for ``architecture`` as an array in :data:`PARAM_KEYS` order (indexed by ``key``/``mem_key``),
    the half-precision tensor-core efficiencies held to the architecture's measured GEMM ceiling (MAMF,
    :func:`~paddlefit.catalog.ceilings.gemm_ceiling`): a kernel never beats the best GEMM measured on its cards."""
    return np.array([min(params.get(k, architecture), efficiency_ceiling(k, architecture)) for k in PARAM_KEYS])


def efficiency_ceiling(key: str, architecture: str | None) -> float:
    """The most the efficiency ``key`` may reach on ``architecture`` (a share of the unit's dense peak): the measured
    GEMM ceiling of its cards for :data:`HALF_KEYS` (:func:`~paddlefit.catalog.ceilings.gemm_ceiling`), inf for
    any other key or an architecture with no measured ceiling."""
    ceiling = gemm_ceiling(architecture, "half") if key in HALF_KEYS else None
    return float("inf") if ceiling is None else ceiling


def group_launches(k: Kernel) -> int:
    """Kernels a grouped convolution (groups > 1, not depthwise: ``k.gemm`` = (groups, M, N, K)) runs when it is
    run as one kernel per group, else 1.

    The group loop is how convolutions were grouped on cuDNN before cuDNN 7's ``cudnnSetConvolutionGroupCount``
    (Paddle's ``paddle/phi/kernels/gpudnn/conv_kernel.cu`` still calls ``cudnnConvolutionForward`` ``for (int i =
    0; i < groups; i++)`` where it cannot set the count; Caffe's ``cudnn_conv_layer.cu`` did the same), and what
    the PaddleClas TensorRT fp32 V100 table shows: at batch 1 its ResNeXt, SE-ResNeXt, SENet and DPN rows take
    3-6 us more per group and grouped layer than one batched kernel, the per-kernel cost (``kernel_s``, 5.1 us,
    fitted on single-kernel timings, not on that table). Once a group's work takes longer than that, the launches
    hide behind it (they are asynchronous): the layer takes max(its batched time, groups x ``kernel_s``)."""
    if k.cls != "conv" or k.unit == "dwconv" or not k.gemm or k.gemm[0] <= 1:
        return 1
    return int(k.gemm[0])


def compile_step(kernels: list[Kernel], gpu: Any, precision: str, tensorrt: bool = False) -> CompiledStep:
    """Arrays of ``kernels`` on ``gpu`` (see :class:`CompiledStep`). ``tensorrt``: as TensorRT's builder compiles
    them: it times its matmul kernels (:attr:`CompiledStep.autotuned` marks the ``gemm``-class kernels), runs
    grouped convolutions one group at a time (:func:`group_launches`) and a Winograd convolution as one kernel
    (:attr:`CompiledStep.winograd_kernels`)."""
    sm = int(getattr(gpu, "sm_count", None) or 0)
    keys = [param_key(k) for k in kernels]
    # depthwise/grouped convolutions run Paddle's direct CUDA-core kernel, not GEMM tiles: no tile or wave model
    pairs = list(zip(kernels, keys, strict=True))
    tiled = [key is not None and k.unit != "dwconv" and bool(k.gemm) and sm > 0 for k, key in pairs]
    gemm = np.array([k.gemm if t else (0, 0, 0, 0) for k, t in zip(kernels, tiled, strict=True)], dtype=float)
    return CompiledStep(
        kernels=kernels,
        flops=np.array([float(k.flops) for k in kernels]),
        nbytes=np.array([float(k.bytes) for k in kernels]),
        count=np.array([float(k.count) for k in kernels]),
        peak=np.array(
            [
                0.0 if key is None else unit_peak(gpu, "fp32" if k.unit == "dwconv" else k.unit, precision)
                for k, key in pairs
            ]
        ),
        key=np.array([-1 if key is None else PARAM_KEYS.index(key) for key in keys], dtype=int),
        mem_key=np.array([PARAM_KEYS.index(MEMORY_KEYS.get(k.cls, "bw_eff")) for k in kernels], dtype=int),
        gemm=gemm.reshape(-1, 4).T,
        cuda_core=np.array([key is not None and k.unit in ("fp32", "dwconv") for k, key in pairs]),
        winograd=np.array([winograd_dims(k) or (0.0,) * 6 for k in kernels], dtype=float).reshape(-1, 6).T,
        backward=np.array([k.phase == "backward" for k in kernels]),
        bandwidth=gpu.mem_bw_gb_s * 1e9,
        l2_bytes=float(getattr(gpu, "l2_mib", None) or 0.0) * MIB,
        sm=sm,
        tdp_w=float(getattr(gpu, "tdp_w", None) or 0.0),
        process_nm=float(getattr(gpu, "process_nm", None) or 0.0),
        architecture=getattr(gpu, "architecture", None),
        fp32_peak=float(getattr(gpu, "fp32_tflops", None) or 0.0) * 1e12,
        issue_share=fp32_issue_share(getattr(gpu, "fp32_lanes_per_sm", None), getattr(gpu, "compute_capability", None)),
        base_clock_mhz=float(getattr(gpu, "base_clock_mhz", None) or 0.0),
        boost_clock_mhz=float(getattr(gpu, "boost_clock_mhz", None) or 0.0),
        batched_tile=batched_sgemm_tile(getattr(gpu, "architecture", None), batched_sgemm_tiles()),
        autotuned=np.array([k.cls == "gemm" for k in kernels]) if tensorrt else None,
        launches=np.array([float(group_launches(k)) for k in kernels]) if tensorrt else None,
        winograd_kernels=(1, 1) if tensorrt else (4, 2),
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


def estimate_step(
    ops: list[TracedOp],
    precision: str,
    gpu: Any,
    optimizer: str,
    trainable_params: int,
    trainable_tensors: int,
    params: PerfParams,
    tf32: bool = True,
) -> StepEstimate:
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


def dp_exposed_allreduce_s(allreduce: BucketedCollective, backward_s: float) -> float:
    """Seconds of a data-parallel gradient all-reduce that the backward pass does not hide.

    ``paddle.DataParallel`` groups gradients into buckets (``comm_buffer_size`` = 25 MB, and a
    ``last_comm_buffer_size`` = 1 MB bucket for the first parameters, whose gradients are ready last;
    ``python/paddle/distributed/parallel.py``; :data:`~paddlefit.estimate.collectives.DATA_PARALLEL_BUCKETS`) and a
    reducer hook all-reduces each bucket asynchronously as soon as its gradients are accumulated
    (``paddle/fluid/distributed/collective/reducer.cc``), overlapping the rest of the backward pass. ``allreduce`` is
    that sequence of bucket all-reduces, each with its latency
    (:func:`~paddlefit.estimate.collectives.bucketed_collective`; a sharded job's reduce-scatter likewise). What
    stays exposed: the last bucket, which has no backward left to hide behind, or all of the all-reduce that
    outlasts the backward, whichever is larger: max(last bucket's seconds, all buckets' seconds - backward seconds).
    """
    if allreduce.seconds <= 0:
        return 0.0
    return max(allreduce.last_bucket_s, allreduce.seconds - backward_s)
