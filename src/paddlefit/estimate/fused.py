"""Fused kernels as the user runs them: flash attention, Paddle's incubate fused norms, rotary embedding, bias +
activation, swiglu and fused linear, each traced as ONE kernel with its own FLOPs and bytes; and the rewrite of an
eager attention core (matmul -> softmax -> matmul) into one flash-attention kernel for ``attention: flash``.

Tracing (:func:`patch_fused`, installed by :func:`~paddlefit.estimate.flop_functional.patch_functional`): the
functions are wrapped like every functional op (:meth:`~paddlefit.estimate.flops.FlopCounter.wrap`), so whatever
the call runs inside, on this CPU, is not traced again (and ``_math_attention``, the CPU path of both attention
functions, is wrapped in their modules too, so a function imported by name before the trace began is seen).
That matters because the CPU probe cannot run the GPU
kernels: Paddle 3.3.1's ``F.scaled_dot_product_attention`` picks its ``math`` backend off the GPU
(``python/paddle/nn/functional/sdpa.py``, ``select_sdp_for_sdpa``) and ``flash_attention`` does the same
(``python/paddle/nn/functional/flash_attention.py``, ``_select_sdp``); both then run ``_math_attention``
(transpose, matmul, softmax, dropout, matmul), which the trace replaces by the single kernel the GPU runs. The
incubate ops below have no CPU kernel (``fused_rotary_position_embedding``, ``fused_bias_act``,
``fused_gemm_epilogue``) or no CPU backward (``fused_rms_norm``: ``fused_rms_norm_quant_grad`` is not registered;
``fused_layer_norm`` builds no grad node); :func:`cpu_reference_kernels` runs a reference of their math made of
ordinary Paddle ops during the probe, so such a model can be probed at all (its CPU memory and time are those of
the reference; the trace is the fused kernel's).

No Paddle import at module level (the rewrite and formulas are plain data).
"""

from __future__ import annotations

import contextlib
import inspect
import warnings
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from paddlefit.estimate.flop_formulas import needs_grad, numel
from paddlefit.estimate.optrace import OpTrace, TensorRef, TracedOp

if TYPE_CHECKING:
    from paddlefit.estimate.flops import FlopCounter

#: Backward FLOPs of flash attention / its forward FLOPs: the backward runs five GEMMs of the forward's two's size
#: (recomputing S = Q·Kᵀ, then dV = Pᵀ·dO, dP = dO·Vᵀ, dQ = dS·K, dK = dSᵀ·Q), i.e. 2.5x (Dao, FlashAttention-2,
#: arXiv 2307.08691, 2023, §3 and the FLOPs formula of its benchmarks, §4.1: "backward pass = 2.5x forward").
FLASH_BWD_FACTOR = 2.5
#: FLOPs per element of RMSNorm y = x / sqrt(mean(x²) + eps) · w: square, sum, scale by the inverse root, weight
#: (counted from the formula; Zhang & Sennrich 2019, arXiv 1910.07467, eq. 4). LayerNorm keeps Paddle's 8
#: (``python/paddle/utils/flops.py`` ``layer_norm``).
RMS_NORM_FLOPS = 4
#: FLOPs per element of rotary embedding x·cos + rotate(x)·sin (two multiplies, one add; Su et al. 2021,
#: arXiv 2104.09864, eq. 34).
ROPE_FLOPS = 3
#: FLOPs per output element of the activations ``fused_bias_act`` applies after its bias add (1 FLOP): Paddle's
#: ``flops.py`` ``gelu`` (5), ``relu`` / ``silu`` (1); swiglu / geglu = the gate's activation + 1 multiply.
BIAS_ACT_FLOPS = {"gelu": 5, "relu": 1, "silu": 1, "swish": 1, "swiglu": 3, "geglu": 7}


