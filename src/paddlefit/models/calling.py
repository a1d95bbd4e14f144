"""How a job calls its model: inputs by position and by keyword, the label, and the loss a step backpropagates.

One set of rules for ``plan``'s CPU probe, ``train``, ``profile``, ``tune`` and ``export``, so what is planned is
what is trained:

- **Inputs.** A batch is ``args`` (positional tensors, in ``forward``'s order) and ``kwargs`` (keyword tensors,
  the job's ``name=SPEC`` inputs). A dataset sample is a tuple ``(input..., label)``, whose inputs are matched to
  the job's input specs in order (named ones become keyword arguments), or a dict of keyword arguments whose
  label is under ``label_arg``, ``label`` or ``labels``.
- **Label.** With ``label_arg`` the label is also passed to ``forward`` under that name (models that compute
  their own loss, e.g. PaddleNLP's ``labels=``).
- **Loss.** The model's own when it returns one (:func:`model_loss`); otherwise the job's ``loss`` on the output
  (the ``logits`` of a dict/ModelOutput; summed over a tuple/list of outputs that each match the label, e.g.
  auxiliary heads). A step's loss must be a scalar.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from paddlefit.errors import InputSpecError, PaddlefitError
from paddlefit.jobspec.inputs import InputSpec

#: the loss names a job spec may give besides ``package.module:function``
BUILTIN_LOSSES = ("cross_entropy", "mse")
#: dict keys read as the label when the job names no ``label_arg`` (PaddleNLP/PaddleFormers use ``labels``)
LABEL_KEYS = ("label", "labels")


@dataclass
class Batch:
    """One batch as the model is called with it.

    Attributes:
        args: positional input tensors, each of shape (batch, *per-sample shape).
        kwargs: keyword input tensors (name -> tensor).
        label: the label tensor (batch, *label shape), or None when the job has none.
    """

    args: list[Any]
    kwargs: dict[str, Any] = field(default_factory=dict)
    label: Any = None

    @property
    def size(self) -> int:
        """Samples in the batch (leading dimension of the first tensor; 1 for a batch without tensors)."""
        for t in (*self.args, *self.kwargs.values(), self.label):
            if hasattr(t, "shape") and len(t.shape):
                return int(t.shape[0])
        return 1

    def slice(self, a: int, b: int) -> Batch:
        """Samples ``a:b`` of every tensor, also inside dicts, lists and tuples as the DataLoader collates them (a
        CTC label ``{text, length}``, a DB detector's maps), for micro-batches of an out-of-memory back-off."""

        def cut(t: Any) -> Any:
            if isinstance(t, Mapping):
                return {k: cut(v) for k, v in t.items()}
            if isinstance(t, list | tuple):
                return type(t)(cut(v) for v in t)
            return t[a:b] if hasattr(t, "shape") and len(t.shape) else t

        return Batch(
            [cut(x) for x in self.args],
            {k: cut(v) for k, v in self.kwargs.items()},
            cut(self.label) if self.label is not None else None,
        )

    def tensors(self) -> list[Any]:
        """Every input tensor, positional then keyword (for the FLOPs counter and error messages)."""
        return [*self.args, *self.kwargs.values()]

    def describe(self) -> str:
        """``[8, 3, 32, 32] float32, token_type_ids=[8, 128] int64`` for error messages."""
        parts = [_describe(x) for x in self.args] + [f"{k}={_describe(v)}" for k, v in self.kwargs.items()]
        return ", ".join(parts)


def _describe(x: Any) -> str:
    return (
        f"{list(x.shape)} {x.dtype}".replace("paddle.", "")
        if hasattr(x, "shape") and hasattr(x, "dtype")
        else type(x).__name__
    )


def label_key(sample: Mapping[str, Any], label_arg: str | None) -> str | None:
    """The key of a dict sample that holds the label: ``label_arg`` if present, else ``label``/``labels``."""
    for key in ((label_arg,) if label_arg else ()) + LABEL_KEYS:
        if key in sample:
            return key
    return None


def batch_from_loader(data: Any, specs: list[InputSpec] | None, label_arg: str | None) -> Batch:
    """A collated DataLoader batch as a :class:`Batch`.

    Args:
        data: a list/tuple ``[input..., label]`` (tuple samples) or a dict (dict samples) of tensors.
        specs: the job's input specs; when their count matches the tuple's inputs, their names say which
            inputs are keyword arguments. None or empty = all positional.
        label_arg: the job's ``label_arg`` (the dict key of the label, and the keyword it is passed under).

    Raises:
        PaddlefitError: a tuple with no label, or named specs whose count differs from the sample's inputs.
    """
    if isinstance(data, Mapping):
        kwargs = dict(data)
        key = label_key(kwargs, label_arg)
        label = kwargs.pop(key) if key is not None else None
        return Batch([], kwargs, label)
    if not isinstance(data, list | tuple) or len(data) < 2:
        raise PaddlefitError(
            "a batch must be (input..., label) or a dict of keyword inputs; got "
            f"{type(data).__name__} of {len(data) if hasattr(data, '__len__') else 1}."
        )
    *xs, y = data
    named = [s.name for s in specs or []]
    if not any(named):
        return Batch(list(xs), {}, y)
    if len(named) != len(xs):
        raise PaddlefitError(
            f"the job's `inputs` name {len(named)} inputs ({', '.join(str(s) for s in specs or [])})"
            f" but each sample has {len(xs)} before its label; give one spec per sample input."
        )
    args = [x for x, n in zip(xs, named, strict=True) if n is None]
    kwargs = {n: x for x, n in zip(xs, named, strict=True) if n is not None}
    return Batch(args, kwargs, y)


def call_model(model: Any, batch: Batch, label_arg: str | None) -> Any:
    """``model(*args, **kwargs)``, with the label as ``label_arg=`` when the job names one."""
    kwargs = dict(batch.kwargs)
    if label_arg and batch.label is not None:
        kwargs[label_arg] = batch.label
    return model(*batch.args, **kwargs)


def _is_tensor(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and hasattr(x, "backward")


def _scalar(x: Any) -> bool:
    return _is_tensor(x) and len(x.shape) == 0


def model_loss(out: Any, label_passed: bool) -> Any:
    """The loss the model returned itself, or None.

    A 0-d tensor; the ``loss`` of a dict/``ModelOutput`` (PaddleNLP's dataclass outputs are ordered dicts with
    attributes) or of any object with a tensor ``loss`` attribute; the first element of a ``(loss, logits...)``
    tuple when the label was passed to ``forward`` (PaddleNLP's ``return_dict=False`` form).
    """
    if _scalar(out):
        return out
    if isinstance(out, Mapping) and _scalar(out.get("loss")):
        return out["loss"]
    loss = getattr(out, "loss", None) if not _is_tensor(out) else None
    if _scalar(loss):
        return loss
    if label_passed and isinstance(out, list | tuple) and out and _scalar(out[0]):
        return out[0]
    return None


def logits_of(out: Any) -> Any:
    """What a built-in loss is applied to: the tensor output, the ``logits`` of a dict/ModelOutput, or the
    list of tensors of a tuple/list output."""
    if _is_tensor(out):
        return out
    if isinstance(out, Mapping):
        if _is_tensor(out.get("logits")):
            return out["logits"]
        return None
    if _is_tensor(getattr(out, "logits", None)):
        return out.logits
    if isinstance(out, list | tuple) and out and all(_is_tensor(o) for o in out):
        return list(out)
    return None


def prediction_of(out: Any, label_passed: bool) -> Any:
    """The logits tensor of an output for an accuracy: :func:`logits_of`, skipping the model's own loss (the first
    element of a ``(loss, logits)`` tuple) and taking the main head of a list; None if no tensor of rank >= 1."""
    if label_passed and isinstance(out, list | tuple) and len(out) > 1 and _scalar(out[0]):
        out = out[1]
    x = logits_of(out)
    if isinstance(x, list):
        x = x[0]
    return x if _is_tensor(x) and len(x.shape) >= 1 else None


def describe_label(y: Any) -> str:
    """A label for error messages: shape and dtype of a tensor (``[16] int64``), the structure of a dict or list
    of them (first 6 entries, e.g. CTC's ``{text: ..., length: ...}``), else the type name."""
    if isinstance(y, dict):
        return "{" + ", ".join(f"{k}: {describe_label(v)}" for k, v in list(y.items())[:6]) + "}"
    if isinstance(y, list | tuple):
        return "[" + ", ".join(describe_label(v) for v in y[:6]) + "]"
    return _describe(y)


def describe_output(out: Any) -> str:
    """``tuple of 3 ([2, 1000] float32, ...)`` for messages."""
    if _is_tensor(out):
        return f"a tensor {_describe(out)}"
    if isinstance(out, Mapping):
        return "a dict {" + ", ".join(f"{k}: {_describe(v)}" for k, v in list(out.items())[:6]) + "}"
    if isinstance(out, list | tuple):
        return f"a {type(out).__name__} of {len(out)} (" + ", ".join(_describe(o) for o in out[:6]) + ")"
    return f"a {type(out).__name__}"


def cross_entropy(out: Any, y: Any) -> Any:
    """``paddle.nn.functional.cross_entropy`` (mean) with the class axis read off the shapes.

    ``out`` (N, ..., C) with label (N, ...) or (N, ..., 1): classes last (classifiers, token logits);
    ``out`` (N, C, d1, ...) with label (N, d1, ...): classes at axis 1 (segmentation logits, NCHW).
    A per-sample label of any shape with N elements against (N, C) logits is flattened.

    Raises:
        PaddlefitError: no axis of ``out`` matches the label's shape.
    """
    import paddle.nn.functional as F

    o, lab = list(out.shape), list(y.shape)
    if "int64" not in str(y.dtype):
        y = y.astype("int64")
    if lab == o[:-1] or (lab[:-1] == o[:-1] and lab[-1:] == [1]):
        return F.cross_entropy(out, y)
    if len(o) >= 3 and (lab == [o[0], *o[2:]] or lab == [o[0], 1, *o[2:]]):
        return F.cross_entropy(out, y if len(lab) == len(o) else y.unsqueeze(1), axis=1)
    if len(o) == 2 and int(np.prod(lab)) == o[0]:
        return F.cross_entropy(out, y.reshape([-1]))
    raise PaddlefitError(
        f"`loss: cross_entropy` cannot pair logits {o} with labels {lab}: the labels must be the "
        "logits' shape without the class axis (last, or axis 1 for NCHW maps); check the label, or "
        "write `loss: package.module:function(output, label)`."
    )


def resolve_loss(name: str | None) -> Callable[[Any, Any], Any]:
    """The loss function of ``name``: ``cross_entropy`` (default; :func:`cross_entropy`), ``mse``
    (``paddle.nn.functional.mse_loss``, mean) or ``package.module:function(output, label) -> scalar``.

    Raises:
        PaddlefitError: unknown name, import failure or not callable.
    """
    import paddle.nn.functional as F

    name = name or "cross_entropy"
    if name == "cross_entropy":
        return cross_entropy
    if name == "mse":
        return lambda out, y: F.mse_loss(out, y.astype(out.dtype).reshape(out.shape))
    from paddlefit.process.userimport import import_callable

    return import_callable(name, f"loss: {name}", "use cross_entropy, mse or `package.module:function`")


@dataclass
class JobLoss:
    """The loss of a job's step: :func:`model_loss` first, else ``loss_fn`` on the output.

    Attributes:
        name: the job's ``loss`` (None = default ``cross_entropy``).
        label_arg: the job's ``label_arg``.
        how: after the first call, how the loss was taken: ``model`` (the model's own), ``loss`` (the job's
            loss on one tensor), ``loss-summed`` (summed over a tuple of outputs); for plan notes and logs.
    """

    name: str | None
    label_arg: str | None = None
    how: str | None = None
    outputs: int = 1

    def __post_init__(self) -> None:
        self.fn = resolve_loss(self.name)

    @property
    def builtin(self) -> bool:
        """True for ``cross_entropy``/``mse`` (they take one tensor), False for a user function."""
        return (self.name or "cross_entropy") in BUILTIN_LOSSES

    def __call__(self, out: Any, batch: Batch) -> Any:
        """The scalar to backpropagate for ``out = call_model(model, batch, label_arg)``.

        Raises:
            PaddlefitError: no loss of the model's and no label; an output a built-in loss cannot take (with
                how to write ``loss: package.module:function``); a loss that is not a scalar.
        """
        own = model_loss(out, label_passed=bool(self.label_arg and batch.label is not None))
        if own is not None:
            self.how = "model"
            return own
        shown = self.name or "cross_entropy"
        if batch.label is None:
            raise PaddlefitError(
                f"the model returned {describe_output(out)}, no loss of its own, and the job has no "
                f"label for `loss: {shown}`: give samples a label (the last tuple element, or a "
                "`label`/`labels` key), or pass it to forward with `label_arg:`."
            )
        if self.builtin:
            x = logits_of(out)
            if x is None:
                raise PaddlefitError(
                    f"the model returned {describe_output(out)}; `loss: {shown}` takes one tensor of logits. Write "
                    "your loss as `loss: package.module:function` taking (output, label) and returning a scalar, "
                    "e.g. `def loss(out, label): return paddle.nn.functional.cross_entropy(out['seg'], label)`."
                )
        else:
            x = out
        try:
            if self.builtin and isinstance(x, list):
                self.how, self.outputs = "loss-summed", len(x)
                import paddle

                loss = paddle.add_n([self.fn(o, batch.label) for o in x])
            else:
                self.how = "loss"
                loss = self.fn(x, batch.label)
        except PaddlefitError:
            raise
        except Exception as exc:
            if "(ResourceExhausted)" in str(exc) or isinstance(exc, MemoryError):
                raise
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            raise PaddlefitError(
                f"`loss: {shown}` raised {type(exc).__name__}: {first} on the model's output "
                f"({describe_output(out)}) and the label ({describe_label(batch.label)}). Check "
                "the loss and the label (`label:` / `--label`, or data.train's labels)."
            ) from None
        if not _is_tensor(loss) or int(np.prod(loss.shape)) != 1:
            got = list(loss.shape) if hasattr(loss, "shape") else type(loss).__name__
            raise PaddlefitError(f"`loss: {shown}` must return a scalar tensor; got {got}.")
        return loss

    def describe(self) -> str:
        """How the loss was taken, in words (after the first call)."""
        shown = self.name or "cross_entropy"
        if self.how == "model":
            return "the model's own loss"
        if self.how == "loss-summed":
            return f"{shown} summed over the model's {self.outputs} outputs"
        return shown


def to_tensors(obj: Any) -> Any:
    """numpy arrays (and numbers) in a collated batch -> Paddle tensors, through lists, tuples and dicts."""
    import paddle

    if isinstance(obj, dict):
        return {k: to_tensors(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(to_tensors(v) for v in obj)
    if isinstance(obj, np.ndarray | np.number | int | float):
        return paddle.to_tensor(obj)
    return obj


def batch_of_sample(sample: Any, batch: int, specs: list[InputSpec] | None, label_arg: str | None) -> Batch:
    """A :class:`Batch` of ``batch`` copies of one dataset sample, collated as ``paddle.io.DataLoader`` does
    (``default_collate_fn``): inputs and labels of exactly the job's structure, nested dicts included."""
    from paddle.io.dataloader.collate import default_collate_fn

    return batch_from_loader(to_tensors(default_collate_fn([sample] * batch)), specs, label_arg)


def make_batch(specs: list[InputSpec], label: InputSpec | None, batch: int, seed: int = 0) -> Batch:
    """Random tensors of shape (batch, *spec.shape) for each input spec (named ones as keywords) and the label;
    integer values in ``[0, spec.high or 2)``, floats standard normal."""
    import paddle

    rng = np.random.default_rng(seed)

    def one(s: InputSpec) -> Any:
        shape = (batch, *s.shape)
        if s.dtype.startswith("int"):
            arr = rng.integers(0, s.high or 2, size=shape).astype(s.dtype)
        else:
            arr = rng.standard_normal(shape).astype("float32")
        t = paddle.to_tensor(arr)
        return t.astype(s.dtype) if s.dtype in ("float16", "bfloat16") else t

    args = [one(s) for s in specs if s.name is None]
    kwargs = {s.name: one(s) for s in specs if s.name is not None}
    return Batch(args, kwargs, one(label) if label is not None else None)


def infer_label_spec(out: Any, loss: str | None) -> InputSpec | None:
    """A label spec for synthetic batches when the job gives none, read off one forward's output at batch 1.

    ``cross_entropy``: class ids in ``[0, C)``; logits (1, C) -> ``int64[]``, (1, T, C) -> ``int64[T]`` (classes
    last), (1, C, H, W...) -> ``int64[H,W...]`` (4-D and up: classes at axis 1, NCHW maps). ``mse``: a float32
    label of the output's shape. Tuple/list outputs use the first tensor. A user loss: None (the caller asks
    for ``label:``).
    """
    x = logits_of(out)
    if isinstance(x, list):
        x = x[0]
    if x is None:
        return None
    shape = [int(d) for d in x.shape][1:]
    name = loss or "cross_entropy"
    if name == "cross_entropy":
        if not shape:
            return None
        if len(shape) >= 3:
            return InputSpec(dtype="int64", shape=tuple(shape[1:]), high=max(shape[0], 1))
        return InputSpec(dtype="int64", shape=tuple(shape[:-1]), high=max(shape[-1], 1))
    if name == "mse":
        return InputSpec(dtype="float32", shape=tuple(shape) or ())
    return None


def check_label_spec(label: InputSpec | None, loss: str | None, label_arg: str | None) -> None:
    """Refuse a job that cannot have a label: a user loss or ``label_arg`` without a label spec.

    Raises:
        InputSpecError: naming ``label:`` / ``--label`` and an example.
    """
    if label is not None:
        return
    if label_arg:
        raise InputSpecError(
            f"`label_arg: {label_arg}` passes the label to forward, but the job gives no label spec "
            "and no data.train to read one from; add `label: int64[]:10` (job spec) or "
            "`--label int64[]:10` with the label's per-sample shape."
        )
    if loss and loss not in BUILTIN_LOSSES:
        raise InputSpecError(
            f"`loss: {loss}` needs labels, and the job gives no label spec and no data.train to read "
            "one from; add `label: SPEC` (job spec) or `--label SPEC`, e.g. `int64[]:10`."
        )
