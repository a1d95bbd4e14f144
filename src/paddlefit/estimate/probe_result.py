"""What the CPU probe measured and the lines fitted through it: per-phase peaks and step time against the batch.

Pure data and arithmetic (numpy, no Paddle): :class:`StepMeasurement` is one measured step, :func:`fit_phase` fits
a phase's peaks (or the step times) over the probe's batch sizes, :class:`ProbeResult` predicts at any batch.
The probe that fills them is :func:`paddlefit.probe.memory.probe_memory`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from paddlefit.units import GIB


@dataclass(frozen=True)
class PhaseFit:
    """Peak of one phase as a function of batch: the maximum of straight lines.

    A phase's peak is the largest of several sub-peaks (moments inside the phase), each linear in the batch,
    so it is convex and piecewise linear: ``peak(b) = max_i(fixed_i + per_sample_i * b)``. The lines are
    the segments between consecutive probe points; the last one (steepest) governs extrapolation, and its
    intercept/slope are ``fixed_bytes``/``per_sample_bytes``. ``max_rel_residual`` is the largest
    |measured - least-squares line| / measured (0 = exactly linear over the probe points).
    """

    fixed_bytes: float
    per_sample_bytes: float
    max_rel_residual: float
    segments: tuple[tuple[float, float], ...] = ()

    def at(self, batch: int) -> float:
        """Predicted peak bytes of this phase at ``batch`` samples."""
        lines = self.segments or ((self.fixed_bytes, self.per_sample_bytes),)
        return max(f + s * batch for f, s in lines)


@dataclass(frozen=True)
class StepTimeFit:
    """Seconds of one training step as a line in the batch: ``fixed_s + per_sample_s * batch`` (least squares
    over the probe's measured steps); ``max_rel_residual`` as in :class:`PhaseFit`."""

    fixed_s: float
    per_sample_s: float
    max_rel_residual: float = 0.0

    def at(self, batch: int) -> float:
        """Predicted seconds of one step at ``batch`` samples."""
        return self.fixed_s + self.per_sample_s * batch


def fit_step_time(xs: list[int], seconds: list[float]) -> StepTimeFit:
    """The least-squares line through (batch sizes ``xs``, step ``seconds``) (:func:`fit_phase`'s line)."""
    line = fit_phase(xs, seconds)
    return StepTimeFit(line.fixed_bytes, line.per_sample_bytes, line.max_rel_residual)


@dataclass
class StepMeasurement:
    """Measured peaks (bytes above the pre-build baseline) of each phase and the time of the second step."""

    batch_size: int
    phase_peak_bytes: dict[str, int]
    states_bytes_after_step: int
    step_time_s: float

    @property
    def peak_bytes(self) -> int:
        """Largest phase peak, bytes above the pre-build baseline."""
        return max(self.phase_peak_bytes.values())


@dataclass
class ProbeResult:
    """The CPU probe: measurements at small batch sizes and the per-phase linear fits.

    ``time_fit`` gives step seconds = fixed + per_sample * batch, fit on the measured second-step times.
    """

    measurements: list[StepMeasurement]
    fits: dict[str, PhaseFit]
    time_fit: StepTimeFit
    #: Paddle CPU threads the measured steps ran with
    threads: int = 1
    #: seconds of one steady-state step at the largest mandatory probe batch per thread count (``time_threads``)
    thread_step_s: dict[int, float] = field(default_factory=dict)

    def phase_bytes(self, batch: int, eval_batch: int | None = None) -> dict[str, float]:
        """Predicted peak bytes of each phase: training phases at ``batch``, ``eval`` at ``eval_batch`` (default
        ``batch``)."""
        return {p: f.at(eval_batch or batch if p == "eval" else batch) for p, f in self.fits.items()}

    def peak_bytes(self, batch: int, eval_batch: int | None = None) -> float:
        """Predicted peak allocated bytes at ``batch`` (max over phases; ``eval`` at ``eval_batch``)."""
        return max(self.phase_bytes(batch, eval_batch).values())

    def dominant_phase(self, batch: int, eval_batch: int | None = None) -> str:
        """Name of the phase with the largest predicted peak at ``batch`` (``eval`` at ``eval_batch``)."""
        by = self.phase_bytes(batch, eval_batch)
        return max(by, key=by.__getitem__)

    def step_time_s(self, batch: int) -> float:
        """Predicted CPU seconds per training step at ``batch`` (linear fit of measured steps)."""
        return max(self.time_fit.at(batch), 0.0)


class ProbeTooLargeError(MemoryError):
    """The CPU probe would need more RAM than this machine has free.

    Attributes:
        need_bytes: upper bound of the probe's peak at its largest batch (batch-1 peak x batch), bytes.
        free_bytes: RAM available to the probe, bytes.
        batch: the probe's largest mandatory batch size.
    """

    def __init__(self, need_bytes: float, free_bytes: float, batch: int) -> None:
        super().__init__(f"probe needs ~{need_bytes / GIB:.1f} GiB at batch {batch}, {free_bytes / GIB:.1f} GiB free")
        self.need_bytes, self.free_bytes, self.batch = need_bytes, free_bytes, batch


def fit_phase(xs: list[int], ys: list[float], convex: bool = False) -> PhaseFit:
    """Least-squares line through (xs, ys); with ``convex``, also the max of consecutive-pair segments.

    Args:
        xs: batch sizes (samples).
        ys: the measured value at each batch size (bytes of a phase's peak; seconds through :func:`fit_step_time`).
        convex: also keep the segments between consecutive points (sorted by batch), so that
            :meth:`PhaseFit.at` is their maximum and the last (steepest) one governs extrapolation.

    Returns:
        The fit; one distinct batch size gives a constant (slope 0, residual 0).
    """
    if len(set(xs)) == 1:
        return PhaseFit(float(ys[0]), 0.0, 0.0)
    slope, intercept = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    res = max(abs(y - (intercept + slope * x)) / max(abs(y), 1.0) for x, y in zip(xs, ys, strict=True))
    if not convex:
        return PhaseFit(float(intercept), float(slope), float(res))
    pts = sorted(zip(xs, ys, strict=True))
    segs = []
    for (x0, y0), (x1, y1) in itertools.pairwise(pts):
        sl = (y1 - y0) / (x1 - x0)
        segs.append((y0 - sl * x0, sl))
    last = segs[-1]
    return PhaseFit(float(last[0]), float(last[1]), float(res), tuple(segs))
