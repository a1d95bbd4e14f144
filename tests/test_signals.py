"""Signals a scheduler or a terminal sends paddlefit, end to end through the real CLI (issue 27): SIGTERM and
SIGHUP during start-up exit quietly (no Paddle C++ "FatalError" block, no stale lock record); SIGHUP during
training checkpoints and stops like SIGTERM; a killed launcher or rank leaves a status that agrees with the exit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_train import ENV, train_cmd, wait_for_step, write_spec


def _popen(cmd: list[str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)


@pytest.mark.parametrize("when", ["lock", 1.0, 2.0])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_during_train_start_up_exits_quietly_and_leaves_no_lock_record(
        tmp_path: Path, when: object, sig: signal.Signals) -> None:  # fmt: skip
    """SIGTERM (or SIGHUP: a closed terminal) while `train` starts up: Paddle's import installs a C++ handler
    that printed a "FatalError: `Termination signal` is detected ... Aborted" block and left RUN_DIR/.lock.json
    naming a dead pid. Now: exit 128 + the signal, one line, no record (``lock``: the moment the lock is taken)."""
    spec, run_dir = write_spec(tmp_path / "job.yaml", max_steps=50), tmp_path / "run"
    proc = _popen(train_cmd(spec, run_dir))
    end = time.time() + 60
    if when == "lock":
        while not (run_dir / ".lock.json").exists() and time.time() < end and proc.poll() is None:
            time.sleep(0.005)
    else:
        time.sleep(float(when))
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, (proc.returncode, err)
    assert "FatalError" not in err and "Traceback" not in err and "Aborted" not in err, err
    assert not (run_dir / ".lock.json").exists(), (run_dir / ".lock.json").read_text()


def test_sighup_during_training_checkpoints_and_stops_like_sigterm(tmp_path: Path) -> None:
    """A closed terminal or a dropped ssh session (SIGHUP) mid-run: it was unhandled (exit 129, no checkpoint, no
    status.json, the registry showing the run lost); now it checkpoints and exits 143 like SIGTERM."""
    spec = write_spec(tmp_path / "job.yaml", max_steps=100000, checkpoint={"every_steps": 0, "every_minutes": 0})
    run_dir = tmp_path / "run"
    proc = _popen(train_cmd(spec, run_dir))
    step = wait_for_step(run_dir, 3, proc)
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, (proc.returncode, err)
    status = json.loads((run_dir / "status.json").read_text())
    assert status["exit_code"] == 143 and "SIGHUP" in status["reason"], status
    ckpts = sorted((run_dir / "checkpoints").glob("step-*"))
    assert ckpts and int(ckpts[-1].name.split("-")[1]) >= step, ckpts
    assert "Traceback" not in err, err
