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
from functools import lru_cache
from pathlib import Path
from typing import Any

from paddlefit.catalog.gpus import GPU, get_gpu
from paddlefit.errors import CatalogError, PaddlefitError, UnknownNameError
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
        gpu: the GPU catalog name when the price file names it (optional ``gpu`` column), else "" (resolved
            by :func:`gpu_for_instance`).
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
    gpu: str = ""


def _number(text: str | None, where: str, column: str, *, integer: bool = False, optional: bool = False,
            maximum: float = 1e9) -> float | None:  # fmt: skip
    t = (text or "").strip()
    if not t:
        if optional:
            return None
        raise CatalogError(f"{where}, column `{column}`: empty; give a number.")
    try:
        value = float(t)
    except ValueError:
        raise CatalogError(f"{where}, column `{column}`: {t!r} is not a number.") from None
    if not math.isfinite(value) or value < 0 or value > maximum or (integer and value != int(value)):
        kind = "a whole number" if integer else "a finite number"
        raise CatalogError(f"{where}, column `{column}`: {t!r} is not {kind} between 0 and {maximum:g}.")
    return value


def _make_row(cloud: str, itype: str, accelerator: str, count: int, vcpus: float, memory_gib: float,
              on_demand: float, spot: float | None, region: str, source: str, gpu: str = "") -> InstancePrice:
    """One row with the known catalog defects handled (GPU count fixes, spot >= on-demand, doubtful prices)."""
    notes = []
    if (cloud, itype) in GPU_COUNT_FIXES:
        count, why = GPU_COUNT_FIXES[(cloud, itype)]
        notes.append(why)
    if spot is not None and spot >= on_demand:
        notes.append(f"spot {spot:g} >= on-demand {on_demand:g} in the catalog: a placeholder, spot unknown")
        spot = None
    if (cloud, itype) in PRICE_NOTES:
        notes.append(PRICE_NOTES[(cloud, itype)])
    return InstancePrice(cloud=cloud, instance_type=itype, accelerator=accelerator, gpu_count=count, vcpus=vcpus,
                         memory_gib=memory_gib, on_demand_usd_per_hour=on_demand, spot_usd_per_hour=spot,
                         region=region, source=source, notes=tuple(notes), gpu=gpu)  # fmt: skip


def _rows(reader: csv.DictReader, what: str) -> Any:
    """The reader's rows; a malformed line (a field over the csv module's limit, a stray quote) is a CatalogError."""
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise CatalogError(f"{what}, line {reader.line_num + 1}: {exc}; fix or remove that line.") from None
        yield row


def parse_price_csv(text: str, origin: str) -> list[InstancePrice]:
    """Rows of a price CSV (header names as in :data:`REQUIRED_COLUMNS`, any order, extra columns allowed).

    An optional ``gpu`` column names the GPU catalog entry (``paddlefit gpus``) the instance has, for accelerators
    whose name alone is ambiguous (``A100`` = 40 GB SXM4 or PCIe).

    Raises:
        CatalogError: a missing column (names the column) or a bad value (names file, line and column).
    """
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames:  # "cloud, instance_type, ..." (spaces after the commas) reads as intended
        reader.fieldnames = [f.strip() for f in reader.fieldnames]
    missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise CatalogError(f"price catalog `{origin}`, line 1: missing column(s) {', '.join(missing)}; the header "
                           f"needs {','.join(REQUIRED_COLUMNS)}.")  # fmt: skip
    rows = []
    for row in _rows(reader, f"price catalog `{origin}`"):
        where = f"price catalog `{origin}`, line {reader.line_num}"
        for col in ("cloud", "instance_type", "accelerator", "region"):
            if not (row.get(col) or "").strip():
                raise CatalogError(f"{where}, column `{col}`: empty.")
        cloud, itype = (row.get("cloud") or "").strip().lower(), (row.get("instance_type") or "").strip()
        count = int(_number(row["accelerator_count"], where, "accelerator_count", integer=True, maximum=1024) or 0)
        if count < 1:
            raise CatalogError(f"{where}, column `accelerator_count`: must be >= 1 for a GPU instance.")
        on_demand = _number(row["price_usd_per_hour"], where, "price_usd_per_hour")
        spot = _number(row["spot_usd_per_hour"], where, "spot_usd_per_hour", optional=True)
        src = f"{row['source_path']}@{str(row['source_commit'])[:12]}" if row.get("source_path") and \
            row.get("source_commit") else origin  # fmt: skip
        rows.append(_make_row(
            cloud, itype, (row.get("accelerator") or "").strip(), count, _number(row["vcpus"], where, "vcpus") or 0.0,
            _number(row["memory_gib"], where, "memory_gib") or 0.0, float(on_demand or 0.0), spot,
            (row.get("region") or "").strip(), src, gpu=(row.get("gpu") or "").strip()))  # fmt: skip
    return rows


