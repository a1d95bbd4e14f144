"""Per-operator GPU step time: every op of the training step timed on a GPU's compute units and memory.

A training step is the forward trace (:mod:`paddlefit.estimate.optrace`), its backward ops derived per class,
the AMP casts and the optimizer update. Each kernel takes

    t = max(FLOPs / (peak of its unit x efficiency x wave efficiency), bytes / (DRAM bandwidth x bw_eff)) + kernel_s

(the roofline, Williams et al., CACM 2009, per kernel), and the step is the sum over kernels, never below the
host floor measured on this machine (:class:`~paddlefit.estimate.timing.HostOverhead`).

Which unit: GEMM-like ops (``linear``, ``matmul``, ``conv2d``) use the FP16/BF16 tensor cores when AMP runs
them in half precision (Paddle's AMP lists, ``python/paddle/amp/amp_lists.py``), TF32 tensor cores for fp32
on Ampere and later (Paddle enables TF32 for cuBLAS and cuDNN by default, see :data:`TF32_SOURCE`), else the
FP32 CUDA cores. Depthwise and grouped
convolutions run on CUDA cores (Paddle's own ``depthwise_conv2d`` kernel, ``paddle/phi/kernels/gpu/
depthwise_conv.h``). Every other op is a memory-bound kernel.

Wave quantization (Habitat, Yu et al., USENIX ATC 2021, §4.2; NVIDIA "Matrix Multiplication Background"
guide, "Wave Quantization"): a GEMM is cut into output tiles (:data:`TILE_SIZES`); the GPU runs
``sm_count`` tiles at a time, so ``tiles / (ceil(tiles / sm_count) x sm_count)`` of the last wave is filled.
Small or skinny GEMMs therefore reach a fraction of the peak.

Backward rules (per class; Kaplan et al. 2020 §2.1 and Narayanan et al. 2021 §5.1 for GEMMs):

- GEMM/conv: one GEMM per operand that needs a gradient, each with the forward's FLOPs: dX = dY·Wᵀ has shape
  (M, K, N), dW = Xᵀ·dY has shape (K, N, M) (the batch is its reduction dimension); a bias gradient is a
  reduction of dY.
- elementwise/activation, softmax, move: read dY and the tensors the grad op takes, write dX for each input
  that needs one (the grad ops' inputs are those of ``paddle/phi/ops/yaml/backward.yaml``).
- norm: two passes over (x, dy) (the sums over the normalised axis come before dx; Ioffe & Szegedy 2015 §3),
  then dx is written.
- embedding: the dense table gradient is zeroed and the rows scattered (Paddle ``embedding_grad``).

Optimizer (one fused kernel per parameter tensor, as Paddle's dygraph optimizers launch them; plus
``clear_grad``'s zeroing): bytes per parameter in :data:`OPTIMIZER_BYTES_PER_PARAM`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from paddlefit.errors import CatalogError
from paddlefit.estimate.optrace import TensorRef, TracedOp

#: Tile edges of one thread block's output for tensor-core GEMMs: 128 x 128 is the default CUTLASS threadblock
#: shape for FP16/TF32 GEMMs on Volta to Hopper (CUTLASS ``default_gemm_configuration.h``) and the tile NVIDIA's
#: guide uses for its wave-quantization example; its configurations also carry 32- and 64-wide tiles, and a
#: dimension below 128 uses the smallest that covers it.
TILE_SIZES = (32, 64, 128)
#: Shortest K slice of a split-K GEMM: 4 k-iterations of CUTLASS's default 32-deep FP16 threadblock tile, so
#: each slice still amortises its prologue and the final reduction of the partial tiles.
SPLIT_K_MIN = 128

TF32_SOURCE = (
    "Paddle paddle/phi/backends/context_pool.cc: allow_tf32_cublas = true, allow_tf32_cudnn = true; the GPU "
    "context's cuBLAS handle uses CUBLAS_TF32_TENSOR_OP_MATH (gpu_context.cc InitBlasHandle) and cuDNN conv "
    "descriptors keep CUDNN_DEFAULT_MATH unless allow_tf32 is false (phi/backends/gpu/cuda/cudnn_desc.h)"
)

#: Bytes moved per trainable parameter by one optimizer update (reads + writes), fp32 training:
#: SGD reads p, g and writes p (12); Momentum also reads and writes the velocity (20); Adam/AdamW read p, g,
#: m, v and write p, m, v (28) (Paddle ``adam_``/``adamw_`` kernels, ``paddle/phi/kernels/gpu/adam_kernel.cu``).
#: Under AMP O2 with master weights, Adam reads the fp32 master, fp16 grad, m, v and writes master, m, v and
#: the fp16 copy: 4+2+4+4 + 4+4+4+2 = 28 as well.
OPTIMIZER_BYTES_PER_PARAM = {"sgd": 12, "momentum": 20, "adam": 28, "adamw": 28}

#: The efficiency parameters and their allowed ranges (``efficiency`` values are fractions of a unit's peak).
PARAM_KEYS = ("gemm_half", "gemm_tf32", "gemm_fp32", "conv_half", "conv_tf32", "conv_fp32", "dwconv", "bw_eff",
              "kernel_s")  # fmt: skip

_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int64": 8, "int32": 4, "int16": 2,
                "int8": 1, "uint8": 1, "bool": 1}  # fmt: skip


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a Paddle dtype name (4 for unknown names)."""
    return _DTYPE_BYTES.get(dtype.replace("paddle.", ""), 4)


