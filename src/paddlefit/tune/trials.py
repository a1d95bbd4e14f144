"""Measure a job's throughput under candidate settings and keep the fastest (``paddlefit tune``).

A trial builds the job with the trainer's own code (:func:`~paddlefit.train.step.scratch_runner`: model, DataLoader,
optimizer, AMP) and runs ``warmup`` optimizer steps, then times ``steps`` more through the trainer's step
(``StepRunner.train_step`` + ``optimizer_step``, no profiling syncs), crossing epoch boundaries as training does (so
``persistent_workers`` shows its worth). Metrics: samples/s, mean step, data-wait fraction, peak memory.

Search (the order matters only for the time budget):

1. the user's own settings (the baseline);
2. ``data.num_workers`` in 0..min(cores, 8);
3. on the fastest worker count > 0: ``use_shared_memory`` flipped, ``prefetch_factor`` 4, ``persistent_workers``
   and, on a CPU run, ``cpu_threads`` = cores - workers (Paddle's math threads otherwise compete with the workers
   for the cores); when the model factory takes ``sparse`` (the text examples), sparse embedding gradients with
   Adam ``lazy_mode`` (only the looked-up rows are updated);
4. on a GPU: AMP (bf16-o1 where Paddle runs it, else fp16-o1: :data:`~paddlefit.catalog.units.AMP_MIN_CC`) and
   ``FLAGS_cudnn_exhaustive_search``;
5. per-device ``batch_size`` x2, x4, x8 on the best so far, each only while its peak memory, extrapolated on a line
   through the last two measured peaks (the peak is linear in the batch size: docs/sources.md#paddle-on-cpu, measured on
   Paddle's allocator), stays under the memory limit (``DEFAULT_SAFETY_MARGIN`` x the GPU's memory, or x the host's
   available memory on CPU). ``global_batch="keep"`` (default) divides ``grad_accum_steps`` by the same factor, so only
   jobs that accumulate get candidates; ``"free"`` lets the global batch grow (the optimisation changes: the table says
   so). A trial in which the trainer had to back off after running out of memory is discarded;
6. the baseline and the two best candidates again, interleaved, ``confirm`` more times each: the winner has the
   highest median; the ratio is the winner's median over the baseline's median.

Given ``paddlefit profile``'s fixes (``hypotheses``), their settings run first, right after the baseline, join the
confirmation runs, and each is judged confirmed (median >= 1.05x the baseline's) or refuted (:func:`judge_fix`).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from paddlefit import options
from paddlefit.catalog.units import cuda_amp_blocked
from paddlefit.jobspec.spec import JobSpec
from paddlefit.process.userimport import factory_takes
from paddlefit.units import MIB


@dataclass
class Trial:
    """One candidate: ``settings`` (dotted spec keys -> values, plus ``FLAGS_*``), and its measured runs."""

    label: str
    settings: dict[str, Any]
    samples_per_s: list[float] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)
    data_wait_fraction: list[float] = field(default_factory=list)
    peak_memory_bytes: int = 0
    global_batch: int = 0
    note: str = ""  # why a candidate has no runs: failed, out of memory, over the memory limit

    @property
    def median(self) -> float:
        """Median samples/s over the runs (0 when none ran)."""
        return statistics.median(self.samples_per_s) if self.samples_per_s else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "label": self.label,
            "settings": self.settings,
            "samples_per_s": self.samples_per_s,
            "median_samples_per_s": self.median,
            "step_s": self.step_s,
            "data_wait_fraction": self.data_wait_fraction,
            "peak_memory_bytes": self.peak_memory_bytes,
            "global_batch": self.global_batch,
            "note": self.note,
        }


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
    memory_limit_bytes: float = 0.0
    hypotheses: list[dict[str, Any]] = field(default_factory=list)  # profile's fixes as tested (:func:`judge_fix`)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document."""
        return {
            "baseline": self.baseline.to_dict(),
            "best": self.best.to_dict(),
            "ratio": self.ratio,
            "trials": [t.to_dict() for t in self.trials],
            "elapsed_s": self.elapsed_s,
            "steps": self.steps,
            "warmup": self.warmup,
            "memory_limit_bytes": self.memory_limit_bytes,
            "hypotheses": self.hypotheses,
        }


