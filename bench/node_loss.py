"""Node loss: a 2-node CPU job (two Paddle launchers on this machine, gloo) loses one node, killed whole (its launcher
and worker by SIGKILL, or stopped silent by SIGSTOP) at several moments; the surviving node must stop within the bound
paddlefit sets, exit 203, and `--resume auto` on one node must continue bit-exact.

The job: digits_cnn, Adam, batch 16 per rank, 2 ranks (one per node), ``max_steps`` 16, a checkpoint every 5 steps,
``cpu_threads: 1`` (the resume on one node runs both ranks there; the same threads per process keep it bit-exact).
The moments, each with node 0 (rank 0, the launchers' master and the collective store) and node 1 as the victim:

- ``rendezvous``: 0.2 s after the launchers start, before they meet (Paddle's HTTP master waits for ever; the
  survivor's launcher gives up after the start-up allowance);
- ``start-up``: as soon as the victim's worker process exists (the survivor is in Paddle's start-up collectives);
- ``mid-step``: once step 8 is logged (between the checkpoints of steps 5 and 10);
- ``checkpoint``: while rank 0 writes the step-10 checkpoint (a hook in the workers, ``sitecustomize`` on their
  ``PYTHONPATH``, pauses rank 0's save once its files are written and before the manifest and the rename, until
  the bench has killed the victim);
- ``silent``: mid-step, the victim node stopped with SIGSTOP (a host powered off or cut off: no connection closes;
  gloo alone would wait 30 s), then killed after the survivor stopped.

Each row: the survivor's worker stop time after the kill and the launcher's (what a scheduler sees; Paddle's launcher
polls its workers every 1 s, ``Pod.watch`` in ``launch/job/pod.py``), the bound its worker reported
(``bound X s`` in its reason), the survivor launcher's exit code, and the resume: ``paddlefit train JOB --resume
auto`` on one node (2 processes), its exit code, the step it resumed from and whether its parameters' sha256 equal an
uninterrupted run's. The start-up allowance is set to 20 s here (``PADDLEFIT_PEER_STARTUP_S``; default 600 s).

Run: `.venv/bin/python bench/node_loss.py [--only MOMENT,...] [--victim 0|1]` (about 25 s a row on 2 cores).
Exit code 0 when every row stopped within its bound with exit 203 and resumed bit-exact (target MET), else 1.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import yaml

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
sys.path.insert(0, str(SRC))  # this checkout's paddlefit, here and in the nodes started below

SPEC = {
    "model": "paddlefit.models.examples:digits_cnn",
    "data": {"train": "digits", "train_args": {"split": "train"}},
    "batch_size": 16,
    "max_steps": 16,
    "optimizer": "adam",
    "lr": 0.003,
    "seed": 3,
    "devices": 2,
    "cpu_threads": 1,
    "checkpoint": {"every_steps": 5, "every_minutes": 0, "keep_last": 3},
}
MOMENTS = ("rendezvous", "start-up", "mid-step", "checkpoint", "silent")
STARTUP_S = 20.0  # PADDLEFIT_PEER_STARTUP_S for these runs (the default, 600 s, would make a start-up row 10 min)
PAUSE_STEP = 10  # the checkpoint the `checkpoint` moment kills during
BOUND_RE = re.compile(r"bound (\d+(?:\.\d+)?) s")
RESUMED_RE = re.compile(r"resumed from \S+\s+\(step (\d+),")

#: Imported by every Python process of the nodes (``sitecustomize`` on PYTHONPATH); in rank 0's worker of a
#: ``checkpoint`` row, it pauses the save of step PAUSE_AT after its files are written (no manifest, no rename yet)
#: and creates PAUSE_FILE, until the bench deletes it (at most 120 s).
HOOK = """
import os, time
if os.environ.get("PADDLE_TRAINER_ID") == "0" and os.environ.get("NODE_LOSS_PAUSE_AT"):
    from paddlefit.train.checkpoint import CheckpointStore
    _real_save = CheckpointStore.save
    def _save(self, step, write_files, *a, **k):
        def paused(tmp):
            write_files(tmp)
            if step == int(os.environ["NODE_LOSS_PAUSE_AT"]):
                flag = os.environ["NODE_LOSS_PAUSE_FILE"]
                open(flag, "w").close()
                end = time.time() + 120
                while os.path.exists(flag) and time.time() < end:
                    time.sleep(0.02)
        return _real_save(self, step, paused, *a, **k)
    CheckpointStore.save = _save
