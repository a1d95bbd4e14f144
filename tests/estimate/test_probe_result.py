"""The probe's phase and step-time fits (paddlefit.estimate.probe_result) on literal points: pure arithmetic, no
Paddle, every expected value computed by hand in the comment beside it."""

from __future__ import annotations

import pytest

from paddlefit.estimate.probe_result import (
    PhaseFit,
    ProbeResult,
    StepMeasurement,
    StepTimeFit,
    fit_phase,
    fit_step_time,
)


def test_points_on_a_line_fit_it_exactly() -> None:
    # 100 + 10 b at b = 1, 2, 3
    f = fit_phase([1, 2, 3], [110.0, 120.0, 130.0])
    assert (f.fixed_bytes, f.per_sample_bytes) == pytest.approx((100.0, 10.0))
    assert f.max_rel_residual == pytest.approx(0.0, abs=1e-12) and f.segments == ()
    assert f.at(64) == pytest.approx(740.0)  # 100 + 10 x 64


def test_a_convex_fit_keeps_the_segments_and_extrapolates_on_the_last() -> None:
    # points (1, 100), (2, 150), (4, 300): segments 50 + 50 b (1 -> 2) and 0 + 75 b (2 -> 4)
    f = fit_phase([2, 1, 4], [150.0, 100.0, 300.0], convex=True)  # unsorted on purpose
    assert [list(seg) for seg in f.segments] == [pytest.approx([50.0, 50.0]), pytest.approx([0.0, 75.0])]
    assert (f.fixed_bytes, f.per_sample_bytes) == pytest.approx((0.0, 75.0))
    # least squares: slope = Sxy / Sxx = (950/3) / (14/3) = 475/7, intercept = 550/3 - 475/7 x 7/3 = 25;
    # residuals |92.857 - 100| / 100 = 1/14, |160.714 - 150| / 150 = 1/14, |296.43 - 300| / 300 = 1/84
    assert f.max_rel_residual == pytest.approx(1 / 14)
    assert f.at(1) == pytest.approx(100.0)  # max(50 + 50, 0 + 75)
    assert f.at(3) == pytest.approx(225.0)  # max(200, 225)
    assert f.at(10) == pytest.approx(750.0)  # max(550, 750)


def test_one_distinct_batch_is_a_constant() -> None:
    assert fit_phase([2, 2], [5.0, 7.0]) == PhaseFit(5.0, 0.0, 0.0)  # the first point, slope 0
    assert fit_phase([3], [9.0], convex=True) == PhaseFit(9.0, 0.0, 0.0)


def test_the_residual_is_relative_to_at_least_one() -> None:
    # seconds 0, 0, 0.3 at b = 1, 2, 3: slope 0.15, intercept 0.1 - 0.15 x 2 = -0.2; the line gives -0.05, 0.1, 0.25:
    # residuals 0.05, 0.1, 0.05 over max(|y|, 1) = 1
    t = fit_step_time([1, 2, 3], [0.0, 0.0, 0.3])
    assert isinstance(t, StepTimeFit)
    assert (t.fixed_s, t.per_sample_s, t.max_rel_residual) == pytest.approx((-0.2, 0.15, 0.1))
    assert t.at(4) == pytest.approx(0.4)  # -0.2 + 0.15 x 4


def test_step_time_line() -> None:
    # 10 ms + 2 ms per sample
    t = fit_step_time([1, 2, 3], [0.012, 0.014, 0.016])
    assert (t.fixed_s, t.per_sample_s) == pytest.approx((0.010, 0.002))
    assert t.at(32) == pytest.approx(0.074)  # 0.010 + 0.002 x 32
    assert StepTimeFit(0.5, 0.25).max_rel_residual == 0.0


def _probe(time_fit: StepTimeFit) -> ProbeResult:
    ms = [StepMeasurement(b, {"forward": 100 + 10 * b, "eval": 50 + 40 * b}, 0, 0.0) for b in (1, 2, 3)]
    fits = {"forward": PhaseFit(100.0, 10.0, 0.0), "eval": PhaseFit(50.0, 40.0, 0.0)}
    return ProbeResult(measurements=ms, fits=fits, time_fit=time_fit)


def test_the_probe_result_predicts_each_phase_and_the_step() -> None:
    p = _probe(StepTimeFit(-0.2, 0.15))
    assert p.measurements[2].peak_bytes == 170  # max(100 + 30, 50 + 120)
    assert p.phase_bytes(4) == pytest.approx({"forward": 140.0, "eval": 210.0})  # 100 + 40, 50 + 160
    # eval at its own batch 1: 50 + 40 = 90 < forward's 140 at batch 4
    assert p.phase_bytes(4, 1) == pytest.approx({"forward": 140.0, "eval": 90.0})
    assert p.peak_bytes(4) == pytest.approx(210.0) and p.peak_bytes(4, 1) == pytest.approx(140.0)
    assert p.dominant_phase(4) == "eval" and p.dominant_phase(4, 1) == "forward"
    assert p.step_time_s(4) == pytest.approx(0.4)  # -0.2 + 0.6
    assert p.step_time_s(1) == 0.0  # -0.05 s: clipped at zero
