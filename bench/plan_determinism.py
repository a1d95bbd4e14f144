"""The same plans on an idle machine and with every core busy: every GPU row must come out the same.

A GPU row depends on the job, the GPU and the shipped parameters only (the host floor is a constant of the model,
not a timing of the planning CPU). This runs each plan with ``paddlefit plan --json`` twice: once on the idle
machine, once while one busy-looping process per core runs beside it; then compares each GPU row's step time and
samples/s as ``plan`` prints them (4 significant digits) and as stored (exact). The CPU row is a measurement of this
machine and is shown for contrast.

    .venv/bin/python bench/plan_determinism.py
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PLANS = (
    ["resnet18", "--input", "float32[3,64,64]", "--batch-size", "8"],
    ["--config", str(ROOT / "examples" / "digits.yaml")],
    ["bert-base", "--batch-size", "4", "--input", "int64[128]"],
)


def _spin(stop: mp.synchronize.Event) -> None:  # type: ignore[name-defined]
    x = 0
    while not stop.is_set():
        x += 1


def plan(args: list[str]) -> dict:
    """``paddlefit plan ARGS --json --no-runs`` in a fresh process; the JSON document."""
    exe = Path(sys.executable).with_name("paddlefit")
    cmd = [str(exe) if exe.exists() else "paddlefit", "plan", *args, "--json", "--no-runs"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout)


def rows(doc: dict) -> dict[str, tuple[float, float]]:
    """name -> (step seconds, samples/s) of every target."""
    return {t["name"]: (t["step_time_s"], t["samples_per_s"]) for t in doc["targets"]}


def main() -> int:
    """Plan idle, plan loaded, print the comparison."""
    t0 = time.perf_counter()
    idle = [rows(plan(a)) for a in PLANS]
    stop = mp.Event()
    spinners = [mp.Process(target=_spin, args=(stop,), daemon=True) for _ in range(os.cpu_count() or 2)]
    for p in spinners:
        p.start()
    try:
        busy = [rows(plan(a)) for a in PLANS]
    finally:
        stop.set()
        for p in spinners:
            p.join()
    print(f"{'plan':34} {'target':16} {'idle step':>12} {'busy step':>12} {'printed':>8} {'exact':>6}")
    same_printed = same_exact = total = 0
    for a, r_idle, r_busy in zip(PLANS, idle, busy, strict=True):
        name = " ".join(a)[-34:]
        for target, (s_idle, _) in r_idle.items():
            s_busy = r_busy[target][0]
            printed = f"{s_idle * 1e3:.4g}" == f"{s_busy * 1e3:.4g}"
            exact = s_idle == s_busy
            if target != "cpu":
                total += 1
                same_printed += printed
                same_exact += exact
            print(
                f"{name:34} {target:16} {s_idle * 1e3:10.4g}ms {s_busy * 1e3:10.4g}ms {printed!s:>8} "
                f"{exact!s:>6}" + ("   (measured on this CPU)" if target == "cpu" else "")
            )
    print(
        f"GPU rows identical idle vs all {os.cpu_count()} cores busy: {same_printed}/{total} as printed, "
        f"{same_exact}/{total} exactly; {time.perf_counter() - t0:.0f} s"
    )
    ok = same_printed == total
    print(f"target (every GPU row identical to the printed digit): {'MET' if ok else 'NOT MET'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