def load_prices(extra_files: list[str] | tuple[str, ...] = ()) -> list[InstancePrice]:
    """The shipped price rows, then each user CSV's rows; a user row replaces a shipped one with the same
    (cloud, instance_type, accelerator, gpu_count, region).

    Raises:
        CatalogError: see :func:`parse_price_csv`; PaddlefitError for an unreadable file.
    """
    shipped = (importlib.resources.files("paddlefit.catalog") / "data" / "gpu_prices.csv").read_text(
        encoding="utf-8")  # fmt: skip
    return _merge(parse_price_csv(shipped, "paddlefit/catalog/data/gpu_prices.csv"), extra_files)


def _merge(rows: list[InstancePrice], extra_files: list[str] | tuple[str, ...]) -> list[InstancePrice]:
    """``rows`` plus each user CSV's rows; a user row replaces one with the same (cloud, instance_type, accelerator,
    gpu_count, region)."""
    by_key = {(r.cloud, r.instance_type, r.accelerator, r.gpu_count, r.region): r for r in rows}
    for f in extra_files:
        for r in parse_price_csv(read_text_limited(Path(f), "--prices"), str(f)):
            by_key[(r.cloud, r.instance_type, r.accelerator, r.gpu_count, r.region)] = r
    return list(by_key.values())


# ---- SkyPilot's local catalog cache ---------------------------------------------------------------------------

#: Region read from each cloud's catalog unless the user names one (the regions of the shipped extract).
DEFAULT_REGIONS = {"aws": "us-east-1", "gcp": "us-central1", "azure": "eastus", "lambda": "us-east-1"}
#: GCP host paired with accelerators that have no host of their own (T4, V100, P100, P4), as in the shipped extract.
GCP_N1_HOST = "n1-standard-8"
SKYPILOT_CACHE = Path("~/.sky/catalogs")


def _skypilot_files(root: Path) -> dict[str, Path]:
    """cloud -> ``vms.csv`` of the newest catalog version (``v8`` > ``v7`` ...) under ``root`` that has one."""
    found: dict[str, tuple[int, Path]] = {}
    if not root.is_dir():
        return {}
    for vdir in root.iterdir():
        if not (vdir.is_dir() and vdir.name[:1] == "v" and vdir.name[1:].isdigit()):
            continue
        for cloud in DEFAULT_REGIONS:
            f = vdir / cloud / "vms.csv"
            if f.is_file() and int(vdir.name[1:]) > found.get(cloud, (-1, f))[0]:
                found[cloud] = (int(vdir.name[1:]), f)
    return {c: f for c, (_, f) in found.items()}


