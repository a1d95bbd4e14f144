"""What ``paddlefit runs`` shows, as plain data and strings: the comparison of two runs, the list's derived columns
and value formatting by unit (milliseconds, MiB/GiB, percent). The rich tables are :mod:`paddlefit.cli.render.runs`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from paddlefit.runs.labels import run_label
from paddlefit.units import size

#: the configuration columns ``paddlefit runs compare`` sets side by side (labels:
#: :data:`paddlefit.runs.labels.RUN_LABELS`)
CONFIG_FIELDS: tuple[str, ...] = (
    "model",
    "params",
    "device_kind",
    "device_name",
    "device_count",
    "precision",
    "micro_batch_size",
    "grad_accum_steps",
    "global_batch",
    "spec_sha256",
    "paddle_version",
    "cuda_version",
    "driver_version",
)

#: the figures it compares (labels and units: :data:`paddlefit.runs.labels.RUN_LABELS`; unit ``s`` seconds,
#: ``B`` bytes, ``1/s`` a rate, ``%`` a fraction shown as percent, ``""`` a plain number)
FIGURE_FIELDS: tuple[str, ...] = (
    "status",
    "steps",
    "predicted_step_s",
    "measured_step_s",
    "measured_step_p95_s",
    "predicted_samples_per_s",
    "measured_samples_per_s",
    "predicted_peak_bytes",
    "measured_peak_bytes",
    "predicted_mfu",
    "measured_mfu",
    "data_wait_fraction",
    "final_loss",
    "eval_loss",
    "eval_accuracy",
)

#: the comparison document's figures whose unit ``""`` is a fraction (shown as percent)
FRACTION_FIGURES = ("mfu", "data_wait_fraction")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def fmt(value: Any, unit: str = "") -> str:
    """``value`` for a table cell: ``-`` for None/NaN; seconds below 1 as ms (``12.0 ms``), above as ``3.20 s``;
    bytes as ``plan`` prints them (:func:`paddlefit.units.size`); ``%`` a fraction as percent (``24.0 %``); ``1/s``
    with thousands separators; other numbers with 4 significant digits (integers exact, with separators); ``text``
    and strings as is."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if not _number(value) or unit == "text":
        return str(value)
    if unit == "s":
        return f"{value * 1e3:,.1f} ms" if abs(value) < 1 else f"{value:,.2f} s"
    if unit == "B":
        return size(value)
    if unit == "%":
        return f"{value * 100:.1f} %"
    if unit == "1/s":
        return f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.4g}"


def readable(value: Any, kind: str) -> str:
    """The second cell of a summary row: bytes (``B``) as ``1.5 MiB`` / ``2.30 GiB``, a fraction (``%``) as
    ``98.7 %``, each by :func:`fmt` (the terminal's rule, so a figure reads the same on the page
    and in ``train``'s summary); empty for anything else or a value that is not a number."""
    if not isinstance(value, int | float) or isinstance(value, bool) or kind not in ("B", "%"):
        return ""
    return fmt(value, kind)


def ratio(numerator: Any, denominator: Any) -> float | None:
    """``numerator / denominator`` when both are finite numbers and the denominator is not 0, else None."""
    if _number(numerator) and _number(denominator) and denominator != 0:
        return float(numerator) / float(denominator)
    return None


def fmt_ratio(value: float | None) -> str:
    """A ratio as ``0.80x`` (``-`` for None)."""
    return "-" if value is None else f"{value:.2f}x"


def step_time_ratio(run: dict[str, Any]) -> float | None:
    """Predicted / measured median step time of ``run`` (below 1: the plan was optimistic), or None."""
    return ratio(run.get("predicted_step_s"), run.get("measured_step_s"))


def comparison_problem(doc: Any) -> str | None:
    """What makes ``doc`` not a predicted-vs-measured document as the trainer writes it (``comparison.json``,
    ``summary.json["comparison"]``, the registry's ``comparison_json``), or None: an object whose ``device`` is an
    object, whose ``status``/``reason``/``calibration`` are text, step counts integers, and ``figures`` a list of
    objects with text ``name``/``label``/``unit`` and number (or null) ``predicted``/``measured``/``ratio``."""
    if not isinstance(doc, dict):
        return "not a JSON object"
    if not isinstance(doc.get("device", {}), dict | None):
        return "`device` is not an object"
    for key in ("status", "reason", "calibration"):
        if not isinstance(doc.get(key), str | None):
            return f"`{key}` is not text"
    for key in ("warmup_steps", "measured_steps"):
        if doc.get(key) is not None and not (isinstance(doc[key], int) and not isinstance(doc[key], bool)):
            return f"`{key}` is not an integer"
    figures = doc.get("figures", [])
    if not isinstance(figures, list | None) or not all(isinstance(f, dict) for f in figures or []):
        return "`figures` is not a list of objects"
    for i, f in enumerate(figures or []):
        if any(not isinstance(f.get(k), str | None) for k in ("name", "label", "unit")):
            return f"`figures.{i}` has a name, label or unit that is not text"
        if any(f.get(k) is not None and not _number(f[k]) for k in ("predicted", "measured", "ratio")):
            return f"`figures.{i}` has a predicted, measured or ratio that is not a finite number"
    return None


def comparison_unit(figure: dict[str, Any]) -> str:
    """The display unit of one comparison-document figure (MFU and data wait, unit ``""``, are percent)."""
    unit = str(figure.get("unit") or "")
    return "%" if not unit and figure.get("name") in FRACTION_FIGURES else unit


def compare_runs(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two runs (as :meth:`paddlefit.runs.Registry.get_run` gives them) side by side: ``{"runs": [id_a, id_b],
    "config": [...], "figures": [...]}``, each entry ``{field, label, unit, a, b, differs}``; figures also carry
    ``ratio`` = b / a (None when either is missing or a is 0). ``differs`` is exact inequality."""

    def entry(field: str, label: str, unit: str) -> dict[str, Any]:
        va, vb = a.get(field), b.get(field)
        return {"field": field, "label": label, "unit": unit, "a": va, "b": vb, "differs": va != vb}

    config = [entry(field, run_label(field)[0], "text") for field in CONFIG_FIELDS]
    figures = []
    for field in FIGURE_FIELDS:
        item = entry(field, *run_label(field))
        item["ratio"] = ratio(item["b"], item["a"]) if item["unit"] != "text" else None
        figures.append(item)
    return {"runs": [a.get("id"), b.get("id")], "config": config, "figures": figures}


def runs_under(rows: list[dict[str, Any]], root: Path) -> list[dict[str, Any]]:
    """The runs (registry rows, order kept) whose ``run_dir`` is ``root`` or under it, both resolved
    (``paddlefit runs --here`` with ``root`` = the current directory); a run without a run directory is left out."""
    top = root.resolve()
    kept = []
    for run in rows:
        if run.get("run_dir"):
            where = Path(str(run["run_dir"])).expanduser().resolve()
            if where == top or top in where.parents:
                kept.append(run)
    return kept
