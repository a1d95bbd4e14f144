"""The GPU kernels of one training step: forward, backward, AMP casts and the optimizer update, with FLOPs and bytes.

:func:`step_kernels` turns a forward trace (:mod:`paddlefit.estimate.optrace`) under a precision
(:func:`~paddlefit.estimate.amp.assign_dtypes`) into :class:`Kernel` rows; :mod:`paddlefit.estimate.gpu_model`
times them.

Which unit: GEMM-like ops (``linear``, ``matmul``, ``conv2d``) use the FP16/BF16 tensor cores when AMP runs
them in half precision (Paddle's AMP lists, ``python/paddle/amp/amp_lists.py``), TF32 tensor cores for fp32
on Ampere and later (Paddle enables TF32 for cuBLAS and cuDNN by default, see :data:`TF32_SOURCE`), else the
FP32 CUDA cores: before Ampere, and when the job turns TF32 off (``tf32: false``, see :data:`TF32_OFF_SOURCE`).
Depthwise and grouped
convolutions run on CUDA cores (Paddle's own ``depthwise_conv2d`` kernel, ``paddle/phi/kernels/gpu/
depthwise_conv.h``). Every other op is a memory-bound kernel.

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

from dataclasses import dataclass
from typing import Any

from paddlefit.estimate.amp import SAVED_FOR_GRAD, AmpOp, assign_dtypes, dtype_bytes
from paddlefit.estimate.optrace import TensorRef, TracedOp

TF32_SOURCE = (
    "Paddle paddle/phi/backends/context_pool.cc: allow_tf32_cublas = true, allow_tf32_cudnn = true; the GPU "
    "context's cuBLAS handle uses CUBLAS_TF32_TENSOR_OP_MATH (gpu_context.cc InitBlasHandle) and cuDNN conv "
    "descriptors keep CUDNN_DEFAULT_MATH unless allow_tf32 is false (phi/backends/gpu/cuda/cudnn_desc.h)"
)
TF32_OFF_SOURCE = (
    "Paddle paddle/fluid/pybind/pybind.cc binds core.set_cublas_switch / set_cudnn_switch to SetAllowTF32Cublas / "
    "SetAllowTF32Cudnn, the globals of paddle/phi/backends/context_pool.cc; with allow_tf32_cudnn false the cuDNN conv "
    "helpers set CUDNN_FMA_MATH for float32 on CC >= 8.0 (paddle/phi/kernels/gpudnn/conv_cudnn_v7.h "
    "SetConvolutionMathType); CublasCall takes the CUBLAS_TF32_TENSOR_OP_MATH handle only while AllowTF32Cublas() "
    "(paddle/phi/backends/custom/custom_context.cc)"
)

#: Bytes moved per trainable parameter by one optimizer update (reads + writes), fp32 training:
#: SGD reads p, g and writes p (12); Momentum also reads and writes the velocity (20); Adam/AdamW read p, g,
#: m, v and write p, m, v (28) (Paddle ``adam_``/``adamw_`` kernels, ``paddle/phi/kernels/gpu/adam_kernel.cu``).
#: Under AMP O2 with master weights, Adam reads the fp32 master, fp16 grad, m, v and writes master, m, v and
#: the fp16 copy: 4+2+4+4 + 4+4+4+2 = 28 as well.
OPTIMIZER_BYTES_PER_PARAM = {"sgd": 12, "momentum": 20, "adam": 28, "adamw": 28}


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
        unit: a compute unit (:data:`paddlefit.catalog.units.COMPUTE_UNITS`: ``half``, ``tf32``, ``fp32`` CUDA
            cores, ``int8``), or ``dwconv`` (CUDA cores) or ``memory`` (see :mod:`paddlefit.catalog.units`).
        gemm: (batch, M, N, K) for GEMM kernels.
        count: how many identical kernels this row stands for.
        conv: the geometry of the convolution this kernel belongs to (forward, data and weight gradient;
            :attr:`~paddlefit.estimate.optrace.TracedOp.conv`), else None.
    """

    cls: str
    op: str
    phase: str
    flops: float
    bytes: float
    unit: str
    gemm: tuple[int, int, int, int] | None = None
    count: int = 1
    conv: tuple[int, ...] | None = None