@dataclass(frozen=True)
class PerfParams:
    """Fitted efficiency parameters of the per-operator model.

    Attributes:
        values: ``gemm_half``/``gemm_tf32``/``gemm_fp32`` (fraction of the unit's dense peak reached by a
            large linear/matmul), ``conv_*`` (the same for convolutions), ``dwconv`` (fraction of the FP32
            CUDA-core peak for depthwise/grouped convolutions), ``bw_eff`` (fraction of the datasheet DRAM
            bandwidth reached by memory-bound kernels), ``kernel_s`` (fixed seconds per kernel: launch, tail).
        by_generation: per GPU architecture (``volta``, ``ampere``...) overrides of any of those keys.
        calibration: ``published-fit`` (fitted on published measurements) or ``device`` (measured on this
            GPU by ``paddlefit calibrate``).
        provenance: where the values come from (rows, date, residuals), as stored in the file.
    """

    values: dict[str, float]
    by_generation: dict[str, dict[str, float]] = field(default_factory=dict)
    calibration: str = "published-fit"
    provenance: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, architecture: str | None = None) -> float:
        """The value of ``key`` for a GPU of ``architecture`` (its override, else the global value)."""
        gen = self.by_generation.get((architecture or "").lower(), {})
        return float(gen.get(key, self.values[key]))


#: Allowed range of each parameter: efficiencies between 0.1% and 100% of the unit's peak; at most 1 ms per kernel.
PARAM_RANGE = {k: (1e-3, 1.0) for k in PARAM_KEYS} | {"kernel_s": (0.0, 1e-3)}


def is_finite_number(value: Any) -> bool:
    """True for an int or float (not a bool) that is finite as a float; False for NaN, infinities and JSON
    integers too large for a float (``float()`` raises OverflowError for those)."""
    try:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(float(value))
    except OverflowError:
        return False


def _check_value(key: str, v: Any, origin: str, where: str) -> float:
    if not is_finite_number(v):
        raise CatalogError(f"GPU model parameters `{origin}`, {where}, key `{key}`: expected a finite number, got "
                           f"{str(v)[:40]!r}.")  # fmt: skip
    lo, hi = PARAM_RANGE[key]
    if not (lo < v <= hi if lo == 0 else lo <= v <= hi):
        raise CatalogError(f"GPU model parameters `{origin}`, {where}, key `{key}`: {v!r} is outside "
                           f"{'(' if lo == 0 else '['}{lo:g}, {hi:g}]; rerun `paddlefit calibrate` (or refit with "
                           "`python bench/gpu_fit.py --write`).")  # fmt: skip
    return float(v)


