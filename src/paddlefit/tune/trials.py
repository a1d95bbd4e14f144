"""Measure a job's throughput under candidate settings and keep the fastest (``paddlefit tune``).

A trial builds the job with the trainer's own code (:class:`~paddlefit.train.trainer.Trainer`: model, DataLoader,
optimizer, AMP) and runs ``warmup`` optimizer steps, then times ``steps`` more through the trainer's step
(``_train_step`` + ``_optimizer_step``, no profiling syncs), crossing epoch boundaries as training does (so
``persistent_workers`` shows its worth). Metrics: samples/s, mean step, data-wait fraction, peak memory.

Search (the order matters only for the time budget):

1. the user's own settings (the baseline);
2. ``data.num_workers`` in 0..min(cores, 8);
3. on the fastest worker count > 0: ``use_shared_memory`` flipped, ``prefetch_factor`` 4, ``persistent_workers``;
4. on a GPU: AMP (bf16-o1 on compute capability >= 8.0, else fp16-o1) and ``FLAGS_cudnn_exhaustive_search``;
5. the baseline and the two best candidates again, interleaved, ``confirm`` more times each: the winner has the
   highest median; the ratio is the winner's median over the baseline's median.

Batch-size search is not done: it changes the optimisation unless accumulation keeps the global batch, and the
memory limit needs the GPU plan.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from paddlefit.spec import JobSpec


@dataclass
class Trial:
    """One candidate: ``settings`` (dotted spec keys -> values, plus ``FLAGS_*``), and its measured runs."""

    label: str
    settings: dict[str, Any]
    samples_per_s: list[float] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)
    data_wait_fraction: list[float] = field(default_factory=list)
    peak_memory_bytes: int = 0

    @property
    def median(self) -> float:
        """Median samples/s over the runs (0 when none ran)."""
        return statistics.median(self.samples_per_s) if self.samples_per_s else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"label": self.label, "settings": self.settings, "samples_per_s": self.samples_per_s,
                "median_samples_per_s": self.median, "step_s": self.step_s,
                "data_wait_fraction": self.data_wait_fraction, "peak_memory_bytes": self.peak_memory_bytes}  # fmt: skip


@dataclass
class TuneResult:
    """Baseline, every trial, the winner and winner / baseline (medians of the confirmation runs)."""

    baseline: Trial
    trials: list[Trial]
    best: Trial
    ratio: float
    elapsed_s: float
    steps: int
    warmup: int

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document."""
        return {"baseline": self.baseline.to_dict(), "best": self.best.to_dict(), "ratio": self.ratio,
                "trials": [t.to_dict() for t in self.trials], "elapsed_s": self.elapsed_s, "steps": self.steps,
                "warmup": self.warmup}  # fmt: skip


def apply_settings(spec: JobSpec, settings: dict[str, Any]) -> JobSpec:
    """``spec`` with dotted keys set (``data.num_workers``, ``precision``); ``FLAGS_*`` keys are not spec keys."""
    doc = spec.model_dump(mode="json")
    for key, value in settings.items():
        if key.startswith("FLAGS_"):
            continue
        node = doc
        *parents, last = key.split(".")
        for p in parents:
            node = node[p]
        node[last] = value
    return JobSpec.model_validate(doc)


def measure(spec: JobSpec, steps: int = 30, warmup: int = 5, flags: dict[str, Any] | None = None) -> dict[str, float]:
    """One timed run of ``spec`` (one device): samples/s, mean step seconds, data-wait fraction, peak memory bytes.

    Raises:
        PaddlefitError: the job's model, data or loss fail (as in ``train``).
    """
    import paddle

    from paddlefit.train.trainer import peak_memory_bytes, scratch_trainer

    if flags:
        paddle.set_flags(flags)
    accum = spec.grad_accum_steps
    with scratch_trainer(spec, steps + warmup) as (t, step_batches):
        wait_total, t_start = 0.0, time.perf_counter()
        for step in range(steps + warmup):
            if step == warmup:
                wait_total, t_start = 0.0, time.perf_counter()
            t.step = step
            _, wait = t._train_step(step_batches())
            t._optimizer_step()
            wait_total += wait
        if t.on_gpu:
            paddle.device.synchronize()
        elapsed = time.perf_counter() - t_start
        peak = peak_memory_bytes(t.on_gpu)
    gb = spec.batch_size * accum
    return {"samples_per_s": gb * steps / elapsed, "step_s": elapsed / steps,
            "data_wait_fraction": wait_total / elapsed, "peak_memory_bytes": float(peak)}  # fmt: skip