def _nbytes(t: TensorRef, dtype: str) -> int:
    return t.numel * dtype_bytes(dtype)


def _gemm_unit(compute: str, gpu: Any, cls: str, tf32: bool = True) -> str:
    """The unit a GEMM-like op runs on: ``dwconv``, ``half`` (AMP's fp16/bf16), ``tf32`` (fp32 on a GPU with TF32
    tensor cores while ``tf32`` is on) or ``fp32`` (CUDA cores)."""
    if cls == "dwconv":
        return "dwconv"
    if compute in ("float16", "bfloat16"):
        return "half"
    return "tf32" if tf32 and getattr(gpu, "tf32_tflops", None) else "fp32"


def step_kernels(
    ops: list[TracedOp],
    precision: str,
    gpu: Any,
    optimizer: str,
    trainable_params: int,
    trainable_tensors: int,
    tf32: bool = True,
) -> list[Kernel]:
    """The kernels of one training step (forward, backward, AMP casts, optimizer) of ``ops`` on ``gpu``.

    Args:
        ops: forward ops at the micro-batch (:meth:`~paddlefit.estimate.optrace.OpTrace.at`).
        precision: the precision Paddle runs on this GPU (see :func:`assign_dtypes`).
        gpu: a :class:`~paddlefit.catalog.gpus.GPU` (``tf32_tflops`` decides whether fp32 GEMMs use TF32).
        optimizer: ``sgd``, ``momentum``, ``adam`` or ``adamw``.
        trainable_params, trainable_tensors: from :func:`~paddlefit.models.build.param_info`.
        tf32: Paddle's TF32 switches are on (its default; the job's ``tf32``): fp32 GEMMs/convs use the TF32 tensor
            cores where the GPU has them; False puts them on the FP32 CUDA cores (:data:`TF32_OFF_SOURCE`).
    """
    ks: list[Kernel] = []
    for a in assign_dtypes(ops, precision):
        o = a.op
        if o.cls == "view":
            continue
        ks += _cast_kernels(a)
        in_b = sum(_nbytes(t, d) for t, d in zip(o.inputs, a.in_dtypes, strict=True))
        out_b = sum(_nbytes(t, a.out_dtype if t.floating else t.dtype) for t in o.outputs)
        if o.cls == "attention" and o.gemm:
            ks += attention_kernels(o, a, _gemm_unit(a.compute, gpu, "gemm"), in_b, out_b)
        elif o.cls in ("gemm", "conv", "dwconv") and o.gemm:
            ks += _gemm_kernels(a, _gemm_unit(a.compute, gpu, o.cls, tf32), in_b, out_b)
        else:
            ks += _memory_kernels(a, in_b, out_b)
    return ks + _optimizer_kernels(precision, optimizer, trainable_params, trainable_tensors)


def _cast_kernels(a: AmpOp) -> list[Kernel]:
    """AMP's cast kernels before op ``a`` (read src, write dst); O1's cast weights also cast their half gradient
    back to the fp32 parameter's dtype."""
    ks = []
    for numel, src, dst, is_param in a.casts:
        cast_b = numel * (dtype_bytes(src) + dtype_bytes(dst))
        ks.append(Kernel("amp_cast", "cast", "forward", 0, cast_b, "memory"))
        if is_param:
            ks.append(Kernel("amp_cast", "cast.grad", "backward", 0, cast_b, "memory"))
    return ks


