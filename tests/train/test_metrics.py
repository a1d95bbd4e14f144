"""paddlefit.train.metrics: metrics.jsonl truncation on resume and the log-line progress."""

from __future__ import annotations

import json
import time
from pathlib import Path

from paddlefit.train.metrics import LogLines, MetricsLog


def test_metrics_log_truncates_after_the_resumed_step(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path, visualdl=False)
    for step in (1, 2, 3, 4):
        log.write({"step": step, "loss": 1.0 / step}, ("loss",))
    log.close()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "lo')  # cut by a kill
    MetricsLog.truncate_after(tmp_path, 2)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2]


def test_metrics_log_truncation_drops_the_eval_at_the_resumed_step(tmp_path: Path) -> None:
    """The resumed run evaluates at the checkpoint's step again (an epoch's end, or a finished run): its earlier eval
    line goes, the train line of that step stays."""
    log = MetricsLog(tmp_path, visualdl=False)
    for rec in (
        {"step": 1, "loss": 2.0},
        {"step": 1, "eval_loss": 1.5},
        {"step": 2, "loss": 1.0},
        {"step": 2, "eval_loss": 0.5},
        {"step": 3, "loss": 0.5},
    ):
        log.write(rec)
    log.close()
    MetricsLog.truncate_after(tmp_path, 2)
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all(0 <= time.time() - x.pop("time") < 60 for x in lines)  # each line's wall clock, Unix seconds
    assert lines == [{"step": 1, "loss": 2.0}, {"step": 1, "eval_loss": 1.5}, {"step": 2, "loss": 1.0}]


def test_log_lines_report_every_n_steps_with_the_rate_since_the_last_line() -> None:
    out: list[str] = []
    p = LogLines(out.append, every=2)
    p.start(0, 5)
    for step, secs in zip(range(1, 6), (1.0, 3.0, 1.0, 1.0, 2.0), strict=True):
        p.update(step, step / 5, 0.25, 64, secs)
    assert out == [
        "step 2/5 (epoch 0.40): loss 0.2500  32 samples/s over the last 2 step(s), 32 since step 0",
        "step 4/5 (epoch 0.80): loss 0.2500  64 samples/s over the last 2 step(s), 43 since step 0",
        "step 5/5 (epoch 1.00): loss 0.2500  32 samples/s over the last 1 step(s), 40 since step 0",
    ]


def test_a_fast_window_after_a_resume_is_said_beside_the_steady_rate() -> None:
    """`step 210/630 (epoch 5.00): ... 2,428 samples/s` between lines of about 1,000: the first 10 steps
    after a resume at step 200, while the machine's other processes paused. The line says the window and gives the
    rate since the resume beside it."""
    out: list[str] = []
    p = LogLines(out.append, every=10)
    p.start(200, 630)
    for step in range(201, 241):
        p.update(step, step / 42, 0.1, 32, 32 / (2428 if step <= 210 else 1000))
    assert out[0] == (
        "step 210/630 (epoch 5.00): loss 0.1000  2,428 samples/s over the last 10 step(s), 2,428 since step 200"
    )
    assert out[-1].endswith("1,000 samples/s over the last 10 step(s), 1,172 since step 200")


def test_the_worker_keeps_the_trainers_status_with_its_step(tmp_path, monkeypatch):
    """A launched rank 0 whose trainer recorded how the run ended (with the step reached) does not overwrite it
    with its own step -1 record: `run_status` tells this run's status.json from another's."""
    from paddlefit.rundir.files import run_status, write_status
    from paddlefit.rundir.layout import STATUS_FILE

    monkeypatch.setenv("PADDLEFIT_RUN_TOKEN", "run-a")
    assert run_status(tmp_path) is None  # nothing yet
    write_status(tmp_path, 2, "at step 40: boom", 40)
    assert run_status(tmp_path) == {"exit_code": 2, "reason": "at step 40: boom", "step": 40, "token": "run-a"}
    monkeypatch.setenv("PADDLEFIT_RUN_TOKEN", "run-b")  # an earlier run's file
    assert run_status(tmp_path) is None
    (tmp_path / STATUS_FILE).write_text("[" * 5000)  # hostile: deep, never a RecursionError
    assert run_status(tmp_path) is None


def test_a_resume_leaves_a_record_of_the_steps_it_lost(tmp_path: Path) -> None:
    """The cut of a resume deleted the lost steps' lines, so nothing could tell "steps 3-5 lost". The
    resume's record (steps lost and run again, their measured time, the time down) is written in the same rewrite,
    and an earlier resume's record survives a later resume."""
    log = MetricsLog(tmp_path, visualdl=False)
    for step in (1, 2, 3, 4, 5):
        log.write({"step": step, "loss": 1.0, "step_time_s": 0.25 * step})
    log.write({"step": 2, "eval_loss": 0.5})
    log.close()
    last = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])["time"]
    rec = MetricsLog.truncate_after(tmp_path, 2, resumed=True)
    assert rec is not None
    assert rec["event"] == "resume" and rec["from_step"] == rec["step"] == 2 and rec["lost_steps"] == [3, 5]
    assert rec["lost_step_count"] == 3 and abs(rec["lost_compute_s"] - 0.25 * (3 + 4 + 5)) < 1e-9
    assert 0 <= rec["down_s"] < 60 and abs(rec["time"] - rec["down_s"] - last) < 0.01
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(x["step"], x.get("event")) for x in lines] == [(1, None), (2, None), (2, "resume")]
    MetricsLog.truncate_after(tmp_path, 2, resumed=True)  # killed again before a step: a second resume at 2
    again = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [x.get("lost_steps") for x in again if x.get("event")] == [[3, 5], None]
    assert MetricsLog.truncate_after(tmp_path, 0) is None  # a fresh start (--resume never): no record, no lines
    assert (tmp_path / "metrics.jsonl").read_text() == ""
