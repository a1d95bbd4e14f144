"""Durations of one table column in one unit, chosen from the column's range, so ``790 s`` never sits above
``8.3 h``; a footer that restates a row formats the same number with the same unit (issue 26, item 1)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

#: (unit, seconds per unit, fewest decimals): the column's largest value picks the first unit it stays below
#: 1000 of (ms below 1 s, s below 1 h, else h), the same thresholds as :func:`paddlefit.report.render.duration`.
_UNITS = (("ms", 1e-3, 0), ("s", 1.0, 1), ("h", 3600.0, 1))


@dataclass(frozen=True)
class DurationUnit:
    """One column's unit: ``name`` (``ms``, ``s`` or ``h``), ``scale`` (seconds per unit) and ``decimals``.

    :meth:`fmt` formats seconds in it; ``-`` for None/NaN, ``<0.001 h`` for a positive value that rounds to zero.
    """

    name: str
    scale: float
    decimals: int

    def fmt(self, seconds: float | None) -> str:
        """``seconds`` (s) in this unit with this column's decimals, e.g. ``0.22 h``."""
        if seconds is None or math.isnan(seconds):
            return "-"
        value = seconds / self.scale
        tiny = 10.0**-self.decimals
        if 0 < value < tiny / 2:
            return f"<{tiny:.{self.decimals}f} {self.name}"
        return f"{value:,.{self.decimals}f} {self.name}"


def column_unit(seconds: Iterable[float | None]) -> DurationUnit:
    """The unit for a column of durations (s): ``ms`` if the largest is below 1 s, ``s`` below 1 h, else ``h``;
    decimals so the smallest positive value keeps two significant digits (at most 3; at least 1 for s and h)."""
    vals = [v for v in seconds if v is not None and math.isfinite(v) and v > 0]
    if not vals:
        return DurationUnit("s", 1.0, 1)
    top = max(vals)
    name, scale, lo = _UNITS[0] if top < 1 else _UNITS[1] if top < 3600 else _UNITS[2]
    decimals = min(3, max(lo, 1 - math.floor(math.log10(min(vals) / scale))))
    return DurationUnit(name, scale, decimals)


def duration_column(seconds: list[float | None]) -> list[str]:
    """Every duration (s) of a column formatted in the column's one unit (:func:`column_unit`)."""
    unit = column_unit(seconds)
    return [unit.fmt(v) for v in seconds]
