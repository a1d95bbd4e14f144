"""Plan speed: wall time and peak RSS of `paddlefit plan` as a user runs it (a fresh process each).

Cases: `paddlefit plan resnet50 --batch-size 256` (CPU probe path) and `paddlefit plan gpt2-xl` (1.56e9
parameters: built under paddle.LazyGuard, analytic path). Peak RSS is the largest ru_maxrss of the `plan` process
and the processes it waited for (the CPU probe runs in a child process).
Targets on a 2-core machine: resnet50 <= 12 s; the 1e9+ model <= 20 s and <= 3 GB peak RSS.

CPU seconds: the `plan` process's own and its probe child's (user + system). The model is built (under
paddle.LazyGuard, then probed) in the child only (`paddlefit.plan.measure.measure_model`): a zoo model's `plan` does
not import Paddle itself.

Probe child start: what running the probe in a child process (`paddlefit.process.isolation`) costs, measured with an
empty call (median of 3): start, `import paddle` and the probe's modules, one call.

Run: `.venv/bin/python bench/plan_speed.py`
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from rich.console import Console
from rich.table import Table

CASES = [
    ("resnet50 batch 256 (probe)", ["resnet50", "--batch-size", "256"], 12.0, None),
    ("gpt2-xl batch 8 seq 1024 (LazyGuard)", ["gpt2-xl", "--batch-size", "8", "--input", "int64[1024]"], 20.0, 3e9),
]


_CHILD = (
    "import resource, sys\n"
    "from paddlefit.cli.main import main\n"
    "try:\n    main()\n"
    "finally:\n"
    "    use = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]\n"
    "    sys.stderr.write('MAXRSS_KIB=%d\\n' % max(u.ru_maxrss for u in use))\n"
    "    sys.stderr.write('CPU_S=%.3f,%.3f\\n' % tuple(u.ru_utime + u.ru_stime for u in use))\n"
)


def run_case(args: list[str]) -> tuple[float, float, tuple[float, float], dict]:
    """Wall seconds, peak RSS bytes (ru_maxrss of `plan` and of the processes it waited for), CPU seconds (`plan`'s
    own, its children's) and its JSON plan."""
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-c", _CHILD, "plan", *args, "--json"], capture_output=True, text=True, env=dict(os.environ)
    )
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(r.stderr)
    rss_kib = int(r.stderr.rsplit("MAXRSS_KIB=", 1)[1].split()[0])
    own, children = (float(x) for x in r.stderr.rsplit("CPU_S=", 1)[1].split()[0].split(","))
    return wall, rss_kib * 1024, (own, children), json.loads(r.stdout)


def noop(arg: object, progress: object) -> object:
    """The empty call of the child-start rows (run in the child, imported from this file by name)."""
    return arg


_START = (
    "import sys, time\n"
    "from paddlefit.process.isolation import ChildLimits, IsolatedCall\n"
    "from paddlefit.probe.task import PRELOAD\n"
    "t0 = time.perf_counter()\n"
    "child = IsolatedCall('plan_speed:noop', (*PRELOAD, 'paddlefit.plan.measure'))\n"
    "child.call(None, ChildLimits(120.0, 2**31))\n"
    "print(time.perf_counter() - t0)\n"
)


def child_start() -> float:
    """Seconds of an empty call in a fresh probe child (from its start), each in a fresh process as `plan` is
    (median of 3)."""
    import statistics

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")]))
    runs = [
        subprocess.run(
            [sys.executable, "-W", "ignore", "-c", _START], capture_output=True, text=True, env=env, check=True
        ).stdout.split()[-1]
        for _ in range(3)
    ]
    return statistics.median(float(x) for x in runs)


def main() -> int:
    console = Console(width=150)
    table = Table(title="paddlefit plan: wall time and peak RSS (fresh process)", header_style="bold")
    for c in ("case", "params", "method", "wall", "target", "peak RSS", "target", "CPU plan", "CPU child", "met"):
        table.add_column(c, justify="left" if c in ("case", "method") else "right")
    ok_all = True
    for name, args, t_target, rss_target in CASES:
        wall, rss, (own, children), plan = run_case(args)
        ok = wall <= t_target and (rss_target is None or rss <= rss_target)
        ok_all &= ok
        table.add_row(
            name,
            f"{plan['model']['params'] / 1e6:,.0f}M",
            plan["memory"]["method"],
            f"{wall:.1f} s",
            f"<= {t_target:.0f} s",
            f"{rss / 1e9:.2f} GB",
            "-" if rss_target is None else f"<= {rss_target / 1e9:.0f} GB",
            f"{own:.2f} s",
            f"{children:.2f} s",
            "yes" if ok else "NO",
        )
    console.print(table)
    cold = child_start()
    starts = Table(title="the CPU probe's child process: start cost (empty call, median of 3)", header_style="bold")
    for c in ("row", "seconds"):
        starts.add_column(c, justify="left" if c == "row" else "right")
    starts.add_row("probe child start, cold (spawn, import paddle + the probe's modules, one call)", f"{cold:.2f} s")
    console.print(starts)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
