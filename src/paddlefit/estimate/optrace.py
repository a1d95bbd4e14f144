"""Operator trace of a training step: every op of the forward pass with its tensors, FLOPs and GEMM shape.

The trace is recorded by :class:`~paddlefit.probe.flops.FlopCounter` (hooks on layers, wrappers around
functional ops) during a real forward pass on the CPU, at two batch sizes; every size in it is then a straight
line in the batch (``size(B) = size(b1) + (size(b2) - size(b1)) / (b2 - b1) * (B - b1)``), so the trace can be
evaluated at the planned micro-batch without running it. Which dimension carries the batch is read off the two
traces, not assumed. For models too large to run here,
:func:`~paddlefit.estimate.transformer_ops.transformer_trace` writes the same object from the transformer's shape.

Op classes (:data:`OP_CLASSES`): ``gemm`` (linear, matmul), ``conv``, ``dwconv`` (grouped and depthwise
convolutions), ``elementwise`` (activations, + - * /, dropout), ``norm``, ``softmax``, ``reduce`` (pooling,
mean/sum), ``embedding`` (gather), ``move`` (transpose, concat, interpolation: copies), ``view`` (reshape-like,
no kernel; kept so tensor identities and dtypes flow through), ``attention`` (one fused flash-attention kernel,
:mod:`paddlefit.estimate.fused`). The GPU model adds ``optimizer`` and ``amp_cast``.

No Paddle import here. The recorder (:mod:`paddlefit.probe.recorder`) reads ``.shape``, ``.dtype``,
``.stop_gradient`` and ``.persistable`` of the tensors it is handed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

OP_CLASSES = (
    "gemm",
    "conv",
    "dwconv",
    "elementwise",
    "norm",
    "softmax",
    "reduce",
    "embedding",
    "move",
    "view",
    "attention",
)


@dataclass(frozen=True)
class TensorRef:
    """One tensor an op reads or writes.

    Attributes:
        tid: identity within the trace (the same tensor read by two ops has one tid).
        numel: elements (at the trace's batch size).
        dtype: Paddle dtype name as recorded on the CPU (``float32``, ``int64``, ...).
        param: a parameter (persistable), not an activation.
        grad: requires a gradient (``stop_gradient`` is False).
    """

    tid: int
    numel: int
    dtype: str
    param: bool = False
    grad: bool = False

    @property
    def floating(self) -> bool:
        """True for float16/bfloat16/float32/float64 tensors (the ones AMP casts)."""
        return "float" in self.dtype


@dataclass(frozen=True)
class TracedOp:
    """One forward op.

    Attributes:
        op: Paddle op name (``conv2d``, ``linear``, ``matmul``, ``batch_norm``, ``relu``, ``add``...).
        cls: op class, one of :data:`OP_CLASSES`.
        flops: forward FLOPs (1 MAC = 2 FLOPs; formulas in :mod:`paddlefit.probe.flops`).
        inputs: tensors read (activations and parameters).
        outputs: tensors written.
        gemm: (batch, M, N, K) of the GEMM this op runs, for ``gemm``/``conv``/``dwconv``: out[batch, M, N] =
            A[batch, M, K] x B[batch, K, N]. Convolutions as implicit GEMM: M = samples x output pixels,
            N = output channels per group, K = input channels per group x kernel size, batch = groups.
            ``attention``: (batch x heads, Sq, D, Sk) (:func:`~paddlefit.estimate.fused.attention_gemm`).
        layout: data layout of a convolution (``NCHW``, ``NHWC``; empty for other ops).
        conv: a 2-D convolution's (kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w, out_h, out_w)
            (:func:`~paddlefit.estimate.flop_formulas.conv_geometry`); None otherwise or when not known.
        scope: the Paddle op this kernel is part of when that op is fused and traced by a reference of its kernels
            (``fused_attention``, ``fused_feedforward``: :mod:`~paddlefit.estimate.fused`); AMP decides its dtype
            by that op's name. Empty otherwise.
    """

    op: str
    cls: str
    flops: int
    inputs: tuple[TensorRef, ...] = ()
    outputs: tuple[TensorRef, ...] = ()
    gemm: tuple[int, int, int, int] | None = None
    layout: str = ""
    conv: tuple[int, ...] | None = None
    scope: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (tensors as [tid, numel, dtype, param, grad])."""
        return {
            "op": self.op,
            "cls": self.cls,
            "flops": self.flops,
            "inputs": [[t.tid, t.numel, t.dtype, t.param, t.grad] for t in self.inputs],
            "outputs": [[t.tid, t.numel, t.dtype, t.param, t.grad] for t in self.outputs],
            "gemm": list(self.gemm) if self.gemm else None,
            "layout": self.layout,
            "conv": list(self.conv) if self.conv else None,
            **({"scope": self.scope} if self.scope else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TracedOp:
        """Inverse of :meth:`to_dict`."""
        return cls(
            op=d["op"],
            cls=d["cls"],
            flops=int(d["flops"]),
            inputs=tuple(TensorRef(int(a), int(b), str(c), bool(e), bool(f)) for a, b, c, e, f in d["inputs"]),
            outputs=tuple(TensorRef(int(a), int(b), str(c), bool(e), bool(f)) for a, b, c, e, f in d["outputs"]),
            gemm=tuple(int(x) for x in d["gemm"]) if d.get("gemm") else None,
            layout=str(d.get("layout", "")),
            conv=tuple(int(x) for x in d["conv"]) if d.get("conv") else None,
            scope=str(d.get("scope", "")),
        )


def _lerp(a: int, b: int, b1: int, b2: int, batch: int) -> int:
    if a == b:
        return a
    return max(0, round(a + (b - a) * (batch - b1) / (b2 - b1)))


@dataclass
class OpTrace:
    """The forward ops of a model at two batch sizes; :meth:`at` gives them at any batch.

    Attributes:
        ops1, ops2: the same ops recorded at ``batch1`` and ``batch2``. When there is one trace only, or the
            two differ (a forward whose ops depend on the batch size), the larger batch's trace is scaled: every
            activation size and the GEMM dimension that holds the batch by B / its batch (that dimension is M,
            or the GEMM batch when both operands are activations).
        batch1, batch2: the batch sizes of the two traces.
        source: ``probe`` (recorded from a real forward) or ``analytic`` (written from a transformer config).
        returned: bytes of the tensors the forward returned at ``batch1`` and ``batch2`` (a served request's result;
            :meth:`returned_bytes`), when the trace was recorded from a real forward; None otherwise.
    """

    ops1: list[TracedOp]
    ops2: list[TracedOp] = field(default_factory=list)
    batch1: int = 1
    batch2: int = 2
    source: str = "probe"
    returned: tuple[int, int] | None = None

    def returned_bytes(self, batch: int) -> int | None:
        """Bytes the forward returns at ``batch`` samples (linear in the batch through the two recorded sizes), or
        None when not recorded."""
        if self.returned is None:
            return None
        r1, r2 = self.returned
        return max(0, _lerp(r1, r2, self.batch1, self.batch2, batch)) if self.batch2 != self.batch1 else r1

    @property
    def aligned(self) -> bool:
        """True when both traces have the same ops in the same order (the batch is read off them)."""
        return (
            bool(self.ops2)
            and len(self.ops1) == len(self.ops2)
            and all(
                a.op == b.op and len(a.inputs) == len(b.inputs) and len(a.outputs) == len(b.outputs)
                for a, b in zip(self.ops1, self.ops2, strict=True)
            )
        )

    def at(self, batch: int) -> list[TracedOp]:
        """The forward ops at ``batch`` samples (sizes linear in the batch between/after the two traces)."""
        if batch == self.batch1:
            return list(self.ops1)
        if self.aligned:
            b1, b2 = self.batch1, self.batch2
            out = []
            for a, b in zip(self.ops1, self.ops2, strict=True):
                ins = tuple(
                    replace(t, numel=_lerp(t.numel, u.numel, b1, b2, batch))
                    for t, u in zip(a.inputs, b.inputs, strict=True)
                )
                outs = tuple(
                    replace(t, numel=_lerp(t.numel, u.numel, b1, b2, batch))
                    for t, u in zip(a.outputs, b.outputs, strict=True)
                )
                gemm = None
                if a.gemm and b.gemm:
                    gemm = tuple(_lerp(x, y, b1, b2, batch) for x, y in zip(a.gemm, b.gemm, strict=True))
                out.append(
                    TracedOp(
                        a.op, a.cls, _lerp(a.flops, b.flops, b1, b2, batch), ins, outs, gemm, a.layout, a.conv, a.scope
                    )
                )
            return out
        base, b0 = (self.ops2, self.batch2) if self.ops2 else (self.ops1, self.batch1)
        r = batch / b0
        out = []
        for a in base:
            ins = tuple(t if t.param else replace(t, numel=round(t.numel * r)) for t in a.inputs)
            outs = tuple(replace(t, numel=round(t.numel * r)) for t in a.outputs)
            gemm = a.gemm
            if gemm:
                both_act = sum(1 for t in a.inputs if not t.param and t.floating) >= 2
                g, m, n, k = gemm
                batched = both_act and a.cls in ("gemm", "attention")
                gemm = (round(g * r), m, n, k) if batched else (g, round(m * r), n, k)
            out.append(TracedOp(a.op, a.cls, round(a.flops * r), ins, outs, gemm, a.layout, a.conv, a.scope))
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (for caching traces of the bench models)."""
        return {
            "batch1": self.batch1,
            "batch2": self.batch2,
            "source": self.source,
            "ops1": [o.to_dict() for o in self.ops1],
            "ops2": [o.to_dict() for o in self.ops2],
            **({"returned": list(self.returned)} if self.returned else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OpTrace:
        """Inverse of :meth:`to_dict`."""
        returned = tuple(int(x) for x in d["returned"]) if d.get("returned") else None
        return cls(
            [TracedOp.from_dict(o) for o in d["ops1"]],
            [TracedOp.from_dict(o) for o in d["ops2"]],
            int(d["batch1"]),
            int(d["batch2"]),
            str(d.get("source", "probe")),
            returned,
        )


def with_layout(ops: list[TracedOp], layout: str) -> list[TracedOp]:
    """The ops with every convolution's data layout set to ``layout`` (``NCHW``/``NHWC``): the same model
    run channels-last, as ``data_format='NHWC'`` layers or a framework's channels-last mode do."""
    return [replace(o, layout=layout) if o.cls in ("conv", "dwconv") else o for o in ops]
