"""Kill soak: SIGKILL a digits training run at random moments, resume it each time with `--resume auto`, and check
the result against an uninterrupted run of the same spec.

The job is examples/digits.yaml (digits_cnn, batch 32, Adam, cosine LR, an eval pass per 42-step epoch) with
``max_steps`` instead of epochs, a checkpoint every ``--every`` optimizer steps (no time trigger, so the work a kill
loses is counted in steps) and a log line per step. First one uninterrupted run: the reference, and the start-up
time (to the first step) and step rate of this machine. Then ``--kills`` times: start ``paddlefit train SPEC
--run-dir R --resume auto`` in its own session and, after a delay drawn uniformly from [0, L] (seeded), SIGKILL its
process group. So kills land in interpreter start-up, imports, the resume, training steps, eval passes and
checkpoint writes alike. L is the start-up plus a training span steered so the run is expected to be at about
``--soak-fraction`` of its steps after the last kill, from the reference's start-up and step rate, the step times
of the killed runs (on a busy machine steps are slower and the spans longer) and the progress so far; ``--window``
fixes L instead. After the last kill one more run finishes the job.

After every kill the run directory is checked: every ``step-*`` checkpoint verifies against its manifest (no
half-written checkpoint under a complete name); job.yaml, status.json and summary.json parse; once the killed
process got past its start-up, no ``.tmp-*`` checkpoint directory of an earlier process and no temporary file of an
atomic write seen after the previous kill is left; metrics.jsonl is whole lines (but a last one cut by the kill),
train steps 1..n once each and no eval step twice; the next run resumes from the newest valid checkpoint, never
older than the one the killed run started from. Steps lost by a kill = the last step the killed process reached
(its log line, or metrics.jsonl's last line) - the step the next run resumes from (0 when it was killed before its
first step).

Target: the final parameters are bit-identical to the uninterrupted run's (summary.json ``params_sha256`` and
every tensor of the final checkpoint's model.pdparams and optimizer.pdopt), no kill loses more than one checkpoint
interval (``--every`` steps), and no check fails (the metrics.jsonl of the killed run equals the uninterrupted
run's, losses and eval results step for step, timings aside). Exit code 0 when met, 1 when not.

Run: `.venv/bin/python bench/kill_soak.py [--kills 100] [--seed 0] [--every 6] [--steps 2000]` (100 kills: 10 to 15
minutes on 2 cores, depending on the load; `make bench` runs 30).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

warnings.filterwarnings("ignore", message="No ccache found")  # Paddle's import, for the final comparison
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))  # this checkout's paddlefit, here and in the trainers started below

from paddlefit.train.checkpoint import verify  # noqa: E402 (needs the path above; imports no Paddle)

EXAMPLE = ROOT / "examples" / "digits.yaml"
RESUMED_RE = re.compile(r"^resumed from (\S+) \(step (\d+),", re.M)
STEP_RE = re.compile(r"^step (\d+)/(\d+) \(epoch", re.M)
CKPT_TMP_RE = re.compile(r"^\.tmp-step-(\d+)-(\d+)(-old)?$")  # written, or being deleted
FILE_TMP_RE = re.compile(r"^\..+\.tmp$")  # fileio.atomic_write_text's temporary files
PHASES = ("start-up", "training", "checkpoint write", "after the last step")


@dataclass
class Kill:
    """One killed process: where the kill landed, what it reached and what it left behind."""

    index: int
    delay_s: float
    start: int  # the newest valid checkpoint before it ran: where it should resume
    pid: int = 0
    phase: str = "start-up"  # see PHASES; start-up = no step yet
    last: int | None = None  # the last step it reached (None: none)
    resume_next: int = 0  # the newest valid checkpoint after the kill: where the next run resumes
    lost: int = 0
    train_s: float = 0.0  # the step_time_s of its steps in metrics.jsonl
    problems: list[str] = field(default_factory=list)


def write_spec(path: Path, steps: int, every: int, keep_last: int) -> Path:
    """examples/digits.yaml as a ``steps``-step run with a checkpoint every ``every`` steps and a log line per step."""
    spec = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    spec.pop("epochs", None)
    spec.pop("run_dir", None)
    spec.update(
        max_steps=steps, log_every=1, checkpoint={"every_steps": every, "every_minutes": 0, "keep_last": keep_last}
    )
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def start(spec: Path, run_dir: Path, log: Path) -> subprocess.Popen:
    """``paddlefit train SPEC --run-dir RUN_DIR --resume auto`` in its own session (so killpg reaches any child),
    stdout and stderr to ``log``, this checkout's src first on PYTHONPATH."""
    path = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONPATH=path, GLOG_minloglevel="2", PYTHONUNBUFFERED="1")
    cmd = [
        sys.executable,
        "-m",
        "paddlefit.cli.main",
        "train",
        str(spec),
        "--run-dir",
        str(run_dir),
        "--resume",
        "auto",
    ]
    with open(log, "wb") as out:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=run_dir.parent,
            start_new_session=True,
        )


