"""Build a model the way it can be built, and say what failed when it cannot.

- Every build runs under its own ``paddle.utils.unique_name.guard()``: a fresh parameter-name checker and name
  generator (``python/paddle/base/unique_name.py``), so layers with fixed ``ParamAttr(name=...)`` (PaddleOCR's
  backbones) build again in the same process instead of failing with "parameter name [...] have be been used"
  (``python/paddle/base/layer_helper_base.py``), and automatic names start from zero in every build.
- :func:`param_inventory` builds under ``paddle.LazyGuard`` (no parameter memory) and falls back to a real build
  when the lazy one fails: ``nn.LSTM``/``GRU`` coalesce their weights in ``__init__`` (``coalesce_tensor`` fails on
  lazy parameters) and layers that compute with tensors in ``__init__`` meet "Place(undefined:0)". The plan's
  note says what that means (real weights, planning unaffected); Paddle's error is kept for ``--json``.
- :func:`failure_message` names the layer and kernel that raised, and the way out: GPU-only kernels on a CPU
  probe, bad arguments to ``forward`` (the inputs), anything else (the model's code).
"""

from __future__ import annotations

import math
import re
import traceback
from dataclasses import dataclass
from typing import Any

from paddlefit.errors import ModelError
from paddlefit.estimate.model_states import ParamInfo

#: Paddle's message when a kernel has no implementation here: "(NotFound) The kernel `fused_rms_norm_ext` is not
#: registered." (measured, Paddle 3.3.1 CPU) or "The kernel with key (CPU, ...) of kernel `x` is not registered"
#: (``paddle/phi/core/kernel_factory.cc``); or a legacy fused op the CPU build does not have: "module
#: 'paddle.base.libpaddle.eager.ops.legacy' has no attribute 'fused_attention'" (a call with a KV cache, say).
_KERNEL_RE = re.compile(r"(?:kernel `|ops\.legacy' has no attribute ')(?P<name>\w+)(?:` is not registered|')", re.S)


def missing_cpu_kernel(exc: BaseException) -> str | None:
    """The op Paddle's error says has no CPU kernel at all (:data:`_KERNEL_RE`; not one registered in other dtypes
    only), e.g. ``fused_feedforward``; None for any other error."""
    text = str(exc)
    k = _KERNEL_RE.search(text)
    return k.group("name") if k and "Selected wrong DataType" not in text else None


def build(factory: Any, lazy: bool = False, name: str | None = None) -> Any:
    """``factory()`` under a fresh ``unique_name.guard()`` (and ``paddle.LazyGuard`` with ``lazy``); ``name``: the
    model's name for the error.

    Raises:
        ModelError: the factory returned something that is not a ``paddle.nn.Layer``.
        Whatever the factory raises (see :func:`failure_message`).
    """
    import paddle

    with paddle.utils.unique_name.guard():
        if lazy:
            with paddle.LazyGuard():
                model = factory()
        else:
            model = factory()
    if not isinstance(model, paddle.nn.Layer):
        of = f" of model {name!r}" if name else ""
        raise ModelError(
            f"the factory{of} returned {type(model).__name__}, not a paddle.nn.Layer: return the "
            "Layer itself (an instance, not its class or a tuple)."
        )
    return model


def failing_layer(exc: BaseException) -> str | None:
    """``ClassName.method (file:line)`` of the innermost ``paddle.nn.Layer`` method in ``exc``'s traceback."""
    import paddle

    found = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        me = frame.f_locals.get("self")
        if isinstance(me, paddle.nn.Layer) and not type(me).__module__.startswith("paddle.nn"):
            found = (
                f"{type(me).__name__}.{frame.f_code.co_name} ({frame.f_code.co_filename.rsplit('/', 1)[-1]}:{lineno})"
            )
        elif isinstance(me, paddle.nn.Layer) and found is None:
            found = f"{type(me).__name__}.{frame.f_code.co_name}"
    return found


def short_error(exc: BaseException, limit: int = 400) -> str:
    """``ExceptionType: message`` of ``exc`` in one line of at most ``limit`` characters of message.

    Drops Paddle's ``[Hint: Expected ...]`` tail and the C++ traceback lines of its C++ errors ("C++ Traceback",
    numbered frames, "Error Message Summary", ``---`` rulers), keeping the lines that say what happened.
    """
    text = re.sub(r"\s*\[Hint: .*", "", str(exc).strip(), flags=re.S)  # Paddle's "[Hint: Expected ...]" tail
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # Paddle's C++ errors put the summary after a C++ traceback; keep the lines that say what happened
    keep = [
        ln
        for ln in lines
        if not ln.startswith(("---", "C++ Traceback", "Error Message Summary")) and not re.match(r"^\d+\s+\w", ln)
    ]
    text = " ".join(keep or lines)
    return f"{type(exc).__name__}: {text[:limit]}"


