"""Measure the host side of a GPU training step (Paddle's eager dispatch, the optimizer's loop over tensors) and
ship it as constants of the GPU model, so that a GPU row does not depend on the machine that plans it.

``host_op_s``: one eager op that records autograd (1-element ``paddle.add``); ``host_step_s_per_tensor``: one
``optimizer.step()`` divided by its parameter tensors (20 one-element tensors), the median over SGD, Momentum, Adam and
AdamW; ``host_step_s``: the rest of a step's host work (a ``Linear(1, 1)``'s whole step minus its ops and tensors), the
median over the optimizers; ``predictor_call_s`` / ``predictor_op_s``: one Paddle Inference request of a 1-op program
and each further op of a 201-op one (:func:`paddlefit.serving.predictor_overhead.measure_predictor_overhead`; the
serving rows' host floor). All are the minimum over repeats on an idle machine (``timeit``'s advice: load only ever adds
time; :func:`paddlefit.probe.host_overhead.measure_host_overhead`). A GPU host also pays the CUDA launch per kernel,
which is in ``kernel_s`` on the device side; ``paddlefit calibrate`` on the training host measures these figures there
and its rows say ``calibration: device``.

    .venv/bin/python bench/host_overhead.py           # measure, print
    .venv/bin/python bench/host_overhead.py --write   # also write them into the parameter file (idle machine!)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PARAMS_FILE = HERE.parent / "src" / "paddlefit" / "catalog" / "data" / "gpu_perf_params.json"
sys.path.insert(0, str(HERE.parent / "src"))


def main() -> int:
    """Measure (three times, the minimum), print, optionally write."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write the constants into the parameter file")
    args = ap.parse_args()
    import paddle

    from paddlefit.jobspec.optimizers import make_optimizer
    from paddlefit.jobspec.spec import OptimizerName
    from paddlefit.probe.host_overhead import measure_host_overhead

    runs = {o: [measure_host_overhead(lambda ps, o=o: make_optimizer(o, ps)) for _ in range(3)] for o in OptimizerName}
    op_s = min(h.op_s for hs in runs.values() for h in hs)
    per_opt = {o.value: min(h.optimizer_s_per_tensor for h in hs) for o, hs in runs.items()}
    step = statistics.median(per_opt.values())
    fixed = statistics.median(min(h.step_s_fixed for h in hs) for hs in runs.values())
    from paddlefit.serving.predictor_overhead import measure_predictor_overhead

    served = [measure_predictor_overhead() for _ in range(3)]
    call_s, pred_op_s = min(p.call_s for p in served), min(p.op_s for p in served)
    print(
        f"host_op_s {op_s * 1e6:.2f} us; optimizer step per tensor (us): "
        + ", ".join(f"{k} {v * 1e6:.2f}" for k, v in per_opt.items())
        + f"; median {step * 1e6:.2f} us; "
        f"fixed host work per step {fixed * 1e6:.1f} us; Paddle Inference request {call_s * 1e6:.1f} us + "
        f"{pred_op_s * 1e6:.2f} us per op"
    )
    if args.write:
        from paddlefit.fileio import atomic_write_text

        doc = json.loads(PARAMS_FILE.read_text(encoding="utf-8"))
        doc["values"].update(
            host_op_s=round(op_s, 9),
            host_step_s_per_tensor=round(step, 9),
            host_step_s=round(fixed, 9),
            predictor_call_s=round(call_s, 9),
            predictor_op_s=round(pred_op_s, 9),
        )
        doc["provenance"]["host"] = {
            "measured_by": "bench/host_overhead.py",
            "date": dt.date.today().isoformat(),
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, idle",
            "paddle": paddle.__version__,
            "optimizer_step_s_per_tensor": {k: round(v, 9) for k, v in per_opt.items()},
        }
        atomic_write_text(PARAMS_FILE, json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"wrote {PARAMS_FILE.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
