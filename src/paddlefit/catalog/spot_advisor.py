"""AWS Spot Instance Advisor "frequency of interruption" buckets of GPU instance types, shipped with the package.

``catalog/data/aws_spot_advisor.csv`` (``region,instance_type,interruption_bucket``) is the Linux rows of every
GPU instance family (``g*``, ``gr*``, ``p*``) in every region of AWS's advisor feed
(https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json, the data behind
https://aws.amazon.com/ec2/spot/instance-advisor/), read from the copy the ``alexei-led/spotinfo`` repository
ships (:data:`ADVISOR_SOURCE`; paddlefit cannot download the feed itself, and does not download at run time).
AWS defines the bucket as "the rate at which Spot has reclaimed capacity during the trailing month", in ranges
<5%, 5-10%, 10-15%, 15-20% and >20% (:data:`BUCKETS`). How a bucket becomes a rate per hour:
:func:`paddlefit.cost.spot_risk.rate_from_bucket`. Provenance: ``catalog/data/SOURCES-prices.md``.
"""

from __future__ import annotations

import importlib.resources
from functools import lru_cache

from paddlefit.catalog.price_csv import csv_rows, dict_reader
from paddlefit.errors import CatalogError

#: The advisor's bucket labels, in its own order (its ``ranges`` list, ``index`` 0..4).
BUCKETS = ("<5%", "5-10%", "10-15%", "15-20%", ">20%")
#: Where the shipped buckets come from (one line, shown with every AWS spot row that uses one).
ADVISOR_SOURCE = (
    "AWS Spot Instance Advisor feed https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json "
    "as copied in github.com/alexei-led/spotinfo internal/spot/data/spot-advisor-data.json @5eedf20a "
    "(2025-06-28), Linux; shipped as paddlefit/catalog/data/aws_spot_advisor.csv"
)
FILE = "paddlefit/catalog/data/aws_spot_advisor.csv"


def parse_advisor_csv(text: str, origin: str = FILE) -> dict[tuple[str, str], str]:
    """(region, instance_type) -> bucket label (one of :data:`BUCKETS`) from the CSV ``text``.

    Raises:
        CatalogError: a missing column, an empty cell, an unknown bucket or a repeated (region, instance_type);
            names the file, line and column.
    """
    reader = dict_reader(text, f"spot advisor file `{origin}`")
    need = ("region", "instance_type", "interruption_bucket")
    missing = [c for c in need if c not in (reader.fieldnames or [])]
    if missing:
        raise CatalogError(f"spot advisor file `{origin}`, line 1: missing column(s) {', '.join(missing)}.")
    out: dict[tuple[str, str], str] = {}
    for row in csv_rows(reader, f"spot advisor file `{origin}`"):
        where = f"spot advisor file `{origin}`, line {reader.line_num}"
        region, itype, bucket = ((row.get(c) or "").strip() for c in need)
        for col, val in zip(need, (region, itype, bucket), strict=True):
            if not val:
                raise CatalogError(f"{where}, column `{col}`: empty.")
        if bucket not in BUCKETS:
            raise CatalogError(f"{where}, column `interruption_bucket`: {bucket!r} is not one of {', '.join(BUCKETS)}.")
        if (region, itype) in out:
            raise CatalogError(f"{where}: {region} {itype} is listed twice.")
        out[(region, itype)] = bucket
    return out


@lru_cache(maxsize=1)
def advisor_buckets() -> dict[tuple[str, str], str]:
    """The shipped (region, instance_type) -> bucket table (:func:`parse_advisor_csv` of the package file)."""
    text = (importlib.resources.files("paddlefit.catalog") / "data" / "aws_spot_advisor.csv").read_text(
        encoding="utf-8"
    )
    return parse_advisor_csv(text)


def aws_bucket(region: str, instance_type: str) -> str | None:
    """The advisor's interruption bucket of an AWS instance type in a region (Linux), or None where the shipped
    extract has none (a region or type the feed did not list, or a non-GPU family)."""
    return advisor_buckets().get((region.strip(), instance_type.strip()))
