"""One writer per run directory: the lock, its release on SIGKILL, and `train` refusing a directory in use."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from trainrun import ENV, SharedRun, run, train_cmd, wait_for_step, write_spec

from paddlefit.errors import PaddlefitError
from paddlefit.rundir.layout import LOCK_INFO_FILE
from paddlefit.train.lock import RunDirInUseError, RunDirLock


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` (relative path -> sha256 of its bytes, plus its mtime)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() + f"@{p.stat().st_mtime_ns}"
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


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
    code = (
        "import sys, time; from paddlefit.train.lock import RunDirLock; lock = RunDirLock(sys.argv[1]).acquire(); "
        "print('locked', flush=True); time.sleep(600)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path / "r")], stdout=subprocess.PIPE, text=True, env=ENV
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        with pytest.raises(RunDirInUseError, match=f"pid {proc.pid} "):
            RunDirLock(tmp_path / "r").acquire()
    finally:  # never leave the sleeping holder behind, also when an assertion fails
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    lock = RunDirLock(tmp_path / "r").acquire()  # no stale lock: the holder's record is stale, the lock is not
    assert json.loads((tmp_path / "r" / LOCK_INFO_FILE).read_text())["pid"] == os.getpid()
    lock.release()


def test_train_on_a_locked_run_dir_exits_2_and_touches_nothing(tmp_path: Path, finished_run: SharedRun) -> None:
    spec, run_dir = finished_run.spec, finished_run.copy(tmp_path / "r")
    with RunDirLock(run_dir):
        before = _tree(run_dir)
        r = run(train_cmd(spec, run_dir, "--resume", "never", "--json"))
        assert r.returncode == 2, r.stderr[-2000:]
        assert f"is in use by pid {os.getpid()}" in r.stderr and "Traceback" not in r.stderr
        assert json.loads(r.stdout)["error"]["exit_code"] == 2
        assert _tree(run_dir) == before  # not even --resume never's clean-up ran
        # a worker started without paddlefit's launcher (the multi-node targets) locks from rank 0 itself
        (tmp_path / "w.yaml").write_text(spec.read_text())
        worker = [
            sys.executable,
            "-m",
            "paddlefit.train.worker",
            "--spec",
            str(tmp_path / "w.yaml"),
            "--run-dir",
            str(run_dir),
        ]
        w = run(worker)
        assert w.returncode == 2 and "is in use by" in w.stderr, w.stderr[-2000:]
        assert _tree(run_dir) == before  # no status.json written into another run's directory
    r = run(train_cmd(spec, run_dir, "--resume", "never", "--overwrite"))  # unlocked: it replaces the finished run
    assert r.returncode == 0 and "--resume never: removed 1 checkpoint(s)" in r.stderr, r.stderr[-2000:]
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step-00000002"]
    assert not list(run_dir.glob(".checkpoints-old-*"))


@pytest.mark.slow
def test_two_trains_on_one_run_dir_one_runs_one_refused(tmp_path: Path) -> None:
    """The issue's case: a second `train` a moment after the first is refused; `export` reads the run meanwhile;
    the first goes on alone (stopped here by SIGTERM) and its metrics.jsonl has each of its steps once."""
    spec = write_spec(
        tmp_path / "s.yaml",
        batch_size=32,
        max_steps=2000,
        checkpoint={"every_steps": 2},
        data={"train": "trainhelpers:slow_digits", "train_args": {"split": "train", "delay": 0.002}},
    )
    run_dir = tmp_path / "r"
    first = subprocess.Popen(
        train_cmd(spec, run_dir), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    wait_for_step(run_dir, 3, first)
    second = run(train_cmd(spec, run_dir))
    assert second.returncode == 2 and f"in use by pid {first.pid} " in second.stderr, second.stderr[-2000:]
    assert f"train {spec} --run-dir {run_dir}" in second.stderr  # the holder's command
    # a reader needs no lock: export takes the newest complete checkpoint while the run writes more
    exported = run(
        [sys.executable, "-m", "paddlefit.cli.main", "export", str(run_dir), "--out", str(tmp_path / "x"), "--json"]
    )
    assert exported.returncode == 0, exported.stderr[-2000:]
    assert json.loads(exported.stdout)["max_abs_diff"] <= 1e-5
    assert first.poll() is None
    first.send_signal(signal.SIGTERM)
    _, err = first.communicate(timeout=120)
    assert first.returncode == 143, err[-2000:]
    steps = [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 2


def test_a_lock_handed_to_a_child_lasts_until_the_child_exits(tmp_path: Path) -> None:
    """`train --devices N` hands the locked descriptor to the launcher and workers: killing the `train` process
    (SIGKILL, so its release never runs) or its release while a worker lives leaves the directory locked."""
    from paddlefit.train.lock import LOCK_ENV, LOCK_FD_ENV, held_by_parent

    run_dir = tmp_path / "r"
    warnings: list[str] = []
    lock = RunDirLock(run_dir, warnings.append).acquire()
    env = lock.share()
    fd = int(env[LOCK_FD_ENV])
    assert env[LOCK_ENV] == str(run_dir.resolve())
    code = (
        "import os, sys, time; from paddlefit.train.lock import held_by_parent; "
        "print(held_by_parent(sys.argv[1]), flush=True); time.sleep(600)"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(run_dir)],
        stdout=subprocess.PIPE,
        text=True,
        env={**ENV, **env},
        pass_fds=(fd,),
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "True"
        lock.release()  # as if the launcher exited and left a worker behind
        assert warnings and "still hold" in warnings[0]
        with pytest.raises(RunDirInUseError, match=f"pid {os.getpid()} "):  # the record stays: it names the run
            RunDirLock(run_dir).acquire()
    finally:
        child.kill()
        child.wait(timeout=30)
    RunDirLock(run_dir).acquire().release()  # the last holder is gone: no stale lock
    # the variable alone (left in an environment, or a descriptor of another file) is not a lock held
    os.environ[LOCK_ENV] = str(run_dir.resolve())
    try:
        assert not held_by_parent(run_dir)
        os.environ[LOCK_FD_ENV] = "0"
        assert not held_by_parent(run_dir)
    finally:
        os.environ.pop(LOCK_ENV)
        os.environ.pop(LOCK_FD_ENV)


def test_the_launcher_hands_the_lock_on_and_stops_when_train_dies(tmp_path: Path) -> None:
    """distlaunch passes the inherited descriptor to the processes it starts (Paddle's launcher would close it)
    and takes SIGTERM when the `train` process dies (PR_SET_PDEATHSIG), so a SIGKILLed `train` stops its run."""
    from paddlefit.train.distlaunch import secret_env_popen

    lock = RunDirLock(tmp_path / "r").acquire()
    fd = lock._fd
    assert fd is not None
    popen = secret_env_popen({}, keep_fds=(fd,))
    check = f"import os; print(os.path.samestat(os.fstat({fd}), os.stat({str(tmp_path / 'r' / '.lock')!r})))"
    with popen([sys.executable, "-c", check], stdout=subprocess.PIPE, text=True, pass_fds=()) as p:
        assert p.communicate(timeout=30)[0].strip() == "True"
    lock.release()
    # a middle process (`train`) starts a launcher that asks for SIGTERM on its parent's death, then is SIGKILLed
    launcher = (
        "import os, signal, sys, time; os.environ['PADDLEFIT_LOCK_PID'] = str(os.getppid()); "
        "from paddlefit.train.distlaunch import stop_with_parent; stop_with_parent(); "
        "signal.signal(signal.SIGTERM, lambda *a: (print('sigterm', flush=True), sys.exit(0))); "
        "print('ready', flush=True); time.sleep(600)"
    )
    train = (
        "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', sys.argv[1]]); "
        "print(p.pid, flush=True); time.sleep(600)"
    )
    out = tmp_path / "launcher.out"
    with open(out, "w") as f:
        middle = subprocess.Popen([sys.executable, "-c", train, launcher], stdout=f, env=ENV)
    deadline = time.time() + 30
    while "ready" not in out.read_text() and time.time() < deadline:
        time.sleep(0.05)
    middle.kill()
    middle.wait(timeout=30)
    while "sigterm" not in out.read_text() and time.time() < deadline:
        time.sleep(0.05)
    assert "sigterm" in out.read_text()


def test_a_run_dir_that_is_a_file_or_under_a_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(PaddlefitError, match=r"`--run-dir .*f` is a file, not a directory"):
        RunDirLock(tmp_path / "f").acquire()
    with pytest.raises(PaddlefitError, match=r"is not writable \(Not a directory\)"):
        RunDirLock(tmp_path / "f" / "sub").acquire()


def test_run_job_in_threads_one_runs_the_other_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Library use: run_job from a thread (no signal handlers there) works, and a second run_job while one runs
    in this process is refused at once, whatever its run dir (Paddle's state is per process)."""
    import threading

    from paddlefit.jobspec.spec import load_job_spec
    from paddlefit.train import run as run_mod
    from paddlefit.train.guards import StopFlag

    spec = load_job_spec(write_spec(tmp_path / "s.yaml", max_steps=2)).model_copy(
        update={"run_dir": str(tmp_path / "a")}
    )
    result: dict[str, object] = {}
    flag = StopFlag()
    t = threading.Thread(target=flag.install)  # signal.signal would raise ValueError outside the main thread
    t.start()
    t.join()
    busy = pytest.raises(PaddlefitError, match=r"another run_job \(run dir .*busy\) is running in this process")
    with run_mod._one_run_per_process(tmp_path / "busy"), busy:
        run_mod.run_job(spec.model_copy(update={"run_dir": str(tmp_path / "b")}), log=lambda m: None)
    assert not (tmp_path / "b").exists()

    def go() -> None:
        result["outcome"] = run_mod.run_job(spec, resume="never", log=lambda m: None)

    t = threading.Thread(target=go)
    t.start()
    t.join(timeout=300)
    assert result["outcome"].exit_code == 0  # type: ignore[attr-defined]


def test_export_of_a_run_in_training_takes_another_checkpoint_when_its_choice_is_pruned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A training run prunes old checkpoints as it writes (keep_last): export's newest could vanish between
    choosing and reading it ("model.pdparams cannot be loaded", "no checkpoint that verifies" in 6 of 60 exports
    of a run checkpointing every step). It reads the weights once, checked against the manifest, and chooses
    again when the checkpoint is gone."""
    import shutil

    from paddlefit.jobspec.spec import load_job_spec
    from paddlefit.train import export as export_mod
    from paddlefit.train.run import run_job

    run_dir = tmp_path / "r"
    spec = load_job_spec(write_spec(tmp_path / "s.yaml", max_steps=2, checkpoint={"every_steps": 1})).model_copy(
        update={"run_dir": str(run_dir), "inputs": ["float32[1,8,8]"]}
    )
    assert run_job(spec, resume="never", log=lambda m: None).exit_code == 0
    real = export_mod._read_weights
    pruned: list[str] = []

    def pruned_first(path: Path):
        if not pruned:  # the trainer prunes the chosen checkpoint before export reads it
            pruned.append(path.name)
            shutil.rmtree(path)
        return real(path)

    monkeypatch.setattr(export_mod, "_read_weights", pruned_first)
    res = export_mod.export_run(run_dir, out_dir=tmp_path / "x")
    assert pruned == ["step-00000002"] and res.checkpoint.name == "step-00000001" and res.max_abs_diff <= 1e-5
    shutil.rmtree(run_dir / "checkpoints" / "step-00000001")
    with pytest.raises(PaddlefitError, match="has no checkpoint that verifies"):
        export_mod.export_run(run_dir, out_dir=tmp_path / "y")


def test_a_filesystem_without_locks_warns_and_runs_unprotected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno
    import fcntl

    def no_locks(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    warnings: list[str] = []
    lock = RunDirLock(tmp_path / "r", warnings.append).acquire()
    assert not lock.locked and lock.share() == {} and "cannot lock files (No locks available)" in warnings[0]
    lock.release()


def test_the_holder_record_writes_no_credential_of_the_command_line(tmp_path: Path, monkeypatch) -> None:
    token = "ghp_" + "s3cr3tVALUE" * 4
    monkeypatch.setattr(sys, "argv", ["paddlefit", "train", "job.yaml", "--run-dir", f"https://u:{token}@h/r"])
    with RunDirLock(tmp_path / "r"):
        record = (tmp_path / "r" / LOCK_INFO_FILE).read_text()
    assert "s3cr3t" not in record and "train job.yaml --run-dir '<redacted>'" in record
