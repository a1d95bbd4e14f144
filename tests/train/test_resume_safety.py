"""Nothing lost on a resume: `--resume auto` never starts over on checkpoints it could not read, `--resume never`
deletes only once the new job is accepted and never a finished run's without `--overwrite`, and special files in a
run directory are refused at once instead of hanging (the hostile trial's reproductions)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from trainrun import ENV, run, train_cmd, write_spec

from paddlefit.runs import Registry


def _tree(run_dir: Path) -> dict[str, bytes]:
    """Every regular file under ``run_dir`` (checkpoints included) with its bytes."""
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def _checkpoints(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints").iterdir())


def _finished_run(tmp_path: Path) -> tuple[Path, Path]:
    spec = write_spec(tmp_path / "s.yaml", max_steps=6, checkpoint={"every_steps": 3})
    run_dir = tmp_path / "r"
    r = run(train_cmd(spec, run_dir))
    assert r.returncode == 0, r.stderr[-2000:]
    assert _checkpoints(run_dir) == ["step-00000003", "step-00000006"]
    return spec, run_dir


@pytest.fixture(scope="module")
def finished(shared_dir) -> tuple[Path, Path]:
    """One finished 6-step run (checkpoints at 3 and 6), trained once per session for the tests that copy it."""
    d = shared_dir("resume-safety-finished", _finished_run)
    return d / "s.yaml", d / "r"


def _copy(finished: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    spec, src = finished
    shutil.copytree(src, tmp_path / "r", symlinks=True)
    return spec, tmp_path / "r"


def test_resume_auto_with_no_readable_checkpoint_exits_2_and_keeps_them(finished: tuple, tmp_path: Path) -> None:
    spec, run_dir = _copy(finished, tmp_path)
    for ckpt in (run_dir / "checkpoints").iterdir():  # a newer paddlefit's format
        man = json.loads((ckpt / "manifest.json").read_text())
        (ckpt / "manifest.json").write_text(json.dumps({**man, "format": 2}))
    before = _tree(run_dir)
    r = run(train_cmd(spec, run_dir, "--max-steps", "9", "--json"))
    assert r.returncode == 2, r.stderr[-2000:]
    assert "found 2 checkpoint(s)" in r.stderr and "none can be resumed" in r.stderr
    assert "step-00000006: manifest format is not 1" in r.stderr and "`--resume never --overwrite`" in r.stderr
    assert "Traceback" not in r.stderr and json.loads(r.stdout)["error"]["exit_code"] == 2
    after = _tree(run_dir)
    assert {k: v for k, v in after.items() if k not in ("snapshot.json", "status.json")} == {
        k: v for k, v in before.items() if k not in ("snapshot.json", "status.json")
    }  # metrics.jsonl and every checkpoint as they were
    status = json.loads((run_dir / "status.json").read_text())
    assert status["exit_code"] == 0 and "none can be resumed" in status["failed_starts"][-1]["reason"]


def test_resume_never_refuses_a_finished_run_and_deletes_only_an_accepted_job(tmp_path: Path) -> None:
    spec, run_dir = _finished_run(tmp_path)
    reg = Registry()
    old_id = reg.find_latest_for_run_dir(run_dir)
    assert old_id is not None and reg.get_run(old_id)["status"] == "finished"
    r = run(train_cmd(spec, run_dir, "--resume", "never"))
    assert r.returncode == 2 and "would delete the 2 checkpoint(s) of the finished run" in r.stderr, r.stderr
    assert "`--overwrite`" in r.stderr and _checkpoints(run_dir) == ["step-00000003", "step-00000006"]
    bad = write_spec(tmp_path / "bad.yaml", max_steps=6, model_args={"nonexistent_arg": 5})
    r = run(train_cmd(bad, run_dir, "--resume", "never", "--overwrite"))
    assert r.returncode == 2 and "nonexistent_arg" in r.stderr, r.stderr[-2000:]
    assert "removed" not in r.stderr and _checkpoints(run_dir) == ["step-00000003", "step-00000006"]
    assert json.loads((run_dir / "status.json").read_text())["exit_code"] == 0
    assert reg.get_run(old_id)["status"] == "finished"  # nothing was replaced
    r = run(train_cmd(spec, run_dir, "--resume", "never", "--overwrite", "--max-steps", "3"))
    assert r.returncode == 0 and "--resume never: removed 2 checkpoint(s)" in r.stderr, r.stderr[-2000:]
    assert _checkpoints(run_dir) == ["step-00000003"]
    assert "failed_starts" not in json.loads((run_dir / "status.json").read_text())  # the replaced run's, gone
    old = reg.get_run(old_id)
    assert old["status"] == "replaced" and "--resume never" in old["reason"]
    assert reg.find_latest_for_run_dir(run_dir) != old_id


def test_a_fifo_in_a_checkpoint_or_run_dir_is_refused_not_waited_on(finished: tuple, tmp_path: Path) -> None:
    """A FIFO listed in a checkpoint's manifest, and one in place of metrics.jsonl: train, export and report exit
    within their timeout (a FIFO's open or read waits for a writer forever)."""
    spec, run_dir = _copy(finished, tmp_path)
    newest = run_dir / "checkpoints" / "step-00000006"
    os.mkfifo(newest / "extra.bin")
    man = json.loads((newest / "manifest.json").read_text())
    man["files"]["extra.bin"] = {"bytes": 0, "sha256": "0" * 64}
    (newest / "manifest.json").write_text(json.dumps(man))
    r = run(train_cmd(spec, run_dir, "--max-steps", "5"), timeout=120)  # 6 would replace the FIFO's folder
    assert r.returncode == 0, r.stderr[-2000:]
    assert "skipping checkpoint step-00000006: extra.bin is not a regular file" in r.stderr
    assert "resumed from" in r.stderr and "step-00000003" in r.stderr
    cli = [sys.executable, "-m", "paddlefit.cli.main"]
    e = run([*cli, "export", str(run_dir), "--checkpoint", str(newest), "--out", str(tmp_path / "exp")], timeout=120)
    assert e.returncode == 2 and "extra.bin is not a regular file" in e.stderr, e.stderr[-2000:]
    e = run([*cli, "export", str(run_dir), "--out", str(tmp_path / "exp2")], timeout=120)  # the newest verifying
    assert e.returncode == 0 and "skipping checkpoint step-00000006: extra.bin is not a regular file" in e.stderr
    assert "step-00000005" in e.stdout, e.stdout
    (run_dir / "metrics.jsonl").unlink()
    os.mkfifo(run_dir / "metrics.jsonl")
    rep = subprocess.run([*cli, "report", str(run_dir), "--json"], capture_output=True, text=True, timeout=120, env=ENV)
    assert rep.returncode in (0, 2) and "Traceback" not in rep.stderr, rep.stderr[-2000:]
    t = run(train_cmd(spec, run_dir, "--max-steps", "9"), timeout=120)
    assert t.returncode == 2 and "metrics.jsonl" in t.stderr and "FIFO" in t.stderr, t.stderr[-2000:]


def _rehash(ckpt: Path, name: str) -> None:
    """Rewrite ``ckpt``'s manifest entry for ``name`` to its current bytes (a tampered file that verifies)."""
    import hashlib

    man = json.loads((ckpt / "manifest.json").read_text())
    data = (ckpt / name).read_bytes()
    man["files"][name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (ckpt / "manifest.json").write_text(json.dumps(man))


def test_a_changed_optimizer_or_a_bad_scheduler_state_is_exit_2_before_anything_changes(
    finished: tuple, tmp_path: Path
) -> None:
    spec, run_dir = _copy(finished, tmp_path)
    before = {k: v for k, v in _tree(run_dir).items() if k != "snapshot.json"}
    momentum = write_spec(tmp_path / "m.yaml", max_steps=6, checkpoint={"every_steps": 3}, optimizer="momentum")
    r = run(train_cmd(momentum, run_dir, "--max-steps", "9", "--json"))
    assert r.returncode == 2, r.stderr[-2000:]
    assert "written by `optimizer: adam`, this spec says `optimizer: momentum`" in r.stderr
    assert "Traceback" not in r.stderr and json.loads(r.stdout)["error"]["exit_code"] == 2
    after = {k: v for k, v in _tree(run_dir).items() if k not in ("snapshot.json", "status.json")}
    assert after == {k: v for k, v in before.items() if k != "status.json"}
    status = json.loads((run_dir / "status.json").read_text())
    assert status["exit_code"] == 0  # the run's own ending, as `runs` and `report` show it
    assert (
        status["failed_starts"][-1]["exit_code"] == 2 and "optimizer: momentum" in status["failed_starts"][-1]["reason"]
    )
    for ckpt in (run_dir / "checkpoints").iterdir():  # a tampered trainer.json that still verifies
        doc = json.loads((ckpt / "trainer.json").read_text())
        doc["scheduler"]["last_epoch"] = "x"
        (ckpt / "trainer.json").write_text(json.dumps(doc))
        _rehash(ckpt, "trainer.json")
    r = run(train_cmd(spec, run_dir, "--max-steps", "9"))
    assert r.returncode == 2 and "`scheduler.last_epoch` is 'x', not an integer" in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr


def test_running_the_same_command_on_a_finished_run_changes_nothing(finished: tuple, tmp_path: Path) -> None:
    """`train` again after the run finished: its checkpoint is at the last step, so there is nothing to train; the
    summary, status and metrics stay the finished run's (they were rewritten with 0 measured steps)."""
    spec, run_dir = _copy(finished, tmp_path)
    keep = ("summary.json", "status.json", "metrics.jsonl", "comparison.json")
    before = {k: (run_dir / k).read_bytes() for k in keep}
    r = run(train_cmd(spec, run_dir, "--json"))
    assert r.returncode == 0 and "the run finished at step 6 already: nothing to train" in r.stderr, r.stderr[-2000:]
    assert json.loads(r.stdout)["steps"] == 6 and json.loads(r.stdout) == json.loads(before["summary.json"])
    after = {k: (run_dir / k).read_bytes() for k in keep}
    assert {k: v for k, v in after.items() if k != "status.json"} == {
        k: v for k, v in before.items() if k != "status.json"
    }
    assert json.loads(after["status.json"])["exit_code"] == 0 and json.loads(after["status.json"])["step"] == 6
    r = run(train_cmd(spec, run_dir, "--max-steps", "8"))  # a longer run goes on from the checkpoint
    assert r.returncode == 0 and "resumed from" in r.stderr and "already" not in r.stderr, r.stderr[-2000:]
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 8


def test_a_changed_schedule_or_a_hostile_trainer_json_is_refused_and_export_names_what_it_skipped(
    finished: tuple, tmp_path: Path
) -> None:
    spec, run_dir = _copy(finished, tmp_path)
    step = write_spec(tmp_path / "step.yaml", max_steps=6, checkpoint={"every_steps": 3}, schedule={"name": "step"})
    r = run(train_cmd(step, run_dir, "--max-steps", "9"))
    assert r.returncode == 2 and "`schedule.name: constant` (this spec: step)" in r.stderr, r.stderr[-2000:]
    newest = run_dir / "checkpoints" / "step-00000006"
    doc = json.loads((newest / "trainer.json").read_text())
    doc["scheduler"]["last_epoch"] = -5
    (newest / "trainer.json").write_text(json.dumps(doc))
    _rehash(newest, "trainer.json")
    cli = [sys.executable, "-m", "paddlefit.cli.main"]
    e = run([*cli, "export", str(run_dir), "--out", str(tmp_path / "exp")])
    assert e.returncode == 0 and "exported" in e.stdout, e.stderr[-2000:]
    r = run(train_cmd(spec, run_dir, "--max-steps", "9"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "`scheduler.last_epoch` is -5, not an integer >= -1" in r.stderr and "resumed from" in r.stderr
    assert "step-00000003" in r.stderr.split("resumed from", 1)[1].splitlines()[0]
    aside = [p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith("replaced-")]
    assert aside and aside[0].startswith("replaced-step-00000006-")  # the skipped one, kept


def test_a_fifo_in_place_of_status_json_fails_before_training(finished: tuple, tmp_path: Path) -> None:
    spec, run_dir = _copy(finished, tmp_path)
    (run_dir / "status.json").unlink()
    os.mkfifo(run_dir / "status.json")
    r = run(train_cmd(spec, run_dir, "--max-steps", "30"), timeout=120)
    assert r.returncode == 2 and "status.json" in r.stderr and "step 30/30" not in r.stderr, r.stderr[-2000:]
