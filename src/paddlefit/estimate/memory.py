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
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import psutil

from paddlefit.spec import InputSpec, OptimizerName, Precision

PHASES = ("forward", "backward", "optimizer_step")

#: Bytes per parameter of optimizer state, fp32 training (Paddle ``python/paddle/optimizer``: Momentum keeps
#: ``velocity``; Adam/AdamW keep ``moment1``, ``moment2``). Adam/AdamW also keep two shape-[1] fp32
#: ``beta1_pow_acc``/``beta2_pow_acc`` tensors per parameter tensor (8 bytes per tensor, see
#: :func:`model_state_bytes`).
OPTIMIZER_STATE_BYTES_PER_PARAM = {
    OptimizerName.SGD: 0,
    OptimizerName.MOMENTUM: 4,
    OptimizerName.ADAM: 8,
    OptimizerName.ADAMW: 8,
}


@dataclass(frozen=True)
class ParamInfo:
    """Parameter inventory of a model: counts, not bytes."""

    params: int
    trainable_params: int
    trainable_tensors: int
    param_bytes_fp32: int
    #: rows of the largest ``paddle.nn.Embedding`` (0: none): token ids must stay below it
    embedding_rows: int = 0


@dataclass(frozen=True)
class ModelStates:
    """Model-state bytes for one precision and optimizer (ZeRO's "model states", arXiv 1910.02054 §3.1).

    Attributes:
        weights_bytes: parameters as stored for compute (fp32, or fp16/bf16 under AMP O2).
        grads_bytes: gradients of trainable parameters (same dtype as the weights).
        optimizer_bytes: optimizer states, including fp32 master weights under AMP O2.
    """

    weights_bytes: int
    grads_bytes: int
    optimizer_bytes: int

    @property
    def total_bytes(self) -> int:
        """Weights + gradients + optimizer states, bytes."""
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes


def param_info(model: Any) -> ParamInfo:
    """Count parameters of a built (or ``paddle.LazyGuard``-built) model without touching their data."""
    params = trainable = tensors = nbytes = 0
    for p in model.parameters():
        n = math.prod(p.shape)
        params += n
        nbytes += n * 4
        if not p.stop_gradient:
            trainable += n
            tensors += 1
    import paddle

    rows = max((int(m.weight.shape[0]) for m in model.sublayers(include_self=True)
                if isinstance(m, paddle.nn.Embedding)), default=0)  # fmt: skip
    return ParamInfo(params, trainable, tensors, nbytes, rows)


def model_state_bytes(info: ParamInfo, optimizer: OptimizerName, precision: Precision) -> ModelStates:
    """Model states in bytes.

    fp32 and AMP O1 (weights stay fp32): weights 4 B/param, grads 4 B/trainable param, optimizer
    ``OPTIMIZER_STATE_BYTES_PER_PARAM`` B/trainable param (+ 8 B per trainable tensor for Adam's beta-pow
    accumulators). AMP O2 (``paddle.amp.decorate(level='O2')`` with ``multi_precision``): weights and grads
    2 B/param, plus 4 B/param fp32 master weights; with Adam that is 2 + 2 + 12 = 16 B/param, the ZeRO paper's
    figure (Rajbhandari et al., arXiv 1910.02054 §3.1).

    Exact for fp32 on Paddle's CPU allocator (tested against the allocator in ``tests/test_memory.py``).
    """
    per_state = OPTIMIZER_STATE_BYTES_PER_PARAM[optimizer]
    # + one fp32 [1] learning-rate tensor per optimizer (``Optimizer._create_global_learning_rate``).
    extra = 4 + (8 * info.trainable_tensors if optimizer in (OptimizerName.ADAM, OptimizerName.ADAMW) else 0)
    if precision.level == "O2":
        return ModelStates(
            weights_bytes=2 * info.params,
            grads_bytes=2 * info.trainable_params,
            optimizer_bytes=(per_state + 4) * info.trainable_params + extra,
        )
    return ModelStates(
        weights_bytes=4 * info.params,
        grads_bytes=4 * info.trainable_params,
        optimizer_bytes=per_state * info.trainable_params + extra,
    )