def candidates(spec: JobSpec, on_gpu: bool, compute_capability: float | None = None) -> list[tuple[str, dict]]:
    """Stage-2 candidates: ``data.num_workers`` values other than the spec's (0..min(cores, 8))."""
    cores = os.cpu_count() or 1
    return [(f"num_workers={w}", {"data.num_workers": w}) for w in range(0, min(cores, 8) + 1)
            if w != spec.data.num_workers]  # fmt: skip


def _refinements(best: Trial, spec: JobSpec, on_gpu: bool, cc: float | None) -> list[tuple[str, dict]]:
    out: list[tuple[str, dict]] = []
    cur = apply_settings(spec, best.settings)
    if cur.data.num_workers > 0:
        out.append((f"{best.label}, use_shared_memory={not cur.data.use_shared_memory}",
                    {**best.settings, "data.use_shared_memory": not cur.data.use_shared_memory}))  # fmt: skip
        if cur.data.prefetch_factor != 4:
            out.append((f"{best.label}, prefetch_factor=4", {**best.settings, "data.prefetch_factor": 4}))
        if not cur.data.persistent_workers:
            out.append((f"{best.label}, persistent_workers", {**best.settings, "data.persistent_workers": True}))
    if on_gpu:
        if not cur.precision.is_amp:
            amp = "bf16-o1" if (cc or 0) >= 8.0 else "fp16-o1"
            out.append((f"{best.label}, {amp}", {**best.settings, "precision": amp}))
        out.append((f"{best.label}, cudnn exhaustive search",
                    {**best.settings, "FLAGS_cudnn_exhaustive_search": True}))  # fmt: skip
    return out


def tune(spec: JobSpec, budget_s: float = 300.0, steps: int = 30, warmup: int = 5, confirm: int = 2,
         progress: Any = None) -> TuneResult:  # fmt: skip
    """Search the settings of the module docstring within ``budget_s`` seconds (the baseline and the confirmation
    runs always run); returns every trial and the winner.

    Raises:
        PaddlefitError: the job fails in the baseline run (a candidate that fails is recorded with no runs).
        ValueError: steps < 3, warmup < 0, confirm < 1, budget_s <= 0.
    """
    if steps < 3 or warmup < 0 or confirm < 1 or budget_s <= 0:
        raise ValueError("steps >= 3, warmup >= 0, confirm >= 1 and budget_s > 0 are required")
    import paddle

    from paddlefit.errors import PaddlefitError

    say = progress or (lambda msg: None)
    t0 = time.perf_counter()
    on_gpu = paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0
    cc = None
    if on_gpu:
        major, minor = paddle.device.cuda.get_device_capability()
        cc = major + minor / 10

    def run(trial: Trial) -> None:
        flags = {k: v for k, v in trial.settings.items() if k.startswith("FLAGS_")}
        try:
            m = measure(apply_settings(spec, trial.settings), steps, warmup, flags or None)
        except PaddlefitError:
            if trial.label == "baseline":
                raise
            return
        finally:
            if flags:  # back to the defaults for the next trial
                paddle.set_flags({k: False for k in flags})
        trial.samples_per_s.append(m["samples_per_s"])
        trial.step_s.append(m["step_s"])
        trial.data_wait_fraction.append(m["data_wait_fraction"])
        trial.peak_memory_bytes = max(trial.peak_memory_bytes, int(m["peak_memory_bytes"]))

    baseline = Trial("baseline", {})
    say("baseline (your settings)")
    run(baseline)
    trials: list[Trial] = []

    def stage(cands: list[tuple[str, dict]]) -> None:
        for label, settings in cands:
            if time.perf_counter() - t0 > budget_s:
                return
            say(label)
            trials.append(Trial(label, settings))
            run(trials[-1])

    stage(candidates(spec, on_gpu, cc))
    stage(_refinements(max([baseline, *trials], key=lambda x: x.median), spec, on_gpu, cc))
    ranked = sorted([t for t in [baseline, *trials] if t.samples_per_s], key=lambda x: -x.median)
    finalists = [baseline, *[t for t in ranked if t is not baseline][:2]]
    for r in range(confirm):  # interleaved: drift hits every finalist alike
        for trial in finalists:
            say(f"confirm {r + 1}/{confirm}: {trial.label}")
            run(trial)
    best = max(finalists, key=lambda x: x.median)
    return TuneResult(baseline=baseline, trials=trials, best=best, ratio=best.median / baseline.median,
                      elapsed_s=time.perf_counter() - t0, steps=steps, warmup=warmup)  # fmt: skip
