"""Paddle's runtime ``FLAGS_*`` worth checking, shipped as data (``catalog/data/paddle_flags.csv``).

Each row is a flag with its value rule (``value_type`` bool|int|float|choice with ``min_value``/``max_value``/
``choices``), the allowed values in words, Paddle's default and meaning, its source (Paddle
``paddle/common/flags.cc``; ``conv_workspace_size_limit`` in ``paddle/phi/core/flags.cc``) and the date read.
``status`` is ``current``, or ``removed`` for a flag popular posts still recommend that Paddle dropped (then
``meaning`` says why and what to do).

``paddlefit doctor`` (checks PF109, PF110) and ``paddlefit image`` (the flags it bakes into a Dockerfile) read it.

Example:
    >>> get_flag("FLAGS_allocator_strategy").accepts("naive_best_fit")
    True
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from paddlefit.errors import CatalogError

VALUE_TYPES = ("bool", "int", "float", "choice")
#: Spellings Paddle's gflags-style parser takes for a bool flag (compared lower-cased).
BOOL_VALUES = ("0", "1", "true", "false")


@dataclass(frozen=True)
class PaddleFlag:
    """One flag (see the module docstring for the columns); ``min_value``/``max_value`` in the flag's own unit
    (MB, GB or a fraction, as ``allowed`` says), None when unbounded; ``choices`` for ``choice`` flags."""

    name: str
    status: str
    value_type: str | None
    min_value: float | None
    max_value: float | None
    choices: tuple[str, ...]
    allowed: str
    default: str
    meaning: str
    source: str
    retrieved: str

    def accepts(self, value: str) -> bool:
        """Whether ``value`` (stripped) is a valid setting: bool spellings of :data:`BOOL_VALUES`, a whole number
        >= ``min_value``, a number in [``min_value``, ``max_value``], or one of ``choices`` (exact case)."""
        v = value.strip()
        if self.value_type == "bool":
            return v.lower() in BOOL_VALUES
        if self.value_type == "choice":
            return v in self.choices
        if self.value_type == "int":
            return v.lstrip("-").isdigit() and (self.min_value is None or int(v) >= self.min_value)
        if self.value_type == "float":
            try:
                x = float(v)
            except ValueError:
                return False
            return (self.min_value is None or x >= self.min_value) and (self.max_value is None or x <= self.max_value)
        return True


def _num(text: str) -> float | None:
    return float(text) if text else None


@lru_cache(maxsize=1)
def load_flags() -> tuple[PaddleFlag, ...]:
    """The shipped flag table, read once.

    Raises:
        CatalogError: a row with an unknown status or value type, or no source/retrieved date.
    """
    text = resources.files("paddlefit.catalog").joinpath("data/paddle_flags.csv").read_text(encoding="utf-8")
    out = []
    for i, r in enumerate(csv.DictReader(text.splitlines()), start=2):
        try:
            flag = PaddleFlag(
                name=r["name"],
                status=r["status"],
                value_type=r["value_type"] or None,
                min_value=_num(r["min_value"]),
                max_value=_num(r["max_value"]),
                choices=tuple(c for c in r["choices"].split("|") if c),
                allowed=r["allowed"],
                default=r["default"],
                meaning=r["meaning"],
                source=r["source"],
                retrieved=r["retrieved"],
            )
        except (KeyError, ValueError) as exc:
            raise CatalogError(f"catalog/data/paddle_flags.csv line {i}: {exc}.") from None
        ok = flag.status == "removed" or (flag.status == "current" and flag.value_type in VALUE_TYPES)
        if not ok or not flag.name.startswith("FLAGS_") or not flag.source or not flag.retrieved:
            raise CatalogError(f"catalog/data/paddle_flags.csv line {i}: malformed row {r}.")
        out.append(flag)
    return tuple(out)


def get_flag(name: str) -> PaddleFlag | None:
    """The current (not removed) flag ``name``, or None when the table has no rule for it."""
    return next((f for f in load_flags() if f.name == name and f.status == "current"), None)


def current_flags() -> list[str]:
    """Names of the current flags in the table, in file order (the ones ``paddlefit image`` may bake in)."""
    return [f.name for f in load_flags() if f.status == "current"]


def removed_flags() -> dict[str, str]:
    """Removed flags: ``{name: why and what to do}``."""
    return {f.name: f.meaning for f in load_flags() if f.status == "removed"}
