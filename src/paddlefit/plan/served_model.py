"""The model ``plan --inference`` serves: a zoo name, an import path, a job spec, or an exported program.

:func:`resolve_served` returns its eval-mode forward trace at two batch sizes and its per-sample inputs:

- zoo / ``package.module:factory`` / ``--config``: the model is built on this CPU, put in eval mode, and its forward
  recorded under ``paddle.no_grad`` (:func:`~paddlefit.estimate.optrace.record_trace`);
- an exported model (a ``paddle.jit.save`` prefix: a run's export folder, a folder holding ``model.json`` or
  ``model.pdmodel`` with ``model.pdiparams``, or one of those files): its program is read op by op
  (:func:`~paddlefit.estimate.program_trace.trace_program`), without the model's Python code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paddlefit.errors import InputSpecError, ModelError
from paddlefit.estimate.optrace import OpTrace
from paddlefit.inputspec import InputSpec

#: Where a ``paddle.jit.save`` program may sit under a folder the user names (a run's export folder first).
EXPORT_DIRS = ("", "inference", "export")
PROGRAM_SUFFIXES = (".json", ".pdmodel")


@dataclass
class ServedModel:
    """A model to serve.

    Attributes:
        name: what the user named (zoo name, import path, or the program prefix).
        kind: ``zoo``, ``import``, ``spec`` or ``exported``.
        trace: eval-mode forward ops at batch 1 and 2.
        specs: per-sample inputs (batch dimension removed).
        params: parameter elements.
        prefix: the exported program's path prefix (``.../model``), None for a model built from code.
        layer: the eval-mode ``paddle.nn.Layer`` (None for an exported program), for the CPU measurement's export.
        unmapped: program ops the trace could not time, with counts (exported programs only).
    """

    name: str
    kind: str
    trace: OpTrace
    specs: list[InputSpec]
    params: int
    prefix: Path | None = None
    layer: Any = None
    unmapped: dict[str, int] | None = None


def program_prefix(path: str) -> Path | None:
    """The ``paddle.jit.save`` prefix ``path`` names, or None when ``path`` is not an existing file or folder.

    Raises:
        ModelError: ``path`` exists but holds no program with its ``.pdiparams`` (names what was looked for).
    """
    p = Path(path).expanduser()
    if not p.exists():
        return None
    if p.is_file():
        if p.suffix not in PROGRAM_SUFFIXES:
            raise ModelError(f"{path}: not an exported program; give a `paddle.jit.save` model (`model.json` or "
                             "`model.pdmodel` beside `model.pdiparams`) or the folder holding it.")  # fmt: skip
        prefix = p.parent / p.name[: -len(p.suffix)]
    else:
        dirs = [d for d in (p / sub for sub in EXPORT_DIRS) if d.is_dir()]
        found = [d / f.name[: -len(s)] for d in dirs for s in PROGRAM_SUFFIXES for f in sorted(d.glob("*" + s))]
        found = [f for f in found if _params_file(f).exists()]
        if not found:
            raise ModelError(f"{path}: no exported program found (looked for *.json / *.pdmodel with a .pdiparams "
                             f"in {', '.join(str(p / s) if s else str(p) for s in EXPORT_DIRS)}); export a run "
                             "with `paddlefit export RUN_DIR`.")  # fmt: skip
        prefix = found[0]
    if not _params_file(prefix).exists():
        raise ModelError(f"{path}: `{_params_file(prefix)}` is missing; an exported program needs its "
                         "parameters file beside it.")  # fmt: skip
    return prefix


def _params_file(prefix: Path) -> Path:
    """``PREFIX.pdiparams`` (a prefix may itself contain dots)."""
    return prefix.parent / (prefix.name + ".pdiparams")


def resolve_served(model: str | None, config: Path | None, inputs: list[str] | None,
                   model_args: list[str] | None) -> ServedModel:  # fmt: skip
    """The model MODEL / ``--config`` name, traced (see the module docstring).

    Raises:
        ModelError: a bad exported program or a model whose forward fails; InputSpecError: inputs that do not
            parse or a model without default inputs; PaddlefitError: a bad spec (see
            :func:`~paddlefit.job.resolve_job`).
    """
    prefix = program_prefix(model) if model and config is None else None
    if prefix is not None:
        if inputs or model_args:
            raise InputSpecError("`--input`/`--model-arg` do not apply to an exported program: its inputs are "
                                 "read from the program.")  # fmt: skip
        from paddlefit.estimate.program_trace import trace_program

        pt = trace_program(prefix, 1, 2)
        return ServedModel(str(prefix), "exported", pt.trace, list(pt.inputs), pt.params, prefix=prefix,
                           unmapped=dict(pt.unmapped))  # fmt: skip
    return _from_code(model, config, inputs, model_args)


def too_large_to_run(params: int) -> bool:
    """fp32 weights above min(25% of RAM, 8 GiB): built and run on this CPU only below that (the training plan's
    probe limit, :func:`paddlefit.plan.measure.measure_model`)."""
    import psutil

    return 4 * params > min(psutil.virtual_memory().total // 4, 8 * 1024**3)


def _analytic(ref: Any, specs: list[InputSpec], kind: str) -> ServedModel:
    """A zoo transformer too large to run here: its trace written from its shape
    (:func:`~paddlefit.estimate.optrace.transformer_trace`); no layer, so no CPU row.

    Raises:
        InputSpecError: not one input of token ids, or a sequence longer than the model's positions.
    """
    from paddlefit.estimate.optrace import transformer_trace

    cfg = ref.transformer
    if len(specs) != 1 or not specs[0].dtype.startswith("int") or len(specs[0].shape) != 1:
        raise InputSpecError(f"{ref.name} takes one input of token ids, e.g. `--input int64[{cfg.default_seq_len}]`;"
                             f" got {' '.join(str(s) for s in specs)}.")  # fmt: skip
    seq = specs[0].shape[0]
    if seq > cfg.max_position:
        raise InputSpecError(f"{ref.name}: sequence length {seq} exceeds its max_position {cfg.max_position}; use "
                             f"`--input int64[{cfg.max_position}]` or less.")  # fmt: skip
    return ServedModel(ref.name, kind, transformer_trace(cfg, seq), specs, cfg.params)


def _from_code(model: str | None, config: Path | None, inputs: list[str] | None,
               model_args: list[str] | None) -> ServedModel:  # fmt: skip
    """Build the model from its code on this CPU and record its eval-mode forward at batch 1 and 2."""
    import paddle

    from paddlefit.estimate.job_call import make_inputs
    from paddlefit.estimate.optrace import record_trace
    from paddlefit.inputspec import parse_input_specs
    from paddlefit.job import JobOptions, resolve_job
    from paddlefit.models.build import build, failure_message
    from paddlefit.models.zoo import resolve_model, zoo_names
    from paddlefit.plan.measure import job_input_specs

    job = resolve_job(JobOptions(model=model, config=config, inputs=inputs, model_args=model_args))
    ref = resolve_model(job.model, job.model_args)
    specs = job_input_specs(ref, parse_input_specs(job.inputs) if job.inputs else None)
    kind = "spec" if config is not None else "zoo" if job.model.strip().lower() in zoo_names() else "import"
    if ref.transformer is not None and too_large_to_run(ref.transformer.params):
        return _analytic(ref, specs, kind)
    try:
        layer = build(ref.factory)
        layer.eval()
        with paddle.no_grad():
            trace = record_trace(layer, make_inputs(specs, 1), make_inputs(specs, 2))
    except ModelError:
        raise
    except Exception as exc:  # the user's model code: any error it raises becomes a clear message
        raise ModelError(failure_message(ref.name, exc, "forward", ", ".join(str(s) for s in specs))) from exc
    params = sum(int(p.size) for p in layer.parameters())
    return ServedModel(ref.name, kind, trace, specs, params, layer=layer)
