"""Read a ``paddlefit train`` run directory for the HTML report (:mod:`paddlefit.report.html`): metrics, summary,
status, checkpoints and the resumes they show, the job spec, and the optional comparison/profile/snapshot files.

Pure reading: nothing in the run directory is written or locked, so a run that is still going can be read (every
file but metrics.jsonl is written atomically; its last line may be cut, and is skipped).

What the run records, and therefore what can be shown: every line of metrics.jsonl (one per optimizer step and per
evaluation) has its wall-clock ``time`` (Unix seconds), and each resume writes a record line
(:mod:`paddlefit.report.resumes`: the time down, the steps lost and run again and their compute time), which is
what the report shows. A run of an older paddlefit has no record (the lines after the checkpoint were cut and
rewritten), but the first line written after the resume comes late: a gap between consecutive lines
longer than max(10 x the median ``step_time_s``, 5 s), ending at a train line (the gap before an eval line is the
evaluation), is a stop or kill and a resume at the step of the line before it, down for the gap (less the step's
own time). Metrics of an older paddlefit have no ``time``; for them
(and merged with the above, one resume per step) a resume is found from two consecutive checkpoints still on disk:
the wall time the trainer counts (``totals.wall_s`` in ``trainer.json``, which restarts from the checkpoint's value
in a resumed process) advanced less between them than the wall clock did (``created_unix`` in their manifests);
the difference is the time the run was down (lost work after the checkpoint, the pause, start-up). Those resumes
older than the oldest kept checkpoint (``checkpoint.keep_last``) are not visible.
"""

from __future__ import annotations

import itertools
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paddlefit.errors import PaddlefitError
from paddlefit.fileio import InputFileError, loads_limited
from paddlefit.process.isolation import pid_alive
from paddlefit.report.resumes import Resume, is_resume_record, record_resumes
from paddlefit.rundir.checkpoint_files import read_manifest, read_trainer_json
from paddlefit.rundir.files import (
    checkpoint_name,
    checkpoints_dir,
    failed_starts,
    metrics_file,
    read_lock_info,
    read_metrics_bytes,
    read_run_json,
    read_spec_text,
    run_file,
    spec_file,
)
from paddlefit.rundir.layout import (
    COMPARISON_FILE,
    MANIFEST_FILE,
    PROFILE_FILE,
    SNAPSHOT_FILE,
    STATUS_FILE,
    SUMMARY_FILE,
    TRAINER_FILE,
    status_name,
)
from paddlefit.runs.schema import LOST
from paddlefit.runs.view import comparison_problem
from paddlefit.textsafe import name_safe
from paddlefit.units import MIB

__all__ = [
    "SNAPSHOT_FILES",
    "CheckpointInfo",
    "ReportData",
    "Resume",
    "build_report",
    "find_time_resumes",
    "is_run_dir",
    "line_time",
]

#: ``paddlefit profile JOB --json > RUN_DIR/profile.json``: the step-time breakdown (``profile`` writes no run dir)
#: doctor's environment snapshot (``Snapshot.to_dict()``), written by ``train`` at the start of every run (or
#: saved by hand: ``paddlefit doctor --snapshot RUN_DIR/snapshot.json``)
SNAPSHOT_FILES = (SNAPSHOT_FILE, "environment.json")
#: a checkpoint pair whose wall-clock gap exceeds the trainer's wall-time gap by more than this is a resume
RESUME_GAP_S = 0.5
#: a gap between consecutive metrics lines longer than max(this x the median step time, :data:`MIN_TIME_GAP_S`)
#: is a stop/kill and resume
TIME_GAP_STEPS = 10
MIN_TIME_GAP_S = 5.0
#: metrics.jsonl is read up to this size (a run of millions of steps: the report reads the first 512 MiB)
MAX_METRICS_BYTES = 512 * MIB


@dataclass
class CheckpointInfo:
    """One ``RUN_DIR/checkpoints/step-*`` directory: its step, bytes on disk, manifest time and trainer wall time
    (None when its manifest or trainer.json cannot be read: an incomplete or damaged checkpoint)."""

    name: str
    step: int
    size_bytes: int
    created_unix: float | None
    wall_s: float | None
    complete: bool
    total_steps: int | None = None


