"""Files read from a run directory, a checkpoint or the registry are bounded (size, depth,
schema) and never a traceback; nothing is executed from a checkpoint without the user's word (no pickle for the
RNG state, `--trust-checkpoint` for a checkpoint from elsewhere or an old `rng.pkl`); a checkpoint directory whose
name disagrees with its manifest's step is never resumed and is pruned."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest
from trainrun import run, train_cmd, write_spec

from paddlefit.errors import PaddlefitError
from paddlefit.fileio import InputFileError, json_depth, loads_limited, read_json_limited
from paddlefit.train.checkpoint import MANIFEST, CheckpointStore, sha256_file, verify

DEEP = "[" * 100_000 + "]" * 100_000  # json.loads: RecursionError


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "paddlefit.cli.main", *args]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(spec, run dir): 4 steps, checkpoints at steps 2 and 4."""
    tmp = tmp_path_factory.mktemp("untrusted")
    spec = write_spec(tmp / "job.yaml", max_steps=4, checkpoint={"every_steps": 2, "keep_last": 3})
    r = run(train_cmd(spec, tmp / "run", "--resume", "never"))
    assert r.returncode == 0, r.stderr
    return spec, tmp / "run"


def copy_run(run_dir: Path, to: Path) -> Path:
    shutil.copytree(run_dir, to)
    return to


def rehash(ckpt: Path, name: str) -> None:
    """Make ``ckpt``'s manifest list ``name`` as it is now (and forget files that are gone)."""
    man = json.loads((ckpt / MANIFEST).read_text())
    man["files"] = {k: v for k, v in man["files"].items() if (ckpt / k).exists()}
    man["files"][name] = {"bytes": (ckpt / name).stat().st_size, "sha256": sha256_file(ckpt / name)}
    (ckpt / MANIFEST).write_text(json.dumps(man))


# ---- bounded reads --------------------------------------------------------------------------------------------
def test_json_depth_is_limited_without_recursion(tmp_path: Path) -> None:
    assert json_depth(5) == 0 and json_depth([]) == 1 and json_depth({"a": [[1]]}) == 3
    assert loads_limited('{"a": [1, {"b": 2}]}', "x") == {"a": [1, {"b": 2}]}
    for text in (DEEP, "[" * 65 + "]" * 65):
        with pytest.raises(InputFileError, match="nests deeper than 64 levels"):
            loads_limited(text, "x")
    (tmp_path / "big.json").write_text("[" + "0," * 600_000 + "0]")
    with pytest.raises(InputFileError, match="larger than 1 MiB"):
        read_json_limited(tmp_path / "big.json", "f", limit=1 << 20)
    with pytest.raises(ValueError):  # a reader skipping bad files (except ValueError) skips these too
        read_json_limited(tmp_path / "missing.json", "f")


def test_report_reads_deep_and_malformed_files_without_a_traceback(trained: tuple[Path, Path], tmp_path: Path) -> None:
    """`report` exited 1 with RecursionError on a deeply nested summary/status/snapshot/.lock.json/manifest, and
    with TypeError on snapshot.json `"net": 5`; now each is left out with a note."""
    _, src = trained
    run_dir = copy_run(src, tmp_path / "r")
    (run_dir / "snapshot.json").write_text(json.dumps({"os": "Linux", "python": "3.11", "net": 5}))
    (run_dir / "comparison.json").write_text(json.dumps({"status": "predicted", "figures": [{"ratio": "x"}]}))
    r = run(cli("report", str(run_dir), "--out", str(tmp_path / "a.html"), "--json"))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    page = (tmp_path / "a.html").read_text()
    assert "snapshot.json left out" in page and "`net`" in page  # the note that leaves it out names the field
    assert "comparison.json left out: `figures.0` has a predicted, measured or ratio" in page
    for name in (
        "summary.json",
        "status.json",
        "comparison.json",
        "snapshot.json",
        ".lock.json",
        "checkpoints/step-00000004/manifest.json",
        "checkpoints/step-00000004/trainer.json",
    ):
        (run_dir / name).write_text(DEEP)
    (run_dir / "metrics.jsonl").write_text(
        (src / "metrics.jsonl").read_text()
        + DEEP
        + "\n"
        + '{"step": 5, "loss": "x"}\n{"step": 6, "loss": 1, "time": []}\n'
    )
    r = run(cli("report", str(run_dir), "--out", str(tmp_path / "b.html"), "--json"))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert json.loads(r.stdout)["status"] == "lost"  # status.json left out: the run recorded no readable end
    assert "3 line(s) of metrics.jsonl do not parse" in (tmp_path / "b.html").read_text()


