"""CPU threads and the OpenMP wait policy: steady-state training step time of a few models on this machine.

For each model, one fresh Python process per OpenMP wait policy (unset = the runtime's default, PASSIVE, ACTIVE;
Intel OpenMP reads the variable once, when Paddle loads it) times training steps at 1 thread and at every core
(``paddle.base.core.set_num_threads``). Prints the table and the ratios behind paddlefit's choices: the policy is
left to the user and measured by ``doctor`` (PF121), because which is faster depends on what else runs (spinning
threads win on an idle machine and lose badly when another process wants the cores), and ``plan`` times 1 /
cores/2 / all cores for the job.

Run: ``.venv/bin/python bench/cpu_threads.py`` (about a minute on 2 cores; nothing else should be running).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

WORKER = r"""
import json, sys, time
import paddle
from paddlefit.models.zoo import resolve_model
from paddlefit.jobspec.optimizers import make_optimizer
from paddlefit.probe.memory import JobCall
from paddlefit.jobspec.spec import OptimizerName, parse_input_spec
name, spec, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
cores = len(__import__("os").sched_getaffinity(0))
ref = resolve_model(name)
model = ref.factory()
opt = make_optimizer(OptimizerName.ADAM, model.parameters())
call = JobCall([parse_input_spec(spec)])
call.prepare(model)
data = call.batch(batch)
out = {}
for n in sorted({1, cores}):
    paddle.base.core.set_num_threads(n)
    best = 1e9
    for i in range(5):
        t = time.perf_counter()
        call.loss_of(model, data).backward(); opt.step(); opt.clear_grad()
        if i >= 1:
            best = min(best, time.perf_counter() - t)
    out[n] = best
print(json.dumps(out))
"""

MODELS = [
    ("resnet18", "float32[3,64,64]", 8),
    ("mobilenet_v2", "float32[3,64,64]", 8),
    ("ernie-3.0-medium-zh", "int64[32]:40000", 4),
]
POLICIES = ["", "PASSIVE", "ACTIVE"]


def main() -> int:
    cores = len(os.sched_getaffinity(0))
    if cores < 2:
        print("one core: nothing to compare")
        return 0
    rows = []
    for name, spec, batch in MODELS:
        for pol in POLICIES:
            env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
            env["GLOG_minloglevel"] = "2"
            if pol:
                env["OMP_WAIT_POLICY"] = pol
            r = subprocess.run(
                [sys.executable, "-c", WORKER, name, spec, str(batch)],
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            if r.returncode != 0:
                print(f"{name} {pol or 'default'}: failed: {r.stderr.strip().splitlines()[-1:]}")
                continue
            t = {int(k): v for k, v in json.loads(r.stdout.strip().splitlines()[-1]).items()}
            rows.append((name, pol or "default", t[1], t[cores]))
    print(f"steady training step (best of 4, Adam), {cores} cores, fresh process per policy")
    print(f"{'model':<22}{'policy':<9}{'1 thread':>11}{f'{cores} threads':>12}{'all/1':>8}")
    for name, pol, one, allc in rows:
        print(f"{name:<22}{pol:<9}{one * 1e3:>9.1f}ms{allc * 1e3:>10.1f}ms{allc / one:>8.2f}")
    by = {(n, p): (o, a) for n, p, o, a in rows}
    print("\nall-core step, default policy / PASSIVE (>1: PASSIVE faster):")
    for name, *_ in MODELS:
        if (name, "default") in by and (name, "PASSIVE") in by:
            d, p = by[(name, "default")][1], by[(name, "PASSIVE")][1]
            print(f"  {name:<22}{d / p:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