def parse_skypilot_vms(text: str, cloud: str, origin: str, region: str | None = None) -> list[InstancePrice]:
    """GPU instance rows of one SkyPilot ``vms.csv`` for one region, parsed by header name.

    - AWS/Azure/Lambda: one row per (instance type, zone); on-demand = the type's price, spot = the lowest zone
      spot price (how SkyPilot picks a region's price).
    - GCP: a GPU instance is a host row plus an accelerator row (empty ``InstanceType``) with the same
      ``AcceleratorName``/``AcceleratorCount``; accelerators without a host of their own (T4, V100) are paired
      with :data:`GCP_N1_HOST`. Prices of both rows are summed, spot only when both have one.
    - Skipped: rows without a GPU, with a fractional GPU count (AWS ``g6f``: 0.125 GPU) or without a price.

    Raises:
        CatalogError: a missing column or a value that is not a number (names file, line and column).
    """
    region = region or DEFAULT_REGIONS.get(cloud, "")
    reader = csv.DictReader(io.StringIO(text))
    need = ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "Price", "SpotPrice",
            "Region")  # fmt: skip
    missing = [c for c in need if c not in (reader.fieldnames or [])]
    if missing:
        raise CatalogError(f"SkyPilot catalog `{origin}`, line 1: missing column(s) {', '.join(missing)}; is this a "
                           "SkyPilot vms.csv?")  # fmt: skip
    hosts: dict[str, dict[str, Any]] = {}
    accels: dict[tuple[str, int], dict[str, Any]] = {}
    for row in _rows(reader, f"SkyPilot catalog `{origin}`"):
        if (row.get("Region") or "").strip() != region:
            continue
        where = f"SkyPilot catalog `{origin}`, line {reader.line_num}"
        itype, acc = (row.get("InstanceType") or "").strip(), (row.get("AcceleratorName") or "").strip()
        count_f = _number(row["AcceleratorCount"], where, "AcceleratorCount", optional=True)
        price = _number(row["Price"], where, "Price", optional=True)
        spot = _number(row["SpotPrice"], where, "SpotPrice", optional=True)
        count = int(count_f) if count_f is not None and count_f >= 1 and count_f == int(count_f) else 0
        if cloud == "gcp" and not itype:
            if acc and count:
                slot = accels.setdefault((acc, count), {"price": None, "spot": None})
                _keep(slot, price, spot)
            continue
        if cloud != "gcp" and (not acc or not count):
            continue
        slot = hosts.setdefault(itype, {"acc": acc, "count": count, "price": None, "spot": None,
                                        "vcpus": _number(row["vCPUs"], where, "vCPUs", optional=True) or 0.0,
                                        "mem": _number(row["MemoryGiB"], where, "MemoryGiB", optional=True) or 0.0})
        _keep(slot, price, spot)
    out: list[InstancePrice] = []

    def add(itype: str, h: dict[str, Any], acc: str, count: int, price: float | None, spot: float | None) -> None:
        if price is not None and price > 0:
            out.append(_make_row(cloud, itype, acc, count, h["vcpus"], h["mem"], price, spot, region, origin))

    if cloud != "gcp":
        for itype, h in hosts.items():
            add(itype, h, h["acc"], h["count"], h["price"], h["spot"])
        return out
    paired: set[tuple[str, int]] = set()
    for itype, h in hosts.items():
        if h["acc"] and h["count"]:
            a = accels.get((h["acc"], h["count"]))
            paired.add((h["acc"], h["count"]))
            if a is not None and h["price"] is not None and a["price"] is not None:
                spot = h["spot"] + a["spot"] if h["spot"] is not None and a["spot"] is not None else None
                add(itype, h, h["acc"], h["count"], h["price"] + a["price"], spot)
    n1 = hosts.get(GCP_N1_HOST)
    if n1 is not None and n1["price"] is not None:
        for (acc, count), a in sorted(accels.items()):
            if (acc, count) not in paired and a["price"] is not None:
                spot = n1["spot"] + a["spot"] if n1["spot"] is not None and a["spot"] is not None else None
                add(GCP_N1_HOST, n1, acc, count, n1["price"] + a["price"], spot)
    return out


