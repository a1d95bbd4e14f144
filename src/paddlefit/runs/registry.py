"""The run registry: one SQLite row per training run, at :func:`registry_path`.

Writes (:meth:`Registry.start_run`, :meth:`Registry.update_run`, :meth:`Registry.resume_run`) are made by the
trainer's global rank 0 and never fail a run: a registry that is missing, locked longer than the busy timeout,
corrupt or written by a newer paddlefit makes them call ``warn(message)`` once (a one-line message naming the file
and the fix) and return None/False. Reads (:meth:`Registry.list_runs`, :meth:`Registry.get_run`,
:meth:`Registry.measured_runs`) raise :class:`RegistryError` instead, which the CLI prints (exit 2).

The database is in WAL mode (readers never wait for the writer); every write is one ``BEGIN IMMEDIATE`` transaction
(one writer at a time, the others wait up to ``timeout_s``), which first migrates an older schema forward
(:data:`paddlefit.runs.schema.MIGRATIONS`, ``PRAGMA user_version``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from paddlefit.errors import PaddlefitError
from paddlefit.fileio import loads_limited
from paddlefit.process.isolation import pid_alive
from paddlefit.runs.schema import COLUMNS, JSON_COLUMNS, LOST, MIGRATIONS, SCHEMA_VERSION, check_fields, statements
from paddlefit.textsafe import storable_text

Warn = Callable[[str], None]
T = TypeVar("T")

#: the database's file name inside ``PADDLEFIT_HOME`` (or the platform's user data directory)
DB_NAME = "runs.db"
#: how long a write waits for another writer's transaction before giving up with a warning (seconds)
DEFAULT_TIMEOUT_S = 5.0


class RegistryError(PaddlefitError):
    """The run registry cannot be read (corrupt, locked, unreadable, newer schema) or has no such run; the message
    names the file and the fix (exit code 2)."""


class NewerSchemaError(Exception):
    """The database's ``PRAGMA user_version`` is above :data:`SCHEMA_VERSION` (written by a newer paddlefit)."""

    def __init__(self, version: int) -> None:
        super().__init__(f"schema v{version}")
        self.version = version


def registry_path() -> Path:
    """The registry file: ``$PADDLEFIT_HOME/runs.db`` when ``PADDLEFIT_HOME`` is set (and not empty), else
    ``runs.db`` in ``platformdirs.user_data_dir("paddlefit")`` (``~/.local/share/paddlefit`` on Linux). Neither the
    file nor its directory is created here."""
    home = os.environ.get("PADDLEFIT_HOME")
    if home:
        return Path(home).expanduser() / DB_NAME
    import platformdirs

    return Path(platformdirs.user_data_dir("paddlefit")) / DB_NAME


