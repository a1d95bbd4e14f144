"""Do recorded runs improve the plan on their device? Leave-one-model-out over published GPU runs as registry rows.

The rows: every published measurement of ``bench/data/gpu-training-measurements.csv`` that ``bench/gpu_fit.py``
can build, as a run registry row (model, device, predicted and measured step time). The prediction is the
per-operator model with its parameters refitted *without any row of the row's GPU* (leave-one-device-out): what
the plan says for a card no published run in the fit was on, which is what a user's own L4 is. ``--write``
stores the rows in ``tests/data/recorded-runs.json``, which ``tests/test_runs_calibration.py`` replays.

Then, for every device with runs of at least two models, and every model on it: the correction
(:func:`paddlefit.plan.runs_calibration.fit_correction`) fitted on that device's runs of the *other* models, and
the held-out model's runs predicted before and after it. Printed: per device, median |predicted / measured - 1|
before and after, and overall. Target: held-out runs predicted better after than before (overall
median |error| lower).

    .venv/bin/python bench/runs_calibration.py [--write]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
ROWS_FILE = ROOT / "tests" / "data" / "recorded-runs.json"


def recorded_rows() -> list[dict]:
    """The published runs as registry rows, predicted by the leave-one-device-out per-op model."""
    import gpu_fit

    cases, _ = gpu_fit.build_cases(gpu_fit.load_rows(), gpu_fit.load_traces())
    rows = []
    for dev in sorted({c.gpu.name for c in cases}):
        params = gpu_fit.fit([c for c in cases if c.gpu.name != dev])
        for c in cases:
            if c.gpu.name == dev:
                src = c.source
                rows.append(
                    {
                        "id": len(rows) + 1,
                        "row": c.row["id"],
                        "model": c.workload.key,
                        "device_name": c.gpu.name,
                        "precision": c.precision,
                        "micro_batch_size": c.batch,
                        "device_count": int(c.row["gpus"]),
                        "source": src,
                        "predicted_step_s": c.batch / gpu_fit.predict(c, params),
                        "measured_step_s": c.batch / c.measured_per_gpu,
                    }
                )
    return sorted(rows, key=lambda r: r["row"])


def held_out(rows: list[dict]) -> list[tuple[dict, float, float]]:
    """(row, |error| before, |error| after) of every row whose device has runs of another model, the correction
    fitted on that device's other models' runs."""
    from paddlefit.plan.runs_calibration import fit_correction

    out = []
    for r in rows:
        others = [o for o in rows if o["device_name"] == r["device_name"] and o["model"] != r["model"]]
        corr = fit_correction(others, r["model"], r["device_name"])
        if corr is None:
            continue
        before = abs(r["predicted_step_s"] / r["measured_step_s"] - 1)
        after = abs(r["predicted_step_s"] * corr.factor / r["measured_step_s"] - 1)
        out.append((r, before, after))
    return out


def _median(v: list[float]) -> float:
    s = sorted(v)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help=f"store the rows in {ROWS_FILE.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows = recorded_rows()
    if args.write:
        from paddlefit.fileio import atomic_write_text

        atomic_write_text(ROWS_FILE, json.dumps(rows, indent=1) + "\n")
    res = held_out(rows)
    print(f"{'device':16s} {'held-out runs':>13s} {'models':>6s} {'before':>8s} {'after':>8s}")
    for dev in sorted({r["device_name"] for r, _, _ in res}):
        sub = [(b, a) for r, b, a in res if r["device_name"] == dev]
        models = len({r["model"] for r, _, _ in res if r["device_name"] == dev})
        print(
            f"{dev:16s} {len(sub):13d} {models:6d} {_median([b for b, _ in sub]):8.1%} "
            f"{_median([a for _, a in sub]):8.1%}"
        )
    before, after = _median([b for _, b, _ in res]), _median([a for _, _, a in res])
    better = sum(a < b for _, b, a in res)
    print(f"{'all':16s} {len(res):13d} {'':6s} {before:8.1%} {after:8.1%}")
    print(
        f"median |predicted/measured - 1| of held-out runs: {before:.1%} before -> {after:.1%} after "
        f"(ratio {after / before:.2f}); {better}/{len(res)} runs predicted better; {time.perf_counter() - t0:.0f} s"
    )
    met = after < before
    print(f"target (held-out runs predicted better after than before): {'MET' if met else 'NOT MET'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
