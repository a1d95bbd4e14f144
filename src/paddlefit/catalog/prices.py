"""Cloud GPU instance prices: the shipped SkyPilot-catalog extract (``catalog/data/gpu_prices.csv``) plus user CSVs.

The shipped file is ``shared/data/gpu-prices-skypilot-snapshot.csv``: 55 instance types of AWS (us-east-1), GCP
(us-central1, host + accelerator rows summed), Azure (eastus) and Lambda (us-east-1), each row naming the
``skypilot-org/skypilot-catalog`` file and commit it was read from (read 2026-11-30; see that file's README).
Files are parsed by header name; a bad value is an error naming file, line and column.

Known catalog defects (listed in the extract's README) are handled, not hidden:

- Azure ``Standard_ND96isr_H100_v5`` says 12 GPUs; the VM has 8: counted as 8, with a note.
- A spot price at or above the on-demand price (Azure's H100 v5 rows, 98.32 = 98.32) is a placeholder: spot is
  treated as unknown, with a note.
- Rows whose price the README flags as doubtful (GCP ``a3-highgpu-8g``, ``a2-ultragpu-*``) carry a note.
"""

from __future__ import annotations

import csv
import importlib.resources
import io
import math
from dataclasses import dataclass
from pathlib import Path

from paddlefit.errors import CatalogError
from paddlefit.fileio import read_text_limited

REQUIRED_COLUMNS = ("cloud", "instance_type", "accelerator", "accelerator_count", "vcpus", "memory_gib",
                    "price_usd_per_hour", "spot_usd_per_hour", "region")  # fmt: skip

#: (cloud, instance_type) -> (GPU count to use, why).
GPU_COUNT_FIXES = {
    ("azure", "Standard_ND96isr_H100_v5"): (8, "catalog says 12 GPUs; the ND96isr H100 v5 VM has 8"),
}
#: (cloud, instance_type) -> caution shown with the row.
PRICE_NOTES = {
    ("gcp", "a3-highgpu-8g"): "GCP's H100 accelerator price differs by region (4.20 to 12.7 USD/GPU-hour); "
                              "this us-central1 total looks far below the list price",
    ("gcp", "a2-ultragpu-1g"): "the catalog's A100-80GB accelerator spot price is above its on-demand price",
    ("gcp", "a2-ultragpu-8g"): "the catalog's A100-80GB accelerator spot price is above its on-demand price",
}  # fmt: skip


@dataclass(frozen=True)
class InstancePrice:
    """One cloud instance type with GPUs.

    Attributes:
        cloud: aws | gcp | azure | lambda | any name a user CSV gives.
        instance_type: the cloud's name, e.g. ``g5.xlarge``.
        accelerator: the catalog's GPU name (SkyPilot spelling, e.g. ``A100-80GB``).
        gpu_count: GPUs in the instance (after :data:`GPU_COUNT_FIXES`).
        vcpus, memory_gib: host size.
        on_demand_usd_per_hour: USD per instance-hour.
        spot_usd_per_hour: USD per instance-hour on spot, None if unknown or a placeholder.
        region: the region the prices are for.
        source: file (and for shipped rows the catalog path@commit) the row came from.
        notes: cautions about the row's values.
    """

    cloud: str
    instance_type: str
    accelerator: str
    gpu_count: int
    vcpus: float
    memory_gib: float
    on_demand_usd_per_hour: float
    spot_usd_per_hour: float | None
    region: str
    source: str
    notes: tuple[str, ...] = ()


def _number(text: str, where: str, column: str, *, integer: bool = False, optional: bool = False) -> float | None:
    t = text.strip()
    if not t:
        if optional:
            return None
        raise CatalogError(f"{where}, column `{column}`: empty; give a number.")
    try:
        value = float(t)
    except ValueError:
        raise CatalogError(f"{where}, column `{column}`: {t!r} is not a number.") from None
    if not math.isfinite(value) or value < 0 or (integer and value != int(value)):
        kind = "a whole number >= 0" if integer else "a finite number >= 0"
        raise CatalogError(f"{where}, column `{column}`: {t!r} is not {kind}.")
    return value


def parse_price_csv(text: str, origin: str) -> list[InstancePrice]:
    """Rows of a price CSV (header names as in :data:`REQUIRED_COLUMNS`, any order, extra columns allowed).

    Raises:
        CatalogError: a missing column (names the column) or a bad value (names file, line and column).
    """
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise CatalogError(f"price catalog `{origin}`, line 1: missing column(s) {', '.join(missing)}; the header "
                           f"needs {','.join(REQUIRED_COLUMNS)}.")  # fmt: skip
    rows = []
    for row in reader:
        where = f"price catalog `{origin}`, line {reader.line_num}"
        for col in ("cloud", "instance_type", "accelerator", "region"):
            if not (row.get(col) or "").strip():
                raise CatalogError(f"{where}, column `{col}`: empty.")
        cloud, itype = row["cloud"].strip().lower(), row["instance_type"].strip()
        count = int(_number(row["accelerator_count"], where, "accelerator_count", integer=True) or 0)
        if count < 1:
            raise CatalogError(f"{where}, column `accelerator_count`: must be >= 1 for a GPU instance.")
        on_demand = _number(row["price_usd_per_hour"], where, "price_usd_per_hour")
        spot = _number(row["spot_usd_per_hour"], where, "spot_usd_per_hour", optional=True)
        notes = []
        if (cloud, itype) in GPU_COUNT_FIXES:
            count, why = GPU_COUNT_FIXES[(cloud, itype)]
            notes.append(why)
        if spot is not None and on_demand is not None and spot >= on_demand:
            notes.append(f"spot {spot:g} >= on-demand {on_demand:g} in the catalog: a placeholder, spot unknown")
            spot = None
        if (cloud, itype) in PRICE_NOTES:
            notes.append(PRICE_NOTES[(cloud, itype)])
        src = f"{row['source_path']}@{row['source_commit'][:12]}" if row.get("source_path") and \
            row.get("source_commit") else origin  # fmt: skip
        rows.append(InstancePrice(
            cloud=cloud, instance_type=itype, accelerator=row["accelerator"].strip(), gpu_count=count,
            vcpus=_number(row["vcpus"], where, "vcpus") or 0.0,
            memory_gib=_number(row["memory_gib"], where, "memory_gib") or 0.0,
            on_demand_usd_per_hour=float(on_demand or 0.0), spot_usd_per_hour=spot, region=row["region"].strip(),
            source=src, notes=tuple(notes)))  # fmt: skip
    return rows


def load_prices(extra_files: list[str] | tuple[str, ...] = ()) -> list[InstancePrice]:
    """The shipped price rows, then each user CSV's rows; a user row replaces a shipped one with the same
    (cloud, instance_type, accelerator, gpu_count, region).

    Raises:
        CatalogError: see :func:`parse_price_csv`; PaddlefitError for an unreadable file.
    """
    shipped = (importlib.resources.files("paddlefit.catalog") / "data" / "gpu_prices.csv").read_text(
        encoding="utf-8")  # fmt: skip
    rows = {(r.cloud, r.instance_type, r.accelerator, r.gpu_count, r.region): r
            for r in parse_price_csv(shipped, "paddlefit/catalog/data/gpu_prices.csv")}  # fmt: skip
    for f in extra_files:
        for r in parse_price_csv(read_text_limited(Path(f), "--prices"), str(f)):
            rows[(r.cloud, r.instance_type, r.accelerator, r.gpu_count, r.region)] = r
    return list(rows.values())