def read_metrics(run_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """metrics.jsonl's records and its problems: a line that does not parse (but a last one cut by a kill), train
    steps other than 1..n once each, an eval step twice."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return [], []
    lines = path.read_text(encoding="utf-8").split("\n")
    records, problems = [], []
    for i, line in enumerate(lines):
        if not line:
            continue
        try:
            records.append(json.loads(line))
        except ValueError:
            if i != len(lines) - 1:  # a line cut by a kill can only be the last (no newline after it)
                problems.append(f"metrics.jsonl line {i + 1} is not JSON: {line[:60]!r}")
    train = [r["step"] for r in records if "loss" in r]
    if train != list(range(1, len(train) + 1)):
        bad = next(i for i, s in enumerate(train) if s != i + 1)
        problems.append(
            f"metrics.jsonl train steps are not 1..n once each: {train[max(0, bad - 2) : bad + 3]} at "
            f"train line {bad + 1}"
        )
    dup = sorted(s for s, n in Counter(r["step"] for r in records if "eval_loss" in r).items() if n > 1)
    if dup:
        problems.append(f"metrics.jsonl has an eval line twice at step(s) {dup[:5]}")
    return records, problems


def run_dir_state(run_dir: Path) -> tuple[list[int], list[str], list[tuple[int, str]], set[str]]:
    """(steps of the step-* checkpoints that verify, newest first; problems; (writer pid, name) of each .tmp-*
    checkpoint directory, being written or deleted; the atomic writes' temporary files)."""
    problems: list[str] = []
    for name, parse in (("job.yaml", yaml.safe_load), ("status.json", json.loads), ("summary.json", json.loads)):
        try:
            if (run_dir / name).exists() and not isinstance(parse((run_dir / name).read_text(encoding="utf-8")), dict):
                problems.append(f"{name} is not a mapping")
        except (ValueError, yaml.YAMLError) as exc:
            problems.append(f"{name} does not parse: {type(exc).__name__}")
    file_tmps = {p.name for p in run_dir.iterdir() if FILE_TMP_RE.match(p.name)}
    root = run_dir / "checkpoints"
    valid: list[int] = []
    ckpt_tmps: list[tuple[int, str]] = []
    for p in sorted(root.iterdir(), reverse=True) if root.is_dir() else []:
        if p.name.startswith("step-"):
            why = verify(p)
            if why is None:
                valid.append(int(p.name.split("-")[1]))
            else:
                problems.append(f"checkpoint {p.name} does not verify: {why}")
        elif m := CKPT_TMP_RE.match(p.name):
            ckpt_tmps.append((int(m.group(2)), p.name))
        else:
            problems.append(f"unexpected entry checkpoints/{p.name}")
    return valid, problems, ckpt_tmps, file_tmps


def check_log(kill: Kill, log: str) -> bool:
    """Fill ``kill.last`` from the log; check its resume line and steps against ``kill.start``. Whether the process
    got past its start-up (resumed, or trained a step)."""
    resumed = RESUMED_RE.search(log)
    steps = [int(m.group(1)) for m in STEP_RE.finditer(log)]
    if resumed and int(resumed.group(2)) != kill.start:
        kill.problems.append(f"resumed from step {resumed.group(2)}; the newest valid checkpoint was {kill.start}")
    if steps:
        kill.last = steps[-1]
        if not resumed and kill.start > 0:
            kill.problems.append(f"trained from step {steps[0]} without resuming checkpoint {kill.start}")
        if steps != list(range(kill.start + 1, steps[-1] + 1)):
            kill.problems.append(
                f"its steps were {steps[0]}..{steps[-1]} ({len(steps)} lines) after checkpoint {kill.start}"
            )
    for line in log.splitlines():
        if line.startswith("warning: skipping checkpoint") or line.startswith("Traceback"):
            kill.problems.append(f"log: {line.strip()[:160]}")
    return bool(resumed or steps)


def soak_one(
    kill: Kill, spec: Path, run_dir: Path, log_path: Path, every: int, steps: int, seen_tmps: set[str]
) -> set[str]:
    """Start a run, SIGKILL its process group after ``kill.delay_s``, then examine its log and the run directory.
    Returns the atomic-write temporaries there now (``seen_tmps``: the ones after the previous kill)."""
    proc = start(spec, run_dir, log_path)
    kill.pid = proc.pid
    try:
        code = proc.wait(timeout=kill.delay_s)
        kill.problems.append(
            f"exited by itself with code {code} before the kill"
            + (" (the run finished: raise --steps)" if code == 0 else "")
        )
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    started = check_log(kill, log_path.read_text(encoding="utf-8", errors="replace"))
    valid, problems, ckpt_tmps, file_tmps = run_dir_state(run_dir)
    records, metric_problems = read_metrics(run_dir)
    kill.problems += problems + metric_problems
    if kill.last is not None:
        train = [r["step"] for r in records if "loss" in r]
        if train and train[-1] == kill.last + 1:  # killed between a step's metrics line and its log line
            kill.last = train[-1]
        kill.train_s = sum(r.get("step_time_s", 0.0) for r in records if "loss" in r and r["step"] > kill.start)
    if any(pid == proc.pid for pid, _ in ckpt_tmps):
        kill.phase = "checkpoint write"
    elif kill.last == steps:
        kill.phase = "after the last step"  # the final eval, checkpoint, summary
    elif kill.last is not None:
        kill.phase = "training"
    if started:  # its start-up removed what earlier processes left
        old = [f"checkpoints/{name}" for pid, name in ckpt_tmps if pid != proc.pid]
        old += sorted(file_tmps & seen_tmps)
        if old:
            kill.problems.append(f"left over from an earlier process: {', '.join(old)}")
    kill.resume_next = valid[0] if valid else 0
    if kill.resume_next < kill.start:
        kill.problems.append(f"the newest valid checkpoint went back from step {kill.start} to {kill.resume_next}")
    if kill.last is not None:
        kill.lost = kill.last - kill.resume_next
        if kill.lost > every:
            kill.problems.append(
                f"lost {kill.lost} steps (reached {kill.last}, resumes from {kill.resume_next}): "
                f"more than one checkpoint interval ({every})"
            )
    return file_tmps


def steered_window(goal: float, rate: float, startup: float, every: int, remaining: int) -> float:
    """L (seconds) such that a kill at a delay uniform in [0, L] is expected to advance the run by ``goal`` steps:
    ``startup`` seconds without a step, then ``rate`` steps/s, and the run keeps the steps up to its last
    checkpoint (on average half an interval fewer than it ran). The span after start-up is at least a quarter of
    the start-up (some kills always land in training) and at most the time of 30% of the ``remaining`` steps (the
    run must not finish before the last kill)."""

    def expected(w: float) -> float:
        x = max(0.0, w - every / (2 * rate))
        return rate * x * x / (2 * (startup + w))

    lo, hi = 0.25 * startup, 120.0
    if expected(lo) < goal:
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if expected(mid) < goal else (lo, mid)
    return startup + min(lo, 0.3 * remaining / rate)


def percentile(values: list[int], q: float) -> int:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    s = sorted(values)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def load_flat(path: Path) -> dict[str, Any]:
    """A paddle.save file as {key: NumPy array or plain value}, nested dicts flattened to ``a/b`` keys."""
    import numpy as np
    import paddle

    def flat(obj: Any, prefix: str, out: dict[str, Any]) -> dict[str, Any]:
        if isinstance(obj, dict):
            for k, v in obj.items():
                flat(v, f"{prefix}{k}/", out)
        else:
            out[prefix.rstrip("/")] = np.asarray(obj.numpy()) if hasattr(obj, "numpy") else obj
        return out

    return flat(paddle.load(str(path)), "", {})


def same_entries(a: Path, b: Path) -> tuple[int, int, list[str]]:
    """(entries equal bit for bit, entries, the keys that differ) of two paddle.save files."""
    import numpy as np

    ta, tb = load_flat(a), load_flat(b)
    differ = sorted(set(ta) ^ set(tb))
    for k in sorted(set(ta) & set(tb)):
        x, y = ta[k], tb[k]
        if isinstance(x, np.ndarray) and isinstance(y, np.ndarray):
            eq = x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
        else:
            eq = not isinstance(x, np.ndarray) and not isinstance(y, np.ndarray) and x == y
        if not eq:
            differ.append(k)
    n = len(set(ta) | set(tb))
    return n - len(differ), n, differ


def same_metrics(ref: list[dict[str, Any]], got: list[dict[str, Any]]) -> tuple[int, int, list[str]]:
    """(records equal to the reference's in step, epoch, loss, lr, micro-batch and eval results, records, the first
    differences); timings are left out."""
    keys = ("step", "epoch", "loss", "lr", "micro_batch_size", "eval_loss", "eval_accuracy")

    def key(r: dict[str, Any]) -> tuple:
        return tuple(r.get(k) for k in keys)

    pairs = list(zip(ref, got, strict=False))

    def name(r: dict[str, Any]) -> str:
        return f"step {r.get('step')}{' eval' if 'eval_loss' in r else ''}"

    diffs = [f"record {i + 1}: {name(a)} vs {name(b)}" for i, (a, b) in enumerate(pairs) if key(a) != key(b)]
    if len(ref) != len(got):
        diffs.append(f"{len(got)} records, the uninterrupted run has {len(ref)}")
    return sum(key(a) == key(b) for a, b in pairs), max(len(ref), len(got)), diffs[:2]


def wait_timed(proc: subprocess.Popen, run_dir: Path, timeout: float) -> tuple[float | None, int]:
    """Wait for ``proc``: (seconds from now to its first metrics line, exit code); killed after ``timeout``."""
    t0 = time.monotonic()
    first = None
    metrics = run_dir / "metrics.jsonl"
    while proc.poll() is None and time.monotonic() - t0 < timeout:
        if first is None and metrics.exists() and metrics.stat().st_size:
            first = time.monotonic() - t0
        time.sleep(0.02 if first is None else 0.2)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    return first, proc.wait()


def params_sha(run_dir: Path) -> str | None:
    """summary.json's params_sha256, or None."""
    try:
        return json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))["params_sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--kills", type=int, default=100, help="SIGKILLs before the run may finish [100]")
    ap.add_argument("--seed", type=int, default=0, help="seed of the kill delays [0]")
    ap.add_argument("--every", type=int, default=6, help="checkpoint every N optimizer steps: the interval [6]")
    ap.add_argument("--steps", type=int, default=None, help="max_steps of the job [20 x --kills, at least 300]")
    ap.add_argument("--keep-last", type=int, default=3, help="checkpoint.keep_last [3]")
    ap.add_argument(
        "--soak-fraction",
        type=float,
        default=0.8,
        help="steer the kill windows so the run is at about this fraction of its steps after the last kill [0.8]",
    )
    ap.add_argument(
        "--window",
        type=float,
        default=None,
        help="kill delays uniform in [0, this] seconds for every kill, instead of steered windows",
    )
    ap.add_argument("--workdir", type=Path, default=None, help="keep the runs and logs here [a temp dir, removed]")
    ap.add_argument("--verbose", action="store_true", help="a line per kill")
    args = ap.parse_args()
    if args.kills < 1 or args.every < 1 or not 0 < args.soak_fraction < 1:
        ap.error("--kills and --every must be >= 1, --soak-fraction in (0, 1)")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="kill-soak-"))
    try:
        return soak(args, args.steps or max(300, 20 * args.kills), work, Console(), time.monotonic())
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