def _gemm_kernels(a: AmpOp, unit: str, in_b: int, out_b: int) -> list[Kernel]:
    """A GEMM-like op's forward, its dgrad/wgrad GEMMs for the operands that need a gradient, the bias gradient,
    and cuDNN's NCHW<->NHWC transposes around a half-precision convolution on NCHW tensors."""
    o = a.op
    g, m, n, k = o.gemm  # type: ignore[misc]
    x, w = (*o.inputs, None, None)[:2]
    act_out = o.outputs[0] if o.outputs else None
    geo = o.conv if o.cls == "conv" else None
    ks = [Kernel(o.cls, o.op, "forward", o.flops, in_b + out_b, unit, o.gemm, conv=geo)]
    eb = dtype_bytes(a.compute)
    if o.cls == "conv" and unit == "half" and o.layout.upper().startswith("NC") and act_out is not None:
        # tensor-core convolutions run channels-last: cuDNN transposes NCHW tensors around the kernel
        # (NVIDIA Deep Learning Performance Guide, "Convolutional Layers User's Guide", Tensor Layouts in
        # Memory: NCHW vs NHWC): x and y in the forward; dy, dx and x (for the weight gradient) after
        xn = x.numel if x is not None else 0
        ks.append(
            Kernel("move", "nchw_transpose", "forward", 0, 2 * eb * (xn + act_out.numel), "memory", count=2)
        )  # x in, y out
        ks.append(
            Kernel("move", "nchw_transpose", "backward", 0, 2 * eb * (2 * xn + act_out.numel), "memory", count=3)
        )  # dy in (dgrad and wgrad), dx out, x in (wgrad)
    gemm_flops = 2 * g * m * n * k
    if x is not None and x.grad:  # dX = dY . W^T : (M, K) from (M, N) x (N, K)
        ks.append(
            Kernel(
                o.cls,
                o.op + ".dgrad",
                "backward",
                gemm_flops,
                eb * g * (m * n + n * k + m * k),
                unit,
                (g, m, k, n),
                conv=geo,
            )
        )
    if w is not None and w.grad:  # dW = X^T . dY : (K, N) reduced over M
        ks.append(
            Kernel(
                o.cls,
                o.op + ".wgrad",
                "backward",
                gemm_flops,
                eb * g * (m * k + m * n + k * n),
                unit,
                (g, k, n, m),
                conv=geo,
            )
        )
    if len(o.inputs) > 2 and o.inputs[2].grad and act_out is not None:  # bias: reduce dY
        ks.append(
            Kernel(
                "reduce",
                o.op + ".bias_grad",
                "backward",
                act_out.numel,
                act_out.numel * eb + o.inputs[2].numel * 4,
                "memory",
            )
        )
    return ks


def _memory_kernels(a: AmpOp, in_b: int, out_b: int) -> list[Kernel]:
    """A memory-bound op's forward and, when an input needs a gradient, its backward: normalisations (a
    statistics pass), embeddings (a scatter-add gradient), dropout (its uint8 mask), and the rest."""
    o = a.op
    act_out = o.outputs[0] if o.outputs else None
    needs = [t for t in o.inputs if t.grad and t.floating]
    dy = act_out.numel * dtype_bytes(a.out_dtype) if act_out is not None else 0
    if o.cls == "norm":
        xb = _nbytes(o.inputs[0], a.in_dtypes[0])
        ks = [Kernel(o.cls, o.op, "forward", o.flops, in_b + xb + out_b, "memory")]  # statistics + normalise
        if needs:
            ks.append(
                Kernel(
                    o.cls,
                    o.op + ".grad",
                    "backward",
                    o.flops,
                    2 * (xb + dy) + xb + sum(t.numel * 4 for t in o.inputs[1:] if t.param),
                    "memory",
                )
            )
        return ks
    if o.cls == "embedding":
        ks = [
            Kernel(
                o.cls,
                o.op,
                "forward",
                0,
                2 * out_b + in_b - sum(_nbytes(t, "float32") for t in o.inputs if t.param),
                "memory",
            )
        ]
        w = next((t for t in o.inputs if t.param), None)
        if w is not None and w.grad:
            ks.append(Kernel(o.cls, "embedding.grad", "backward", 0, w.numel * 4 + 2 * dy, "memory"))
        return ks
    if o.op == "dropout":
        n = o.inputs[0].numel if o.inputs else 0
        ks = [Kernel(o.cls, o.op, "forward", 0, in_b + out_b + n, "memory")]  # + uint8 mask
        return ks + ([Kernel(o.cls, "dropout.grad", "backward", 0, 2 * dy + n, "memory")] if needs else [])
    ks = [Kernel(o.cls, o.op, "forward", o.flops, in_b + out_b, "memory")]
    if needs:
        grads_in = sum(_nbytes(t, d) for t, d in zip(o.inputs, a.in_dtypes, strict=True) if t.grad and t.floating)
        ks.append(Kernel(o.cls, o.op + ".grad", "backward", o.flops, dy + _saved_for_grad(o, a) + grads_in, "memory"))
    return ks