def flash_attention_flops(batch_heads: int, seq_q: int, seq_k: int, head_dim: int, head_dim_v: int | None = None,
                          causal: bool = False) -> int:  # fmt: skip
    """Forward FLOPs of flash attention: the two GEMMs S = Q·Kᵀ and O = P·V, 2·BH·Sq·Sk·(D + Dv) = 4·B·H·Sq·Sk·D,
    halved under a causal mask (Dao 2023, arXiv 2307.08691, §4.1's FLOPs formula; softmax not counted).

    Args:
        batch_heads: batch x query heads (with grouped-query attention every query head does its own GEMMs).
        seq_q, seq_k: query and key sequence lengths, tokens.
        head_dim, head_dim_v: head size of Q/K and of V (None = ``head_dim``).
        causal: a causal mask (only the lower triangle is computed).
    """
    dv = head_dim if head_dim_v is None else head_dim_v
    flops = 2 * batch_heads * seq_q * seq_k * (head_dim + dv)
    return flops // 2 if causal else flops


def attention_gemm(batch_heads: int, seq_q: int, seq_k: int, head_dim: int) -> tuple[int, int, int, int]:
    """(batch, M, N, K) a flash-attention kernel is timed as: ``batch_heads`` GEMMs of an Sq x D output reduced over
    Sk (FlashAttention-2 §3.2: one thread block per (batch, head, block of Q rows), looping over K/V blocks, so its
    grid is the output O's tiles, not S's)."""
    return batch_heads, seq_q, head_dim, seq_k