def soak(args: argparse.Namespace, steps: int, work: Path, console: Console, t_all: float) -> int:
    (work / "logs").mkdir(parents=True, exist_ok=True)
    spec = write_spec(work / "digits-soak.yaml", steps, args.every, args.keep_last)
    ref_dir, run_dir = work / "uninterrupted", work / "killed"
    for d in (ref_dir, run_dir):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir()
    every = args.every
    console.print(
        f"job: examples/digits.yaml, {steps} steps, a checkpoint every {every} steps (keep_last "
        f"{args.keep_last}); {args.kills} kills, seed {args.seed}",
        highlight=False,
    )
    t0 = time.monotonic()
    ref_start, code = wait_timed(start(spec, ref_dir, work / "logs" / "uninterrupted.log"), ref_dir, 3600)
    ref_s = time.monotonic() - t0
    if code != 0 or ref_start is None:
        console.print((work / "logs" / "uninterrupted.log").read_text(errors="replace")[-3000:], markup=False)
        console.print(f"the uninterrupted run failed (exit {code}); target: NOT MET")
        return 1
    rate = steps / max(1e-3, ref_s - ref_start)  # optimizer steps/s, evals and checkpoint writes included
    # the share of that time in the steps themselves: a killed run's steps (their step_time_s) tell the rate now
    ref_train_s = sum(r.get("step_time_s", 0.0) for r in read_metrics(ref_dir)[0] if "loss" in r)
    in_steps = min(1.0, ref_train_s * rate / steps) if ref_train_s else 1.0
    console.print(
        f"uninterrupted run: {ref_s:.0f} s, its first step after {ref_start:.1f} s, then {rate:.0f} steps/s",
        highlight=False,
    )

    rng = random.Random(args.seed)
    kills: list[Kill] = []
    windows: list[float] = []
    at = 0  # the newest valid checkpoint: where the next run resumes
    seen_tmps: set[str] = set()
    t_soak = time.monotonic()
    for i in range(args.kills):
        if args.window is not None:
            window = args.window
        else:  # the progress still wanted, spread over the kills left
            goal = max(0.0, args.soak_fraction * steps - at) / (args.kills - i)
            window = steered_window(goal, rate, ref_start, every, steps - at)
        windows.append(window)
        kill = Kill(i + 1, rng.uniform(0.0, window), at)
        seen_tmps = soak_one(kill, spec, run_dir, work / "logs" / f"kill-{i + 1:03d}.log", every, steps, seen_tmps)
        kills.append(kill)
        at = kill.resume_next
        if kill.last is not None and kill.last - kill.start >= 5 and kill.train_s > 0:  # follow the machine's load
            rate = 0.6 * rate + 0.4 * in_steps * (kill.last - kill.start) / kill.train_s
        if args.verbose or kill.problems:
            console.print(
                f"kill {kill.index} after {kill.delay_s:.2f} s of [0, {window:.1f}] ({kill.phase}): from "
                f"step {kill.start} to {kill.last if kill.last is not None else '-'}, resumes from {at}, "
                f"lost {kill.lost}" + "".join(f"\n  PROBLEM: {p}" for p in kill.problems),
                highlight=False,
                markup=False,
            )
        elif kill.index % 10 == 0:
            console.print(
                f"{kill.index}/{args.kills} kills in {time.monotonic() - t_soak:.0f} s; the run is at step "
                f"{at}/{steps}",
                highlight=False,
            )
        if any("exited by itself" in p for p in kill.problems):
            break  # a crash or a finished run: further kills would soak nothing
    soak_s = time.monotonic() - t_soak

    # the last run finishes the job
    final = Kill(0, 0.0, at)
    log_path = work / "logs" / "final.log"
    t0 = time.monotonic()
    _, code = wait_timed(start(spec, run_dir, log_path), run_dir, 3600)
    final_s = time.monotonic() - t0
    log = log_path.read_text(encoding="utf-8", errors="replace")
    check_log(final, log)
    if code != 0:
        final.problems.append(f"the final run exited {code}: {(log.strip().splitlines() or [''])[-1][:200]}")
    valid, problems, ckpt_tmps, file_tmps = run_dir_state(run_dir)
    final.problems += problems + [f"left over: checkpoints/{name}" for _, name in ckpt_tmps]
    final.problems += [f"left over: {name}" for name in sorted(file_tmps)]
    if code == 0 and valid[:1] != [steps]:
        final.problems.append(f"the newest valid checkpoint after the final run is {valid[:1]}, not step {steps}")
    ref_records, ref_problems = read_metrics(ref_dir)
    records, problems = read_metrics(run_dir)
    final.problems += problems + [f"uninterrupted run: {p}" for p in ref_problems]
    metrics_eq = same_metrics(ref_records, records)
    if metrics_eq[0] != metrics_eq[1]:
        final.problems.append(f"metrics.jsonl differs from the uninterrupted run's: {'; '.join(metrics_eq[2])}")

    want, got = params_sha(ref_dir), params_sha(run_dir)
    compared: dict[str, tuple[int, int, list[str]]] = {}
    for name in ("model.pdparams", "optimizer.pdopt"):
        a, b = (d / "checkpoints" / f"step-{steps:08d}" / name for d in (ref_dir, run_dir))
        compared[name] = same_entries(a, b) if a.exists() and b.exists() else (0, 0, [f"{b} or {a} missing"])
    return report(
        args,
        steps,
        kills,
        final,
        windows,
        (want, got),
        compared,
        metrics_eq,
        (time.monotonic() - t_all, ref_s, soak_s, final_s),
        console,
    )


