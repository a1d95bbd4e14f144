"""FLOP rules for Paddle's functional ops: ``paddle.matmul``, ``F.linear``/``conv*``, activations, norms,
pooling, embedding, elementwise ``+ - * /``, the losses, zero-FLOP data movement, and (when tracing) views.

A functional call made inside a counted layer or another counted call is not counted again
(:meth:`~paddlefit.probe.flops.FlopCounter.wrap`); formulas and sources are the table in
:mod:`paddlefit.probe.flops`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from paddlefit.estimate.element_flops import ELEMENT_FLOPS, per_element
from paddlefit.estimate.flop_formulas import (
    conv_gemm,
    conv_geometry,
    conv_macs,
    conv_op,
    matmul_gemm,
    needs_grad,
    numel,
)
from paddlefit.probe.fused_hooks import patch_fused

if TYPE_CHECKING:
    from paddlefit.probe.flops import FlopCounter


Rule = Any  # rule(args, kwargs, out): counts one call into the counter


def _arg(args: tuple, kwargs: dict, i: int, name: str, default: Any = None) -> Any:
    """Positional argument ``i`` of a call, else keyword ``name``."""
    return args[i] if len(args) > i else kwargs.get(name, default)


def _matmul_rule(counter: FlopCounter) -> Rule:
    def rule(args, kwargs, out):
        x, y = _arg(args, kwargs, 0, "x"), _arg(args, kwargs, 1, "y")
        tx = kwargs.get("transpose_x", args[2] if len(args) > 2 else False)
        k = x.shape[-2] if tx and len(x.shape) > 1 else x.shape[-1]
        counter.emit_gemm("matmul", "matmul", x, y, out, numel(out) * k, None, matmul_gemm(x, y, out, k))

    return rule


def _linear_rule(counter: FlopCounter) -> Rule:
    def rule(args, kwargs, out):
        x, w, b = _arg(args, kwargs, 0, "x"), _arg(args, kwargs, 1, "weight"), _arg(args, kwargs, 2, "bias")
        # weight (K, N); a 1-D weight (K,) projects onto one output (PaddleDetection's GFL `Integral`: F.linear(x,
        # project) with project (reg_max + 1,)), the output then has x's shape without its last axis
        n, k = (w.shape[1], w.shape[0]) if len(w.shape) > 1 else (1, w.shape[0])
        counter.emit_gemm("linear", "linear", x, w, out, numel(out) * k, b, (1, numel(out) // max(n, 1), n, k))

    return rule


def _conv_rule(counter: FlopCounter, transposed: bool, name: str) -> Rule:
    def rule(args, kwargs, out):
        x, w, b = _arg(args, kwargs, 0, "x"), _arg(args, kwargs, 1, "weight"), _arg(args, kwargs, 2, "bias")
        groups = int(kwargs.get("groups", 1) or 1)
        fmt = str(kwargs.get("data_format", "NCHW"))
        # paddle.nn.functional.conv2d(x, weight, bias, stride, padding, dilation, groups, data_format)
        stride, dilation = _arg(args, kwargs, 3, "stride", 1), _arg(args, kwargs, 5, "dilation", 1)
        counter.emit_gemm(
            "conv",
            conv_op(name, x, groups, fmt),
            x,
            w,
            out,
            conv_macs(w, out, transposed, x),
            b,
            conv_gemm(w, out, x, groups, transposed),
            groups,
            fmt,
            conv_geometry(w, out, stride, dilation, fmt, transposed),
        )

    return rule


def _ew(counter: FlopCounter, kind: str, op: str, cls: str = "elementwise") -> Rule:
    """An op of :func:`~paddlefit.estimate.element_flops.per_element` FLOPs per output element."""
    per = per_element(op)

    def rule(args, kwargs, out):
        counter.emit_elementwise(kind, op, per, (*args, *kwargs.values()), out, cls)

    return rule


def _pool_rule(counter: FlopCounter, op: str) -> Rule:
    def rule(args, kwargs, out):
        x = _arg(args, kwargs, 0, "x")
        counter.emit("pool", op, "reduce", numel(x), numel(x) if needs_grad(x) else 0, (x,), out)

    return rule


def _embedding_rule(counter: FlopCounter) -> Rule:
    def rule(args, kwargs, out):
        x, w = _arg(args, kwargs, 0, "x"), _arg(args, kwargs, 1, "weight")
        counter.emit("embedding", "embedding", "embedding", 0, numel(out) if needs_grad(w) else 0, (x, w), out)

    return rule


def _move_rule(counter: FlopCounter, op: str, cls: str = "move") -> Rule:
    def rule(args, kwargs, out):
        counter.emit("move", op, cls, 0, 0, (*args, *kwargs.values()), out)

    return rule


def _loss_rule(counter: FlopCounter, op: str) -> Rule:
    """A loss by its fluid op name (as Paddle's AMP lists name them): per-element FLOPs of its first input."""
    cls, per = ELEMENT_FLOPS[op]

    def rule(args, kwargs, out):
        x = args[0] if args else next(iter(kwargs.values()), None)
        counter.emit(
            "loss", op, cls, per * numel(x), per * numel(x) if needs_grad(x) else 0, (*args, *kwargs.values()), out
        )

    return rule


def _wrap_gemms(counter: FlopCounter, paddle: Any, F: Any, ptensor: Any) -> None:
    """matmul (also ``paddle.tensor``'s, which paddle.nn's layers call: nn.MultiHeadAttention's P.V,
    python/paddle/nn/layer/transformer.py), linear, and the convolutions."""
    for owner, name in (
        (paddle, "matmul"),
        (paddle, "bmm"),
        (paddle, "mm"),
        (paddle.Tensor, "matmul"),
        (paddle.Tensor, "__matmul__"),
        (paddle.Tensor, "bmm"),
        (ptensor, "matmul"),
    ):
        counter.wrap(owner, name, _matmul_rule(counter))
    counter.wrap(F, "linear", _linear_rule(counter))
    for name in ("conv1d", "conv2d", "conv3d"):
        counter.wrap(F, name, _conv_rule(counter, False, name))
    for name in ("conv1d_transpose", "conv2d_transpose", "conv3d_transpose"):
        counter.wrap(F, name, _conv_rule(counter, True, name))


def _wrap_elementwise(counter: FlopCounter, paddle: Any, F: Any) -> None:
    """Activations, softmax, norms, pooling, embedding and the elementwise ``+ - * /``."""
    for name in (
        "relu",
        "relu6",
        "leaky_relu",
        "prelu",
        "elu",
        "silu",
        "swish",
        "sigmoid",
        "tanh",
        "hardswish",
        "hardsigmoid",
        "mish",
        "relu_",
    ):
        counter.wrap(F, name, _ew(counter, "activation", name.rstrip("_")))
    for owner, name in ((paddle, "tanh"), (paddle, "sigmoid"), (paddle, "exp")):
        counter.wrap(owner, name, _ew(counter, "activation", name))
    for name in ("gelu", "swiglu"):
        counter.wrap(F, name, _ew(counter, "activation", name))
    for name in ("softmax", "log_softmax"):
        counter.wrap(F, name, _ew(counter, "softmax", name, "softmax"))
    for name in ("layer_norm", "group_norm", "instance_norm", "batch_norm"):
        counter.wrap(F, name, _ew(counter, "norm", name, "norm"))
    for kind in ("max", "avg"):
        for name in (
            f"{kind}_pool1d",
            f"{kind}_pool2d",
            f"{kind}_pool3d",
            f"adaptive_{kind}_pool1d",
            f"adaptive_{kind}_pool2d",
            f"adaptive_{kind}_pool3d",
        ):
            counter.wrap(F, name, _pool_rule(counter, f"{kind}_pool"))
    counter.wrap(F, "embedding", _embedding_rule(counter))
    ops = {
        "__add__": "add",
        "__radd__": "add",
        "__sub__": "subtract",
        "__rsub__": "subtract",
        "__mul__": "multiply",
        "__rmul__": "multiply",
        "__truediv__": "divide",
        "__rtruediv__": "divide",
    }
    for name, op in ops.items():
        counter.wrap(paddle.Tensor, name, _ew(counter, "elementwise", op))
    for name in ("add", "subtract", "multiply", "divide"):
        counter.wrap(paddle, name, _ew(counter, "elementwise", name))


def _wrap_losses_and_moves(counter: FlopCounter, paddle: Any, F: Any, ptensor: Any) -> None:
    """The losses, then the zero-FLOP kernels (counted as ops, kernel launches, with no FLOPs)."""
    for name, op in (
        ("cross_entropy", "softmax_with_cross_entropy"),
        ("softmax_with_cross_entropy", "softmax_with_cross_entropy"),
        ("ctc_loss", "warpctc"),
        ("nll_loss", "nll_loss"),
        ("binary_cross_entropy_with_logits", "sigmoid_cross_entropy_with_logits"),
        ("binary_cross_entropy", "bce_loss"),
        ("mse_loss", "mse_loss"),
        ("l1_loss", "l1_loss"),
        ("smooth_l1_loss", "huber_loss"),
    ):
        counter.wrap(F, name, _loss_rule(counter, op))
    counter.wrap(F, "dropout", _move_rule(counter, "dropout", "elementwise"))
    for owner, name in (
        (paddle, "transpose"),
        (paddle.Tensor, "transpose"),
        (paddle, "concat"),
        (paddle.Tensor, "t"),
        (ptensor, "transpose"),
        (ptensor, "concat"),
    ):
        counter.wrap(owner, name, _move_rule(counter, "concat" if name == "concat" else "transpose"))
    for name in ("interpolate", "upsample"):
        counter.wrap(F, name, _move_rule(counter, "interpolate"))
    # im2col: writes kernel_h x kernel_w x its input (49x for RedNet's 7x7 involution); Paddle's op `unfold`
    counter.wrap(F, "unfold", _move_rule(counter, "unfold"))
    for owner, name in ((paddle, "mean"), (paddle.Tensor, "mean"), (paddle, "sum"), (paddle.Tensor, "sum")):
        counter.wrap(owner, name, _move_rule(counter, "reduce_" + name, "reduce"))


def patch_functional(counter: FlopCounter) -> None:
    """Wrap Paddle's functional ops (``paddle.matmul``, ``F.conv2d``, ``F.softmax``, ``Tensor.__add__``, the losses,
    the zero-FLOP data movements and, when recording a trace, the views) so that each call counts into ``counter``
    (:meth:`~paddlefit.probe.flops.FlopCounter.wrap`; the counter restores them on exit)."""
    import sys

    import paddle
    import paddle.nn.functional as F

    ptensor = sys.modules["paddle.tensor"]  # the module (the attribute `paddle.tensor` is a function in Paddle 3.3)
    _wrap_gemms(counter, paddle, F, ptensor)
    _wrap_elementwise(counter, paddle, F)
    _wrap_losses_and_moves(counter, paddle, F, ptensor)
    patch_fused(counter)  # flash attention and Paddle's incubate fused ops: one kernel each
    if counter.recorder is None:
        return
    # views launch no kernel: traced only when recording, so tensor identities and dtypes flow through
    for owner, name in (
        (paddle, "reshape"),
        (paddle.Tensor, "reshape"),
        (ptensor, "reshape"),
        (paddle, "flatten"),
        (paddle.Tensor, "flatten"),
        (paddle, "squeeze"),
        (paddle.Tensor, "squeeze"),
        (paddle, "unsqueeze"),
        (paddle.Tensor, "unsqueeze"),
        (paddle, "split"),
        (paddle.Tensor, "split"),
        (paddle, "chunk"),
        (paddle.Tensor, "chunk"),
        (paddle.Tensor, "__getitem__"),
    ):
        counter.wrap(owner, name, _move_rule(counter, "view", "view"))
