"""Render a pydantic model tree (the job spec) as Markdown reference tables, one per section.

Every row comes from the model itself: the key's dotted path, its type with the ``Field`` bounds
(``ge``/``gt``/``le``/``lt``), its default and its ``Field(description=...)``; a section's text is its class
docstring. :func:`job_spec_markdown` calls it to write ``docs/job-spec.md``. Pure Python.
"""

from __future__ import annotations

import inspect
import json
import math
import types
import typing
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel


def _is_section(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _type_text(ann: Any) -> str:
    args = typing.get_args(ann)
    origin = typing.get_origin(ann)
    if origin is Literal:
        return " | ".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join("null" if a is type(None) else _type_text(a) for a in args)
    if isinstance(ann, type) and issubclass(ann, Enum):
        return " | ".join(str(e.value) for e in ann)
    if origin is dict:
        return "mapping"
    if origin is list:
        return f"list of {_type_text(args[0])}"
    return "section" if _is_section(ann) else getattr(ann, "__name__", str(ann))


def _num(v: float) -> str:
    """A bound as the docs show it: ``2^31``, ``10^12``, ``1e-06`` -> ``1e-6``, ``0.9``."""
    if isinstance(v, int) and v >= 2**16:
        for base in (2, 10):
            n = round(math.log(v, base))
            if base**n == v:
                return f"{base}^{n}"
    return f"{v:g}".replace("e+0", "e").replace("e-0", "e-").replace("e+", "e")


def _default_text(f: Any) -> str:
    if f.is_required():
        return "required"
    value = f.get_default(call_default_factory=True)
    value = value.value if isinstance(value, Enum) else value
    if isinstance(value, BaseModel):
        return "see below"
    if value is None or isinstance(value, bool):
        return json.dumps(value)  # null, true, false
    if isinstance(value, float):
        return f"{value:g}"
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def field_row(path: str, f: Any, link: bool = False) -> str:
    """One Markdown table row ``| key | type | default | description |`` for pydantic ``FieldInfo`` ``f`` at the
    dotted ``path``; ``link`` makes the key a link to the section heading of the same name."""
    bounds = [
        f"{sym} {_num(getattr(m, attr))}"
        for m in f.metadata
        for attr, sym in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
        if hasattr(m, attr)
    ]
    kind = _type_text(f.annotation) + (f" ({', '.join(bounds)})" if bounds else "")
    key = f"[`{path}`](#{path})" if link else f"`{path}`"
    cells = [kind, f"`{_default_text(f)}`", " ".join((f.description or "").split())]
    return "| " + " | ".join([key, *(c.replace("|", "\\|") for c in cells)]) + " |"


def render_model_markdown(model: type[BaseModel], *, title: str, source: str, generator: str, intro: str = "") -> str:
    """The Markdown reference of ``model``: a generated-file banner naming ``source`` and ``generator``, ``title``,
    the model's docstring, ``intro``, a table of its own keys, then one section per nested model field."""
    head = (
        f"<!-- Generated from {source} by `make docs` ({generator}). Edit the Field descriptions there, "
        "not this file. -->"
    )
    lines = [head, "", f"# {title}", "", " ".join(inspect.cleandoc(model.__doc__ or "").split()), ""]
    if intro:
        lines += [intro, ""]
    sections = [(name, f.annotation) for name, f in model.model_fields.items() if _is_section(f.annotation)]
    for prefix, sub in [("", model), *sections]:
        if prefix:
            lines += [f"## `{prefix}`", "", " ".join(inspect.cleandoc(sub.__doc__ or "").split()), ""]
        else:
            lines += ["## Top-level keys", ""]
        lines += ["| key | type | default | description |", "|---|---|---|---|"]
        for name, f in sub.model_fields.items():
            path = f"{prefix}.{name}" if prefix else name
            lines.append(field_row(path, f, link=not prefix and _is_section(f.annotation)))
        lines.append("")
    return "\n".join(lines)


def job_spec_markdown() -> str:
    """``docs/job-spec.md``: every job-spec key (path, type with bounds, default, description) grouped by section,
    rendered from the models' ``Field(description=...)`` by :func:`paddlefit.jobspec.docs.render_model_markdown`
    (``make docs`` writes it; ``tests/test_docs.py`` fails when the file is stale)."""
    from paddlefit.jobspec.spec import JobSpec

    intro = (
        "Worked specs: [guides/examples.md](guides/examples.md); the commands that read a spec: "
        "[README](../README.md#commands).\n\n"
        "Your own modules (`model`, `data.*`, `loss` as `package.module:function`, and a command's MODEL "
        "argument) are found in the current directory and then the job spec's folder, after the installed "
        "packages and `PYTHONPATH` (so a file of yours named like one of them, `paddle.py` or `datasets.py`, "
        "cannot replace it; paddlefit says so and asks you to rename it); the processes `train` starts "
        "search the same folders. A module found nowhere stops with the folders searched. "
        "A PaddleNLP model class takes a published "
        "size without downloading anything: `model_args: {config: ernie-3.0-base-zh, num_labels: 2}` (the "
        "sizes its config class ships, e.g. `ErnieConfig.pretrained_init_configuration`), other `model_args` "
        "override its fields."
    )
    return render_model_markdown(
        JobSpec,
        title="The job spec (`--config FILE`)",
        source="src/paddlefit/jobspec/spec.py",
        generator="paddlefit.jobspec.docs.job_spec_markdown",
        intro=intro,
    )
