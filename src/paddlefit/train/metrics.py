"""A run's metrics: metrics.jsonl's lines (and VisualDL), the allocator's peak, the parameters' hash, progress.

Only rank 0 writes (the loop gives the other ranks no :class:`MetricsLog`); the files are opened, read and
rewritten through :mod:`paddlefit.rundir.files`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from paddlefit.errors import PaddlefitError
from paddlefit.fileio import loads_limited
from paddlefit.rundir.files import metrics_file, open_metrics, read_metrics_text, rewrite_metrics, visualdl_dir
from paddlefit.rundir.layout import RESUME_EVENT

__all__ = [
    "LogLines",
    "MetricsLog",
    "PeakTracker",
    "Progress",
    "params_sha256",
    "peak_memory_bytes",
    "resume_record",
    "to_jsonable",
]


def peak_memory_bytes(on_gpu: bool) -> int:
    """Peak allocated bytes of Paddle's allocator in this process since the last reset, as Paddle reports it:
    ``paddle.device.cuda.max_memory_allocated()`` on GPU (excludes the CUDA context), the host allocator's
    ``Allocated`` peak on CPU. Under-reports once a DataLoader thread allocates: see :class:`PeakTracker`."""
    import paddle

    if on_gpu:
        return int(paddle.device.cuda.max_memory_allocated())
    return int(paddle.base.core.host_memory_stat_peak_value("Allocated", 0))


class PeakTracker:
    """The allocator's peak over a run, across threads, in bytes.

    Paddle keeps its memory statistics per thread (``paddle/phi/core/memory/stats.h``, ``Stat::Update``): the
    process-wide peak is raised only when the allocating thread exceeds its *own* previous high. A DataLoader's
    reader thread allocates every batch and the training thread frees them, so the training thread's own count
    drifts below its early high and its later highs (an evaluation pass, a longer batch) are never recorded.
    Resetting the peak (which restarts the high from the current value) at every step boundary and keeping the
    largest reading restores them. Measured: PP-LCNet evaluating at batch 200 after 6 steps peaked at 17.40 MB;
    Paddle's counter without resets said 12.99 MB for the whole run.
    """

    def __init__(self, on_gpu: bool) -> None:
        """Start tracking from now: Paddle's high is restarted from the current allocation, so a peak reached
        earlier in this process (another run, another test, the model's build) is not this run's."""
        self.on_gpu = on_gpu
        self.best = 0
        self._restart()

    def checkpoint(self) -> None:
        """Fold the peak since the last checkpoint into the run's and restart Paddle's high from now."""
        self.best = max(self.best, peak_memory_bytes(self.on_gpu))
        self._restart()

    def _restart(self) -> None:
        """Restart Paddle's high from the current allocation."""
        import paddle

        if self.on_gpu:
            paddle.device.cuda.reset_max_memory_allocated()
        else:
            paddle.base.core.host_memory_stat_reset_peak_value("Allocated", 0)

    def peak(self) -> int:
        """The run's peak so far, bytes."""
        return max(self.best, peak_memory_bytes(self.on_gpu))


def params_sha256(model: Any) -> str:
    """sha256 over the model's ``state_dict()`` in sorted-name order: name, shape and float32 little-endian bytes of
    each tensor, so two runs can be compared bit for bit whatever the device."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        arr = np.ascontiguousarray(tensor.numpy().astype("<f4"))
        h.update(name.encode())
        h.update(str(arr.shape).encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def to_jsonable(obj: Any) -> Any:
    """``obj`` with tensors, NumPy scalars and tuples turned into JSON types (for a scheduler's or scaler's
    ``state_dict()``)."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if hasattr(obj, "numpy"):
        return np.asarray(obj.numpy()).tolist()
    return obj


def last_line_time(text: str) -> float | None:
    """The largest wall-clock ``time`` (Unix seconds) of metrics.jsonl's lines in ``text``: the last line written
    before a kill (None when no line has one)."""
    times = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            t = loads_limited(line, "a line of metrics.jsonl").get("time")
            if isinstance(t, int | float) and not isinstance(t, bool):
                times.append(float(t))
    return max(times, default=None)


def resume_record(step: int, cut: list[dict[str, Any]], last_time: float | None, now: float) -> dict[str, Any]:
    """metrics.jsonl's record of a resume from the checkpoint of ``step``: ``{"event": "resume", "step",
    "from_step", "lost_steps": [first, last] or None, "lost_step_count", "lost_compute_s", "down_s", "time"}``.

    ``cut`` are the lines the resume removed (after ``step``): their train steps were lost and are run again, and
    ``lost_compute_s`` is the sum of their measured ``step_time_s`` (seconds, data wait included: the time the
    steps took). ``down_s`` is ``now`` (Unix seconds, the resume) less ``last_time`` (the last line written before
    the stop or kill), None without times."""
    lost = sorted({int(r["step"]) for r in cut if "loss" in r and isinstance(r.get("step"), int)})
    compute = sum(float(r["step_time_s"]) for r in cut if "loss" in r and isinstance(r.get("step_time_s"), int | float))
    return {
        "event": RESUME_EVENT,
        "step": step,
        "from_step": step,
        "lost_steps": [lost[0], lost[-1]] if lost else None,
        "lost_step_count": len(lost),
        "lost_compute_s": round(compute, 6),
        "down_s": round(now - last_time, 3) if last_time is not None else None,
        "time": round(now, 3),
    }


class MetricsLog:
    """Rank 0's metrics.jsonl (one JSON object a line: train steps and eval results) and, with ``visualdl``, a
    ``visualdl.LogWriter`` on RUN_DIR/visualdl (tags ``train/loss``, ``train/lr``, ``train/samples_per_s``,
    ``train/data_wait_s``, ``eval/loss``, ``eval/accuracy``).

    Raises:
        PaddlefitError: ``visualdl`` is on and VisualDL is not installed.
        FileWriteError: metrics.jsonl cannot be opened or written (here, in :meth:`write` and :meth:`close`).
    """

    def __init__(self, run_dir: Path, visualdl: bool) -> None:
        self.path = metrics_file(run_dir)
        self.vdl = None
        if visualdl:
            try:
                from visualdl import LogWriter
            except ImportError:
                raise PaddlefitError(
                    "`visualdl: true` needs VisualDL: pip install 'paddlefit[visualdl]' (or set `visualdl: false`)."
                ) from None
            self.vdl = LogWriter(logdir=str(visualdl_dir(run_dir)))
        self.file = open_metrics(run_dir)

    @staticmethod
    def truncate_after(run_dir: Path, step: int, resumed: bool = False) -> dict[str, Any] | None:
        """Resumed run: drop metric lines after the checkpoint's ``step``, eval lines at ``step`` itself and lines
        cut by a kill, so metrics.jsonl reads as one run; with ``resumed``, append the resume's record
        (:func:`resume_record`, returned) in the same atomic rewrite, so what the cut removed stays known. Earlier
        resume records (at a step <= ``step``) are kept: every resume of the run stays in the file.

        The resumed run evaluates at ``step`` again when an eval ran there: a periodic checkpoint of an epoch's last
        step is written before that epoch's eval, and a finished run's final checkpoint is resumed with no eval
        result in memory.

        Raises:
            FileWriteError: metrics.jsonl cannot be read or rewritten (a directory of its name, a full disk).
        """
        text = read_metrics_text(run_dir)
        if text is None:
            return None
        kept, cut = [], []
        for line in text.splitlines():
            try:
                rec: Any = loads_limited(line, "a line of metrics.jsonl")
                at = rec.get("step", 0)
                if at < step or (at == step and "eval_loss" not in rec):
                    kept.append(line)
                else:
                    cut.append(rec)
            except (ValueError, AttributeError, TypeError):
                continue  # a line cut by a kill
        record = None
        if resumed:
            record = resume_record(step, cut, last_line_time(text), time.time())
            kept.append(json.dumps(record))
        rewrite_metrics(run_dir, kept)
        return record

    def write(self, record: dict[str, Any], scalars: tuple[str, ...] = (), prefix: str = "train") -> None:
        """Append ``record`` (with a ``step``) as a line, with ``time`` (Unix seconds, wall clock: a kill and
        resume shows as a gap), and flush; ``scalars`` of it also go to VisualDL as ``prefix/<name>`` (without an
        ``eval_`` prefix)."""
        self.file.write(json.dumps({**record, "time": round(time.time(), 3)}) + "\n")
        if self.vdl is not None:
            for k in scalars:
                if record.get(k) is not None:
                    self.vdl.add_scalar(tag=f"{prefix}/{k.removeprefix('eval_')}", value=record[k], step=record["step"])

    def close(self) -> None:
        """Close the file and the VisualDL writer. Called while an exception propagates (the loop's ``finally``),
        a failing close (the rest of a write that failed on a full disk) is not raised over it.

        Raises:
            FileWriteError: the close failed, no other exception being raised.
        """
        try:
            with contextlib.suppress(OSError) if sys.exc_info()[0] else contextlib.nullcontext():
                self.file.close()
        finally:
            if self.vdl is not None:
                self.vdl.close()


class Progress(Protocol):
    """What the loop reports progress to (rank 0). The CLI passes a progress bar; the default is :class:`LogLines`."""

    def start(self, step: int, total_steps: int) -> None:
        """The run starts (or resumes) at optimizer step ``step`` of ``total_steps``."""

    def update(self, step: int, epoch: float, loss: float, samples: float, seconds: float) -> None:
        """Optimizer step ``step`` (epoch ``epoch`` done, a float) had mean loss ``loss`` and took ``seconds`` for
        ``samples`` samples (the global batch)."""

    def close(self) -> None:
        """The run ended."""


class LogLines:
    """Progress as a log line every ``every`` optimizer steps and at the last: ``step S/T (epoch E): loss L  R
    samples/s over the last N steps, A since step S0``: R the rate of the steps since the previous line, A the rate
    of every step since the run (or resume) started. On a shared machine a window of ``every`` steps (a fraction of
    a second for a small model) swings with the other processes' load (with two busy processes on a 2-core machine,
    windows 2-4x the lines around them were measured, 2.4x at step 210 of one run), so the line also gives the
    steady figure A."""

    def __init__(self, log: Callable[[str], None], every: int) -> None:
        self.log = log
        self.every = every
        self.total = self.first = self.steps = 0
        self.samples = self.seconds = self.all_samples = self.all_seconds = 0.0

    def start(self, step: int, total_steps: int) -> None:
        """See :class:`Progress`."""
        self.total, self.first = total_steps, step

    def update(self, step: int, epoch: float, loss: float, samples: float, seconds: float) -> None:
        """See :class:`Progress`."""
        self.samples += samples
        self.seconds += seconds
        self.steps += 1
        self.all_samples += samples
        self.all_seconds += seconds
        if step % self.every == 0 or step == self.total:
            rate = self.samples / self.seconds if self.seconds else 0.0
            overall = self.all_samples / self.all_seconds if self.all_seconds else 0.0
            self.log(
                f"step {step}/{self.total} (epoch {epoch:.2f}): loss {loss:.4f}  {rate:,.0f} samples/s over the "
                f"last {self.steps} step(s), {overall:,.0f} since step {self.first}"
            )
            self.samples = self.seconds = 0.0
            self.steps = 0

    def close(self) -> None:
        """See :class:`Progress`."""