#: A profile fix is confirmed when its trial's median samples/s is at least this much above the baseline's median
#: (both include the interleaved confirmation runs); below it, the fix is refuted (no gain or slower).
CONFIRM_GAIN = 1.05
#: The profile fixes with settings tune tries first, before its own search (they always run, like the baseline).
PROFILE_FIXES_TRIED = 3


def judge_fix(fix: dict[str, Any], trial: Trial, baseline: Trial) -> dict[str, Any]:
    """A profile fix (``{fix, expected_gain, settings}``) against its measured trial: ``measured_ratio`` = trial
    median / baseline median (samples/s), ``verdict`` ``confirmed`` (>= :data:`CONFIRM_GAIN`) or ``refuted``, or
    ``not measured`` (the trial failed), and ``said``: one sentence with the numbers."""
    doc = {"fix": fix.get("fix"), "settings": fix.get("settings"), "expected_gain": fix.get("expected_gain")}
    if not trial.samples_per_s or not baseline.median:
        return {
            **doc,
            "measured_ratio": None,
            "verdict": "not measured",
            "said": f"not measured ({trial.note or 'the trial did not run'})",
        }
    ratio = trial.median / baseline.median
    verdict = "confirmed" if ratio >= CONFIRM_GAIN else "refuted"
    how = "faster" if ratio >= CONFIRM_GAIN else "no gain" if ratio >= 1 / CONFIRM_GAIN else "slower"
    said = (
        f"{verdict}: measured {ratio:.2f}x ({how}; {trial.median:,.0f} vs {baseline.median:,.0f} samples/s, "
        f"medians of {len(trial.samples_per_s)} and {len(baseline.samples_per_s)} interleaved runs)"
    )
    return {**doc, "measured_ratio": ratio, "verdict": verdict, "said": said}


