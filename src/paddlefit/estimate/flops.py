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
cross_entropy, ctc    3 * numel of the logits (the softmax rule; the gather and log are per row)
bce, mse, l1 losses   1 * numel            (elementwise rule)
LSTM / GRU /          per layer and direction: 2 * B * T * G * H * (I_l + R) GEMMs + 2 * B * T * G * H bias
SimpleRNN             + E * B * T * H gate arithmetic; G = 4 / 3 / 1 gates, E = 9 / 8 / 1, I_l = input
                      size (layer 0) or D * H, R = H (the proj_size when set, + 2 * B * T * H * R for it)
===================  ==========================================================================

The recurrent formula is the GEMM count of the cell equations in Paddle's ``LSTMCell``/``GRUCell``/
``SimpleRNNCell`` docstrings (``python/paddle/nn/layer/rnn.py``): each gate is ``W_ih x_t + b_ih + W_hh h_{t-1}
+ b_hh``; E counts the elementwise ops of the cell update (LSTM: 3 sigmoid, 2 tanh, 3 multiply, 1 add; GRU: 2
sigmoid, 1 tanh, 3 multiply, 2 add; SimpleRNN: 1 tanh).

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
            views such as reshape are not counted; transpose, concat, interpolate, dropout, embedding are).
    """

    batch_size: int
    forward_flops: int = 0
    backward_flops: int = 0
    forward_by_op: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    forward_ops: int = 0
    #: the operator trace (:class:`~paddlefit.estimate.optrace.OpTrace`) when one was recorded
    trace: Any = None

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


def _op_name(layer_type: str) -> str:
    """Paddle op name of an activation/norm layer class (``ReLU6`` -> ``relu6``, ``LayerNorm`` -> ``layer_norm``)."""
    names = {"LayerNorm": "layer_norm", "GroupNorm": "group_norm", "SiLU": "silu", "Swish": "swish",
             "LeakyReLU": "leaky_relu", "InstanceNorm1D": "instance_norm", "InstanceNorm2D": "instance_norm",
             "InstanceNorm3D": "instance_norm", "Hardswish": "hardswish", "Hardsigmoid": "hardsigmoid"}
    return names.get(layer_type, layer_type.lower())


def _conv_op(name: str, x: Any, groups: int, data_format: str) -> str:
    """Paddle's op for a convolution: ``depthwise_<name>`` when groups == input channels (Paddle then runs its
    own depthwise kernel, ``depthwise_conv2d`` / ``depthwise_conv2d_transpose``,
    ``python/paddle/nn/functional/conv.py``), else ``name``."""
    channels = x.shape[1 if data_format.upper().startswith("NC") else -1]
    return "depthwise_" + name if groups > 1 and groups == channels else name


def _first_tensor(args: tuple) -> Any:
    for a in args:
        if hasattr(a, "shape"):
            return a
        if isinstance(a, list | tuple):
            for b in a:
                if hasattr(b, "shape"):
                    return b
    return None


def _gemm_flops(x: Any, w: Any, out: Any, macs: int, bias: Any) -> tuple[int, int]:
    """(forward, backward) FLOPs of a GEMM-like op (rule in the module docstring)."""
    fwd = 2 * macs + (_numel(out) if bias is not None else 0)
    bwd = 0
    if _needs_grad(x):
        bwd += 2 * macs
    if _needs_grad(w):
        bwd += 2 * macs
    if bias is not None and _needs_grad(bias):
        bwd += _numel(out)
    return fwd, bwd


def _conv_macs(weight: Any, out: Any, transposed: bool, x: Any) -> int:
    wshape = list(weight.shape)
    kernel = math.prod(wshape[2:])
    if transposed:  # weight (C_in, C_out/groups, *k): every input element scatters into C_out/g * k outputs
        return _numel(x) * wshape[1] * kernel
    return _numel(out) * wshape[1] * kernel  # weight (C_out, C_in/groups, *k)


def _conv_gemm(weight: Any, out: Any, x: Any, groups: int, transposed: bool) -> tuple[int, int, int, int]:
    """Implicit-GEMM shape (groups, M, N, K) of a convolution (NCHW): M = samples x output pixels,
    N = output channels per group, K = input channels per group x kernel elements."""
    wshape = list(weight.shape)
    kernel = math.prod(wshape[2:])
    if transposed:  # as the GEMM of its gradient: M = input pixels, N = C_out/g x k, K = C_in/g
        cin = wshape[0]
        return groups, _numel(x) // max(cin, 1), wshape[1] * kernel, cin // groups
    cout = wshape[0]
    return groups, _numel(out) // max(cout, 1), cout // groups, wshape[1] * kernel


def _matmul_gemm(x: Any, y: Any, out: Any, k: int) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of ``paddle.matmul``: a 2-D right operand folds every leading dim of x into M."""
    oshape = list(out.shape)
    n = oshape[-1] if oshape else 1
    if len(y.shape) <= 2:
        return 1, _numel(out) // max(n, 1), n, k
    m = oshape[-2] if len(oshape) > 1 else 1
    return _numel(out) // max(m * n, 1), m, n, k


