"""Every path of a run directory and every read and write of its files, in one place: ``train`` writes them (rank 0
only), resume, ``export``, ``report``, ``predict`` and ``runs`` read them. The names are
:mod:`paddlefit.rundir.layout`'s; each file's content is documented where it is made.

Writes of the run's own files are atomic (:func:`~paddlefit.fileio.atomic_write_text`: a temp file beside it,
fsynced, renamed, the directory fsynced) with ``--run-dir`` named in the error of a failed write
(:class:`~paddlefit.fileio.FileWriteError`). Reads are bounded in size and JSON depth
(:func:`~paddlefit.fileio.read_json_limited`). The files inside a checkpoint are
:mod:`paddlefit.rundir.checkpoint_files`'s.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path
from typing import Any

from paddlefit.errors import PaddlefitError
from paddlefit.fileio import (
    AppendFile,
    atomic_write_text,
    check_output_path,
    open_regular,
    read_json_limited,
    read_text_limited,
    writing,
)
from paddlefit.rundir.layout import (
    CHECKPOINTS_DIR,
    COMPARISON_FILE,
    EXPORT_DIR,
    IMPORT_DIRS_FILE,
    LAUNCH_LOG_DIR,
    LAUNCH_SPEC_FILE,
    LAUNCHER_LOG,
    LOCK_FILE,
    LOCK_INFO_FILE,
    METRICS_FILE,
    PREDICTION_FILE,
    RANK0_LOG,
    REPORT_FILE,
    SNAPSHOT_FILE,
    SPEC_FILE,
    STATUS_FILE,
    SUMMARY_FILE,
    VISUALDL_DIR,
)

#: The run's files :func:`clean_temporaries` removes the atomic writes' leftovers of.
_CLEANED = (METRICS_FILE, SPEC_FILE, STATUS_FILE, SUMMARY_FILE, LAUNCH_SPEC_FILE, IMPORT_DIRS_FILE)
#: A checkpoint directory's name: ``step-`` and the optimizer step in at least 8 digits.
CHECKPOINT_NAME_RE = re.compile(r"^step-(\d{8,})$")
#: Size limit (bytes) of a checkpoint's JSON files (manifest, trainer.json, rng.json) and of status.json.
SMALL_JSON_BYTES = 1 << 20
#: Size limit (bytes) of the lock holder's record (.lock.json).
LOCK_INFO_BYTES = 1 << 16


# ---- paths ----------------------------------------------------------------------------------------------------


def checkpoints_dir(run_dir: Path) -> Path:
    """``RUN_DIR/checkpoints``: the run's :class:`~paddlefit.train.checkpoint.CheckpointStore`."""
    return Path(run_dir) / CHECKPOINTS_DIR


def checkpoint_name(step: int) -> str:
    """The directory name of the checkpoint at optimizer step ``step``: ``step-NNNNNNNN`` (8 digits at least)."""
    return f"step-{step:08d}"


def checkpoint_step(path: Path) -> int | None:
    """The step in a ``step-NNNNNNNN`` directory name, or None for any other name (``best/``...)."""
    m = CHECKPOINT_NAME_RE.match(Path(path).name)
    return int(m.group(1)) if m else None


def export_dir(run_dir: Path) -> Path:
    """``RUN_DIR/inference``: where ``paddlefit export`` writes the run's inference model by default."""
    return Path(run_dir) / EXPORT_DIR


def run_file(run_dir: Path, name: str) -> Path:
    """``RUN_DIR/name``, for a file named by :mod:`paddlefit.rundir.layout` that its reader looks up by name (the
    report's optional files: snapshot.json or environment.json, profile.json...)."""
    return Path(run_dir) / name


def report_file(run_dir: Path) -> Path:
    """``RUN_DIR/report.html``: where ``paddlefit report`` writes its page by default."""
    return Path(run_dir) / REPORT_FILE


def visualdl_dir(run_dir: Path) -> Path:
    """``RUN_DIR/visualdl``: VisualDL's logs of a run with ``visualdl: true``."""
    return Path(run_dir) / VISUALDL_DIR


def spec_file(run_dir: Path) -> Path:
    """``RUN_DIR/job.yaml``: the spec as run (:func:`write_run_spec`), which ``export`` and ``report`` read."""
    return Path(run_dir) / SPEC_FILE


def import_dirs_file(run_dir: Path) -> Path:
    """``RUN_DIR/import_dirs.json``: the folders the run found the user's modules in (:func:`write_run_spec`)."""
    return Path(run_dir) / IMPORT_DIRS_FILE


