"""Run directories never nest (by real path), and pruning or `--resume never` never delete a
directory holding another run's live lock."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from trainrun import SharedRun, run, train_cmd

from paddlefit.errors import PaddlefitError
from paddlefit.train.checkpoint import CheckpointError, CheckpointStore
from paddlefit.train.lock import RunDirLock


def _files(d: Path) -> None:
    for name in ("model.pdparams", "optimizer.pdopt", "trainer.json", "rng.json"):
        (d / name).write_text(name)


def test_a_run_dir_inside_or_around_another_is_refused(tmp_path: Path) -> None:
    outer = RunDirLock(tmp_path / "A").acquire()  # a running train: .lock and .lock.json
    ckpt = tmp_path / "A" / "checkpoints" / "step-00000010"
    ckpt.mkdir(parents=True)
    with pytest.raises(PaddlefitError, match=f"is inside the run directory {tmp_path / 'A'} "):
        RunDirLock(ckpt).acquire()
    assert not (ckpt / ".lock").exists()
    (tmp_path / "link").symlink_to(ckpt)  # by real path
    with pytest.raises(PaddlefitError, match="is inside the run directory"):
        RunDirLock(tmp_path / "link").acquire()
    outer.release()  # finished: its .lock file stays beside job.yaml, and it is still a run directory
    (tmp_path / "A" / "job.yaml").write_text("model: x\n")
    with pytest.raises(PaddlefitError, match="is inside the run directory"):
        RunDirLock(tmp_path / "A" / "sub").acquire()
    inner = RunDirLock(tmp_path / "X" / "deep" / "B").acquire()  # started first, below what comes next
    with pytest.raises(PaddlefitError, match=f"holds the run directory {tmp_path / 'X' / 'deep' / 'B'} "):
        RunDirLock(tmp_path / "X").acquire()
    inner.release()
    project = tmp_path / "project"  # a folder with the job spec and a .lock of some other tool is no run dir
    (project / "runs").mkdir(parents=True)
    (project / "job.yaml").write_text("model: x\n")
    RunDirLock(project / "runs" / "r1").acquire().release()


def test_resume_never_and_pruning_keep_a_directory_holding_a_live_lock(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "run" / "checkpoints", keep_last=1)
    store.save(1, _files)
    # a run that got into the store (started before the nesting check, or a copy moved in under it)
    (store.path_for(1) / "inner").mkdir()
    import fcntl

    fd = os.open(store.path_for(1) / "inner" / ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        store.save(2, _files)  # keep_last 1 would prune step 1
        assert (store.path_for(1) / "inner" / ".lock").exists()
        with pytest.raises(CheckpointError, match=r"another running `train` holds .*inner inside it; nothing was"):
            store.remove_all()
        assert store.path_for(1).is_dir() and store.path_for(2).is_dir()
    finally:
        os.close(fd)
    store.save(3, _files)  # the lock is gone, but a run's directory is still no checkpoint's file: kept
    assert [p.name for p in store.list()] == ["step-00000003", "step-00000001"]
    shutil.rmtree(store.path_for(1) / "inner")
    store.save(4, _files)
    assert [p.name for p in store.list()] == ["step-00000004"]


def test_train_into_another_runs_checkpoint_exits_2_naming_both(tmp_path: Path, finished_run: SharedRun) -> None:
    """Before: accepted; the second run wrote its lock and metrics into A's checkpoint, which A's pruning deleted."""
    spec, a = finished_run.spec, finished_run.copy(tmp_path / "A")  # its one checkpoint: step 2, the last
    inner = a / "checkpoints" / "step-00000002"
    before = sorted(p.name for p in inner.iterdir())
    r = run(train_cmd(spec, inner))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"--run-dir {inner}` is inside the run directory {a} " in r.stderr.replace("\n", " "), r.stderr
    assert sorted(p.name for p in inner.iterdir()) == before
    shutil.copytree(a, tmp_path / "outer" / "A")
    r = run(train_cmd(spec, tmp_path / "outer"))
    assert r.returncode == 2 and f"holds the run directory {tmp_path / 'outer' / 'A'} " in r.stderr.replace("\n", " ")


def _finished_run_in(ckpt: Path) -> None:
    """A finished run directory (its lock no longer held) that got inside a checkpoint directory."""
    inner = ckpt / "inner"
    (inner / "checkpoints").mkdir(parents=True)
    for name in (".lock", "job.yaml", "metrics.jsonl"):
        (inner / name).write_text("x\n")


def test_pruning_and_resume_never_delete_nothing_but_a_checkpoints_own_files(tmp_path: Path) -> None:
    """Before, a finished run inside a checkpoint (its lock no longer held) was deleted
    by pruning and `--resume never`, and so was any file of the user."""
    store = CheckpointStore(tmp_path / "run" / "checkpoints", keep_last=1)
    store.save(1, _files)
    _finished_run_in(store.path_for(1))
    store.save(2, _files)
    (store.path_for(2) / "notes.txt").write_text("mine\n")
    store.save(3, _files)  # keep_last 1 would prune steps 1 and 2
    assert (store.path_for(1) / "inner" / "job.yaml").read_text() == "x\n"
    assert (store.path_for(2) / "notes.txt").read_text() == "mine\n"
    with pytest.raises(
        CheckpointError,
        match=r"holds .*step-00000001/inner, which is not a checkpoint's file; "
        "nothing was deleted",
    ):
        store.remove_all()
    assert [p.name for p in store.list()] == ["step-00000003", "step-00000002", "step-00000001"]
    assert store.drop_after(1, "--resume x", lambda _m: None) == [store.path_for(3)]  # only what went is named
    assert store.path_for(2).is_dir()
    shutil.rmtree(store.path_for(1) / "inner")
    (store.path_for(2) / "notes.txt").unlink()
    (store.root / "aaaa").mkdir()  # a directory of the user beside the checkpoints
    with pytest.raises(CheckpointError, match=r"holds .*checkpoints/aaaa, which is not"):
        store.remove_all()
    (store.root / "aaaa").rmdir()
    assert [p.name for p in store.remove_all()] == ["step-00000002", "step-00000001"]
    assert not store.root.exists()


def test_a_run_dir_too_large_to_scan_is_refused_not_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, a run dir holding more directories than the scan looks at was accepted
    however many runs were below them."""
    from paddlefit.train import nesting

    monkeypatch.setattr(nesting, "MAX_SCAN_DIRS", 5)
    big = tmp_path / "big"
    for i in range(6):
        (big / "checkpoints" / "aaaa" / f"d{i}").mkdir(parents=True)
    RunDirLock(big / "checkpoints" / "zzzz" / "inner").acquire().release()  # sorted after the decoys
    with pytest.raises(PaddlefitError, match=r"holds more than 5 directories, too many to check"):
        RunDirLock(big).acquire()
    assert not (big / ".lock").exists()


