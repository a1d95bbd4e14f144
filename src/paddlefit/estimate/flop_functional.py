"""FLOP rules for Paddle's functional ops: ``paddle.matmul``, ``F.linear``/``conv*``, activations, norms,
pooling, embedding, elementwise ``+ - * /``, the losses, zero-FLOP data movement, and (when tracing) views.

A functional call made inside a counted layer or another counted call is not counted again
(:meth:`~paddlefit.estimate.flops.FlopCounter.wrap`); formulas and sources are the table in
:mod:`paddlefit.estimate.flops`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
from paddlefit.estimate.fused import patch_fused

if TYPE_CHECKING:
    from paddlefit.estimate.flops import FlopCounter


def patch_functional(counter: FlopCounter) -> None:
    """Wrap Paddle's functional ops (``paddle.matmul``, ``F.conv2d``, ``F.softmax``, ``Tensor.__add__``, the losses,
    the zero-FLOP data movements and, when recording a trace, the views) so that each call counts into ``counter``
    (:meth:`~paddlefit.estimate.flops.FlopCounter.wrap`; the counter restores them on exit)."""
    import sys

    import paddle
    import paddle.nn.functional as F

    ptensor = sys.modules["paddle.tensor"]  # the module (the attribute `paddle.tensor` is a function in Paddle 3.3)

    def matmul_rule(args, kwargs, out):
        x = args[0] if args else kwargs.get("x")
        y = args[1] if len(args) > 1 else kwargs.get("y")
        tx = kwargs.get("transpose_x", args[2] if len(args) > 2 else False)
        k = x.shape[-2] if tx and len(x.shape) > 1 else x.shape[-1]
        counter.emit_gemm("matmul", "matmul", x, y, out, numel(out) * k, None, matmul_gemm(x, y, out, k))

    def linear_rule(args, kwargs, out):
        x = args[0] if args else kwargs.get("x")
        w = args[1] if len(args) > 1 else kwargs.get("weight")
        b = args[2] if len(args) > 2 else kwargs.get("bias")
        # weight (K, N); a 1-D weight (K,) projects onto one output (PaddleDetection's GFL `Integral`: F.linear(x,
        # project) with project (reg_max + 1,)), the output then has x's shape without its last axis
        n, k = (w.shape[1], w.shape[0]) if len(w.shape) > 1 else (1, w.shape[0])
        counter.emit_gemm("linear", "linear", x, w, out, numel(out) * k, b, (1, numel(out) // max(n, 1), n, k))

    def conv_rule(transposed, name):
        def rule(args, kwargs, out):
            x = args[0] if args else kwargs.get("x")
            w = args[1] if len(args) > 1 else kwargs.get("weight")
            b = args[2] if len(args) > 2 else kwargs.get("bias")
            groups = int(kwargs.get("groups", 1) or 1)
            fmt = str(kwargs.get("data_format", "NCHW"))
            # paddle.nn.functional.conv2d(x, weight, bias, stride, padding, dilation, groups, data_format)
            stride = args[3] if len(args) > 3 else kwargs.get("stride", 1)
            dilation = args[5] if len(args) > 5 else kwargs.get("dilation", 1)
            counter.emit_gemm("conv", conv_op(name, x, groups, fmt), x, w, out,
                              conv_macs(w, out, transposed, x), b, conv_gemm(w, out, x, groups, transposed), groups,
                              fmt, conv_geometry(w, out, stride, dilation, fmt, transposed))  # fmt: skip

        return rule

    def ew(kind, op, cls="elementwise"):
        per = per_element(op)

        def rule(args, kwargs, out):
            counter.emit_elementwise(kind, op, per, (*args, *kwargs.values()), out, cls)

        return rule

    def pool_rule(op):
        def rule(args, kwargs, out):
            x = args[0] if args else kwargs.get("x")
            counter.emit("pool", op, "reduce", numel(x), numel(x) if needs_grad(x) else 0, (x,), out)

        return rule

    def embedding_rule(args, kwargs, out):
        x = args[0] if args else kwargs.get("x")
        w = args[1] if len(args) > 1 else kwargs.get("weight")
        counter.emit("embedding", "embedding", "embedding", 0, numel(out) if needs_grad(w) else 0, (x, w), out)

    def move_rule(op, cls="move"):
        def rule(args, kwargs, out):
            counter.emit("move", op, cls, 0, 0, (*args, *kwargs.values()), out)

        return rule

    # paddle.nn's layers call `paddle.tensor.matmul` / `.transpose` / `.reshape` (nn.MultiHeadAttention's P.V,
    # python/paddle/nn/layer/transformer.py): the same functions under another module, wrapped there too
    for owner, name in ((paddle, "matmul"), (paddle, "bmm"), (paddle, "mm"), (paddle.Tensor, "matmul"),
                        (paddle.Tensor, "__matmul__"), (paddle.Tensor, "bmm"), (ptensor, "matmul")):  # fmt: skip
        counter.wrap(owner, name, matmul_rule)
    counter.wrap(F, "linear", linear_rule)
    for name in ("conv1d", "conv2d", "conv3d"):
        counter.wrap(F, name, conv_rule(False, name))
    for name in ("conv1d_transpose", "conv2d_transpose", "conv3d_transpose"):
        counter.wrap(F, name, conv_rule(True, name))
    for name in ("relu", "relu6", "leaky_relu", "prelu", "elu", "silu", "swish", "sigmoid", "tanh",
                 "hardswish", "hardsigmoid", "mish", "relu_"):  # fmt: skip
        counter.wrap(F, name, ew("activation", name.rstrip("_")))
    for owner, name in ((paddle, "tanh"), (paddle, "sigmoid"), (paddle, "exp")):
        counter.wrap(owner, name, ew("activation", name))
    counter.wrap(F, "gelu", ew("activation", "gelu"))
    counter.wrap(F, "swiglu", ew("activation", "swiglu"))
    counter.wrap(F, "softmax", ew("softmax", "softmax", "softmax"))
    counter.wrap(F, "log_softmax", ew("softmax", "log_softmax", "softmax"))
    counter.wrap(F, "layer_norm", ew("norm", "layer_norm", "norm"))
    counter.wrap(F, "group_norm", ew("norm", "group_norm", "norm"))
    counter.wrap(F, "instance_norm", ew("norm", "instance_norm", "norm"))
    counter.wrap(F, "batch_norm", ew("norm", "batch_norm", "norm"))
    for name in ("max_pool1d", "max_pool2d", "max_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d",
                 "adaptive_max_pool3d"):  # fmt: skip
        counter.wrap(F, name, pool_rule("max_pool"))
    for name in ("avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
                 "adaptive_avg_pool3d"):  # fmt: skip
        counter.wrap(F, name, pool_rule("avg_pool"))
    counter.wrap(F, "embedding", embedding_rule)
    ops = {"__add__": "add", "__radd__": "add", "__sub__": "subtract", "__rsub__": "subtract",
           "__mul__": "multiply", "__rmul__": "multiply", "__truediv__": "divide", "__rtruediv__": "divide"}
    for name, op in ops.items():
        counter.wrap(paddle.Tensor, name, ew("elementwise", op))
    for name in ("add", "subtract", "multiply", "divide"):
        counter.wrap(paddle, name, ew("elementwise", name))
    # losses (their fluid op names, as Paddle's AMP lists name them)
    def loss_rule(op, per, cls):
        def rule(args, kwargs, out):
            x = args[0] if args else next(iter(kwargs.values()), None)
            counter.emit("loss", op, cls, per * numel(x), per * numel(x) if needs_grad(x) else 0,
                         (*args, *kwargs.values()), out)  # fmt: skip

        return rule

    for name, op in (("cross_entropy", "softmax_with_cross_entropy"),
                     ("softmax_with_cross_entropy", "softmax_with_cross_entropy"), ("ctc_loss", "warpctc"),
                     ("nll_loss", "nll_loss"),
                     ("binary_cross_entropy_with_logits", "sigmoid_cross_entropy_with_logits"),
                     ("binary_cross_entropy", "bce_loss"), ("mse_loss", "mse_loss"), ("l1_loss", "l1_loss"),
                     ("smooth_l1_loss", "huber_loss")):  # fmt: skip
        cls, per = ELEMENT_FLOPS[op]
        counter.wrap(F, name, loss_rule(op, per, cls))
    # zero-FLOP kernels: counted as ops (kernel launches), no FLOPs
    counter.wrap(F, "dropout", move_rule("dropout", "elementwise"))
    for owner, name in ((paddle, "transpose"), (paddle.Tensor, "transpose"), (paddle, "concat"),
                        (paddle.Tensor, "t"), (ptensor, "transpose"), (ptensor, "concat")):  # fmt: skip
        counter.wrap(owner, name, move_rule("concat" if name == "concat" else "transpose"))
    for name in ("interpolate", "upsample"):
        counter.wrap(F, name, move_rule("interpolate"))
    for owner, name in ((paddle, "mean"), (paddle.Tensor, "mean"), (paddle, "sum"), (paddle.Tensor, "sum")):
        counter.wrap(owner, name, move_rule("reduce_" + name, "reduce"))
    patch_fused(counter)  # flash attention and Paddle's incubate fused ops: one kernel each
    if counter.recorder is None:
        return
    # views launch no kernel: traced only when recording, so tensor identities and dtypes flow through
    for owner, name in ((paddle, "reshape"), (paddle.Tensor, "reshape"), (ptensor, "reshape"), (paddle, "flatten"),
                        (paddle.Tensor, "flatten"), (paddle, "squeeze"), (paddle.Tensor, "squeeze"),
                        (paddle, "unsqueeze"), (paddle.Tensor, "unsqueeze"), (paddle, "split"),
                        (paddle.Tensor, "split"), (paddle, "chunk"), (paddle.Tensor, "chunk"),
                        (paddle.Tensor, "__getitem__")):  # fmt: skip
        counter.wrap(owner, name, move_rule("view", "view"))