def _bind(sig: inspect.Signature, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The call's arguments by parameter name, defaults filled."""
    ba = sig.bind(*args, **kwargs)
    ba.apply_defaults()
    return dict(ba.arguments)


def _first(out: Any) -> Any:
    return out[0] if isinstance(out, list | tuple) else out


def _record_attention(counter: FlopCounter, q: Any, k: Any, v: Any, mask: Any, causal: bool, out: Any) -> None:
    """One ``flash_attn`` op of q, k, v laid out [B, S, H, D] (or [S, H, D]); FLOPs by :func:`flash_attention_flops`,
    backward :data:`FLASH_BWD_FACTOR` x forward when an input needs a gradient."""
    qs, ks, vs = list(q.shape), list(k.shape), list(v.shape)
    bh = numel(q) // (qs[-3] * qs[-1])  # B x H (query heads)
    sq, sk, d, dv = qs[-3], ks[-3], qs[-1], vs[-1]
    fwd = flash_attention_flops(bh, sq, sk, d, dv, causal and sq == sk)
    grad = any(needs_grad(t) for t in (q, k, v))
    counter.emit("attention", "flash_attn", "attention", fwd, round(FLASH_BWD_FACTOR * fwd) if grad else 0,
                 (q, k, v, mask), _first(out), attention_gemm(bh, sq, sk, d))  # fmt: skip


def _sdpa_rule(counter: FlopCounter, bind: Any) -> Any:
    def rule(args, kwargs, out):
        a = bind(args, kwargs)
        q, k, v = (a.get(n) for n in ("query", "key", "value"))
        mask = a.get("attn_mask", a.get("mask"))
        _record_attention(counter, q, k, v, mask, bool(a.get("is_causal") or a.get("causal")), out)

    return rule


def _norm_rule(op: str, per: int) -> Any:
    def make(counter: FlopCounter, bind: Any) -> Any:
        def rule(args, kwargs, out):
            a = bind(args, kwargs)
            res = a.get("residual")
            ins = (a["x"], a["norm_weight"], a.get("norm_bias"), a.get("bias"), res)
            outs = (_first(out), out[1]) if res is not None and isinstance(out, list | tuple) else _first(out)
            fwd = per * numel(_first(out))  # FLOPs of the normalised output; the summed input is a second output
            counter.emit("norm", op, "norm", fwd, fwd if any(map(needs_grad, ins)) else 0, ins, outs)

        return rule

    return make


def _rope_rule(counter: FlopCounter, bind: Any) -> Any:
    def rule(args, kwargs, out):
        a = bind(args, kwargs)
        xs = [t for t in (a["q"], a.get("k"), a.get("v")) if t is not None]
        outs = [t for t in (out if isinstance(out, list | tuple) else (out,)) if t is not None]
        fwd = ROPE_FLOPS * sum(map(numel, xs))
        counter.emit("rope", "fused_rotary_position_embedding", "elementwise", fwd,
                     fwd if any(map(needs_grad, xs)) else 0, (*xs, a.get("sin"), a.get("cos")), outs)  # fmt: skip

    return rule


def _elementwise_rule(op: str, kind: str, per: Any, names: tuple[str, ...]) -> Any:
    """``per``: FLOPs per output element, or a callable of the bound arguments giving them."""
    def make(counter: FlopCounter, bind: Any) -> Any:
        def rule(args, kwargs, out):
            a = bind(args, kwargs)
            counter.emit_elementwise(kind, op, per(a) if callable(per) else per, tuple(a.get(n) for n in names), out)

        return rule

    return make


def _fused_linear_rule(counter: FlopCounter, bind: Any) -> Any:
    """y = x @ W + b: one GEMM with the bias (and activation) in its epilogue."""
    def rule(args, kwargs, out):
        a = bind(args, kwargs)
        w = a.get("weight", a.get("y"))
        tw = bool(a.get("transpose_weight") or a.get("transpose_y") or a.get("trans_y"))
        n, k = (w.shape[0], w.shape[1]) if tw else (w.shape[1], w.shape[0])
        counter.emit_gemm("linear", "fused_gemm_epilogue", a["x"], w, out, numel(out) * k, a.get("bias"),
                          (1, numel(out) // max(n, 1), n, k))  # fmt: skip

    return rule


def patch_fused(counter: FlopCounter) -> None:
    """Wrap the fused ops (module docstring) so each call is one traced kernel in ``counter``; a function missing
    from the installed Paddle is skipped. Each rule binds the call's arguments by the unwrapped signature."""
    import importlib

    import paddle.incubate.nn.functional as IF
    import paddle.nn.functional as F

    fa = importlib.import_module("paddle.nn.functional.flash_attention")

    def wrap(owner: Any, name: str, make: Any) -> None:
        fn = getattr(owner, name, None)
        if fn is not None:
            sig = inspect.signature(fn)
            counter.wrap(owner, name, make(counter, lambda args, kwargs: _bind(sig, args, kwargs)))

    wrap(F, "scaled_dot_product_attention", _sdpa_rule)
    wrap(fa, "flash_attention", _sdpa_rule)
    # what both run off the GPU, looked up in their modules at call time: also caught when the model imported
    # the public function before the trace began (`from paddle.nn.functional.flash_attention import ...`)
    wrap(fa, "_math_attention", _sdpa_rule)
    wrap(importlib.import_module("paddle.nn.functional.sdpa"), "_math_attention", _sdpa_rule)
    wrap(IF, "fused_rms_norm", _norm_rule("rms_norm", RMS_NORM_FLOPS))
    wrap(IF, "fused_layer_norm", _norm_rule("fused_bias_residual_layernorm", 8))
    wrap(IF, "fused_rotary_position_embedding", _rope_rule)
    wrap(IF, "fused_bias_act", _elementwise_rule(
        "fused_bias_act", "activation", lambda a: BIAS_ACT_FLOPS.get(str(a.get("act_method")), 1) + 1, ("x", "bias")))
    for name in ("fused_linear", "fused_matmul_bias", "fused_linear_activation"):
        wrap(IF, name, _fused_linear_rule)
    wrap(IF, "swiglu", _elementwise_rule("swiglu", "activation", 3, ("x", "y")))
    wrap(IF, "fused_dropout_add", _elementwise_rule("fused_dropout_add", "elementwise", 1, ("x", "y")))
    for name, scope in SCOPED.items():
        _scoped(counter, IF, name, scope)


#: Fused Paddle ops traced through the kernels of their reference (:data:`_REFERENCES`) -> the op name Paddle's AMP
#: lists give them (``python/paddle/amp/amp_lists.py``: both on the FP16 white list, so every kernel inside runs
#: in half precision under AMP).
SCOPED = {"fused_multi_head_attention": "fused_attention", "fused_feedforward": "fused_feedforward"}


def _scoped(counter: FlopCounter, owner: Any, name: str, scope: str) -> None:
    """Wrap ``owner.name`` so the ops traced while it runs carry ``scope`` (:attr:`TracedOp.scope`); unlike
    :meth:`FlopCounter.wrap` the ops inside are traced (they are the fused op's kernels). Restored on exit."""
    orig = getattr(owner, name, None)
    if orig is None:
        return

    def wrapper(*args, **kwargs):
        prev, counter.scope = counter.scope, scope
        try:
            return orig(*args, **kwargs)
        finally:
            counter.scope = prev

    counter.patched.append((owner, name, orig))
    setattr(owner, name, wrapper)


def _rms_norm_ref(x, norm_weight, norm_bias, epsilon, begin_norm_axis=1, bias=None, residual=None, **_):
    """``fused_rms_norm``'s math in ordinary ops: x (+ bias) (+ residual), then x / sqrt(mean(x²) + eps) · w (+ b)
    over the axes from ``begin_norm_axis`` (``python/paddle/incubate/nn/functional/fused_rms_norm.py``); returns
    (out, the summed input)."""
    import paddle

    x = x + bias if bias is not None else x
    x = x + residual if residual is not None else x
    axes = list(range(begin_norm_axis % x.ndim, x.ndim))
    out = x * paddle.rsqrt(paddle.mean(x * x, axis=axes, keepdim=True) + epsilon) * norm_weight
    return (out + norm_bias if norm_bias is not None else out), x


def _layer_norm_ref(x, norm_weight, norm_bias, epsilon, residual_alpha=1.0, begin_norm_axis=1, bias=None,
                    residual=None, **_):  # fmt: skip
    """``fused_layer_norm``'s math: x (+ bias) (+ residual x alpha), then LayerNorm over the axes from
    ``begin_norm_axis`` (``python/paddle/incubate/nn/functional/fused_layer_norm.py``); returns (out, the summed
    input, None, None) in place of its (out, residual_out, mean, variance)."""
    import paddle.nn.functional as F

    x = x + bias if bias is not None else x
    x = x + residual * residual_alpha if residual is not None else x
    return F.layer_norm(x, x.shape[begin_norm_axis % x.ndim:], norm_weight, norm_bias, epsilon), x, None, None


def _rope_ref(q, k=None, v=None, sin=None, cos=None, position_ids=None, use_neox_rotary_style=True,
              time_major=False, rotary_emb_base=10000.0, **_):  # fmt: skip
    """``fused_rotary_position_embedding``'s math, x·cos + rotate(x)·sin on [B, S, H, D] (or [S, B, H, D] with
    ``time_major``); ``use_neox_rotary_style`` rotates adjacent pairs, else the two halves (Paddle's docstring,
    ``python/paddle/incubate/nn/functional/fused_rotary_position_embedding.py``); sin/cos from
    ``rotary_emb_base`` when not given (Su et al. 2021, arXiv 2104.09864, eq. 15)."""
    import paddle

    s, d = q.shape[0 if time_major else 1], q.shape[-1]
    if sin is None or cos is None:
        ang = paddle.arange(s, dtype="float32").unsqueeze(1) * rotary_emb_base ** (
            -paddle.arange(0, d, 2, dtype="float32") / d).unsqueeze(0)  # fmt: skip
        ang = paddle.repeat_interleave(ang, 2, axis=1) if use_neox_rotary_style else paddle.concat([ang, ang], 1)
        sin, cos = paddle.sin(ang), paddle.cos(ang)
    sin, cos = sin.reshape([-1, d]).astype(q.dtype), cos.reshape([-1, d]).astype(q.dtype)
    if position_ids is not None:  # [B, S] -> [B, S, 1, D]
        sin, cos = paddle.gather(sin, position_ids.flatten()), paddle.gather(cos, position_ids.flatten())
        shape = [*position_ids.shape, 1, d]
    else:
        shape = [s, 1, 1, d] if time_major else [1, s, 1, d]
    sin, cos = sin.reshape(shape), cos.reshape(shape)

    def rot(x):
        if use_neox_rotary_style:
            return paddle.stack([-x[..., 1::2], x[..., 0::2]], axis=-1).reshape(x.shape)
        return paddle.concat([-x[..., d // 2:], x[..., : d // 2]], axis=-1)

    return tuple(x * cos + rot(x) * sin if x is not None else None for x in (q, k, v))


def _bias_act_ref(x, bias=None, act_method="gelu", **_):
    """``fused_bias_act`` without quantisation: act(x + bias), act one of gelu, relu, silu/swish, swiglu, geglu (the
    gated ones split the last axis in halves; ``python/paddle/incubate/nn/functional/fused_bias_act.py``)."""
    import paddle
    import paddle.nn.functional as F

    x = x + bias if bias is not None else x
    if act_method in ("swiglu", "geglu"):
        a, b = paddle.chunk(x, 2, axis=-1)
        return (F.silu(a) if act_method == "swiglu" else F.gelu(a)) * b
    return {"gelu": F.gelu, "relu": F.relu, "silu": F.silu, "swish": F.silu}[act_method](x)


def _linear_ref(x, weight=None, bias=None, transpose_weight=False, y=None, transpose_x=False, transpose_y=False,
                trans_x=False, trans_y=False, activation=None, **_):  # fmt: skip
    """``fused_linear`` / ``fused_matmul_bias`` / ``fused_linear_activation``: matmul + bias (+ gelu/relu), the GEMM
    with its epilogue (``python/paddle/incubate/nn/functional/fused_matmul_bias.py``)."""
    import paddle
    import paddle.nn.functional as F

    w = weight if weight is not None else y
    out = paddle.matmul(x, w, transpose_x or trans_x, transpose_weight or transpose_y or trans_y)
    out = out + bias if bias is not None else out
    return {"gelu": F.gelu, "relu": F.relu}[activation](out) if activation else out


def _residual_ln_ref(out, residual, bias, scale, shift, epsilon, rate, training, mode, add_residual, norm):
    """The epilogue of Paddle's fused transformer ops (``fused_dropout_helper.h``): LayernormResidualDropoutBias,
    LN(residual + dropout(out + bias)), as ONE kernel when ``norm`` (``IF.fused_layer_norm``, traced as one
    ``norm`` kernel; its dropout is not applied on this CPU: the probe's values do not matter, its kernels do), else
    ResidualDropoutBias, residual + dropout(out + bias): the bias add and ``IF.fused_dropout_add`` (two kernels for
    the GPU's one)."""
    import paddle.incubate.nn.functional as IF
    import paddle.nn.functional as F

    res = residual if add_residual else None
    if norm:
        return IF.fused_layer_norm(out, scale, shift, epsilon, begin_norm_axis=out.ndim - 1, bias=bias,
                                   residual=res)[0]  # fmt: skip
    out = out + bias if bias is not None else out
    if res is None:
        return F.dropout(out, rate, training=training, mode=mode)
    with warnings.catch_warnings():  # Paddle warns that its CPU path is dropout + add: the GPU's kernel is traced
        warnings.simplefilter("ignore")
        return IF.fused_dropout_add(out, res, p=rate, training=training, mode=mode)


def _mha_ref(x, qkv_weight, linear_weight, pre_layer_norm=False, pre_ln_scale=None, pre_ln_bias=None,
             ln_scale=None, ln_bias=None, pre_ln_epsilon=1e-5, qkv_bias=None, linear_bias=None, cache_kv=None,
             attn_mask=None, dropout_rate=0.5, attn_dropout_rate=0.5, ln_epsilon=1e-5, training=True,
             mode="upscale_in_train", add_residual=True, num_heads=-1, transpose_qkv_wb=False, **_):  # fmt: skip
    """``fused_multi_head_attention``'s math in the kernels its GPU op runs (``paddle/fluid/operators/fused/
    fused_attention_op.cu``, FusedAttentionOpKernel): [pre LayerNorm], the QKV GEMM + bias, the reference
    attention (FMHARef: Q·Kᵀ, mask add, softmax, dropout, P·V, transposes), the output GEMM, then bias + dropout +
    residual + LayerNorm as one fused kernel (FusedDropoutLayerNormHelper). Weights as the Python function
    documents them: qkv_weight [3, H, D, E] (or [E, 3·H·D] with ``transpose_qkv_wb``), linear_weight [H·D, E]."""
    import paddle
    import paddle.nn.functional as F

    b, s, e = x.shape
    h = F.layer_norm(x, [e], pre_ln_scale, pre_ln_bias, pre_ln_epsilon) if pre_layer_norm else x
    if transpose_qkv_wb:
        heads = num_heads
        qkv = paddle.matmul(h, qkv_weight)
    else:
        heads = qkv_weight.shape[1]
        qkv = paddle.matmul(h, qkv_weight.reshape([-1, e]), transpose_y=True)
    qkv = qkv + qkv_bias.reshape([-1]) if qkv_bias is not None else qkv
    q, k, v = qkv.reshape([b, s, 3, heads, -1]).transpose([2, 0, 3, 1, 4]).unbind(0)
    att = paddle.matmul(q * (q.shape[-1] ** -0.5), k, transpose_y=True)
    att = F.softmax(att + attn_mask if attn_mask is not None else att)
    att = F.dropout(att, attn_dropout_rate, training=training, mode=mode)
    out = paddle.matmul(att, v).transpose([0, 2, 1, 3]).reshape([b, s, -1])
    return _residual_ln_ref(paddle.matmul(out, linear_weight), x, linear_bias, ln_scale, ln_bias, ln_epsilon,
                            dropout_rate, training, mode, add_residual, not pre_layer_norm)  # fmt: skip


def _ffn_ref(x, linear1_weight, linear2_weight, linear1_bias=None, linear2_bias=None, ln1_scale=None,
             ln1_bias=None, ln2_scale=None, ln2_bias=None, dropout1_rate=0.5, dropout2_rate=0.5, activation="relu",
             ln1_epsilon=1e-5, ln2_epsilon=1e-5, pre_layer_norm=False, training=True, mode="upscale_in_train",
             add_residual=True, **_):  # fmt: skip
    """``fused_feedforward``'s math in the kernels its GPU op runs (``paddle/fluid/operators/fused/
    fused_feedforward_op.cu``): [pre LayerNorm], linear1's GEMM, bias + activation + dropout as one kernel
    (``IF.fused_bias_act``; the dropout not applied on this CPU, see :func:`_residual_ln_ref`), linear2's GEMM,
    then bias + dropout + residual + LayerNorm as one."""
    import paddle
    import paddle.incubate.nn.functional as IF
    import paddle.nn.functional as F

    e = x.shape[-1]
    h = F.layer_norm(x, [e], ln1_scale, ln1_bias, ln1_epsilon) if pre_layer_norm else x
    h = IF.fused_bias_act(paddle.matmul(h, linear1_weight), linear1_bias, act_method=activation)
    return _residual_ln_ref(paddle.matmul(h, linear2_weight), x, linear2_bias, ln2_scale, ln2_bias, ln2_epsilon,
                            dropout2_rate, training, mode, add_residual, not pre_layer_norm)  # fmt: skip


#: incubate function -> (reference, the argument that names the device, arguments whose use the reference lacks)
_REFERENCES = {
    "fused_rms_norm": (_rms_norm_ref, "x", ("quant_scale",)),
    "fused_layer_norm": (_layer_norm_ref, "x", ("quant_scale",)),
    "fused_rotary_position_embedding": (_rope_ref, "q", ()),
    "fused_bias_act": (_bias_act_ref, "x", ("dequant_scales", "shift", "smooth", "quant_scale")),
    "fused_linear": (_linear_ref, "x", ()),
    "fused_matmul_bias": (_linear_ref, "x", ()),
    "fused_linear_activation": (_linear_ref, "x", ()),
    "fused_multi_head_attention": (_mha_ref, "x", ("cache_kv",)),
    "fused_feedforward": (_ffn_ref, "x", ()),
}


@contextlib.contextmanager
def cpu_reference_kernels() -> Iterator[None]:
    """While active, the incubate fused ops of :data:`_REFERENCES` called on CPU tensors run their reference math
    (their GPU kernels, or CPU backward, do not exist in a CPU build; module docstring). A call with quantisation
    arguments, or on a GPU tensor, runs Paddle's own function. The wrappers keep the original signature
    (``functools.wraps``), so the trace rules bind arguments by the same names. Restored on exit."""
    import functools

    import paddle.incubate.nn.functional as IF

    saved = []
    for name, (ref, dev_arg, unsupported) in _REFERENCES.items():
        orig = getattr(IF, name, None)
        if orig is None:
            continue
        sig = inspect.signature(orig)

        def fn(*args, _orig=orig, _sig=sig, _ref=ref, _dev=dev_arg, _no=unsupported, **kwargs):
            a = _bind(_sig, args, kwargs)
            quant = any(a.get(n) is not None and not (isinstance(a.get(n), int | float) and a[n] <= 0) for n in _no)
            if quant or not a[_dev].place.is_cpu_place():
                return _orig(*args, **kwargs)
            return _ref(**a)

        saved.append((name, orig))
        setattr(IF, name, functools.wraps(orig)(fn))
    try:
        yield
    finally:
        for name, orig in reversed(saved):
            setattr(IF, name, orig)


_SCORE_OPS = ("add", "subtract", "multiply", "divide", "view")


def _attention_core(ops: list[TracedOp], i: int, producer: dict[int, int],
                    consumers: dict[int, list[int]]) -> tuple[list[int], TracedOp] | None:  # fmt: skip
    """The eager attention core around the softmax ``ops[i]`` and the flash-attention op that replaces it:
    (indices of the core's ops, the new op), or None when ``ops[i]`` is not one.

    The core, by data flow: a ``matmul`` of two activations S = Q·Kᵀ (GEMM (G, Sq, Sk, D)), optionally a scale of
    Q or K just before it, then element-wise ops on S (scale, mask add) and views, the softmax, optionally dropout
    and views, and the ``matmul`` P·V (GEMM (G, Sq, Dv, Sk)); every intermediate read by the next op only (probs
    the model also returns stay eager). Other inputs of the mask adds become the kernel's mask input.
    """
    def only(t: TensorRef) -> int | None:
        c = consumers.get(t.tid, [])
        return c[0] if len(c) == 1 else None

    def is_qk(o: TracedOp) -> bool:
        return o.op == "matmul" and o.gemm is not None and sum(not t.param and t.floating for t in o.inputs) == 2

    core, masks = [i], []
    t = ops[i].inputs[0]
    while True:  # back from the softmax to Q·Kᵀ
        j = producer.get(t.tid)
        if j is None or only(t) is None:
            return None
        o = ops[j]
        core.append(j)
        if is_qk(o):
            qk = o
            break
        if o.op not in _SCORE_OPS or not o.inputs:
            return None
        t, *rest = sorted(o.inputs, key=lambda x: (x.numel != t.numel, x.tid not in producer))
        masks += [x for x in rest if x.floating and not x.param]
    t, pv = ops[i].outputs[0], None
    while pv is None:  # forward from the softmax to P·V
        j = only(t)
        if j is None:
            return None
        o = ops[j]
        core.append(j)
        if o.op == "matmul" and o.gemm is not None and o.inputs and o.inputs[0].tid == t.tid and len(o.inputs) > 1:
            pv = o
        elif o.op in ("dropout", "view") and o.outputs:
            t = o.outputs[0]
        else:
            return None
    qkv = list(qk.inputs[:2])
    for n, x in enumerate(qkv):  # a scale of Q (nn.MultiHeadAttention) or K right before the GEMM is absorbed
        j = producer.get(x.tid)
        if j is not None and ops[j].op in ("multiply", "divide") and len(ops[j].inputs) == 1 and only(x) is not None:
            core.append(j)
            qkv[n] = ops[j].inputs[0]
    g, sq, sk, d = qk.gemm  # type: ignore[misc]
    dv = pv.gemm[2]  # type: ignore[index]
    new = TracedOp("flash_attn", "attention", flash_attention_flops(g, sq, sk, d, dv),
                   (*qkv, pv.inputs[1], *masks), pv.outputs, attention_gemm(g, sq, sk, d))  # fmt: skip
    return core, new


def flash_rewrite(ops: list[TracedOp]) -> tuple[list[TracedOp], int]:
    """The forward ``ops`` as they run with flash attention: every eager attention core (:func:`_attention_core`)
    replaced by one ``flash_attn`` op (class ``attention``) at the place of its P·V matmul, with the same FLOPs as
    the core's two matmuls (softmax not counted, as in FlashAttention-2's formula) and its tensors Q, K, V, the
    mask and O; the S x S scores and probabilities are gone, so neither their kernels nor the bytes kept for the
    backward remain. A mask add stays a dense mask input (the trace cannot tell a causal mask from another, so
    FLOPs are not halved for it). Transposes around the core stay. Returns (ops, attention blocks replaced).
    """
    producer = {t.tid: i for i, o in enumerate(ops) for t in o.outputs}
    consumers: dict[int, list[int]] = {}
    for i, o in enumerate(ops):
        for t in o.inputs:
            consumers.setdefault(t.tid, []).append(i)
    drop: set[int] = set()
    at: dict[int, TracedOp] = {}
    for i, o in enumerate(ops):
        if o.op == "softmax" and o.inputs and o.outputs and i not in drop:
            found = _attention_core(ops, i, producer, consumers)
            if found is not None and not drop.intersection(found[0]):
                drop.update(found[0])
                at[max(found[0])] = found[1]
    out = [at.get(i, o) for i, o in enumerate(ops) if i not in drop or i in at]
    return out, len(at)


def flash_trace(trace: OpTrace) -> tuple[OpTrace, int]:
    """``trace`` with :func:`flash_rewrite` applied to both of its batch sizes; (trace, attention blocks replaced in
    the first)."""
    ops1, n = flash_rewrite(trace.ops1)
    ops2 = flash_rewrite(trace.ops2)[0] if trace.ops2 else []
    return replace(trace, ops1=ops1, ops2=ops2), n


def attention_note(blocks: int, trace: OpTrace) -> str:
    """The plan's note on ``attention: flash``: how many eager attention cores :func:`flash_rewrite` replaced, or
    why none (the model already calls a fused attention, or has no matmul -> softmax -> matmul core)."""
    if blocks:
        return (f"attention: flash: {blocks} eager attention core{'s' if blocks > 1 else ''} (matmul -> softmax -> "
                "matmul) planned as one flash-attention kernel each on GPUs that run it (CC 8.0+, fp16/bf16); the "
                "cpu row runs the model as written")  # fmt: skip
    if any(o.cls == "attention" for o in trace.ops1):
        return "attention: flash: the model already calls a fused attention; nothing to replace"
    return "attention: flash: no eager attention core (matmul -> softmax -> matmul) in the trace; planned as written"
