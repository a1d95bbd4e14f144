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
    for rec in ({"step": 1, "loss": 2.0}, {"step": 1, "eval_loss": 1.5}, {"step": 2, "loss": 1.0},
                {"step": 2, "eval_loss": 0.5}, {"step": 3, "loss": 0.5}):  # fmt: skip
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
    assert out == ["step 2/5 (epoch 0.40): loss 0.2500  32 samples/s",
                   "step 4/5 (epoch 0.80): loss 0.2500  64 samples/s",
                   "step 5/5 (epoch 1.00): loss 0.2500  32 samples/s"]  # fmt: skip
