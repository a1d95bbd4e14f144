"""Operator trace of an exported model: the static program ``paddle.jit.save`` wrote, walked without its Python code.

:func:`trace_program` loads ``<prefix>.json`` (Paddle 3.x PIR) or ``<prefix>.pdmodel`` (the legacy ProgramDesc,
translated to PIR by ``paddle.pir.translate_to_pir``) with ``paddle.static.load_inference_model``
(``python/paddle/static/pir_io.py`` ``load_inference_model_pir``; ``python/paddle/static/io.py`` for the legacy
file), walks the ops of its global block in order and writes the same :class:`~paddlefit.estimate.optrace.OpTrace`
the dygraph recorder (:func:`~paddlefit.probe.recorder.record_trace`) writes: op names, classes, FLOP formulas
and GEMM shapes of :mod:`paddlefit.probe.flops` (table there), at two batch sizes, ``source="program"``.

Rules:

- ``nn.Linear`` and biased convolutions are exported as ``matmul``/``conv2d`` followed by ``add`` of the bias
  parameter (reshaped to [1, C, 1, 1] for a convolution, ``python/paddle/nn/functional/conv.py``); when the GEMM's
  result is read by that ``add`` only, the add is folded into it (``linear``, bias FLOPs = out_numel), as the
  dygraph recorder counts a layer. A ``paddle.matmul(x, w) + b`` written by hand is folded too.
- Shapes: the program's own (its InferMeta), ``-1`` for dims unknown when it was saved. The feed's leading ``-1``
  is the batch; other feed dims must be fixed or given by ``shapes``. A ``-1`` in a result is resolved, in order:
  by the InferMeta formula for matmul, convolution and pooling; by ``perm`` for ``transpose``; for numel-preserving
  ops (reshape, flatten, squeeze...) with one unknown dim, by the input's numel; as the sum of the inputs for
  ``concat`` on that axis; from an activation operand with a ``-1`` at the same position (same rank, then
  left-aligned as embedding and reductions keep leading dims, then right-aligned as broadcasting does); a ``-1``
  still unknown is taken as the batch size.
- Parameters (persistable values) are ``TensorRef.param``; every ``TensorRef.grad`` is False (inference); a value
  keeps one tid however many ops read it; a ``reshape``/``squeeze`` of a parameter is the parameter itself.
- Skipped (no kernel): data/feed/fetch, parameters, constant creation (``full``, ``arange``...), shape queries, the
  ``builtin`` bookkeeping ops (``combine``/``split`` pack and unpack tensor lists). Ops without a rule are counted in
  :attr:`ProgramTrace.unmapped`, not traced (their results still flow); control flow (``if``/``while``) is not entered.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace as _Shape  # what flop_formulas reads: `.shape`
from typing import Any

from paddlefit.errors import ModelError
from paddlefit.estimate.element_flops import ELEMENT_FLOPS
from paddlefit.estimate.flop_formulas import conv_gemm, conv_geometry, conv_macs, matmul_gemm
from paddlefit.estimate.fused import attention_gemm, flash_attention_flops
from paddlefit.estimate.optrace import OpTrace, TensorRef, TracedOp
from paddlefit.jobspec.inputs import DTYPE_BYTES, InputSpec

#: Bytes per element of the dtypes a program's parameters may have.
_ITEM_BYTES = {**DTYPE_BYTES, "int8": 1, "uint8": 1, "bool": 1, "int16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}
_SKIP = {
    "data",
    "feed",
    "fetch",
    "full",
    "full_int_array",
    "full_with_tensor",
    "assign_value",
    "arange",
    "shape",
    "shape64",
    "memcpy_h2d",
    "memcpy_d2h",
    "print",
}
#: op -> (class, FLOPs per output element, traced name or None = the op's own): the FLOPs from
#: :data:`~paddlefit.estimate.element_flops.ELEMENT_FLOPS`, with the names the dygraph recorder gives
_RENAMED = {"scale": "multiply", "cross_entropy_with_softmax": "softmax_with_cross_entropy"}
_PER_ELEMENT: dict[str, tuple[str, int, str | None]] = {
    **{op: (cls, per, _RENAMED.get(op)) for op, (cls, per) in ELEMENT_FLOPS.items()},
    "mean": ("reduce", 0, "reduce_mean"),
    "sum": ("reduce", 0, "reduce_sum"),
    "max": ("reduce", 0, "reduce_max"),
    "min": ("reduce", 0, "reduce_min"),
    "prod": ("reduce", 0, "reduce_prod"),
    "mean_all": ("reduce", 0, "reduce_mean"),
    "argmax": ("reduce", 0, None),
    "argmin": ("reduce", 0, None),
    "logsumexp": ("reduce", 0, None),
    "embedding": ("embedding", 0, None),
    "c_embedding": ("embedding", 0, "embedding"),
    **{
        n: ("move", 0, None)
        for n in (
            "transpose",
            "concat",
            "stack",
            "tile",
            "expand",
            "expand_as",
            "pad",
            "pad3d",
            "cast",
            "flip",
            "roll",
            "gather",
            "gather_nd",
            "index_select",
            "take_along_axis",
            "put_along_axis",
            "scatter",
            "one_hot",
            "assign",
            "tril",
            "triu",
            "full_like",
            "strided_slice",
            "meshgrid",
            "unstack",
        )
    },
    **{
        n: ("move", 0, "interpolate")
        for n in ("bilinear_interp", "nearest_interp", "bicubic_interp", "linear_interp", "trilinear_interp")
    },
    **{
        n: ("view", 0, "view")
        for n in (
            "reshape",
            "flatten",
            "squeeze",
            "unsqueeze",
            "slice",
            "split",
            "split_with_num",
            "unbind",
            "view_shape",
            "view_dtype",
            "as_strided",
            "contiguous",
        )
    },
}
_NUMEL_OPS = {"reshape", "flatten", "squeeze", "unsqueeze", "view_shape", "contiguous", "assign", "cast"}
_CONV = {"conv2d", "depthwise_conv2d", "conv3d", "conv2d_transpose", "depthwise_conv2d_transpose", "conv3d_transpose"}
_GEMM = {"matmul", "bmm", "fc", "fused_gemm_epilogue"}
_POOL = {"pool2d", "pool3d", "max_pool2d_with_index", "max_pool3d_with_index"}


@dataclass(frozen=True)
class ProgramTrace:
    """What :func:`trace_program` read off an exported program.

    Attributes:
        trace: the forward ops at ``batch1`` (``ops1``) and ``batch2`` (``ops2``), ``source="program"``.
        inputs: the feeds, in the program's feed order: name, dtype, per-sample shape (batch dimension removed).
        params: parameter elements (every persistable value, BatchNorm statistics too, as ``Layer.parameters()``).
        param_bytes: bytes of those parameters at their saved dtypes.
        unmapped: Paddle op names (``pd_op.`` dropped) the trace has no rule for, with their counts.
    """

    trace: OpTrace
    inputs: list[InputSpec]
    params: int
    param_bytes: int
    unmapped: dict[str, int]


@dataclass(frozen=True)
class _Val:
    tid: int
    shape: tuple[int, ...]
    declared: tuple[int, ...]
    dtype: str
    param: bool

    @property
    def ref(self) -> TensorRef:
        return TensorRef(self.tid, math.prod(self.shape), self.dtype, self.param, False)


def trace_program(
    prefix: Path, batch1: int = 1, batch2: int = 2, shapes: dict[str, Sequence[int]] | None = None
) -> ProgramTrace:
    """Trace the program ``paddle.jit.save`` wrote at ``prefix`` (``<prefix>.json`` or ``<prefix>.pdmodel``, with
    ``<prefix>.pdiparams``) at ``batch1`` and ``batch2`` samples; rules in the module docstring.

    Args:
        prefix: the path prefix given to ``paddle.jit.save`` (a ``.json``/``.pdmodel``/``.pdiparams`` suffix is
            dropped).
        batch1, batch2: the two batch sizes, samples (distinct, >= 1).
        shapes: per-sample shapes (no batch dim) of feeds saved with dynamic dims besides the batch
            (``InputSpec([None, None])``), by feed name.

    Raises:
        ModelError: the files are missing or do not load, a feed has no dynamic batch dimension, a feed has another
            dynamic dimension ``shapes`` does not give, or a feed's dtype is not an input dtype paddlefit knows.
    """
    if batch1 < 1 or batch2 < 1 or batch1 == batch2:
        raise ModelError(f"trace_program needs two distinct batch sizes >= 1, got {batch1} and {batch2}.")
    prefix = Path(prefix)
    prefix = prefix.with_suffix("") if prefix.suffix in (".json", ".pdmodel", ".pdiparams") else prefix
    import paddle

    dynamic = paddle.in_dynamic_mode()
    paddle.enable_static()
    try:
        program, feeds = _load(paddle, prefix)
        ops = list(program.global_block().ops)
        inputs = _feeds(ops, feeds, shapes or {}, prefix)
        params, pbytes = _params(ops)
        walks = [_Walker(b, inputs) for b in (batch1, batch2)]
        for w in walks:
            for op in ops:
                w.step(op)
    finally:
        if dynamic:
            paddle.disable_static()
    trace = OpTrace(walks[0].ops, walks[1].ops, batch1, batch2, source="program")
    return ProgramTrace(trace, inputs, params, pbytes, dict(walks[0].unmapped))


def _load(paddle: Any, prefix: Path) -> tuple[Any, list[str]]:
    """(PIR program, feed names) of the export at ``prefix``, loaded into a throw-away scope."""
    pir, legacy, weights = (prefix.with_name(prefix.name + s) for s in (".json", ".pdmodel", ".pdiparams"))
    if not pir.is_file() and not legacy.is_file():
        raise ModelError(
            f"No exported Paddle program at {prefix}: neither {pir} nor {legacy} exists. Give the path "
            "prefix passed to paddle.jit.save (e.g. `out/model` for out/model.json + "
            "out/model.pdiparams)."
        )
    exe = paddle.static.Executor(paddle.CPUPlace())
    try:
        with paddle.static.scope_guard(paddle.static.Scope()):
            if pir.is_file():
                program, feeds, _ = paddle.static.load_inference_model(str(prefix), exe)
            else:
                with paddle.pir_utils.OldIrGuard():
                    old, feeds, _ = paddle.static.load_inference_model(str(prefix), exe)
                    program = paddle.pir.translate_to_pir(old.desc)
    except Exception as e:  # Paddle raises ValueError/RuntimeError/its own C++ errors for a bad file
        hint = f" ({weights} is missing)" if not weights.is_file() else ""
        raise ModelError(
            f"Cannot load the exported program {pir if pir.is_file() else legacy}{hint}: "
            f"{type(e).__name__}: {str(e).strip()[:400]}"
        ) from e
    return program, list(feeds)


def _name(op: Any) -> str:
    """``pd_op.batch_norm_`` -> ``batch_norm`` (dialect dropped; in-place ops as their out-of-place op)."""
    name = op.name().split(".", 1)[-1]
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def _dense(v: Any) -> bool:
    return v is not None and v.initialized() and v.is_dense_tensor_type()


def _dtype(v: Any) -> str:
    return str(v.dtype).replace("paddle.", "")


def _feeds(ops: list[Any], names: list[str], shapes: dict[str, Sequence[int]], prefix: Path) -> list[InputSpec]:
    """The feeds' per-sample InputSpecs, in ``names`` order."""
    found = {str(op.attrs().get("name")): op.result(0) for op in ops if _name(op) in ("data", "feed")}
    specs = []
    for idx, name in enumerate(names):
        v = found.get(name)
        if v is None:
            raise ModelError(f"The program at {prefix} feeds {name!r} but has no data op of that name.")
        shape, dtype = list(v.shape), _dtype(v)
        if not shape or shape[0] != -1:
            raise ModelError(
                f"Feed {name!r} of {prefix} has shape {shape} without a dynamic batch dimension; "
                "export with paddle.static.InputSpec([None, ...]) so the batch can vary."
            )
        per = list(shapes.get(name, shapes.get(str(idx), shape[1:])))
        if (
            len(per) != len(shape) - 1
            or any(d < 1 for d in per)
            or any(s not in (-1, d) for s, d in zip(shape[1:], per, strict=False))
        ):
            raise ModelError(
                f"Feed {name!r} of {prefix} has shape {shape}: give its per-sample shape, every -1 fixed: "
                f"`--input {name}={dtype}[128]` (CLI), shapes={{{name!r}: [128]}} (Python)."
            )
        if dtype not in DTYPE_BYTES:
            raise ModelError(
                f"Feed {name!r} of {prefix} has dtype {dtype}; paddlefit's inputs are {', '.join(DTYPE_BYTES)}."
            )
        specs.append(InputSpec(dtype=dtype, shape=tuple(int(d) for d in per), name=name))
    return specs