@dataclass(frozen=True)
class PhaseFit:
    """Peak of one phase as a function of batch: the maximum of straight lines.

    A phase's peak is the largest of several sub-peaks (moments inside the phase), each linear in the batch,
    so it is convex and piecewise linear: ``peak(b) = max_i(fixed_i + per_sample_i * b)``. The lines are
    the segments between consecutive probe points; the last one (steepest) governs extrapolation, and its
    intercept/slope are ``fixed_bytes``/``per_sample_bytes``. ``max_rel_residual`` is the largest
    |measured - least-squares line| / measured (0 = exactly linear over the probe points).
    """

    fixed_bytes: float
    per_sample_bytes: float
    max_rel_residual: float
    segments: tuple[tuple[float, float], ...] = ()

    def at(self, batch: int) -> float:
        """Predicted peak bytes of this phase at ``batch`` samples."""
        lines = self.segments or ((self.fixed_bytes, self.per_sample_bytes),)
        return max(f + s * batch for f, s in lines)


@dataclass
class StepMeasurement:
    """Measured peaks (bytes above the pre-build baseline) of each phase and the time of the second step."""

    batch_size: int
    phase_peak_bytes: dict[str, int]
    states_bytes_after_step: int
    step_time_s: float

    @property
    def peak_bytes(self) -> int:
        """Largest phase peak, bytes above the pre-build baseline."""
        return max(self.phase_peak_bytes.values())


@dataclass
class ProbeResult:
    """The CPU probe: measurements at small batch sizes and the per-phase linear fits.

    ``time_fit`` gives step seconds = fixed + per_sample * batch, fit on the measured second-step times.
    """

    measurements: list[StepMeasurement]
    fits: dict[str, PhaseFit]
    time_fit: PhaseFit
    #: Paddle CPU threads the measured steps ran with
    threads: int = 1
    #: seconds of one steady-state step at the largest mandatory probe batch per thread count (``time_threads``)
    thread_step_s: dict[int, float] = field(default_factory=dict)

    def phase_bytes(self, batch: int, eval_batch: int | None = None) -> dict[str, float]:
        """Predicted peak bytes of each phase: training phases at ``batch``, ``eval`` at ``eval_batch`` (default
        ``batch``)."""
        return {p: f.at(eval_batch or batch if p == "eval" else batch) for p, f in self.fits.items()}

    def peak_bytes(self, batch: int, eval_batch: int | None = None) -> float:
        """Predicted peak allocated bytes at ``batch`` (max over phases; ``eval`` at ``eval_batch``)."""
        return max(self.phase_bytes(batch, eval_batch).values())

    def dominant_phase(self, batch: int, eval_batch: int | None = None) -> str:
        """Name of the phase with the largest predicted peak at ``batch`` (``eval`` at ``eval_batch``)."""
        by = self.phase_bytes(batch, eval_batch)
        return max(by, key=by.__getitem__)

    def step_time_s(self, batch: int) -> float:
        """Predicted CPU seconds per training step at ``batch`` (linear fit of measured steps)."""
        return max(self.time_fit.at(batch), 0.0)


class ProbeTooLargeError(MemoryError):
    """The CPU probe would need more RAM than this machine has free.

    Attributes:
        need_bytes: upper bound of the probe's peak at its largest batch (batch-1 peak x batch), bytes.
        free_bytes: RAM available to the probe, bytes.
        batch: the probe's largest mandatory batch size.
    """

    def __init__(self, need_bytes: float, free_bytes: float, batch: int) -> None:
        super().__init__(f"probe needs ~{need_bytes / 1024**3:.1f} GiB at batch {batch}, "
                         f"{free_bytes / 1024**3:.1f} GiB free")  # fmt: skip
        self.need_bytes, self.free_bytes, self.batch = need_bytes, free_bytes, batch