@dataclass
class ReportData:
    """Everything the report shows, read from one run directory (:func:`build_report`)."""

    run_dir: Path
    model: str | None
    status: str  # running | lost, or how it ended (finished | stopped | budget | nonfinite | failed), as `runs` says
    status_detail: str
    steps: int | None
    total_steps: int | None
    device: str
    train: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    comparison: dict[str, Any] | None = None
    comparison_source: str | None = None
    job_yaml: str | None = None
    snapshot: dict[str, Any] | None = None
    snapshot_source: str | None = None
    profile: dict[str, Any] | None = None
    checkpoints: list[CheckpointInfo] = field(default_factory=list)
    resumes: list[Resume] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def is_run_dir(run_dir: Path) -> bool:
    """Whether ``run_dir`` looks like a ``paddlefit train`` run directory (it has job.yaml or metrics.jsonl)."""
    return run_dir.is_dir() and (spec_file(run_dir).is_file() or metrics_file(run_dir).is_file())


def read_json(run_dir: Path, name: str, notes: list[str]) -> Any:
    """The small JSON file ``RUN_DIR/name``, or None when absent; an unreadable, too large or too deeply nested one
    (:func:`~paddlefit.rundir.files.read_run_json`) adds a note and gives None."""
    if not run_file(run_dir, name).exists():
        return None
    try:
        return read_run_json(run_dir, name)
    except InputFileError as exc:
        notes.append(f"{name} could not be read ({exc}); left out.")
        return None


def read_snapshot(run_dir: Path, notes: list[str]) -> tuple[dict[str, Any] | None, str | None]:
    """(snapshot dict, file name) of the first of :data:`SNAPSHOT_FILES` there, checked against doctor's snapshot
    schema (:func:`~paddlefit.diagnose.snapshot.load_snapshot`); one that is not a snapshot adds a note."""
    from paddlefit.diagnose.snapshot import load_snapshot

    for name in SNAPSHOT_FILES:
        if run_file(run_dir, name).exists():
            try:
                return load_snapshot(run_file(run_dir, name), name).to_dict(), name
            except PaddlefitError as exc:
                notes.append(f"{name} left out: {exc}")
    return None, None


def read_metrics(
    run_dir: Path, notes: list[str], events: list[dict[str, Any]] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """metrics.jsonl as (train lines, eval lines), each sorted by step; its resume records
    (:func:`~paddlefit.report.resumes.is_resume_record`) are appended to ``events`` in file order. Lines that do
    not parse (the last one of a running or killed run, cut mid-write), or whose numbers are not numbers
    (:func:`_numbers_ok`), are skipped and counted in a note."""
    if not metrics_file(run_dir).exists():
        notes.append("no metrics.jsonl: the run has not completed a step yet.")
        return [], []
    try:
        data = read_metrics_bytes(run_dir, MAX_METRICS_BYTES)
    except OSError as exc:  # a FIFO or device in its place (refused unread), a directory, no permission
        notes.append(f"metrics.jsonl cannot be read ({exc.strerror or exc}): no steps shown.")
        return [], []
    train, evals, bad = [], [], 0
    for raw in data.decode("utf-8", errors="replace").splitlines():
        if not raw.strip():
            continue
        try:
            rec = loads_limited(raw, "a line")
        except ValueError:
            bad += 1
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("step"), int) or not _numbers_ok(rec):
            bad += 1
        elif "event" in rec:
            if is_resume_record(rec) and events is not None:
                events.append(rec)
        elif "eval_loss" in rec:
            evals.append(rec)
        elif "loss" in rec:
            train.append(rec)
    if bad:
        notes.append(
            f"{bad} line(s) of metrics.jsonl do not parse (a line cut by a running or killed writer) or "
            "hold something else where a number goes; skipped."
        )
    return sorted(train, key=lambda r: r["step"]), sorted(evals, key=lambda r: r["step"])


#: metrics-line fields that are numbers (or null) in every line the trainer writes
NUMERIC_FIELDS = (
    "loss",
    "eval_loss",
    "eval_accuracy",
    "samples_per_s",
    "step_time_s",
    "data_wait_s",
    "time",
    "peak_memory_bytes",
    "epoch",
    "lr",
)


def _numbers_ok(rec: dict[str, Any]) -> bool:
    """Whether the line's :data:`NUMERIC_FIELDS` are numbers (or null), and a train line's ``loss`` a number."""

    def num(v: Any) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool)

    if "eval_loss" not in rec and "loss" in rec and not num(rec["loss"]):
        return False
    return all(rec.get(k) is None or num(rec[k]) for k in NUMERIC_FIELDS)