def parse_perf_params(doc: Any, origin: str) -> PerfParams:
    """Validate a parameter document (the JSON of ``gpu_perf_params.json``).

    Raises:
        CatalogError: not an object, a missing or unknown key, or a value out of range (names the key).
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("values"), dict):
        raise CatalogError(f"GPU model parameters `{origin}`: expected a JSON object with a `values` object.")
    vals = doc["values"]
    missing = [k for k in PARAM_KEYS if k not in vals]
    unknown = [k for k in vals if k not in PARAM_KEYS]
    if missing or unknown:
        raise CatalogError(f"GPU model parameters `{origin}`, `values`: missing {missing or 'none'}, unknown "
                           f"{unknown or 'none'}; the keys are {', '.join(PARAM_KEYS)}.")  # fmt: skip
    values = {k: _check_value(k, vals[k], origin, "`values`") for k in PARAM_KEYS}
    gens: dict[str, dict[str, float]] = {}
    by_gen = doc.get("by_generation") or {}
    if not isinstance(by_gen, dict):
        raise CatalogError(f"GPU model parameters `{origin}`, key `by_generation`: expected an object of "
                           "architecture -> {key: value}, got " + type(by_gen).__name__ + ".")  # fmt: skip
    prov = doc.get("provenance") or {}
    if not isinstance(prov, dict):
        raise CatalogError(f"GPU model parameters `{origin}`, key `provenance`: expected an object, got "
                           f"{type(prov).__name__}.")  # fmt: skip
    for arch, over in by_gen.items():
        if not isinstance(over, dict):
            raise CatalogError(f"GPU model parameters `{origin}`, `by_generation.{arch}`: expected an object.")
        bad = [k for k in over if k not in PARAM_KEYS]
        if bad:
            raise CatalogError(f"GPU model parameters `{origin}`, `by_generation.{arch}`: unknown key(s) "
                               f"{', '.join(bad)}; the keys are {', '.join(PARAM_KEYS)}.")  # fmt: skip
        gens[str(arch).lower()] = {k: _check_value(k, v, origin, f"`by_generation.{arch}`") for k, v in over.items()}
    cal = doc.get("calibration", "published-fit")
    if cal not in ("published-fit", "device"):
        raise CatalogError(f"GPU model parameters `{origin}`, key `calibration`: {cal!r} is not `published-fit` "
                           "or `device`.")  # fmt: skip
    return PerfParams(values, gens, cal, dict(prov))


def load_perf_params() -> PerfParams:
    """The shipped fitted parameters (``paddlefit/catalog/data/gpu_perf_params.json``).

    Raises:
        CatalogError: the file is malformed.
    """
    text = resources.files("paddlefit.catalog").joinpath("data/gpu_perf_params.json").read_text(encoding="utf-8")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise CatalogError(f"GPU model parameters: not valid JSON: {exc}.") from None
    return parse_perf_params(doc, "paddlefit/catalog/data/gpu_perf_params.json")


# ---------------------------------------------------------------- AMP: which dtype each op runs in


def amp_lists(half: str, level: str) -> tuple[frozenset[str], frozenset[str]]:
    """(white, black) op lists of Paddle's AMP for ``half`` (``float16``/``bfloat16``) at ``level`` (O1/O2).

    Read from the installed ``paddle.amp.amp_lists`` (``white_list()[dtype][level]``, ``black_list()...``) so
    they follow the user's Paddle; the copy below is Paddle 3.3.1's, used when Paddle is not importable.
    """
    try:
        from paddle.amp import amp_lists as al

        return frozenset(al.white_list()[half][level]), frozenset(al.black_list()[half][level])
    except Exception:  # Paddle missing or a version without these functions: Paddle 3.3.1's lists
        white = frozenset({"conv2d", "einsum", "matmul", "matmul_v2", "linear_v2", "max_pool2d_with_index", "mul",
                           "fused_gemm_epilogue", "fused_rotary_position_embedding", "flash_attn"})  # fmt: skip
        extra = frozenset({"linear_interp_v2", "nearest_interp_v2", "bilinear_interp_v2", "bicubic_interp_v2",
                           "trilinear_interp_v2", "lookup_table", "lookup_table_v2", "scatter"})  # fmt: skip
        black = frozenset({"exp", "log", "rsqrt", "pow", "square", "reduce_sum", "mean", "reduce_mean",
                           "group_norm", "layer_norm", "softmax", "log_softmax", "softmax_with_cross_entropy",
                           "cross_entropy", "cross_entropy2"})  # fmt: skip
        return white, (black | extra) if level == "O1" else extra


#: Trace op name -> the names Paddle's AMP lists use for it (legacy and eager names).
_AMP_NAMES = {
    "linear": ("linear", "linear_v2", "matmul_v2"),
    "matmul": ("matmul", "matmul_v2"),
    "conv2d": ("conv2d",),
    "conv1d": ("conv2d",),  # F.conv1d unsqueezes and runs the conv2d op (python/paddle/nn/functional/conv.py)
    "max_pool": ("pool2d",),
    "avg_pool": ("pool2d",),
    "add": ("elementwise_add",),
    "multiply": ("elementwise_mul",),
    "subtract": ("elementwise_sub",),
    "divide": ("elementwise_div",),
    "embedding": ("embedding", "lookup_table_v2"),
    "interpolate": ("bilinear_interp_v2", "nearest_interp_v2", "linear_interp_v2"),
    "reduce_mean": ("mean", "reduce_mean"),
    "reduce_sum": ("sum", "reduce_sum"),
}


@dataclass(frozen=True)
class AmpOp:
    """An op of the trace with the dtypes it runs in under a precision.

    Attributes:
        op: the traced op.
        compute: dtype the kernel computes in (``float32``, ``float16``, ``bfloat16``).
        in_dtypes: dtype of each input as the kernel reads it (after casts).
        out_dtype: dtype of its floating outputs.
        casts: (numel, from_dtype, to_dtype, is_param) of each cast Paddle inserts before the op.
    """

    op: TracedOp
    compute: str
    in_dtypes: tuple[str, ...]
    out_dtype: str
    casts: tuple[tuple[int, str, str, bool], ...] = ()


def assign_dtypes(ops: list[TracedOp], precision: str) -> list[AmpOp]:
    """Run Paddle's AMP dtype rules over the trace.

    Rules (Paddle ``paddle/fluid/imperative/amp_utils.h`` ``GetAmpDestDtype``/``GetPromoteType``, with the
    lists of ``python/paddle/amp/amp_lists.py`` looked up by the ops' fluid names, e.g. ``linear_v2``,
    ``matmul_v2``, ``lookup_table_v2``): white-list ops run in half precision, their fp32 inputs cast on every
    call (parameters too: there is no cast cache); black-list ops run in fp32; every other op is promoted: fp32
    if any floating input is fp32, else half (batch_norm and layer_norm look at X only and never cast their
    scale, bias and statistics). O2 applies the same rules (``auto_cast(use_promote=True)`` is the default) to
    parameters that ``paddle.amp.decorate(level='O2')`` stored in half, except BatchNorm's (always fp32) and
    LayerNorm's under fp16 (``python/paddle/amp/auto_cast.py``); O2's black list is only the extra list
    (embedding, interpolation, scatter). ``fp32``: everything fp32.

    Args:
        ops: the forward ops (any batch).
        precision: ``fp32``, ``fp16-o1``, ``fp16-o2``, ``bf16-o1`` or ``bf16-o2`` (the precision Paddle really
            runs on the GPU, after the compute-capability fallback).
    """
    if precision == "fp32":
        return [AmpOp(o, "float32", tuple(t.dtype for t in o.inputs), "float32") for o in ops]
    half = "bfloat16" if precision.startswith("bf16") else "float16"
    level = "O2" if precision.endswith("o2") else "O1"
    white, black = amp_lists(half, level)
    dt: dict[int, str] = {}
    out: list[AmpOp] = []
    last_float = "float32"

    def cur(t: TensorRef, op: TracedOp) -> str:
        if not t.floating:
            return t.dtype
        if t.tid in dt:
            return dt[t.tid]
        if t.param:
            keep32 = op.op == "batch_norm" or (op.cls == "norm" and half == "float16")
            return half if level == "O2" and not keep32 else "float32"
        return last_float  # produced by an op the trace does not see: take the flow's dtype

    for o in ops:
        names = _AMP_NAMES.get(o.op, (o.op,))
        ins = [cur(t, o) for t in o.inputs]
        floats = [d for t, d in zip(o.inputs, ins, strict=True) if t.floating]
        if o.cls == "view":
            dst = floats[0] if floats else last_float
        elif any(n in black for n in names):
            dst = "float32"
        elif any(n in white for n in names):
            dst = half
        elif o.cls == "norm":
            dst = ins[0] if ins and o.inputs[0].floating else "float32"
        else:
            dst = "float32" if "float32" in floats else (half if floats else "float32")
        casts = []
        new_in = []
        for t, d in zip(o.inputs, ins, strict=True):
            want = d
            if t.floating and d != dst and o.cls not in ("view",) and not (o.cls == "norm" and t.param):
                casts.append((t.numel, d, dst, t.param))
                want = dst
            new_in.append(want)
        for t in o.outputs:
            if t.floating:
                dt[t.tid] = dst
        if floats or o.outputs:
            last_float = dst
        out.append(AmpOp(o, dst, tuple(new_in), dst, tuple(casts)))
    return out


# ---------------------------------------------------------------- kernels of a step


@dataclass(frozen=True)
class Kernel:
    """One GPU kernel of a training step.

    Attributes:
        cls: op class it is accounted to (:data:`~paddlefit.estimate.optrace.OP_CLASSES`, ``optimizer``,
            ``amp_cast``).
        op: name (``conv2d``, ``conv2d.dgrad``, ``adam``...).
        phase: ``forward``, ``backward`` or ``optimizer``.
        flops: floating-point operations.
        bytes: DRAM bytes read + written.
        unit: ``half``, ``tf32``, ``fp32`` (CUDA cores), ``dwconv`` (CUDA cores) or ``memory``.
        gemm: (batch, M, N, K) for GEMM kernels.
        count: how many identical kernels this row stands for.
    """

    cls: str
    op: str
    phase: str
    flops: float
    bytes: float
    unit: str
    gemm: tuple[int, int, int, int] | None = None
    count: int = 1


def _nbytes(t: TensorRef, dtype: str) -> int:
    return t.numel * dtype_bytes(dtype)


def _gemm_unit(compute: str, gpu: Any, cls: str) -> str:
    if cls == "dwconv":
        return "dwconv"
    if compute in ("float16", "bfloat16"):
        return "half"
    return "tf32" if getattr(gpu, "tf32_tflops", None) else "fp32"


def step_kernels(ops: list[TracedOp], precision: str, gpu: Any, optimizer: str, trainable_params: int,
                 trainable_tensors: int) -> list[Kernel]:  # fmt: skip
    """The kernels of one training step (forward, backward, AMP casts, optimizer) of ``ops`` on ``gpu``.

    Args:
        ops: forward ops at the micro-batch (:meth:`OpTrace.at`).
        precision: the precision Paddle runs on this GPU (see :func:`assign_dtypes`).
        gpu: a :class:`~paddlefit.catalog.gpus.GPU` (``tf32_tflops`` decides whether fp32 GEMMs use TF32).
        optimizer: ``sgd``, ``momentum``, ``adam`` or ``adamw``.
        trainable_params, trainable_tensors: from :func:`~paddlefit.estimate.memory.param_info`.
    """
    amp = assign_dtypes(ops, precision)
    ks: list[Kernel] = []
    for a in amp:
        o = a.op
        if o.cls == "view":
            continue
        for numel, src, dst, is_param in a.casts:  # a cast kernel: read src, write dst
            cast_b = numel * (dtype_bytes(src) + dtype_bytes(dst))
            ks.append(Kernel("amp_cast", "cast", "forward", 0, cast_b, "memory"))
            if is_param:  # O1: the half gradient of a cast weight is cast back to the fp32 parameter's dtype
                ks.append(Kernel("amp_cast", "cast.grad", "backward", 0, cast_b, "memory"))
        in_b = sum(_nbytes(t, d) for t, d in zip(o.inputs, a.in_dtypes, strict=True))
        out_b = sum(_nbytes(t, a.out_dtype if t.floating else t.dtype) for t in o.outputs)
        act_out = o.outputs[0] if o.outputs else None
        if o.cls in ("gemm", "conv", "dwconv") and o.gemm:
            unit = _gemm_unit(a.compute, gpu, o.cls)
            g, m, n, k = o.gemm
            x, w = (*o.inputs, None, None)[:2]
            ks.append(Kernel(o.cls, o.op, "forward", o.flops, in_b + out_b, unit, o.gemm))
            eb = dtype_bytes(a.compute)
            if o.cls == "conv" and unit == "half" and o.layout.upper().startswith("NC") and act_out is not None:
                # tensor-core convolutions run channels-last: cuDNN transposes NCHW tensors around the kernel
                # (NVIDIA Deep Learning Performance Guide, "Convolutional Layers User's Guide", Tensor Layouts in
                # Memory: NCHW vs NHWC): x and y in the forward; dy, dx and x (for the weight gradient) after
                xn = x.numel if x is not None else 0
                ks.append(Kernel("move", "nchw_transpose", "forward", 0, 2 * eb * (xn + act_out.numel), "memory",
                                 count=2))  # x in, y out  # fmt: skip
                ks.append(Kernel("move", "nchw_transpose", "backward", 0, 2 * eb * (2 * xn + act_out.numel),
                                 "memory", count=3))  # dy in (dgrad and wgrad), dx out, x in (wgrad)  # fmt: skip
            gemm_flops = 2 * g * m * n * k
            if x is not None and x.grad:  # dX = dY . W^T : (M, K) from (M, N) x (N, K)
                ks.append(Kernel(o.cls, o.op + ".dgrad", "backward", gemm_flops,
                                 eb * g * (m * n + n * k + m * k), unit, (g, m, k, n)))  # fmt: skip
            if w is not None and w.grad:  # dW = X^T . dY : (K, N) reduced over M
                ks.append(Kernel(o.cls, o.op + ".wgrad", "backward", gemm_flops,
                                 eb * g * (m * k + m * n + k * n), unit, (g, k, n, m)))  # fmt: skip
            if len(o.inputs) > 2 and o.inputs[2].grad and act_out is not None:  # bias: reduce dY
                ks.append(Kernel("reduce", o.op + ".bias_grad", "backward", act_out.numel,
                                 act_out.numel * eb + o.inputs[2].numel * 4, "memory"))  # fmt: skip
            continue
        needs = [t for t in o.inputs if t.grad and t.floating]
        eb = dtype_bytes(a.out_dtype)
        dy = act_out.numel * eb if act_out is not None else 0
        if o.cls == "norm":
            x = o.inputs[0]
            fwd_b = in_b + _nbytes(x, a.in_dtypes[0]) + out_b  # statistics pass + normalise pass
            ks.append(Kernel(o.cls, o.op, "forward", o.flops, fwd_b, "memory"))
            if needs:
                xb = _nbytes(x, a.in_dtypes[0])
                ks.append(Kernel(o.cls, o.op + ".grad", "backward", o.flops, 2 * (xb + dy) + xb
                                 + sum(t.numel * 4 for t in o.inputs[1:] if t.param), "memory"))  # fmt: skip
            continue
        if o.cls == "embedding":
            ks.append(Kernel(o.cls, o.op, "forward", 0, 2 * out_b + in_b - sum(_nbytes(t, "float32") for t in o.inputs
                                                                                  if t.param), "memory"))  # fmt: skip
            w = next((t for t in o.inputs if t.param), None)
            if w is not None and w.grad:
                ks.append(Kernel(o.cls, "embedding.grad", "backward", 0, w.numel * 4 + 2 * dy, "memory"))
            continue
        if o.op == "dropout":
            x = o.inputs[0] if o.inputs else None
            n = x.numel if x is not None else 0
            ks.append(Kernel(o.cls, o.op, "forward", 0, in_b + out_b + n, "memory"))  # + uint8 mask
            if needs:
                ks.append(Kernel(o.cls, "dropout.grad", "backward", 0, 2 * dy + n, "memory"))
            continue
        ks.append(Kernel(o.cls, o.op, "forward", o.flops, in_b + out_b, "memory"))
        if needs:
            saved = _saved_for_grad(o, a)
            ks.append(Kernel(o.cls, o.op + ".grad", "backward", o.flops,
                             dy + saved + sum(_nbytes(t, d) for t, d in zip(o.inputs, a.in_dtypes, strict=True)
                                              if t.grad and t.floating), "memory"))  # fmt: skip
    # ---- optimizer, gradient zeroing, loss scaling: one kernel per parameter tensor each
    grad_b = 2 if precision.endswith("o2") else 4
    tensors = max(trainable_tensors, 1)
    ks.append(Kernel("optimizer", optimizer, "optimizer", 0, OPTIMIZER_BYTES_PER_PARAM[optimizer] * trainable_params,
                     "memory", count=tensors))  # fmt: skip
    ks.append(Kernel("optimizer", "clear_grad", "optimizer", 0, grad_b * trainable_params, "memory", count=tensors))
    if precision.startswith("fp16"):  # GradScaler: check_finite_and_unscale reads and writes every gradient
        ks.append(Kernel("optimizer", "check_finite_and_unscale", "optimizer", 0, 2 * grad_b * trainable_params,
                         "memory", count=tensors))  # fmt: skip
    return ks


#: Op name -> which of its forward tensors its grad op reads (``paddle/phi/ops/yaml/backward.yaml``):
#: "out" (relu, relu6, sigmoid, tanh, softmax, exp: the grad takes Out), "x" (gelu, swish, hardswish, mish,
#: leaky_relu, elu, multiply, divide...), "none" (add, subtract, concat, transpose, interpolate, reductions:
#: shapes only, ``no_need_buffer``), "x_out" (pool2d, max and avg alike; silu).
_SAVED = {"relu": "out", "relu6": "out", "sigmoid": "out", "tanh": "out", "softmax": "out", "log_softmax": "out",
          "exp": "out", "add": "none", "subtract": "none", "concat": "none", "transpose": "none",
          "interpolate": "none", "reduce_mean": "none", "reduce_sum": "none", "avg_pool": "x_out",
          "max_pool": "x_out", "silu": "x_out"}  # fmt: skip


def _saved_for_grad(o: TracedOp, a: AmpOp) -> int:
    rule = _SAVED.get(o.op, "x")
    if rule == "none":
        return 0
    out_b = sum(_nbytes(t, a.out_dtype) for t in o.outputs if t.floating)
    in_b = sum(_nbytes(t, d) for t, d in zip(o.inputs, a.in_dtypes, strict=True) if t.floating)
    return {"out": out_b, "x": in_b, "x_out": in_b + out_b}[rule]


# ---------------------------------------------------------------- time


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
        bandwidth=gpu.mem_bw_gbps * 1e9,
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
                  trainable_tensors: int, params: PerfParams) -> StepEstimate:  # fmt: skip
    """Predicted device seconds of one training step of ``ops`` on ``gpu`` (see the module docstring)."""
    kernels = step_kernels(ops, precision, gpu, optimizer, trainable_params, trainable_tensors)
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


# ---------------------------------------------------------------- memory under AMP


def saved_activation_bytes(ops: list[TracedOp], precision: str) -> tuple[float, float]:
    """(activation bytes, cast-weight bytes) that the forward keeps for the backward under ``precision``.

    Each op keeps what its grad op reads (``paddle/phi/ops/yaml/backward.yaml``): GEMM/conv their inputs X and W,
    norms X, activations X or Out (:data:`_SAVED`), dropout its uint8 mask, embedding the ids; a tensor kept by two
    ops is counted once, and an AMP cast copy is a tensor of its own (softmax keeping its fp32 output while the next
    matmul keeps the fp16 copy of it holds both). Each tensor takes the dtype the AMP rules give it
    (:func:`assign_dtypes`), so under O1 the output of a white-list op is fp16 and the output of a black-list op
    (softmax, layer_norm) fp32. Parameters are model states, not activations, except the half-precision copies AMP
    O1 makes of the weights of white-list ops: those are kept for the backward too and are returned separately (they
    do not grow with the batch). Used as the ratio of AMP to fp32 activation memory applied to the CPU probe's
    measured activations; the probe stays the measurement, the trace gives the dtype mix.
    """
    amp = assign_dtypes(ops, precision)
    kept: dict[tuple[int, str], int] = {}  # (tensor, dtype it is kept in) -> bytes
    cast_w = 0
    for a in amp:
        o = a.op
        if o.cls == "view" or not any(t.grad for t in o.inputs if t.floating):
            continue
        pairs = list(zip(o.inputs, a.in_dtypes, strict=True))
        if o.cls in ("gemm", "conv", "dwconv"):
            for t, d in pairs[:2]:
                if t.param:
                    if d != "float32" and d != t.dtype and precision.endswith("o1"):
                        cast_w += t.numel * dtype_bytes(d)
                elif t.floating:
                    kept[t.tid, d] = t.numel * dtype_bytes(d)
            continue
        if o.cls == "norm":
            t, d = pairs[0]
            kept[t.tid, d] = t.numel * dtype_bytes(d)
            continue
        if o.op == "dropout":
            if o.outputs:
                kept[o.outputs[0].tid, "mask"] = o.outputs[0].numel  # uint8 mask
            continue
        if o.cls == "embedding":
            for t in o.inputs:
                if not t.floating:
                    kept[t.tid, t.dtype] = t.numel * dtype_bytes(t.dtype)
            continue
        rule = _SAVED.get(o.op, "x")
        if rule in ("x", "x_out"):
            for t, d in pairs:
                if t.floating and not t.param:
                    kept[t.tid, d] = t.numel * dtype_bytes(d)
        if rule in ("out", "x_out"):
            for t in o.outputs:
                if t.floating:
                    kept[t.tid, a.out_dtype] = t.numel * dtype_bytes(a.out_dtype)
    return float(sum(kept.values())), float(cast_w)
