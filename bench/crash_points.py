"""Crash points: SIGKILL a training run after each file-system operation of one checkpoint save and its prune, as
SQLite's crash tests do, and check after every one that the run resumes bit-exact losing at most one interval.

The job: digits_cnn, Adam, batch 16, ``max_steps`` 6, a checkpoint every 2 steps, ``keep_last`` 1, so the save at
step 4 also prunes step 2. A first run traces that save (:func:`install`, in a run started with ``--inject``):
every ``mkdir``, file ``write``
(first bytes: the file is partial), ``close`` (the file complete), ``fsync`` (file or directory), ``rename``,
``unlink`` and ``rmdir`` under ``checkpoints/``, in order. Then for each operation N: a run killed with SIGKILL
right after operation N completes; the run directory is checked (every ``step-*`` verifies against its manifest);
the same command resumes it (``--resume auto``) and must exit 0 resumed from step 2 or 4 (the kill happened after
step 4, so at most one 2-step interval is lost), with no ``.tmp-*`` left and the final parameters bit-identical to
an uninterrupted run (summary.json ``params_sha256``).

Run: `.venv/bin/python bench/crash_points.py [--only N,N...]` (about 10 s a point on 2 cores; ~30 points).
Exit code 0 when every point resumed bit-exact, else 1. tests/test_faults.py runs a sample of the points.
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))  # this checkout's paddlefit, here and in the runs started below

from paddlefit.train.checkpoint import verify  # noqa: E402 (needs the path above; imports no Paddle)

SPEC = {
    "model": "paddlefit.models.examples:digits_cnn",
    "data": {"train": "digits", "train_args": {"split": "train"}},
    "batch_size": 16,
    "max_steps": 6,
    "optimizer": "adam",
    "lr": 0.003,
    "seed": 3,
    "checkpoint": {"every_steps": 2, "every_minutes": 0, "keep_last": 1},
}
STEP, EVERY = 4, 2  # the traced save, and the checkpoint interval in steps
RESUMED_RE = re.compile(r"resumed from \S+ \(step (\d+),")


@dataclass
class Point:
    """One crash point and what the kill there left and the resume made of it."""

    n: int
    op: str
    path: str
    left: str = ""  # the step-* checkpoints after the kill
    killed: bool = False  # the run died by SIGKILL at the point (not earlier, not later)
    resumed_from: int | None = None
    exact: bool = False
    problem: str = ""

    @property
    def ok(self) -> bool:
        """Killed at the point, every checkpoint verified, resumed within one interval, bit-exact, nothing left."""
        return self.killed and self.exact and not self.problem


_state = {"on": False, "n": 0}
_real_open = builtins.open


def _where(path: Any, dir_fd: int | None = None) -> str:
    p = os.fsdecode(path) if isinstance(path, str | bytes | os.PathLike) else ""
    if dir_fd is not None and not os.path.isabs(p):
        with contextlib.suppress(OSError):
            p = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), p)
    return os.path.abspath(p) if p else p


def _op(kind: str, path: str) -> None:
    """One operation completed: log it and, at the chosen one, die as a SIGKILL kills (no cleanup, no flush)."""
    if not _state["on"] or "/checkpoints" not in path:
        return
    _state["n"] += 1
    if log := os.environ.get("CRASH_LOG"):
        with _real_open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps({"n": _state["n"], "op": kind, "path": path}) + "\n")
    if _state["n"] == int(os.environ.get("CRASH_AT", "0")):
        os.kill(os.getpid(), signal.SIGKILL)


class _TracedFile:
    """A file opened for writing: its first write and its close are operations."""

    def __init__(self, f: Any, path: str) -> None:
        self._f, self._path, self._wrote = f, path, False

    def write(self, data: Any) -> int:
        n = self._f.write(data)
        if not self._wrote:
            self._wrote = True
            _op("write", self._path)
        return n

    def close(self) -> None:
        self._f.close()
        _op("close", self._path)

    def __enter__(self) -> _TracedFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def install() -> None:
    """Patch ``open``, ``os`` and the checkpoint store, in the run ``--inject`` starts: the operations of the save of
    ``CRASH_STEP`` (its prune included) are logged to ``CRASH_LOG`` (one JSON line each), and after the
    ``CRASH_AT``-th (0: none) the process kills itself with SIGKILL (no cleanup, no flush)."""
    from paddlefit.train.checkpoint import CheckpointStore

    def traced_open(file: Any, mode: str = "r", *a: Any, **k: Any) -> Any:
        f = _real_open(file, mode, *a, **k)
        if _state["on"] and any(c in mode for c in "wax+") and not isinstance(file, int):
            return _TracedFile(f, _where(file))
        return f

    builtins.open = io.open = traced_open  # type: ignore[assignment]

    def wrap(name: str, kind: str, path_of: Any) -> None:
        real = getattr(os, name)

        def traced(*a: Any, **k: Any) -> Any:
            out = real(*a, **k)
            _op(kind, path_of(*a, **k))
            return out

        setattr(os, name, traced)

    wrap("mkdir", "mkdir", lambda p, *a, dir_fd=None, **k: _where(p, dir_fd))
    wrap("rename", "rename", lambda s, d, *a, **k: f"{_where(s)} -> {_where(d)}")
    wrap("replace", "rename", lambda s, d, *a, **k: f"{_where(s)} -> {_where(d)}")
    wrap("unlink", "unlink", lambda p, *a, dir_fd=None, **k: _where(p, dir_fd))
    wrap("rmdir", "rmdir", lambda p, *a, dir_fd=None, **k: _where(p, dir_fd))
    wrap("fsync", "fsync", lambda fd: _where(os.readlink(f"/proc/self/fd/{fd}")))
    real_save = CheckpointStore.save

    def save(self: Any, step: int, *a: Any, **k: Any) -> Any:
        _state["on"] = step == int(os.environ.get("CRASH_STEP", "0"))
        try:
            return real_save(self, step, *a, **k)
        finally:
            _state["on"] = False

    CheckpointStore.save = save  # type: ignore[method-assign]


def _env(extra: dict[str, str]) -> dict[str, str]:
    path = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "GLOG_minloglevel": "2", "PADDLEFIT_NO_PREDICT": "1", **extra}


def _train(spec: Path, run_dir: Path, extra: dict[str, str], inject: bool) -> subprocess.CompletedProcess:
    head = [sys.executable, __file__, "--inject"] if inject else [sys.executable, "-m", "paddlefit.cli.main"]
    return subprocess.run(
        [*head, "train", str(spec), "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        env=_env(extra),
        timeout=600,
    )


def _sha(run_dir: Path) -> str:
    return json.loads((run_dir / "summary.json").read_text())["params_sha256"]


def trace(work: Path) -> tuple[str, list[dict]]:
    """The uninterrupted run's params_sha256 and the operations of its save at :data:`STEP`, in order."""
    spec = work / "job.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    log = work / "ops.jsonl"
    r = _train(spec, work / "reference", {"CRASH_STEP": str(STEP), "CRASH_AT": "0", "CRASH_LOG": str(log)}, True)
    if r.returncode != 0:
        raise SystemExit(f"the reference run failed:\n{r.stderr[-3000:]}")
    ops = [json.loads(line) for line in log.read_text().splitlines()]
    return _sha(work / "reference"), ops


