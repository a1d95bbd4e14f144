"""Minimum NVIDIA Linux driver per CUDA toolkit, shipped as data (``catalog/data/cuda_drivers.csv``).

Two rules, each row with its source and retrieved date:

- ``toolkit``: the driver a CUDA X.Y toolkit ships with and asks for (CUDA release notes, table 3);
- ``major-floor``: the oldest driver that still runs any X.y of a major version through minor-version
  compatibility (CUDA compatibility guide, table 1), with limits on PTX JIT of newer kernels.

``paddlefit doctor`` (check PF102) and ``paddlefit image`` (the base image the host driver runs) both read it.

Example:
    >>> toolkit_min_driver("12.6"), major_floor_driver("12")
    ('560.28.03', '525.60.13')
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from paddlefit.errors import CatalogError

RULES = ("toolkit", "major-floor")


@dataclass(frozen=True)
class CudaDriverRow:
    """One row: CUDA ``cuda`` (``X.Y`` for ``toolkit``, ``X`` for ``major-floor``) needs a Linux driver
    >= ``min_linux_driver_version`` (dotted, e.g. ``560.28.03``); ``source`` is the document, ``retrieved`` the
    ISO date it was read."""

    cuda: str
    rule: str
    min_linux_driver_version: str
    source: str
    retrieved: str


def version_tuple(version: str) -> tuple[int, ...]:
    """A dotted version (driver, CUDA, compute capability) as a comparable tuple: ``"560.28.03"`` ->
    ``(560, 28, 3)``; non-numeric parts are skipped."""
    return tuple(int(p) for p in version.split(".") if p.isdigit())


@lru_cache(maxsize=1)
def load_cuda_drivers() -> tuple[CudaDriverRow, ...]:
    """The shipped table, read once.

    Raises:
        CatalogError: a row with an unknown rule, a malformed version, or no source/retrieved date.
    """
    text = resources.files("paddlefit.catalog").joinpath("data/cuda_drivers.csv").read_text(encoding="utf-8")
    rows = []
    for i, r in enumerate(csv.DictReader(text.splitlines()), start=2):
        row = CudaDriverRow(**r)
        if (
            row.rule not in RULES
            or not re.fullmatch(r"\d+(\.\d+)*", row.cuda)
            or not re.fullmatch(r"\d+(\.\d+)*", row.min_linux_driver_version)
            or not row.source
            or not re.fullmatch(r"\d{4}-\d\d-\d\d", row.retrieved)
        ):
            raise CatalogError(f"catalog/data/cuda_drivers.csv line {i}: malformed row {r}.")
        rows.append(row)
    return tuple(rows)


def _table(rule: str) -> dict[str, str]:
    return {r.cuda: r.min_linux_driver_version for r in load_cuda_drivers() if r.rule == rule}


def toolkit_min_driver(cuda: str) -> str | None:
    """Minimum Linux driver of CUDA toolkit ``cuda`` (``"12.6"``; a longer version is cut to X.Y), or None when
    the table has no row for it (CUDA release notes, table 3)."""
    return _table("toolkit").get(".".join(cuda.split(".")[:2]))


def major_floor_driver(cuda: str) -> str | None:
    """Oldest Linux driver that runs any toolkit of ``cuda``'s major version (``"12"`` or ``"12.6"``) through
    minor-version compatibility, or None when unknown (CUDA compatibility guide, table 1)."""
    return _table("major-floor").get(cuda.split(".")[0])


def toolkit_min_drivers() -> dict[str, str]:
    """The whole ``toolkit`` rule as ``{cuda X.Y: minimum driver}``, in file order."""
    return _table("toolkit")