def _keep(slot: dict[str, Any], price: float | None, spot: float | None) -> None:
    """Record a zone row: the first on-demand price, the lowest spot price."""
    if slot["price"] is None and price is not None:
        slot["price"] = price
    if spot is not None and spot > 0 and (slot["spot"] is None or spot < slot["spot"]):
        slot["spot"] = spot


def load_skypilot_cache(root: Path | str = SKYPILOT_CACHE, region: str | None = None,
                        clouds: list[str] | tuple[str, ...] = ()) -> dict[str, list[InstancePrice]]:  # fmt: skip
    """cloud -> GPU instance rows from SkyPilot's cached catalogs (``~/.sky/catalogs/<version>/<cloud>/vms.csv``,
    the newest version per cloud), or an empty dict when SkyPilot has cached none.

    Args:
        root: the cache directory.
        region: one region for every cloud; None = :data:`DEFAULT_REGIONS`.
        clouds: read only these clouds' files (empty = all).

    Raises:
        CatalogError: see :func:`parse_skypilot_vms`; the message says how to bypass the cache.
    """
    found = {}
    want = {c.strip().lower() for c in clouds}
    for cloud, f in _skypilot_files(Path(root).expanduser()).items():
        if want and cloud not in want:
            continue
        try:
            text = read_text_limited(f, "SkyPilot catalog", limit=256 * 1024**2)
            rows = parse_skypilot_vms(text, cloud, str(f), region)
        except PaddlefitError as exc:
            raise CatalogError(f"{exc} This file is SkyPilot's cache: refresh it (`sky show-gpus`), delete it, or "
                               "use `--shipped-prices`.") from None  # fmt: skip
        if rows:
            found[cloud] = rows
    return found


# ---- instance type -> GPU catalog entry ------------------------------------------------------------------------

#: SkyPilot accelerator name -> GPU catalog name, for instance types not in ``instance_gpus.csv``. Where the name
#: does not tell the form factor, the PCIe variant (slower interconnect, lower TDP) is assumed and said so.
ACCELERATOR_DEFAULTS = {
    "T4": ("T4", ""), "A10G": ("A10G", ""), "A10": ("A10", ""), "L4": ("L4", ""), "L40S": ("L40S", ""),
    "A40": ("A40", ""), "H200": ("H200", ""), "B200": ("B200", ""),
    "V100": ("V100-PCIe-16GB", "V100 form factor unknown: 16 GB PCIe assumed"),
    "V100-32GB": ("V100-PCIe-32GB", "V100 form factor unknown: PCIe assumed"),
    "A100": ("A100-PCIe-40GB", "A100 form factor unknown: PCIe assumed"),
    "A100-80GB": ("A100-PCIe-80GB", "A100-80GB form factor unknown: PCIe assumed"),
    "H100": ("H100-PCIe", "H100 form factor unknown: PCIe assumed"),
    "RTX4090": ("RTX-4090", ""), "RTX3090": ("RTX-3090", ""),
}  # fmt: skip


@dataclass(frozen=True)
class InstanceGpu:
    """The GPU catalog entry an instance type has: ``gpu`` (a :class:`~paddlefit.catalog.gpus.GPU` name) and how
    that was decided (``basis``: cloud docs, instance name, an assumption, or the price file's ``gpu`` column)."""

    gpu: str
    basis: str


@lru_cache(maxsize=1)
def _instance_table() -> dict[tuple[str, str], tuple[str, str]]:
    text = (importlib.resources.files("paddlefit.catalog") / "data" / "instance_gpus.csv").read_text(encoding="utf-8")
    return {(r["cloud"], r["instance_type"]): (r["gpu"], f"{r['basis']} ({r['source']})")
            for r in csv.DictReader(io.StringIO(text))}  # fmt: skip


