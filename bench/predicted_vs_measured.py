"""Predicted vs measured on the shipped examples: each ``examples/*.yaml`` trained for ``--steps`` optimizer steps
by ``paddlefit train`` (its prediction on: the planner for this CPU, then the measured figures beside it), one
after the other, each in its own process, with a scratch run registry.

Printed per example: the predicted and measured median step time (without the data wait), their ratio, the
peak allocated memory ratio, and the measured data-wait share; then the median |ratio - 1| of the step times and
of the peaks. Ratios are predicted / measured: 1.25 = the plan said 25 % more than the run took or used.
No target: this is the number a user reads at the end of every run, measured here.

    .venv/bin/python bench/predicted_vs_measured.py [--steps 60] [--only digits --only sentiment-zh]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.yaml"))


def run_example(name: str, steps: int, home: Path, out: Path) -> dict:
    """Train one example; its summary.json's comparison, or ``{"error": ...}``."""
    env = {k: v for k, v in os.environ.items() if k != "PADDLEFIT_NO_PREDICT"}
    env.update(PADDLEFIT_HOME=str(home), GLOG_minloglevel="2", PYTHONWARNINGS="ignore")
    cmd = [
        sys.executable,
        "-m",
        "paddlefit.cli.main",
        "train",
        str(ROOT / "examples" / f"{name}.yaml"),
        "--run-dir",
        str(out / name),
        "--resume",
        "never",
        "--max-steps",
        str(steps),
        "--json",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["?"])[-1][:200]}
    return json.loads(r.stdout)["comparison"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60, help="optimizer steps per example (5 are warm-up)")
    ap.add_argument("--only", action="append", choices=EXAMPLES, help="these examples only (repeatable)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    step_r, peak_r = [], []
    print(
        f"{'example':20s} {'status':14s} {'pred step':>10s} {'meas step':>10s} {'ratio':>6s} {'peak ratio':>10s} "
        f"{'data wait':>9s} {'steps':>5s}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only or EXAMPLES:
            doc = run_example(name, args.steps, Path(tmp) / "home", Path(tmp))
            if "error" in doc:
                print(f"{name:20s} failed: {doc['error']}")
                continue
            f = {x["name"]: x for x in doc["figures"]}

            def ms(v: float | None) -> str:
                return "-" if v is None else f"{v * 1e3:.2f} ms"

            def r(v: float | None) -> str:
                return "-" if v is None else f"{v:.2f}"

            st, pk = f["step_time_s"], f["peak_memory_bytes"]
            if st["ratio"] is not None:
                step_r.append(st["ratio"])
            if pk["ratio"] is not None:
                peak_r.append(pk["ratio"])
            wait = f["data_wait_fraction"]["measured"]
            print(
                f"{name:20s} {doc['status']:14s} {ms(st['predicted']):>10s} {ms(st['measured']):>10s} "
                f"{r(st['ratio']):>6s} {r(pk['ratio']):>10s} {'-' if wait is None else f'{wait:.1%}':>9s} "
                f"{doc['measured_steps']:5d}"
            )
    if step_r:
        print(
            f"median |step ratio - 1| {statistics.median(abs(x - 1) for x in step_r):.1%} over {len(step_r)} "
            f"examples; median |peak ratio - 1| {statistics.median(abs(x - 1) for x in peak_r):.1%}; "
            f"{time.perf_counter() - t0:.0f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
