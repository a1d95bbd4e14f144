"""How the trainer tests start ``paddlefit train`` in a child process and watch it (shared by the tests of train,
report, runs, serve and the fault tests; importable because conftest puts tests/data on sys.path)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import yaml

DATA = Path(__file__).resolve().parent
# no empty entry: Python reads one in PYTHONPATH as the current directory
ENV = dict(
    os.environ,
    PYTHONPATH=os.pathsep.join(p for p in [str(DATA), os.environ.get("PYTHONPATH", "")] if p),
    GLOG_minloglevel="2",
)


class SharedRun(NamedTuple):
    """A finished run trained once per test session: its job spec and run directory. Read it in place; copy it
    (:meth:`copy`) to change it, resume it or write into it (export's `inference/`, report.html)."""

    spec: Path
    run_dir: Path

    def copy(self, dst: Path) -> Path:
        shutil.copytree(self.run_dir, dst, symlinks=True)
        return dst


def write_spec(path: Path, **overrides) -> Path:
    spec = {
        "model": "paddlefit.models.examples:digits_cnn",
        "data": {"train": "digits", "train_args": {"split": "train"}},
        "batch_size": 16,
        "max_steps": 6,
        "optimizer": "adam",
        "lr": 0.003,
        "seed": 3,
        "checkpoint": {"every_steps": 0, "every_minutes": 0, "keep_last": 3},
    }
    for k, v in overrides.items():
        if isinstance(v, dict) and isinstance(spec.get(k), dict):
            spec[k] = {**spec[k], **v}
        else:
            spec[k] = v
    path.write_text(yaml.safe_dump(spec))
    return path


def train_cmd(spec: Path, run_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "paddlefit.cli.main", "train", str(spec), "--run-dir", str(run_dir), *extra]


def run(cmd: list[str], timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **{"env": ENV, **kw})


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def wait_for_step(run_dir: Path, step: int, proc: subprocess.Popen, timeout: float = 120) -> int:
    """Poll metrics.jsonl until a train line with step >= ``step`` appears; return the step seen."""
    end = time.time() + timeout
    path = run_dir / "metrics.jsonl"
    while time.time() < end:
        assert proc.poll() is None, proc.communicate()
        if path.exists():
            steps = [json.loads(x)["step"] for x in path.read_text().splitlines() if x.strip() and '"loss"' in x]
            if steps and steps[-1] >= step:
                return steps[-1]
        time.sleep(0.05)
    raise AssertionError(f"step {step} not reached in {timeout} s")


def launched_children(proc: subprocess.Popen) -> dict[str, object]:
    """The launcher (``"launcher"``) and the workers (by rank) under a `train --devices N` process."""
    import psutil

    found = {}
    for p in psutil.Process(proc.pid).children(recursive=True):
        try:
            rank = p.environ().get("PADDLE_TRAINER_ID")
            if rank is None and "paddlefit.train.distlaunch" in p.cmdline():
                rank = "launcher"
        except psutil.Error:
            continue
        if rank is not None:
            found[rank] = p
    return found


#: The job of the two-process kill-and-resume tests (tests/test_faults.py, tests/train/test_train.py): 30 steps,
#: a checkpoint every 5, 2 ms a sample so a kill lands mid-run; their uninterrupted `--devices 2` run is the session
#: fixture ``dp_reference`` (tests/conftest.py).
DP_KILL_JOB = {
    "max_steps": 30,
    "checkpoint": {"every_steps": 5, "every_minutes": 0},
    "data": {"train": "trainhelpers:slow_digits", "train_args": {"split": "train", "delay": 0.002}},
}
#: The one-process job that crosses an epoch boundary (42 steps an epoch at batch 32) at 1.5 ms a sample, for the
#: SIGTERM and budget resume tests; no periodic checkpoint (the parameters do not depend on when checkpoints are
#: written: a run stopped by either and resumed reaches the uninterrupted run's bits). Its uninterrupted run is the
#: session fixture ``slow60_reference``.
SLOW60_JOB = {
    "batch_size": 32,
    "max_steps": 60,
    "checkpoint": {"every_steps": 0, "every_minutes": 0},
    "data": {"train": "trainhelpers:slow_digits", "train_args": {"split": "train", "delay": 0.0015}},
}


def params_sha256(run_dir: Path) -> str:
    return summary(run_dir)["params_sha256"]


#: A 12-step digits job with checkpoints every 5 steps, as `paddlefit launch` takes it (launch and fuzz tests).
LAUNCH_SPEC = """model: paddlefit.models.examples:digits_cnn
data: {train: digits, train_args: {split: train}}
batch_size: 16
max_steps: 12
checkpoint: {every_steps: 5, every_minutes: 0}
run_dir: runs/mn
"""
