"""Calibration files: measurements of real training steps on one device, used to correct the plan for it.

A file is JSON: ``{"device", "device_name", "driver", "paddle_version", "date", "cuda_context_bytes",
"rows": [{"model", "batch_size", "precision", "peak_bytes", "predicted_peak_bytes", "step_time_s",
"train_flops_per_sample", "peak_flops", "efficiency_class"}], "perf_params": {"values": {...}, "provenance":
{...}}}`` (``perf_params`` optional: the per-operator GPU model's parameters timed on that GPU, see
:mod:`paddlefit.estimate.gpu_model`). ``device`` is ``cpu`` or a catalog GPU name. ``paddlefit calibrate``
writes it; ``paddlefit plan --calibration FILE`` reads it (none ships with paddlefit).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paddlefit.catalog.units import TRAINING_UNITS
from paddlefit.errors import CatalogError, PaddlefitError
from paddlefit.fileio import read_text_limited

EFFICIENCY_CLASSES = TRAINING_UNITS


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON allows")


_ROW_KEYS = (
    "model",
    "batch_size",
    "precision",
    "peak_bytes",
    "predicted_peak_bytes",
    "step_time_s",
    "train_flops_per_sample",
)


@dataclass
class Calibration:
    """What a calibration file tells about one device.

    Attributes:
        device: ``cpu`` or a catalog GPU name.
        memory_ratio: median of measured / predicted peak bytes over the rows (1.0 = plan was right).
        efficiency: measured fraction of peak FLOP/s per efficiency class (``fp32``, ``tf32``, ``half``).
        cuda_context_bytes: device memory used outside Paddle's allocator (CUDA context, kernels), if measured.
        source: the file it came from.
        perf_params: the per-operator model's parameters measured on this device by ``paddlefit calibrate``
            (kernel timings), which replace the published fit for it; None when the file has none.
    """

    device: str
    memory_ratio: float
    efficiency: dict[str, float] = field(default_factory=dict)
    cuda_context_bytes: int | None = None
    source: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)
    perf_params: Any = None


def _positive(value: Any) -> bool:
    from paddlefit.estimate.perf_params import is_finite_number

    return is_finite_number(value) and value > 0


def parse_calibration(doc: dict[str, Any], origin: str) -> Calibration:
    """Validate a calibration document and derive its corrections.

    Raises:
        CatalogError: wrong shape, a missing key, or a value that is not a finite positive number
            (names file, row and key).
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("device"), str) or not doc.get("device"):
        raise CatalogError(f"Calibration `{origin}`: expected a JSON object with a `device` name and a `rows` list.")
    if not isinstance(doc.get("rows"), list) or not doc["rows"]:
        raise CatalogError(f"Calibration `{origin}`: `rows` must be a non-empty list; rerun `paddlefit calibrate`.")
    ratios, eff = [], {}
    for i, row in enumerate(doc["rows"]):
        if not isinstance(row, dict):
            raise CatalogError(f"Calibration `{origin}`, row {i}: expected an object, got {type(row).__name__}.")
        for key in _ROW_KEYS:
            if key not in row:
                raise CatalogError(f"Calibration `{origin}`, row {i}: missing key `{key}`.")
        for key in ("peak_bytes", "predicted_peak_bytes", "step_time_s", "batch_size", "train_flops_per_sample"):
            if not _positive(row[key]):
                raise CatalogError(
                    f"Calibration `{origin}`, row {i}, key `{key}`: expected a finite positive number, "
                    f"got {row[key]!r}."
                )
        ratio = row["peak_bytes"] / row["predicted_peak_bytes"]
        if not 0.01 <= ratio <= 100:
            raise CatalogError(
                f"Calibration `{origin}`, row {i}: measured/predicted peak = {ratio:.3g} is outside [0.01, 100]; "
                "the row is not a real measurement of this plan. Rerun `paddlefit calibrate`."
            )
        ratios.append(ratio)
        pf, ec = row.get("peak_flops"), row.get("efficiency_class")
        if pf is None and ec is None:
            continue
        if not _positive(pf) or ec not in EFFICIENCY_CLASSES:
            raise CatalogError(
                f"Calibration `{origin}`, row {i}: `peak_flops` must be a finite positive number and "
                f"`efficiency_class` one of {', '.join(EFFICIENCY_CLASSES)} (or both null); got {pf!r}, {ec!r}."
            )
        # in floats: JSON integers multiply exactly, and a product over 1.8e308 would not convert to a float
        achieved = float(row["train_flops_per_sample"]) * float(row["batch_size"]) / float(row["step_time_s"])
        if not math.isfinite(achieved):
            raise CatalogError(
                f"Calibration `{origin}`, row {i}: train_flops_per_sample x batch_size / step_time_s = {achieved} "
                "FLOP/s is not a measurement; rerun `paddlefit calibrate`."
            )
        eff.setdefault(ec, []).append(min(achieved / pf, 1.0))
    ctx = doc.get("cuda_context_bytes")
    if ctx is not None and not _positive(ctx):
        raise CatalogError(f"Calibration `{origin}`: `cuda_context_bytes` must be a positive number or null.")
    perf = None
    if doc.get("perf_params") is not None:
        from paddlefit.estimate.perf_params import parse_perf_params, with_shipped_model_keys

        perf = parse_perf_params(
            {**with_shipped_model_keys(doc["perf_params"]), "calibration": "device"}
            if isinstance(doc["perf_params"], dict)
            else doc["perf_params"],
            f"{origin}` key `perf_params",
        )
    return Calibration(
        device=doc["device"],
        memory_ratio=statistics.median(ratios),
        efficiency={k: statistics.median(v) for k, v in eff.items()},
        cuda_context_bytes=int(ctx) if ctx is not None else None,
        source=origin,
        rows=list(doc["rows"]),
        perf_params=perf,
    )


def load_calibrations(files: list[str | Path] | tuple = ()) -> dict[str, Calibration]:
    """The calibration files ``paddlefit calibrate`` wrote (``--calibration``; a later file for the same device
    wins). None ship with paddlefit: no GPU has been measured.

    Returns:
        device name (lower case) -> Calibration.

    Raises:
        CatalogError: a file is unreadable, not JSON, or malformed.
    """
    out: dict[str, Calibration] = {}
    docs: list[tuple[str, str]] = []
    for f in files:
        try:
            docs.append((str(f), read_text_limited(f, "--calibration")))
        except PaddlefitError as exc:
            raise CatalogError(f"Calibration file: {exc} Rerun `paddlefit calibrate`.") from None
    for origin, text in docs:
        try:
            doc = json.loads(text, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError; so are NaN and huge ints
            raise CatalogError(f"Calibration `{origin}` is not valid JSON: {str(exc)[:200]}.") from None
        cal = parse_calibration(doc, origin)
        out[cal.device.lower()] = cal
    return out