def _params(ops: list[Any]) -> tuple[int, int]:
    """(elements, bytes) of the persistable values the program declares (``builtin.parameter``/``constant``)."""
    vals = [op.result(0) for op in ops if op.name() in ("builtin.parameter", "builtin.constant")]
    vals = [v for v in vals if _dense(v) and (v.persistable or v.get_defining_op().name() == "builtin.parameter")]
    return sum(math.prod(v.shape) for v in vals), sum(math.prod(v.shape) * _ITEM_BYTES.get(_dtype(v), 4) for v in vals)


class _Walker:
    """One walk of the program at one batch size: values by Value id, ops traced in order."""

    def __init__(self, batch: int, inputs: list[InputSpec]) -> None:
        self.batch = batch
        self.feeds = {s.name: (batch, *s.shape) for s in inputs}
        self.vals: dict[str, _Val] = {}
        self.vectors: dict[str, list[Any]] = {}  # builtin.combine results: the values they pack
        self.folded: set[str] = set()  # results of bias adds folded into the GEMM before them
        self.ops: list[TracedOp] = []
        self.unmapped: Counter[str] = Counter()
        self._next = 0

    def new(self, v: Any, shape: Sequence[int], param: bool = False) -> _Val:
        val = _Val(self._next, tuple(int(d) for d in shape), tuple(int(d) for d in v.shape), _dtype(v), param)
        self._next += 1
        self.vals[v.id] = val
        return val

    def operands(self, op: Any) -> list[_Val]:
        """The op's tensor operands that carry data (activations, parameters), vectors unpacked."""
        out = []
        for v in op.operands_source():
            if not v.initialized():
                continue
            for u in self.vectors.get(v.id, [v]):
                if _dense(u) and u.id in self.vals:
                    out.append(self.vals[u.id])
        return out

    def results(self, op: Any) -> list[Any]:
        """The op's results read later (the first always; a vector result as the values it is unpacked into)."""
        out = []
        for i, r in enumerate(op.results()):
            if _dense(r):
                if i == 0 or not r.use_empty():
                    out.append(r)
            elif r.initialized():
                out += [u for user in r.all_used_ops() if user.name() == "builtin.split" for u in user.results()]
        return out

    def resolve(self, name: str, op: Any, r: Any, ins: list[_Val]) -> tuple[int, ...]:
        """``r``'s shape at this batch (rules in the module docstring)."""
        d = [int(x) for x in r.shape]
        if -1 not in d:
            return tuple(d)
        acts = [v for v in ins if not v.param]
        shape = _infer(name, op.attrs(), ins, len(d), _const(op.operand_source(1)) if op.num_operands() > 1 else None)
        if shape is not None and all(x in (-1, y) for x, y in zip(d, shape, strict=True)):
            return shape
        if name == "transpose" and acts and len(acts[0].shape) == len(d):
            return tuple(acts[0].shape[p] for p in op.attrs()["perm"])
        by_numel = name in _NUMEL_OPS and bool(acts)
        axis = _const(op.operands_source()[-1]) if name == "concat" else None
        if isinstance(axis, int | float) and acts and all(len(v.shape) == len(d) for v in acts):
            ax = int(axis) % len(d)
            d[ax] = sum(v.shape[ax] for v in acts) if d[ax] == -1 else d[ax]
        for i in [i for i, x in enumerate(d) if x == -1 and not (by_numel and d.count(-1) == 1)]:
            found = [
                v.shape[j]
                for align in ("same", "left", "right")
                for v in acts
                for j in [i - (len(d) - len(v.declared)) if align == "right" else i]
                if (align != "same" or len(v.declared) == len(d)) and 0 <= j < len(v.declared) and v.declared[j] == -1
            ]
            d[i] = found[0] if found else -1
        if by_numel and d.count(-1) == 1:
            d[d.index(-1)] = math.prod(acts[0].shape) // max(1, math.prod(x for x in d if x != -1))
        return tuple(self.batch if x == -1 else x for x in d)

    def step(self, op: Any) -> None:
        """Trace one op (or register its values, or skip it)."""
        name, full = _name(op), op.name()
        if full == "builtin.parameter" or (
            full == "builtin.constant" and _dense(op.result(0)) and op.result(0).persistable
        ):
            v = op.result(0)
            self.new(v, v.shape, param=True)
            return
        if full == "builtin.combine":
            self.vectors[op.result(0).id] = list(op.operands_source())
            return
        if name in ("data", "feed"):
            v = op.result(0)
            self.new(v, self.feeds.get(str(op.attrs().get("name")), (self.batch, *list(v.shape)[1:])))
            return
        if (
            full.startswith("builtin.")
            or name in _SKIP
            or (op.num_results() and _dense(op.result(0)) and op.result(0).id in self.folded)
        ):
            return
        ins = self.operands(op)
        if _aliasing(name) and len(ins) == 1 and ins[0].param:
            r = op.result(0)  # a reshaped parameter (a conv bias as [1, C, 1, 1]) is the parameter, in that shape
            self.vals[r.id] = replace(ins[0], shape=self.resolve(name, op, r, ins), declared=tuple(r.shape))
            return
        outs = [self.new(r, self.resolve(name, op, r, ins)) for r in self.results(op)]
        if (name in _CONV or name in _GEMM) and len(ins) >= 2 and outs:
            self.gemm(op, name, ins, outs)
        elif name in _POOL:
            kind = "avg_pool" if op.attrs().get("pooling_type") == "avg" else "max_pool"
            self.emit(kind, "reduce", math.prod(ins[0].shape) if ins else 0, ins, outs[:1])
        elif name == "flash_attn" and len(ins) >= 3:
            self.attention(op, ins, outs)
        elif name in _PER_ELEMENT:
            cls, per, traced = _PER_ELEMENT[name]
            self.emit(
                traced or name,
                cls,
                per * math.prod(outs[0].shape) if outs else 0,
                ins,
                outs[:1] if cls not in ("view", "move") else outs,
            )
        else:
            self.unmapped[name] += 1

    def emit(self, op: str, cls: str, flops: int, ins: Iterable[_Val], outs: Iterable[_Val], **kw: Any) -> None:
        self.ops.append(TracedOp(op, cls, int(flops), tuple(v.ref for v in ins), tuple(v.ref for v in outs), **kw))

    def gemm(self, op: Any, name: str, ins: list[_Val], outs: list[_Val]) -> None:
        """A convolution or matmul, with the bias add after it folded in (module docstring)."""
        a = op.attrs()
        x, w, y = _Shape(shape=ins[0].shape), _Shape(shape=ins[1].shape), _Shape(shape=outs[0].shape)
        bias = ins[2] if name in ("fc", "fused_gemm_epilogue") and len(ins) > 2 else None
        if name in _CONV:
            transposed = name.endswith("transpose")
            groups = int(a.get("groups", 1) or 1)
            fmt = str(a.get("data_format", "NCHW"))
            fmt = "NCHW" if fmt not in ("NCHW", "NHWC", "NCDHW", "NDHWC") else fmt
            macs, shape = conv_macs(w, y, transposed, x), conv_gemm(w, y, x, groups, transposed)
            channels = w.shape[1] * groups if transposed else w.shape[0]
            kw = {
                "layout": fmt,
                "conv": conv_geometry(w, y, a.get("strides", 1), a.get("dilations", 1), fmt, transposed),
            }
            cls, traced = ("dwconv" if name.startswith("depthwise") else "conv"), name
        else:
            if name == "fc":  # x flattened to 2-D at in_num_col_dims (paddle/phi/infermeta/fusion.cc FCInferMeta)
                cols, n = int(a.get("in_num_col_dims", 1)), w.shape[-1]
                shape = (1, math.prod(x.shape[:cols]), n, math.prod(x.shape[cols:]))
            else:
                tx, ty = (bool(a.get(f"transpose_{c}", a.get(f"trans_{c}", False))) for c in "xy")
                k = x.shape[-2] if tx and len(x.shape) > 1 else x.shape[-1]
                shape = matmul_gemm(x, w, y, k)
                n = w.shape[-2] if ty and len(w.shape) > 1 else w.shape[-1]
            macs, channels, kw = math.prod(y.shape) * shape[3], n, {}
            cls, traced = "gemm", "linear" if ins[1].param and len(w.shape) <= 2 else "matmul"
        if bias is None:
            bias = self.fold_bias(op, channels, outs)
        flops = 2 * macs + (math.prod(outs[0].shape) if bias is not None else 0)
        ins = ins[:2] + ([bias] if bias is not None else [])
        self.emit(traced, cls, flops, ins, outs[:1], gemm=tuple(int(s) for s in shape), **kw)

    def fold_bias(self, op: Any, channels: int, outs: list[_Val]) -> _Val | None:
        """The bias parameter of the ``add`` that alone reads ``op``'s result, the add folded (``outs[0]`` becomes
        its result); None when there is none."""
        r = op.result(0)
        users = r.all_used_ops()
        if len(users) != 1 or _name(users[0]) != "add":
            return None
        add = users[0]
        other = [v for v in add.operands_source() if v.initialized() and v.id != r.id]
        b = self.param_of(other[0]) if len(other) == 1 else None
        if b is None or not b.param or math.prod(b.shape) != channels:
            return None
        res = add.result(0)
        self.folded.add(res.id)
        outs[0] = self.new(res, outs[0].shape)
        return b

    def param_of(self, v: Any) -> _Val | None:
        """The parameter ``v`` is, or is a view of (a bias reshaped to [1, C, 1, 1] before the add reads it)."""
        val = self.vals.get(v.id)
        d = v.get_defining_op() if val is None else None
        if d is not None and _aliasing(_name(d)) and d.num_operands():
            val = self.vals.get(d.operand_source(0).id)
        return val if val is not None and val.param else None

    def attention(self, op: Any, ins: list[_Val], outs: list[_Val]) -> None:
        """``flash_attn`` of q, k, v laid out [B, S, H, D] (``python/paddle/nn/functional/flash_attention.py``)."""
        q, k, v = (x.shape for x in ins[:3])
        bh, sq, sk = math.prod(q) // (q[-3] * q[-1]), q[-3], k[-3]
        flops = flash_attention_flops(bh, sq, sk, q[-1], v[-1], bool(op.attrs().get("causal")) and sq == sk)
        self.emit("flash_attn", "attention", flops, ins, outs[:1], gemm=attention_gemm(bh, sq, sk, q[-1]))