def lock_file(run_dir: Path) -> Path:
    """``RUN_DIR/.lock``: the run lock (:class:`~paddlefit.train.lock.RunDirLock`), created at a run's start."""
    return Path(run_dir) / LOCK_FILE


def metrics_file(run_dir: Path) -> Path:
    """``RUN_DIR/metrics.jsonl``: one JSON line per train step, evaluation and resume."""
    return Path(run_dir) / METRICS_FILE


def launch_log_dir(run_dir: Path) -> Path:
    """``RUN_DIR/launch-logs``: Paddle's launcher's and workers' logs of a multi-device run."""
    return Path(run_dir) / LAUNCH_LOG_DIR


def rank0_log(run_dir: Path) -> Path:
    """Rank 0's log in :func:`launch_log_dir` (``workerlog.0``), relayed to the terminal."""
    return launch_log_dir(run_dir) / RANK0_LOG


def launcher_log(run_dir: Path) -> Path:
    """The launcher's own output in :func:`launch_log_dir` (``launcher.log``)."""
    return launch_log_dir(run_dir) / LAUNCHER_LOG


# ---- the run's files ------------------------------------------------------------------------------------------


def clean_temporaries(run_dir: Path) -> list[Path]:
    """Delete the temporary files of atomic writes (:func:`paddlefit.fileio.atomic_write_text`: ``.NAME.*.tmp``)
    of the run directory's own files, left by a writer that was killed mid-write; returns what was removed. Call it
    only while no other process writes the run directory: holding its lock (:mod:`paddlefit.train.lock`), rank 0,
    at the start of a run."""
    removed = []
    for name in _CLEANED:
        for p in Path(run_dir).glob(f".{name}.*.tmp"):
            try:
                p.unlink()
                removed.append(p)
            except OSError:
                continue
    return removed


def _write(run_dir: Path, name: str, text: str) -> Path:
    """Write ``RUN_DIR/name`` atomically; a failure (:class:`~paddlefit.fileio.FileWriteError`) names ``--run-dir``."""
    return atomic_write_text(Path(run_dir) / name, text, option="--run-dir")


def _write_doc(run_dir: Path, name: str, doc: Any) -> Path:
    """``doc`` as indented JSON (2 spaces, a final newline) in ``RUN_DIR/name``, atomically."""
    return _write(run_dir, name, json.dumps(doc, indent=2) + "\n")


def spec_yaml(spec: Any) -> str:
    """The job spec (a :class:`~paddlefit.jobspec.spec.JobSpec`) as run, as YAML (RUN_DIR/job.yaml, which
    ``export`` reads)."""
    import yaml

    return yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False, allow_unicode=True)


def write_run_spec(run_dir: Path, spec: Any) -> None:
    """Record the job as run: RUN_DIR/job.yaml (:func:`spec_yaml`) and the folders its modules were found in
    (RUN_DIR/import_dirs.json, :func:`paddlefit.process.userimport.user_dirs`, which ``export`` searches), atomically.
    First, the files written at the run's end (status.json, summary.json, comparison.json) are checked to take an
    atomic write (:func:`~paddlefit.fileio.check_output_path`): a directory or FIFO in their place fails the run
    now, not after its training.

    Raises:
        FileWriteError: a write failed (a full disk...).
        PaddlefitError: one of those files is a directory, a symlink or a special file.
    """
    from paddlefit.process.userimport import user_dirs

    for name in (STATUS_FILE, SUMMARY_FILE, COMPARISON_FILE):
        check_output_path(Path(run_dir) / name, "--run-dir")
    _write(run_dir, SPEC_FILE, spec_yaml(spec))
    _write(run_dir, IMPORT_DIRS_FILE, json.dumps(user_dirs()))


def write_launch_spec(run_dir: Path, spec: Any) -> Path:
    """RUN_DIR/.job-launch.yaml (:func:`spec_yaml`), the spec the launched ranks read, atomically; its path.

    Raises:
        FileWriteError: the write failed (a full disk...).
    """
    return _write(run_dir, LAUNCH_SPEC_FILE, spec_yaml(spec))


