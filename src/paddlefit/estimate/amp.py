"""Which dtype each op of a trace runs in under Paddle's AMP, and what the forward keeps for the backward.

- :func:`assign_dtypes`: Paddle's AMP rules (white, black and promote lists, O1/O2) over an operator trace
  (:mod:`paddlefit.estimate.optrace`); :func:`amp_lists` reads the lists (shipped from Paddle 3.3.1).
- :func:`saved_activation_bytes`: the activation bytes the forward keeps for the backward in those dtypes (the
  planner scales the CPU probe's fp32 activations by it), with :data:`SAVED_FOR_GRAD`, which forward tensors
  each grad op reads (also used for the backward kernels' bytes, :mod:`paddlefit.estimate.kernels`).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources

from paddlefit.estimate.optrace import TensorRef, TracedOp

_DTYPE_BYTES = {
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a Paddle dtype name (4 for unknown names)."""
    return _DTYPE_BYTES.get(dtype.replace("paddle.", ""), 4)


@functools.cache
def amp_lists(half: str, level: str) -> tuple[frozenset[str], frozenset[str]]:
    """(white, black) op lists of Paddle's AMP for ``half`` (``float16``/``bfloat16``) at ``level`` (O1/O2).

    Paddle 3.3.1's ``python/paddle/amp/amp_lists.py`` (``white_list()[dtype][level]``, ``black_list()...``), shipped
    in ``paddlefit/catalog/data/paddle_amp_lists.json`` so a plan does not depend on the Paddle of the machine that
    plans it; ``tests/estimate/test_amp.py`` checks the copy against the installed Paddle.

    Raises:
        KeyError: ``half`` or ``level`` is not one of the names above.
    """
    doc = json.loads(resources.files("paddlefit.catalog").joinpath("data/paddle_amp_lists.json").read_text())
    lists = doc["lists"][half][level]
    return frozenset(lists["white"]), frozenset(lists["black"])


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
    (embedding, interpolation, scatter). The kernels traced inside a fused Paddle op (:attr:`TracedOp.scope`,
    ``fused_attention``/``fused_feedforward``) all run in the dtype that op runs in, by the rules above applied to
    its name and its first kernel's inputs: both are on the FP16 white list (all half under fp16 AMP) and on no
    bf16 list (promoted under bf16: fp32 when an input or, at O1, a parameter is fp32). ``fp32``: everything fp32.

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

    region = ("", "float32")  # the fused op being traced and its dtype
    for o in ops:
        if not o.scope:
            region = ("", "float32")
        names = _AMP_NAMES.get(o.op, (o.op,))
        ins = [cur(t, o) for t in o.inputs]
        floats = [d for t, d in zip(o.inputs, ins, strict=True) if t.floating]
        if o.cls == "view":
            dst = floats[0] if floats else last_float
        elif o.scope:  # a fused op's kernel: the dtype that op runs in, decided at its first kernel
            if region[0] != o.scope:
                promoted = "float32" if "float32" in floats else (half if floats else "float32")
                region = (o.scope, half if o.scope in white else "float32" if o.scope in black else promoted)
            dst = region[1]
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


#: Op name -> which of its forward tensors its grad op reads (``paddle/phi/ops/yaml/backward.yaml``):
#: "out" (relu, relu6, sigmoid, tanh, softmax, exp: the grad takes Out), "x" (gelu, swish, hardswish, mish,
#: leaky_relu, elu, multiply, divide...), "none" (add, subtract, concat, transpose, interpolate, reductions:
#: shapes only, ``no_need_buffer``), "x_out" (pool2d, max and avg alike; silu; flash_attn: q, k, v, mask and out,
#: plus its small softmax_lse), fused_dropout_add "none" (its grad regenerates the mask from the seed).
SAVED_FOR_GRAD = {
    "relu": "out",
    "relu6": "out",
    "sigmoid": "out",
    "tanh": "out",
    "softmax": "out",
    "log_softmax": "out",
    "exp": "out",
    "add": "none",
    "subtract": "none",
    "concat": "none",
    "transpose": "none",
    "interpolate": "none",
    "reduce_mean": "none",
    "reduce_sum": "none",
    "avg_pool": "x_out",
    "max_pool": "x_out",
    "silu": "x_out",
    "flash_attn": "x_out",
    "fused_dropout_add": "none",
}


def saved_activation_bytes(ops: list[TracedOp], precision: str) -> tuple[float, float]:
    """(activation bytes, cast-weight bytes) that the forward keeps for the backward under ``precision``.

    Each op keeps what its grad op reads (``paddle/phi/ops/yaml/backward.yaml``): GEMM/conv their inputs X and W,
    norms X, activations X or Out (:data:`SAVED_FOR_GRAD`), dropout its uint8 mask, embedding the ids; a tensor kept
    by two ops is counted once, and an AMP cast copy is a tensor of its own (softmax keeping its fp32 output while the
    next matmul keeps the fp16 copy of it holds both). Each tensor takes the dtype the AMP rules give it
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
        rule = SAVED_FOR_GRAD.get(o.op, "x")
        if rule in ("x", "x_out"):
            for t, d in pairs:
                if t.floating and not t.param:
                    kept[t.tid, d] = t.numel * dtype_bytes(d)
        if rule in ("out", "x_out"):
            for t in o.outputs:
                if t.floating:
                    kept[t.tid, a.out_dtype] = t.numel * dtype_bytes(a.out_dtype)
    return float(sum(kept.values())), float(cast_w)
