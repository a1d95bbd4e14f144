"""The forward pass a serving engine really runs: eval-mode ops, each engine's fusions, and its precision rules.

A model traced for training (:mod:`paddlefit.estimate.optrace`) is turned into what an inference engine launches:

1. **Eval mode** (:func:`eval_ops`, every engine). Dropout is gone (``F.dropout`` returns its input when not
   training with the default ``upscale_in_train``, ``python/paddle/nn/functional/common.py``; Paddle Inference's
   ``is_test`` / ``delete_dropout_op_pass``), batch norm uses its running statistics, so it is one affine pass
   (read x, write y; Ioffe & Szegedy 2015, §3.1), no tensor needs a gradient.
2. **Fusions** (:func:`fuse`), per engine (:data:`ENGINES`):

   - ``eager``: none; dygraph launches every op (a plain Python service under ``paddle.no_grad``).
   - ``paddle-inference``: the GPU passes of Paddle Inference on PIR programs (``kPirGpuPasses``,
     ``paddle/fluid/inference/api/paddle_pass_builder.cc``): ``conv2d_bn_fuse_pass`` (batch norm folded into a
     plain conv2d, not into a depthwise one), ``conv2d_add_act_fuse_pass`` / ``conv2d_add_fuse_pass`` (bias, a
     residual add and ReLU in cuDNN's fused conv epilogue; a residual add only when ReLU follows, and ReLU is the
     only activation of its cuDNN pattern, ``paddle/fluid/pir/transforms/gpu/conv2d_add_act_fuse_pass.cc``),
     ``matmul_add_act_fuse_pass`` (matmul + bias [+ ReLU] -> ``fc``; other activations stay,
     ``.../gpu/matmul_add_act_fuse_pass.cc``), ``matmul_scale_fuse_pass`` (a scale after a matmul folded into
     it), ``add_norm_fuse_pass`` / ``fc_elementwise_layernorm_fuse_pass`` (residual add + layer norm in one
     kernel), ``silu_fuse_pass`` (x * sigmoid(x) -> silu), ``multihead_matmul_fuse_pass`` (the attention's mask add
     inside its softmax kernel) and ``fused_flash_attn_pass`` (the attention core as one flash-attention kernel,
     where Paddle's flash attention runs: fp16 on compute capability 8.0+).
   - ``tensorrt``: Paddle's TensorRT subgraph passes (``kTRTSubgraphPasses``, same file: ``conv_bn_fuse_pass``,
     ``trt_skip_layernorm_fuse_pass``, ``trt_multihead_matmul_fuse_pass_v2/v3``, ``trt_flash_multihead_matmul_fuse
     _pass``) and TensorRT's own layer fusion (NVIDIA TensorRT "Layer Fusion Catalog": convolution / matrix
     multiply with a following ReLU or clip (GELU too in fp16/int8; :data:`TRT_EPILOGUE_ACTIVATIONS`), element-wise
     sum and scale; adjacent pointwise layers fused into one pointwise kernel; multi-head attention fused in
     fp16/int8).

3. **Precision** (:func:`engine_precision`): ``fp32`` as Paddle runs fp32 (TF32 on Ampere+ unless switched off;
   TensorRT also enables TF32 by default, ``BuilderFlag::kTF32``); ``fp16`` every op in half except Paddle's AMP
   O2 black list (``paddle.amp`` O2 / ``auto_mixed_precision_pass``; TensorRT keeps its own fp32 accumulation
   inside kernels, not modelled); ``int8`` (TensorRT only) GEMMs and convolutions on the INT8 tensor cores
   (the catalog's ``int8_tops``) reading and writing int8, every other op in fp16, as Paddle sets both TensorRT
   builder flags for ``Precision.kInt8``. Half-precision convolutions under Paddle Inference and TensorRT run
   channels-last (``transfer_layout_pass`` after ``auto_mixed_precision_pass``; TensorRT's own formats), so no
   NCHW transposes are timed for them; eager fp16 convolutions on NCHW tensors keep them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from paddlefit.estimate.amp import dtype_bytes
from paddlefit.estimate.fused import flash_rewrite
from paddlefit.estimate.kernels import Kernel, step_kernels
from paddlefit.estimate.optrace import TensorRef, TracedOp, with_layout

ENGINES = ("eager", "paddle-inference", "tensorrt")
PRECISIONS = ("fp32", "fp16", "int8")
#: Element-wise ops that are activations (one input): what an epilogue may fuse.
ACTIVATIONS = frozenset(
    {
        "relu",
        "relu6",
        "gelu",
        "sigmoid",
        "tanh",
        "silu",
        "swish",
        "hardswish",
        "hard_swish",
        "hardsigmoid",
        "hard_sigmoid",
        "leaky_relu",
        "elu",
        "mish",
        "softplus",
        "prelu",
    }
)
#: Activations TensorRT computes inside a convolution or matrix multiply kernel (NVIDIA TensorRT Developer Guide,
#: "Types of Fusions": "Convolution and ReLU Activation", "Convolution and Clip Activation" (ReLU6 and hard tanh are
#: clips), and "Convolution and GELU Activation" only with fp16 or int8 input and output on Turing or later, see
#: :data:`TRT_HALF_EPILOGUE_ACTIVATIONS`). Any other activation (sigmoid, swish, hard swish, mish, leaky ReLU...)
#: runs as its own pointwise kernel after the layer.
TRT_EPILOGUE_ACTIVATIONS = frozenset({"relu", "relu6", "hardtanh", "clip"})
TRT_HALF_EPILOGUE_ACTIVATIONS = frozenset({"gelu"})
#: Element-wise ops a multi-head attention kernel or a pointwise kernel may absorb as a scale of one tensor.
SCALES = frozenset({"multiply", "divide", "scale"})


def eval_ops(ops: list[TracedOp]) -> list[TracedOp]:
    """``ops`` as they run in eval mode under ``no_grad``: dropout removed (its readers read its input), batch norm
    as one affine element-wise pass (class ``elementwise``, 2 FLOPs per element), no tensor requiring a gradient.
    """
    alias: dict[int, TensorRef] = {}
    out: list[TracedOp] = []

    def fix(t: TensorRef) -> TensorRef:
        t = alias.get(t.tid, t)
        return replace(t, grad=False) if t.grad else t

    for o in ops:
        if o.op == "dropout" and o.inputs and o.outputs:
            alias[o.outputs[0].tid] = fix(o.inputs[0])
            continue
        ins, outs = tuple(fix(t) for t in o.inputs), tuple(fix(t) for t in o.outputs)
        if o.op == "batch_norm" and outs:
            out.append(TracedOp("batch_norm", "elementwise", 2 * outs[0].numel, ins, outs, scope=o.scope))
        else:
            out.append(replace(o, inputs=ins, outputs=outs))
    return out


def _consumers(ops: list[TracedOp]) -> dict[int, int]:
    n: dict[int, int] = {}
    for o in ops:
        for t in {t.tid for t in o.inputs}:
            n[t] = n.get(t, 0) + 1
    return n


def _main_input(o: TracedOp) -> TensorRef | None:
    """The activation an element-wise op transforms: its first floating non-parameter input of its output's size."""
    size = o.outputs[0].numel if o.outputs else -1
    for t in o.inputs:
        if t.floating and not t.param and t.numel == size:
            return t
    return None


