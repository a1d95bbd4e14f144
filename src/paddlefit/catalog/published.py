"""Published figures the planners use as defaults, shipped as data with their sources.

Two tables in ``catalog/data/``, each row with a ``source`` and the ISO date it was ``retrieved``:

- ``published_figures.csv``: one number per ``key`` with its unit: default MFU and inter-node bandwidth by
  architecture (the LLM planner), the default spot interruption rate and checkpoint disk bandwidth (``cost``), the
  oldest CUDA that compiles for each compute capability (``image``), and the ResNet-50 training throughputs behind
  the single-efficiency baseline that ``bench/gpu_accuracy.py`` compares against.
- ``skypilot_accelerators.csv``: the GPU catalog name <-> SkyPilot accelerator name, both ways: ``launch --target
  skypilot`` asks SkyPilot for a catalog GPU by its SkyPilot name, and ``cost`` maps a SkyPilot price row back to a
  catalog GPU (the row marked ``assumed_for_name`` where one SkyPilot name covers several form factors, with the
  note the cost row then carries).

Example:
    >>> figure("checkpoint_disk_mib_s").value
    125.0
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from paddlefit.errors import CatalogError

_DATE = re.compile(r"\d{4}-\d\d-\d\d")


@dataclass(frozen=True)
class PublishedFigure:
    """One published number: ``value`` in ``unit`` (``text``: as the file writes it, for a version such as
    ``12.10``), from ``source`` (a document, read on ``retrieved``)."""

    key: str
    value: float
    unit: str
    source: str
    retrieved: str
    text: str


def _rows(name: str, columns: tuple[str, ...]) -> list[dict[str, str]]:
    """Rows of ``catalog/data/<name>``, checked to have ``columns``, a source and an ISO retrieved date.

    Raises:
        CatalogError: a missing column, an empty source or a malformed date (the file and line named).
    """
    text = resources.files("paddlefit.catalog").joinpath(f"data/{name}").read_text(encoding="utf-8")
    reader = csv.DictReader(text.splitlines())
    if tuple(reader.fieldnames or ()) != columns:
        raise CatalogError(f"catalog/data/{name}: columns {reader.fieldnames}, expected {list(columns)}.")
    rows = list(reader)
    for i, r in enumerate(rows, start=2):
        if not r["source"] or not _DATE.fullmatch(r["retrieved"] or ""):
            raise CatalogError(f"catalog/data/{name} line {i}: a row needs a source and a retrieved date (YYYY-MM-DD).")
    return rows


@lru_cache(maxsize=1)
def published_figures() -> dict[str, PublishedFigure]:
    """Every row of ``published_figures.csv`` by key, read once.

    Raises:
        CatalogError: a malformed row or a key given twice.
    """
    out: dict[str, PublishedFigure] = {}
    for i, r in enumerate(_rows("published_figures.csv", ("key", "value", "unit", "source", "retrieved")), start=2):
        try:
            value = float(r["value"])
        except ValueError:
            where = f"catalog/data/published_figures.csv line {i}"
            raise CatalogError(f"{where}: value {r['value']!r} is no number.") from None
        if r["key"] in out:
            raise CatalogError(f"catalog/data/published_figures.csv line {i}: key {r['key']!r} given twice.")
        out[r["key"]] = PublishedFigure(r["key"], value, r["unit"], r["source"], r["retrieved"], r["value"])
    return out


def figure(key: str) -> PublishedFigure:
    """The figure ``key`` (e.g. ``default_mfu.ampere``).

    Raises:
        KeyError: no such key (a programming error: the keys are the code's).
    """
    return published_figures()[key]


def figures(prefix: str) -> dict[str, PublishedFigure]:
    """The figures whose key starts with ``prefix + "."``, by the rest of the key (``figures("default_mfu")`` ->
    ``{"ampere": ..., "hopper": ...}``)."""
    head = prefix + "."
    return {k[len(head) :]: f for k, f in published_figures().items() if k.startswith(head)}


@dataclass(frozen=True)
class SkyPilotName:
    """A GPU catalog name (``gpu``) and SkyPilot's accelerator name for it; ``assumed_for_name``: this GPU is what
    the SkyPilot name is taken to mean when nothing else tells (``note`` says so when it is a guess)."""

    gpu: str
    skypilot_name: str
    assumed_for_name: bool
    note: str


@lru_cache(maxsize=1)
def skypilot_names() -> tuple[SkyPilotName, ...]:
    """The rows of ``skypilot_accelerators.csv``, read once.

    Raises:
        CatalogError: a malformed row, or a SkyPilot name with no row (or two) marked ``assumed_for_name``.
    """
    cols = ("gpu", "skypilot_name", "assumed_for_name", "note", "source", "retrieved")
    rows = tuple(
        SkyPilotName(r["gpu"], r["skypilot_name"], r["assumed_for_name"] == "1", r["note"])
        for r in _rows("skypilot_accelerators.csv", cols)
    )
    for name in {r.skypilot_name for r in rows}:
        if sum(r.assumed_for_name for r in rows if r.skypilot_name == name) != 1:
            raise CatalogError(f"catalog/data/skypilot_accelerators.csv: {name} needs one row with assumed_for_name 1.")
    return rows


def skypilot_accelerator(gpu: str) -> str | None:
    """SkyPilot's accelerator name for the catalog GPU ``gpu``, or None when the table has no row for it."""
    return next((r.skypilot_name for r in skypilot_names() if r.gpu == gpu), None)


def gpu_for_skypilot_name(name: str) -> tuple[str, str] | None:
    """(catalog GPU, note) a SkyPilot accelerator ``name`` is taken to mean, or None when the table has no row."""
    return next(((r.gpu, r.note) for r in skypilot_names() if r.skypilot_name == name and r.assumed_for_name), None)
