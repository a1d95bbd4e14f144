"""Out-of-memory recognition and the micro-batch split arithmetic of train's back-off.

With ``oom_backoff`` (on by default) an out-of-memory error makes every rank redo the step with each loaded batch
split twice as finely: the micro-batch halves, accumulation doubles, the global batch is unchanged, down to a
micro-batch of 1 sample. Evaluation backs off the same way on its own batch. The arithmetic lives here, free of
Paddle, so it is tested exactly; :mod:`paddlefit.train.step` applies it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["OutOfMemory", "Split", "first_line", "is_out_of_memory", "oom_line", "slice_weights"]


class OutOfMemory(MemoryError):
    """An out-of-memory error of one micro-batch or evaluation batch, carrying Paddle's message line."""


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is Paddle running out of memory.

    Paddle raises ``MemoryError`` for its ResourceExhausted error ("(ResourceExhausted) Out of memory error on GPU
    0. Cannot allocate ..." on GPU, "(ResourceExhausted) Fail to alloc memory of N size" from the CPU allocator,
    ``paddle/phi/core/memory/allocation/cpu_allocator.cc``; measured here with paddlepaddle 3.3.1). Raised inside
    a ``PyLayer``'s backward it reaches Python wrapped as ``OSError`` "(External) ... MemoryError: (ResourceExhausted)
    ..." (also measured), hence the text check.
    """
    return isinstance(exc, MemoryError) or "(ResourceExhausted)" in str(exc)


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first line of ``str(exc)``, at most ``limit`` characters (for one-line error messages)."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else "")[:limit]


def oom_line(exc: BaseException) -> str:
    """``"Type: <the line of Paddle's message that says what ran out>"`` (the wrapped form puts it on a later
    line), at most 200 characters of it."""
    lines = [x.strip() for x in str(exc).splitlines() if "ResourceExhausted" in x]
    return f"{type(exc).__name__}: {(lines[0] if lines else first_line(exc))[:200].rstrip('.')}"


def slice_weights(n: int, ways: int) -> list[tuple[int, int, float]]:
    """How a loaded batch of ``n`` samples is cut into ``ways`` contiguous micro-batches.

    Returns:
        ``[(start, stop, weight)]``: sample ranges covering ``0..n`` in order and each one's share of the batch's
        samples (the weights sum to 1), so that scaling each slice's mean loss by its weight (and by
        ``1 / grad_accum_steps``) accumulates the same gradient as the whole batch (for losses that average over
        the batch). At most ``n`` slices (one sample each); slice sizes differ by at most 1. An even split gives
        weights of exactly ``1 / k``, the arithmetic of ``batch_size / k`` with accumulation x k.

    Raises:
        ValueError: ``n < 1`` or ``ways < 1``.
    """
    if n < 1 or ways < 1:
        raise ValueError(f"slice_weights needs n >= 1 and ways >= 1 (got {n}, {ways})")
    k = min(ways, n)
    bounds = [round(n * j / k) for j in range(k + 1)]
    if n % k == 0:
        return [(bounds[j], bounds[j + 1], 1.0 / k) for j in range(k)]
    return [(bounds[j], bounds[j + 1], (bounds[j + 1] - bounds[j]) / n) for j in range(k)]


@dataclass
class Split:
    """How many ways each batch of ``batch_size`` samples is split after out-of-memory back-offs.

    Attributes:
        batch_size: samples per loaded batch (``batch_size`` or ``data.eval_batch_size``).
        ways: a power of 2; 1 until the first back-off.
        backoffs: how many times :meth:`halve` ran.
    """

    batch_size: int
    ways: int = 1
    backoffs: int = 0

    @property
    def size(self) -> int:
        """Samples per forward: ``batch_size / ways`` rounded up."""
        return math.ceil(self.batch_size / self.ways)

    def can_halve(self) -> bool:
        """Whether a smaller forward exists (the current one is more than 1 sample)."""
        return self.size > 1

    def halve(self) -> int:
        """Split twice as finely; returns the new samples per forward."""
        self.ways *= 2
        self.backoffs += 1
        return self.size

    @staticmethod
    def valid_ways(ways: object, batch_size: int) -> bool:
        """Whether ``ways`` (read from a checkpoint) is a split this back-off can reach: a power of 2 up to
        ``2 * batch_size``."""
        return (
            isinstance(ways, int)
            and not isinstance(ways, bool)
            and 1 <= ways <= 2 * batch_size
            and not ways & (ways - 1)
        )