def _fit(xs: list[int], ys: list[float], convex: bool = False) -> PhaseFit:
    """Least-squares line through (xs, ys); with ``convex``, also the max of consecutive-pair segments."""
    if len(set(xs)) == 1:
        return PhaseFit(float(ys[0]), 0.0, 0.0)
    slope, intercept = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    res = max(abs(y - (intercept + slope * x)) / max(abs(y), 1.0) for x, y in zip(xs, ys, strict=True))
    if not convex:
        return PhaseFit(float(intercept), float(slope), float(res))
    pts = sorted(zip(xs, ys, strict=True))
    segs = []
    for (x0, y0), (x1, y1) in itertools.pairwise(pts):
        sl = (y1 - y0) / (x1 - x0)
        segs.append((y0 - sl * x0, sl))
    last = segs[-1]
    return PhaseFit(float(last[0]), float(last[1]), float(res), tuple(segs))


def make_inputs(specs: tuple[InputSpec, ...] | list[InputSpec], batch: int, seed: int = 0) -> list[Any]:
    """Random Paddle tensors of shape (batch, *spec.shape); int ids in ``[0, spec.high or 2)`` (positional and named
    specs alike, in order; :func:`paddlefit.models.calling.make_batch` keeps the names)."""
    from paddlefit.models.calling import make_batch

    unnamed = [s.model_copy(update={"name": None}) for s in specs]
    return make_batch(unnamed, None, batch, seed).args


def make_optimizer(name: OptimizerName, parameters: Any) -> Any:
    """The Paddle optimizer for ``name`` (learning rate 1e-3; Momentum 0.9; AdamW weight decay 0.01)."""
    import paddle

    if name is OptimizerName.SGD:
        return paddle.optimizer.SGD(learning_rate=1e-3, parameters=parameters)
    if name is OptimizerName.MOMENTUM:
        return paddle.optimizer.Momentum(learning_rate=1e-3, momentum=0.9, parameters=parameters)
    if name is OptimizerName.ADAM:
        return paddle.optimizer.Adam(learning_rate=1e-3, parameters=parameters)
    return paddle.optimizer.AdamW(learning_rate=1e-3, weight_decay=0.01, parameters=parameters)


def reduce_to_loss(out: Any) -> Any:
    """A proxy loss for a model with no job loss: the output reduced by mean (sum over a tuple/list or dict of
    outputs); a 0-d output is taken as the model's own loss. Used only when the job's loss cannot be applied to a
    model planned without a job spec (:class:`JobCall` ``strict`` False), and said in the plan's notes."""
    import paddle

    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, list | tuple):
        parts = [reduce_to_loss(o) for o in out if isinstance(o, paddle.Tensor) and o.dtype.name != "BOOL"]
        return paddle.add_n(parts)
    if not paddle.is_floating_point(out):
        out = out.astype("float32")
    return out if out.ndim == 0 else out.mean()


