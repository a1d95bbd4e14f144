"""CPU references of Paddle's fused ops that have no CPU kernel (or no CPU backward), so a model calling them can be
probed here: each runs the op's math in ordinary Paddle ops, or in the kernels its GPU op runs when the trace
should keep those (the fused transformer layers). :func:`cpu_reference_kernels` installs them; the trace rules of
:mod:`paddlefit.estimate.fused` record what the GPU runs.

No Paddle import at module level.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import itertools
import warnings
from collections.abc import Iterator
from typing import Any


def bind_args(sig: inspect.Signature, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The call's arguments by parameter name, defaults filled."""
    ba = sig.bind(*args, **kwargs)
    ba.apply_defaults()
    return dict(ba.arguments)


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


def _layer_norm_ref(
    x, norm_weight, norm_bias, epsilon, residual_alpha=1.0, begin_norm_axis=1, bias=None, residual=None, **_
):
    """``fused_layer_norm``'s math: x (+ bias) (+ residual x alpha), then LayerNorm over the axes from
    ``begin_norm_axis`` (``python/paddle/incubate/nn/functional/fused_layer_norm.py``); returns (out, the summed
    input, None, None) in place of its (out, residual_out, mean, variance)."""
    import paddle.nn.functional as F

    x = x + bias if bias is not None else x
    x = x + residual * residual_alpha if residual is not None else x
    return F.layer_norm(x, x.shape[begin_norm_axis % x.ndim :], norm_weight, norm_bias, epsilon), x, None, None