def report(
    args: argparse.Namespace,
    steps: int,
    kills: list[Kill],
    final: Kill,
    windows: list[float],
    shas: tuple[str | None, str | None],
    compared: dict[str, tuple[int, int, list[str]]],
    metrics_eq: tuple[int, int, list[str]],
    times: tuple[float, float, float, float],
    console: Console,
) -> int:
    """Print the tables and the MET / NOT MET line; the exit code."""
    every = args.every
    lost_all = [k.lost for k in kills]
    table = Table(
        title=f"{len(kills)} SIGKILLs of a digits run with a checkpoint every {every} steps: where they "
        "landed, steps lost per kill"
    )
    for col in ("killed during", "kills", "lost min", "median", "p90", "max", "allowed"):
        table.add_column(col, justify="left" if col == "killed during" else "right")
    for phase in (*PHASES, "all"):
        lost = [k.lost for k in kills if phase in ("all", k.phase)]
        if lost:
            table.add_row(
                phase,
                str(len(lost)),
                str(min(lost)),
                f"{statistics.median(lost):g}",
                str(percentile(lost, 90)),
                str(max(lost)),
                str(every),
            )
        else:
            table.add_row(phase, "0", "-", "-", "-", "-", str(every))
    console.print(table)

    hist = Table(title="steps lost per kill (a kill before the first step loses 0)")
    for col in ("steps lost", "kills", "histogram"):
        hist.add_column(col, justify="left" if col == "histogram" else "right")
    top = max(every, *lost_all)
    width = 1 if top < 24 else math.ceil((top + 1) / 12)
    counts = Counter(v // width for v in lost_all)
    biggest = max(counts.values(), default=1)
    for b in range(top // width + 1):
        lo, hi = b * width, min(top, b * width + width - 1)
        n = counts.get(b, 0)
        hist.add_row(
            (str(lo) if lo == hi else f"{lo}-{hi}") + (" (> interval)" if lo > every else ""),
            str(n),
            "#" * round(40 * n / biggest),
        )
    console.print(hist)

    want, got = shas
    total_s, ref_s, soak_s, final_s = times
    problems = [(str(k.index), p) for k in kills for p in k.problems] + [("final run", p) for p in final.problems]
    checks = Table(title="checks")
    checks.add_column("check")
    checks.add_column("result")
    checks.add_row(
        "final params_sha256 (summary.json)",
        f"{'equal' if want and want == got else 'DIFFERENT'}: {(got or '-')[:16]}, uninterrupted {(want or '-')[:16]}",
    )
    for name, (eq, n, differ) in compared.items():
        checks.add_row(
            f"final checkpoint's {name}",
            f"{eq}/{n} entries bit-identical" + (f" (differ: {', '.join(differ[:3])})" if differ else ""),
        )
    checks.add_row("metrics.jsonl vs uninterrupted", f"{metrics_eq[0]}/{metrics_eq[1]} records equal (loss, lr, eval)")
    bad = sum(1 for k in kills if k.problems)
    checks.add_row("run dir after each kill, resume", f"{len(kills) - bad}/{len(kills)} kills without a problem")
    checks.add_row(
        "kill windows L",
        f"{min(windows):.1f}-{max(windows):.1f} s (median "
        f"{statistics.median(windows):.1f}); at step {final.start}/{steps} after the last kill",
    )
    checks.add_row(
        "time",
        f"{total_s:.0f} s: uninterrupted run {ref_s:.0f} s, {len(kills)} kills {soak_s:.0f} s "
        f"({soak_s / max(1, len(kills)):.1f} s each), final run {final_s:.0f} s",
    )
    console.print(checks)
    for where, p in problems[:30]:
        console.print(f"PROBLEM ({'kill ' if where.isdigit() else ''}{where}): {p}", highlight=False, markup=False)
    if len(problems) > 30:
        console.print(f"... and {len(problems) - 30} more problems")

    identical = bool(want) and want == got and all(eq == n > 0 for eq, n, _ in compared.values())
    max_lost = max(lost_all)
    met = identical and max_lost <= every and not problems and len(kills) == args.kills
    console.print(
        f"{len(kills)} kills: final params bit-identical to the uninterrupted run: "
        f"{'yes' if identical else 'NO'}; max lost {max_lost} steps, one checkpoint interval {every}: "
        f"{'within' if max_lost <= every else 'OVER'}; problems: {len(problems)}; target (bit-identical, "
        f"max lost <= {every}, no problems): {'MET' if met else 'NOT MET'}",
        highlight=False,
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