@dataclass
class _Fused:
    """An op being built by fusion: the op and what its epilogue already holds."""

    op: TracedOp
    residual: bool = False
    act: bool = False
    bn: bool = False


def _epilogue_rule(
    engine: str, p: _Fused, x: TracedOp, others: list[TensorRef], relu_next: bool, half: bool = False
) -> str | None:
    """The pass that fuses element-wise ``x`` into the producer ``p`` of its input on ``engine``, or None
    (``half``: the engine runs fp16 or int8, where TensorRT also fuses GELU into the layer)."""
    pc, xo = p.op.cls, x.op
    acts = x.op in ACTIVATIONS and not others
    resid = xo == "add" and len(others) == 1 and not others[0].param and others[0].floating
    if engine == "paddle-inference":
        if pc == "conv" and xo == "batch_norm" and not (p.bn or p.residual or p.act):
            return "conv2d_bn_fuse_pass"
        if pc == "conv" and resid and relu_next and not (p.residual or p.act):
            return "conv2d_add_act_fuse_pass"
        if pc == "conv" and xo == "relu" and not p.act:
            return "conv2d_add_act_fuse_pass"
        if pc == "gemm" and p.op.op == "linear" and xo == "relu" and not (p.act or p.residual):
            return "matmul_add_act_fuse_pass"
        if pc == "gemm" and p.op.op == "matmul" and xo in SCALES and not others and not (p.act or p.residual):
            return "matmul_scale_fuse_pass"
        if (
            pc == "elementwise"
            and p.op.op == "sigmoid"
            and xo == "multiply"
            and others
            and p.op.inputs
            and others[0].tid == p.op.inputs[0].tid
        ):
            return "silu_fuse_pass"
        return None
    if engine == "tensorrt":
        if pc in ("conv", "dwconv", "gemm"):
            fusable = TRT_EPILOGUE_ACTIVATIONS | (TRT_HALF_EPILOGUE_ACTIVATIONS if half else frozenset())
            if xo == "batch_norm" and not (p.residual or p.act):
                return "conv_bn_fuse_pass (TensorRT scale fusion)"
            if ((acts and xo in fusable) or (xo in SCALES and not others)) and not p.act:
                return "TensorRT conv/matmul + activation fusion"
            if resid and not (p.residual or p.act):
                return "TensorRT conv/matmul + element-wise sum fusion"
            return None
        if pc == "elementwise" and x.cls == "elementwise":
            return "TensorRT pointwise fusion"
    return None


