"""Durations of one table column in one unit, chosen from the column's range, so ``790 s`` never sits above
``8.3 h``; a footer that restates a row formats the same number with the same unit (issue 26, item 1)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

#: (unit, seconds per unit): the column's largest value picks the first unit it stays below 1000 of (ms below 1 s,
#: s below 1 h, else h), the same thresholds as :func:`paddlefit.report.render.duration`.
_UNITS = (("ms", 1e-3), ("s", 1.0), ("h", 3600.0))


@dataclass(frozen=True)
class DurationUnit:
    """One column's unit: ``name`` (``ms``, ``s`` or ``h``) and ``scale`` (seconds per unit).

    :meth:`fmt` formats seconds in it with two significant digits: no decimal from 10 up, one from 1, two from
    0.1, up to four below (``26 ms``, ``8.3 h``, ``0.22 h``, ``0.020 s``); ``-`` for None/NaN, ``<0.0001 h`` for a
    positive value that rounds to 0.
    """

    name: str
    scale: float

    def fmt(self, seconds: float | None) -> str:
        """``seconds`` (s) in this unit, e.g. ``0.22 h``."""
        if seconds is None or math.isnan(seconds):
            return "-"
        value = seconds / self.scale
        if 0 < value < 0.00005:
            return f"<0.0001 {self.name}"
        # two significant digits, whatever the unit: 26 ms, 8.3 h, 0.22 h, and a GPU step in a column of seconds
        # 0.020 s (not 0.02 s), at most four decimals
        digits = 1 - math.floor(math.log10(abs(value))) if value and math.isfinite(value) else 0
        decimals = min(4, max(0, digits))
        return f"{value:,.{decimals}f} {self.name}"


def column_unit(seconds: Iterable[float | None]) -> DurationUnit:
    """The unit for a column of durations (s): ``ms`` if the largest finite one is below 1 s, ``s`` below 1 h, else
    ``h`` (``s`` for a column without any)."""
    vals = [v for v in seconds if v is not None and math.isfinite(v) and v > 0]
    top = max(vals, default=1.0)
    name, scale = _UNITS[0] if top < 1 else _UNITS[1] if top < 3600 else _UNITS[2]
    return DurationUnit(name, scale)


def duration_column(seconds: list[float | None]) -> list[str]:
    """Every duration (s) of a column formatted in the column's one unit (:func:`column_unit`)."""
    unit = column_unit(seconds)
    return [unit.fmt(v) for v in seconds]