"""


@dataclass
class Row:
    """One node loss and what the survivor and the resume made of it."""

    moment: str
    victim: int
    stop_s: float | None = None  # the survivor's worker gone, seconds after the kill
    launcher_s: float | None = None  # the survivor's launcher exited, seconds after the kill
    bound_s: float | None = None
    code: int | None = None  # the survivor launcher's exit code
    resumed_from: int | None = None  # None: started over (no checkpoint)
    exact: bool = False
    problem: str = ""

    @property
    def ok(self) -> bool:
        """Stopped within the bound with exit 203, resumed bit-exact."""
        return (
            self.code == 203
            and self.stop_s is not None
            and self.bound_s is not None
            and self.stop_s <= self.bound_s
            and self.exact
            and not self.problem
        )


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    path = os.pathsep.join(p for p in [str(SRC), os.environ.get("PYTHONPATH", "")] if p)
    return {
        **os.environ,
        "PYTHONPATH": path,
        "GLOG_minloglevel": "2",
        "PADDLEFIT_NO_PREDICT": "1",
        "PADDLEFIT_PEER_STARTUP_S": str(STARTUP_S),
        "COLUMNS": "400",
        **(extra or {}),
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def train(spec: Path, run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    """``paddlefit train SPEC --run-dir RUN_DIR`` on this node (the spec's 2 devices: 2 processes)."""
    return subprocess.run(
        [sys.executable, "-m", "paddlefit.cli.main", "train", str(spec), "--run-dir", str(run_dir), *extra],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
    )


def sha(run_dir: Path) -> str:
    """The params_sha256 of a finished run."""
    return json.loads((run_dir / "summary.json").read_text())["params_sha256"]


def start_nodes(work: Path, spec: Path, run_dir: Path, extra: dict[str, str]) -> list[subprocess.Popen]:
    """The two nodes' launchers (``python -m paddlefit.train.distlaunch --nnodes 2 --master 127.0.0.1:PORT --rank
    r --nproc_per_node 1``, as `paddlefit launch -t local --gpus-per-node 0` writes them), each in its own session."""
    master = f"127.0.0.1:{_free_port()}"
    worker = SRC / "paddlefit" / "train" / "worker.py"
    procs = []
    for r in (0, 1):
        cmd = [
            sys.executable,
            "-P",
            "-m",
            "paddlefit.train.distlaunch",
            "--nnodes",
            "2",
            "--master",
            master,
            "--rank",
            str(r),
            "--nproc_per_node",
            "1",
            "--log_dir",
            str(work / f"node{r}-logs"),
            "--job_id",
            "nl",
            str(worker),
            "--spec",
            str(spec),
            "--run-dir",
            str(run_dir),
            "--resume",
            "auto",
        ]
        out = open(work / f"node{r}.out", "w")  # noqa: SIM115 (the node writes it until it ends)
        procs.append(
            subprocess.Popen(
                cmd,
                env=_env({"PYTHONSAFEPATH": "1", **extra}),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    return procs


def node_tree(proc: subprocess.Popen) -> list[psutil.Process]:
    """A node's processes: its launcher and every process under it (Paddle starts each worker in its own session)."""
    try:
        root = psutil.Process(proc.pid)
        return [*root.children(recursive=True), root]
    except psutil.Error:
        return []


def worker_of(proc: subprocess.Popen) -> psutil.Process | None:
    """A node's worker (the process with ``PADDLE_TRAINER_ID``), or None."""
    for p in node_tree(proc)[:-1]:
        try:
            if "PADDLE_TRAINER_ID" in p.environ():
                return p
        except psutil.Error:
            continue
    return None


def _steps(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(x)["step"] for x in path.read_text().splitlines() if x.strip() and '"loss"' in x]


def wait_for_moment(moment: str, procs: list[subprocess.Popen], victim: int, run_dir: Path, flag: Path) -> str:
    """Block until ``moment`` of the run; returns a problem ('' when reached)."""
    end = time.monotonic() + 300
    if moment == "rendezvous":
        time.sleep(0.2)
        return ""
    while time.monotonic() < end:
        if any(p.poll() is not None for p in procs):
            return f"a node ended before the moment (exit codes {[p.poll() for p in procs]})"
        if moment == "start-up" and worker_of(procs[victim]) is not None and not _steps(run_dir):
            return ""
        if moment in ("mid-step", "silent") and (s := _steps(run_dir)) and s[-1] >= 8:
            return ""
        if moment == "checkpoint" and flag.exists():
            return ""
        time.sleep(0.01)
    return "the moment never came"


def watch_survivor(proc: subprocess.Popen, t_kill: float, timeout: float = 180) -> tuple[float | None, float | None]:
    """Seconds from ``t_kill`` until the survivor node's worker is gone (its launcher's exit when it never had one:
    the rendezvous) and until its launcher exits."""
    worker: psutil.Process | None = None
    stop = launcher = None
    end = t_kill + timeout
    while time.monotonic() < end and (stop is None or launcher is None):
        now = time.monotonic() - t_kill
        worker = worker or worker_of(proc)
        if stop is None and worker is not None and (not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE):
            stop = now
        if launcher is None and proc.poll() is not None:
            launcher = now
            stop = now if stop is None else stop
        time.sleep(0.01)
    return stop, launcher


def survivor_bound(work: Path, run_dir: Path, survivor: int) -> float | None:
    """The bound the survivor's worker reported (its ``failed:``/``peer lost`` line, status.json), or its launcher's
    rendezvous allowance."""
    texts = [p.read_text(errors="replace") for p in (work / f"node{survivor}-logs").glob("workerlog.*")]
    texts.append((work / f"node{survivor}.out").read_text(errors="replace"))
    if (run_dir / "status.json").exists():
        texts.append((run_dir / "status.json").read_text(errors="replace"))
    found = [float(m) for t in texts for m in BOUND_RE.findall(t)]
    if found:
        return max(found)
    said = "\n".join(texts)
    return STARTUP_S if "did not meet at the rendezvous" in said else None


def lose_node(work: Path, spec: Path, moment: str, victim: int, want_sha: str) -> Row:
    """Run the 2-node job, lose node ``victim`` at ``moment``, watch the survivor, resume on one node, compare."""
    row = Row(moment, victim)
    case = work / f"{moment}-{victim}"
    case.mkdir()
    run_dir, flag = case / "run", case / "paused"
    hook = case / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HOOK)
    extra = {"PYTHONPATH": os.pathsep.join([str(hook), str(SRC)])}
    if moment == "checkpoint":
        extra |= {"NODE_LOSS_PAUSE_AT": str(PAUSE_STEP), "NODE_LOSS_PAUSE_FILE": str(flag)}
    procs = start_nodes(case, spec, run_dir, extra)
    survivor = 1 - victim
    try:
        if problem := wait_for_moment(moment, procs, victim, run_dir, flag):
            row.problem = problem
            return row
        tree = node_tree(procs[victim])
        sig = signal.SIGSTOP if moment == "silent" else signal.SIGKILL
        for p in tree:  # the workers first: a launcher gone first would SIGTERM them (PR_SET_PDEATHSIG)
            p.send_signal(sig)
        t_kill = time.monotonic()
        flag.unlink(missing_ok=True)  # rank 0 (a survivor) goes on with its save
        row.stop_s, row.launcher_s = watch_survivor(procs[survivor], t_kill)
        row.code = procs[survivor].poll()
        row.bound_s = survivor_bound(case, run_dir, survivor)
    finally:
        for proc in procs:
            for p in node_tree(proc):
                p.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
    r = train(spec, run_dir, "--resume", "auto")
    m = RESUMED_RE.search(r.stderr)
    row.resumed_from = int(m.group(1)) if m else None
    if r.returncode != 0:
        row.problem = f"resume exit {r.returncode}: {r.stderr.strip().splitlines()[-1:]}"
    else:
        row.exact = sha(run_dir) == want_sha
    return row


def table(rows: list[Row]) -> str:
    """The node-loss table (plain text, for the terminal and docs/benchmarks.md)."""

    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f}"

    out = [
        (
            "moment",
            "node killed",
            "survivor stop (s)",
            "launcher exit (s)",
            "bound (s)",
            "survivor exit",
            "resumed from",
            "bit-exact",
            "ok",
        )
    ]
    for r in rows:
        how = f"node {r.victim}" + (" (SIGSTOP)" if r.moment == "silent" else "")
        out.append(
            (
                r.moment,
                how,
                f(r.stop_s),
                f(r.launcher_s),
                f(r.bound_s),
                "-" if r.code is None else str(r.code),
                "start" if r.resumed_from is None else str(r.resumed_from),
                "yes" if r.exact else "NO",
                "yes" if r.ok else f"NO {r.problem}".strip(),
            )
        )
    widths = [max(len(x[i]) for x in out) for i in range(len(out[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(x, widths, strict=True)).rstrip() for x in out)


def reference(work: Path) -> tuple[Path, str]:
    """The job spec and the params_sha256 of its uninterrupted run (one node, 2 processes)."""
    spec = work / "job.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    r = train(spec, work / "reference")
    if r.returncode != 0:
        raise SystemExit(f"the reference run failed:\n{r.stderr[-3000:]}")
    return spec, sha(work / "reference")


def main() -> int:
    """Every moment x victim (or ``--only``/``--victim``); the table; exit 0 when the target is met."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help=f"comma-separated moments (default: all of {', '.join(MOMENTS)})")
    ap.add_argument("--victim", type=int, choices=(0, 1), help="only this node killed (default: each)")
    a = ap.parse_args()
    moments = a.only.split(",") if a.only else list(MOMENTS)
    victims = [a.victim] if a.victim is not None else [0, 1]
    with tempfile.TemporaryDirectory(prefix="node-loss-") as tmp:
        work = Path(tmp)
        os.environ["PADDLEFIT_HOME"] = str(work / "home")  # its runs stay out of the user's run registry
        spec, want = reference(work)
        rows = []
        for moment in moments:
            for victim in victims:
                rows.append(lose_node(work, spec, moment, victim, want))
                if sys.stderr.isatty():
                    print(f"{moment}, node {victim}: {'ok' if rows[-1].ok else 'FAILED'}", file=sys.stderr)
    print(
        f"2-node job (gloo, one worker a node) losing one node; survivor bound: floor 10 s + 10x the longest step "
        f"(start-up allowance {STARTUP_S:g} s here); resume: `train --resume auto` on one node:\n"
    )
    print(table(rows))
    good = sum(r.ok for r in rows)
    print(
        f"\n{good}/{len(rows)} node losses: the survivor stopped within its bound with exit 203 and the run "
        f"resumed bit-exact: target {'MET' if good == len(rows) else 'NOT MET'}"
    )
    return 0 if good == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
