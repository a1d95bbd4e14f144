"""Optimal checkpoint interval under random interruptions (spot reclaims, node failures).

- Young (1974), "A first order approximation to the optimum checkpoint interval", CACM 17(9):
  ``tau = sqrt(2 * delta * M)``.
- Daly (2006), "A higher order estimate of the optimum checkpoint interval for restart dumps", FGCS 22(3):
  ``tau = sqrt(2*delta*M) * [1 + (1/3)*sqrt(delta/(2M)) + (delta/(2M))/9] - delta`` for ``delta < 2M``, else
  ``tau = M``.

``delta`` is the time to write one checkpoint and ``M`` the mean time between interruptions, both in seconds.
Worked check (docs/sources.md#checkpoint-interval): delta = 5 min, M = 6 h gives Young 60.0 min and Daly 56.7 min.
"""

from __future__ import annotations

import math


def _check(delta_s: float, mtbi_s: float) -> None:
    if not (math.isfinite(delta_s) and math.isfinite(mtbi_s)) or delta_s <= 0 or mtbi_s <= 0:
        raise ValueError(
            f"checkpoint write time and mean time between interruptions must be finite and > 0 "
            f"(got {delta_s}, {mtbi_s})"
        )


def young_interval_s(delta_s: float, mtbi_s: float) -> float:
    """Young's first-order optimum: seconds of work between checkpoints, ``sqrt(2 * delta * M)``.

    Raises:
        ValueError: a non-finite or non-positive argument.
    """
    _check(delta_s, mtbi_s)
    return math.sqrt(2.0 * delta_s * mtbi_s)


def daly_interval_s(delta_s: float, mtbi_s: float) -> float:
    """Daly's higher-order optimum (seconds of work between checkpoints); ``M`` when ``delta >= 2M``.

    Raises:
        ValueError: a non-finite or non-positive argument.
    """
    _check(delta_s, mtbi_s)
    if delta_s >= 2.0 * mtbi_s:
        return mtbi_s
    x = delta_s / (2.0 * mtbi_s)
    return math.sqrt(2.0 * delta_s * mtbi_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta_s
