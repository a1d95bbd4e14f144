"""Rows of a price CSV: :class:`InstancePrice` and the parser, with the known catalog defects handled.

Files are parsed by header name; a bad value is an error naming file, line and column. Defects of the shipped
extract (``catalog/data/SOURCES-prices.md``): :data:`GPU_COUNT_FIXES`, :data:`PRICE_NOTES`, and a spot price at or
above the on-demand price (a placeholder, treated as unknown).
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from typing import Any

from paddlefit.catalog.currency import CODE
from paddlefit.errors import CatalogError

REQUIRED_COLUMNS = (
    "cloud",
    "instance_type",
    "accelerator",
    "accelerator_count",
    "vcpus",
    "memory_gib",
    "price_usd_per_hour",
    "spot_usd_per_hour",
    "region",
)
#: A file in another currency has a ``currency`` column (ISO 4217, per row) and names its prices without ``usd``.
CURRENCY_PRICE_COLUMNS = ("price_per_hour", "spot_per_hour")
#: The price file template shipped for the cards rented in China (no public, dated price page found to copy).
PRICE_TEMPLATE = "prices-template-cny.csv"

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
}


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
            by :func:`~paddlefit.catalog.prices.gpu_for_instance`).
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


def parse_number(
    text: str | None, where: str, column: str, *, integer: bool = False, optional: bool = False, maximum: float = 1e9
) -> float | None:
    """``text`` as a number >= 0 and <= ``maximum`` (whole with ``integer``); None when empty and ``optional``.

    Raises:
        CatalogError: empty (not ``optional``), not a number, or out of range; names ``where`` and ``column``.
    """
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


def make_price_row(
    cloud: str,
    itype: str,
    accelerator: str,
    count: int,
    vcpus: float,
    memory_gib: float,
    on_demand: float,
    spot: float | None,
    region: str,
    source: str,
    gpu: str = "",
    extra_note: str | None = None,
) -> InstancePrice:
    """One row with the known catalog defects handled (GPU count fixes, spot >= on-demand, doubtful prices);
    ``extra_note`` is added to its notes (a currency conversion)."""
    notes = [extra_note] if extra_note else []
    if (cloud, itype) in GPU_COUNT_FIXES:
        count, why = GPU_COUNT_FIXES[(cloud, itype)]
        notes.append(why)
    if spot is not None and spot >= on_demand:
        notes.append(f"spot {spot:g} >= on-demand {on_demand:g} USD/h in the price table: a placeholder, spot unknown")
        spot = None
    if (cloud, itype) in PRICE_NOTES:
        notes.append(PRICE_NOTES[(cloud, itype)])
    return InstancePrice(
        cloud=cloud,
        instance_type=itype,
        accelerator=accelerator,
        gpu_count=count,
        vcpus=vcpus,
        memory_gib=memory_gib,
        on_demand_usd_per_hour=on_demand,
        spot_usd_per_hour=spot,
        region=region,
        source=source,
        notes=tuple(notes),
        gpu=gpu,
    )


def dict_reader(text: str, what: str) -> csv.DictReader:
    """A DictReader over ``text`` with its header read: lines end at ``\n``, ``\r\n`` or a lone ``\r`` (the
    csv module's own rule, as for a file opened with ``newline=""``; quoted fields may hold line breaks).

    Raises:
        CatalogError: the header line is malformed (a field over the csv module's limit, a NUL byte).
    """
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        reader.fieldnames  # noqa: B018 (reads the header line)
    except csv.Error as exc:
        raise CatalogError(f"{what}, line 1: {exc}; fix the header line.") from None
    return reader


def csv_rows(reader: csv.DictReader, what: str) -> Any:
    """The reader's rows; a malformed line (a field over the csv module's limit, a stray quote) is a CatalogError."""
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise CatalogError(f"{what}, line {reader.line_num + 1}: {exc}; fix or remove that line.") from None
        yield row


def parse_price_csv(text: str, origin: str, rates: dict[str, float] | None = None) -> list[InstancePrice]:
    """Rows of a price CSV (header names as in :data:`REQUIRED_COLUMNS`, any order, extra columns allowed; lines
    starting with ``#`` are comments).

    An optional ``gpu`` column names the GPU catalog entry (``paddlefit gpus``) the instance has, for accelerators
    whose name alone is ambiguous (``A100`` = 40 GB SXM4 or PCIe). A file with a ``currency`` column gives its prices
    as ``price_per_hour`` / ``spot_per_hour`` in each row's currency; they are turned into USD at ``rates``
    (currency -> units per USD, ``--fx-rate``; :mod:`paddlefit.catalog.currency`), and the row's note says so.

    Raises:
        CatalogError: a missing column (names the column), a bad value (names file, line and column), a currency
            without a rate (names ``--fx-rate``), or two rows for one (cloud, instance_type, accelerator,
            accelerator_count, region) (names both lines).
    """
    text, offset = uncommented(text)
    reader = dict_reader(text, f"price catalog `{origin}`")
    if reader.fieldnames:  # "cloud, instance_type, ..." (spaces after the commas) reads as intended
        reader.fieldnames = [f.strip() for f in reader.fieldnames]
    price_col, spot_col, priced_in = _price_columns(reader.fieldnames or [], f"price catalog `{origin}`", offset)
    rows = []
    seen: dict[tuple[str, str, str, int, str], int] = {}  # one row per instance and region: the line it is on
    for row in csv_rows(reader, f"price catalog `{origin}`"):
        where = f"price catalog `{origin}`, line {reader.line_num + offset}"
        if None in row:  # csv.DictReader keeps fields beyond the header under the key None
            raise CatalogError(
                f"{where}: {len(row[None])} field(s) more than the header's {len(row) - 1}; remove them "
                "or name them in the header."
            )
        for col in ("cloud", "instance_type", "accelerator", "region"):
            if not (row.get(col) or "").strip():
                raise CatalogError(f"{where}, column `{col}`: empty.")
        cloud, itype = (row.get("cloud") or "").strip().lower(), (row.get("instance_type") or "").strip()
        count = int(parse_number(row["accelerator_count"], where, "accelerator_count", integer=True, maximum=1024) or 0)
        if count < 1:
            raise CatalogError(f"{where}, column `accelerator_count`: must be >= 1 for a GPU instance.")
        accelerator, region = (row.get("accelerator") or "").strip(), (row.get("region") or "").strip()
        key = (cloud, itype, accelerator, count, region)
        if key in seen:
            raise CatalogError(
                f"{where}: {cloud} {itype} in region {region} is also on line {seen[key]}; one price "
                "per instance and region (remove one of the two rows)."
            )
        seen[key] = reader.line_num + offset
        on_demand = parse_number(row[price_col], where, price_col)
        spot = parse_number(row[spot_col], where, spot_col, optional=True)
        per_usd, fx_note = _row_rate(row, where, rates) if priced_in else (1.0, None)
        on_demand, spot = (on_demand or 0.0) / per_usd, None if spot is None else spot / per_usd
        src = (
            f"{row['source_path']}@{str(row['source_commit'])[:12]}"
            if row.get("source_path") and row.get("source_commit")
            else origin
        )
        rows.append(
            make_price_row(
                cloud,
                itype,
                accelerator,
                count,
                parse_number(row["vcpus"], where, "vcpus") or 0.0,
                parse_number(row["memory_gib"], where, "memory_gib") or 0.0,
                float(on_demand),
                spot,
                region,
                src,
                gpu=(row.get("gpu") or "").strip(),
                extra_note=fx_note,
            )
        )
    return rows


#: Line breaks as the csv module reads them (``\r\n``, ``\n`` or a lone ``\r``).
LINE_BREAK = re.compile(r"\r\n|\r|\n")


def uncommented(text: str) -> tuple[str, int]:
    """``text`` without comment lines (starting with ``#``, after blanks), and the number of lines cut before the
    header: comments and blank lines before it go, later comments become blank lines (which the csv reader skips),
    so ``reader.line_num + offset`` is the file's own line number."""
    lines = LINE_BREAK.split(text)
    offset = next((i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")), len(lines))
    return "\n".join("" if line.lstrip().startswith("#") else line for line in lines[offset:]), offset


def _price_columns(header: list[str], what: str, offset: int) -> tuple[str, str, bool]:
    """(on-demand column, spot column, priced in a currency column) of a price file's header.

    Raises:
        CatalogError: no header at all, or a missing column (names it and the layout).
    """
    if not header:
        raise CatalogError(
            f"{what}: no header line (an empty file, or every line is a comment); the header is "
            f"{','.join(REQUIRED_COLUMNS)}."
        )
    priced_in = "currency" in header
    price_col, spot_col = CURRENCY_PRICE_COLUMNS if priced_in else ("price_usd_per_hour", "spot_usd_per_hour")
    needed = [c for c in REQUIRED_COLUMNS if c not in ("price_usd_per_hour", "spot_usd_per_hour")]
    missing = [c for c in (*needed, price_col, spot_col) if c not in header]
    if missing:
        layout = ",".join((*needed, *CURRENCY_PRICE_COLUMNS, "currency")) if priced_in else ",".join(REQUIRED_COLUMNS)
        raise CatalogError(
            f"{what}, line {offset + 1}: missing column(s) {', '.join(missing)}; the header needs {layout}."
        )
    return price_col, spot_col, priced_in


def _row_rate(row: dict[str, Any], where: str, rates: dict[str, float] | None) -> tuple[float, str | None]:
    """(units of the row's currency per USD, the row's note) for a file with a ``currency`` column.

    Raises:
        CatalogError: not a three-letter code, or no ``--fx-rate`` for it.
    """
    code = (row.get("currency") or "").strip().upper()
    if code == "USD":
        return 1.0, None
    if not CODE.match(code):
        raise CatalogError(f"{where}, column `currency`: {code or 'empty'!s}; give an ISO 4217 code (USD, CNY...).")
    if not rates or code not in rates:
        raise CatalogError(
            f"{where}: prices in {code}; add `--fx-rate {code}=RATE` ({code} per USD) so they compare "
            "with the USD rows."
        )
    return rates[code], f"priced in {code}, at {rates[code]:g} {code} per USD (--fx-rate)"
