"""Predicted vs measured on every run (paddlefit.train.predict, paddlefit.train.record): the comparison's math,
and real runs of the digits job with the planner's prediction, the registry row, resume and a corrupt registry."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from paddlefit.jobspec.spec import load_job_spec
from paddlefit.train.predict import RunDevice, comparison, predict_run, trainer_step_s
from paddlefit.units import MIB

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_comparison_puts_the_prediction_for_the_trainer_step_beside_the_measured_figures() -> None:
    pred = {
        "status": "predicted",
        "device": {"kind": "gpu", "name": "L4", "count": 2},
        "calibration": "published-fit",
        "micro_step_s": 0.010,
        "optimizer_s": 0.002,
        "peak_memory_bytes": 1000,
        "mfu": 0.25,
        "train_flops_per_sample": 3e9,
        "peak_flops": 1e14,
    }
    step_s, wait_s = [0.03, 0.04, 0.05, 0.10], [0.0, 0.01, 0.0, 0.02]
    doc = comparison(
        pred,
        step_s=step_s,
        wait_s=wait_s,
        global_batch=96,
        batch_size=16,
        grad_accum_steps=3,
        devices=2,
        peak_memory_bytes=800,
        warmup_steps=5,
    )
    fig = {f["name"]: f for f in doc["figures"]}
    predicted_step = 3 * (0.010 - 0.002) + 0.002  # three forward+backward passes, one optimizer update
    assert trainer_step_s(pred, 3) == pytest.approx(predicted_step)
    compute = [0.03, 0.03, 0.05, 0.08]
    assert fig["step_time_s"]["predicted"] == pytest.approx(predicted_step)
    assert fig["step_time_s"]["measured"] == pytest.approx(np.median(compute))
    assert fig["step_time_s"]["ratio"] == pytest.approx(predicted_step / np.median(compute))
    assert fig["step_time_p95_s"]["measured"] == pytest.approx(np.percentile(compute, 95))
    assert fig["samples_per_s"]["measured"] == pytest.approx(4 * 96 / sum(step_s))
    assert fig["samples_per_s"]["predicted"] == pytest.approx(96 / predicted_step)
    assert fig["peak_memory_bytes"]["ratio"] == pytest.approx(1000 / 800)
    assert fig["mfu"]["measured"] == pytest.approx(3e9 * 96 / (np.median(compute) * 2 * 1e14))
    assert fig["data_wait_fraction"]["measured"] == pytest.approx(0.03 / sum(step_s))
    assert doc["measured_steps"] == 4 and doc["device"]["name"] == "L4"
    # the CPU probe has no optimizer share: A x the plan step
    assert trainer_step_s({"micro_step_s": 0.01, "optimizer_s": None}, 3) == pytest.approx(0.03)
    none = comparison(
        None,
        step_s=step_s,
        wait_s=wait_s,
        global_batch=96,
        batch_size=16,
        grad_accum_steps=3,
        devices=2,
        peak_memory_bytes=800,
        warmup_steps=5,
    )
    assert none["status"] == "not predicted" and all(f["predicted"] is None for f in none["figures"])
    assert none["figures"][0]["measured"] == pytest.approx(np.median(compute))


def test_what_cannot_be_predicted_says_why_without_running_the_planner(tmp_path: Path) -> None:
    logs: list[str] = []
    gpu = predict_run("model: x\n", RunDevice("gpu", "NVIDIA Quantum 9000", None, 1), tmp_path, logs.append)
    assert gpu["status"] == "not predicted" and "'NVIDIA Quantum 9000' is not in paddlefit's catalog" in gpu["reason"]
    cpu = predict_run("model: x\n", RunDevice("cpu", "x86_64", None, 2), tmp_path, logs.append)
    assert cpu["status"] == "not predicted" and "2 CPU processes" in cpu["reason"]
    assert logs == []  # neither started the planner
    assert json.loads((tmp_path / "prediction.json").read_text())["key"] == cpu["key"]


@pytest.mark.slow
def test_a_run_records_the_plan_beside_what_it_measured_and_plan_learns_from_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from paddlefit.job.resolve import JobOptions
    from paddlefit.plan.jobs import plan_job
    from paddlefit.runs.registry import Registry
    from paddlefit.train.run import run_job

    monkeypatch.delenv("PADDLEFIT_NO_PREDICT", raising=False)
    monkeypatch.setenv("PADDLEFIT_HOME", str(tmp_path / "home"))
    run_dir = tmp_path / "run"
    spec = load_job_spec(EXAMPLES / "digits.yaml").model_copy(update={"run_dir": str(run_dir), "max_steps": 40})
    logs: list[str] = []
    out = run_job(spec, resume="never", log=logs.append)
    assert out.exit_code == 0
    pred = json.loads((run_dir / "prediction.json").read_text())
    assert pred["status"] == "predicted" and pred["calibration"] == "device" and pred["device"]["name"] == "cpu"
    assert any(line.startswith("predicted (device): step ") for line in logs)
    doc = json.loads((run_dir / "comparison.json").read_text())
    assert out.summary["comparison"]["figures"][0]["predicted"] == doc["figures"][0]["predicted"]
    fig = {f["name"]: f for f in doc["figures"]}
    assert doc["measured_steps"] == 40 - 5  # after the warm-up
    assert fig["step_time_s"]["predicted"] == pytest.approx(pred["micro_step_s"])  # no accumulation on CPU
    assert fig["peak_memory_bytes"]["measured"] == out.summary["peak_memory_bytes"]
    # the probe's peak is the trainer's to within 25 % (measured: 0.99, host allocator both)
    assert 0.75 < fig["peak_memory_bytes"]["ratio"] < 1.25
    assert fig["step_time_s"]["measured"] > 0 and fig["step_time_s"]["ratio"] > 0

    reg = Registry()
    (row,) = reg.list_runs()
    assert row["status"] == "finished" and row["exit_code"] == 0 and row["steps"] == 40 and row["resumes"] == 0
    assert row["predicted_step_s"] == pytest.approx(fig["step_time_s"]["predicted"])
    assert row["measured_step_s"] == pytest.approx(fig["step_time_s"]["measured"])
    assert row["final_loss"] == pytest.approx(out.summary["final_loss"])
    assert row["model"] == spec.model and row["device_name"] == "cpu" and row["params"] == pred["params"]

    # a resume takes the row over and reuses the prediction (same spec text, device and count)
    mtime = (run_dir / "prediction.json").stat().st_mtime_ns
    logs.clear()
    out2 = run_job(spec.model_copy(update={"max_steps": 70}), resume="auto", log=logs.append)
    assert out2.exit_code == 0 and any(line.startswith("predicting this run") for line in logs)
    (row2,) = reg.list_runs()
    assert row2["id"] == row["id"] and row2["resumes"] == 1 and row2["steps"] == 70
    assert row2["comparison_json"]["measured_steps"] == 30 - 5  # this process's steps after its warm-up
    assert (run_dir / "prediction.json").stat().st_mtime_ns != mtime  # max_steps changed the spec: predicted again

    # the CPU row is the probe's measurement, not corrected by runs (runs_calibration's docstring)
    (cpu,) = plan_job(JobOptions(config=EXAMPLES / "digits.yaml"), cpu_only=True).plan.targets
    assert cpu.calibration == "device" and cpu.runs_calibration is None

    # GPU rows are: two recorded runs of the model on a T4 (as a T4 run records them) correct the T4 row by the
    # geometric mean of measured / predicted
    for i, (pred_s, meas_s) in enumerate(((0.010, 0.015), (0.020, 0.024))):
        reg.start_run(
            {
                "run_dir": str(tmp_path / f"t4-{i}"),
                "model": spec.model,
                "device_kind": "gpu",
                "device_name": "T4",
                "status": "finished",
                "predicted_step_s": pred_s,
                "measured_step_s": meas_s,
                "comparison_json": {"measured_steps": 100},
            },
            warn=pytest.fail,
        )
    (t4,) = [
        t for t in plan_job(JobOptions(config=EXAMPLES / "digits.yaml"), gpus=["T4"]).plan.targets if t.kind == "gpu"
    ]
    factor = (1.5 * 1.2) ** 0.5
    assert t4.calibration == "runs (n=2)" and t4.runs_calibration["factor"] == pytest.approx(factor)
    assert t4.step_time_s == pytest.approx(t4.runs_calibration["uncalibrated_step_s"] * factor, rel=1e-12)
    assert any(n.startswith("calibration: runs (n=2, same model): step time x 1.342") for n in t4.notes)
    (t4_off,) = [
        t
        for t in plan_job(JobOptions(config=EXAMPLES / "digits.yaml"), gpus=["T4"], use_runs=False).plan.targets
        if t.kind == "gpu"
    ]
    assert t4_off.calibration == "published-fit" and t4_off.runs_calibration is None


@pytest.mark.slow
def test_a_corrupt_registry_warns_and_the_run_trains_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from paddlefit.train.run import run_job

    home = tmp_path / "home"
    home.mkdir()
    (home / "runs.db").write_bytes(b"not a database\x00" * 100)
    monkeypatch.setenv("PADDLEFIT_HOME", str(home))
    spec = load_job_spec(EXAMPLES / "digits.yaml").model_copy(update={"run_dir": str(tmp_path / "r"), "max_steps": 8})
    logs: list[str] = []
    out = run_job(spec, resume="never", log=logs.append)
    assert out.exit_code == 0 and out.summary["steps"] == 8
    warnings = [line for line in logs if line.startswith("warning:") and "runs.db" in line]
    assert len(warnings) == 1  # once: the run stops writing to it
    assert (home / "runs.db").read_bytes() == b"not a database\x00" * 100  # left as it was
    with pytest.raises(sqlite3.DatabaseError):
        sqlite3.connect(home / "runs.db").execute("select * from runs")


@pytest.mark.slow
def test_a_two_process_run_is_one_registry_row_written_by_rank_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from paddlefit.runs.registry import Registry
    from paddlefit.train.run import run_job

    monkeypatch.delenv("PADDLEFIT_NO_PREDICT", raising=False)
    monkeypatch.setenv("PADDLEFIT_HOME", str(tmp_path / "home"))
    run_dir = tmp_path / "dp2"
    spec = load_job_spec(EXAMPLES / "digits.yaml").model_copy(
        update={"run_dir": str(run_dir), "max_steps": 12, "devices": 2, "batch_size": 16}
    )
    out = run_job(spec, resume="never", log=lambda msg: None)
    assert out.exit_code == 0
    (row,) = Registry().list_runs()  # one row: the workers' rank 1 wrote none
    assert row["device_count"] == 2 and row["global_batch"] == 32 and row["status"] == "finished"
    doc = json.loads((run_dir / "comparison.json").read_text())
    # the launched workers found this run's prediction.json (by its key): CPU data parallel is not predicted
    assert doc["status"] == "not predicted" and doc["reason"].startswith("2 CPU processes share")
    assert doc["measured_steps"] == 12 - 5 and row["measured_step_s"] == doc["figures"][0]["measured"]


def test_a_step_time_that_is_no_measurement_is_said_so() -> None:
    """On a resume under heavy CPU load `train` printed `predicted (device): step 0.0 ms, 32,000,000,000
    samples/s`: the CPU probe's time fit reached zero at the run's batch and the planner floored it at 1e-9 s. Such
    a prediction is `not predicted` with the reason, in the log line and in the comparison."""
    from paddlefit.train.predict import prediction_line

    good = {
        "status": "predicted",
        "calibration": "device",
        "micro_step_s": 0.004,
        "optimizer_s": None,
        "peak_memory_bytes": 3 * MIB,
        "mfu": None,
        "device": {"kind": "cpu", "name": "cpu", "count": 1},
    }
    assert prediction_line(good, 2, 64) == "predicted (device): step 8.0 ms, 8,000 samples/s, peak 3.0 MiB"
    floored = {**good, "micro_step_s": 1e-9}
    line = prediction_line(floored, 1, 32)
    assert line.startswith("not predicted: the planner's step time (1e-09 s) is no measurement"), line
    assert "samples/s" not in line and "ms" not in line
    doc = comparison(
        floored,
        step_s=[0.01, 0.01],
        wait_s=[0.0, 0.0],
        global_batch=32,
        batch_size=32,
        grad_accum_steps=1,
        devices=1,
        peak_memory_bytes=100,
        warmup_steps=5,
    )
    fig = {f["name"]: f for f in doc["figures"]}
    assert doc["status"] == "not predicted" and "no measurement" in doc["reason"]
    assert fig["samples_per_s"]["predicted"] is None and fig["step_time_s"]["predicted"] is None
    assert prediction_line({**good, "micro_step_s": float("nan")}, 1, 32) == (
        "not predicted: the planner gave no step time"
    )