def write_status(run_dir: Path, exit_code: int, reason: str, step: int) -> None:
    """Rank 0: record how the run ended in ``status.json`` (read by the parent of a multi-device run, matched by
    ``PADDLEFIT_RUN_TOKEN``), atomically.

    Raises:
        FileWriteError: the write failed.
    """
    token = os.environ.get("PADDLEFIT_RUN_TOKEN", "")
    kept = failed_starts(read_status(run_dir) or {})  # the starts refused before this run: still on record
    rewrite_status(
        run_dir,
        {
            "exit_code": exit_code,
            "reason": reason,
            "step": step,
            "token": token,
            **({"failed_starts": kept} if kept else {}),
        },
    )


def forget_ending(run_dir: Path) -> None:
    """Remove RUN_DIR's status.json and summary.json (a run replaced by ``--resume never``: they are its ending, not
    the new run's). Missing ones are fine.

    Raises:
        OSError: one exists and cannot be removed.
    """
    for name in (STATUS_FILE, SUMMARY_FILE):
        with contextlib.suppress(FileNotFoundError):
            (Path(run_dir) / name).unlink()


def rewrite_status(run_dir: Path, status: dict[str, Any]) -> None:
    """Replace ``status.json`` by ``status`` (one JSON line), atomically (the launcher adding what rank 0 could
    not know).

    Raises:
        FileWriteError: the write failed.
    """
    _write(run_dir, STATUS_FILE, json.dumps(status) + "\n")


def run_status(run_dir: Path, token: str | None = None) -> dict[str, Any] | None:
    """``run_dir``'s status.json when it is this run's: its ``token`` matches (default: ``PADDLEFIT_RUN_TOKEN``,
    set for launched runs; no token matches nothing), else None (also for a missing, unreadable, oversized or
    deeply nested file: :func:`~paddlefit.fileio.read_json_limited`)."""
    token = os.environ.get("PADDLEFIT_RUN_TOKEN", "") if token is None else token
    doc = read_status(run_dir)
    if not token or doc is None:
        return None
    mine = [d for d in [doc, *failed_starts(doc)] if isinstance(d, dict) and d.get("token") == token]
    return mine[-1] if mine else None


def read_status(run_dir: Path) -> dict[str, Any] | None:
    """RUN_DIR/status.json as a dict, whichever run wrote it, or None (missing, unreadable, over 1 MiB, too deep,
    not JSON, not an object)."""
    try:
        doc = read_json_limited(Path(run_dir) / STATUS_FILE, STATUS_FILE, limit=SMALL_JSON_BYTES)
    except (OSError, ValueError, PaddlefitError):
        return None
    return doc if isinstance(doc, dict) else None


def failed_starts(doc: dict[str, Any]) -> list[Any]:
    """The ``failed_starts`` of a status.json document (:func:`record_failed_start`), ``[]`` when it has none."""
    starts = doc.get("failed_starts")
    return starts if isinstance(starts, list) else []


#: failed starts status.json keeps (the newest)
FAILED_STARTS_KEPT = 20


def record_failed_start(run_dir: Path, exit_code: int, reason: str) -> None:
    """Record a ``train`` that stopped before its job was accepted (a refused resume, a bad spec) in status.json,
    atomically: beside the run's own ending (kept as the file's top level, as ``runs`` and ``report`` show it) as
    the newest of ``failed_starts`` ({exit_code, reason, step -1, token, at}); it is the top level when the run
    directory has no ending yet. :func:`run_status` finds it by its token.

    Raises:
        FileWriteError: the write failed.
    """
    from paddlefit.runs.registry import utc_now

    entry = {
        "exit_code": exit_code,
        "reason": reason,
        "step": -1,
        "at": utc_now(),
        "token": os.environ.get("PADDLEFIT_RUN_TOKEN", ""),
    }
    doc = read_status(run_dir)
    if doc is None or "exit_code" not in doc:
        rewrite_status(run_dir, entry)
        return
    rewrite_status(run_dir, {**doc, "failed_starts": [*failed_starts(doc), entry][-FAILED_STARTS_KEPT:]})


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    """RUN_DIR/summary.json, the run's figures (:meth:`paddlefit.train.loop.Trainer.summary`), atomically.
    Raises FileWriteError: the write failed."""
    _write_doc(run_dir, SUMMARY_FILE, summary)


def read_summary(run_dir: Path) -> Any:
    """RUN_DIR/summary.json as parsed (16 MiB and 64 levels at most).

    Raises:
        InputFileError: missing, unreadable, too large or not JSON (the message names ``--run-dir``).
    """
    return read_json_limited(Path(run_dir) / SUMMARY_FILE, "--run-dir")