def utc_now() -> str:
    """Now as an ISO-8601 UTC string to the second (``2025-05-01T12:03:44+00:00``), the form of ``started_at`` and
    ``ended_at``."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _normalise_run_dir(fields: dict[str, object]) -> None:
    """``run_dir`` as an absolute path, so a run started as ``runs/x`` is found again from another directory."""
    if isinstance(fields.get("run_dir"), str):
        fields["run_dir"] = os.path.abspath(str(fields["run_dir"]))


class Registry:
    """The run registry at ``path`` (default :func:`registry_path`, read when the object is made).

    ``timeout_s``: how long a write waits for another process's write transaction (and a read for a lock), seconds.
    """

    def __init__(self, path: str | Path | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.path = Path(path) if path is not None else registry_path()
        self.timeout_s = timeout_s

    # ------------------------------------------------------------------ writes (never raise for the registry's state)

    def start_run(self, fields: dict[str, Any], warn: Warn) -> int | None:
        """Insert a run's row and return its id. ``status`` defaults to ``running``, ``host`` to this host name,
        ``pid`` to this process, ``started_at`` to :func:`utc_now`; ``run_dir`` is stored as an absolute path.

        Returns None after calling ``warn`` once when the registry cannot be written (see the module docstring).

        Raises:
            ValueError: a key that is not a column, a bad ``status``, a value that is not a number/string/None
                (dicts and lists are accepted for ``spec_json`` and ``comparison_json``).
        """
        clean = check_fields(fields)
        _normalise_run_dir(clean)
        clean.setdefault("status", "running")
        clean.setdefault("host", socket.gethostname())
        clean.setdefault("pid", os.getpid())
        clean.setdefault("started_at", utc_now())
        names = list(clean)
        sql = f"INSERT INTO runs ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"

        def insert(conn: sqlite3.Connection) -> int | None:
            return conn.execute(sql, [clean[n] for n in names]).lastrowid

        return self._guarded("cannot record the run", insert, warn, None)

    def update_run(self, run_id: int | None, fields: dict[str, Any], warn: Warn) -> bool:
        """Set ``fields`` on run ``run_id`` (the others are kept). True when the row was updated; False after calling
        ``warn`` when the registry cannot be written or has no run ``run_id``; False without a warning for a
        ``run_id`` of None (the :meth:`start_run` that returned it has warned already).

        Raises:
            ValueError: as :meth:`start_run`.
        """
        return self._update(run_id, check_fields(fields), warn, resume=False)

    def resume_run(self, run_id: int | None, fields: dict[str, Any], warn: Warn) -> bool:
        """A resumed run takes over its row again: ``resumes`` + 1 (in the same transaction, so two writers never
        lose an increment), ``status`` back to ``running``, ``ended_at``/``exit_code``/``reason`` cleared, ``host``
        and ``pid`` this process's unless given, then ``fields`` set. True/False and errors as :meth:`update_run`.
        """
        clean = check_fields(fields)
        clean.setdefault("host", socket.gethostname())
        clean.setdefault("pid", os.getpid())
        for key, value in (("status", "running"), ("ended_at", None), ("exit_code", None), ("reason", None)):
            clean.setdefault(key, value)
        return self._update(run_id, clean, warn, resume=True)

    def _update(self, run_id: int | None, clean: dict[str, object], warn: Warn, resume: bool) -> bool:
        if run_id is None:
            return False
        run_id = int(run_id)
        _normalise_run_dir(clean)
        sets = [f"{name} = ?" for name in clean] + (["resumes = resumes + 1"] if resume else [])
        sql = f"UPDATE runs SET {', '.join(sets)} WHERE id = ?" if sets else "SELECT id FROM runs WHERE id = ?"

        def update(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(sql, [*clean.values(), run_id])
            return (cur.rowcount if sets else len(cur.fetchall())) > 0

        done = self._guarded(f"cannot update run {run_id}", update, warn, None)
        if done is False:
            warn(
                f"run registry {self.path}: run {run_id} is not recorded there (moved or replaced registry?); "
                "this update is dropped, training goes on."
            )
        return bool(done)

    def find_latest_for_run_dir(self, run_dir: str | Path, warn: Warn | None = None) -> int | None:
        """The id of the newest run recorded with ``run_dir`` (compared as an absolute path), or None: none recorded,
        no registry yet, or a registry that cannot be read (then ``warn`` is called when given). Never raises."""
        try:
            with self._reading() as conn:
                if conn is None:
                    return None
                row = conn.execute(
                    "SELECT id FROM runs WHERE run_dir = ? ORDER BY id DESC LIMIT 1",
                    (storable_text(os.path.abspath(str(run_dir))),),
                ).fetchone()
                return int(row[0]) if row else None
        except RegistryError as exc:
            if warn is not None:
                warn(f"{exc} (the resumed run gets a new row)")
            return None

    # ------------------------------------------------------------------ reads (raise RegistryError)

    def list_runs(
        self, model: str | None = None, device: str | None = None, last: int | None = None
    ) -> list[dict[str, Any]]:
        """The recorded runs, newest first, as dicts of every column (JSON columns parsed; a ``running`` row of this
        host whose process is gone shows ``status`` ``lost``). ``model`` matches the model name, ``device`` the
        device name (``L4``) or kind (``gpu``/``cpu``), both case-insensitive (a model also by its name after the
        module: ``digits_cnn`` for ``paddlefit.models.examples:digits_cnn``); ``last`` keeps the newest N.
        An absent registry file is an empty list.

        Raises:
            RegistryError: ``last`` < 1, or the registry cannot be read (corrupt, locked, newer schema).
        """
        if last is not None and last < 1:
            raise RegistryError(
                f"`--last {last}`: the number of runs to list must be at least 1 (or leave it out to list them all)."
            )
        last = min(last, 2**63 - 1) if last is not None else None  # more than SQLite can count: all of them
        where, params = [], []
        if model is not None:  # the model string, or its name after the module (`digits_cnn` for `pkg.mod:digits_cnn`)
            tail = model.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            where.append(
                "(model = ? COLLATE NOCASE OR lower(model) LIKE ? ESCAPE '\\' OR lower(model) LIKE ? ESCAPE '\\')"
            )
            params += [model, f"%:{tail}", f"%.{tail}"]
        if device is not None:
            where.append("(device_name = ? COLLATE NOCASE OR device_kind = ? COLLATE NOCASE)")
            params += [device, device]
        return self._select(where, params, last)

    def get_run(self, run_id: int) -> dict[str, Any]:
        """Run ``run_id`` as :meth:`list_runs` gives it.

        Raises:
            RegistryError: no such run (the message points to ``paddlefit runs``), or the registry cannot be read.
        """
        rows = self._select(["id = ?"], [int(run_id)], 1) if 0 < int(run_id) < 2**63 else []  # SQLite's INTEGER
        if not rows:
            raise RegistryError(
                f"run {run_id} is not in the run registry {self.path}; `paddlefit runs` lists the recorded ids."
            )
        return rows[0]

    def measured_runs(self, device_name: str) -> list[dict[str, Any]]:
        """Finished runs on device ``device_name`` (case-insensitive, e.g. ``L4``, ``cpu``) that have both a
        predicted and a measured step time (seconds), newest first: the planner's calibration data.

        Raises:
            RegistryError: the registry cannot be read.
        """
        where = [
            "status = 'finished'",
            "device_name = ? COLLATE NOCASE",
            "predicted_step_s IS NOT NULL",
            "measured_step_s IS NOT NULL",
        ]
        return self._select(where, [device_name], None)

    def _select(self, where: list[str], params: list[Any], limit: int | None) -> list[dict[str, Any]]:
        sql = "SELECT * FROM runs" + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY id DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._reading() as conn:
            if (
                conn is None
                or not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs'").fetchone()
            ):
                return []
            cur = conn.execute(sql, params)
            names = [d[0] for d in cur.description]
            return [self._row(dict(zip(names, values, strict=True))) for values in cur.fetchall()]

    @staticmethod
    def _row(stored: dict[str, Any]) -> dict[str, Any]:
        """A stored row with every current column (None where an older schema has none), JSON parsed, ``lost``."""
        row = {name: stored.get(name) for name in COLUMNS}
        for name in JSON_COLUMNS:
            if isinstance(row[name], str):
                with contextlib.suppress(ValueError):  # not JSON (or nested too deeply): kept as the stored text
                    row[name] = loads_limited(row[name], f"registry column {name}")
        if (
            row["status"] == "running"
            and row["host"] == socket.gethostname()
            and row["pid"]
            and not pid_alive(int(row["pid"]))
        ):
            row["status"] = LOST
        return row

    # ------------------------------------------------------------------ connections

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: no implicit transactions, each write's BEGIN IMMEDIATE ... COMMIT is explicit
        return sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)

    def _connect_read_only(self) -> sqlite3.Connection:
        """A connection that never writes (``mode=ro``), so a read works on a read-only or full disk. SQLite's WAL
        mode needs a ``-shm`` index file beside the database even to read; where it cannot be made (a read-only
        directory, a full disk: "unable to open", "disk I/O error"), the file is opened ``immutable=1`` instead
        (no lock, no WAL: what the database file holds; nothing can write there at that moment either). SQLite
        docs: "URI filenames", "Read-only WAL databases" (wal.html#readonly).

        Raises:
            sqlite3.Error: the file cannot be read even so (corrupt, a lock held past the timeout...).
        """
        from urllib.parse import quote

        base = "file:" + quote(os.path.abspath(self.path))
        conn = sqlite3.connect(base + "?mode=ro", uri=True, timeout=self.timeout_s, isolation_level=None)
        try:
            conn.execute("PRAGMA user_version").fetchone()
            return conn
        except sqlite3.OperationalError as exc:
            conn.close()
            if not any(word in str(exc).lower() for word in ("unable to open", "disk i/o", "readonly", "read-only")):
                raise
        return sqlite3.connect(base + "?mode=ro&immutable=1", uri=True, timeout=self.timeout_s, isolation_level=None)

    def _wal(self, conn: sqlite3.Connection) -> None:
        """Put the database in WAL mode unless it is already. Switching a fresh file needs its exclusive lock, and
        SQLite answers "database is locked" at once (no busy wait) when another process is creating or switching it
        at the same moment (several trainers starting together): retried every 50 ms for up to the busy timeout.

        Raises:
            sqlite3.OperationalError: still locked after ``timeout_s``, or any other error.
        """
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                    conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc).lower() or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """A connection inside a ``BEGIN IMMEDIATE`` transaction on an up-to-date schema; commits on leaving."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = self._connect()
        try:
            self._wal(conn)
            conn.execute("BEGIN IMMEDIATE")
            try:
                self._migrate(conn)
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):  # closing the connection rolls back too
                        conn.execute("ROLLBACK")
                raise
        finally:
            conn.close()

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> None:
        """Apply the migrations the database lacks (inside the caller's transaction: all or none).

        Raises:
            NewerSchemaError: the database's version is above :data:`SCHEMA_VERSION`.
        """
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise NewerSchemaError(version)
        if version == SCHEMA_VERSION:
            return
        for script in MIGRATIONS[version:]:
            for statement in statements(script):
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _guarded(self, action: str, fn: Callable[[sqlite3.Connection], T], warn: Warn, failed: T) -> T:
        """``fn`` in a write transaction; any registry failure is one ``warn`` line and ``failed`` returned."""
        try:
            with self._writing() as conn:
                return fn(conn)
        except NewerSchemaError as exc:
            warn(
                f"run registry {self.path}: {action}: it was written by a newer paddlefit (schema v{exc.version}, "
                f"this one writes v{SCHEMA_VERSION}); training goes on unrecorded. Fix: upgrade paddlefit, or set "
                "PADDLEFIT_HOME to another directory for a separate registry."
            )
        except (sqlite3.Error, OSError) as exc:
            warn(f"run registry {self.path}: {action} ({exc}); training goes on unrecorded. Fix: {self._fix(exc)}")
        return failed

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection | None]:
        """A connection to read (None when the file does not exist); sqlite3 errors become :class:`RegistryError`."""
        home = next((p for p in self.path.parents if p.exists()), None)
        if home is not None and not home.is_dir():  # PADDLEFIT_HOME (or a directory above it) is a file
            raise RegistryError(
                f"the run registry {self.path} cannot be there: {home} is a file, not a directory. "
                "Fix: set PADDLEFIT_HOME to a directory (the registry is then "
                "$PADDLEFIT_HOME/runs.db)."
            )
        try:
            exists = self.path.exists()
            conn = self._connect_read_only() if exists else None
        except (sqlite3.Error, OSError) as exc:
            raise self._read_error(exc) from None
        if conn is None:
            yield None
            return
        try:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            if version > SCHEMA_VERSION:
                raise RegistryError(
                    f"the run registry {self.path} was written by a newer paddlefit (schema "
                    f"v{version}; this one reads up to v{SCHEMA_VERSION}); upgrade paddlefit, or set "
                    "PADDLEFIT_HOME to another directory for a separate registry."
                )
            yield conn
        except sqlite3.Error as exc:
            raise self._read_error(exc) from None
        finally:
            conn.close()

    def _read_error(self, exc: sqlite3.Error | OSError) -> RegistryError:
        return RegistryError(f"the run registry {self.path} cannot be read ({exc}). Fix: {self._fix(exc)}")

    def _fix(self, exc: BaseException) -> str:
        """The fix for a registry failure, from the error's kind (one sentence, with the path)."""
        text = str(exc).lower()
        if "locked" in text or "busy" in text:
            return (
                f"another process held it locked for more than {self.timeout_s:g} s; retry, and if no other "
                "paddlefit is running, look for a process holding the file (`fuser PATH`)."
            ).replace("PATH", str(self.path))
        if "full" in text:
            return f"free disk space on the file system of {self.path.parent}."
        home = next((p for p in self.path.parents if p.exists()), None)
        if home is not None and not home.is_dir():
            return f"{home} is a file, not a directory: set PADDLEFIT_HOME to a directory."
        if self.path.is_dir():
            return f"{self.path} is a directory: move it aside, or set PADDLEFIT_HOME to another directory."
        if isinstance(exc, OSError) or "unable to open" in text or "readonly" in text or "read-only" in text:
            return (
                f"make {self.path} and its directory writable, or set PADDLEFIT_HOME to a writable directory "
                "(the registry is then $PADDLEFIT_HOME/runs.db)."
            )
        if (
            (isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError))
            or "malformed" in text
            or "not a database" in text
        ):
            return (
                f"the file is corrupt (not a SQLite database); move it aside (`mv {self.path} "
                f"{self.path}.corrupt`) and the next `paddlefit train` starts a new registry."
            )
        return f"check {self.path} (move it aside if it is damaged: the next `paddlefit train` starts a new one)."
