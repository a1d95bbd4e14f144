"""paddlefit.rundir.files: the run directory's paths and its files' reads and writes (no Paddle)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from paddlefit.fileio import InputFileError
from paddlefit.rundir import files as rundir
from paddlefit.rundir.layout import CHECKPOINTS_DIR, LOCK_INFO_FILE, MANIFEST_FILE, METRICS_FILE, STATUS_FILE


def test_paths_are_the_layouts_names(tmp_path: Path) -> None:
    assert rundir.checkpoints_dir(tmp_path) == tmp_path / CHECKPOINTS_DIR
    assert rundir.metrics_file(tmp_path) == tmp_path / METRICS_FILE
    assert rundir.checkpoint_name(120) == "step-00000120"
    assert rundir.checkpoint_step(tmp_path / "step-00000120") == 120
    assert rundir.checkpoint_step(tmp_path / "step-123456789") == 123456789
    assert rundir.checkpoint_step(tmp_path / "best") is None
    assert rundir.checkpoint_step(tmp_path / "step-12") is None  # fewer than 8 digits: not the store's


def test_the_run_files_round_trip_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each write is whole (no temporary left beside it) and reads back as written."""
    monkeypatch.setenv("PADDLEFIT_RUN_TOKEN", "tok")
    rundir.write_status(tmp_path, 3, "nan", 7)
    assert rundir.run_status(tmp_path) == {"exit_code": 3, "reason": "nan", "step": 7, "token": "tok"}
    assert rundir.run_status(tmp_path, token="other") is None
    rundir.write_summary(tmp_path, {"steps": 7})
    assert rundir.read_summary(tmp_path) == {"steps": 7}
    rundir.write_prediction(tmp_path, {"key": "k"})
    assert rundir.read_prediction(tmp_path) == {"key": "k"}
    rundir.write_lock_info(tmp_path, {"pid": 1, "host": "h"})
    assert rundir.read_lock_info(tmp_path) == {"pid": 1, "host": "h"}
    rundir.remove_lock_info(tmp_path)
    assert not (tmp_path / LOCK_INFO_FILE).exists()
    rundir.rewrite_metrics(tmp_path, ['{"step": 1}', '{"step": 2}'])
    assert rundir.read_metrics_text(tmp_path) == '{"step": 1}\n{"step": 2}\n'
    assert rundir.read_metrics_bytes(tmp_path, 5) == b'{"ste'
    assert not list(tmp_path.glob(".*.tmp"))
    assert (tmp_path / STATUS_FILE).read_text().endswith("\n")


def test_missing_files_read_as_the_callers_expect(tmp_path: Path) -> None:
    assert rundir.read_metrics_text(tmp_path) is None
    assert rundir.read_spec_text(tmp_path) is None
    assert rundir.run_status(tmp_path, token="t") is None
    with pytest.raises(InputFileError):
        rundir.read_summary(tmp_path)


def test_clean_temporaries_takes_only_the_run_files_leftovers(tmp_path: Path) -> None:
    left = tmp_path / f".{METRICS_FILE}.abc.tmp"
    other = tmp_path / ".notes.txt.abc.tmp"
    left.write_text("x")
    other.write_text("x")
    assert rundir.clean_temporaries(tmp_path) == [left]
    assert other.exists()


def test_a_checkpoints_json_files(tmp_path: Path) -> None:
    from paddlefit.rundir import checkpoint_files as ckptio

    ckptio.write_manifest(tmp_path, {"step": 2, "files": {}})
    assert json.loads((tmp_path / MANIFEST_FILE).read_text()) == {"files": {}, "step": 2}
    assert ckptio.read_manifest(tmp_path) == {"files": {}, "step": 2}
    ckptio.write_trainer_json(tmp_path, {"step": 2})
    ckptio.write_rng_json(tmp_path, {"format": 1})
    assert ckptio.read_trainer_json(tmp_path) == {"step": 2}
    assert ckptio.has_rng_json(tmp_path) and not ckptio.has_legacy_rng(tmp_path)
    assert ckptio.read_rng_json(tmp_path) == {"format": 1}