def _optimizer_kernels(precision: str, optimizer: str, trainable_params: int, trainable_tensors: int) -> list[Kernel]:
    """The optimizer update, gradient zeroing and (fp16) loss-scale check: one kernel per parameter tensor each."""
    grad_b = 2 if precision.endswith("o2") else 4
    tensors = max(trainable_tensors, 1)
    ks = [
        Kernel(
            "optimizer",
            optimizer,
            "optimizer",
            0,
            OPTIMIZER_BYTES_PER_PARAM[optimizer] * trainable_params,
            "memory",
            count=tensors,
        ),
        Kernel("optimizer", "clear_grad", "optimizer", 0, grad_b * trainable_params, "memory", count=tensors),
    ]
    if precision.startswith("fp16"):  # GradScaler: check_finite_and_unscale reads and writes every gradient
        ks.append(
            Kernel(
                "optimizer",
                "check_finite_and_unscale",
                "optimizer",
                0,
                2 * grad_b * trainable_params,
                "memory",
                count=tensors,
            )
        )
    return ks


def attention_kernels(o: TracedOp, a: AmpOp, unit: str, in_b: int, out_b: int) -> list[Kernel]:
    """Forward and backward kernels of one flash-attention op (class ``attention``, :mod:`paddlefit.estimate.fused`).

    Forward: ``o.flops`` on ``unit`` (tensor cores in half precision), reading Q, K, V (and the mask) once and
    writing O and the fp32 log-sum-exp of each query row (B·H·Sq x 4 bytes); no S x S matrix reaches DRAM
    (Dao et al., FlashAttention, arXiv 2205.14135, §3.1 and Theorem 2; FlashAttention-2, arXiv 2307.08691, Alg. 1).
    Backward (when an input needs a gradient): :data:`~paddlefit.estimate.fused.FLASH_BWD_FACTOR` x the forward
    FLOPs (S recomputed), reading Q, K, V, mask, O, dO and the log-sum-exp, writing dQ, dK, dV (FlashAttention-2
    Alg. 2), parallel over K/V blocks, so timed as GEMMs of (G, Sk, D, Sq). ``in_b``/``out_b``: bytes of the
    inputs/outputs in their AMP dtypes.
    """
    from paddlefit.estimate.fused import FLASH_BWD_FACTOR

    g, sq, d, sk = o.gemm  # type: ignore[misc]
    lse = 4 * g * sq
    ks = [Kernel("attention", o.op, "forward", o.flops, in_b + out_b + lse, unit, o.gemm)]
    grads = sum(_nbytes(t, dt) for t, dt in zip(o.inputs, a.in_dtypes, strict=True) if t.grad and t.floating)
    if grads:
        ks.append(
            Kernel(
                "attention",
                o.op + ".grad",
                "backward",
                FLASH_BWD_FACTOR * o.flops,
                in_b + 2 * out_b + lse + grads,
                unit,
                (g, sk, d, sq),
            )
        )
    return ks


def _saved_for_grad(o: TracedOp, a: AmpOp) -> int:
    """Bytes of the forward tensors that ``o``'s grad op reads (:data:`~paddlefit.estimate.amp.SAVED_FOR_GRAD`)."""
    rule = SAVED_FOR_GRAD.get(o.op, "x")
    if rule == "none":
        return 0
    out_b = sum(_nbytes(t, a.out_dtype) for t in o.outputs if t.floating)
    in_b = sum(_nbytes(t, d) for t, d in zip(o.inputs, a.in_dtypes, strict=True) if t.floating)
    return {"out": out_b, "x": in_b, "x_out": in_b + out_b}[rule]
