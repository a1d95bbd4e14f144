"""Recording an operator trace on this CPU: :class:`TraceRecorder` turns the calls a
:class:`~paddlefit.probe.flops.FlopCounter` sees into :class:`~paddlefit.estimate.optrace.TracedOp` records, and
:func:`record_trace` runs a model's forward under it at one or two batch sizes
(:class:`~paddlefit.estimate.optrace.OpTrace`, the data the GPU model reads).
"""

from __future__ import annotations

import math
import weakref
from typing import Any

from paddlefit.estimate.optrace import OpTrace, TensorRef, TracedOp
from paddlefit.probe.flops import FlopCounter, FlopsCount
from paddlefit.probe.fused_ref import cpu_reference_kernels


class TraceRecorder:
    """Collects :class:`TracedOp` records from a :class:`~paddlefit.probe.flops.FlopCounter`.

    Tensor identities are Python object identities checked through weak references: a tensor that died and
    whose id a later tensor reuses gets a new identity, and the recorder never keeps a tensor alive (so the
    memory probe's allocator peaks are the same with and without a trace).
    """

    def __init__(self) -> None:
        self._ids: dict[int, tuple[Any, int]] = {}
        self._next = 0
        self._ops: list[TracedOp] = []

    def _tid(self, t: Any) -> int:
        key = id(t)
        known = self._ids.get(key)
        if known is not None and known[0]() is t:
            return known[1]
        try:
            ref = weakref.ref(t)
        except TypeError:  # an object without weak references: keep a strong one (small: not a tensor)
            ref = (lambda obj: lambda: obj)(t)
        self._ids[key] = (ref, self._next)
        self._next += 1
        return self._next - 1

    def _ref(self, t: Any) -> TensorRef:
        tid = self._tid(t)
        dtype = str(getattr(t, "dtype", "float32")).replace("paddle.", "")
        return TensorRef(
            tid=tid,
            numel=math.prod(t.shape) if getattr(t, "shape", None) is not None else 1,
            dtype=dtype,
            param=bool(getattr(t, "persistable", False)),
            grad=not bool(getattr(t, "stop_gradient", True)),
        )

    def record(
        self,
        op: str,
        cls: str,
        flops: int,
        inputs: Any,
        outputs: Any,
        gemm: tuple[int, int, int, int] | None = None,
        layout: str = "",
        conv: tuple[int, ...] | None = None,
        scope: str = "",
    ) -> None:
        """Record one op; ``inputs``/``outputs`` are tensors or (nested) lists of them (others are skipped)."""
        self._ops.append(
            TracedOp(
                op,
                cls,
                int(flops),
                tuple(self._ref(t) for t in _tensors(inputs)),
                tuple(self._ref(t) for t in _tensors(outputs)),
                gemm,
                layout,
                conv,
                scope,
            )
        )

    def ops(self) -> list[TracedOp]:
        """The recorded ops, in execution order."""
        self._ids.clear()
        return list(self._ops)


def _tensors(obj: Any) -> list[Any]:
    if obj is None:
        return []
    if hasattr(obj, "shape") and hasattr(obj, "dtype"):
        return [obj]
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, list | tuple):
        return [t for o in obj for t in _tensors(o)]
    return []


def record_trace(model: Any, inputs1: list[Any], inputs2: list[Any] | None = None) -> OpTrace:
    """Run ``model`` forward on ``inputs1`` (and ``inputs2``, a second batch size) and return its trace, with the
    bytes of what the forward returned at each (:attr:`~paddlefit.estimate.optrace.OpTrace.returned`).

    Args:
        model: a ``paddle.nn.Layer`` in train mode (parameters trainable, so backward rules see gradients).
        inputs1, inputs2: the forward's inputs at two batch sizes, (batch, *per_sample_shape) each.

    Raises:
        Whatever the model's forward raises (callers turn it into a ModelError).
    """
    from paddlefit.models.exporting import flatten_outputs

    traces = []
    for inputs in (inputs1, inputs2) if inputs2 is not None else (inputs1,):
        batch = int(inputs[0].shape[0]) if inputs and len(inputs[0].shape) else 1
        rec = TraceRecorder()
        with cpu_reference_kernels(), FlopCounter(model, FlopsCount(batch), rec):
            out = model(*inputs)
        returned = sum(int(t.size) * t.element_size() for t in flatten_outputs(out))
        del out
        traces.append((batch, rec.ops(), returned))
    if len(traces) == 1:
        ((b, ops, r),) = traces
        return OpTrace(ops, [], b, b, returned=(r, r))
    (b1, ops1, r1), (b2, ops2, r2) = traces
    return OpTrace(ops1, ops2, b1, b2, returned=(r1, r2))
