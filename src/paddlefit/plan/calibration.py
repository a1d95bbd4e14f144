"""Calibration files: measurements of real training steps on one device, used to correct the plan for it.

A file is JSON: ``{"device", "device_name", "driver", "paddle_version", "date", "cuda_context_bytes",
"rows": [{"model", "batch_size", "precision", "peak_bytes", "predicted_peak_bytes", "step_time_s",
"train_flops_per_sample", "peak_flops", "efficiency_class"}]}``. ``device`` is ``cpu`` or a catalog GPU
name. ``paddlefit calibrate`` writes it; ``paddlefit plan --calibration FILE`` (and files shipped in
``paddlefit/calibration/``) read it.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from paddlefit.errors import CatalogError

_ROW_KEYS = ("model", "batch_size", "precision", "peak_bytes", "predicted_peak_bytes", "step_time_s",
             "train_flops_per_sample")  # fmt: skip


@dataclass
class Calibration:
    """What a calibration file tells about one device.

    Attributes:
        device: ``cpu`` or a catalog GPU name.
        memory_ratio: median of measured / predicted peak bytes over the rows (1.0 = plan was right).
        efficiency: measured fraction of peak FLOP/s per efficiency class (``fp32``, ``tf32``, ``half``).
        cuda_context_bytes: device memory used outside Paddle's allocator (CUDA context, kernels), if measured.
        source: the file it came from.
    """

    device: str
    memory_ratio: float
    efficiency: dict[str, float] = field(default_factory=dict)
    cuda_context_bytes: int | None = None
    source: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)


def parse_calibration(doc: dict[str, Any], origin: str) -> Calibration:
    """Validate a calibration document and derive its corrections.

    Raises:
        CatalogError: a key is missing or a value is not a positive number (names file, row and key).
    """
    if not isinstance(doc, dict) or "device" not in doc or not isinstance(doc.get("rows"), list):
        raise CatalogError(f"Calibration `{origin}`: expected a JSON object with `device` and a `rows` list.")
    if not doc["rows"]:
        raise CatalogError(f"Calibration `{origin}`: `rows` is empty; rerun `paddlefit calibrate`.")
    ratios, eff = [], {}
    for i, row in enumerate(doc["rows"]):
        for key in _ROW_KEYS:
            if key not in row:
                raise CatalogError(f"Calibration `{origin}`, row {i}: missing key `{key}`.")
        for key in ("peak_bytes", "predicted_peak_bytes", "step_time_s", "batch_size"):
            if not isinstance(row[key], int | float) or row[key] <= 0:
                raise CatalogError(
                    f"Calibration `{origin}`, row {i}, key `{key}`: expected a positive number, "
                    f"got {row[key]!r}."
                )
        ratios.append(row["peak_bytes"] / row["predicted_peak_bytes"])
        if row.get("peak_flops") and row.get("efficiency_class"):
            achieved = row["train_flops_per_sample"] * row["batch_size"] / row["step_time_s"]
            eff.setdefault(row["efficiency_class"], []).append(achieved / row["peak_flops"])
    ctx = doc.get("cuda_context_bytes")
    return Calibration(
        device=str(doc["device"]),
        memory_ratio=statistics.median(ratios),
        efficiency={k: statistics.median(v) for k, v in eff.items()},
        cuda_context_bytes=int(ctx) if isinstance(ctx, int | float) and ctx > 0 else None,
        source=origin,
        rows=list(doc["rows"]),
    )


def load_calibrations(files: list[str | Path] | tuple = ()) -> dict[str, Calibration]:
    """Shipped calibration files, then user files (a later file for the same device wins).

    Returns:
        device name (lower case) -> Calibration.

    Raises:
        CatalogError: a file is unreadable, not JSON, or malformed.
    """
    out: dict[str, Calibration] = {}
    shipped = resources.files("paddlefit.calibration")
    docs: list[tuple[str, str]] = [
        (f"paddlefit/calibration/{p.name}", p.read_text(encoding="utf-8"))
        for p in sorted(shipped.iterdir(), key=lambda p: p.name)
        if p.name.endswith(".json")
    ]
    for f in files:
        try:
            docs.append((str(f), Path(f).read_text(encoding="utf-8")))
        except OSError as exc:
            raise CatalogError(f"Calibration file `{f}` cannot be read ({exc.strerror}).") from None
    for origin, text in docs:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CatalogError(f"Calibration `{origin}` is not valid JSON: {exc}.") from None
        cal = parse_calibration(doc, origin)
        out[cal.device.lower()] = cal
    return out