class FlopCounter:
    """Context manager that counts FLOPs of ``model``'s forward calls into ``count``.

    Installs forward hooks on leaf layers of known types and wrappers around functional ops on entry,
    removes and restores all of them on exit (also on error). Used by :func:`count_flops` and by the memory
    probe, which counts during its first real training forward. With a ``recorder`` every counted op, and the
    zero-FLOP data-movement ops (transpose, concat, interpolate, reshape-like views), is also recorded into an
    operator trace (:mod:`paddlefit.estimate.optrace`).
    """

    def __init__(self, model: Any, count: FlopsCount, recorder: Any = None) -> None:
        self.model = model
        self.count = count
        #: an :class:`~paddlefit.estimate.optrace.TraceRecorder` that also records every counted op
        #: (type, class, tensors, GEMM shape) for the per-operator GPU model; None = count only.
        self.recorder = recorder
        self.depth = 0
        self.handles: list[Any] = []
        self.patched: list[tuple[Any, str, Any]] = []

    def emit(self, kind: str, op: str, cls: str, fwd: int, bwd: int, inputs: Any, out: Any,
             gemm: tuple[int, int, int, int] | None = None, layout: str = "") -> None:  # fmt: skip
        """Count one op (``kind`` is the FLOPs bucket) and record it in the trace when recording."""
        if cls == "view":  # no kernel, no FLOPs: only traced, so tensor identities flow through
            if self.recorder is not None:
                self.recorder.record(op, cls, 0, inputs, out)
            return
        self.count.add(kind, fwd, bwd)
        if self.recorder is not None:
            self.recorder.record(op, cls, fwd, inputs, out, gemm, layout)

    def _gemm(self, kind: str, op: str, x: Any, w: Any, out: Any, macs: int, bias: Any,
              gemm: tuple[int, int, int, int], groups: int = 1, layout: str = "") -> None:  # fmt: skip
        fwd, bwd = _gemm_flops(x, w, out, macs, bias)
        # Paddle runs its own CUDA-core kernel only for depthwise convolutions (groups == in_channels, op
        # depthwise_conv2d, python/paddle/nn/functional/conv.py); other grouped convolutions are cuDNN conv2d
        cls = "gemm" if kind != "conv" else ("dwconv" if op.startswith("depthwise") else "conv")
        self.emit(kind, op, cls, fwd, bwd, (x, w, bias), out, gemm, layout)

    def _elementwise(self, kind: str, op: str, per_elem: int, inputs: tuple, out: Any,
                     cls: str = "elementwise") -> None:  # fmt: skip
        fwd = per_elem * _numel(out)
        bwd = fwd if any(_needs_grad(t) for t in inputs) else 0
        self.emit(kind, op, cls, fwd, bwd, inputs, out)

    def _rnn(self, layer: Any, x: Any, out: Any) -> None:
        """FLOPs and trace of a ``paddle.nn`` LSTM/GRU/SimpleRNN (formula in the module docstring).

        Each layer and direction is traced as two GEMMs: the input projection of all T steps at once
        (B*T x G*H x I_l) and the recurrent one as a batch of T GEMMs (B x G*H x R); the GPU model therefore sees
        the recurrent FLOPs but not the latency of T dependent steps.
        """
        gates, elem = {"LSTM": (4, 9), "GRU": (3, 8)}.get(type(layer).__name__, (1, 1))
        time_major = bool(getattr(layer, "time_major", False))
        b, t = (int(x.shape[1]), int(x.shape[0])) if time_major else (int(x.shape[0]), int(x.shape[1]))
        h = int(layer.hidden_size)
        dirs = int(getattr(layer, "num_directions", 1) or 1)
        proj = int(getattr(layer, "proj_size", 0) or 0)
        r = proj or h
        params = dict(layer.named_parameters())
        size_in = int(x.shape[-1])
        for lay in range(int(layer.num_layers)):
            for d in range(dirs):
                sfx = f"l{lay}" + ("_reverse" if d else "")
                w_ih, w_hh = params.get(f"weight_ih_{sfx}"), params.get(f"weight_hh_{sfx}")
                m = b * t
                fwd_in = 2 * m * gates * h * size_in + 2 * m * gates * h
                first = lay == 0
                bwd_in = fwd_in * (2 if not first or _needs_grad(x) else 1)
                self.emit("rnn", "rnn", "gemm", fwd_in, bwd_in, (x if first else out, w_ih), out,
                          (1, m, gates * h, size_in))  # fmt: skip
                fwd_rec = 2 * m * gates * h * r + 2 * m * gates * h + elem * m * h + (2 * m * h * r if proj else 0)
                self.emit("rnn", "rnn", "gemm", fwd_rec, 2 * fwd_rec, (out, w_hh), out, (t, b, gates * h, r))
            size_in = dirs * r

    # ---- layers
    def _layer_rules(self):
        from paddle import nn

        conv = (nn.Conv1D, nn.Conv2D, nn.Conv3D)
        conv_t = (nn.Conv1DTranspose, nn.Conv2DTranspose, nn.Conv3DTranspose)
        bn = (nn.BatchNorm, nn.BatchNorm1D, nn.BatchNorm2D, nn.BatchNorm3D, nn.SyncBatchNorm)
        ln = (nn.LayerNorm, nn.GroupNorm, nn.InstanceNorm1D, nn.InstanceNorm2D, nn.InstanceNorm3D)
        act1 = (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.PReLU, nn.ELU, nn.SiLU, nn.Sigmoid, nn.Tanh,
                nn.Hardswish, nn.Hardsigmoid, nn.Swish, nn.Mish)  # fmt: skip
        maxpool = (nn.MaxPool1D, nn.MaxPool2D, nn.MaxPool3D, nn.AdaptiveMaxPool1D, nn.AdaptiveMaxPool2D,
                   nn.AdaptiveMaxPool3D)  # fmt: skip
        avgpool = (nn.AvgPool1D, nn.AvgPool2D, nn.AvgPool3D, nn.AdaptiveAvgPool1D, nn.AdaptiveAvgPool2D,
                   nn.AdaptiveAvgPool3D)  # fmt: skip

        def on_conv(layer, inp, out, transposed=False):
            x = inp[0]
            groups = int(getattr(layer, "_groups", 1) or 1)
            fmt = str(getattr(layer, "_data_format", "NCHW"))
            name = _conv_op(type(layer).__name__.lower().replace("transpose", "_transpose"), x, groups, fmt)
            self._gemm("conv", name, x, layer.weight, out, _conv_macs(layer.weight, out, transposed, x), layer.bias,
                       _conv_gemm(layer.weight, out, x, groups, transposed), groups, fmt)  # fmt: skip

        def on_linear(layer, inp, out):
            x = inp[0]
            n, k = layer.weight.shape[1], layer.weight.shape[0]
            self._gemm("linear", "linear", x, layer.weight, out, _numel(out) * k, layer.bias,
                       (1, _numel(out) // max(n, 1), n, k))  # fmt: skip

        def on_params_elementwise(kind, per, op=None, cls="elementwise"):
            def rule(layer, inp, out):
                tensors = (inp[0], *layer.parameters(include_sublayers=False))
                if isinstance(layer, bn):  # running mean/variance are read and updated in training
                    tensors = (*tensors, *(b for b in layer.buffers(include_sublayers=False)))
                name = op or _op_name(type(layer).__name__)
                self._elementwise(kind, name, per, tensors, out, cls)

            return rule

        def on_pool(op):
            def rule(layer, inp, out):
                x = inp[0]
                self.emit("pool", op, "reduce", _numel(x), _numel(x) if _needs_grad(x) else 0, (x,), out)

            return rule

        def on_embedding(layer, inp, out):
            self.emit("embedding", "embedding", "embedding", 0, _numel(out) if _needs_grad(layer.weight) else 0,
                      (inp[0], layer.weight), out)  # fmt: skip

        def on_rnn(layer, inp, out):
            self._rnn(layer, inp[0], out[0] if isinstance(out, list | tuple) else out)

        return [
            (conv, on_conv),
            (conv_t, lambda layer, i, o: on_conv(layer, i, o, transposed=True)),
            (nn.Linear, on_linear),
            (bn, on_params_elementwise("norm", 4, "batch_norm", "norm")),
            (ln, on_params_elementwise("norm", 8, None, "norm")),
            (nn.GELU, on_params_elementwise("activation", 5, "gelu")),
            (act1, on_params_elementwise("activation", 1)),
            (nn.Softmax, on_params_elementwise("softmax", 3, "softmax", "softmax")),
            (maxpool, on_pool("max_pool")),
            (avgpool, on_pool("avg_pool")),
            (nn.Embedding, on_embedding),
            ((nn.LSTM, nn.GRU, nn.SimpleRNN), on_rnn),
            (nn.Dropout, lambda layer, i, o: self.emit("dropout", "dropout", "elementwise", 0, 0, i[0], o)),
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

        def matmul_rule(args, kwargs, out):
            x = args[0] if args else kwargs.get("x")
            y = args[1] if len(args) > 1 else kwargs.get("y")
            tx = kwargs.get("transpose_x", args[2] if len(args) > 2 else False)
            k = x.shape[-2] if tx and len(x.shape) > 1 else x.shape[-1]
            self._gemm("matmul", "matmul", x, y, out, _numel(out) * k, None, _matmul_gemm(x, y, out, k))

        def linear_rule(args, kwargs, out):
            x = args[0] if args else kwargs.get("x")
            w = args[1] if len(args) > 1 else kwargs.get("weight")
            b = args[2] if len(args) > 2 else kwargs.get("bias")
            n, k = w.shape[1], w.shape[0]
            self._gemm("linear", "linear", x, w, out, _numel(out) * k, b, (1, _numel(out) // max(n, 1), n, k))

        def conv_rule(transposed, name):
            def rule(args, kwargs, out):
                x = args[0] if args else kwargs.get("x")
                w = args[1] if len(args) > 1 else kwargs.get("weight")
                b = args[2] if len(args) > 2 else kwargs.get("bias")
                groups = int(kwargs.get("groups", 1) or 1)
                fmt = str(kwargs.get("data_format", "NCHW"))
                self._gemm("conv", _conv_op(name, x, groups, fmt), x, w, out,
                           _conv_macs(w, out, transposed, x), b, _conv_gemm(w, out, x, groups, transposed), groups,
                           fmt)  # fmt: skip

            return rule

        def ew(kind, per, op, cls="elementwise"):
            def rule(args, kwargs, out):
                self._elementwise(kind, op, per, (*args, *kwargs.values()), out, cls)

            return rule

        def pool_rule(op):
            def rule(args, kwargs, out):
                x = args[0] if args else kwargs.get("x")
                self.emit("pool", op, "reduce", _numel(x), _numel(x) if _needs_grad(x) else 0, (x,), out)

            return rule

        def embedding_rule(args, kwargs, out):
            x = args[0] if args else kwargs.get("x")
            w = args[1] if len(args) > 1 else kwargs.get("weight")
            self.emit("embedding", "embedding", "embedding", 0, _numel(out) if _needs_grad(w) else 0, (x, w), out)

        def move_rule(op, cls="move"):
            def rule(args, kwargs, out):
                self.emit("move", op, cls, 0, 0, (*args, *kwargs.values()), out)

            return rule

        for owner, name in ((paddle, "matmul"), (paddle, "bmm"), (paddle, "mm"), (paddle.Tensor, "matmul"),
                            (paddle.Tensor, "__matmul__"), (paddle.Tensor, "bmm")):  # fmt: skip
            self._wrap(owner, name, matmul_rule)
        self._wrap(F, "linear", linear_rule)
        for name in ("conv1d", "conv2d", "conv3d"):
            self._wrap(F, name, conv_rule(False, name))
        for name in ("conv1d_transpose", "conv2d_transpose", "conv3d_transpose"):
            self._wrap(F, name, conv_rule(True, name))
        for name in ("relu", "relu6", "leaky_relu", "prelu", "elu", "silu", "swish", "sigmoid", "tanh",
                     "hardswish", "hardsigmoid", "mish", "relu_"):  # fmt: skip
            self._wrap(F, name, ew("activation", 1, name.rstrip("_")))
        for owner, name in ((paddle, "tanh"), (paddle, "sigmoid"), (paddle, "exp")):
            self._wrap(owner, name, ew("activation", 1, name))
        self._wrap(F, "gelu", ew("activation", 5, "gelu"))
        self._wrap(F, "swiglu", ew("activation", 3, "swiglu"))
        self._wrap(F, "softmax", ew("softmax", 3, "softmax", "softmax"))
        self._wrap(F, "log_softmax", ew("softmax", 3, "log_softmax", "softmax"))
        self._wrap(F, "layer_norm", ew("norm", 8, "layer_norm", "norm"))
        self._wrap(F, "group_norm", ew("norm", 8, "group_norm", "norm"))
        self._wrap(F, "instance_norm", ew("norm", 8, "instance_norm", "norm"))
        self._wrap(F, "batch_norm", ew("norm", 4, "batch_norm", "norm"))
        for name in ("max_pool1d", "max_pool2d", "max_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d",
                     "adaptive_max_pool3d"):  # fmt: skip
            self._wrap(F, name, pool_rule("max_pool"))
        for name in ("avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
                     "adaptive_avg_pool3d"):  # fmt: skip
            self._wrap(F, name, pool_rule("avg_pool"))
        self._wrap(F, "embedding", embedding_rule)
        ops = {"__add__": "add", "__radd__": "add", "__sub__": "subtract", "__rsub__": "subtract",
               "__mul__": "multiply", "__rmul__": "multiply", "__truediv__": "divide", "__rtruediv__": "divide"}
        for name, op in ops.items():
            self._wrap(paddle.Tensor, name, ew("elementwise", 1, op))
        for name in ("add", "subtract", "multiply", "divide"):
            self._wrap(paddle, name, ew("elementwise", 1, name))
        # losses (their fluid op names, as Paddle's AMP lists name them)
        def loss_rule(op, per, cls):
            def rule(args, kwargs, out):
                x = args[0] if args else next(iter(kwargs.values()), None)
                self.emit("loss", op, cls, per * _numel(x), per * _numel(x) if _needs_grad(x) else 0,
                          (*args, *kwargs.values()), out)  # fmt: skip

            return rule

        for name, op, per, cls in (("cross_entropy", "softmax_with_cross_entropy", 3, "softmax"),
                                   ("softmax_with_cross_entropy", "softmax_with_cross_entropy", 3, "softmax"),
                                   ("ctc_loss", "warpctc", 3, "softmax"), ("nll_loss", "nll_loss", 1, "elementwise"),
                                   ("binary_cross_entropy_with_logits", "sigmoid_cross_entropy_with_logits", 1,
                                    "elementwise"),
                                   ("binary_cross_entropy", "bce_loss", 1, "elementwise"),
                                   ("mse_loss", "mse_loss", 1, "elementwise"), ("l1_loss", "l1_loss", 1, "elementwise"),
                                   ("smooth_l1_loss", "huber_loss", 1, "elementwise")):  # fmt: skip
            self._wrap(F, name, loss_rule(op, per, cls))
        # zero-FLOP kernels: counted as ops (kernel launches), no FLOPs
        self._wrap(F, "dropout", move_rule("dropout", "elementwise"))
        for owner, name in ((paddle, "transpose"), (paddle.Tensor, "transpose"), (paddle, "concat"),
                            (paddle.Tensor, "t")):  # fmt: skip
            self._wrap(owner, name, move_rule("concat" if name == "concat" else "transpose"))
        for name in ("interpolate", "upsample"):
            self._wrap(F, name, move_rule("interpolate"))
        for owner, name in ((paddle, "mean"), (paddle.Tensor, "mean"), (paddle, "sum"), (paddle.Tensor, "sum")):
            self._wrap(owner, name, move_rule("reduce_" + name, "reduce"))
        if self.recorder is None:
            return
        # views launch no kernel: traced only when recording, so tensor identities and dtypes flow through
        for owner, name in ((paddle, "reshape"), (paddle.Tensor, "reshape"), (paddle, "flatten"),
                            (paddle.Tensor, "flatten"), (paddle, "squeeze"), (paddle.Tensor, "squeeze"),
                            (paddle, "unsqueeze"), (paddle.Tensor, "unsqueeze"), (paddle, "split"),
                            (paddle.Tensor, "split"), (paddle, "chunk"), (paddle.Tensor, "chunk"),
                            (paddle.Tensor, "__getitem__")):  # fmt: skip
            self._wrap(owner, name, move_rule("view", "view"))

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
