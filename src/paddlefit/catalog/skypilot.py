"""SkyPilot's local catalog cache (``~/.sky/catalogs/<version>/<cloud>/vms.csv``) read into price rows.

``paddlefit cost`` prefers it to the shipped extract when SkyPilot has fetched it (:func:`load_skypilot_cache`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paddlefit.catalog.price_csv import InstancePrice, csv_rows, dict_reader, make_price_row, parse_number
from paddlefit.errors import CatalogError, PaddlefitError
from paddlefit.fileio import read_text_limited
from paddlefit.units import MIB

#: Region read from each cloud's catalog unless the user names one (the regions of the shipped extract).
DEFAULT_REGIONS = {"aws": "us-east-1", "gcp": "us-central1", "azure": "eastus", "lambda": "us-east-1"}
#: GCP host paired with accelerators that have no host of their own (T4, V100, P100, P4), as in the shipped extract.
GCP_N1_HOST = "n1-standard-8"
SKYPILOT_CACHE = Path("~/.sky/catalogs")


def skypilot_files(root: Path) -> dict[str, Path]:
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
    reader = dict_reader(text, f"SkyPilot catalog `{origin}`")
    need = ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "Price", "SpotPrice", "Region")
    missing = [c for c in need if c not in (reader.fieldnames or [])]
    if missing:
        raise CatalogError(
            f"SkyPilot catalog `{origin}`, line 1: missing column(s) {', '.join(missing)}; is this a SkyPilot vms.csv?"
        )
    hosts: dict[str, dict[str, Any]] = {}
    accels: dict[tuple[str, int], dict[str, Any]] = {}
    for row in csv_rows(reader, f"SkyPilot catalog `{origin}`"):
        if (row.get("Region") or "").strip() != region:
            continue
        where = f"SkyPilot catalog `{origin}`, line {reader.line_num}"
        itype, acc = (row.get("InstanceType") or "").strip(), (row.get("AcceleratorName") or "").strip()
        count_f = parse_number(row["AcceleratorCount"], where, "AcceleratorCount", optional=True)
        price = parse_number(row["Price"], where, "Price", optional=True)
        spot = parse_number(row["SpotPrice"], where, "SpotPrice", optional=True)
        count = int(count_f) if count_f is not None and count_f >= 1 and count_f == int(count_f) else 0
        if cloud == "gcp" and not itype:
            if acc and count:
                slot = accels.setdefault((acc, count), {"price": None, "spot": None})
                keep_zone_price(slot, price, spot)
            continue
        if cloud != "gcp" and (not acc or not count):
            continue
        vcpus = parse_number(row["vCPUs"], where, "vCPUs", optional=True) or 0.0
        mem = parse_number(row["MemoryGiB"], where, "MemoryGiB", optional=True) or 0.0
        slot = hosts.setdefault(
            itype, {"acc": acc, "count": count, "price": None, "spot": None, "vcpus": vcpus, "mem": mem}
        )
        keep_zone_price(slot, price, spot)
    out: list[InstancePrice] = []

    def add(itype: str, h: dict[str, Any], acc: str, count: int, price: float | None, spot: float | None) -> None:
        if price is not None and price > 0:
            out.append(make_price_row(cloud, itype, acc, count, h["vcpus"], h["mem"], price, spot, region, origin))

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


def keep_zone_price(slot: dict[str, Any], price: float | None, spot: float | None) -> None:
    """Record a zone row: the first on-demand price, the lowest spot price."""
    if slot["price"] is None and price is not None:
        slot["price"] = price
    if spot is not None and spot > 0 and (slot["spot"] is None or spot < slot["spot"]):
        slot["spot"] = spot


def load_skypilot_cache(
    root: Path | str = SKYPILOT_CACHE, region: str | None = None, clouds: list[str] | tuple[str, ...] = ()
) -> dict[str, list[InstancePrice]]:
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
    for cloud, f in skypilot_files(Path(root).expanduser()).items():
        if want and cloud not in want:
            continue
        try:
            text = read_text_limited(f, "SkyPilot catalog", limit=256 * MIB)
            rows = parse_skypilot_vms(text, cloud, str(f), region)
        except PaddlefitError as exc:
            raise CatalogError(
                f"{exc} This file is SkyPilot's cache: refresh it (`sky show-gpus`), delete it, or "
                "use `--shipped-prices`."
            ) from None
        if rows:
            found[cloud] = rows
    return found