def _infer(name: str, a: dict[str, Any], ins: list[_Val], rank: int, size: Any) -> tuple[int, ...] | None:
    """The result shape of a matmul, convolution or pooling from its operands' shapes (their InferMeta:
    ``paddle/phi/infermeta/binary.cc`` ``MatmulInferMeta``, ``ConvInferMeta``; ``unary.cc`` ``PoolInferMeta``), for
    results the program left with a dynamic dim (a dynamic sequence length, a dynamic image size); None otherwise.
    ``size``: the pool's kernel size (its second operand)."""
    if name in ("matmul", "bmm") and len(ins) >= 2 and min(len(ins[0].shape), len(ins[1].shape)) >= 2:
        x, y = ins[0].shape, ins[1].shape
        m = x[-1] if a.get("transpose_x") else x[-2]
        n = y[-2] if a.get("transpose_y") else y[-1]
        lead = max(len(x), len(y)) - 2
        bx, by = (1,) * (lead - len(x) + 2) + x[:-2], (1,) * (lead - len(y) + 2) + y[:-2]
        shape = (*(max(p, q) for p, q in zip(bx, by, strict=True)), m, n)
        return shape if len(shape) == rank else None
    conv = name in ("conv2d", "depthwise_conv2d", "conv3d") and len(ins) >= 2
    if not (conv or name in ("pool2d", "pool3d")) or not ins or len(ins[0].shape) != rank:
        return None
    x, last = ins[0].shape, str(a.get("data_format", "NCHW")).startswith("ND") or a.get("data_format") == "NHWC"
    spatial = x[1:-1] if last else x[2:]
    nd = len(spatial)
    kernel = ins[1].shape[2:] if conv else list(size) if isinstance(size, list) else None
    if kernel is None or len(kernel) != nd:
        return None
    if not conv and (a.get("adaptive") or a.get("global_pooling")):
        out = [int(k) for k in kernel] if a.get("adaptive") else [1] * nd
    else:
        st, dil = _ints(a.get("strides"), nd), _ints(a.get("dilations") if conv else None, nd)
        pads = [int(p) for p in a.get("paddings", [0] * nd)]
        pads = [p for p in pads for _ in (0, 1)] if len(pads) == nd else pads + [0] * (2 * nd - len(pads))
        algo, ceil = str(a.get("padding_algorithm", "EXPLICIT")), bool(a.get("ceil_mode"))
        out = []
        for i in range(nd):
            ext = dil[i] * (int(kernel[i]) - 1) + 1
            span = spatial[i] + (0 if algo == "VALID" else pads[2 * i] + pads[2 * i + 1]) - ext
            out.append(-(-spatial[i] // st[i]) if algo == "SAME" else (span + (st[i] - 1 if ceil else 0)) // st[i] + 1)
    ch = ins[1].shape[0] if conv else (x[-1] if last else x[1])
    return (x[0], *out, ch) if last else (x[0], ch, *out)


def _ints(v: Any, n: int) -> list[int]:
    v = [1] if v is None else (list(v) if isinstance(v, list | tuple) else [v])
    return [int(x) for x in v] * (n // len(v)) if len(v) in (1, n) else [1] * n


def _aliasing(name: str) -> bool:
    """Ops whose result, of a parameter, is traced as that parameter: views and ``assign`` (a copy)."""
    return name == "assign" or _PER_ELEMENT.get(name, ("",))[0] == "view"


def _const(v: Any) -> Any:
    """The value of a ``full``/``full_int_array`` result (an axis, a shape), else None."""
    op = v.get_defining_op() if v is not None and v.initialized() else None
    return op.attrs().get("value") if op is not None and _name(op) in ("full", "full_int_array") else None
