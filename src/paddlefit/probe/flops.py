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
elementwise, norms,   per-element FLOPs * out_numel, from the one table with its sources:
softmax, losses       :mod:`paddlefit.estimate.element_flops`
pooling               numel of the input   (flops.py ``pool``)
embedding             0                    (flops.py ``c_embedding``)
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

Where the rules live: per ``paddle.nn`` layer family in :mod:`paddlefit.probe.flop_layers`, per functional op
in :mod:`paddlefit.probe.flop_functional`, the shared formulas (GEMM FLOPs, convolution MACs and GEMM shapes) in
:mod:`paddlefit.estimate.flop_formulas`; this module holds the counter that installs them and the result.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from paddlefit.estimate.flop_formulas import gemm_flops, needs_grad, numel
from paddlefit.probe.flop_functional import patch_functional
from paddlefit.probe.flop_layers import layer_rules
from paddlefit.probe.fused_ref import current_scope


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

    def add(self, kind: str, fwd: int, bwd: int, ops: int = 1) -> None:
        """Add one op's forward and backward FLOPs under ``kind``; ``ops``: host dispatches it counts (0 for the
        second and later kernels of one fused Paddle op, which the host dispatches once)."""
        self.forward_flops += int(fwd)
        self.backward_flops += int(bwd)
        self.forward_ops += ops
        self.forward_by_op[kind] += int(fwd)


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
        #: an :class:`~paddlefit.probe.recorder.TraceRecorder` that also records every counted op
        #: (type, class, tensors, GEMM shape) for the per-operator GPU model; None = count only.
        self.recorder = recorder
        self.depth = 0
        self._last_scope: tuple[str, int] | None = None  # the fused call whose first op was counted
        self.handles: list[Any] = []
        self.patched: list[tuple[Any, str, Any]] = []

    def emit(
        self,
        kind: str,
        op: str,
        cls: str,
        fwd: int,
        bwd: int,
        inputs: Any,
        out: Any,
        gemm: tuple[int, int, int, int] | None = None,
        layout: str = "",
        conv: tuple[int, ...] | None = None,
    ) -> None:
        """Count one op (``kind`` is the FLOPs bucket) and record it in the trace when recording."""
        scope = current_scope()  # inside a fused Paddle op's reference: its kernels, one host dispatch
        name = scope[0] if scope else ""
        if cls == "view":  # no kernel, no FLOPs: only traced, so tensor identities flow through
            if self.recorder is not None:
                self.recorder.record(op, cls, 0, inputs, out, scope=name)
            return
        self.count.add(kind, fwd, bwd, ops=0 if scope is not None and scope == self._last_scope else 1)
        self._last_scope = scope
        if self.recorder is not None:
            self.recorder.record(op, cls, fwd, inputs, out, gemm, layout, conv, name)

    def emit_gemm(
        self,
        kind: str,
        op: str,
        x: Any,
        w: Any,
        out: Any,
        macs: int,
        bias: Any,
        gemm: tuple[int, int, int, int],
        groups: int = 1,
        layout: str = "",
        conv: tuple[int, ...] | None = None,
    ) -> None:
        """Count a GEMM-like op of ``macs`` multiply-accumulates (forward and backward by
        :func:`~paddlefit.estimate.flop_formulas.gemm_flops`); ``gemm`` is its (groups, M, N, K) shape, ``conv`` a
        convolution's geometry (:func:`~paddlefit.estimate.flop_formulas.conv_geometry`)."""
        fwd, bwd = gemm_flops(x, w, out, macs, bias)
        # Paddle runs its own CUDA-core kernel only for depthwise convolutions (groups == in_channels, op
        # depthwise_conv2d, python/paddle/nn/functional/conv.py); other grouped convolutions are cuDNN conv2d
        cls = "gemm" if kind != "conv" else ("dwconv" if op.startswith("depthwise") else "conv")
        self.emit(kind, op, cls, fwd, bwd, (x, w, bias), out, gemm, layout, conv)

    def emit_elementwise(
        self, kind: str, op: str, per_elem: int, inputs: tuple, out: Any, cls: str = "elementwise"
    ) -> None:
        """Count an op of ``per_elem`` FLOPs per output element; the backward repeats them when an input needs a
        gradient."""
        fwd = per_elem * numel(out)
        bwd = fwd if any(needs_grad(t) for t in inputs) else 0
        self.emit(kind, op, cls, fwd, bwd, inputs, out)

    def _hook_layers(self) -> None:
        rules = layer_rules(self)
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

    def wrap(self, owner: Any, name: str, rule: Any) -> None:
        """Replace ``owner.name`` (when it exists) by a wrapper that calls it and then ``rule(args, kwargs, out)``
        unless the call is nested in a counted layer or op; restored by ``__exit__``."""
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

    def __enter__(self) -> FlopCounter:
        self._hook_layers()
        patch_functional(self)
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
