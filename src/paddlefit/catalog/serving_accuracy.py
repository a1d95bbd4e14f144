"""How far ``plan --inference``'s serving rows are from measurements, per engine and precision.

``catalog/data/serving_accuracy.json`` is written by ``python bench/inference_accuracy.py --write``: for each
engine/precision the bench can check (TensorRT FP32 on PaddleClas's V100 table, eager FP32 on NeuSight's whole-model
forward rows), the median |predicted / measured - 1|, the share of rows within 25%, the signed median of
predicted / measured (< 1: predicted too fast), the row count, the data set and the GPU architectures its rows ran
on. Every serving row carries its engine's figure (:func:`serving_error`), as a training row carries its
calibration, and says whether measurements on its GPU's architecture are among them.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

from paddlefit.errors import CatalogError

#: Fields every entry holds (see the module docstring).
ENTRY_FIELDS = ("median_abs_error", "within_25", "signed_median", "rows", "data", "architectures")


@lru_cache(maxsize=1)
def serving_accuracy() -> dict[str, dict[str, Any]]:
    """``engine/precision`` (``tensorrt/fp32``...) -> its measured error (:data:`ENTRY_FIELDS`), with the file's
    ``measured_by`` and ``date`` in each entry.

    Raises:
        CatalogError: the shipped file is not valid JSON or an entry lacks a field.
    """
    text = resources.files("paddlefit.catalog").joinpath("data/serving_accuracy.json").read_text(encoding="utf-8")
    try:
        doc = json.loads(text)
        entries = doc["engines"]
    except (ValueError, KeyError, TypeError) as exc:
        raise CatalogError(
            f"catalog/data/serving_accuracy.json: {exc}; rewrite it with `python bench/inference_accuracy.py --write`."
        ) from None
    out = {}
    for key, e in entries.items():
        missing = [f for f in ENTRY_FIELDS if f not in e]
        if missing:
            raise CatalogError(f"catalog/data/serving_accuracy.json, `{key}`: missing {', '.join(missing)}.")
        out[key] = {**e, "measured_by": doc.get("measured_by"), "date": doc.get("date")}
    return out


def serving_error(engine: str, precision: str, architecture: str | None = None) -> dict[str, Any] | None:
    """The measured error of ``engine`` rows at ``precision`` (see :func:`serving_accuracy`), None when no data set
    here checks that combination; with ``architecture`` (a row's GPU), ``measured_on_this_architecture`` says
    whether the data set holds measurements on it (else the row is the same model, unchecked there)."""
    e = serving_accuracy().get(f"{engine}/{precision}")
    if e is None or architecture is None:
        return e
    return {**e, "measured_on_this_architecture": architecture in e["architectures"]}


def serving_error_text(engine: str, precision: str) -> str:
    """One sentence for the rows' legend: the measured error, or that none is measured and which ones are."""
    e = serving_error(engine, precision)
    if e is None:
        known = "; ".join(f"{k} {v['median_abs_error']:.0%}" for k, v in sorted(serving_accuracy().items()))
        return (
            f"{engine} {precision} rows: not checked against any measurement (measured median |error| of the "
            f"engines that are: {known})"
        )
    side = "too fast" if e["signed_median"] < 1 else "too slow"
    return (
        f"{engine} {precision} rows: median {e['median_abs_error']:.0%} off, {e['within_25']:.0%} within 25%, "
        f"median predicted/measured {e['signed_median']:.2f} ({side}) on {e['data']} ({e['rows']} rows; "
        f"{e['measured_by']}, {e['date']}); measured on {', '.join(e['architectures'])} GPUs only: rows of "
        "other architectures are the same model, unchecked there"
    )
