"""Peak training memory: model states analytically, activations and workspace by a CPU probe.

Definition (the quantity every number here predicts): the allocator's peak over building the model and
optimizer, running two full training steps (forward with the job's loss, backward, optimizer step,
``clear_grad``) and one evaluation forward (eval mode, no gradients, phase ``eval``), minus what was allocated
before. On CPU the allocator is Paddle's host allocator, read with
``paddle.base.core.host_memory_stat_peak_value("Allocated", 0)``; on GPU it is
``paddle.device.cuda.max_memory_allocated()`` (excludes the CUDA context).

The probe runs real training steps at a few small batch sizes and records the peak of each PHASE
separately (forward, backward, optimizer step), because they grow differently with batch size: the
forward peak grows with the activations it saves, the backward peak mixes them with gradients (a large
embedding gradient can dominate at small batch), the optimizer-step peak mostly does not grow. Each phase is fit
with ``fixed + per_sample * batch`` by least squares; the predicted peak is the maximum over phases.

Around it: the model states in :mod:`paddlefit.estimate.model_states`, how the probe calls the job in
:mod:`paddlefit.probe.job_call`, the measurements and fitted lines in :mod:`paddlefit.estimate.probe_result`.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable
from typing import Any

import psutil

from paddlefit.estimate.probe_result import (
    PhaseFit,
    ProbeResult,
    ProbeTooLargeError,
    StepMeasurement,
    fit_phase,
    fit_step_time,
)
from paddlefit.jobspec.inputs import InputSpec
from paddlefit.jobspec.optimizers import OptimizerSettings, make_optimizer
from paddlefit.jobspec.spec import OptimizerName
from paddlefit.probe.job_call import JobCall

PHASES = ("forward", "backward", "optimizer_step")


def _alloc() -> tuple[Any, Any, Any]:
    import paddle

    core = paddle.base.core
    return (
        lambda: core.host_memory_stat_current_value("Allocated", 0),
        lambda: core.host_memory_stat_peak_value("Allocated", 0),
        lambda: core.host_memory_stat_reset_peak_value("Allocated", 0),
    )


def _build_measured(build: Any, factory: Any, optimizer: Any, alloc: tuple[Any, Any, Any]) -> tuple[Any, Any, int, int]:
    """Build the model (train mode) and its optimizer (``optimizer``: an
    :class:`~paddlefit.jobspec.optimizers.OptimizerSettings` or a name,
    :func:`~paddlefit.jobspec.optimizers.make_optimizer`, as ``train`` builds it) from a collected heap; returns (model,
    optimizer, allocated bytes before the build, peak bytes of the build above that)."""
    current, peak, reset = alloc
    gc.collect()
    base = current()
    reset()
    model = build(factory)
    model.train()
    opt = make_optimizer(optimizer, model.parameters())
    return model, opt, base, peak() - base


def _measured_step(
    model: Any, opt: Any, call: JobCall, batch: Any, alloc: tuple[Any, Any, Any], base: int, counter: Any = None
) -> tuple[dict[str, int], float]:
    """One full training step; the allocator peak (bytes above ``base``) of each phase, and its seconds.

    The forward phase includes the job's loss. ``counter`` (a :class:`~paddlefit.probe.flops.FlopCounter`)
    wraps the forward and the loss when given.
    """
    _, peak, reset = alloc
    reset()
    t0 = time.perf_counter()
    with counter if counter is not None else contextlib.nullcontext():
        loss = call.loss_of(model, batch)
    peaks = {"forward": peak() - base}
    reset()
    loss.backward()
    peaks["backward"] = peak() - base
    del loss
    reset()
    opt.step()
    opt.clear_grad()
    seconds = time.perf_counter() - t0
    peaks["optimizer_step"] = peak() - base
    return peaks, seconds


def _measured_eval(model: Any, call: JobCall, batch: Any, alloc: tuple[Any, Any, Any], base: int) -> int:
    """Peak bytes above ``base`` of one evaluation forward as ``train`` runs it: eval mode, no gradients, the
    model's outputs and the job's loss (when there is a label) computed and dropped."""
    import paddle

    from paddlefit.models.calling import call_model

    _, peak, reset = alloc
    reset()
    model.eval()
    try:
        with paddle.no_grad():
            try:
                out = call_model(model, batch, call.label_arg)
            except Exception as exc:
                if isinstance(exc, MemoryError) or "(ResourceExhausted)" in str(exc):
                    raise
                from paddlefit.errors import PaddlefitError
                from paddlefit.models.build import failing_layer, short_error

                where = failing_layer(exc)
                raise PaddlefitError(
                    f"the evaluation forward (eval mode, no gradients, as `train` evaluates "
                    f"data.eval) raised{' in ' + where if where else ''}: "
                    f"{short_error(exc)}."
                ) from None
            if batch.label is not None and not call.proxy:
                try:
                    loss = call.eval_loss(out, batch)
                    del loss
                except Exception as exc:
                    if call.strict:  # train's evaluation would stop the same way
                        from paddlefit.errors import PaddlefitError

                        raise PaddlefitError(
                            f"in the evaluation pass (eval mode, as `train` evaluates data.eval): {exc}"
                        ) from None
            del out
        return peak() - base
    finally:
        model.train()


def measure_training_steps(
    factory: Any,
    specs: list[InputSpec],
    batch: int,
    optimizer: OptimizerName | OptimizerSettings,
    steps: int = 2,
    call: JobCall | None = None,
    eval_batch: int | None = None,
) -> StepMeasurement:
    """Build the model and optimizer from scratch and run ``steps`` full training steps on CPU (then, with
    ``eval_batch``, one evaluation forward at that batch as phase ``eval``).

    Returns the peak bytes of each phase above the baseline taken before building, the model-state bytes
    held after the last step, and the wall time of the last step (seconds).

    Raises:
        Whatever the model raises (the caller wraps it in a ModelError naming the input specs).
    """
    from paddlefit.models.build import build

    use_all_cores()
    call = call or JobCall(list(specs))
    alloc = _alloc()
    current = alloc[0]
    model, opt, base, built_peak = _build_measured(build, factory, optimizer, alloc)
    phase_peak = dict.fromkeys(PHASES, 0)
    phase_peak["optimizer_step"] = built_peak  # building the model and optimizer counts there
    call.prepare(model)
    data = call.batch(batch)
    step_t = 0.0
    for _ in range(steps):
        peaks, step_t = _measured_step(model, opt, call, data, alloc, base)
        phase_peak = {k: max(v, peaks[k]) for k, v in phase_peak.items()}
    del data
    states = current() - base
    if eval_batch:
        data = call.batch(eval_batch, seed=7)
        phase_peak["eval"] = _measured_eval(model, call, data, alloc, base)
        del data
    del opt, model
    gc.collect()
    return StepMeasurement(batch, {k: int(v) for k, v in phase_peak.items()}, int(states), step_t)


def _time_threads(
    model: Any,
    opt: Any,
    call: JobCall,
    alloc: tuple[Any, Any, Any],
    base: int,
    ms: list[StepMeasurement],
    batch: int,
    threads: int,
    cores: int,
    say: Callable[[str], None],
) -> dict[int, float]:
    """Seconds of one steady-state training step at ``batch`` with 1, ``cores // 2`` and ``cores`` Paddle CPU
    threads: the probe's own ``threads`` took its measured step at that batch (in ``ms``), each other count is
    timed once, and ``threads`` is put back."""
    import paddle

    out = {threads: next(m.step_time_s for m in ms if m.batch_size == batch)}
    todo = _other_thread_counts(threads, cores)
    say(f"CPU probe: timing {', '.join(map(str, todo))} Paddle thread(s) at batch {batch}")
    data = call.batch(batch, seed=99)
    for n in todo:
        paddle.base.core.set_num_threads(n)
        out[n] = _measured_step(model, opt, call, data, alloc, base)[1]
    paddle.base.core.set_num_threads(threads)
    return dict(sorted(out.items()))


def _other_thread_counts(threads: int, cores: int) -> list[int]:
    """The thread counts :func:`_time_threads` times besides the probe's own ``threads``: 1, cores / 2, cores."""
    return sorted({1, max(1, cores // 2), cores} - {threads}) if cores > 1 else []


def _thread_timing_s(step_s: float, threads: int, cores: int) -> float:
    """Estimated seconds of :func:`_time_threads` at the batch whose step took ``step_s`` with ``threads``: each
    other count ``n`` as ``step_s x threads / n`` (perfect scaling; fewer threads take longer)."""
    return sum(step_s * threads / n for n in _other_thread_counts(threads, cores))


def use_all_cores() -> int:
    """Let Paddle's CPU kernels use every core (Paddle sets ``OMP_NUM_THREADS=1`` at import when unset,
    which measured 18.5 vs 33.1 GFLOP/s for a 2048^2 matmul on this 2-core machine). Returns the count."""
    import os

    import paddle

    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    paddle.base.core.set_num_threads(n)
    return n


def probe_memory(
    factory: Any,
    specs: list[InputSpec],
    optimizer: OptimizerName | OptimizerSettings,
    batch_sizes: tuple[int, ...] = (1, 2, 3),
    count: bool = True,
    extend_to: int = 0,
    budget_s: float = 6.0,
    call: JobCall | None = None,
    eval_phase: bool = True,
    cpu_threads: int | None = None,
    time_threads: bool = False,
    probe_requested: bool = True,
    progress: Callable[[str], None] | None = None,
) -> tuple[ProbeResult, Any]:
    """Probe peak memory and step time on this CPU and (optionally) count FLOPs on the first forward.

    The model is called and its loss taken as the job does (``call``, default: the inputs positional and
    ``cross_entropy`` on generated labels). With ``eval_phase`` every steady-state step is followed by one
    evaluation forward at the same batch (eval mode, no gradients, the loss computed), fit as phase ``eval``;
    the caller evaluates that line at the job's eval batch size.

    Paddle's CPU kernels use ``cpu_threads`` threads (default: every core, as ``train`` does on one device). With
    ``time_threads`` the probe also times one steady-state step at its largest mandatory batch size with 1,
    cores / 2 and all cores (``ProbeResult.thread_step_s``; its own count's is the measured step at that batch),
    after the measured steps, so the plan can say which thread count is fastest for this job on this CPU.

    One build: a first full step at ``batch_sizes[0]`` (captures the optimizer-state creation peak of the
    first step), then one steady-state step per batch size (optimizer states and zeroed gradients held, as in
    the second step of :func:`measure_training_steps`). Each phase is fit with ``fixed + per_sample * batch``
    over the steady-state steps (convex piecewise-linear, see :class:`PhaseFit`); the optimizer phase also takes
    the first step's creation peak as a floor.
    Work: ``batch_sizes[0] + sum(batch_sizes)`` sample-steps (7 for the default). With ``extend_to`` > 0,
    more sizes from (6, 12, 24, 48, ...) up to ``extend_to`` are added while the estimated extra time
    (from the last mandatory step's seconds per sample) stays within ``budget_s`` less the estimated thread
    timing (``time_threads``: :func:`_thread_timing_s`), so that all the extra time stays within it: cheap models
    are probed closer to the requested batch, so a sub-peak that takes over at larger batches is seen, and then
    ``extend_to`` itself when it still fits the budget (unless ``probe_requested`` is False: a benchmark that checks the
    extrapolation out of sample, ``bench/memory_accuracy.py``). ``progress(message)`` hears of each step before it
    runs (a large model's probe takes minutes).

    Returns:
        (ProbeResult, FlopsCount or None). The FlopsCount carries the operator trace
        (:class:`~paddlefit.estimate.optrace.OpTrace`) recorded at the first two batch sizes as ``.trace``.

    Raises:
        Whatever the model raises on the inputs (the planner wraps it in a ModelError).
    """
    import paddle

    from paddlefit.estimate.optrace import OpTrace
    from paddlefit.models.build import build
    from paddlefit.probe.flops import FlopCounter, FlopsCount
    from paddlefit.probe.recorder import TraceRecorder

    inputs_b = max(batch_sizes) * sum(s.bytes_per_sample for s in specs)
    _guard_ram(inputs_b, 0.5, max(batch_sizes), reported=2 * inputs_b)  # half the free RAM left to the model
    say = progress or (lambda message: None)
    cores = use_all_cores()
    threads = cpu_threads or cores
    paddle.base.core.set_num_threads(threads)
    call = call or JobCall(list(specs))
    alloc = _alloc()
    current = alloc[0]
    model, opt, base, first_opt_peak = _build_measured(build, factory, optimizer, alloc)
    call.prepare(model)  # its no-grad forward's peak is reset by the first step
    flops = FlopsCount(batch_size=batch_sizes[0]) if count else None
    ms: list[StepMeasurement] = []
    sizes = [batch_sizes[0], *batch_sizes]
    # the operator trace is recorded at the first batch size and at the first larger one (step i == 0 and
    # the first later step with another batch), so every size in it is known as a line in the batch
    traces: dict[int, TraceRecorder] = {}
    i = 0
    while i < len(sizes):
        b = sizes[i]
        say(f"CPU probe: training step {i + 1} of {len(sizes)} (so far), batch {b}")
        data = call.batch(b, seed=i)
        counter = None
        if flops is not None and (i == 0 or (len(traces) == 1 and b != sizes[0])):
            traces[b] = TraceRecorder()
            counter = FlopCounter(model, flops if i == 0 else FlopsCount(batch_size=b), traces[b])
        peaks, seconds = _measured_step(model, opt, call, data, alloc, base, counter)
        i += 1
        if i > 1 and eval_phase:
            peaks["eval"] = _measured_eval(model, call, data, alloc, base)
        del data
        if i == 1:
            first_opt_peak = max(first_opt_peak, peaks["optimizer_step"])
            _guard_ram(
                max(peaks["forward"], peaks["backward"]) * max(batch_sizes) / b, 0.8, max(batch_sizes), current() - base
            )
            continue
        ms.append(StepMeasurement(b, peaks, current() - base, seconds))
        if i == len(batch_sizes) + 1:  # mandatory steps done: extend at their steady pace, within what the thread
            # timing leaves of the budget (the first step is not steady: it creates the optimizer states)
            left_s = budget_s - (_thread_timing_s(seconds, threads, cores) if time_threads else 0.0)
            sizes += _extra_sizes(max(batch_sizes), seconds / b, extend_to, left_s, probe_requested)
    thread_step_s = (
        _time_threads(model, opt, call, alloc, base, ms, max(batch_sizes), threads, cores, say)
        if time_threads and cores > 1
        else {}
    )
    del opt, model
    gc.collect()
    if flops is not None:
        (b1, r1), *rest = traces.items()
        flops.trace = OpTrace(r1.ops(), rest[0][1].ops() if rest else [], b1, rest[0][0] if rest else b1)
    xs = [m.batch_size for m in ms]
    return ProbeResult(
        measurements=ms,
        fits=_phase_fits(ms, first_opt_peak),
        time_fit=fit_step_time(xs, [m.step_time_s for m in ms]),
        threads=threads,
        thread_step_s=thread_step_s,
    ), flops


def _guard_ram(need: float, share: float, batch: int, held: int = 0, reported: float | None = None) -> None:
    """Refuse a probe whose largest batch needs more than ``share`` of this machine's free RAM (plus ``held``, what
    the probe holds already), before the kernel's OOM killer ends the process. Before the first step ``need`` is the
    inputs alone (share 0.5: half for the model); after it, the first step's peak scaled to ``batch`` (0.8).

    Raises:
        ProbeTooLargeError: with ``reported`` (default ``need``) bytes needed and the bytes free.
    """
    free = psutil.virtual_memory().available + held
    if need > share * free:
        raise ProbeTooLargeError(need if reported is None else reported, free, batch)


def _extra_sizes(
    largest: int, per_sample_s: float, extend_to: int, budget_s: float, probe_requested: bool
) -> list[int]:
    """Batch sizes to probe beyond ``largest``: 2x, 4x, ... up to ``extend_to`` while their estimated seconds
    (``per_sample_s`` x batch x 1.3) stay within ``budget_s``, then ``extend_to`` itself when still affordable and
    ``probe_requested`` (no extrapolation left for the plan's own row)."""
    out: list[int] = []
    spent, nxt = 0.0, 2 * largest
    while extend_to and nxt <= extend_to and spent + nxt * per_sample_s * 1.3 <= budget_s:
        spent += nxt * per_sample_s * 1.3
        out.append(nxt)
        nxt *= 2
    if probe_requested and extend_to > max([largest, *out]) and spent + extend_to * per_sample_s * 1.3 <= budget_s:
        out.append(extend_to)
    return out


def _phase_fits(ms: list[StepMeasurement], first_opt_peak: float) -> dict[str, PhaseFit]:
    """Each phase's convex piecewise-linear fit over the steady-state steps ``ms`` (bytes); the optimizer phase
    also takes the first step's state-creation peak ``first_opt_peak`` as a floor."""
    xs = [m.batch_size for m in ms]
    fits = {p: fit_phase(xs, [m.phase_peak_bytes[p] for m in ms], convex=True) for p in ms[0].phase_peak_bytes}
    o = fits["optimizer_step"]
    if o.at(xs[0]) < first_opt_peak:  # the first step's state creation can be the larger peak
        floor = (first_opt_peak - o.per_sample_bytes * xs[0], o.per_sample_bytes)
        fits["optimizer_step"] = PhaseFit(floor[0], floor[1], o.max_rel_residual, (*o.segments, floor))
    return fits
