"""The run registry (paddlefit.runs) on real SQLite files: round trip, concurrent writers in separate processes, a
corrupt / locked / newer / older database, and the `lost` status of a running row whose process is gone."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from paddlefit.runs import SCHEMA_VERSION, Registry, RegistryError, registry_path
from paddlefit.runs.schema import MIGRATIONS, statements

ROOT = Path(__file__).resolve().parents[2]

#: the columns of schema v1 as released: a released migration is never edited (a change is a new migration)
V1_COLUMNS = [
    "id",
    "run_dir",
    "host",
    "pid",
    "started_at",
    "ended_at",
    "status",
    "exit_code",
    "reason",
    "resumes",
    "spec_json",
    "spec_sha256",
    "model",
    "params",
    "device_kind",
    "device_name",
    "device_count",
    "precision",
    "micro_batch_size",
    "grad_accum_steps",
    "global_batch",
    "paddle_version",
    "cuda_version",
    "driver_version",
    "predicted_step_s",
    "measured_step_s",
    "predicted_samples_per_s",
    "measured_samples_per_s",
    "predicted_peak_bytes",
    "measured_peak_bytes",
    "predicted_mfu",
    "measured_mfu",
    "final_loss",
    "eval_loss",
    "eval_accuracy",
    "steps",
]
V2_ADDED = ["measured_step_p95_s", "data_wait_fraction", "comparison_json"]


class Warnings(list):
    """The ``warn`` callback: collects the messages."""

    def __call__(self, message: str) -> None:
        self.append(message)


@pytest.fixture
def reg(tmp_path: Path) -> Registry:
    return Registry(tmp_path / "home" / "runs.db")


def _columns(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [row[1] for row in conn.execute("PRAGMA table_info(runs)")]


def _user_version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_registry_path_is_paddlefit_home_or_the_user_data_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("PADDLEFIT_HOME", str(tmp_path / "h"))
    assert registry_path() == tmp_path / "h" / "runs.db"
    assert Registry().path == tmp_path / "h" / "runs.db"
    monkeypatch.delenv("PADDLEFIT_HOME")
    import platformdirs

    assert registry_path() == Path(platformdirs.user_data_dir("paddlefit")) / "runs.db"


def test_round_trip_start_update_list_get_measured(reg, tmp_path, monkeypatch):
    warn = Warnings()
    monkeypatch.chdir(tmp_path)
    spec = {"model": {"name": "resnet50"}}
    a = reg.start_run(
        {
            "run_dir": "runs/a",
            "model": "resnet50",
            "device_kind": "gpu",
            "device_name": "L4",
            "device_count": 1,
            "precision": "fp16",
            "spec_json": spec,
        },
        warn,
    )
    b = reg.start_run(
        {
            "run_dir": "runs/b",
            "model": "ernie-3.0-medium",
            "device_kind": "cpu",
            "device_name": "cpu",
            "device_count": 2,
        },
        warn,
    )
    c = reg.start_run(
        {"run_dir": "runs/c", "model": "resnet50", "device_kind": "gpu", "device_name": "L4", "device_count": 1}, warn
    )
    assert warn == [] and (a, b, c) == (1, 2, 3)
    assert reg.path.is_file()  # its directory was created
    assert reg.update_run(
        a,
        {
            "status": "finished",
            "steps": 300,
            "predicted_step_s": 0.012,
            "measured_step_s": 0.015,
            "final_loss": 0.25,
            "ended_at": "2025-05-01T12:00:00+00:00",
            "exit_code": 0,
        },
        warn,
    )
    assert reg.update_run(b, {"status": "failed", "reason": "loss is NaN", "exit_code": 1}, warn)
    assert reg.update_run(c, {"status": "finished", "measured_step_s": 0.02}, warn)  # no prediction: not calibration
    assert warn == []

    run = reg.get_run(a)
    assert run["run_dir"] == str(tmp_path / "runs" / "a")  # stored absolute
    assert run["host"] == socket.gethostname() and run["pid"] == os.getpid() and run["resumes"] == 0
    assert run["status"] == "finished" and run["steps"] == 300 and run["final_loss"] == 0.25
    assert run["predicted_step_s"] == 0.012 and run["measured_step_s"] == 0.015 and run["exit_code"] == 0
    assert run["spec_json"] == {"model": {"name": "resnet50"}} and run["eval_accuracy"] is None
    assert run["started_at"].endswith("+00:00")

    assert [r["id"] for r in reg.list_runs()] == [3, 2, 1]  # newest first
    assert [r["id"] for r in reg.list_runs(model="RESNET50")] == [3, 1]
    assert [r["id"] for r in reg.list_runs(device="l4")] == [3, 1]
    assert [r["id"] for r in reg.list_runs(device="cpu")] == [2]
    assert [r["id"] for r in reg.list_runs(device="gpu", model="resnet50", last=1)] == [3]
    assert [r["id"] for r in reg.list_runs(last=2)] == [3, 2]
    assert reg.list_runs(model="vit") == []
    assert [r["id"] for r in reg.measured_runs("l4")] == [1]
    assert reg.measured_runs("cpu") == [] and reg.measured_runs("A100-SXM4-80GB") == []
    assert reg.get_run(b)["reason"] == "loss is NaN"


def test_resume_finds_the_run_dir_and_counts_resumes(reg, tmp_path):
    warn = Warnings()
    run_dir = tmp_path / "runs" / "x"
    first = reg.start_run({"run_dir": str(run_dir), "model": "m"}, warn)
    assert reg.update_run(
        first,
        {"status": "stopped", "exit_code": 143, "reason": "SIGTERM", "ended_at": "2025-05-01T12:00:00+00:00"},
        warn,
    )
    reg.start_run({"run_dir": str(tmp_path / "other"), "model": "m"}, warn)
    assert reg.find_latest_for_run_dir(str(run_dir)) == first
    assert reg.find_latest_for_run_dir(run_dir / ".") == first  # compared as an absolute path
    assert reg.find_latest_for_run_dir(str(tmp_path / "never")) is None
    assert reg.resume_run(first, {"steps": 10}, warn) and reg.resume_run(first, {}, warn)
    run = reg.get_run(first)
    assert run["resumes"] == 2 and run["status"] == "running" and run["steps"] == 10
    assert run["ended_at"] is None and run["exit_code"] is None and run["reason"] is None
    assert warn == []


def test_bad_fields_are_a_programming_error(reg):
    warn = Warnings()
    with pytest.raises(ValueError, match=r"unknown field.*'gpu'"):
        reg.start_run({"gpu": "L4"}, warn)
    with pytest.raises(ValueError, match="status 'done'"):
        reg.start_run({"status": "done"}, warn)
    run_id = reg.start_run({"model": "m"}, warn)
    with pytest.raises(ValueError, match="unknown field"):
        reg.update_run(run_id, {"step_time": 1.0}, warn)
    with pytest.raises(ValueError, match="'steps' has a object"):
        reg.update_run(run_id, {"steps": object()}, warn)
    assert warn == [] and reg.get_run(run_id)["status"] == "running"


def test_numpy_scalars_and_nan_are_stored(reg):
    import numpy as np

    warn = Warnings()
    run_id = reg.start_run({"steps": np.int64(7), "final_loss": np.float32(0.5), "eval_loss": float("nan")}, warn)
    run = reg.get_run(run_id)
    assert warn == [] and run["steps"] == 7 and run["final_loss"] == 0.5 and run["eval_loss"] is None


def test_update_of_a_missing_run_warns(reg):
    warn = Warnings()
    reg.start_run({"model": "m"}, warn)
    assert reg.update_run(42, {"steps": 1}, warn) is False
    assert len(warn) == 1 and "run 42" in warn[0] and str(reg.path) in warn[0]
    assert reg.update_run(None, {"steps": 1}, warn) is False and reg.resume_run(None, {}, warn) is False
    assert len(warn) == 1  # a start_run that returned None has warned already


def test_missing_registry_reads_as_empty_and_is_not_created(reg):
    assert reg.list_runs() == [] and reg.measured_runs("L4") == [] and reg.find_latest_for_run_dir("/x") is None
    assert not reg.path.exists() and not reg.path.parent.exists()
    with pytest.raises(RegistryError, match=r"run 5 is not in the run registry .*`paddlefit runs`"):
        reg.get_run(5)
    with pytest.raises(RegistryError, match="--last 0"):
        reg.list_runs(last=0)


CHILD = """
import json, sys, time
from pathlib import Path
from paddlefit.runs import Registry
db, barrier, n, me, updates = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])


