"""Runs calibrate the plan (paddlefit.plan.runs_calibration): the fit's math, and held-out runs predicted better
after than before on recorded run rows (tests/data/recorded-runs.json: the published GPU runs as registry rows,
predicted by the per-op model refitted without any row of their GPU; `bench/runs_calibration.py --write`)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from paddlefit.plan.request import Target
from paddlefit.plan.runs_calibration import DeviceRuns, apply_runs, fit_correction

ROWS = json.loads((Path(__file__).parents[1] / "data" / "recorded-runs.json").read_text())


def test_the_factor_is_the_geometric_mean_of_measured_over_predicted() -> None:
    rows = [
        {"id": 1, "model": "a", "predicted_step_s": 0.1, "measured_step_s": 0.2},
        {"id": 2, "model": "b", "predicted_step_s": 0.1, "measured_step_s": 0.05},
        {"id": 3, "model": "b", "predicted_step_s": 0.3, "measured_step_s": 0.6},
    ]
    c = fit_correction(rows, "c", "L4")  # no run of model c: every run of the device
    assert c is not None and not c.same_model and c.n == 3 and c.run_ids == [1, 2, 3]
    assert c.factor == pytest.approx(math.exp((math.log(2) + math.log(0.5) + math.log(2)) / 3), rel=1e-12)
    assert c.residuals_before == pytest.approx([-0.5, 1.0, -0.5])
    assert c.residuals_after == pytest.approx(
        [0.1 * c.factor / 0.2 - 1, 0.1 * c.factor / 0.05 - 1, 0.3 * c.factor / 0.6 - 1]
    )
    same = fit_correction(rows, "b", "L4")  # runs of the planned model: only those
    assert same is not None and same.same_model and same.n == 2 and same.factor == pytest.approx(1.0)
    assert same.label == "runs (n=2)"


def test_rows_without_both_step_times_are_left_out() -> None:
    rows = [
        {"id": 1, "model": "a", "predicted_step_s": None, "measured_step_s": 0.2},
        {"id": 2, "model": "a", "predicted_step_s": 0.1, "measured_step_s": 0.0},
        {"id": 3, "model": "a", "predicted_step_s": float("nan"), "measured_step_s": 0.1},
    ]
    assert fit_correction(rows, "a", "L4") is None
    assert fit_correction(
        [*rows, {"id": 4, "model": "a", "predicted_step_s": 0.1, "measured_step_s": 0.15}], "a", "L4"
    ).factor == pytest.approx(1.5)


def test_a_run_of_few_measured_steps_does_not_calibrate() -> None:
    def row(i: int, measured: float, steps: int) -> dict:
        return {
            "id": i,
            "model": "a",
            "predicted_step_s": 0.03,
            "measured_step_s": measured,
            "comparison_json": {"measured_steps": steps},
        }

    # a resumed run that measured 5 steps on a busy machine (8x the prediction) is left out; 20 steps count
    assert fit_correction([row(1, 0.24, 5)], "a", "cpu") is None
    c = fit_correction([row(1, 0.24, 5), row(2, 0.036, 20)], "a", "cpu")
    assert c is not None and c.n == 1 and c.run_ids == [2] and c.factor == pytest.approx(1.2)


def test_recorded_runs_of_other_models_improve_the_held_out_models_prediction_on_their_gpu() -> None:
    before, after = [], []
    for r in ROWS:
        others = [o for o in ROWS if o["device_name"] == r["device_name"] and o["model"] != r["model"]]
        corr = fit_correction(others, r["model"], r["device_name"])
        if corr is None:
            continue
        assert not corr.same_model  # held out: none of the fitted runs is of its model
        before.append(abs(r["predicted_step_s"] / r["measured_step_s"] - 1))
        after.append(abs(r["predicted_step_s"] * corr.factor / r["measured_step_s"] - 1))
    assert len(before) == 69  # every recorded run's GPU has runs of another model
    # measured (bench/runs_calibration.py): median |error| 14.1 % -> 12.7 %, 37 of 69 runs better
    assert statistics.median(after) < statistics.median(before)
    assert sum(a < b for a, b in zip(after, before, strict=True)) > len(before) / 2


def _t4(**over) -> Target:
    base = dict(
        name="T4",
        kind="gpu",
        fits=True,
        peak_bytes=1,
        capacity_bytes=2,
        max_batch_size=8,
        step_time_s=0.02,
        samples_per_s=400.0,
        calibrated=False,
        notes=("host-bound",),
        calibration="published-fit",
        predicted_mfu=0.3,
    )
    return Target(**{**base, **over})


def _run(i: int, model: str, predicted: float, measured: float) -> dict:
    return {"id": i, "model": model, "predicted_step_s": predicted, "measured_step_s": measured}


def test_runs_passed_in_correct_a_new_row_and_leave_the_old_one() -> None:
    # measured / predicted 1.5 and 1.2 (model "m"): factor sqrt(1.8) = 1.3416; the run of "other" is left out
    runs = DeviceRuns((_run(1, "m", 0.010, 0.015), _run(2, "m", 0.020, 0.024), _run(3, "other", 0.1, 0.9)))
    row = _t4()
    new = apply_runs(row, runs, "m")
    factor = math.sqrt(1.5 * 1.2)
    assert row.step_time_s == 0.02 and row.calibration == "published-fit" and row.notes == ("host-bound",)
    assert new.step_time_s == pytest.approx(0.02 * factor) and new.samples_per_s == pytest.approx(400 / factor)
    assert new.predicted_mfu == pytest.approx(0.3 / factor) and new.calibration == "runs (n=2)"
    assert new.runs_calibration is not None and new.runs_calibration["run_ids"] == [1, 2]
    assert list(new.to_dict()["runs_calibration"]) == [
        "device",
        "n",
        "factor",
        "same_model",
        "residuals_before",
        "residuals_after",
        "run_ids",
        "uncalibrated_step_s",
    ]
    assert new.runs_calibration.to_dict() == {
        "device": "T4",
        "n": 2,
        "factor": pytest.approx(factor),
        "same_model": True,
        "residuals_before": pytest.approx([1 / 1.5 - 1, 1 / 1.2 - 1]),
        "residuals_after": pytest.approx([factor / 1.5 - 1, factor / 1.2 - 1]),
        "run_ids": [1, 2],
        "uncalibrated_step_s": 0.02,
    }
    # median |residual| before: |1/1.5 - 1| = 0.333, |1/1.2 - 1| = 0.167 -> 25%; after: 0.106, 0.118 -> 11%
    assert new.notes == (
        "host-bound",
        "calibration: runs (n=2, same model): step time x 1.342; median "
        "|predicted/measured - 1| over those runs 25% -> 11% (`--no-runs` turns it off)",
    )


def test_rows_runs_do_not_correct() -> None:
    runs = DeviceRuns((_run(1, "m", 0.010, 0.015),))
    cpu = _t4(name="cpu", kind="cpu")
    assert apply_runs(cpu, runs, "m") is cpu  # the CPU row is a measurement (module docstring)
    nan = _t4(step_time_s=float("nan"))
    assert apply_runs(nan, runs, "m") is nan
    row = _t4()
    assert apply_runs(row, None, "m") is row and apply_runs(row, DeviceRuns(), "m") is row
    mfu_less = apply_runs(_t4(predicted_mfu=None), runs, "m")
    assert mfu_less.predicted_mfu is None and mfu_less.step_time_s == pytest.approx(0.03)


def test_an_unreadable_registry_is_said_in_the_row() -> None:
    warned = apply_runs(_t4(), DeviceRuns(warning="run registry not read (locked): not calibrated by runs"), "m")
    assert warned.notes == ("host-bound", "run registry not read (locked): not calibrated by runs")
    assert warned.step_time_s == 0.02 and warned.calibration == "published-fit" and warned.runs_calibration is None
