"""The parent of a launched run settles its registry row when rank 0 could not (train.record.settle_launched_row)."""

from __future__ import annotations

from pathlib import Path

import pytest

from paddlefit.runs.registry import Registry
from paddlefit.train.record import newest_row, settle_launched_row


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Registry:
    monkeypatch.setenv("PADDLEFIT_HOME", str(tmp_path / "home"))
    return Registry()


def _rank0_row(reg: Registry, run_dir: Path, pid: int, **ended: object) -> int:
    rid = reg.start_run({"run_dir": str(run_dir), "pid": pid, "model": "m"}, pytest.fail)
    if ended:
        assert reg.update_run(rid, ended, pytest.fail)
    return int(rid)


def test_a_row_rank_0_left_running_ends_as_the_run_did(home: Registry, tmp_path: Path) -> None:
    run_dir, said = tmp_path / "r", []
    before = newest_row(run_dir)
    assert before is None
    rid = _rank0_row(home, run_dir, 2**22 + 7)  # a worker pid that no longer runs: listed `lost`
    assert home.get_run(rid)["status"] == "lost"
    settle_launched_row(run_dir, 1, "another rank was killed or lost", before, said.append)
    row = home.get_run(rid)
    assert (row["status"], row["exit_code"], row["reason"]) == ("failed", 1, "another rank was killed or lost")
    assert row["ended_at"] and said == []


def test_a_rewritten_code_reaches_the_row_and_an_agreeing_or_older_row_is_left(home: Registry, tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    old = _rank0_row(home, run_dir, 2**22 + 1, status="stopped", exit_code=143, reason="old", ended_at="2026-01-01")
    before = newest_row(run_dir)
    # the workers never recorded (refused before their row): the older run's row is not this run's
    settle_launched_row(run_dir, 2, "bad input", before, pytest.fail)
    assert home.get_run(old)["exit_code"] == 143 and home.get_run(old)["reason"] == "old"
    # rank 0 recorded 203 (a peer lost); the parent said 1 (the lost rank was killed on this node)
    rid = _rank0_row(home, run_dir, 2**22 + 2, status="stopped", exit_code=203, reason="peer lost")
    settle_launched_row(run_dir, 1, "peer lost\npaddlefit: rank 1 ended by signal SIGKILL", before, pytest.fail)
    assert (home.get_run(rid)["status"], home.get_run(rid)["exit_code"]) == ("failed", 1)
    # a row that agrees keeps its own reason and end time
    rid = _rank0_row(home, run_dir, 2**22 + 3, status="finished", exit_code=0, reason="done", ended_at="2026-02-02")
    settle_launched_row(run_dir, 0, "other words", before, pytest.fail)
    assert (home.get_run(rid)["reason"], home.get_run(rid)["ended_at"]) == ("done", "2026-02-02")
