"""Trainer overhead: the same model, data and steps through (a) a minimal hand-written Paddle loop,
(b) ``paddle.Model.fit`` and (c) paddlefit's Trainer (metrics.jsonl every step, checkpointing at its default
interval plus the final checkpoint), interleaved in one process.

Job: ``digits_cnn`` on scikit-learn digits (1,348 train images), batch 32, Adam lr 1e-3, shuffled, 1,050
optimizer steps (25 epochs) by default, no eval. Each competitor builds its model, optimizer and DataLoader inside
the timed region.
Rounds alternate a, b, c so drift (thermal, other load) hits all three alike; the table shows the median time and
the median of the per-round ratios (each round's competitors ran back to back, so the paired ratio cancels most
of this shared machine's drift; single runs vary by +-5% here). Target: paddlefit >= 0.97x the hand-written loop.

Run: `.venv/bin/python bench/trainer_overhead.py [--rounds 3] [--steps 1050]`
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

from rich.console import Console
from rich.table import Table

warnings.filterwarnings("ignore")
os.environ.setdefault("GLOG_minloglevel", "2")

BATCH = 32
LR = 1e-3
SEED = 0


def hand_written(steps: int) -> float:
    """The loop a Paddle user writes by hand; returns the last loss."""
    import paddle

    from paddlefit.examples.datasets import digits
    from paddlefit.models.examples import digits_cnn

    paddle.seed(SEED)
    model = digits_cnn()
    opt = paddle.optimizer.Adam(learning_rate=LR, parameters=model.parameters())
    loader = paddle.io.DataLoader(digits("train"), batch_size=BATCH, shuffle=True, drop_last=True)
    done = 0
    while done < steps:
        for x, y in loader:
            loss = paddle.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.clear_grad()
            done += 1
            if done == steps:
                break
    return float(loss.item())


def model_fit(steps: int) -> float:
    """``paddle.Model(net).prepare(...).fit(...)`` (the high-level API); epochs chosen to give ``steps``."""
    import paddle

    from paddlefit.examples.datasets import digits
    from paddlefit.models.examples import digits_cnn

    paddle.seed(SEED)
    ds = digits("train")
    per_epoch = len(ds) // BATCH
    if steps % per_epoch:
        raise SystemExit(f"--steps must be a multiple of {per_epoch} for Model.fit")
    inputs = [paddle.static.InputSpec([None, 1, 8, 8], "float32", "image")]
    labels = [paddle.static.InputSpec([None], "int64", "label")]
    model = paddle.Model(digits_cnn(), inputs, labels)
    opt = paddle.optimizer.Adam(learning_rate=LR, parameters=model.parameters())
    model.prepare(opt, paddle.nn.CrossEntropyLoss())
    model.fit(ds, batch_size=BATCH, epochs=steps // per_epoch, shuffle=True, drop_last=True, verbose=0)
    return float("nan")


def paddlefit_trainer(steps: int) -> float:
    """paddlefit's Trainer with the default checkpoint policy (every 500 steps / 10 minutes, and at the end)."""
    from paddlefit.jobspec.spec import JobSpec
    from paddlefit.train.loop import Trainer, TrainOptions

    spec = JobSpec(
        model="paddlefit.models.examples:digits_cnn",
        data={"train": "digits"},
        batch_size=BATCH,
        max_steps=steps,
        lr=LR,
        seed=SEED,
    )
    with tempfile.TemporaryDirectory() as tmp:
        res = Trainer(spec, TrainOptions(run_dir=Path(tmp), resume="never", progress=False, log=lambda _m: None)).run()
        assert res.exit_code == 0
        return float(res.summary["final_loss"])


COMPETITORS = [
    ("hand-written loop", hand_written),
    ("paddle.Model.fit", model_fit),
    ("paddlefit train", paddlefit_trainer),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=1050)
    args = ap.parse_args()
    from paddlefit.probe.memory import use_all_cores

    cores = use_all_cores()
    console = Console()
    times: dict[str, list[float]] = {name: [] for name, _ in COMPETITORS}
    for _name, fn in COMPETITORS:  # warm-up: imports, allocator, oneDNN kernels
        fn(42)
    for r in range(args.rounds):
        for name, fn in COMPETITORS:
            t0 = time.perf_counter()
            fn(args.steps)
            times[name].append(time.perf_counter() - t0)
        console.print(
            f"round {r + 1}/{args.rounds}: " + ", ".join(f"{n} {t[-1]:.2f} s" for n, t in times.items()),
            highlight=False,
        )
    samples = args.steps * BATCH
    table = Table(
        title=f"trainer overhead: digits_cnn, batch {BATCH}, {args.steps} steps, {cores} threads, "
        f"median of {args.rounds} interleaved rounds"
    )
    for col in ("loop", "median s", "min s", "max s", "samples/s", "vs hand-written (median of rounds)"):
        table.add_column(col, justify="left" if col == "loop" else "right")
    hand = times["hand-written loop"]
    ratios = {name: statistics.median(h / t for h, t in zip(hand, ts, strict=True)) for name, ts in times.items()}
    for name, ts in times.items():
        med = statistics.median(ts)
        table.add_row(
            name, f"{med:.2f}", f"{min(ts):.2f}", f"{max(ts):.2f}", f"{samples / med:,.0f}", f"{ratios[name]:.3f}x"
        )
    console.print(table)
    ratio = ratios["paddlefit train"]
    met = ratio >= 0.97
    console.print(f"paddlefit / hand-written throughput: {ratio:.3f}x; target >= 0.97x: {'MET' if met else 'NOT MET'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