def gpu_for_instance(row: InstancePrice) -> InstanceGpu:
    """Which GPU catalog entry ``row``'s instance has: the price file's ``gpu`` column, else the shipped
    ``catalog/data/instance_gpus.csv`` (cloud documentation per instance type), else :data:`ACCELERATOR_DEFAULTS`,
    else the accelerator name itself (the caller resolves it against the GPU catalog, where it may be unknown)."""
    if row.gpu:
        return InstanceGpu(row.gpu, "price file `gpu` column")
    table = _instance_table()
    gpu, basis = table.get((row.cloud, row.instance_type), ("", ""))
    if gpu:
        return InstanceGpu(gpu, basis)
    if row.accelerator in ACCELERATOR_DEFAULTS:
        name, note = ACCELERATOR_DEFAULTS[row.accelerator]
        return InstanceGpu(name, note or f"accelerator name {row.accelerator}")
    return InstanceGpu(row.accelerator, f"accelerator name {row.accelerator}")


SHIPPED_SOURCE = ("shipped SkyPilot catalog extract (skypilot-org/skypilot-catalog, read 2026-11-30; "
                  "paddlefit/catalog/data/gpu_prices.csv)")  # fmt: skip


def select_prices(extra_files: list[str] | tuple[str, ...] = (), *, skypilot_root: Path | str | None = SKYPILOT_CACHE,
                  region: str | None = None,
                  clouds: list[str] | tuple[str, ...] = ()) -> tuple[list[InstancePrice], str]:  # fmt: skip
    """The price rows ``paddlefit cost`` uses and a sentence saying where they came from.

    Clouds found in SkyPilot's cache (``skypilot_root``; None = do not look) replace the shipped rows of that cloud;
    user CSVs (``extra_files``) add or replace rows; ``region`` keeps one region (a cloud whose rows are all in
    other regions drops out); ``clouds`` keeps those clouds.

    Raises:
        CatalogError: a malformed file, or the filters leave no rows (the message lists what exists).
    """
    rows = load_prices(())
    source = SHIPPED_SOURCE
    cache = load_skypilot_cache(skypilot_root, region, clouds) if skypilot_root is not None else {}
    if cache:
        rows = [r for r in rows if r.cloud not in cache] + [r for c in sorted(cache) for r in cache[c]]
        source = (f"SkyPilot's cached catalog ({Path(skypilot_root).expanduser()}) for {', '.join(sorted(cache))}"  # type: ignore[arg-type]
                  + ("; shipped extract for the rest" if {r.cloud for r in rows} - set(cache) else ""))
    rows = _merge(rows, extra_files)
    if extra_files:
        source += "; user prices " + ", ".join(str(f) for f in extra_files)
    have_clouds = sorted({r.cloud for r in rows})
    if clouds:
        want = {c.strip().lower() for c in clouds}
        unknown = want - set(have_clouds)
        if unknown:
            raise CatalogError(f"`--cloud {', '.join(sorted(unknown))}`: no prices for that cloud; known: "
                               f"{', '.join(have_clouds)} (add your own with `--prices FILE`).")  # fmt: skip
        rows = [r for r in rows if r.cloud in want]
    if region:
        kept = [r for r in rows if r.region == region]
        if not kept:
            regions = sorted({f"{r.cloud}:{r.region}" for r in rows})
            raise CatalogError(f"`--region {region}`: no prices in that region; the rows have {', '.join(regions)}. "
                               "Other regions need SkyPilot's catalog cache (`sky show-gpus` fills it) or "
                               "`--prices FILE`.")  # fmt: skip
        rows = kept
    return rows, source


def catalog_gpu(row: InstancePrice, gpus: list[GPU]) -> GPU | None:
    """The :class:`~paddlefit.catalog.gpus.GPU` of ``row``'s instance (:func:`gpu_for_instance` resolved against
    ``gpus`` by name or alias), or None when the GPU catalog has no such GPU (e.g. Lambda's A6000)."""
    try:
        return get_gpu(gpu_for_instance(row).gpu, gpus)
    except UnknownNameError:
        return None
