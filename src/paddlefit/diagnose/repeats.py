"""When a timed check may speak: interleaved repeats and a confidence bound on the ratio of two timings.

A timed check (PF121's OpenMP wait policies) measures A and B in rounds, alternating which goes first, so a change
in the machine's load hits both alike. Each round gives one paired ratio A/B; the check judges the geometric mean
of the ratios with its two-sided 95% Student-t confidence interval over the rounds' log ratios:

- ``slower`` when the interval's lower end is above the threshold (A is slower by more than it, clear of noise);
- ``not slower`` when the interval's upper end is below the threshold;
- ``inconclusive`` otherwise, with the noise: the interval's half-width as a percentage.

The check repeats rounds (at least :data:`MIN_ROUNDS`, at most :data:`MAX_ROUNDS`) until the verdict is not
``inconclusive``; on an idle machine both ends land on one side of the threshold, so the verdict does not flip
between runs. Student's t quantiles: the standard table (e.g. NIST/SEMATECH e-Handbook, table 1.3.6.7.2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Student's t 0.975 quantile by degrees of freedom (two-sided 95%), NIST/SEMATECH e-Handbook table 1.3.6.7.2.
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
#: Rounds before a verdict may be given, and the most a check runs before it says ``inconclusive``.
MIN_ROUNDS = 3
MAX_ROUNDS = 5


@dataclass(frozen=True)
class RatioBound:
    """The geometric-mean ratio A/B of paired timings with its 95% interval (``low``, ``high``), the rounds
    ``n``, ``noise`` (the interval's half-width as a fraction, e.g. 0.12 = 12%) and the ``verdict`` against the
    threshold: ``slower``, ``not slower`` or ``inconclusive``."""

    ratio: float
    low: float
    high: float
    noise: float
    n: int
    verdict: str


def ratio_bound(a: list[float], b: list[float], threshold: float) -> RatioBound:
    """Judge A against B from paired timings (seconds; ``a[i]`` and ``b[i]`` from round i) at ``threshold`` (a ratio,
    e.g. 1.10 = 10% slower). Fewer than :data:`MIN_ROUNDS` pairs is ``inconclusive`` with an infinite interval.

    Raises:
        ValueError: ``a`` and ``b`` differ in length, or a timing is not positive.
    """
    if len(a) != len(b):
        raise ValueError(f"paired timings differ in length: {len(a)} and {len(b)}")
    if any(not (x > 0) for x in (*a, *b)):
        raise ValueError("timings must be positive seconds")
    logs = [math.log(x / y) for x, y in zip(a, b, strict=True)]
    n = len(logs)
    if n == 0:
        return RatioBound(math.nan, 0.0, math.inf, math.inf, 0, "inconclusive")
    mean = sum(logs) / n
    if n < MIN_ROUNDS:
        return RatioBound(math.exp(mean), 0.0, math.inf, math.inf, n, "inconclusive")
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = T975.get(n - 1, 1.96) * sd / math.sqrt(n)
    low, high = math.exp(mean - half), math.exp(mean + half)
    verdict = "slower" if low > threshold else "not slower" if high < threshold else "inconclusive"
    return RatioBound(math.exp(mean), low, high, math.expm1(half), n, verdict)


def settled(verdicts: list[str]) -> bool:
    """Whether a check comparing one setting with others can stop repeating: it is ``slower`` than one of them (it
    warns), or ``not slower`` than every one (it is ok)."""
    return "slower" in verdicts or (bool(verdicts) and all(v == "not slower" for v in verdicts))
