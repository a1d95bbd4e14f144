"""MKL's code path on this CPU: Paddle's sgemm and a ResNet-50 CPU training step, SSE path vs AVX2 path, before
and after Adam's first update.

Paddle's CPU wheels ship MKL 2019.0 Update 5, which runs generic SSE kernels on AMD CPUs unless
``MKL_DEBUG_CPU_TYPE=5`` (``paddlefit.process.mklpath``, which sets it for paddlefit's processes on AMD). Each path runs
in a fresh process that imports only Paddle (the variable removed, or set to 5), in interleaved rounds:

- ten 1024x1024 fp32 matmuls, before and after one Adam step on a 400,000-parameter layer (Paddle's AVX-512 Adam
  kernel leaves the vector registers' upper halves dirty in each OpenMP thread);
- ResNet-50 at 3x224x224, batch 2, Adam: the first training step and the median of three steady-state steps.

Prints the median seconds per path and the ratio SSE / AVX2. Target: on an AMD CPU with AVX2 the AVX2 path's
steady ResNet-50 step is at least 1.5x faster (the reason paddlefit sets the variable); on other CPUs the variable
is not set and the bench reports the two paths without a target.

Run: ``.venv/bin/python bench/mkl_path.py [--rounds 3]`` (about 1 minute on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from rich.console import Console
from rich.table import Table

from paddlefit.process.mklpath import MKL_AVX2_ENV, amd_avx2_cpu

WORKER = r"""
import json, os, time
import paddle
from paddle.vision.models import resnet50
paddle.base.core.set_num_threads(len(os.sched_getaffinity(0)))
paddle.seed(0)
a = paddle.randn([1024, 1024])
def sgemm():
    paddle.matmul(a, a)
    t = time.perf_counter()
    for _ in range(10):
        paddle.matmul(a, a)
    return time.perf_counter() - t
out = {"sgemm_before_adam_s": sgemm()}
lin = paddle.nn.Linear(100000, 4)
opt = paddle.optimizer.Adam(parameters=lin.parameters())
lin(paddle.randn([1, 100000])).sum().backward()
opt.step()
out["sgemm_after_adam_s"] = sgemm()
model = resnet50()
opt = paddle.optimizer.Adam(parameters=model.parameters())
x, y = paddle.randn([2, 3, 224, 224]), paddle.randint(0, 1000, [2, 1])
steps = []
for _ in range(4):
    t = time.perf_counter()
    paddle.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    opt.clear_grad()
    steps.append(time.perf_counter() - t)
out["resnet50_first_step_s"] = steps[0]
out["resnet50_steady_step_s"] = sorted(steps[1:])[1]
print("RESULT " + json.dumps(out))
"""

ROWS = [
    ("sgemm_before_adam_s", "10x sgemm 1024^2, before Adam"),
    ("sgemm_after_adam_s", "10x sgemm 1024^2, after Adam"),
    ("resnet50_first_step_s", "ResNet-50 batch 2, first step"),
    ("resnet50_steady_step_s", "ResNet-50 batch 2, steady step"),
]
#: The AVX2 path's steady ResNet-50 step must be this much faster on an AMD CPU with AVX2.
TARGET_SPEEDUP = 1.5


def run_path(avx2: bool) -> dict[str, float]:
    """One fresh process on MKL's SSE path (variable removed) or AVX2 path (``MKL_DEBUG_CPU_TYPE=5``): its seconds."""
    name, value = MKL_AVX2_ENV
    env = {k: v for k, v in os.environ.items() if k != name}
    if avx2:
        env[name] = value
    r = subprocess.run([sys.executable, "-c", WORKER], capture_output=True, text=True, env=env, check=False)
    line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT ")), None)
    if r.returncode or line is None:
        raise SystemExit(f"worker failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return json.loads(line[len("RESULT ") :])


def main() -> int:
    """Run the rounds, print the table; exit 1 when the target applies and is missed."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per path (default 3)")
    args = ap.parse_args()
    results: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for _ in range(args.rounds):
        for avx2 in (False, True):
            results[avx2].append(run_path(avx2))
    med = {p: {k: statistics.median(r[k] for r in rs) for k, _ in ROWS} for p, rs in results.items()}
    amd = amd_avx2_cpu()
    table = Table(title=f"MKL code path, median of {args.rounds} fresh processes each (AMD CPU with AVX2: {amd})")
    for col in ("case", "SSE path (s)", "AVX2 path (s)", "SSE / AVX2"):
        table.add_column(col, justify="left" if col == "case" else "right")
    for key, label in ROWS:
        sse, avx = med[False][key], med[True][key]
        table.add_row(label, f"{sse:.3f}", f"{avx:.3f}", f"{sse / avx:.2f}x")
    Console(width=120).print(table)
    speedup = med[False]["resnet50_steady_step_s"] / med[True]["resnet50_steady_step_s"]
    if not amd:
        print("not an AMD CPU with AVX2: paddlefit leaves MKL_DEBUG_CPU_TYPE unset here; no target")
        return 0
    met = speedup >= TARGET_SPEEDUP
    print(
        f"steady ResNet-50 step, SSE / AVX2 path: {speedup:.2f}x (target >= {TARGET_SPEEDUP}x): "
        f"{'MET' if met else 'MISSED'}"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