def write_snapshot(run_dir: Path, snapshot: dict[str, Any]) -> None:
    """RUN_DIR/snapshot.json, doctor's snapshot of the machine (``Snapshot.to_dict()``), atomically.
    Raises FileWriteError: the write failed."""
    _write_doc(run_dir, SNAPSHOT_FILE, snapshot)


def read_prediction(run_dir: Path) -> Any:
    """RUN_DIR/prediction.json as parsed (:mod:`paddlefit.train.predict` checks it).

    Raises:
        InputFileError: missing, unreadable, too large or not JSON.
    """
    return read_run_json(run_dir, PREDICTION_FILE)


def write_prediction(run_dir: Path, doc: dict[str, Any]) -> None:
    """RUN_DIR/prediction.json, the plan's prediction of the run, atomically.
    Raises FileWriteError: the write failed."""
    _write_doc(run_dir, PREDICTION_FILE, doc)


def write_comparison(run_dir: Path, doc: dict[str, Any]) -> None:
    """RUN_DIR/comparison.json, the prediction against the measured run, atomically.
    Raises FileWriteError: the write failed."""
    _write_doc(run_dir, COMPARISON_FILE, doc)


def write_lock_info(run_dir: Path, info: dict[str, Any]) -> None:
    """RUN_DIR/.lock.json, who holds the run lock (pid, host, since, command), atomically.
    Raises FileWriteError: the write failed."""
    _write(run_dir, LOCK_INFO_FILE, json.dumps(info) + "\n")


def remove_lock_info(run_dir: Path) -> None:
    """Remove RUN_DIR/.lock.json (the lock is released).

    Raises:
        OSError: it cannot be removed (missing included).
    """
    (Path(run_dir) / LOCK_INFO_FILE).unlink()


def read_lock_info(run_dir: Path) -> Any:
    """RUN_DIR/.lock.json as parsed (64 KiB at most).

    Raises:
        InputFileError: missing, unreadable, too large or not JSON.
    """
    return read_json_limited(Path(run_dir) / LOCK_INFO_FILE, LOCK_INFO_FILE, limit=LOCK_INFO_BYTES)


def read_run_json(run_dir: Path, name: str) -> Any:
    """``RUN_DIR/name`` (summary.json, status.json, comparison.json, profile.json...) as parsed, bounded (16 MiB, 64
    levels), the file's name in a message.

    Raises:
        InputFileError: missing, unreadable, too large or not JSON.
    """
    path = Path(run_dir) / name
    return read_json_limited(path, path.name)


def read_spec_text(run_dir: Path) -> str | None:
    """RUN_DIR/job.yaml's text, or None when there is no such file.

    Raises:
        PaddlefitError: it cannot be read, is too large or is not UTF-8.
    """
    path = spec_file(run_dir)
    return read_text_limited(path, SPEC_FILE) if path.is_file() else None


def open_metrics(run_dir: Path) -> AppendFile:
    """RUN_DIR/metrics.jsonl opened to append lines to.

    Raises:
        FileWriteError: it cannot be opened (a directory of its name...).
    """
    return AppendFile(metrics_file(run_dir), option="--run-dir")


def read_metrics_text(run_dir: Path) -> str | None:
    """RUN_DIR/metrics.jsonl's whole text (the trainer rewriting it on resume), or None when there is none.

    Raises:
        FileWriteError: it cannot be read (a directory of its name).
    """
    path = metrics_file(run_dir)
    if not path.exists():
        return None
    with writing(path, "--run-dir"), open(open_regular(path), encoding="utf-8") as f:  # a FIFO, a directory: exit 2
        return f.read()


def rewrite_metrics(run_dir: Path, lines: list[str]) -> None:
    """Replace RUN_DIR/metrics.jsonl by ``lines`` (each without its newline), atomically.

    Raises:
        FileWriteError: the write failed.
    """
    _write(run_dir, METRICS_FILE, "".join(k + "\n" for k in lines))


def read_metrics_bytes(run_dir: Path, limit: int) -> bytes:
    """The first ``limit`` bytes of RUN_DIR/metrics.jsonl (``report`` reads a running run's file as it is).

    Raises:
        OSError: it cannot be read (missing included), or is no regular file (a FIFO: never waited on).
        ValueError: ``run_dir`` holds a character no file system takes (a NUL byte).
    """
    with open(open_regular(metrics_file(run_dir)), "rb") as f:  # a FIFO in its place: refused, never waited on
        return f.read(limit)