def wait_for(test):
    deadline = time.time() + 120
    while not test() and time.time() < deadline:
        time.sleep(0.005)


warnings = []
reg = Registry(db, timeout_s=30)
(barrier / f"ready-{me}").touch()
wait_for(lambda: len(list(barrier.glob("ready-*"))) == n)
run_id = reg.start_run({"run_dir": f"/runs/{me}", "model": f"model-{me}", "steps": 0}, warnings.append)
(barrier / f"started-{me}").touch()
wait_for(lambda: (barrier / "go").exists())  # the test has added the shared counter row
counter = int((barrier / "go").read_text())
ok = []
for step in range(1, updates + 1):
    ok.append(reg.update_run(run_id, {"steps": step, "final_loss": 1.0 / step}, warnings.append))
    ok.append(reg.resume_run(counter, {}, warnings.append))  # every process increments the same row's counter
ok.append(reg.update_run(run_id, {"status": "finished", "measured_step_s": me / 100}, warnings.append))
print(json.dumps({"me": me, "run_id": run_id, "ok": all(ok), "warnings": warnings}))
"""


@pytest.mark.slow
@pytest.mark.serial  # each write waits at most the 5 s busy timeout: beside multi-process training it waited longer
def test_concurrent_writers_in_separate_processes_lose_nothing(tmp_path):
    """4 processes start at once on a fresh database (so they also race to create it, set WAL and migrate), each
    inserting its row, then updating it 10 times while all of them increment one shared counter (``resumes``)."""
    n, updates = 4, 10
    db, barrier = tmp_path / "home" / "runs.db", tmp_path / "barrier"
    barrier.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(db), str(barrier), str(n), str(me), str(updates)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for me in range(n)
    ]
    deadline = time.time() + 120
    while len(list(barrier.glob("started-*"))) < n and time.time() < deadline and all(p.poll() is None for p in procs):
        time.sleep(0.01)
    counter = Registry(db).start_run({"model": "counter"}, print)
    (barrier / "go").write_text(str(counter))
    results = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=180)
        assert proc.returncode == 0, stderr
        results.append(json.loads(stdout))
    assert [r["warnings"] for r in results] == [[]] * n and all(r["ok"] for r in results)
    reg = Registry(db)
    rows = {r["model"]: r for r in reg.list_runs()}
    assert len(rows) == n + 1 and sorted(r["run_id"] for r in results) == list(range(1, n + 1)) and counter == n + 1
    for r in results:
        row = rows[f"model-{r['me']}"]
        assert row["id"] == r["run_id"] and row["run_dir"] == f"/runs/{r['me']}"
        assert row["status"] == "finished" and row["steps"] == updates and row["final_loss"] == 1.0 / updates
        assert row["measured_step_s"] == r["me"] / 100
    assert rows["counter"]["resumes"] == n * updates  # no increment lost
    assert _user_version(db) == SCHEMA_VERSION


def test_corrupt_registry_warns_on_write_and_raises_on_read(reg):
    reg.path.parent.mkdir(parents=True)
    reg.path.write_bytes(b"this is not a SQLite database\x00\xff" * 200)
    warn = Warnings()
    assert reg.start_run({"model": "m"}, warn) is None
    assert reg.update_run(1, {"steps": 1}, warn) is False
    assert reg.resume_run(1, {}, warn) is False
    assert reg.find_latest_for_run_dir("/runs/x", warn) is None
    assert len(warn) == 4 and all(str(reg.path) in w and "\n" not in w for w in warn)
    assert "move it aside" in warn[0] and "training goes on" in warn[0]
    for read in (reg.list_runs, lambda: reg.get_run(1), lambda: reg.measured_runs("L4")):
        with pytest.raises(RegistryError, match=r"cannot be read .*not a database.*move it aside"):
            read()
    assert reg.path.read_bytes().startswith(b"this is not")  # left as it was


def test_unwritable_registry_location_warns(tmp_path):
    (tmp_path / "file").write_text("x")
    reg = Registry(tmp_path / "file" / "runs.db")  # its "directory" is a file
    warn = Warnings()
    assert reg.start_run({"model": "m"}, warn) is None
    assert len(warn) == 1 and "PADDLEFIT_HOME" in warn[0] and str(reg.path) in warn[0]


def test_a_registry_locked_too_long_warns_within_the_timeout(reg):
    warn = Warnings()
    first = reg.start_run({"model": "m"}, warn)
    holder = sqlite3.connect(reg.path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        fast = Registry(reg.path, timeout_s=0.5)
        t0 = time.monotonic()
        assert fast.start_run({"model": "n"}, warn) is None
        assert fast.update_run(first, {"steps": 3}, warn) is False
        elapsed = time.monotonic() - t0
        assert [r["id"] for r in fast.list_runs()] == [first]  # WAL: reading does not wait for the writer
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert 0.9 <= elapsed < 5, elapsed  # two writes, each gave up after about 0.5 s
    assert len(warn) == 2 and all("locked" in w and str(reg.path) in w and "0.5 s" in w for w in warn)
    assert reg.update_run(first, {"steps": 3}, warn) and reg.get_run(first)["steps"] == 3  # fine once released


def _v1_database(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.executescript(MIGRATIONS[0])
    conn.execute("PRAGMA user_version = 1")
    conn.execute(
        "INSERT INTO runs (run_dir, host, pid, status, model, measured_step_s) VALUES "
        "('/runs/old', 'elsewhere', 1, 'finished', 'resnet18', 0.5)"
    )
    conn.commit()
    conn.close()


def test_v1_database_is_migrated_forward_keeping_its_rows(reg):
    _v1_database(reg.path)
    assert _columns(reg.path) == V1_COLUMNS  # the released v1 script is unchanged
    old = reg.list_runs()  # reading does not migrate: the missing columns read as None
    assert [r["model"] for r in old] == ["resnet18"] and old[0]["comparison_json"] is None
    assert _user_version(reg.path) == 1
    warn = Warnings()
    new = reg.start_run(
        {"model": "resnet50", "data_wait_fraction": 0.05, "comparison_json": {"status": "predicted"}}, warn
    )
    assert warn == [] and new == 2
    assert _user_version(reg.path) == SCHEMA_VERSION == 2
    assert _columns(reg.path) == V1_COLUMNS + V2_ADDED
    kept = reg.get_run(1)
    assert kept["run_dir"] == "/runs/old" and kept["measured_step_s"] == 0.5 and kept["status"] == "finished"
    assert all(kept[c] is None for c in V2_ADDED)
    assert reg.get_run(2)["comparison_json"] == {"status": "predicted"} and reg.get_run(2)["data_wait_fraction"] == 0.05


def test_a_failing_migration_is_rolled_back_whole(reg):
    """v2's second ALTER fails (the column already exists): its first ALTER is undone with it, the version stays."""
    _v1_database(reg.path)
    with sqlite3.connect(reg.path) as conn:
        conn.execute("ALTER TABLE runs ADD COLUMN data_wait_fraction REAL")
    warn = Warnings()
    assert reg.start_run({"model": "m"}, warn) is None
    assert len(warn) == 1 and "duplicate column" in warn[0]
    assert _user_version(reg.path) == 1 and "measured_step_p95_s" not in _columns(reg.path)
    assert [r["id"] for r in reg.list_runs()] == [1]


