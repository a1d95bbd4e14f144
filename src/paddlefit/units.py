"""Units of measure in one place: byte, duration and money constants, and how each is written for a person.

Bytes are binary (KiB, MiB, GiB, TiB: IEC 80000-13), as ``nvidia-smi``, ``free`` and Paddle's
``paddle.device.cuda.max_memory_allocated`` users read them; a GPU's memory *label* ("80 GB") is the vendor's and is
kept as text by the catalog. Durations are seconds; money is USD unless a
:class:`~paddlefit.catalog.currency.Currency` converts it; a price is USD per hour.

Every module that writes a byte count, a duration or a cost for a person uses these functions, so one figure
prints the same way in every command.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

#: Binary multiples of a byte (IEC 80000-13).
KIB = 1024
MIB = 1024**2
GIB = 1024**3
TIB = 1024**4
#: Seconds in an hour: a price is per hour, a duration is in seconds.
SECONDS_PER_HOUR = 3600.0


def _missing(value: float | None) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def gib(nbytes: float | None, decimals: int = 1) -> str:
    """Bytes as GiB with ``decimals`` decimals and thousands separators (``1.5 GiB``); ``-`` for None/NaN."""
    if _missing(nbytes):
        return "-"
    return f"{nbytes / GIB:,.{decimals}f} GiB"


def size(nbytes: float | None, decimals: int = 1) -> str:
    """Bytes as GiB from 1 GiB up (``1.5 GiB``), MiB below (``44.7 MiB``: a small model's weights are no
    ``0.0 GiB``), with ``decimals`` decimals; ``-`` for None/NaN."""
    if _missing(nbytes):
        return "-"
    return gib(nbytes, decimals) if abs(nbytes) >= GIB else f"{nbytes / MIB:,.{decimals}f} MiB"


def capacity_gib(nbytes: float) -> str:
    """A device's memory capacity (bytes) as a GiB number for display: rounded down to one decimal, ``.0`` dropped
    (``23.5``, ``16``, ``22.3``), so a capacity is never printed above what the device has (a 23.5 GiB machine
    shown as ``24`` was one)."""
    return f"{math.floor(nbytes / GIB * 10) / 10:g}"


def duration(seconds: float | None) -> str:
    """Seconds as ``0.85 ms``, ``812 ms``, ``3.2 s``, ``4.1 h``; ``-`` for None/NaN."""
    if _missing(seconds):
        return "-"
    if seconds < 0.01:
        return f"{seconds * 1e3:.2f} ms"
    if seconds < 1:
        return f"{seconds * 1e3:,.0f} ms"
    if seconds < SECONDS_PER_HOUR:
        return f"{seconds:,.1f} s"
    return f"{seconds / SECONDS_PER_HOUR:,.1f} h"


#: (unit, seconds per unit) of a duration column: ms below 1 s, s below 1 h, else h (as :func:`duration`).
_COLUMN_UNITS = (("ms", 1e-3), ("s", 1.0), ("h", SECONDS_PER_HOUR))


@dataclass(frozen=True)
class DurationUnit:
    """One table column's unit for durations: ``name`` (``ms``, ``s`` or ``h``) and ``scale`` (seconds per unit),
    so ``790 s`` never sits above ``8.3 h`` and a footer that restates a row prints the same number.

    :meth:`fmt` formats seconds in it with two significant digits: no decimal from 10 up, one from 1, two from
    0.1, up to four below (``26 ms``, ``8.3 h``, ``0.22 h``, ``0.020 s``); ``-`` for None/NaN, ``<0.0001 h`` for a
    positive value that rounds to 0.
    """

    name: str
    scale: float

    def fmt(self, seconds: float | None) -> str:
        """``seconds`` (s) in this unit, e.g. ``0.22 h``."""
        if _missing(seconds):
            return "-"
        value = seconds / self.scale
        if 0 < value < 0.00005:
            return f"<0.0001 {self.name}"
        digits = 1 - math.floor(math.log10(abs(value))) if value and math.isfinite(value) else 0
        decimals = min(4, max(0, digits))
        return f"{value:,.{decimals}f} {self.name}"


def column_unit(seconds: Iterable[float | None]) -> DurationUnit:
    """The unit for a column of durations (s): ``ms`` if the largest finite one is below 1 s, ``s`` below 1 h, else
    ``h`` (``s`` for a column without any)."""
    vals = [v for v in seconds if v is not None and math.isfinite(v) and v > 0]
    top = max(vals, default=1.0)
    name, scale = _COLUMN_UNITS[0] if top < 1 else _COLUMN_UNITS[1] if top < SECONDS_PER_HOUR else _COLUMN_UNITS[2]
    return DurationUnit(name, scale)


def duration_column(seconds: list[float | None]) -> list[str]:
    """Every duration (s) of a column formatted in the column's one unit (:func:`column_unit`)."""
    unit = column_unit(seconds)
    return [unit.fmt(v) for v in seconds]


def hours(seconds: float) -> float:
    """``seconds`` in hours (the unit prices are quoted in)."""
    return seconds / SECONDS_PER_HOUR


def cost_usd(seconds: float, usd_per_hour: float) -> float:
    """USD of ``seconds`` of something priced at ``usd_per_hour`` (an instance, a GPU, a disk)."""
    return seconds / SECONDS_PER_HOUR * usd_per_hour
