"""Hook-based FLOPs counter for Paddle dynamic-graph models (forward and backward).

Counting: forward hooks on leaf layers of known types, plus wrappers around the functional ops users call
directly (``paddle.matmul``, ``Tensor.__matmul__``, ``F.softmax``, elementwise ``+ - * /``...). A functional
call made while a counted layer runs is not counted again. A layer called twice is counted twice.

Conventions (1 MAC = 2 FLOPs). Per-op forward formulas follow Paddle's static cost model,
``python/paddle/utils/flops.py`` (Paddle 3.3.1), where it has one:

===================  ==========================================================================
op                   forward FLOPs
===================  ==========================================================================
conv (1/2/3-D)        2 * out_numel * (C_in / groups) * prod(kernel)  (+ out_numel with bias)
linear / matmul       2 * M * N * K  (+ out_numel with bias)
layer/group norm      8 * numel            (flops.py ``layer_norm`` with epsilon)
batch norm            4 * numel            (``paddle.hapi.dynamic_flops.count_bn``: 2 MACs/element)
gelu                  5 * numel            (flops.py ``gelu``)
softmax               3 * numel            (flops.py ``softmax``)
relu-class, silu,     1 * numel            (flops.py ``relu``/``silu``/elementwise)
sigmoid, tanh,
hardswish, + - * /
pooling               numel of the input   (flops.py ``pool``)
embedding, dropout    0                    (flops.py ``c_embedding``/``dropout``)
===================  ==========================================================================

Backward rule: for GEMM-like ops (conv, linear, matmul) the gradient with respect to each operand that
requires a gradient costs one forward GEMM (dX = dY·Wᵀ, dW = Xᵀ·dY), so backward = 2 x forward when both
are needed (Kaplan et al. 2020, arXiv 2001.08361 §2.1; Narayanan et al. 2021, arXiv 2104.04473 §5.1);
an input with ``stop_gradient=True`` (e.g. the image into the first conv) gets no dX. Bias gradient:
out_numel. Every other op: backward = forward FLOPs if any input requires a gradient (an approximation,
these ops are < 2% of the total for CNNs and transformers). Embedding backward: out_numel (scatter-add).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FlopsCount:
    """FLOPs of one forward (+ backward) pass at ``batch_size``.

    Attributes:
        batch_size: samples in the counted pass.
        forward_flops: forward FLOPs of the whole batch.
        backward_flops: backward FLOPs of the whole batch (rule in the module docstring).
        forward_by_op: forward FLOPs per op kind (``conv``, ``matmul``, ``norm``...).
        forward_ops: number of counted op calls in the forward (a lower bound of the kernels launched:
            reshapes, transposes and other zero-FLOP ops are not counted, dropout and embedding are).
    """

    batch_size: int
    forward_flops: int = 0
    backward_flops: int = 0
    forward_by_op: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    forward_ops: int = 0

    @property
    def forward_flops_per_sample(self) -> float:
        """Forward FLOPs per sample."""
        return self.forward_flops / self.batch_size

    @property
    def train_flops_per_sample(self) -> float:
        """Forward + backward FLOPs per sample (the optimizer update is not counted)."""
        return (self.forward_flops + self.backward_flops) / self.batch_size

    def add(self, kind: str, fwd: int, bwd: int) -> None:
        """Add one op's forward and backward FLOPs under ``kind``."""
        self.forward_flops += int(fwd)
        self.backward_flops += int(bwd)
        self.forward_ops += 1
        self.forward_by_op[kind] += int(fwd)


def _numel(t: Any) -> int:
    shape = getattr(t, "shape", None)
    return math.prod(shape) if shape is not None else 1


def _needs_grad(t: Any) -> bool:
    return hasattr(t, "stop_gradient") and not t.stop_gradient


def _first_tensor(args: tuple) -> Any:
    for a in args:
        if hasattr(a, "shape"):
            return a
        if isinstance(a, list | tuple):
            for b in a:
                if hasattr(b, "shape"):
                    return b
    return None


def _gemm(count: FlopsCount, kind: str, x: Any, w: Any, out: Any, macs: int, bias: Any) -> None:
    fwd = 2 * macs + (_numel(out) if bias is not None else 0)
    bwd = 0
    if _needs_grad(x):
        bwd += 2 * macs
    if _needs_grad(w):
        bwd += 2 * macs
    if bias is not None and _needs_grad(bias):
        bwd += _numel(out)
    count.add(kind, fwd, bwd)


def _conv_macs(weight: Any, out: Any, transposed: bool, x: Any) -> int:
    wshape = list(weight.shape)
    kernel = math.prod(wshape[2:])
    if transposed:  # weight (C_in, C_out/groups, *k): every input element scatters into C_out/g * k outputs
        return _numel(x) * wshape[1] * kernel
    return _numel(out) * wshape[1] * kernel  # weight (C_out, C_in/groups, *k)