def test_a_checkpoints_dir_that_is_a_symlink_is_refused_naming_both(tmp_path: Path) -> None:
    """Before, runs/sb/checkpoints -> runs/sa/checkpoints was accepted, and both runs
    wrote, resumed and pruned one store."""
    sa = RunDirLock(tmp_path / "sa").acquire()  # a running train with its store
    CheckpointStore(tmp_path / "sa" / "checkpoints").save(4, _files)
    (tmp_path / "sb").mkdir()
    (tmp_path / "sb" / "checkpoints").symlink_to(tmp_path / "sa" / "checkpoints")
    with pytest.raises(
        PaddlefitError,
        match=rf"`--run-dir {tmp_path / 'sb'}`: its checkpoints "
        rf"{tmp_path / 'sb' / 'checkpoints'} resolve to "
        rf"{tmp_path / 'sa' / 'checkpoints'} \(the run directory "
        rf"{tmp_path / 'sa'}'s\)",
    ):
        RunDirLock(tmp_path / "sb").acquire()
    assert not (tmp_path / "sb" / ".lock").exists()
    sa.release()
    (tmp_path / "sc").mkdir()  # a link to a plain folder: still not this run's own
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "sc" / "checkpoints").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(PaddlefitError, match=r"\(not this run directory's\)"):
        RunDirLock(tmp_path / "sc").acquire()
    (tmp_path / "link").symlink_to(tmp_path / "sa")  # a run dir reached through a link keeps its own store
    RunDirLock(tmp_path / "link").acquire().release()
