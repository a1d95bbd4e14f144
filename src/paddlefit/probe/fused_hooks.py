"""The fused kernels' tracing rules: :func:`patch_fused` wraps flash attention, Paddle's incubate fused norms,
rotary embedding, bias + activation, swiglu and fused linear so each call is ONE traced kernel with its own FLOPs
(:mod:`paddlefit.estimate.fused` says why, and holds the formulas and the flash-attention rewrite of a trace).
Installed by :func:`~paddlefit.probe.flop_functional.patch_functional`.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from paddlefit.estimate.element_flops import ELEMENT_FLOPS, per_element
from paddlefit.estimate.flop_formulas import needs_grad, numel
from paddlefit.estimate.fused import FLASH_BWD_FACTOR, attention_gemm, flash_attention_flops
from paddlefit.probe.fused_ref import bind_args

if TYPE_CHECKING:
    from paddlefit.probe.flops import FlopCounter


def _bias_act_flops(act: str) -> int:
    """FLOPs per output element of ``fused_bias_act``: the bias add (1) + the activation's
    (:data:`~paddlefit.estimate.element_flops.ELEMENT_FLOPS`; an activation it lacks counts 1)."""
    return 1 + (per_element(act) if act in ELEMENT_FLOPS else 1)


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
    counter.emit(
        "attention",
        "flash_attn",
        "attention",
        fwd,
        round(FLASH_BWD_FACTOR * fwd) if grad else 0,
        (q, k, v, mask),
        _first(out),
        attention_gemm(bh, sq, sk, d),
    )


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
        fwd = per_element("fused_rotary_position_embedding") * sum(map(numel, xs))
        counter.emit(
            "rope",
            "fused_rotary_position_embedding",
            "elementwise",
            fwd,
            fwd if any(map(needs_grad, xs)) else 0,
            (*xs, a.get("sin"), a.get("cos")),
            outs,
        )

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
        counter.emit_gemm(
            "linear",
            "fused_gemm_epilogue",
            a["x"],
            w,
            out,
            numel(out) * k,
            a.get("bias"),
            (1, numel(out) // max(n, 1), n, k),
        )

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
            counter.wrap(owner, name, make(counter, lambda args, kwargs: bind_args(sig, args, kwargs)))

    wrap(F, "scaled_dot_product_attention", _sdpa_rule)
    wrap(fa, "flash_attention", _sdpa_rule)
    # what both run off the GPU, looked up in their modules at call time: also caught when the model imported
    # the public function before the trace began (`from paddle.nn.functional.flash_attention import ...`)
    wrap(fa, "_math_attention", _sdpa_rule)
    wrap(importlib.import_module("paddle.nn.functional.sdpa"), "_math_attention", _sdpa_rule)
    wrap(IF, "fused_rms_norm", _norm_rule("rms_norm", per_element("rms_norm")))
    wrap(IF, "fused_layer_norm", _norm_rule("fused_bias_residual_layernorm", 8))
    wrap(IF, "fused_rotary_position_embedding", _rope_rule)
    wrap(
        IF,
        "fused_bias_act",
        _elementwise_rule(
            "fused_bias_act", "activation", lambda a: _bias_act_flops(str(a.get("act_method"))), ("x", "bias")
        ),
    )
    for name in ("fused_linear", "fused_matmul_bias", "fused_linear_activation"):
        wrap(IF, name, _fused_linear_rule)
    wrap(IF, "swiglu", _elementwise_rule("swiglu", "activation", 3, ("x", "y")))
    wrap(IF, "fused_dropout_add", _elementwise_rule("fused_dropout_add", "elementwise", 1, ("x", "y")))
