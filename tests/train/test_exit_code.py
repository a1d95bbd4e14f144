"""One exit code per run: whatever stop signals arrive and in which order, `train` exits with the code status.json,
the registry and `--json` record, and the reason names the first signal."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
from trainrun import ENV, train_cmd, wait_for_step, write_spec

from paddlefit.runs import Registry

SLOW = {"train": "trainhelpers:slow_digits", "train_args": {"split": "train", "delay": 0.002}}


@pytest.mark.slow
@pytest.mark.parametrize(
    "signals",
    [(signal.SIGINT, signal.SIGINT), (signal.SIGHUP, signal.SIGHUP), (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)],
    ids=["int-int", "hup-hup", "int-hup-term"],
)
def test_a_second_signal_changes_neither_the_exit_code_nor_the_reason(tmp_path: Path, signals: tuple) -> None:
    spec = write_spec(tmp_path / "s.yaml", batch_size=32, max_steps=100000, checkpoint={"every_steps": 50}, data=SLOW)
    run_dir = tmp_path / "r"
    rng = random.Random(sum(signals))
    proc = subprocess.Popen(
        train_cmd(spec, run_dir, "--json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV
    )
    wait_for_step(run_dir, 2, proc)
    delays = []
    for sig in signals:
        proc.send_signal(sig)
        delays.append(rng.uniform(0.02, 1.0))
        time.sleep(delays[-1])
    out, err = proc.communicate(timeout=120)
    status = json.loads((run_dir / "status.json").read_text())
    first = signal.Signals(signals[0]).name
    assert proc.returncode == status["exit_code"] == 143, (delays, proc.returncode, err[-2000:])
    assert status["reason"] == f"stopped by signal {first}"
    assert json.loads(out)["exit_code"] == 143
    row = Registry().get_run(Registry().find_latest_for_run_dir(run_dir))
    assert (row["status"], row["exit_code"]) == ("stopped", 143)
