"""An exported inference program: a ``paddle.nn.Layer`` saved as one (``paddle.jit.save``), its files, its feed
names, and random requests for it. :mod:`paddlefit.serving.cpu_bench` serves it; ``plan --inference`` exports a model
with it before measuring the CPU row."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from paddlefit.errors import InputSpecError, JobFailedError, ModelError, PaddlefitError
from paddlefit.jobspec.inputs import InputSpec
from paddlefit.textsafe import name_safe

#: Program files ``paddle.inference.Config(model_file, params_file)`` reads, preferred first: the PIR program
#: (``.json``, what ``paddle.jit.save`` writes with PIR on, Paddle 3's default) and the legacy ProgramDesc
#: (``.pdmodel``, with ``FLAGS_enable_pir_api=0``), next to ``.pdiparams``. Source: Paddle 3.3.1
#: ``jit/pir_translated_layer.py`` (``PIR_INFER_MODEL_SUFFIX``), ``jit/translated_layer.py``; both load here.
MODEL_SUFFIXES = (".json", ".pdmodel")
PARAMS_SUFFIX = ".pdiparams"
_SAVED_SUFFIXES = (".json", ".pdmodel", ".pdiparams", ".pdiparams.info")


def input_names(specs: Sequence[InputSpec]) -> list[str]:
    """The feed name of each input of a saved model: the spec's name, else ``input_{i}`` (as
    :func:`paddlefit.train.export.export_run` names them; ``paddle.jit.save`` keeps ``InputSpec`` names as feed
    names, verified with Paddle 3.3.1)."""
    return [s.name or f"input_{i}" for i, s in enumerate(specs)]


def random_inputs(specs: Sequence[InputSpec], batch: int, seed: int = 0) -> list[np.ndarray]:
    """Random arrays of shape ``(batch, *spec.shape)``: floats uniform in [0, 1), integers in ``[0, spec.high or 2)``.

    Raises:
        InputSpecError: a dtype numpy cannot hold (``bfloat16``).
    """
    rng = np.random.default_rng(seed)
    arrays = []
    for i, s in enumerate(specs):
        try:
            dtype = np.dtype(s.dtype)
        except TypeError:
            raise InputSpecError(
                f"input {i} (`{s}`): dtype {s.dtype} cannot be fed to Paddle Inference from numpy; "
                "benchmark a float32 export."
            ) from None
        shape = (batch, *s.shape)
        if dtype.kind in "iu":
            arrays.append(rng.integers(0, s.high or 2, size=shape).astype(dtype))
        else:
            arrays.append(rng.random(shape, dtype=np.float32).astype(dtype))
    return arrays


def save_inference_model(model: Any, specs: Sequence[InputSpec], prefix: Path) -> list[str]:
    """``paddle.jit.save`` an eval-mode ``paddle.nn.Layer`` as ``PREFIX.json`` (or ``.pdmodel``) + ``.pdiparams``,
    with ``paddle.static.InputSpec([None, *spec.shape], spec.dtype, name)`` per input (dynamic batch dimension).
    A model with keyword (named) inputs, or whose output is not one tensor, is wrapped as ``export`` wraps it
    (:func:`paddlefit.models.exporting.jit_target`: positional inputs, a flat tuple of output tensors).

    Returns:
        The names of the files written (in ``prefix``'s directory).

    Raises:
        InputSpecError: ``specs`` is empty.
        ModelError: the model rejects a random batch of 2 built from ``specs``.
        JobFailedError: ``paddle.jit.save`` cannot convert the model to a static graph.
    """
    import paddle

    from paddlefit.models.exporting import jit_target

    if not specs:
        raise InputSpecError("save_inference_model needs at least one input spec (`specs`), e.g. float32[3,224,224].")
    prefix = Path(prefix)
    model.eval()
    names = [s.name for s in specs]
    xs = [paddle.to_tensor(a) for a in random_inputs(specs, 2)]
    args = [x for x, n in zip(xs, names, strict=True) if n is None]
    kwargs = {n: x for x, n in zip(xs, names, strict=True) if n is not None}
    try:
        with paddle.no_grad():
            out = model(*args, **kwargs)
    except Exception as exc:
        raise ModelError(
            f"the model rejects a batch of inputs {', '.join(map(str, specs))} ({type(exc).__name__}: "
            f"{str(exc)[:300]}); fix the input specs."
        ) from None
    target = jit_target(model, out, names)
    spec = [
        paddle.static.InputSpec([None, *s.shape], s.dtype, n) for s, n in zip(specs, input_names(specs), strict=True)
    ]
    prefix.parent.mkdir(parents=True, exist_ok=True)
    try:
        paddle.jit.save(target, str(prefix), input_spec=spec)
    except Exception as exc:
        raise JobFailedError(
            f"paddle.jit.save could not convert the model to a static graph ({type(exc).__name__}: {str(exc)[-400:]})."
        ) from None
    return sorted(prefix.name + s for s in _SAVED_SUFFIXES if prefix.with_name(prefix.name + s).is_file())


def model_files(prefix: Path) -> tuple[Path, Path]:
    """(program file, weights file) of the saved model at ``prefix`` (a directory means ``DIR/model``): ``.json``
    preferred over ``.pdmodel`` (:data:`MODEL_SUFFIXES`).

    Raises:
        PaddlefitError: no program file or no ``.pdiparams`` next to it; the message names the path and the file
            missing.
    """
    prefix = Path(prefix) / "model" if Path(prefix).is_dir() else Path(prefix)
    params = prefix.with_name(prefix.name + PARAMS_SUFFIX)
    program = next((p for s in MODEL_SUFFIXES if (p := prefix.with_name(prefix.name + s)).is_file()), None)
    missing = [f"{prefix.name}.json (or .pdmodel)"] * (program is None) + [params.name] * (not params.is_file())
    if program is None or missing:
        raise PaddlefitError(
            f"`{name_safe(prefix)}` is not a saved inference model: {' and '.join(missing)} "
            f"missing in {name_safe(prefix.parent)}; give the prefix `paddle.jit.save` wrote (e.g. "
            "RUN_DIR/inference/model from `paddlefit export`)."
        )
    return program, params
