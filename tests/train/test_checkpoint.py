"""paddlefit.train.checkpoint: atomic, verified checkpoint directories (no Paddle: the payload is plain files)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from paddlefit.train.checkpoint import MANIFEST, CheckpointError, CheckpointStore, sha256_file, verify
from paddlefit.train.resume import choose_resume


def payload(text: str):
    def write(tmp: Path) -> None:
        for name in ("model.pdparams", "optimizer.pdopt", "trainer.json", "rng.pkl"):
            (tmp / name).write_text(f"{name}:{text}")

    return write


def test_save_writes_a_manifest_of_sizes_and_hashes(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "checkpoints", keep_last=2)
    path = store.save(7, payload("a"), meta={"spec_model": "digits_cnn"})
    assert path.name == "step-00000007" and verify(path) is None
    man = json.loads((path / MANIFEST).read_text())
    assert man["step"] == 7 and man["spec_model"] == "digits_cnn" and man["format"] == 1
    want = {"bytes": len("trainer.json:a"), "sha256": sha256_file(path / "trainer.json")}
    assert man["files"]["trainer.json"] == want
    assert store.save(7, payload("other")) == path and (path / "rng.pkl").read_text() == "rng.pkl:a"  # kept as is


def test_keep_last_and_newest_valid_skips_damaged(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep_last=2)
    for step in (1, 2, 3):
        store.save(step, payload(str(step)))
    assert [p.name for p in store.list()] == ["step-00000003", "step-00000002"]
    (store.path_for(3) / "model.pdparams").write_text("bit rot")
    warnings: list[str] = []
    assert store.latest_valid(warnings.append) == store.path_for(2)
    assert len(warnings) == 1 and "skipping checkpoint step-00000003" in warnings[0]
    (store.path_for(2) / MANIFEST).unlink()
    assert store.latest_valid() is None


def test_a_failed_write_leaves_nothing_half_written(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep_last=3)
    store.save(1, payload("ok"))

    def dies(tmp: Path) -> None:
        (tmp / "model.pdparams").write_text("partial")
        raise OSError(28, "No space left on device")

    with pytest.raises(CheckpointError, match="the disk is full; the previous checkpoint step-00000001 is intact"):
        store.save(2, dies)
    assert [p.name for p in tmp_path.iterdir()] == ["step-00000001"]


def test_temporaries_of_killed_writers_are_never_read_and_are_cleaned(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.save(4, payload("x"))
    tmp = tmp_path / f".tmp-step-00000005-{os.getpid() + 1}"
    tmp.mkdir()
    (tmp / "model.pdparams").write_text("half")
    assert store.list() == [store.path_for(4)]
    assert store.clean_temporaries() == [tmp] and not tmp.exists()
    with pytest.raises(ValueError):
        CheckpointStore(tmp_path, keep_last=0)


def test_a_kill_while_pruning_leaves_no_half_deleted_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pruning renames a checkpoint to a ``.tmp-*`` name before deleting it: a kill mid-delete (here the delete never
    runs) leaves a temporary the next run cleans, not a ``step-*`` directory with files missing."""
    import paddlefit.train.checkpoint as ck

    store = CheckpointStore(tmp_path, keep_last=1)
    store.save(1, payload("1"))
    monkeypatch.setattr(ck.shutil, "rmtree", lambda *_a, **_k: None)  # killed before (or while) deleting
    store.save(2, payload("2"))
    assert [p.name for p in store.list()] == ["step-00000002"]
    assert [p.name for p in tmp_path.glob(".tmp-*")] == [f".tmp-step-00000001-{os.getpid()}-old"]
    monkeypatch.undo()
    assert [p.name for p in store.clean_temporaries()] == [f".tmp-step-00000001-{os.getpid()}-old"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000002"]


def test_resume_never_removes_the_old_store_in_one_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--resume never`` renames the whole store away before deleting it: a kill mid-delete (the delete never
    runs here) leaves no old checkpoint a later ``--resume auto`` could take, only a temporary the next run cleans."""
    import paddlefit.train.checkpoint as ck

    store = CheckpointStore(tmp_path / "checkpoints", keep_last=3)
    for step in (1, 2, 3):
        store.save(step, payload(str(step)))
    monkeypatch.setattr(ck.shutil, "rmtree", lambda *_a, **_k: None)  # killed before (or while) deleting
    assert [p.name for p in store.remove_all()] == ["step-00000003", "step-00000002", "step-00000001"]
    assert store.list() == [] and store.latest_valid() is None
    assert [p.name for p in tmp_path.iterdir()] == [f".checkpoints-old-{os.getpid()}"]
    monkeypatch.undo()
    assert [p.name for p in store.clean_temporaries()] == [f".checkpoints-old-{os.getpid()}"]
    assert list(tmp_path.iterdir()) == [] and store.remove_all() == []


def _set_format(path: Path, value: int) -> None:
    man = json.loads((path / MANIFEST).read_text())
    (path / MANIFEST).write_text(json.dumps({**man, "format": value}))


def test_pruning_keeps_a_checkpoint_a_resume_skipped_until_newer_ones_are_complete(tmp_path: Path) -> None:
    """A checkpoint whose manifest a resume cannot read (a newer format here) is pruned only once ``keep_last``
    complete checkpoints of higher steps exist, never because it was skipped."""
    store = CheckpointStore(tmp_path, keep_last=2)
    for step in (10, 20):
        store.save(step, payload(str(step)))
    _set_format(store.path_for(20), 2)
    store.save(11, payload("11"))  # a run resumed from 10 goes on: 20 (skipped) is older than nothing yet
    assert [p.name for p in store.list()] == ["step-00000020", "step-00000011", "step-00000010"]
    store.save(21, payload("21"))  # 21 and ... : only one complete checkpoint above 20 so far
    assert [p.name for p in store.list()] == ["step-00000021", "step-00000020", "step-00000011"]
    store.save(22, payload("22"))  # two complete ones above 20 now: it goes, with 11
    assert [p.name for p in store.list()] == ["step-00000022", "step-00000021"]


def test_resume_auto_with_no_usable_checkpoint_refuses_and_changes_nothing(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep_last=3)
    for step in (1, 2):
        store.save(step, payload(str(step)))
        _set_format(store.path_for(step), 2)
    before = sorted((p.name, (p / MANIFEST).read_text()) for p in store.list())
    with pytest.raises(CheckpointError) as err:
        choose_resume("auto", store, lambda _m: None)
    msg = str(err.value)
    assert "found 2 checkpoint(s)" in msg and "none can be resumed" in msg
    assert "step-00000002: manifest format is not 1" in msg and "step-00000001: manifest format is not 1" in msg
    assert "`--resume never --overwrite`" in msg
    assert sorted((p.name, (p / MANIFEST).read_text()) for p in store.list()) == before
    assert choose_resume("auto", CheckpointStore(tmp_path / "empty"), lambda _m: None) is None  # a fresh run


@pytest.mark.parametrize("special", ["fifo", "dev-zero", "symlink-out"])
def test_a_special_file_in_a_checkpoint_is_refused_before_it_is_read(tmp_path: Path, special: str) -> None:
    """A FIFO (whose open waits for a writer forever) or a link to /dev/zero (never ends) listed in the manifest:
    verify names it at once, without reading it."""
    store = CheckpointStore(tmp_path / "checkpoints")
    path = store.save(1, payload("1"))
    extra = path / "extra.bin"
    if special == "fifo":
        os.mkfifo(extra)
    elif special == "dev-zero":
        extra.symlink_to("/dev/zero")
    else:
        (tmp_path / "outside.bin").write_text("x")
        extra.symlink_to(tmp_path / "outside.bin")
    man = json.loads((path / MANIFEST).read_text())
    man["files"]["extra.bin"] = {"bytes": 0, "sha256": "0" * 64}
    if special == "symlink-out":  # a regular file: it verifies, and resume refuses where it leads
        man["files"]["extra.bin"] = {"bytes": 1, "sha256": sha256_file(extra)}
    (path / MANIFEST).write_text(json.dumps(man))
    problem = verify(path)
    assert problem == (None if special == "symlink-out" else "extra.bin is not a regular file")
    with pytest.raises(CheckpointError, match=r"extra\.bin (is not a regular file|resolves to)"):
        choose_resume("auto", store, lambda _m: None)


def test_a_new_checkpoint_of_a_skipped_ones_step_sets_the_old_one_aside(tmp_path: Path) -> None:
    """A resumed run reaching the step of a checkpoint it skipped (unreadable manifest; a directory where a file
    should be) writes its own there and keeps the skipped one as `replaced-step-...`: never deleted, never listed,
    and `--resume never` takes it with the store."""
    store = CheckpointStore(tmp_path / "checkpoints", keep_last=3)
    store.save(10, payload("10"))
    store.save(20, payload("old 20"))
    _set_format(store.path_for(20), 2)
    (store.path_for(20) / "rng.pkl").unlink()
    (store.path_for(20) / "rng.pkl").mkdir()  # not even removable as a checkpoint's own files
    store.save(20, payload("new 20"))
    assert verify(store.path_for(20)) is None
    assert (store.path_for(20) / "model.pdparams").read_text() == "model.pdparams:new 20"
    (aside,) = [p for p in store.root.iterdir() if p.name.startswith("replaced-step-00000020-")]
    assert (aside / "model.pdparams").read_text() == "model.pdparams:old 20"
    assert [p.name for p in store.list()] == ["step-00000020", "step-00000010"]
    with pytest.raises(CheckpointError, match=r"rng\.pkl"):  # the user's directory inside: named, nothing deleted
        store.remove_all()
    (aside / "rng.pkl").rmdir()
    assert [p.name for p in store.remove_all()] == ["step-00000020", "step-00000010"] and not store.root.exists()
