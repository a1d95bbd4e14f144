"""Plan speed: wall time and peak RSS of `paddlefit plan` as a user runs it (a fresh process each).

Cases: `paddlefit plan resnet50 --batch-size 256` (CPU probe path) and `paddlefit plan gpt2-xl` (1.56e9
parameters: built under paddle.LazyGuard, analytic path). Peak RSS is the child's ru_maxrss.
Targets on a 2-core machine: resnet50 <= 12 s (issue 28; 20 s before); the 1e9+ model <= 20 s and <= 3 GB peak RSS.

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
    ("gpt2-xl batch 8 seq 1024 (LazyGuard)", ["gpt2-xl", "--batch-size", "8", "--input", "int64[1024]"], 20.0,
     3e9),
]  # fmt: skip


_CHILD = (
    "import resource, sys\n"
    "from paddlefit.cli.main import main\n"
    "try:\n    main()\n"
    "finally:\n"
    "    sys.stderr.write('MAXRSS_KIB=%d\\n' % resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
)


def run_case(args: list[str]) -> tuple[float, float, dict]:
    """Wall seconds, peak RSS bytes of the child process itself (ru_maxrss), and its JSON plan."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", _CHILD, "plan", *args, "--json"], capture_output=True, text=True,
                       env=dict(os.environ))  # fmt: skip
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(r.stderr)
    rss_kib = int(r.stderr.rsplit("MAXRSS_KIB=", 1)[1].split()[0])
    return wall, rss_kib * 1024, json.loads(r.stdout)


def main() -> int:
    console = Console(width=150)
    table = Table(title="paddlefit plan: wall time and peak RSS (fresh process)", header_style="bold")
    for c in ("case", "params", "method", "wall", "target", "peak RSS", "target", "met"):
        table.add_column(c, justify="left" if c in ("case", "method") else "right")
    ok_all = True
    for name, args, t_target, rss_target in CASES:
        wall, rss, plan = run_case(args)
        ok = wall <= t_target and (rss_target is None or rss <= rss_target)
        ok_all &= ok
        table.add_row(name, f"{plan['model']['params'] / 1e6:,.0f}M", plan["memory"]["method"], f"{wall:.1f} s",
                      f"<= {t_target:.0f} s", f"{rss / 1e9:.2f} GB",
                      "-" if rss_target is None else f"<= {rss_target / 1e9:.0f} GB",
                      "yes" if ok else "NO")  # fmt: skip
    console.print(table)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