def crash_at(work: Path, op: dict, want_sha: str) -> Point:
    """Kill a run after operation ``op['n']`` of the traced save, check the directory, resume, compare."""
    root = str(work / f"kill-{op['n']}")
    shown = re.sub(r"\S*/checkpoints(/|$)", lambda m: "checkpoints/" if not m.group(1) else "", op["path"])
    point = Point(op["n"], op["op"], re.sub(r"(\.tmp-step-\d+)-\d+", r"\1-PID", shown))
    run_dir = Path(root)
    r = _train(work / "job.yaml", run_dir, {"CRASH_STEP": str(STEP), "CRASH_AT": str(op["n"])}, True)
    point.killed = r.returncode in (-9, 137)
    ckpts = sorted((run_dir / "checkpoints").glob("step-*"))
    point.left = ", ".join(p.name.removeprefix("step-").lstrip("0") for p in ckpts) or "none"
    bad = [f"{p.name}: {why}" for p in ckpts if (why := verify(p))]
    r2 = _train(work / "job.yaml", run_dir, {}, False)
    m = RESUMED_RE.search(r2.stderr)
    point.resumed_from = int(m.group(1)) if m else None
    if r2.returncode != 0:
        bad.append(f"resume exit {r2.returncode}: {r2.stderr.strip().splitlines()[-1:]}")
    elif point.resumed_from is None or point.resumed_from < STEP - EVERY:
        bad.append(f"resumed from {point.resumed_from}: more than one interval lost")
    else:
        point.exact = _sha(run_dir) == want_sha
    left = [p.name for p in (run_dir / "checkpoints").glob(".tmp-*")]
    point.problem = "; ".join(bad + ([f"left {left}"] if left else []))
    return point


def table(points: list[Point]) -> str:
    """The crash-point table, one row per point (plain text, for the terminal and docs/benchmarks.md)."""
    rows = [("#", "operation just completed", "checkpoints left", "resumed from", "bit-exact", "ok")]
    for p in points:
        rows.append(
            (
                str(p.n),
                f"{p.op} {p.path}"[:78],
                p.left,
                "-" if p.resumed_from is None else str(p.resumed_from),
                "yes" if p.exact else "NO",
                "yes" if p.ok else f"NO: {p.problem or 'not killed there'}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def main() -> int:
    """Trace, crash at every point (or ``--only``), print the table; exit 0 when every point is ok."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated operation numbers (default: all)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="crash-points-") as tmp:
        work = Path(tmp)
        want, ops = trace(work)
        chosen = {int(x) for x in a.only.split(",")} if a.only else None
        points = []
        for op in ops:
            if chosen is None or op["n"] in chosen:
                points.append(crash_at(work, op, want))
                if sys.stderr.isatty():  # progress on a terminal; the table says it all in a log
                    print(f"point {op['n']}/{len(ops)}: {'ok' if points[-1].ok else 'FAILED'}", file=sys.stderr)
        print(
            f"{len(ops)} file-system operations in the save of step {STEP} (and the prune of step {STEP - EVERY}); "
            f"SIGKILL after each, then `--resume auto`:\n"
        )
        print(table(points))
        good = sum(p.ok for p in points)
        print(f"\n{good}/{len(points)} points resumed bit-exact within one checkpoint interval")
    return 0 if good == len(points) else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--inject"]:  # a traced run: `crash_points.py --inject PADDLEFIT-ARGS...`
        install()
        sys.argv = ["paddlefit", *sys.argv[2:]]
        from paddlefit.cli.main import main as paddlefit_main

        paddlefit_main()
    else:
        sys.exit(main())
