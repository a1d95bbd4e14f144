"""The resumes of a run as the report and ``runs show`` tell them: one line per resume with the time down, the steps
lost and run again, and the compute time that cost.

Sources: the record a resume writes in metrics.jsonl (:func:`paddlefit.train.metrics.resume_record`, an
``{"event": "resume"}`` line written by rank 0 in the rewrite that cuts the lost steps' lines; it survives later
resumes), and, for runs of an older paddlefit without it, what :mod:`paddlefit.report.reading` infers from
wall-clock gaps and checkpoint times (the time down only).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paddlefit.fileio import loads_limited
from paddlefit.rundir.files import checkpoint_name, metrics_file, read_metrics_bytes
from paddlefit.rundir.layout import RESUME_EVENT
from paddlefit.units import MIB

__all__ = ["Resume", "is_resume_record", "lost_text", "read_resume_records", "record_resumes", "resume_line"]

#: metrics.jsonl is read up to this size for its resume records (``runs show``)
MAX_READ_BYTES = 512 * MIB


@dataclass
class Resume:
    """A resume: the run continued from ``from_checkpoint`` (step ``step``) after being down ``downtime_s``
    seconds. From a resume record, ``lost_steps`` (first, last) were lost and run again, costing
    ``lost_compute_s`` seconds of their measured step times; inferred resumes have None there."""

    step: int
    from_checkpoint: str
    next_checkpoint: str
    downtime_s: float
    evidence: str
    #: the wall-clock gap in metrics.jsonl (Unix seconds of the lines either side), when found from the times
    gap_unix: tuple[float, float] | None = None
    lost_steps: tuple[int, int] | None = None
    lost_compute_s: float | None = None


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def is_resume_record(rec: Any) -> bool:
    """Whether a parsed metrics.jsonl line is a well-formed resume record (its numbers numbers)."""
    if not (isinstance(rec, dict) and rec.get("event") == RESUME_EVENT and isinstance(rec.get("step"), int)):
        return False
    lost = rec.get("lost_steps")
    lost_ok = lost is None or (isinstance(lost, list) and len(lost) == 2 and all(isinstance(s, int) for s in lost))
    return lost_ok and all(rec.get(k) is None or _num(rec[k]) for k in ("down_s", "lost_compute_s", "time"))


def read_resume_records(run_dir: Path) -> list[dict[str, Any]]:
    """The resume records of ``run_dir``'s metrics.jsonl in file order ([] when absent or unreadable); lines that
    do not parse are skipped (the report counts them)."""
    try:
        if not metrics_file(run_dir).is_file():
            return []
        data = read_metrics_bytes(run_dir, MAX_READ_BYTES)
    except (OSError, ValueError):  # unreadable, or a recorded path no file system takes (a NUL byte)
        return []
    out = []
    for raw in data.decode("utf-8", errors="replace").splitlines():
        if '"event"' not in raw:
            continue
        try:
            rec = loads_limited(raw, "a line")
        except ValueError:
            continue
        if is_resume_record(rec):
            out.append(rec)
    return out


def record_resumes(records: list[dict[str, Any]], inferred: list[Resume]) -> list[Resume]:
    """One :class:`Resume` per resume record; the wall-clock gap of an ``inferred`` resume at the same step (for
    the plot over time) is kept with the last record at that step (the gap ends at the first line after it)."""
    gaps = {r.step: r.gap_unix for r in inferred if r.gap_unix is not None}
    last = {rec["step"]: i for i, rec in enumerate(records)}
    out = []
    for i, rec in enumerate(records):
        step, lost = rec["step"], rec.get("lost_steps")
        down = rec.get("down_s")
        out.append(
            Resume(
                step,
                checkpoint_name(step),
                "(resume record)",
                float(down) if down is not None else 0.0,
                "metrics.jsonl: the resume's record",
                gaps.get(step) if last[step] == i else None,
                (lost[0], lost[1]) if lost else None,
                float(rec["lost_compute_s"]) if rec.get("lost_compute_s") is not None else None,
            )
        )
    return out


def lost_text(r: Resume) -> str:
    """``steps 61-75 (15) lost and run again, 1.2 s of compute`` (``step 61 ...`` for one); ``no step lost``;
    ``-`` when not recorded."""
    if r.lost_compute_s is None:
        return "-"
    if r.lost_steps is None:
        return "no step lost"
    a, b = r.lost_steps
    steps = f"step {a:,d}" if a == b else f"steps {a:,d}-{b:,d} ({b - a + 1:,d})"
    return f"{steps} lost and run again, {r.lost_compute_s:,.1f} s of compute"


def resume_line(r: Resume) -> str:
    """The terminal's line for a resume: ``resumed at step 60 (from step-00000060): down 6.3 s; steps 61-75 (15)
    lost and run again, 1.2 s of compute``."""
    lost = lost_text(r)
    return f"resumed at step {r.step:,d} (from {r.from_checkpoint}): down {r.downtime_s:,.1f} s" + (
        f"; {lost}" if lost != "-" else f" ({r.evidence})"
    )