def _merge(p: _Fused, x: TracedOp, t: TensorRef, rule: str) -> _Fused:
    """``p`` with ``x`` in its epilogue: ``x``'s other inputs read (not batch norm's folded parameters), ``x``'s
    outputs written; a GEMM keeps its FLOPs (the epilogue runs in its kernel), element-wise FLOPs add up."""
    extra = tuple(u for u in x.inputs if u.tid != t.tid and not (x.op == "batch_norm" and u.param))
    flops = p.op.flops + (x.flops if p.op.cls == "elementwise" else 0)
    op = replace(p.op, inputs=p.op.inputs + extra, outputs=x.outputs, flops=flops)
    is_act = x.op in ACTIVATIONS or rule == "silu_fuse_pass"
    return _Fused(op, p.residual or x.op == "add", p.act or is_act, p.bn or x.op == "batch_norm")


def fuse_epilogues(ops: list[TracedOp], engine: str, half: bool = False) -> tuple[list[TracedOp], dict[str, int]]:
    """Fuse element-wise ops into the op that produced their input where ``engine``'s rules allow
    (:func:`_epilogue_rule`; ``half``: fp16/int8); an intermediate read by anything else is never fused away.
    Returns (ops, fusions applied per rule)."""
    readers = _consumers(ops)
    first_reader: dict[int, TracedOp] = {}
    for o in ops:
        for t in o.inputs:
            first_reader.setdefault(t.tid, o)
    built: list[_Fused] = []
    at: dict[int, int] = {}  # tensor id -> index in built of its producer
    count: dict[str, int] = {}
    for x in ops:
        t = _main_input(x) if x.cls == "elementwise" else None
        j = at.get(t.tid) if t is not None else None
        if t is not None and j is not None and readers.get(t.tid) == 1:
            others = [u for u in x.inputs if u.tid != t.tid and not (x.op == "batch_norm" and u.param)]
            nxt = first_reader.get(x.outputs[0].tid) if x.outputs else None
            relu_next = nxt is not None and nxt.op == "relu" and readers.get(x.outputs[0].tid) == 1
            rule = _epilogue_rule(engine, built[j], x, others, relu_next, half)
            if rule is not None:
                built[j] = _merge(built[j], x, t, rule)
                count[rule] = count.get(rule, 0) + 1
                for u in x.outputs:
                    at[u.tid] = j
                continue
        built.append(_Fused(x))
        for u in x.outputs:
            at[u.tid] = len(built) - 1
    return [f.op for f in built], count