def _rope_ref(
    q,
    k=None,
    v=None,
    sin=None,
    cos=None,
    position_ids=None,
    use_neox_rotary_style=True,
    time_major=False,
    rotary_emb_base=10000.0,
    **_,
):
    """``fused_rotary_position_embedding``'s math, x·cos + rotate(x)·sin on [B, S, H, D] (or [S, B, H, D] with
    ``time_major``); ``use_neox_rotary_style`` rotates adjacent pairs, else the two halves (Paddle's docstring,
    ``python/paddle/incubate/nn/functional/fused_rotary_position_embedding.py``); sin/cos from
    ``rotary_emb_base`` when not given (Su et al. 2021, arXiv 2104.09864, eq. 15)."""
    import paddle

    s, d = q.shape[0 if time_major else 1], q.shape[-1]
    if sin is None or cos is None:
        ang = paddle.arange(s, dtype="float32").unsqueeze(1) * rotary_emb_base ** (
            -paddle.arange(0, d, 2, dtype="float32") / d
        ).unsqueeze(0)
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
        return paddle.concat([-x[..., d // 2 :], x[..., : d // 2]], axis=-1)

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


def _linear_ref(
    x,
    weight=None,
    bias=None,
    transpose_weight=False,
    y=None,
    transpose_x=False,
    transpose_y=False,
    trans_x=False,
    trans_y=False,
    activation=None,
    **_,
):
    """``fused_linear`` / ``fused_matmul_bias`` / ``fused_linear_activation``: matmul + bias (+ gelu/relu), the GEMM
    with its epilogue (``python/paddle/incubate/nn/functional/fused_matmul_bias.py``)."""
    import paddle
    import paddle.nn.functional as F

    w = weight if weight is not None else y
    out = paddle.matmul(x, w, transpose_x or trans_x, transpose_weight or transpose_y or trans_y)
    out = out + bias if bias is not None else out
    return {"gelu": F.gelu, "relu": F.relu}[activation](out) if activation else out


def _kept_dropout(x, rate, training, mode):
    """Dropout the tracer does not see (``paddle._C_ops.dropout``, not the wrapped ``F.dropout``) but whose mask the
    backward keeps, as Paddle's fused ops keep theirs (``DropoutMaskOut``...): the GPU applies it inside a fused
    kernel, so it is memory for the probe and no kernel of the trace."""
    if not rate or not training:
        return x
    from paddle import _C_ops

    return _C_ops.dropout(x, None, float(rate), False, mode, 0, False)


def _kept(x):
    """``x`` times one through ``paddle._C_ops.multiply`` (untraced), so the backward holds ``x``: fused_attention
    keeps the masked scores (``SrcMaskOut``, [B, H, S, S]) for its backward, which the reference's softmax would
    not (``paddle/fluid/operators/fused/fused_attention_op.cc``: not a no-need-buffer input of its grad)."""
    import paddle
    from paddle import _C_ops

    return _C_ops.multiply(x, paddle.ones([1], dtype=x.dtype))


def _residual_ln_ref(out, residual, bias, scale, shift, epsilon, rate, training, mode, add_residual, norm):
    """The epilogue of Paddle's fused transformer ops (``fused_dropout_helper.h``): LayernormResidualDropoutBias,
    LN(residual + dropout(out + bias)), as ONE kernel when ``norm`` (``IF.fused_layer_norm``, traced as one
    ``norm`` kernel; its dropout runs untraced, :func:`_kept_dropout`, so its mask is in the probe's memory), else
    ResidualDropoutBias, residual + dropout(out + bias): the bias add and ``IF.fused_dropout_add`` (two kernels for
    the GPU's one)."""
    import paddle.incubate.nn.functional as IF
    import paddle.nn.functional as F

    res = residual if add_residual else None
    if norm:
        out = _kept_dropout(out, rate, training, mode)  # inside the fused kernel on the GPU; its mask is kept
        return IF.fused_layer_norm(out, scale, shift, epsilon, begin_norm_axis=out.ndim - 1, bias=bias, residual=res)[0]
    out = out + bias if bias is not None else out
    if res is None:
        return F.dropout(out, rate, training=training, mode=mode)
    with warnings.catch_warnings():  # Paddle warns that its CPU path is dropout + add: the GPU's kernel is traced
        warnings.simplefilter("ignore")
        return IF.fused_dropout_add(out, res, p=rate, training=training, mode=mode)


def _mha_ref(
    x,
    qkv_weight,
    linear_weight,
    pre_layer_norm=False,
    pre_ln_scale=None,
    pre_ln_bias=None,
    ln_scale=None,
    ln_bias=None,
    pre_ln_epsilon=1e-5,
    qkv_bias=None,
    linear_bias=None,
    cache_kv=None,
    attn_mask=None,
    dropout_rate=0.5,
    attn_dropout_rate=0.5,
    ln_epsilon=1e-5,
    training=True,
    mode="upscale_in_train",
    add_residual=True,
    num_heads=-1,
    transpose_qkv_wb=False,
    **_,
):
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
    att = F.softmax(_kept(att + attn_mask) if attn_mask is not None else att)
    att = F.dropout(att, attn_dropout_rate, training=training, mode=mode)
    out = paddle.matmul(att, v).transpose([0, 2, 1, 3]).reshape([b, s, -1])
    return _residual_ln_ref(
        paddle.matmul(out, linear_weight),
        x,
        linear_bias,
        ln_scale,
        ln_bias,
        ln_epsilon,
        dropout_rate,
        training,
        mode,
        add_residual,
        not pre_layer_norm,
    )


def _ffn_ref(
    x,
    linear1_weight,
    linear2_weight,
    linear1_bias=None,
    linear2_bias=None,
    ln1_scale=None,
    ln1_bias=None,
    ln2_scale=None,
    ln2_bias=None,
    dropout1_rate=0.5,
    dropout2_rate=0.5,
    activation="relu",
    ln1_epsilon=1e-5,
    ln2_epsilon=1e-5,
    pre_layer_norm=False,
    training=True,
    mode="upscale_in_train",
    add_residual=True,
    **_,
):
    """``fused_feedforward``'s math in the kernels its GPU op runs (``paddle/fluid/operators/fused/
    fused_feedforward_op.cu``): [pre LayerNorm], linear1's GEMM, bias + activation + dropout as one kernel
    (``IF.fused_bias_act``, its dropout untraced: :func:`_kept_dropout`), linear2's GEMM,
    then bias + dropout + residual + LayerNorm as one."""
    import paddle
    import paddle.incubate.nn.functional as IF
    import paddle.nn.functional as F

    if activation not in ("gelu", "relu"):  # the GPU kernel's own check (fused_dropout_act_bias.h)
        raise ValueError(
            f"fused_feedforward: activation {activation!r}: Paddle's GPU kernel only supports gelu or "
            "relu activation functions"
        )
    e = x.shape[-1]
    h = F.layer_norm(x, [e], ln1_scale, ln1_bias, ln1_epsilon) if pre_layer_norm else x
    h = IF.fused_bias_act(paddle.matmul(h, linear1_weight), linear1_bias, act_method=activation)
    h = _kept_dropout(h, dropout1_rate, training, mode)  # DropoutActBias applies it in the same kernel
    return _residual_ln_ref(
        paddle.matmul(h, linear2_weight),
        x,
        linear2_bias,
        ln2_scale,
        ln2_bias,
        ln2_epsilon,
        dropout2_rate,
        training,
        mode,
        add_residual,
        not pre_layer_norm,
    )


#: incubate function -> (reference, the argument that names the device, arguments whose use the reference lacks)
REFERENCES = {
    "fused_rms_norm": (_rms_norm_ref, "x", ("quant_scale",)),
    "fused_layer_norm": (_layer_norm_ref, "x", ("quant_scale",)),
    "fused_rotary_position_embedding": (_rope_ref, "q", ()),
    "fused_bias_act": (_bias_act_ref, "x", ("dequant_scales", "shift", "smooth", "quant_scale")),
    "fused_linear": (_linear_ref, "x", ()),
    "fused_matmul_bias": (_linear_ref, "x", ()),
    "fused_linear_activation": (_linear_ref, "x", ()),
}


#: Paddle's fused transformer ops, called by ``paddle.incubate.nn.functional.fused_multi_head_attention`` /
#: ``fused_feedforward`` as ``_legacy_C_ops.<op>(tensors..., 'attr', value, ...)``
#: (``python/paddle/incubate/nn/functional/fused_transformer.py``): op -> (the tensor arguments' names in order,
#: attribute -> reference keyword, reference, index of the output in the returned tuple, the tuple's length).
LEGACY_OPS = {
    "fused_attention": (
        (
            "x",
            "pre_ln_scale",
            "pre_ln_bias",
            "qkv_weight",
            "qkv_bias",
            "cache_kv",
            "attn_mask",
            "linear_weight",
            "linear_bias",
            "ln_scale",
            "ln_bias",
        ),
        {
            "num_heads": "num_heads",
            "transpose_qkv_wb": "transpose_qkv_wb",
            "pre_layer_norm": "pre_layer_norm",
            "epsilon": "pre_ln_epsilon",
            "dropout_rate": "dropout_rate",
            "attn_dropout_rate": "attn_dropout_rate",
            "ln_epsilon": "ln_epsilon",
            "dropout_implementation": "mode",
            "add_residual": "add_residual",
        },
        _mha_ref,
        19,
        20,
    ),
    "fused_feedforward": (
        (
            "x",
            "dropout1_seed",
            "dropout2_seed",
            "linear1_weight",
            "linear1_bias",
            "linear2_weight",
            "linear2_bias",
            "ln1_scale",
            "ln1_bias",
            "ln2_scale",
            "ln2_bias",
        ),
        {
            "pre_layer_norm": "pre_layer_norm",
            "ln1_epsilon": "ln1_epsilon",
            "ln2_epsilon": "ln2_epsilon",
            "act_method": "activation",
            "dropout1_rate": "dropout1_rate",
            "dropout2_rate": "dropout2_rate",
            "dropout1_implementation": "mode",
            "add_residual": "add_residual",
        },
        _ffn_ref,
        0,
        11,
    ),
}

#: The fused Paddle op whose reference is running, as (op name, call number), or None: the tracer marks each op it
#: records with the name (:attr:`~paddlefit.estimate.optrace.TracedOp.scope`) and counts one dispatch per call.
_scope: contextvars.ContextVar[tuple[str, int] | None] = contextvars.ContextVar("paddlefit_fused_scope", default=None)
_calls = itertools.count()


def current_scope() -> tuple[str, int] | None:
    """(fused op name, call number) while a fused op's reference runs (:data:`LEGACY_OPS`), else None."""
    return _scope.get()


def _run_legacy(name: str, real: Any, used: set[str], *args: Any) -> Any:
    """``_legacy_C_ops.<name>(*args)`` on CPU tensors through its reference (:data:`LEGACY_OPS`), after Paddle's own
    Python checks have run in the function that calls it; anything else (a GPU tensor, a KV cache) goes to Paddle."""
    names, attrs, ref, index, length = LEGACY_OPS[name]
    tensors = dict(zip(names, args[: len(names)], strict=False))
    given = dict(zip(args[len(names) :: 2], args[len(names) + 1 :: 2], strict=False))  # 'attr', value pairs
    kw = {attrs[k]: v for k, v in given.items() if k in attrs}
    kw["training"] = not given.get("is_test", False)
    if tensors.get("cache_kv") is not None or not tensors["x"].place.is_cpu_place():
        return getattr(real, name)(*args)
    used.add(name)
    token = _scope.set((name, next(_calls)))
    try:
        out = ref(**{k: v for k, v in tensors.items() if "seed" not in k}, **kw)
    finally:
        _scope.reset(token)
    return tuple(out if i == index else None for i in range(length))


class _LegacyOps:
    """Stands in for ``_legacy_C_ops`` in Paddle's fused-transformer module: the ops of :data:`LEGACY_OPS` run their
    reference (:func:`_run_legacy`), every other attribute is Paddle's."""

    def __init__(self, real: Any, used: set[str]) -> None:
        self._real, self._used = real, used

    def __getattr__(self, name: str) -> Any:
        if name in LEGACY_OPS:
            return lambda *args: _run_legacy(name, self._real, self._used, *args)
        return getattr(self._real, name)


@contextlib.contextmanager
def cpu_reference_kernels() -> Iterator[set[str]]:
    """While active, the incubate fused ops of :data:`REFERENCES` called on CPU tensors run their reference math
    (their GPU kernels, or CPU backward, do not exist in a CPU build; module docstring). A call with quantisation
    arguments, or on a GPU tensor, runs Paddle's own function. Paddle's fused transformer ops are replaced one level
    lower, at ``_legacy_C_ops`` in their module (:class:`_LegacyOps`), so Paddle's own argument checks still run and a
    function imported by name before planning is covered too. Yields the set of the fused ops that ran a reference
    (filled as they run): a model calling them cannot train on this CPU. The wrappers keep the original signature
    (``functools.wraps``), so the trace rules bind arguments by the same names. Restored on exit."""
    import functools

    import paddle.incubate.nn.functional as IF

    saved, used = [], set()
    for name, (ref, dev_arg, unsupported) in REFERENCES.items():
        orig = getattr(IF, name, None)
        if orig is None:
            continue
        sig = inspect.signature(orig)

        def fn(*args, _orig=orig, _sig=sig, _ref=ref, _dev=dev_arg, _no=unsupported, _name=name, **kwargs):
            a = bind_args(_sig, args, kwargs)
            quant = any(a.get(n) is not None and not (isinstance(a.get(n), int | float) and a[n] <= 0) for n in _no)
            if quant or not a[_dev].place.is_cpu_place():
                return _orig(*args, **kwargs)
            if _scope.get() is None:  # not one of the kernels a fused transformer op's reference runs
                used.add(_name)
            return _ref(**a)

        saved.append((name, orig))
        setattr(IF, name, functools.wraps(orig)(fn))
    import importlib

    ft = importlib.import_module("paddle.incubate.nn.functional.fused_transformer")
    legacy = getattr(ft, "_legacy_C_ops", None)
    if legacy is not None:
        ft._legacy_C_ops = _LegacyOps(legacy, used)
    try:
        yield used
    finally:
        for name, orig in reversed(saved):
            setattr(IF, name, orig)
        if legacy is not None:
            ft._legacy_C_ops = legacy
