"""Rank 0's record of a run: the measured step times beside the plan's prediction (``RUN_DIR/comparison.json``,
:func:`paddlefit.train.predict.comparison`) and the run's row in the run registry (:mod:`paddlefit.runs`).

Only the trainer's global rank 0 makes a :class:`RunRecord`. Nothing here fails a run: a registry that is
missing, locked or corrupt is a warning (the registry's own rule), and the comparison is written with the
run's other files (atomically).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from paddlefit.fileio import atomic_write_text
from paddlefit.train.predict import COMPARISON_FILE, PREDICTION_FILE, WARMUP_STEPS, comparison

__all__ = ["PREDICTION_KEY_ENV", "RunRecord"]

PREDICTION_KEY_ENV = "PADDLEFIT_PREDICTION_KEY"  # run_job -> launched workers: which prediction.json is this run's
STATUS_NAMES = {0: "finished", 3: "nonfinite", 4: "budget", 143: "stopped"}


def _utc(t: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class RunRecord:
    """Measured steps and the prediction of one process's share of a run (rank 0).

    ``step(seconds, wait_seconds)`` is called once per optimizer step; the first :data:`WARMUP_STEPS` of this
    process are left out of the figures (a resumed run warms up again). ``write(...)`` writes comparison.json and
    returns the document.
    """

    def __init__(self, run_dir: Path, prediction_key: str | None, log: Callable[[str], None]) -> None:
        self.run_dir = run_dir
        self.log = log
        self.prediction: dict[str, Any] | None = None
        if prediction_key:
            with contextlib.suppress(OSError, ValueError):
                doc = json.loads((run_dir / PREDICTION_FILE).read_text(encoding="utf-8"))
                self.prediction = doc if doc.get("key") == prediction_key else None
        self.seen = 0
        self.step_s: list[float] = []
        self.wait_s: list[float] = []
        self.registry_id: int | None = None

    def step(self, seconds: float, wait_seconds: float) -> None:
        """One optimizer step's wall seconds and the seconds of it spent waiting for data."""
        self.seen += 1
        if self.seen > WARMUP_STEPS:
            self.step_s.append(seconds)
            self.wait_s.append(wait_seconds)

    def write(self, *, global_batch: int, batch_size: int, grad_accum_steps: int, devices: int,
              peak_memory_bytes: int) -> dict[str, Any]:  # fmt: skip
        """comparison.json now (atomic); the document (:func:`~paddlefit.train.predict.comparison`)."""
        doc = comparison(self.prediction, step_s=self.step_s, wait_s=self.wait_s, global_batch=global_batch,
                         batch_size=batch_size, grad_accum_steps=grad_accum_steps, devices=devices,
                         peak_memory_bytes=peak_memory_bytes, warmup_steps=WARMUP_STEPS)  # fmt: skip
        if self.prediction is None and doc["device"] is None:
            doc["device"] = {"kind": None, "name": None, "count": devices}
        atomic_write_text(self.run_dir / COMPARISON_FILE, json.dumps(doc, indent=2) + "\n", option="--run-dir")
        return doc

    # ---- the registry (paddlefit.runs) ---------------------------------------------------------------------
    def host_fields(self) -> dict[str, Any]:
        """Host, pid and start time of this process, for the registry row."""
        return {"host": socket.gethostname(), "pid": os.getpid(), "started_at": _utc()}