def read_checkpoints(run_dir: Path) -> list[CheckpointInfo]:
    """The ``step-*`` checkpoint directories, oldest first (manifests are read, files are not hashed)."""
    root = checkpoints_dir(run_dir)
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        if not (p.name.startswith("step-") and p.name[5:].isdigit() and p.is_dir()):
            continue
        size = sum(f.stat().st_size for f in p.iterdir() if f.is_file())
        created = wall = total = None
        try:
            manifest: Any = read_manifest(p, MANIFEST_FILE)
            created = float(manifest["created_unix"])
            trainer: Any = read_trainer_json(p, TRAINER_FILE)
            wall, total = float(trainer["totals"]["wall_s"]), trainer.get("total_steps")
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
        found.append(
            CheckpointInfo(
                p.name,
                int(p.name[5:]),
                size,
                created,
                wall,
                created is not None and wall is not None,
                total if isinstance(total, int) else None,
            )
        )
    return sorted(found, key=lambda c: c.step)


def find_resumes(ckpts: list[CheckpointInfo]) -> list[Resume]:
    """Resumes between consecutive complete checkpoints: the wall clock advanced more than the trainer's wall time
    did (see the module docstring). A finished run's last checkpoint is written at its end, so a resume after the
    last periodic checkpoint is seen too."""
    points = [(c.name, c.step, c.created_unix, c.wall_s) for c in ckpts if c.complete]
    out = []
    for (name_a, step_a, t_a, w_a), (name_b, step_b, t_b, w_b) in itertools.pairwise(points):
        if step_b < step_a or t_a is None or t_b is None or w_a is None or w_b is None:
            continue
        gap = (t_b - t_a) - (w_b - w_a)
        if gap > RESUME_GAP_S:
            out.append(
                Resume(
                    step_a,
                    name_a,
                    name_b,
                    gap,
                    f"{name_a} -> {name_b}: wall clock +{t_b - t_a:.1f} s, trainer's wall time +{w_b - w_a:.1f} s",
                )
            )
    return out


def line_time(rec: dict[str, Any]) -> float | None:
    """A metrics line's wall-clock ``time`` (Unix seconds), or None (metrics of an older paddlefit)."""
    t = rec.get("time")
    return float(t) if isinstance(t, int | float) and not isinstance(t, bool) else None