def fuse_into_norm_and_softmax(ops: list[TracedOp], engine: str) -> tuple[list[TracedOp], dict[str, int]]:
    """An ``add`` read only by a layer norm (residual + norm) or by a softmax (attention mask) runs inside that
    kernel: ``add_norm_fuse_pass`` / ``trt_skip_layernorm_fuse_pass`` and the multi-head attention kernels' masked
    softmax (``multihead_matmul_fuse_pass``, ``trt_multihead_matmul_fuse_pass_v2``). Eager runs both."""
    if engine == "eager":
        return ops, {}
    readers = _consumers(ops)
    producer = {t.tid: i for i, o in enumerate(ops) for t in o.outputs}
    drop: set[int] = set()
    new: dict[int, TracedOp] = {}
    count: dict[str, int] = {}
    for i, o in enumerate(ops):
        if o.op not in ("layer_norm", "softmax") or not o.inputs:
            continue
        j = producer.get(o.inputs[0].tid)
        if j is None or ops[j].op != "add" or readers.get(o.inputs[0].tid) != 1 or j in drop:
            continue
        rule = (
            ("add_norm_fuse_pass" if engine == "paddle-inference" else "trt_skip_layernorm_fuse_pass")
            if o.op == "layer_norm"
            else "multihead_matmul_fuse_pass (masked softmax)"
        )
        drop.add(j)
        new[i] = replace(o, inputs=ops[j].inputs + o.inputs[1:], flops=o.flops + ops[j].flops)
        count[rule] = count.get(rule, 0) + 1
    return [new.get(i, o) for i, o in enumerate(ops) if i not in drop], count


def flash_applies(engine: str, precision: str, gpu: Any) -> bool:
    """The attention core runs as one fused kernel: ``fused_flash_attn_pass`` under Paddle Inference in fp16 on
    compute capability 8.0+ (FlashAttention-2's requirement, Dao 2023, arXiv 2307.08691), TensorRT's fused
    multi-head attention in fp16/int8 (``trt_flash_multihead_matmul_fuse_pass``)."""
    cc = float(getattr(gpu, "compute_capability", None) or 0.0)
    if engine == "paddle-inference":
        return precision == "fp16" and cc >= 8.0
    return engine == "tensorrt" and precision in ("fp16", "int8") and cc >= 7.5


def fuse(ops: list[TracedOp], engine: str, precision: str, gpu: Any) -> tuple[list[TracedOp], dict[str, int]]:
    """The ops ``engine`` launches for the eval-mode forward ``ops`` (:func:`eval_ops`) at ``precision`` on
    ``gpu``, and how many times each fusion rule applied (see the module docstring)."""
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r}: one of {', '.join(ENGINES)}")
    if engine == "eager":
        return list(ops), {}
    count: dict[str, int] = {}
    if flash_applies(engine, precision, gpu):
        ops, n = flash_rewrite(ops)
        if n:
            count["fused_flash_attn_pass" if engine == "paddle-inference" else "TensorRT fused attention"] = n
    ops, c1 = fuse_into_norm_and_softmax(ops, engine)
    ops, c2 = fuse_epilogues(ops, engine, precision != "fp32")
    for c in (c1, c2):
        for k, v in c.items():
            count[k] = count.get(k, 0) + v
    if precision != "fp32":
        ops = with_layout(ops, "NHWC")
    return ops, count