def failure_message(
    name: str, exc: BaseException, what: str, inputs: str | None = None, label_arg: str | None = None
) -> str:
    """One paragraph saying what failed when model ``name`` was asked to ``what`` (``be built``, ``train``...).

    Names the layer (:func:`failing_layer`) and the way out:
    - a kernel the CPU has only in other dtypes (a model cast to float16) -> build it in float32, AMP by
      ``--precision``;
    - a kernel not registered for CPU (a GPU-only fused kernel, e.g. ``fused_rms_norm_ext``) -> turn the fused op
      off in the model's config for the CPU probe, or plan a large transformer with the parallel planner
      (``paddlefit plan CONFIG.json --gpus N``), which needs no probe;
    - ``forward()`` rejecting its arguments (``TypeError`` ... argument) -> the inputs (``--input``/``inputs:``);
    - anything else -> the model's own code or arguments (the error is quoted).
    """
    where = failing_layer(exc)
    at = f" in {where}" if where else ""
    text = str(exc)
    k = _KERNEL_RE.search(text)
    dtype = re.search(r"Selected wrong DataType `(\w+)`", text)
    if k and dtype:  # the kernel exists on CPU, not in this dtype (a model built or cast in half precision)
        return (
            f"Model {name!r} could not {what}: Paddle has no CPU kernel for `{k.group('name')}` in "
            f"{dtype.group(1)}{at}, and the plan's probe runs on this CPU. Build the model in float32 (as "
            "training with AMP does) and choose the GPU precision with `--precision` (fp16-o1, bf16-o2...)."
        )
    if op := missing_cpu_kernel(exc):
        return (
            f"Model {name!r} could not {what}: Paddle has no CPU kernel for `{op}`{at} (a GPU-only "
            "fused kernel, and the plan's probe runs on this CPU). Turn the fused op off in the model's config "
            "for planning (the config flag that selects it; the unfused layers have the same parameters and "
            "activations), or plan a large transformer with the parallel planner, which needs no probe: "
            "`paddlefit plan CONFIG.json --gpus N`."
        )
    if isinstance(exc, TypeError) and label_arg and re.search(rf"forward\(\).*'{re.escape(label_arg)}'", text):
        return (
            f"Model {name!r} could not {what}{at}: {short_error(exc)}. The label is passed to forward() as "
            f"`{label_arg}=` (`label_arg:` / `--label-arg`), and this forward() does not take it: name its label "
            "argument, or drop label_arg to use the job's `loss:` on the output."
        )
    if isinstance(exc, TypeError) and what != "be built" and "forward()" in text:
        shown = f" ({inputs})" if inputs else ""
        return (
            f"Model {name!r} could not {what}{at}: {short_error(exc)}. Its forward() does not take the inputs "
            f"given{shown}: give one `--input` per positional argument in forward()'s order, and `--input "
            "name=SPEC` (or `inputs: {name: SPEC}` in the job spec) for keyword arguments."
        )
    shown = f" with inputs {inputs}" if inputs and what != "be built" else ""
    hint = ""
    if shown and re.search(r"shape|dimension|dims|rank|dtype|data type", text, re.I):
        hint = (
            " If the inputs or the label are the cause: one `--input` per positional forward() argument in order, "
            "with the per-sample shape and dtype the model expects (`name=SPEC` for keyword arguments), and "
            "`--label SPEC` / `label:` with the shape the loss expects."
        )
    return f"Model {name!r} could not {what}{shown}{at}: {short_error(exc)}.{hint}"


@dataclass(frozen=True)
class LazyFallback:
    """Why :func:`param_inventory` built a model for real: ``note`` for the user (what it means for the plan),
    ``detail`` for ``--json`` (Paddle's error, the layer and line that raised)."""

    note: str
    detail: str


def param_inventory(ref: Any) -> tuple[ParamInfo, LazyFallback | None]:
    """Parameter counts of ``ref`` (a :class:`~paddlefit.models.zoo.ModelRef`) without allocating them when
    ``paddle.LazyGuard`` can build it; otherwise from a real build (freed before returning).

    Returns:
        (ParamInfo, fallback): why the lazy build failed, as a note and its technical detail (None when it worked).

    Raises:
        ModelError: the real build fails too (message from :func:`failure_message`), or no Layer is returned.
    """
    import gc

    try:
        model = build(ref.factory, lazy=True, name=ref.name)
        info = param_info(model)
        del model
        return info, None
    except ModelError:
        raise
    except KeyboardInterrupt:
        raise
    except (Exception, SystemExit) as exc:
        where = failing_layer(exc)
        detail = f"paddle.LazyGuard failed{' in ' + where if where else ''}: {short_error(exc, 400)}"
    try:
        model = build(ref.factory, name=ref.name)
    except ModelError:
        raise
    except KeyboardInterrupt:
        raise
    except (Exception, SystemExit) as exc:
        raise ModelError(
            failure_message(ref.name, exc, "be built") + " Check the factory and its `--model-arg` "
            "values (`model_args:`); it must return a `paddle.nn.Layer`."
        ) from None
    info = param_info(model)
    del model
    gc.collect()
    layer = where.split(".", 1)[0] if where else "it"
    note = (
        f"the model was built with its real weights ({info.params:,} parameters) because paddle.LazyGuard "
        f"cannot build {layer}; planning is unaffected"
    )
    return info, LazyFallback(note, detail)


def param_info(model: Any) -> ParamInfo:
    """Count parameters of a built (or ``paddle.LazyGuard``-built) model without touching their data."""
    params = trainable = tensors = nbytes = 0
    for p in model.parameters():
        n = math.prod(p.shape)
        params += n
        nbytes += n * 4
        if not p.stop_gradient:
            trainable += n
            tensors += 1
    import paddle

    rows = max(
        (int(m.weight.shape[0]) for m in model.sublayers(include_self=True) if isinstance(m, paddle.nn.Embedding)),
        default=0,
    )
    return ParamInfo(params, trainable, tensors, nbytes, rows)