def time_gap_threshold(train: list[dict[str, Any]]) -> float:
    """max(:data:`TIME_GAP_STEPS` x the median ``step_time_s`` of the train lines, :data:`MIN_TIME_GAP_S`)."""
    times = sorted(float(r["step_time_s"]) for r in train if isinstance(r.get("step_time_s"), int | float))
    median = times[len(times) // 2] if times else 0.0
    return max(TIME_GAP_STEPS * median, MIN_TIME_GAP_S)


def find_time_resumes(train: list[dict[str, Any]], evals: list[dict[str, Any]]) -> list[Resume]:
    """Resumes seen in metrics.jsonl's wall-clock times (see the module docstring): consecutive lines (train and
    eval, in step order) further apart than :func:`time_gap_threshold`, the later one a train line (an eval line
    is written when its evaluation ends, so the gap before it is the evaluation's time). The resume is at the
    earlier line's step (the checkpoint the lines were cut back to); down time is the gap less the later step's own
    ``step_time_s``."""
    lines = sorted([(r["step"], 0, r) for r in train] + [(r["step"], 1, r) for r in evals], key=lambda x: x[:2])
    timed = [(step, rec, t) for step, _, rec in lines if (t := line_time(rec)) is not None]
    if len(timed) < 2:
        return []
    limit, out = time_gap_threshold(train), []
    for (step_a, _, t_a), (step_b, rec_b, t_b) in itertools.pairwise(timed):
        gap = t_b - t_a
        if gap > limit and "loss" in rec_b:
            own = rec_b.get("step_time_s")
            down = gap - (float(own) if isinstance(own, int | float) else 0.0)
            out.append(
                Resume(
                    step_a,
                    checkpoint_name(step_a),
                    f"step {step_b:,d}",
                    down,
                    f"metrics.jsonl: {gap:.1f} s between the lines of step {step_a:,d} and step "
                    f"{step_b:,d} (more than {limit:.1f} s)",
                    (t_a, t_b),
                )
            )
    return out


def merge_resumes(ckpts: list[CheckpointInfo], *found: list[Resume]) -> list[Resume]:
    """The resumes of every source, one per step (the first source's wins), in step order; a metrics-time resume
    names the checkpoint it continued from when that checkpoint is still on disk."""
    names = {c.step: c.name for c in ckpts}
    by_step: dict[int, Resume] = {}
    for resumes in found:
        for r in resumes:
            if r.step not in by_step:
                if r.gap_unix is not None and r.step in names:
                    r.from_checkpoint = names[r.step]
                by_step[r.step] = r
    return [by_step[s] for s in sorted(by_step)]


def lock_record(run_dir: Path) -> dict[str, Any] | None:
    """RUN_DIR/.lock.json, the lock holder's record (pid, host, since, command), removed when a run ends
    normally and left behind by a killed one; None when absent or unreadable."""
    try:
        info = read_lock_info(run_dir)
    except ValueError:
        return None
    return info if isinstance(info, dict) and "pid" in info and "host" in info else None


def since_unix(record: dict[str, Any] | None) -> float | None:
    """The lock record's start time (``%Y-%m-%dT%H:%M:%S%z``, whole seconds) as Unix seconds, or None."""
    import datetime

    try:
        return datetime.datetime.strptime(str(record["since"]), "%Y-%m-%dT%H:%M:%S%z").timestamp()  # type: ignore
    except (TypeError, KeyError, ValueError):
        return None


def writer_resume(ckpts: list[CheckpointInfo], record: dict[str, Any] | None) -> list[Resume]:
    """A running or killed run whose writer (the lock record's process) started after the newest checkpoint was
    written resumed from that checkpoint (``--resume never`` deletes the checkpoints after locking)."""
    since = since_unix(record)
    done = [c for c in ckpts if c.complete and c.created_unix is not None]
    if since is None or not done or since <= (done[-1].created_unix or 0.0):
        return []
    last = done[-1]
    return [
        Resume(
            last.step,
            last.name,
            "(the writer's process)",
            since - (last.created_unix or 0.0),
            f"the writer in .lock.json started at {record.get('since') if record else '?'}, after "
            f"{last.name} was written; its down time is at least the gap shown",
        )
    ]


def writer_alive(run_dir: Path) -> tuple[bool | None, str]:
    """From the lock record (:func:`lock_record`): (True, who) while the recorded process lives on this host,
    (False, who) when it is gone (killed), (None, ...) when there is no record or the holder is on another host."""
    info = lock_record(run_dir)
    if info is None:
        return None, ""
    pid, host = info["pid"], info["host"]
    who = f"pid {pid} on {host} since {info.get('since', '?')}"
    if host != socket.gethostname() or not isinstance(pid, int) or pid <= 0:
        return None, who
    return pid_alive(pid), who


def run_status(run_dir: Path, status: dict[str, Any] | None, last_step: int | None) -> tuple[str, str]:
    """(status, detail): running while the lock holder lives; lost (``runs``' word) when its record outlives it, or
    when no status.json covers the last step; else status.json's ending, named as ``runs`` names it
    (:func:`~paddlefit.rundir.layout.status_name`: finished, stopped, budget, nonfinite, failed)."""
    alive, who = writer_alive(run_dir)
    if alive:
        return "running", f"the writer ({who}) is alive"
    if alive is False:
        return LOST, f"the writer ({who}) is gone without recording an end"
    if not isinstance(status, dict):
        extra = f"; {who} holds the record (another host: cannot check)" if who else ""
        return LOST, f"no status.json: the run never recorded an end (killed, or still starting){extra}"
    code, reason, step = status.get("exit_code"), str(status.get("reason", "")), status.get("step")
    if isinstance(step, int) and last_step is not None and last_step > step:
        return LOST, f"status.json ({reason}, step {step}) is older than the last step {last_step} in metrics.jsonl"
    starts = failed_starts(status)
    last = starts[-1] if starts and isinstance(starts[-1], dict) else None
    tried = f"; {len(starts)} later start(s) refused, the last: {last.get('reason')}" if last else ""
    return status_name(code), f"exit code {code}: {reason}{tried}"


def spec_fields(job_yaml: str | None) -> dict[str, Any]:
    """The job spec as a dict ({} when missing or not YAML)."""
    if not job_yaml:
        return {}
    import yaml

    try:
        doc = yaml.safe_load(job_yaml)
    except (yaml.YAMLError, RecursionError):
        return {}
    return doc if isinstance(doc, dict) else {}


def check_run_dir(run_dir: Path | str) -> Path:
    """``run_dir`` as a Path when it is a run directory (:func:`is_run_dir`).

    Raises:
        PaddlefitError: it does not exist, or it is no run directory (no job.yaml and no metrics.jsonl).
    """
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise PaddlefitError(
            f"`RUN_DIR {name_safe(run_dir)}` does not exist; give the --run-dir of a `paddlefit train` run "
            "(`paddlefit runs` lists them)."
        )
    if not is_run_dir(run_dir):
        raise PaddlefitError(
            f"`RUN_DIR {name_safe(run_dir)}` is not a run directory (no job.yaml and no "
            "metrics.jsonl); give the --run-dir of a `paddlefit train` run."
        )
    return run_dir


def build_report(run_dir: Path) -> ReportData:
    """Read ``run_dir`` into a :class:`ReportData`, tolerating a run that is still going (no summary.json, a cut
    last metrics line) or was killed.

    Raises:
        PaddlefitError: ``run_dir`` does not exist, or is not a run directory (no job.yaml and no metrics.jsonl).
    """
    run_dir = check_run_dir(run_dir)
    notes: list[str] = []
    events: list[dict[str, Any]] = []
    train, evals = read_metrics(run_dir, notes, events)
    summary = read_json(run_dir, SUMMARY_FILE, notes)
    summary = summary if isinstance(summary, dict) else None
    job_yaml = read_spec_text(run_dir)
    spec = spec_fields(job_yaml)
    last_step = max([r["step"] for r in train] + [r["step"] for r in evals], default=None)
    status, detail = run_status(run_dir, read_json(run_dir, STATUS_FILE, notes), last_step)
    if summary is not None and status in ("running", LOST):
        notes.append("summary.json is from an earlier end of this run; the metrics go further.")
    ckpts = read_checkpoints(run_dir)
    by_time = find_time_resumes(train, evals)
    recorded = record_resumes(events, by_time)  # each resume its line (two at one step: two lines)
    # a run that writes resume records has them all: inferring from time gaps (for an older paddlefit's runs) would
    # read a pause of a loaded machine as one more resume
    inferred = (
        []
        if recorded
        else merge_resumes(ckpts, by_time, find_resumes(ckpts), writer_resume(ckpts, lock_record(run_dir)))
    )
    resumes = sorted(recorded + inferred, key=lambda r: r.step)
    comparison, source = read_json(run_dir, COMPARISON_FILE, notes), COMPARISON_FILE
    if not isinstance(comparison, dict) and summary is not None and isinstance(summary.get("comparison"), dict):
        comparison, source = summary["comparison"], 'summary.json["comparison"]'
    if comparison is not None and (problem := comparison_problem(comparison)):
        notes.append(f"{source} left out: {problem}.")
        comparison = None
    snapshot, snap_source = read_snapshot(run_dir, notes)
    profile = read_json(run_dir, PROFILE_FILE, notes)
    steps = summary.get("steps") if summary is not None and status not in ("running", LOST) else last_step
    total = next((c.total_steps for c in reversed(ckpts) if c.total_steps), spec.get("max_steps"))
    if summary is not None:
        device = f"{summary.get('device', '?')} x{summary.get('devices', '?')}, {summary.get('precision', '?')}"
    else:
        device = f"{spec.get('devices') or 'default'} device(s) (from job.yaml; no summary.json yet)"
    return ReportData(
        run_dir=run_dir.resolve(),
        model=spec.get("model"),
        status=status,
        status_detail=detail,
        steps=steps,
        total_steps=total if isinstance(total, int) else None,
        device=device,
        train=train,
        evals=evals,
        summary=summary,
        comparison=comparison if isinstance(comparison, dict) else None,
        comparison_source=source if isinstance(comparison, dict) else None,
        job_yaml=job_yaml,
        snapshot=snapshot,
        snapshot_source=snap_source,
        profile=profile if isinstance(profile, dict) else None,
        checkpoints=ckpts,
        resumes=resumes,
        notes=notes,
    )
