"""Signals a scheduler or a terminal sends paddlefit, end to end through the real CLI: SIGTERM and
SIGHUP during start-up exit quietly (no Paddle C++ "FatalError" block, no stale lock record); SIGHUP during
training checkpoints and stops like SIGTERM; a killed launcher or rank leaves a status that agrees with the exit.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from trainrun import ENV, launched_children, train_cmd, wait_for_step, write_spec


def _default_stop_signals() -> None:
    """In the child before exec: SIGTERM, SIGINT and SIGHUP at their defaults, as from a terminal or a scheduler.
    A test runner started under ``nohup`` (or by a job runner that ignores SIGHUP) passes SIG_IGN down, and
    paddlefit rightly leaves an ignored signal ignored."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _popen(cmd: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, preexec_fn=_default_stop_signals
    )


@pytest.mark.parametrize("when", ["lock", 0.5, 1.2])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_during_train_start_up_exits_quietly_and_leaves_no_lock_record(
    tmp_path: Path, when: object, sig: signal.Signals
) -> None:
    """SIGTERM (or SIGHUP: a closed terminal) while `train` starts up: Paddle's import installs a C++ handler
    that printed a "FatalError: `Termination signal` is detected ... Aborted" block and left RUN_DIR/.lock.json
    naming a dead pid. Now: exit 128 + the signal, one line, no record (``lock``: the moment the lock is taken;
    a timed signal that lands once the loop runs is the graceful stop instead: 143 with status.json)."""
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
    in_loop = (run_dir / "status.json").exists()
    assert proc.returncode == (143 if in_loop else 128 + sig), (proc.returncode, err)
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


def test_a_nohup_run_trains_through_sighup_and_still_stops_on_sigterm(tmp_path: Path) -> None:
    """``nohup paddlefit train ...`` then a closed ssh session: SIGHUP is ignored (nohup set it to SIG_IGN), yet
    the loop caught it and stopped the run. Now an ignored SIGHUP stays ignored; SIGTERM still stops it (143)."""
    spec = write_spec(tmp_path / "job.yaml", max_steps=100000, checkpoint={"every_steps": 0, "every_minutes": 0})
    run_dir = tmp_path / "run"

    def nohup() -> None:
        _default_stop_signals()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    proc = subprocess.Popen(
        train_cmd(spec, run_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, preexec_fn=nohup
    )
    step = wait_for_step(run_dir, 3, proc)
    proc.send_signal(signal.SIGHUP)
    later = wait_for_step(run_dir, step + 20, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    status = json.loads((run_dir / "status.json").read_text())
    assert proc.returncode == status["exit_code"] == 143 and "SIGTERM" in status["reason"], (status, err[-2000:])
    assert status["step"] >= later, (status, later)


def _slow_spec(tmp_path: Path, steps: int) -> Path:
    return write_spec(
        tmp_path / "s.yaml",
        max_steps=steps,
        checkpoint={"every_steps": 0, "every_minutes": 0},
        data={"train": "trainhelpers:slow_digits", "train_args": {"split": "train", "delay": 0.002}},
    )


@pytest.mark.slow
def test_a_sigkilled_launcher_stops_its_workers_and_train_exits_with_their_status(tmp_path: Path) -> None:
    """SIGKILL of Paddle's launcher (``paddlefit.train.distlaunch``) of `train --devices 2`: `train` exited 1 at
    once while both workers trained on as orphans and later recorded status finished, exit 0. Now each worker
    takes SIGTERM when the launcher dies: they checkpoint and stop, `train` waits for them, and its exit code is
    the status.json one (143)."""
    import psutil

    run_dir = tmp_path / "r"
    proc = _popen(train_cmd(_slow_spec(tmp_path, 400), run_dir, "--devices", "2"))
    procs = {}
    try:
        wait_for_step(run_dir, 5, proc)
        procs = launched_children(proc)
        assert set(procs) == {"launcher", "0", "1"}, procs
        procs["launcher"].kill()
        _, err = proc.communicate(timeout=180)
        _, alive = psutil.wait_procs([procs["0"], procs["1"]], timeout=10)
        assert alive == [], alive
        status = json.loads((run_dir / "status.json").read_text())
        assert proc.returncode == status["exit_code"] == 143, (proc.returncode, status, err[-2000:])
        assert "launcher ended by signal SIGKILL" in err, err[-2000:]
        assert status["step"] < 400 and (run_dir / "checkpoints" / f"step-{status['step']:08d}").is_dir(), status
    finally:
        for p in procs.values():
            with contextlib.suppress(psutil.Error):
                p.kill()


@pytest.mark.slow
def test_a_sigkilled_rank_1_leaves_a_status_a_failed_registry_row_and_no_traceback(tmp_path: Path) -> None:
    """SIGKILL of rank 1 of `train --devices 2` mid-run: rank 0's all-reduce raised a gloo RuntimeError whose
    traceback reached the terminal twice (relayed, then in the reason), no status.json was written and the
    registry showed the run lost. Now rank 0 catches the failed collective: status.json and the registry record
    exit 1 at the step reached, the terminal gets one line for it, and the launcher's line names rank 1."""
    import psutil

    run_dir = tmp_path / "r"
    proc = _popen(train_cmd(_slow_spec(tmp_path, 400), run_dir, "--devices", "2"))
    procs = {}
    try:
        reached = wait_for_step(run_dir, 5, proc)
        procs = launched_children(proc)
        procs["1"].kill()
        _, err = proc.communicate(timeout=180)
    finally:
        for p in procs.values():
            with contextlib.suppress(psutil.Error):
                p.kill()
    assert proc.returncode == 1, (proc.returncode, err[-3000:])
    # one line for gloo's error, never printed twice (none when the launcher stopped rank 0 before its collective)
    assert "Traceback" not in err and err.count("pair.cc") <= 1, err[-3000:]
    assert "another rank was killed or lost" in err, err[-3000:]
    # the surviving rank 0 may be named first ("rank 0 ended by code 1, rank 1 ended by signal SIGKILL")
    assert "rank 1 ended by signal SIGKILL" in err and "paddlefit: rank " in err, err[-3000:]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["exit_code"] == 1 and status["step"] >= reached, status
    assert (
        "another rank was killed or lost" in status["reason"] and "rank 1 ended by signal SIGKILL" in status["reason"]
    ), status
    r = subprocess.run(
        [sys.executable, "-m", "paddlefit.cli.main", "runs", "--json"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=60,
    )
    rows = [x for x in json.loads(r.stdout) if Path(x["run_dir"]).resolve() == run_dir.resolve()]
    assert rows and rows[-1]["status"] == "failed" and rows[-1]["exit_code"] == 1, rows