@dataclass
class JobCall:
    """How the probe calls the model and takes the loss: the job's inputs, label and loss
    (:mod:`paddlefit.models.calling`).

    Attributes:
        specs: per-sample input specs (named ones are keyword arguments).
        label: the label's per-sample spec; None = generated from the loss and a first forward's output
            (:func:`~paddlefit.models.calling.infer_label_spec`).
        label_arg: the forward keyword that receives the label.
        loss: the job's loss name (None = ``cross_entropy``).
        strict: the loss is the job's (a spec or ``--loss``): an output it cannot take is an error. False (a
            model planned with no job): the probe falls back to :func:`reduce_to_loss` and says so in ``note``.
        sample: the first sample of the job's ``data.train``: when given, probe batches are copies of it collated
            as the DataLoader does (:func:`~paddlefit.models.calling.batch_of_sample`), so inputs and labels of any
            structure (dicts, nested lists) are the job's own.
    """

    specs: list[InputSpec]
    label: InputSpec | None = None
    label_arg: str | None = None
    loss: str | None = None
    strict: bool = False
    note: str | None = None
    sample: Any = None

    def __post_init__(self) -> None:
        from paddlefit.models.calling import JobLoss

        self.job_loss = JobLoss(self.loss, self.label_arg)
        self.eval_loss = JobLoss(self.loss, self.label_arg)  # eval outputs may differ (no auxiliary heads)
        self.proxy = False

    def prepare(self, model: Any) -> None:
        """Infer the label spec from one no-grad forward at batch 1 when none is given (no peak is kept: the
        caller resets the allocator peak afterwards).

        Raises:
            PaddlefitError: (strict) the loss cannot be given a label; whatever the model raises.
        """
        import paddle

        from paddlefit.models.calling import call_model, check_label_spec, infer_label_spec, make_batch, model_loss

        if self.label is not None or self.sample is not None:
            return
        if self.strict:
            check_label_spec(None, self.loss, self.label_arg)
        with paddle.no_grad():
            out = call_model(model, make_batch(self.specs, None, 1), None)
        if model_loss(out, False) is not None:
            return
        self.label = infer_label_spec(out, self.loss)
        if self.label is None:
            from paddlefit.models.calling import describe_output

            if self.strict:
                from paddlefit.errors import PaddlefitError

                raise PaddlefitError(f"the model returns {describe_output(out)}; paddlefit cannot generate labels "
                                     f"for `loss: {self.loss or 'cross_entropy'}` from it. Give the label's "
                                     "per-sample spec (`label: SPEC` / `--label SPEC`, e.g. `int64[]:10`).")
            self._use_proxy(out)

    def _use_proxy(self, out: Any) -> None:
        """From now on backpropagate :func:`reduce_to_loss` of the output, and say so in ``note``."""
        from paddlefit.models.calling import describe_output

        self.proxy = True
        self.note = (f"no job loss applies to the output ({describe_output(out)}): the probe backpropagated "
                     "mean(output) as a proxy; give the job's loss and label (`plan --config`)")

    def batch(self, batch: int, seed: int = 0) -> Any:
        """A :class:`~paddlefit.models.calling.Batch` of ``batch`` samples: copies of ``sample`` when given, else
        synthetic from the specs."""
        from paddlefit.models.calling import batch_of_sample, make_batch

        if self.sample is not None:
            return batch_of_sample(self.sample, batch, self.specs, self.label_arg)
        return make_batch(self.specs, self.label, batch, seed)

    def loss_of(self, model: Any, batch: Any) -> Any:
        """Forward and loss of one batch (the scalar to backpropagate)."""
        from paddlefit.errors import PaddlefitError
        from paddlefit.models.calling import call_model

        out = call_model(model, batch, self.label_arg)
        if self.proxy:
            return reduce_to_loss(out)
        try:
            return self.job_loss(out, batch)
        except PaddlefitError:
            if self.strict:
                raise
            self._use_proxy(out)
            return reduce_to_loss(out)


def _alloc() -> tuple[Any, Any, Any]:
    import paddle

    core = paddle.base.core
    return (
        lambda: core.host_memory_stat_current_value("Allocated", 0),
        lambda: core.host_memory_stat_peak_value("Allocated", 0),
        lambda: core.host_memory_stat_reset_peak_value("Allocated", 0),
    )