def engine_precision(precision: str) -> str:
    """The training-precision name whose dtype rules (:func:`~paddlefit.estimate.amp.assign_dtypes`) an inference
    precision follows: fp32 -> ``fp32``; fp16 and int8 (its non-GEMM ops) -> ``fp16-o2``."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: one of {', '.join(PRECISIONS)}")
    return "fp32" if precision == "fp32" else "fp16-o2"


def forward_kernels(ops: list[TracedOp], precision: str, gpu: Any, tf32: bool = True) -> list[Kernel]:
    """The GPU kernels of one inference forward of the (fused) ``ops``: the forward rows of
    :func:`~paddlefit.estimate.kernels.step_kernels` with no gradient and no optimizer. Under ``int8`` the
    half-precision GEMMs and convolutions move to the ``int8`` unit and read and write 1-byte elements (their bytes
    halved from fp16)."""
    ks = [k for k in step_kernels(ops, engine_precision(precision), gpu, "sgd", 0, 0, tf32) if k.phase == "forward"]
    if precision == "int8":
        ks = [
            replace(k, unit="int8", bytes=k.bytes / 2) if k.unit == "half" and k.cls in ("gemm", "conv") else k
            for k in ks
        ]
    return ks


def launched_ops(ops: list[TracedOp]) -> int:
    """Ops that launch work (views excluded): what an eager forward dispatches from Python, one each."""
    return sum(1 for o in ops if o.cls != "view")


def activation_dtype_bytes(t: TensorRef, precision: str) -> int:
    """Bytes per element of an activation at ``precision``: floating tensors 4 (fp32) or 2 (fp16; int8 engines keep
    fp16 between non-GEMM ops, so 2 is their upper bound); integer tensors their own dtype."""
    if not t.floating:
        return dtype_bytes(t.dtype)
    return 4 if precision == "fp32" else 2


def peak_activation_bytes(ops: list[TracedOp], precision: str) -> int:
    """Peak bytes of live activations over one forward of ``ops`` in order: a tensor is live from the op that
    writes it (or the start, for the model's inputs) to the last op that reads it (or the end, for outputs), as
    Paddle Inference's ``memory_optimize_pass`` reuses buffers by lifetime and dygraph frees a tensor when its
    last reference goes. The peak is taken while each op runs (its inputs and outputs both live)."""
    last: dict[int, int] = {}
    size: dict[int, int] = {}
    first: dict[int, int] = {}
    for i, o in enumerate(ops):
        for t in o.inputs:
            if not t.param:
                last[t.tid] = i
                size.setdefault(t.tid, t.numel * activation_dtype_bytes(t, precision))
                first.setdefault(t.tid, 0)
        for t in o.outputs:
            size[t.tid] = t.numel * activation_dtype_bytes(t, precision)
            first.setdefault(t.tid, i)
            last.setdefault(t.tid, len(ops))
    if not size:
        return 0
    delta = [0] * (len(ops) + 2)
    for tid, b in size.items():
        delta[first[tid]] += b
        delta[last[tid] + 1] -= b
    peak = live = 0
    for d in delta:
        live += d
        peak = max(peak, live)
    return peak


def weight_bytes(ops: list[TracedOp], precision: str) -> int:
    """Bytes of the parameters the fused ``ops`` read, each tensor once: 4 per element in fp32, 2 in fp16, and under
    int8 1 for GEMM/convolution weights (the second input) and 2 for the rest."""
    seen: dict[int, int] = {}
    for o in ops:
        for n, t in enumerate(o.inputs):
            if t.param and t.tid not in seen:
                int8_w = precision == "int8" and o.cls in ("gemm", "conv", "dwconv") and n == 1
                seen[t.tid] = t.numel * (4 if precision == "fp32" else 1 if int8_w else 2)
    return sum(seen.values())
