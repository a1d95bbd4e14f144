"""The model ``plan --inference`` serves: a zoo name, an import path, a job spec, or an exported program.

:func:`resolve_served` returns its eval-mode forward trace at two batch sizes and its per-sample inputs:

- zoo / ``package.module:factory`` / ``--config``: the model is built on this CPU, put in eval mode, and its forward
  recorded under ``paddle.no_grad`` (:func:`~paddlefit.probe.recorder.record_trace`); a zoo transformer's trace is
  written from its shape instead (as training plans do), and it is built only for the CPU row;
- an exported model (a ``paddle.jit.save`` prefix: a run's export folder, a folder holding ``model.json`` or
  ``model.pdmodel`` with ``model.pdiparams``, or one of those files): its program is read op by op
  (:func:`~paddlefit.probe.program_trace.trace_program`), without the model's Python code.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from paddlefit.errors import InputSpecError, ModelError
from paddlefit.estimate.optrace import OpTrace
from paddlefit.jobspec.inputs import InputSpec
from paddlefit.rundir.layout import EXPORT_DIR
from paddlefit.serving.program import MODEL_SUFFIXES, PARAMS_SUFFIX
from paddlefit.units import GIB

#: Where a ``paddle.jit.save`` program may sit under a folder the user names (a run's export folder first).
EXPORT_DIRS = ("", EXPORT_DIR, "export")


@dataclass
class ServedModel:
    """A model to serve.

    Attributes:
        name: what the user named (zoo name, import path, or the program prefix).
        kind: ``zoo``, ``import``, ``spec``, ``config`` (a built-in LLM or a config file) or ``exported``.
        trace: eval-mode forward ops at batch 1 and 2.
        specs: per-sample inputs (batch dimension removed).
        params: parameter elements.
        prefix: the exported program's path prefix (``.../model``), None for a model built from code.
        layer: the eval-mode ``paddle.nn.Layer`` (None for an exported program and a zoo transformer), for the CPU
            measurement's export.
        unmapped: program ops the trace could not time, with counts (exported programs only).
        builder: builds the eval-mode layer when the CPU row asks for it (a zoo transformer small enough to run
            here, whose trace is written from its shape); None otherwise.
    """

    name: str
    kind: str
    trace: OpTrace
    specs: list[InputSpec]
    params: int
    prefix: Path | None = None
    layer: Any = None
    unmapped: dict[str, int] | None = None
    builder: Callable[[], Any] | None = None


def program_prefix(path: str) -> Path | None:
    """The ``paddle.jit.save`` prefix ``path`` names, or None when ``path`` is not an existing file or folder (nor a
    prefix with a program beside it): a folder (a run directory, its export folder), a ``.json`` / ``.pdmodel`` /
    ``.pdiparams`` file, or the prefix itself (``runs/x/inference/model``, as ``export`` prints it).

    Raises:
        ModelError: ``path`` holds no program with its ``.pdiparams``, or more than one (names them).
    """
    p = Path(path).expanduser()
    bare = [c for s in MODEL_SUFFIXES if (c := p.parent / (p.name + s)).is_file()]
    if not p.exists() and not bare:
        return None
    if p.is_file() and p.suffix not in (*MODEL_SUFFIXES, PARAMS_SUFFIX):
        raise ModelError(
            f"{path}: not an exported program; give a `paddle.jit.save` model (`model.json` or "
            "`model.pdmodel` beside `model.pdiparams`) or the folder holding it."
        )
    if p.is_file() or bare:
        stem = p.parent / p.name[: -len(p.suffix)] if p.is_file() else p
        found = [c for s in MODEL_SUFFIXES if (c := stem.parent / (stem.name + s)).is_file()]
        if not found:
            raise ModelError(
                f"{path}: no `{stem.name}.json` or `{stem.name}.pdmodel` beside it; an exported model is "
                "the program file and its .pdiparams, as `paddlefit export RUN_DIR` writes them."
            )
    else:
        dirs = [d for d in (p / sub for sub in EXPORT_DIRS) if d.is_dir()]
        found = [
            d / f.name
            for d in dirs
            for s in MODEL_SUFFIXES
            for f in sorted(d.glob("*" + s))
            if _params_file(d / f.name[: -len(s)]).exists()
        ]
    if not found:
        raise ModelError(
            f"{path}: no exported program found (looked for *.json / *.pdmodel with a .pdiparams "
            f"in {', '.join(str(p / s) if s else str(p) for s in EXPORT_DIRS)}); export a run "
            "with `paddlefit export RUN_DIR`."
        )
    if len(found) > 1:
        raise ModelError(
            f"{path}: {len(found)} exported programs ({', '.join(str(f) for f in found)}); name the "
            "one to plan (its .json or .pdmodel file)."
        )
    prefix = found[0].parent / found[0].name[: -len(found[0].suffix)]
    if not _params_file(prefix).exists():
        raise ModelError(
            f"{path}: `{_params_file(prefix)}` is missing; an exported program needs its parameters file beside it."
        )
    return prefix


def _llm_config(model: str) -> Any:
    """The :class:`~paddlefit.catalog.transformers.TransformerConfig` ``model`` names when it is a built-in LLM
    (``llama-2-7b``...) or a Hugging Face / PaddleNLP ``config.json`` (or YAML, or a folder holding one) that is not
    an exported program, else None.

    Raises:
        ModelError: the config file is bad (:func:`~paddlefit.catalog.transformer_configs.load_llm_config`).
    """
    from paddlefit.catalog.transformer_configs import LLM_CONFIGS, is_llm_config_path, resolve_llm

    if model.strip().lower() in LLM_CONFIGS:
        return resolve_llm(model)
    model = str(Path(model).expanduser())
    if not is_llm_config_path(model) or not Path(model).exists():
        return None
    try:
        if program_prefix(model) is not None:
            return None
    except ModelError:  # no program there: a config
        pass
    return resolve_llm(str(Path(model).expanduser()))


def _from_transformer_config(cfg: Any, inputs: list[str] | None, model_args: list[str] | None) -> ServedModel:
    """A built-in LLM or a config file, planned from its shape: one input of token ids, its length from
    ``--input int64[S]`` (required: a config names no serving length).

    Raises:
        InputSpecError: no ``--input``, or not one input of token ids, or longer than the model's positions.
    """
    from paddlefit.catalog.transformer_configs import to_transformer_config
    from paddlefit.jobspec.inputs import parse_input_specs

    if model_args:
        raise InputSpecError("`--model-arg` does not apply to a transformer config: it has no factory to call.")
    if not inputs:
        raise InputSpecError(
            f"{cfg.name}: give the request's sequence length as `--input int64[S]`, e.g. "
            f"`--input int64[{min(cfg.max_position, 2048)}]`."
        )
    ref = SimpleNamespace(
        name=cfg.name,
        transformer=to_transformer_config(cfg),
        default_inputs=parse_input_specs([f"int64[{min(cfg.max_position, 2048)}]"]),
    )
    return _analytic(ref, parse_input_specs(inputs), "config")


def _looks_like_path(name: str) -> bool:
    """A name only a path has: a directory separator, a leading ``.`` or ``~``, or a program file's suffix (zoo
    names and ``package.module:factory`` have none of these)."""
    seps = {"/", os.sep} | ({os.altsep} if os.altsep else set())
    return (
        any(c in name for c in seps)
        or name.startswith((".", "~"))
        or name.endswith((*MODEL_SUFFIXES, PARAMS_SUFFIX, ".yaml", ".yml"))
    )


def _params_file(prefix: Path) -> Path:
    """``PREFIX.pdiparams`` (a prefix may itself contain dots)."""
    return prefix.parent / (prefix.name + PARAMS_SUFFIX)


def resolve_served(
    model: str | None, config: Path | None, inputs: list[str] | None, model_args: list[str] | None
) -> ServedModel:
    """The model MODEL / ``--config`` name, traced (see the module docstring).

    Raises:
        ModelError: a bad exported program or a model whose forward fails; InputSpecError: inputs that do not
            parse or a model without default inputs; PaddlefitError: a bad spec (see
            :func:`~paddlefit.job.resolve.resolve_job`).
    """
    from paddlefit.models.zoo import zoo_names

    if model is not None and not model.strip():
        raise ModelError(
            "MODEL is empty: give a zoo name, `package.module:factory`, an exported model folder, or "
            "`--config job.yaml`."
        )
    code = model is None or config is not None or ":" in model or model.strip().lower() in zoo_names()
    llm = None if code else _llm_config(model)  # type: ignore[arg-type]
    if llm is not None:
        return _from_transformer_config(llm, inputs, model_args)
    prefix = None if code else program_prefix(model)  # type: ignore[arg-type]
    if prefix is None and not code and _looks_like_path(model):  # type: ignore[arg-type]
        raise ModelError(
            f"{model}: no such file or folder. `plan --inference` takes a zoo name, "
            "`package.module:factory`, `--config job.yaml`, or an exported model: a folder holding "
            "`model.json` (or `model.pdmodel`) with `model.pdiparams`, as `paddlefit export RUN_DIR` "
            "writes into RUN_DIR/inference."
        )
    if prefix is None:
        return _from_code(model, config, inputs, model_args)
    if model_args:
        raise InputSpecError("`--model-arg` does not apply to an exported program: it has no factory to call.")
    return _from_program(prefix, inputs)


def _from_program(prefix: Path, inputs: list[str] | None) -> ServedModel:
    """An exported program traced op by op; ``inputs`` (``--input``) give the per-sample shapes of feeds saved with
    dynamic dims besides the batch (by name, or in feed order) and the id ranges of integer feeds.

    Raises:
        ModelError: see :func:`~paddlefit.probe.program_trace.trace_program`; a parameters file smaller than
            the parameters the program declares (it belongs to another model).
    """
    from paddlefit.jobspec.inputs import parse_input_specs
    from paddlefit.probe.program_trace import trace_program

    given = parse_input_specs(inputs) if inputs else []
    shapes = {s.name or str(i): list(s.shape) for i, s in enumerate(given)}
    pt = trace_program(prefix, 1, 2, shapes=shapes or None)
    size = _params_file(prefix).stat().st_size
    if size < pt.param_bytes:
        raise ModelError(
            f"`{_params_file(prefix)}` holds {size:,} bytes, fewer than the {pt.param_bytes:,} bytes of "
            "parameters its program declares: it belongs to another model; export again."
        )
    specs = list(pt.inputs)
    for i, s in enumerate(specs):  # the ids' range from --input (the program does not know it)
        g = next((x for j, x in enumerate(given) if x.name == s.name or (x.name is None and j == i)), None)
        if g is not None and g.high:
            specs[i] = s.model_copy(update={"high": g.high})
    return ServedModel(str(prefix), "exported", pt.trace, specs, pt.params, prefix=prefix, unmapped=dict(pt.unmapped))


def too_large_to_run(params: int) -> bool:
    """fp32 weights above min(25% of RAM, 8 GiB): built and run on this CPU only below that (the training plan's
    probe limit, :func:`paddlefit.plan.measure.measure_model`)."""
    import psutil

    return 4 * params > min(psutil.virtual_memory().total // 4, 8 * GIB)


def _analytic(ref: Any, specs: list[InputSpec], kind: str) -> ServedModel:
    """A zoo transformer: its trace written from its shape
    (:func:`~paddlefit.estimate.transformer_ops.transformer_trace`), in seconds whatever its size; no layer.

    Raises:
        InputSpecError: not one input of token ids (a keyword input other than the model's ids counts as another),
            ids above the vocabulary, or a sequence longer than the model's positions.
    """
    from paddlefit.estimate.transformer_ops import transformer_trace

    cfg = ref.transformer
    want = ref.default_inputs[0]
    if (
        len(specs) != 1
        or not specs[0].dtype.startswith("int")
        or len(specs[0].shape) != 1
        or specs[0].name not in (None, want.name)
    ):
        raise InputSpecError(
            f"`--input`: {ref.name} takes one input of token ids, e.g. `--input "
            f"int64[{want.shape[0]}]`; got {' '.join(str(s) for s in specs)}."
        )
    if specs[0].high and specs[0].high > cfg.vocab_size:
        raise InputSpecError(
            f"`--input {specs[0]}`: token ids up to {specs[0].high} exceed {ref.name}'s vocabulary "
            f"of {cfg.vocab_size}; give `:{cfg.vocab_size}` or less."
        )
    seq = specs[0].shape[0]
    if seq > cfg.max_position:
        raise InputSpecError(
            f"{ref.name}: sequence length {seq} exceeds its max_position {cfg.max_position}; use "
            f"`--input int64[{cfg.max_position}]` or less."
        )
    return ServedModel(ref.name, kind, transformer_trace(cfg, seq), specs, cfg.params)


def _eval_layer(factory: Any, build: Callable[[Any], Any]) -> Any:
    """The model built by ``factory`` (:func:`paddlefit.models.build.build`) in eval mode."""
    layer = build(factory)
    layer.eval()
    return layer


def _from_code(
    model: str | None, config: Path | None, inputs: list[str] | None, model_args: list[str] | None
) -> ServedModel:
    """Build the model from its code on this CPU and record its eval-mode forward at batch 1 and 2."""
    import paddle

    from paddlefit.job.resolve import JobOptions, resolve_job
    from paddlefit.jobspec.inputs import parse_input_specs
    from paddlefit.models.build import build, failure_message
    from paddlefit.models.zoo import resolve_model, zoo_names
    from paddlefit.plan.measure import job_input_specs
    from paddlefit.probe.job_call import make_inputs
    from paddlefit.probe.recorder import record_trace

    job = resolve_job(JobOptions(model=model, config=config, inputs=inputs, model_args=model_args))
    ref = resolve_model(job.model, job.model_args)
    specs = job_input_specs(ref, parse_input_specs(job.inputs) if job.inputs else None)
    kind = "spec" if config is not None else "zoo" if job.model.strip().lower() in zoo_names() else "import"
    if ref.transformer is not None:  # planned from its shape, as training plans are; built only for the CPU row
        served = _analytic(ref, specs, kind)
        if not too_large_to_run(ref.transformer.params):
            served.builder = lambda: _eval_layer(ref.factory, build)
        return served
    try:
        layer = _eval_layer(ref.factory, build)
        with paddle.no_grad():
            trace = record_trace(layer, make_inputs(specs, 1), make_inputs(specs, 2))
    except ModelError:
        raise
    except Exception as exc:  # the user's model code: any error it raises becomes a clear message
        raise ModelError(failure_message(ref.name, exc, "run its forward", ", ".join(str(s) for s in specs))) from exc
    params = sum(int(p.size) for p in layer.parameters())
    return ServedModel(ref.name, kind, trace, specs, params, layer=layer)