def _measured_step(model: Any, opt: Any, call: JobCall, batch: Any, alloc: tuple[Any, Any, Any], base: int,
                   counter: Any = None) -> tuple[dict[str, int], float]:  # fmt: skip
    """One full training step; the allocator peak (bytes above ``base``) of each phase, and its seconds.

    The forward phase includes the job's loss. ``counter`` (a :class:`~paddlefit.estimate.flops.FlopCounter`)
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
                from paddlefit.models.build import _short, failing_layer

                where = failing_layer(exc)
                raise PaddlefitError(f"the evaluation forward (eval mode, no gradients, as `train` evaluates "
                                     f"data.eval) raised{' in ' + where if where else ''}: {_short(exc)}.") from None
            if batch.label is not None and not call.proxy:
                try:
                    loss = call.eval_loss(out, batch)
                    del loss
                except Exception as exc:
                    if call.strict:  # train's evaluation would stop the same way
                        from paddlefit.errors import PaddlefitError

                        raise PaddlefitError(f"in the evaluation pass (eval mode, as `train` evaluates data.eval): "
                                             f"{exc}") from None
            del out
        return peak() - base
    finally:
        model.train()


def measure_training_steps(
    factory: Any, specs: list[InputSpec], batch: int, optimizer: OptimizerName, steps: int = 2,
    call: JobCall | None = None, eval_batch: int | None = None,
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
    current, peak, reset = alloc
    gc.collect()
    base = current()
    reset()
    model = build(factory)
    model.train()
    opt = make_optimizer(optimizer, model.parameters())
    phase_peak = dict.fromkeys(PHASES, 0)
    phase_peak["optimizer_step"] = peak() - base  # building the model and optimizer counts there
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
    optimizer: OptimizerName,
    batch_sizes: tuple[int, ...] = (1, 2, 3),
    count: bool = True,
    extend_to: int = 0,
    budget_s: float = 6.0,
    call: JobCall | None = None,
    eval_phase: bool = True,
    cpu_threads: int | None = None,
    time_threads: bool = False,
) -> tuple[ProbeResult, Any]:
    """Probe peak memory and step time on this CPU and (optionally) count FLOPs on the first forward.

    The model is called and its loss taken as the job does (``call``, default: the inputs positional and
    ``cross_entropy`` on generated labels). With ``eval_phase`` every steady-state step is followed by one
    evaluation forward at the same batch (eval mode, no gradients, the loss computed), fit as phase ``eval``;
    the caller evaluates that line at the job's eval batch size.

    Paddle's CPU kernels use ``cpu_threads`` threads (default: every core, as ``train`` does on one device). With
    ``time_threads`` the probe also times two steady-state steps at its largest mandatory batch size with 1,
    cores / 2 and all cores (``ProbeResult.thread_step_s``, the best of two each) before the measured steps, so
    the plan can say which thread count is fastest for this job on this CPU.

    One build: a first full step at ``batch_sizes[0]`` (captures the optimizer-state creation peak of the
    first step), then one steady-state step per batch size (optimizer states and zeroed gradients held, as in
    the second step of :func:`measure_training_steps`). Each phase is fit with ``fixed + per_sample * batch``
    over the steady-state steps (convex piecewise-linear, see :class:`PhaseFit`); the optimizer phase also takes
    the first step's creation peak as a floor.
    Work: ``batch_sizes[0] + sum(batch_sizes)`` sample-steps (7 for the default). With ``extend_to`` > 0,
    more sizes from (6, 12, 24, 48, ...) up to ``extend_to`` are added while the estimated extra time
    (from the first step's seconds per sample) stays within ``budget_s``: cheap models are probed closer
    to the requested batch, so a sub-peak that takes over at larger batches is seen, and then ``extend_to``
    itself when it still fits the budget.

    Returns:
        (ProbeResult, FlopsCount or None). The FlopsCount carries the operator trace
        (:class:`~paddlefit.estimate.optrace.OpTrace`) recorded at the first two batch sizes as ``.trace``.

    Raises:
        Whatever the model raises on the inputs (the planner wraps it in a ModelError).
    """
    import paddle

    from paddlefit.estimate.flops import FlopCounter, FlopsCount
    from paddlefit.estimate.optrace import OpTrace, TraceRecorder
    from paddlefit.models.build import build

    cores = use_all_cores()
    threads = cpu_threads or cores
    paddle.base.core.set_num_threads(threads)
    call = call or JobCall(list(specs))
    alloc = _alloc()
    current, peak, reset = alloc
    gc.collect()
    base = current()
    reset()
    model = build(factory)
    model.train()
    opt = make_optimizer(optimizer, model.parameters())
    first_opt_peak = peak() - base
    call.prepare(model)  # its no-grad forward's peak is reset by the first step
    thread_step_s: dict[int, float] = {}
    flops = FlopsCount(batch_size=batch_sizes[0]) if count else None
    ms: list[StepMeasurement] = []
    sizes = [batch_sizes[0], *batch_sizes]
    # the operator trace is recorded at the first batch size and at the first larger one (step i == 0 and
    # the first later step with another batch), so every size in it is known as a line in the batch
    traces: dict[int, TraceRecorder] = {}
    i = 0
    while i < len(sizes):
        b = sizes[i]
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
            # guard: the probe's largest batch must fit this machine's free RAM (bounded by b1 peak x batch)
            need = max(peaks["forward"], peaks["backward"]) * max(batch_sizes) / b
            free = psutil.virtual_memory().available + (current() - base)
            if need > 0.8 * free:
                raise ProbeTooLargeError(need, free, max(batch_sizes))
            if time_threads and cores > 1:
                data = call.batch(max(batch_sizes), seed=99)
                for n in sorted({1, max(1, cores // 2), cores}):
                    paddle.base.core.set_num_threads(n)
                    thread_step_s[n] = min(_measured_step(model, opt, call, data, alloc, base)[1] for _ in range(2))
                paddle.base.core.set_num_threads(threads)
                del data
            per_sample_s = seconds / b
            spent, nxt = 0.0, 2 * max(batch_sizes)
            while extend_to and nxt <= extend_to and spent + nxt * per_sample_s * 1.3 <= budget_s:
                spent += nxt * per_sample_s * 1.3
                sizes.append(nxt)
                nxt *= 2
            # and the requested batch itself when it is affordable: no extrapolation left for the plan's own row
            if extend_to > max(sizes) and spent + extend_to * per_sample_s * 1.3 <= budget_s:
                sizes.append(extend_to)
            continue
        ms.append(StepMeasurement(b, peaks, current() - base, seconds))
    del opt, model
    gc.collect()
    xs = [m.batch_size for m in ms]
    fits = {p: _fit(xs, [m.phase_peak_bytes[p] for m in ms], convex=True) for p in ms[0].phase_peak_bytes}
    o = fits["optimizer_step"]
    if o.at(xs[0]) < first_opt_peak:  # the first step's state creation can be the larger peak
        floor = (first_opt_peak - o.per_sample_bytes * xs[0], o.per_sample_bytes)
        fits["optimizer_step"] = PhaseFit(floor[0], floor[1], o.max_rel_residual, (*o.segments, floor))
    time_fit = _fit(xs, [m.step_time_s for m in ms])
    if flops is not None:
        (b1, r1), *rest = traces.items()
        flops.trace = OpTrace(r1.ops(), rest[0][1].ops() if rest else [], b1, rest[0][0] if rest else b1)
    return ProbeResult(measurements=ms, fits=fits, time_fit=time_fit, threads=threads,
                       thread_step_s=thread_step_s), flops


def analytic_transformer_activation_bytes(cfg: Any, seq_len: int) -> float:
    """Activation bytes per sample of a zoo transformer in fp32 training, no recompute.

    Per layer Korthikanti et al. 2022 (arXiv 2205.05198, table 2, no parallelism) give s·h·(34 + 5·a·s/h)
    bytes per sample with 2-byte values and 1-byte dropout masks; of it 2·s·h + a·s² are masks. With 4-byte
    values: s·h·66 + 9·a·s² bytes per layer. Plus the fp32 logits s·V·4 and the embedding output s·h·4·2.
    Accuracy vs the CPU probe on small configs: see ``tests/test_memory.py``.
    """
    s, h, a = seq_len, cfg.hidden_size, cfg.num_heads
    per_layer = s * h * 66 + 9 * a * s * s
    return cfg.num_layers * per_layer + 4 * s * cfg.vocab_size + 8 * s * h


def analytic_transformer_flops(cfg: Any, seq_len: int) -> float:
    """Forward FLOPs per sample of a transformer: 24·s·l·h²·(1 + s/(6h)) + 2·s·h·V.

    This is the forward third of Korthikanti et al. 2022 eq. 7 (training = 3 x forward without recompute).
    """
    s, h, layers, v = seq_len, cfg.hidden_size, cfg.num_layers, cfg.vocab_size
    return 24 * s * layers * h * h * (1 + s / (6 * h)) + 2 * s * h * v