def test_train_and_export_refuse_deep_checkpoint_files_cleanly(trained: tuple[Path, Path], tmp_path: Path) -> None:
    """A deeply nested manifest.json: `train --resume auto` skips that checkpoint (warning) and resumes the one
    before; `export` names it. Before: RecursionError, exit 1. A deep trainer.json (manifest rehashed) is skipped by
    `--resume auto` the same way (it was exit 2 naming `--resume PATH`), and is exit 2
    for `--resume PATH`."""
    spec, src = trained
    run_dir = copy_run(src, tmp_path / "r")
    (run_dir / "checkpoints" / "step-00000004" / MANIFEST).write_text(DEEP)
    r = run(
        cli(
            "export",
            str(run_dir),
            "--checkpoint",
            str(run_dir / "checkpoints" / "step-00000004"),
            "--out",
            str(tmp_path / "inf"),
        )
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    r = run(train_cmd(spec, run_dir, "--resume", "auto"))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "skipping checkpoint step-00000004" in r.stderr and "resumed from" in r.stderr
    ck = run_dir / "checkpoints" / "step-00000004"
    (ck / "trainer.json").write_text(DEEP)
    rehash(ck, "trainer.json")
    r = run(train_cmd(spec, run_dir, "--resume", "auto"))
    err = r.stderr.replace("\n", " ")
    assert r.returncode == 0 and "Traceback" not in err, err
    want = f"warning: skipping checkpoint step-00000004: `checkpoint file {ck / 'trainer.json'}` nests deeper than 64"
    assert want in err, err
    assert f"resumed from {run_dir / 'checkpoints' / 'step-00000002'} " in err and "`--resume " not in err, err
    (ck / "trainer.json").write_text(DEEP)  # the run wrote step 4 again: damage it again
    rehash(ck, "trainer.json")
    r = run(train_cmd(spec, run_dir, "--resume", str(ck)))
    assert r.returncode == 2 and "nests deeper than 64 levels" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_runs_lists_a_registry_row_with_deep_json(trained: tuple[Path, Path]) -> None:
    """A deeply nested JSON column in the registry is shown as its text, not a RecursionError."""
    db = Path(os.environ["PADDLEFIT_HOME"]) / "runs.db"
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET comparison_json = ? WHERE id = (SELECT max(id) FROM runs)", (DEEP,))
    r = run(cli("runs", "--json"))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    r = run(cli("runs"))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    with sqlite3.connect(db) as conn:
        rid = conn.execute("SELECT max(id) FROM runs").fetchone()[0]
    for doc in (DEEP, json.dumps({"device": 5, "figures": []}), json.dumps({"figures": [{"ratio": "x"}]})):
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE runs SET comparison_json = ? WHERE id = ?", (doc, rid))
        r = run(cli("runs", "show", str(rid)))
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
        assert "predicted vs measured (" in r.stdout


# ---- nothing executed from a checkpoint ------------------------------------------------------------------------
def test_rng_state_round_trips_through_json() -> None:
    import random

    import numpy as np
    import paddle

    from paddlefit.train.rngstate import capture_rng, restore_rng

    paddle.seed(7)
    random.seed(7)
    np.random.seed(7)
    doc = json.loads(json.dumps(capture_rng()))
    first = (random.random(), np.random.rand(3).tolist(), paddle.rand([3]).numpy().tolist(), np.random.randn())
    restore_rng(doc, "ck")
    again = (random.random(), np.random.rand(3).tolist(), paddle.rand([3]).numpy().tolist(), np.random.randn())
    assert again == first
    as_bytes = {**doc, "paddle": [[*e[:3], list(e[3].encode("ascii"))] for e in doc["paddle"]]}  # non-ASCII form
    restore_rng(as_bytes, "ck")
    assert paddle.rand([3]).numpy().tolist() == first[2]
    with pytest.raises(PaddlefitError, match=r"rng\.json `paddle` is malformed"):
        restore_rng({**doc, "paddle": [[0, "x", 0, "1"]]}, "ck")


def test_checkpoints_hold_no_pickle_and_resume_bit_exact(trained: tuple[Path, Path], tmp_path: Path) -> None:
    spec, src = trained
    ck = src / "checkpoints" / "step-00000004"
    assert not (ck / "rng.pkl").exists() and json.loads((ck / "rng.json").read_text())["format"] == 1
    run_dir = copy_run(src, tmp_path / "r")
    shutil.rmtree(run_dir / "checkpoints" / "step-00000004")
    r = run(train_cmd(spec, run_dir, "--resume", "auto"))
    assert r.returncode == 0 and "resumed from" in r.stderr, r.stderr
    want = json.loads((src / "summary.json").read_text())["params_sha256"]
    assert json.loads((run_dir / "summary.json").read_text())["params_sha256"] == want


class Payload:
    """Unpickling this creates a marker file (what a hostile rng.pkl does)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def to_legacy(ckpt: Path, payload: object | None = None) -> None:
    """Rewrite ``ckpt`` as an earlier version wrote it: the RNG states pickled in rng.pkl (or ``payload``)."""
    import numpy as np
    from paddle.base.core import GeneratorState

    doc = json.loads((ckpt / "rng.json").read_text())
    states = []
    for device, seed, offset, text in doc["paddle"]:
        s = GeneratorState.__new__(GeneratorState)
        s.__setstate__((device, seed, offset, list(text.encode("ascii"))))
        states.append(s)
    py, npy = doc["python"], doc["numpy"]
    rng = {
        "python": (py["version"], tuple(py["state"]), py["gauss_next"]),
        "numpy": (
            npy["name"],
            np.asarray(npy["keys"], dtype=np.uint32),
            npy["pos"],
            npy["has_gauss"],
            npy["cached_gaussian"],
        ),
        "paddle": states,
    }
    (ckpt / "rng.pkl").write_bytes(pickle.dumps(payload if payload is not None else rng))
    (ckpt / "rng.json").unlink()
    rehash(ckpt, "rng.pkl")


def test_a_pickled_rng_runs_only_with_trust_checkpoint(trained: tuple[Path, Path], tmp_path: Path) -> None:
    """Before: a pickled payload in rng.pkl ran on `--resume auto`. Now an rng.pkl is refused (exit 2, naming
    --trust-checkpoint) before anything of the checkpoint is unpickled; with the flag an old checkpoint resumes
    bit-exact, and the checkpoints written after it hold rng.json."""
    spec, src = trained
    run_dir = copy_run(src, tmp_path / "r")
    shutil.rmtree(run_dir / "checkpoints" / "step-00000004")
    ck = run_dir / "checkpoints" / "step-00000002"
    marker = tmp_path / "pwned"
    to_legacy(ck, Payload(marker))
    r = run(train_cmd(spec, run_dir, "--resume", "auto"))
    assert r.returncode == 2 and "--trust-checkpoint" in r.stderr and "rng.pkl" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not marker.exists()
    assert not (run_dir / "checkpoints" / "step-00000004").exists()  # refused before any step
    to_legacy_again = ck / "rng.pkl"
    to_legacy_again.unlink()
    shutil.copy(src / "checkpoints" / "step-00000002" / "rng.json", ck / "rng.json")
    rehash(ck, "rng.json")
    to_legacy(ck)
    r = run(train_cmd(spec, run_dir, "--resume", "auto", "--trust-checkpoint"))
    assert r.returncode == 0, r.stderr
    want = json.loads((src / "summary.json").read_text())["params_sha256"]
    assert json.loads((run_dir / "summary.json").read_text())["params_sha256"] == want
    assert (run_dir / "checkpoints" / "step-00000004" / "rng.json").is_file()


def test_resume_from_another_directory_needs_trust_checkpoint(trained: tuple[Path, Path], tmp_path: Path) -> None:
    spec, src = trained
    other = src / "checkpoints" / "step-00000002"
    r = run(train_cmd(spec, tmp_path / "new", "--resume", str(other)))
    assert r.returncode == 2 and "outside this run's checkpoints" in r.stderr and "--trust-checkpoint" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "new" / "checkpoints").exists()
    r = run(train_cmd(spec, tmp_path / "new2", "--devices", "2", "--resume", str(other)))
    assert r.returncode == 2 and "--trust-checkpoint" in r.stderr and "launching" not in r.stderr  # before workers
    r = run(train_cmd(spec, tmp_path / "new", "--resume", str(other), "--trust-checkpoint"))
    assert r.returncode == 0 and f"resumed from {other}" in r.stderr, r.stderr
    want = json.loads((src / "summary.json").read_text())["params_sha256"]
    assert json.loads((tmp_path / "new" / "summary.json").read_text())["params_sha256"] == want


def test_trust_checkpoint_reaches_the_launched_workers(tmp_path: Path) -> None:
    from paddlefit.train import worker
    from paddlefit.train.launcher import launch_command

    cmd = launch_command(tmp_path / "s.yaml", tmp_path, 2, None, "/x/ck", "job", trust=True)
    assert cmd[-3:] == ["--resume", "/x/ck", "--trust-checkpoint"] and worker.__file__ in cmd
    assert "--trust-checkpoint" not in launch_command(tmp_path / "s.yaml", tmp_path, 2, None, "auto", "job")


def _files(d: Path) -> None:
    for name in ("model.pdparams", "optimizer.pdopt", "trainer.json", "rng.json"):
        (d / name).write_text(name)


def test_a_checkpoint_named_for_another_step_is_never_resumed_and_is_pruned(tmp_path: Path) -> None:
    """`step-00000099` holding step 10 was resumed from on every run and never pruned."""
    store = CheckpointStore(tmp_path / "checkpoints", keep_last=2)
    store.save(10, _files)
    store.save(20, _files)
    shutil.copytree(store.path_for(10), store.path_for(99))
    assert verify(store.path_for(99)) == "manifest says step 10, the directory name says 99"
    warnings: list[str] = []
    assert store.latest_valid(warnings.append) == store.path_for(20)
    assert warnings == ["skipping checkpoint step-00000099: manifest says step 10, the directory name says 99"]
    store.save(30, _files)
    assert [p.name for p in store.list()] == ["step-00000030", "step-00000020"]


def test_resume_auto_skips_a_checkpoint_resolving_outside_the_run(trained: tuple[Path, Path], tmp_path: Path) -> None:
    """`checkpoints/step-N` a symlink to a checkpoint elsewhere whose model.pdparams is a
    hostile pickle: `--resume PATH` refused it, `--resume auto` loaded it and the payload ran. Now auto skips it
    (warning) for the one before it, unless `--trust-checkpoint`; a file in a checkpoint linked out is the same."""
    spec, src = trained
    run_dir = copy_run(src, tmp_path / "r")
    elsewhere = tmp_path / "elsewhere" / "step-00000006"
    shutil.copytree(src / "checkpoints" / "step-00000004", elsewhere)
    marker = tmp_path / "pwned"
    (elsewhere / "model.pdparams").write_bytes(pickle.dumps(Payload(marker)))
    rehash(elsewhere, "model.pdparams")
    man = json.loads((elsewhere / MANIFEST).read_text())
    (elsewhere / MANIFEST).write_text(json.dumps({**man, "step": 6}))
    (run_dir / "checkpoints" / "step-00000006").symlink_to(elsewhere)
    r = run(train_cmd(spec, run_dir, "--resume", "auto"))
    err = r.stderr.replace("\n", " ")
    assert r.returncode == 0 and not marker.exists(), err
    assert f"skipping checkpoint step-00000006: it resolves to {elsewhere}, outside this run's checkpoints" in err
    assert f"resumed from {run_dir / 'checkpoints' / 'step-00000004'} " in err, err

    from paddlefit.train.resume import choose_resume

    store = CheckpointStore(run_dir / "checkpoints")
    assert choose_resume("auto", store, print, trust=True) == store.path_for(6)  # the user vouched for it
    (run_dir / "checkpoints" / "step-00000006").unlink()
    ck4 = store.path_for(4)
    (ck4 / "model.pdparams").unlink()
    (ck4 / "model.pdparams").symlink_to(elsewhere / "model.pdparams")  # inside by name, a file linked out
    rehash(ck4, "model.pdparams")
    warnings: list[str] = []
    assert choose_resume("auto", store, warnings.append) == store.path_for(2)
    assert warnings[0].startswith(f"warning: skipping checkpoint step-00000004: model.pdparams resolves to {elsewhere}")
    with pytest.raises(PaddlefitError, match="is outside this run's checkpoints"):
        choose_resume(str(ck4), store, print)
    assert not marker.exists()