def test_a_newer_schema_is_refused(reg):
    warn = Warnings()
    run_id = reg.start_run({"model": "m"}, warn)
    with sqlite3.connect(reg.path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    assert reg.start_run({"model": "m"}, warn) is None and reg.update_run(run_id, {"steps": 1}, warn) is False
    assert len(warn) == 2 and all("newer paddlefit" in w and str(reg.path) in w for w in warn)
    with pytest.raises(RegistryError, match=rf"newer paddlefit \(schema v{SCHEMA_VERSION + 1}.*upgrade paddlefit"):
        reg.list_runs()
    with pytest.raises(RegistryError, match="newer paddlefit"):
        reg.get_run(run_id)
    assert _user_version(reg.path) == SCHEMA_VERSION + 1  # untouched


def test_a_running_row_whose_process_is_gone_shows_lost(reg):
    warn = Warnings()
    dead = reg.start_run({"model": "dead", "pid": _dead_pid()}, warn)
    alive = reg.start_run({"model": "alive"}, warn)  # this process
    remote = reg.start_run({"model": "remote", "pid": _dead_pid(), "host": "another-host"}, warn)
    done = reg.start_run({"model": "done", "pid": _dead_pid(), "status": "finished"}, warn)
    status = {r["model"]: r["status"] for r in reg.list_runs()}
    assert status == {"dead": "lost", "alive": "running", "remote": "running", "done": "finished"}
    assert reg.get_run(dead)["status"] == "lost"
    with sqlite3.connect(reg.path) as conn:  # the row itself is not rewritten
        assert conn.execute("SELECT status FROM runs WHERE id = ?", (dead,)).fetchone()[0] == "running"
    assert (alive, remote, done) == (2, 3, 4) and warn == []


def test_migration_scripts_split_into_statements():
    assert statements("CREATE TABLE t (a);\n\nALTER TABLE t ADD COLUMN b;\n") == [
        "CREATE TABLE t (a);",
        "ALTER TABLE t ADD COLUMN b;",
    ]
    assert len(statements(MIGRATIONS[1])) == 3 and len(statements(MIGRATIONS[0])) == 3
