"""The run registry's SQLite schema: the migrations (one SQL script per version, applied in order), the columns of
the current version and the values they accept. No I/O here; :mod:`paddlefit.runs.registry` applies them."""

from __future__ import annotations

import sqlite3

#: version 1: one row per run (identity, configuration, versions, predicted and measured figures, results)
_V1 = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    run_dir TEXT,
    host TEXT,
    pid INTEGER,
    started_at TEXT,
    ended_at TEXT,
    status TEXT NOT NULL DEFAULT 'running',
    exit_code INTEGER,
    reason TEXT,
    resumes INTEGER NOT NULL DEFAULT 0,
    spec_json TEXT,
    spec_sha256 TEXT,
    model TEXT,
    params INTEGER,
    device_kind TEXT,
    device_name TEXT,
    device_count INTEGER,
    precision TEXT,
    micro_batch_size INTEGER,
    grad_accum_steps INTEGER,
    global_batch INTEGER,
    paddle_version TEXT,
    cuda_version TEXT,
    driver_version TEXT,
    predicted_step_s REAL,
    measured_step_s REAL,
    predicted_samples_per_s REAL,
    measured_samples_per_s REAL,
    predicted_peak_bytes REAL,
    measured_peak_bytes REAL,
    predicted_mfu REAL,
    measured_mfu REAL,
    final_loss REAL,
    eval_loss REAL,
    eval_accuracy REAL,
    steps INTEGER
);
CREATE INDEX runs_run_dir ON runs (run_dir);
CREATE INDEX runs_device_name ON runs (device_name);
"""

#: version 2: the step-time tail, the input pipeline's share of the step, the full predicted-vs-measured document
_V2 = """
ALTER TABLE runs ADD COLUMN measured_step_p95_s REAL;
ALTER TABLE runs ADD COLUMN data_wait_fraction REAL;
ALTER TABLE runs ADD COLUMN comparison_json TEXT;
"""

#: ``MIGRATIONS[i]`` takes a database from version ``i`` (``PRAGMA user_version``; 0 = empty) to ``i + 1``. Append
#: only: a released script is never edited, a change is a new script.
MIGRATIONS: list[str] = [_V1, _V2]

#: the schema version this code writes and reads (``PRAGMA user_version`` of an up-to-date database)
SCHEMA_VERSION: int = len(MIGRATIONS)

#: the values of ``status``; ``lost`` is never stored: it is how a listing shows a ``running`` row of this host whose
#: process is gone (killed or crashed); ``replaced``: a later ``train --resume never`` in the same run directory
#: deleted this run's checkpoints
STATUSES = ("running", "finished", "stopped", "budget", "nonfinite", "failed", "replaced")
LOST = "lost"

_INT, _REAL, _TEXT = "INTEGER", "REAL", "TEXT"

#: every column of the current version and its SQL type (``id`` is assigned by the database)
COLUMNS: dict[str, str] = {
    "id": _INT,
    "run_dir": _TEXT,
    "host": _TEXT,
    "pid": _INT,
    "started_at": _TEXT,
    "ended_at": _TEXT,
    "status": _TEXT,
    "exit_code": _INT,
    "reason": _TEXT,
    "resumes": _INT,
    "spec_json": _TEXT,
    "spec_sha256": _TEXT,
    "model": _TEXT,
    "params": _INT,
    "device_kind": _TEXT,
    "device_name": _TEXT,
    "device_count": _INT,
    "precision": _TEXT,
    "micro_batch_size": _INT,
    "grad_accum_steps": _INT,
    "global_batch": _INT,
    "paddle_version": _TEXT,
    "cuda_version": _TEXT,
    "driver_version": _TEXT,
    "predicted_step_s": _REAL,
    "measured_step_s": _REAL,
    "measured_step_p95_s": _REAL,
    "predicted_samples_per_s": _REAL,
    "measured_samples_per_s": _REAL,
    "predicted_peak_bytes": _REAL,
    "measured_peak_bytes": _REAL,
    "predicted_mfu": _REAL,
    "measured_mfu": _REAL,
    "data_wait_fraction": _REAL,
    "final_loss": _REAL,
    "eval_loss": _REAL,
    "eval_accuracy": _REAL,
    "steps": _INT,
    "comparison_json": _TEXT,
}

#: the columns holding a JSON document (a dict or list given to the write API is serialised; reads parse them)
JSON_COLUMNS = ("spec_json", "comparison_json")

#: the columns a caller may write (``id`` is the database's)
WRITABLE = tuple(c for c in COLUMNS if c != "id")


def statements(script: str) -> list[str]:
    """The SQL statements of ``script`` in order (split where :func:`sqlite3.complete_statement` says one ends), so a
    migration runs statement by statement inside the caller's transaction (``executescript`` would commit first)."""
    found, buf = [], ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            found.append(buf.strip())
            buf = ""
    if buf.strip():
        found.append(buf.strip())
    return found


def check_fields(fields: dict[str, object]) -> dict[str, object]:
    """``fields`` as values SQLite stores: JSON columns' dicts and lists serialised, bools as 0/1, numpy scalars as
    Python numbers, strings as valid UTF-8 (a run directory's undecodable bytes as ``\\xNN``:
    :func:`paddlefit.textsafe.storable_text`).

    Raises:
        ValueError: a key that is not a writable column, a ``status`` outside :data:`STATUSES`, or a value that is
            not a number, a string or None (a programming error of the caller, not a registry failure).
    """
    import json

    from paddlefit.textsafe import storable_text

    unknown = sorted(set(fields) - set(WRITABLE))
    if unknown:
        raise ValueError(f"run registry: unknown field(s) {unknown}; the columns are {list(WRITABLE)}")
    clean: dict[str, object] = {}
    for key, value in fields.items():
        if key in JSON_COLUMNS and isinstance(value, dict | list):
            value = json.dumps(value, sort_keys=True, default=str)
        elif hasattr(value, "item") and not isinstance(value, str | bytes):  # numpy scalar
            value = value.item()  # type: ignore[union-attr]
        if isinstance(value, bool):
            value = int(value)
        if value is not None and not isinstance(value, int | float | str):
            raise ValueError(
                f"run registry: field {key!r} has a {type(value).__name__} value {value!r}; "
                "give a number, a string or None"
            )
        if isinstance(value, str):  # a run dir not valid UTF-8 (surrogateescape): SQLite takes UTF-8 text only
            value = storable_text(value)
        if key == "status" and value not in STATUSES:
            raise ValueError(f"run registry: status {value!r} is not one of {list(STATUSES)}")
        clean[key] = value
    return clean
