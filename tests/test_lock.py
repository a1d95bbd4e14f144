"""One writer per run directory: the lock, its release on SIGKILL, and `train` refusing a directory in use."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from paddlefit.train.lock import LOCK_INFO_FILE, RunDirInUseError, RunDirLock
from test_train import ENV, run, train_cmd, wait_for_step, write_spec


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` (relative path -> sha256 of its bytes, plus its mtime)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() + f"@{p.stat().st_mtime_ns}"
            for p in sorted(root.rglob("*")) if p.is_file()}  # fmt: skip


def test_a_second_lock_is_refused_with_the_holder_named_until_released(tmp_path: Path) -> None:
    first = RunDirLock(tmp_path / "r").acquire()
    info = json.loads((tmp_path / "r" / LOCK_INFO_FILE).read_text())
    assert info["pid"] == os.getpid() and info["host"] == socket.gethostname()
    with pytest.raises(RunDirInUseError) as err:
        RunDirLock(tmp_path / "r").acquire()
    msg = str(err.value)
    assert f"is in use by pid {os.getpid()} on host {socket.gethostname()} since {info['since']}" in msg
    assert "started by `" in msg and "wait for it, or choose another --run-dir" in msg
    first.release()
    assert not (tmp_path / "r" / LOCK_INFO_FILE).exists()
    with RunDirLock(tmp_path / "r") as again:
        assert again.locked


def test_the_kernel_releases_the_lock_of_a_sigkilled_holder(tmp_path: Path) -> None:
    code = ("import sys, time; from paddlefit.train.lock import RunDirLock; lock = RunDirLock(sys.argv[1]).acquire(); "
            "print('locked', flush=True); time.sleep(600)")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "r")], stdout=subprocess.PIPE, text=True,
                            env=ENV)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    with pytest.raises(RunDirInUseError, match=f"pid {proc.pid} "):
        RunDirLock(tmp_path / "r").acquire()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    lock = RunDirLock(tmp_path / "r").acquire()  # no stale lock: the holder's record is stale, the lock is not
    assert json.loads((tmp_path / "r" / LOCK_INFO_FILE).read_text())["pid"] == os.getpid()
    lock.release()


def test_train_on_a_locked_run_dir_exits_2_and_touches_nothing(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "s.yaml", max_steps=2)
    run_dir = tmp_path / "r"
    assert run(train_cmd(spec, run_dir)).returncode == 0
    with RunDirLock(run_dir):
        before = _tree(run_dir)
        r = run(train_cmd(spec, run_dir, "--resume", "never", "--json"))
        assert r.returncode == 2, r.stderr[-2000:]
        assert f"is in use by pid {os.getpid()}" in r.stderr and "Traceback" not in r.stderr
        assert json.loads(r.stdout)["error"]["exit_code"] == 2
        assert _tree(run_dir) == before  # not even --resume never's clean-up ran
        # a worker started without paddlefit's launcher (the multi-node targets) locks from rank 0 itself
        (tmp_path / "w.yaml").write_text(spec.read_text())
        worker = [sys.executable, "-m", "paddlefit.train.worker", "--spec", str(tmp_path / "w.yaml"), "--run-dir",
                  str(run_dir)]  # fmt: skip
        w = run(worker)
        assert w.returncode == 2 and "is in use by" in w.stderr, w.stderr[-2000:]
        assert _tree(run_dir) == before  # no status.json written into another run's directory
    r = run(train_cmd(spec, run_dir, "--resume", "never"))  # unlocked: --resume never clears the old run
    assert r.returncode == 0 and "--resume never: removed 1 checkpoint(s)" in r.stderr, r.stderr[-2000:]
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step-00000002"]
    assert not list(run_dir.glob(".checkpoints-old-*"))


@pytest.mark.slow
def test_two_trains_on_one_run_dir_one_runs_one_refused(tmp_path: Path) -> None:
    """The issue's case: a second `train` a moment after the first is refused; `export` reads the run meanwhile;
    the first goes on alone (stopped here by SIGTERM) and its metrics.jsonl has each of its steps once."""
    spec = write_spec(tmp_path / "s.yaml", batch_size=32, max_steps=2000, checkpoint={"every_steps": 2},
                      data={"train": "trainhelpers:slow_digits", "train_args": {"split": "train", "delay": 0.002}})
    run_dir = tmp_path / "r"
    first = subprocess.Popen(train_cmd(spec, run_dir), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)  # fmt: skip
    wait_for_step(run_dir, 3, first)
    second = run(train_cmd(spec, run_dir))
    assert second.returncode == 2 and f"in use by pid {first.pid} " in second.stderr, second.stderr[-2000:]
    assert f"train {spec} --run-dir {run_dir}" in second.stderr  # the holder's command
    # a reader needs no lock: export takes the newest complete checkpoint while the run writes more
    exported = run([sys.executable, "-m", "paddlefit.cli.main", "export", str(run_dir), "--out", str(tmp_path / "x"),
                    "--json"])  # fmt: skip
    assert exported.returncode == 0, exported.stderr[-2000:]
    assert json.loads(exported.stdout)["max_abs_diff"] <= 1e-5
    assert first.poll() is None
    first.send_signal(signal.SIGTERM)
    _, err = first.communicate(timeout=120)
    assert first.returncode == 143, err[-2000:]
    steps = [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 2