def _elementwise(count: FlopsCount, kind: str, per_elem: int, inputs: tuple, out: Any) -> None:
    fwd = per_elem * _numel(out)
    bwd = fwd if any(_needs_grad(t) for t in inputs) else 0
    count.add(kind, fwd, bwd)


class FlopCounter:
    """Context manager that counts FLOPs of ``model``'s forward calls into ``count``.

    Installs forward hooks on leaf layers of known types and wrappers around functional ops on entry,
    removes and restores all of them on exit (also on error). Used by :func:`count_flops` and by the memory
    probe, which counts during its first real training forward.
    """

    def __init__(self, model: Any, count: FlopsCount) -> None:
        self.model = model
        self.count = count
        self.depth = 0
        self.handles: list[Any] = []
        self.patched: list[tuple[Any, str, Any]] = []

    # ---- layers
    def _layer_rules(self):
        from paddle import nn

        conv = (nn.Conv1D, nn.Conv2D, nn.Conv3D)
        conv_t = (nn.Conv1DTranspose, nn.Conv2DTranspose, nn.Conv3DTranspose)
        bn = (nn.BatchNorm, nn.BatchNorm1D, nn.BatchNorm2D, nn.BatchNorm3D, nn.SyncBatchNorm)
        ln = (nn.LayerNorm, nn.GroupNorm, nn.InstanceNorm1D, nn.InstanceNorm2D, nn.InstanceNorm3D)
        act1 = (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.PReLU, nn.ELU, nn.SiLU, nn.Sigmoid, nn.Tanh,
                nn.Hardswish, nn.Hardsigmoid, nn.Swish, nn.Mish)  # fmt: skip
        pool = (nn.MaxPool1D, nn.MaxPool2D, nn.MaxPool3D, nn.AvgPool1D, nn.AvgPool2D, nn.AvgPool3D,
                nn.AdaptiveAvgPool1D, nn.AdaptiveAvgPool2D, nn.AdaptiveAvgPool3D,
                nn.AdaptiveMaxPool1D, nn.AdaptiveMaxPool2D, nn.AdaptiveMaxPool3D)  # fmt: skip
        c = self.count

        def on_conv(layer, inp, out, transposed=False):
            x = inp[0]
            _gemm(c, "conv", x, layer.weight, out, _conv_macs(layer.weight, out, transposed, x), layer.bias)

        def on_linear(layer, inp, out):
            x = inp[0]
            _gemm(c, "linear", x, layer.weight, out, _numel(out) * layer.weight.shape[0], layer.bias)

        def on_params_elementwise(kind, per):
            def rule(layer, inp, out):
                tensors = (inp[0], *layer.parameters(include_sublayers=False))
                _elementwise(c, kind, per, tensors, out)

            return rule

        def on_pool(layer, inp, out):
            x = inp[0]
            c.add("pool", _numel(x), _numel(x) if _needs_grad(x) else 0)

        def on_embedding(layer, inp, out):
            c.add("embedding", 0, _numel(out) if _needs_grad(layer.weight) else 0)

        return [
            (conv, on_conv),
            (conv_t, lambda layer, i, o: on_conv(layer, i, o, transposed=True)),
            (nn.Linear, on_linear),
            (bn, on_params_elementwise("norm", 4)),
            (ln, on_params_elementwise("norm", 8)),
            (nn.GELU, on_params_elementwise("activation", 5)),
            (act1, on_params_elementwise("activation", 1)),
            (nn.Softmax, on_params_elementwise("softmax", 3)),
            (pool, on_pool),
            (nn.Embedding, on_embedding),
            (nn.Dropout, lambda layer, i, o: c.add("dropout", 0, 0)),
        ]

    def _hook_layers(self) -> None:
        rules = self._layer_rules()
        for layer in self.model.sublayers(include_self=True):
            for types, rule in rules:
                if isinstance(layer, types):
                    self.handles.append(layer.register_forward_pre_hook(self._enter))
                    self.handles.append(layer.register_forward_post_hook(self._make_exit(rule)))
                    break

    def _enter(self, layer, inp):
        self.depth += 1

    def _make_exit(self, rule):
        def hook(layer, inp, out):
            self.depth -= 1
            if self.depth == 0:
                rule(layer, inp, out)

        return hook

    # ---- functional ops
    def _wrap(self, owner: Any, name: str, rule) -> None:
        orig = getattr(owner, name, None)
        if orig is None:
            return
        counter = self

        def wrapper(*args, **kwargs):
            counter.depth += 1
            try:
                out = orig(*args, **kwargs)
            finally:
                counter.depth -= 1
            if counter.depth == 0:
                rule(args, kwargs, out)
            return out

        self.patched.append((owner, name, orig))
        setattr(owner, name, wrapper)

    def _patch_functional(self) -> None:
        import paddle
        import paddle.nn.functional as F

        c = self.count

        def matmul_rule(args, kwargs, out):
            x = args[0] if args else kwargs.get("x")
            y = args[1] if len(args) > 1 else kwargs.get("y")
            tx = kwargs.get("transpose_x", args[2] if len(args) > 2 else False)
            k = x.shape[-2] if tx and len(x.shape) > 1 else x.shape[-1]
            _gemm(c, "matmul", x, y, out, _numel(out) * k, None)

        def linear_rule(args, kwargs, out):
            x = args[0] if args else kwargs.get("x")
            w = args[1] if len(args) > 1 else kwargs.get("weight")
            b = args[2] if len(args) > 2 else kwargs.get("bias")
            _gemm(c, "linear", x, w, out, _numel(out) * w.shape[0], b)

        def conv_rule(transposed):
            def rule(args, kwargs, out):
                x = args[0] if args else kwargs.get("x")
                w = args[1] if len(args) > 1 else kwargs.get("weight")
                b = args[2] if len(args) > 2 else kwargs.get("bias")
                _gemm(c, "conv", x, w, out, _conv_macs(w, out, transposed, x), b)

            return rule

        def ew(kind, per):
            def rule(args, kwargs, out):
                _elementwise(c, kind, per, (*args, *kwargs.values()), out)

            return rule

        def pool_rule(args, kwargs, out):
            x = args[0] if args else kwargs.get("x")
            c.add("pool", _numel(x), _numel(x) if _needs_grad(x) else 0)

        def embedding_rule(args, kwargs, out):
            w = args[1] if len(args) > 1 else kwargs.get("weight")
            c.add("embedding", 0, _numel(out) if _needs_grad(w) else 0)

        for owner, name in ((paddle, "matmul"), (paddle, "bmm"), (paddle, "mm"), (paddle.Tensor, "matmul"),
                            (paddle.Tensor, "__matmul__"), (paddle.Tensor, "bmm")):  # fmt: skip
            self._wrap(owner, name, matmul_rule)
        self._wrap(F, "linear", linear_rule)
        for name in ("conv1d", "conv2d", "conv3d"):
            self._wrap(F, name, conv_rule(False))
        for name in ("conv1d_transpose", "conv2d_transpose", "conv3d_transpose"):
            self._wrap(F, name, conv_rule(True))
        for name in ("relu", "relu6", "leaky_relu", "prelu", "elu", "silu", "swish", "sigmoid", "tanh",
                     "hardswish", "hardsigmoid", "mish", "relu_"):  # fmt: skip
            self._wrap(F, name, ew("activation", 1))
        for owner, name in ((paddle, "tanh"), (paddle, "sigmoid"), (paddle, "exp")):
            self._wrap(owner, name, ew("activation", 1))
        self._wrap(F, "gelu", ew("activation", 5))
        self._wrap(F, "softmax", ew("softmax", 3))
        self._wrap(F, "log_softmax", ew("softmax", 3))
        self._wrap(F, "layer_norm", ew("norm", 8))
        self._wrap(F, "group_norm", ew("norm", 8))
        self._wrap(F, "instance_norm", ew("norm", 8))
        self._wrap(F, "batch_norm", ew("norm", 4))
        for name in ("max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
                     "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
                     "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d"):  # fmt: skip
            self._wrap(F, name, pool_rule)
        self._wrap(F, "embedding", embedding_rule)
        for name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
                     "__rtruediv__"):  # fmt: skip
            self._wrap(paddle.Tensor, name, ew("elementwise", 1))
        for name in ("add", "subtract", "multiply", "divide"):
            self._wrap(paddle, name, ew("elementwise", 1))

    def __enter__(self) -> FlopCounter:
        self._hook_layers()
        self._patch_functional()
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self.handles:
            h.remove()
        for owner, name, orig in reversed(self.patched):
            setattr(owner, name, orig)


def count_flops(model: Any, inputs: list[Any]) -> FlopsCount:
    """Count forward and backward FLOPs of one forward pass of ``model`` on ``inputs``.

    Args:
        model: a ``paddle.nn.Layer`` in train mode (parameters trainable for the backward rule).
        inputs: tensors of shape (batch, *per_sample_shape), all with the same batch size.

    Returns:
        FlopsCount for the batch; use ``*_per_sample`` for per-sample values.

    Raises:
        Whatever the model's forward raises on these inputs (the caller turns it into a ModelError).
    """
    batch = int(inputs[0].shape[0]) if inputs and len(inputs[0].shape) else 1
    count = FlopsCount(batch_size=batch)
    with FlopCounter(model, count):
        model(*inputs)
    return count