def set_dotted(doc: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """Set dotted keys (``data.num_workers``, ``model_args.sparse``, ``precision``) in a spec mapping, in place,
    creating missing sections; ``FLAGS_*`` keys are not spec keys and are skipped. Returns ``doc``."""
    for key, value in settings.items():
        if key.startswith("FLAGS_"):
            continue
        node = doc
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return doc


def apply_settings(spec: JobSpec, settings: dict[str, Any]) -> JobSpec:
    """``spec`` with dotted keys set (see :func:`set_dotted`)."""
    return JobSpec.model_validate(set_dotted(spec.model_dump(mode="json"), settings))


def measure(
    spec: JobSpec,
    steps: int = options.STEPS_TUNE.default,
    warmup: int = options.WARMUP_TUNE.default,
    flags: dict[str, Any] | None = None,
) -> dict[str, float]:
    """One timed run of ``spec`` (one device): samples/s, mean step seconds, data-wait fraction, peak allocated
    bytes of this run (the allocator's peak is reset after the model is built), and ``oom_backoffs`` (> 0: the
    trainer ran out of memory and halved the micro-batch, so the run did not measure ``spec`` as written).

    Raises:
        PaddlefitError: the job's model, data or loss fail (as in ``train``).
    """
    import paddle

    from paddlefit.train.metrics import PeakTracker
    from paddlefit.train.step import scratch_runner

    if flags:
        paddle.set_flags(flags)
    accum = spec.grad_accum_steps
    with scratch_runner(spec, steps + warmup) as (r, step_batches):
        peaks = PeakTracker(r.job.on_gpu)  # from here: the steps (the model is built)
        wait_total, t_start = 0.0, time.perf_counter()
        for step in range(steps + warmup):
            peaks.checkpoint()
            if step == warmup:
                wait_total, t_start = 0.0, time.perf_counter()
            _, wait = r.train_step(step_batches(), step + 1)
            r.optimizer_step()
            wait_total += wait
        if r.job.on_gpu:
            paddle.device.synchronize()
        elapsed = time.perf_counter() - t_start
        peak = peaks.peak()
        backoffs = r.micro.backoffs
    gb = spec.batch_size * accum
    return {
        "samples_per_s": gb * steps / elapsed,
        "step_s": elapsed / steps,
        "data_wait_fraction": wait_total / elapsed,
        "peak_memory_bytes": float(peak),
        "oom_backoffs": float(backoffs),
    }


def candidates(spec: JobSpec, on_gpu: bool, compute_capability: float | None = None) -> list[tuple[str, dict]]:
    """Stage-2 candidates: ``data.num_workers`` values other than the spec's (0..min(cores, 8))."""
    cores = os.cpu_count() or 1
    return [
        (f"num_workers={w}", {"data.num_workers": w}) for w in range(0, min(cores, 8) + 1) if w != spec.data.num_workers
    ]


def _refinements(best: Trial, spec: JobSpec, on_gpu: bool, cc: float | None) -> list[tuple[str, dict]]:
    out: list[tuple[str, dict]] = []
    cur = apply_settings(spec, best.settings)
    if cur.data.num_workers > 0:
        out.append(
            (
                f"{best.label}, use_shared_memory={not cur.data.use_shared_memory}",
                {**best.settings, "data.use_shared_memory": not cur.data.use_shared_memory},
            )
        )
        if cur.data.prefetch_factor != 4:
            out.append((f"{best.label}, prefetch_factor=4", {**best.settings, "data.prefetch_factor": 4}))
        if not cur.data.persistent_workers:
            out.append((f"{best.label}, persistent_workers", {**best.settings, "data.persistent_workers": True}))
        threads = max(1, (os.cpu_count() or 1) - cur.data.num_workers)
        if not on_gpu and cur.cpu_threads is None and threads < (os.cpu_count() or 1):
            out.append((f"{best.label}, cpu_threads={threads}", {**best.settings, "cpu_threads": threads}))
    if factory_takes(cur.model, "sparse") and not cur.model_args.get("sparse"):
        sparse = {**best.settings, "model_args.sparse": True}
        if cur.optimizer.value in ("adam", "adamw"):
            sparse["lazy_mode"] = True
        out.append((f"{best.label}, sparse embedding" + (" + lazy_mode" if "lazy_mode" in sparse else ""), sparse))
    if on_gpu:
        if not cur.precision.is_amp:
            amp = "fp16-o1" if cuda_amp_blocked(cc, "bf16-o1") else "bf16-o1"
            out.append((f"{best.label}, {amp}", {**best.settings, "precision": amp}))
        out.append((f"{best.label}, cudnn exhaustive search", {**best.settings, "FLAGS_cudnn_exhaustive_search": True}))
    return out


def predicted_peak(points: list[tuple[int, int]], batch: int) -> float:
    """Peak bytes at ``batch`` from measured (batch size, peak bytes) points: on the line through the last two,
    or proportional to the batch from a single point (an over-estimate: the model states do not grow).

    Raises:
        ValueError: no points.
    """
    if not points:
        raise ValueError("at least one measured point is needed")
    if len(points) == 1 or points[-1][0] == points[-2][0]:
        b, p = points[-1]
        return p * batch / b
    (b0, p0), (b1, p1) = points[-2], points[-1]
    return p1 + (p1 - p0) / (b1 - b0) * (batch - b1)


def memory_limit_bytes(on_gpu: bool) -> float:
    """Bytes a trial's peak may reach: ``DEFAULT_SAFETY_MARGIN`` (the planner's policy) x the GPU's total memory
    (``paddle.device.cuda.get_device_properties().total_memory``), or x the host's available memory
    (``psutil.virtual_memory().available``) on CPU."""
    from paddlefit.plan.request import DEFAULT_SAFETY_MARGIN

    if on_gpu:
        import paddle

        return DEFAULT_SAFETY_MARGIN * float(paddle.device.cuda.get_device_properties().total_memory)
    import psutil

    return DEFAULT_SAFETY_MARGIN * float(psutil.virtual_memory().available)


def tune(
    spec: JobSpec,
    budget_s: float = options.BUDGET_MINUTES.default * 60,
    steps: int = options.STEPS_TUNE.default,
    warmup: int = options.WARMUP_TUNE.default,
    confirm: int = options.CONFIRM.default,
    progress: Any = None,
    global_batch: str = options.GLOBAL_BATCH_TUNE.default,
    max_batch_factor: int = 8,
    memory_limit: float | None = None,
    hypotheses: list[dict[str, Any]] | None = None,
) -> TuneResult:
    """Search the settings of the module docstring within ``budget_s`` seconds (the baseline and the confirmation
    runs always run); returns every trial and the winner.

    Args:
        global_batch: ``keep`` (batch-size candidates divide ``grad_accum_steps``), ``free`` (the global batch may
            grow) or ``off`` (no batch-size candidates).
        max_batch_factor: largest multiple of the batch size tried (a power of 2).
        memory_limit: bytes a batch-size candidate's predicted peak may reach (default
            :func:`memory_limit_bytes`).
        hypotheses: ``paddlefit profile``'s fixes (its ``fixes``); the first :data:`PROFILE_FIXES_TRIED` with
            ``settings`` run right after the baseline whatever the budget, join the confirmation runs, and are judged
            in ``TuneResult.hypotheses`` (:func:`judge_fix`).

    Raises:
        PaddlefitError: the job fails in the baseline run (a candidate that fails is recorded with no runs).
        PaddlefitError: ``budget_s`` not in (0, 86400], ``steps`` not 3..100000, ``warmup`` not 0..100000,
            ``confirm`` not 1..20, a bad ``global_batch`` (named by their CLI options).
    """
    from paddlefit.errors import PaddlefitError

    if not (math.isfinite(budget_s) and 0 < budget_s <= 86_400):
        raise PaddlefitError(f"`--budget-minutes` must be in (0, 1440] (got {budget_s / 60:g}).")
    options.STEPS_TUNE.check(steps)
    options.WARMUP_TUNE.check(warmup)
    options.CONFIRM.check(confirm)
    if global_batch not in ("keep", "free", "off"):
        raise PaddlefitError(f"`--global-batch` must be keep, free or off (got {global_batch!r}).")
    import paddle

    on_gpu = paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0
    cc = None
    if on_gpu:
        major, minor = paddle.device.cuda.get_device_capability()
        cc = major + minor / 10
    limit = memory_limit if memory_limit is not None else memory_limit_bytes(on_gpu)
    search = _Search(spec, steps, warmup, budget_s, progress or (lambda msg: None))
    search.say("baseline (your settings)")
    search.run(search.baseline)
    tested = [f for f in hypotheses or [] if f.get("settings")][:PROFILE_FIXES_TRIED]
    for i, fix in enumerate(tested, 1):  # profile's fixes first, whatever the budget
        search.say(f"profile fix {i}: {fix['fix']}")
        search.trials.append(Trial(f"profile fix {i}: {fix['fix']}", dict(fix["settings"])))
        search.run(search.trials[-1])
    profiled = search.trials[: len(tested)]
    search.stage(candidates(spec, on_gpu, cc))
    search.stage(_refinements(search.leader(), spec, on_gpu, cc))
    if global_batch != "off":
        search.batch_sweep(global_batch, max_batch_factor, limit)
    baseline = search.baseline
    ranked = sorted([t for t in [baseline, *search.trials] if t.samples_per_s], key=lambda x: -x.median)
    finalists = [baseline, *[t for t in ranked if t is not baseline][:2]]
    finalists += [t for t in profiled if t.samples_per_s and t not in finalists]
    for r in range(confirm):  # interleaved: drift hits every finalist alike
        for trial in finalists:
            search.say(f"confirm {r + 1}/{confirm}: {trial.label}")
            search.run(trial)
    best = max(finalists, key=lambda x: x.median)
    return TuneResult(
        baseline=baseline,
        trials=search.trials,
        best=best,
        ratio=best.median / baseline.median,
        elapsed_s=time.perf_counter() - search.t0,
        steps=steps,
        warmup=warmup,
        memory_limit_bytes=limit,
        hypotheses=[judge_fix(f, t, baseline) for f, t in zip(tested, profiled, strict=True)],
    )


class _Search:
    """The state of one :func:`tune` search: the job, its trials so far, the clock and the budget (seconds)."""

    def __init__(self, spec: JobSpec, steps: int, warmup: int, budget_s: float, say: Any) -> None:
        self.spec, self.steps, self.warmup, self.budget_s, self.say = spec, steps, warmup, budget_s, say
        self.t0 = time.perf_counter()
        self.baseline = Trial("baseline", {})
        self.trials: list[Trial] = []

    def within_budget(self) -> bool:
        return time.perf_counter() - self.t0 <= self.budget_s

    def leader(self) -> Trial:
        return max([self.baseline, *self.trials], key=lambda x: x.median)

    def run(self, trial: Trial) -> None:
        """Measure ``trial`` once more (its settings applied to the job; ``FLAGS_`` ones set for the run and reset
        after); a failure or an OOM back-off is its note, except the baseline's, which raises.

        Raises:
            PaddlefitError: the baseline run fails.
        """
        import paddle

        from paddlefit.errors import PaddlefitError

        flags = {k: v for k, v in trial.settings.items() if k.startswith("FLAGS_")}
        trial_spec = apply_settings(self.spec, trial.settings)
        trial.global_batch = trial_spec.batch_size * trial_spec.grad_accum_steps * self.spec.devices
        try:
            m = measure(trial_spec, self.steps, self.warmup, flags or None)
        except PaddlefitError as exc:
            if trial.label == "baseline":
                raise
            trial.note = f"failed: {str(exc)[:200]}"
            return
        finally:
            if flags:  # back to the defaults for the next trial
                paddle.set_flags({k: False for k in flags})
        if m["oom_backoffs"] and trial.label != "baseline":
            trial.note = "out of memory (the trainer had to halve the micro-batch)"
            trial.samples_per_s.clear()
            return
        trial.samples_per_s.append(m["samples_per_s"])
        trial.step_s.append(m["step_s"])
        trial.data_wait_fraction.append(m["data_wait_fraction"])
        trial.peak_memory_bytes = max(trial.peak_memory_bytes, int(m["peak_memory_bytes"]))

    def stage(self, cands: list[tuple[str, dict]]) -> None:
        """Run each candidate (label, settings) while the budget lasts, skipping settings already tried."""
        for label, settings in cands:
            if not self.within_budget():
                return
            if any(t.settings == settings for t in self.trials):  # a profile fix already tried it
                continue
            self.say(label)
            self.trials.append(Trial(label, settings))
            self.run(self.trials[-1])

    def batch_sweep(self, global_batch: str, max_batch_factor: int, limit: float) -> None:
        """The leader's batch size x2, x4, ... (``keep``: dividing ``grad_accum_steps``), each only while its peak,
        extrapolated through the measured ones (:func:`predicted_peak`), stays within ``limit`` bytes."""
        best = self.leader()
        cur = apply_settings(self.spec, best.settings)
        points = [(cur.batch_size, best.peak_memory_bytes)] if best.peak_memory_bytes > 0 else []
        factor = 2
        while points and factor <= max_batch_factor and self.within_budget():
            accum = cur.grad_accum_steps
            if global_batch == "keep":
                if accum % factor:
                    break
                accum //= factor
            b = cur.batch_size * factor
            label = f"{best.label}, batch_size={b}" + (f", grad_accum_steps={accum}" if global_batch == "keep" else "")
            trial = Trial(label, {**best.settings, "batch_size": b, "grad_accum_steps": accum})
            self.trials.append(trial)
            need = predicted_peak(points, b)
            if need > limit:
                trial.note = f"not run: predicted peak {need / MIB:,.0f} MiB > limit {limit / MIB:,.0f} MiB"
                trial.global_batch = b * accum * self.spec.devices
                break
            self.say(label)
            self.run(trial)
            if not trial.samples_per_s:
                break
            points.append((b, trial.peak_memory_bytes))
            factor *= 2
