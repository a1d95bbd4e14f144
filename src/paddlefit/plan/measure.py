"""Measure the model of a plan, in a child process under a time and a memory limit (:mod:`paddlefit.probe.task`):
inventory under ``paddle.LazyGuard``, then the CPU probe (real training steps at small batches, FLOPs and the
operator trace) or, for models too large to probe, the analytic transformer model in this process.

:func:`measure_model` returns the per-phase memory lines (fixed bytes + bytes per sample) the device rows
(:mod:`paddlefit.plan.rows`) rebase on each precision and GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil

from paddlefit.errors import InputSpecError, ModelError
from paddlefit.estimate.analytic import analytic_transformer_activation_bytes, analytic_transformer_flops
from paddlefit.estimate.model_states import ModelStates, ParamInfo, model_state_bytes
from paddlefit.estimate.optrace import OpTrace
from paddlefit.estimate.probe_result import ProbeResult
from paddlefit.estimate.transformer_ops import transformer_trace
from paddlefit.jobspec.inputs import InputSpec
from paddlefit.jobspec.spec import Precision
from paddlefit.models.build import LazyFallback, param_inventory
from paddlefit.models.zoo import ModelRef, resolve_model
from paddlefit.plan.request import PlanRequest
from paddlefit.probe.task import (
    BUILDING,
    ProbeOutcome,
    ProbeTask,
    out_of_memory,
    probe_child,
    probe_in_child,
    run_probe_task,
)
from paddlefit.process.isolation import ChildLimits
from paddlefit.units import GIB, MIB


@dataclass(frozen=True)
class ModelMeasure:
    """What the probe (or the analytic model) found, for the device rows and the plan document: a frozen value.
    Bytes, FLOPs, seconds (units in the names).

    Attributes:
        ref, specs, info: the model, its inputs and its parameter inventory.
        states32: fp32 model states (weights, grads, optimizer) of the request's optimizer.
        method: ``cpu-probe`` or ``analytic-transformer``.
        loss_doc, label_doc: the loss and label the probe trained with (for the plan document).
        fwd_flops_per_sample, train_flops_per_sample: FLOPs per sample of the forward and of a training step.
        act_bytes_per_sample: bytes the forward saves for the backward per sample.
        fwd_ops: operators of one forward (0 on the analytic path); trace: the operator trace.
        phase_fit_bytes: phase -> (fixed bytes, bytes per sample) of the fits; phase_lines_bytes: the segments
            every peak is the max over (with the DataLoader's queued batches), as (phase, (fixed, per sample)).
        dominant_phase: the phase of the peak; has_conv: the model has convolutions (cuDNN workspace on GPUs).
        cpu_time_line_s: (fixed s, s per sample) of a CPU step, None without a probe; max_rel_residual: the fits'
            worst relative residual; probe_batch_sizes: the probe's batch sizes; probe: the probe result (None on
            the analytic path).
        eval_batch_size: the eval batch; total_ram_bytes: this machine's RAM; notes: notes of the model section.
        stand_ins: Paddle's GPU-only fused ops the probe ran a CPU reference for
            (:func:`~paddlefit.probe.fused_ref.cpu_reference_kernels`): the model cannot train on this CPU.
        lazy_build_failure: Paddle's error when paddle.LazyGuard could not build the model (``--json`` only).
    """

    ref: ModelRef
    specs: list[InputSpec]
    info: ParamInfo
    states32: ModelStates
    method: str
    loss_doc: str
    label_doc: str | None
    fwd_flops_per_sample: float
    train_flops_per_sample: float
    act_bytes_per_sample: float
    fwd_ops: int
    trace: OpTrace
    phase_fit_bytes: dict[str, tuple[float, float]]
    phase_lines_bytes: tuple[tuple[str, tuple[float, float]], ...]
    dominant_phase: str
    has_conv: bool
    cpu_time_line_s: tuple[float, float] | None
    max_rel_residual: float | None
    probe_batch_sizes: tuple[int, ...]
    probe: ProbeResult | None
    eval_batch_size: int
    total_ram_bytes: int
    notes: tuple[str, ...] = ()
    stand_ins: tuple[str, ...] = ()
    lazy_build_failure: str | None = None


def cpu_time_line(probe: Any) -> tuple[tuple[float, float], str | None]:
    """(fixed s, s per sample) of a CPU step from the probe (a
    :class:`~paddlefit.estimate.probe_result.ProbeResult`), and the note said when its fit is not used: a step
    cannot take less time for more samples, so a fit whose time falls with the batch (the probe's few steps timed
    on a loaded machine; a plan's CPU row was once put at 64,000,000,000 samples/s) is replaced by the largest
    probed batch's time scaled in proportion to the batch (an upper bound: it adds the fixed cost per sample)."""
    fit = (probe.time_fit.fixed_s, probe.time_fit.per_sample_s)
    timed = [m for m in probe.measurements if m.step_time_s > 0]
    if fit[1] >= 0 or not timed:
        return fit, None
    last = max(timed, key=lambda m: m.batch_size)
    return (0.0, last.step_time_s / last.batch_size), (
        f"the probe's CPU step times fell with the batch (timed on a loaded machine): the CPU row scales batch "
        f"{last.batch_size}'s {last.step_time_s * 1e3:,.0f} ms in proportion to the batch (an upper bound)"
    )


def job_input_specs(ref: ModelRef, inputs: list[InputSpec] | None) -> list[InputSpec]:
    """The inputs the job feeds ``ref`` (``inputs``, else its defaults), int inputs of a transformer drawn below
    its vocabulary size.

    Raises:
        InputSpecError: no inputs given for a model without defaults.
    """
    specs = list(inputs) if inputs else list(ref.default_inputs)
    if not specs:
        raise InputSpecError(
            f"Model {ref.name!r} has no default input; give one per model input, e.g. "
            "`--input float32[3,224,224]` or `--input int64[128]`."
        )
    if ref.transformer is not None:
        vocab = ref.transformer.vocab_size
        specs = [s.model_copy(update={"high": vocab}) if s.dtype.startswith("int") and not s.high else s for s in specs]
    return specs


def check_id_ranges(ref: ModelRef, specs: list[InputSpec], info: ParamInfo) -> None:
    """Refuse token-id inputs whose range exceeds every embedding table of the model: Paddle's CPU embedding
    kernel reads out of bounds on such ids (PaddleNLP's ERNIE with ids >= vocab_size crashed the process with a
    segmentation fault here, no Python error), so the probe must not run them.

    Raises:
        InputSpecError: an integer input named like ids (unnamed, or a name containing ``id``) has ``high`` above
            the largest ``nn.Embedding``'s rows.
    """
    if not info.embedding_rows:
        return
    for s in specs:
        if (
            s.dtype.startswith("int")
            and s.high
            and s.high > info.embedding_rows
            and (s.name is None or "id" in s.name.lower())
        ):
            raise InputSpecError(
                f"`--input {s}` draws ids up to {s.high - 1}, but the largest embedding of {ref.name!r} has "
                f"{info.embedding_rows} rows (ids 0..{info.embedding_rows - 1}); Paddle's CPU kernel would read past "
                f"it. Use `:{info.embedding_rows}` or less (`{s.dtype}[{','.join(map(str, s.shape))}]:"
                f"{info.embedding_rows}`), or raise the model's vocabulary size."
            )


def dataset_sample_bytes(sample: Any) -> int:
    """Bytes of one dataset sample's arrays (nested lists, tuples and dicts)."""
    import numpy as np

    if isinstance(sample, dict):
        return sum(dataset_sample_bytes(v) for v in sample.values())
    if isinstance(sample, list | tuple):
        return sum(dataset_sample_bytes(v) for v in sample)
    try:
        return int(np.asarray(sample).nbytes)
    except (TypeError, ValueError):
        return 0


def measure_model(req: PlanRequest, say: Callable[[str], None]) -> ModelMeasure:
    """Measure ``req``'s model in the probe's child process (:func:`inventory_and_probe`): its inventory under
    ``paddle.LazyGuard``, then the CPU probe when its fp32 Adam states (16 B/param) fit the probe limit; a model
    over it comes back unprobed and takes the analytic transformer model. This process never builds the model: a
    zoo model's plan does not import Paddle here, and a model whose ``__init__`` hangs or crashes takes only the
    child with it (its time and memory limits, :class:`~paddlefit.process.isolation.ChildLimits`, cover the build).

    Raises:
        UnknownNameError, ModelError: the model cannot be found, built or trained with its inputs, has no
            trainable parameters, or is too large to probe without an analytic model.
        InputSpecError: inputs the model cannot take (ids past its embeddings, a label_arg that is an input).
    """
    # the child imports a user's module; here only when no --input is given, so that an import error is said
    # before "no default input" (one fix at a time, the first one first)
    ref = resolve_model(req.model, req.model_args, import_now=not req.inputs)
    specs = job_input_specs(ref, req.inputs)
    if req.label_arg and any(s.name == req.label_arg for s in specs):
        raise InputSpecError(
            f"`label_arg: {req.label_arg}` would pass the label as `{req.label_arg}=`, which is also "
            f"an input (`{req.label_arg}=...`); use another name for one of them."
        )
    total_ram = psutil.virtual_memory().total
    eval_b = req.eval_batch_size or req.batch_size
    task = ProbeTask(
        name=ref.name,
        model=req.model,
        model_args=dict(req.model_args),
        specs=list(specs),
        optimizer=req.optimizer_settings(),
        batch_sizes=req.probe_batch_sizes,
        extend_to=max(req.batch_size, eval_b),
        budget_s=req.probe_budget_s,
        cpu_threads=req.cpu_threads,
        time_threads=req.time_threads,
        eval_phase=req.eval_phase,
        probe_requested=req.probe_requested,
        label=req.label,
        label_arg=req.label_arg,
        loss=req.loss,
        strict=req.loss_strict,
        sample=req.sample,
    )
    job = ChildJob(
        task=task,
        analytic=ref.transformer is not None,
        limit_bytes=req.max_probe_bytes if req.max_probe_bytes is not None else min(total_ram // 4, 8 * GIB),
        memory_bytes=req.probe_memory_bytes or int(0.9 * psutil.virtual_memory().available),
        memory_given=req.probe_memory_bytes is not None,
    )
    with probe_child("paddlefit.plan.measure:inventory_and_probe", ("paddlefit.plan.measure",)) as child:
        answer = probe_in_child(task, ChildLimits(req.probe_timeout_s, job.memory_bytes), say, child, job)
    info, fallback = answer.info, answer.fallback
    base = _Base(
        ref,
        specs,
        info,
        model_state_bytes(info, req.optimizer, Precision.FP32),
        eval_b,
        total_ram,
        (fallback.note,) if fallback else (),
        fallback.detail if fallback else None,
    )
    if answer.outcome is None:
        return _analytic(base, say)
    return _probed(req, base, answer.outcome, say)


@dataclass(frozen=True)
class ChildJob:
    """What :func:`measure_model` sends the probe's child: the probe's ``task`` (its optimizer sets the fp32 states
    checked against the memory), whether an ``analytic`` model exists for a model too large to probe, the probe
    limit on fp32 Adam states (``limit_bytes``: ``--max-probe-gib``, else a quarter of the RAM, at most 8 GiB) and
    the bytes the child may allocate (``memory_bytes``; ``memory_given``: set by ``--probe-memory-gib``, else 90% of
    the RAM free)."""

    task: ProbeTask
    analytic: bool
    limit_bytes: int
    memory_bytes: int
    memory_given: bool


@dataclass(frozen=True)
class ChildAnswer:
    """The child's answer: the inventory, why ``paddle.LazyGuard`` could not build the model (None when it could)
    and the probe's outcome (None: too large to probe, the analytic path)."""

    info: ParamInfo
    fallback: LazyFallback | None
    outcome: ProbeOutcome | None


def inventory_and_probe(job: ChildJob, say: Callable[[str], None]) -> ChildAnswer:
    """The probe child's side of :func:`measure_model`: build the model under ``paddle.LazyGuard`` for its
    inventory, check it, then probe it (:func:`~paddlefit.probe.task.run_probe_task`) when it fits the probe limit.

    Raises:
        ModelError: no trainable parameters; too large to probe and no analytic model; its fp32 states and inputs
            alone exceed ``job.memory_bytes``; and what :func:`~paddlefit.probe.task.run_probe_task` raises.
        InputSpecError: ids past its embeddings (:func:`check_id_ranges`).
    """
    task = job.task
    say(f"{BUILDING}{task.name} under paddle.LazyGuard")  # first: importing the user's module is part of the build
    ref = resolve_model(task.model, task.model_args)
    try:
        info, fallback = param_inventory(ref)
    except ModelError as exc:
        if isinstance(exc.__context__, MemoryError):  # past the child's memory limit: name it, and the flag
            raise ModelError(out_of_memory(task, exc.__context__)) from None
        raise
    if info.trainable_params == 0:
        raise ModelError(
            f"Model {ref.name!r} has no trainable parameters ({info.params:,} frozen); nothing to train. "
            "Unfreeze some (`stop_gradient = False`) or plan the model you will fine-tune."
        )
    check_id_ranges(ref, task.specs, info)
    if 16 * info.params > job.limit_bytes:
        if job.analytic:
            return ChildAnswer(info, fallback, None)
        raise ModelError(
            f"Model {ref.name!r} has {info.params:,} parameters: its fp32 Adam states "
            f"({16 * info.params / GIB:.1f} GiB) exceed the probe limit ({job.limit_bytes / GIB:.1f} GiB) and "
            "paddlefit has no analytic activation model for it. Plan a smaller variant, or raise the limit "
            "with `--max-probe-gib`."
        )
    states32 = model_state_bytes(info, task.optimizer.name, Precision.FP32)
    need = states32.total_bytes + max(task.batch_sizes) * sum(s.bytes_per_sample for s in task.specs)
    if need > job.memory_bytes:  # before the probe runs: its fp32 model states and inputs alone would not fit
        raise ModelError(
            f"Model {ref.name!r} with inputs {' '.join(str(s) for s in task.specs)} is too large to probe on this "
            f"machine: the CPU probe needs more than {need / GIB:.2f} GiB at batch {max(task.batch_sizes)} "
            f"(its fp32 model states and inputs alone) and may allocate {job.memory_bytes / GIB:.2f} GiB ("
            f"{'`--probe-memory-gib`' if job.memory_given else '90% of the RAM available'}). Plan on a machine "
            "with more free RAM, or raise `--probe-memory-gib` up to the free RAM."
        )
    say(f"CPU probe: {len(task.batch_sizes) + 1} training steps at batch {task.batch_sizes}")
    return ChildAnswer(info, fallback, run_probe_task(task, say))


@dataclass(frozen=True)
class _Base:
    """What both measurement paths share: the model, its inputs, inventory, fp32 states, eval batch, this
    machine's RAM, the model section's first notes and the LazyGuard failure."""

    ref: ModelRef
    specs: list[InputSpec]
    info: ParamInfo
    states32: ModelStates
    eval_batch_size: int
    total_ram_bytes: int
    notes: tuple[str, ...]
    lazy_build_failure: str | None


def _queued_lines(
    req: PlanRequest, probe: ProbeResult, sample_bytes: float, eval_b: int, notes: list[str]
) -> list[tuple[str, tuple[float, float]]]:
    """The probe's phase segments with the batches Paddle's single-process DataLoader holds beside the step's
    (``loader_prefetch`` in training, ``eval_prefetch`` + ``eval_held`` in eval; a note says how much). With its
    own ``eval_batch_size`` the eval phase is a constant of the training batch."""
    b = req.batch_size
    queued, queued_eval = req.loader_prefetch * sample_bytes, req.eval_prefetch * sample_bytes
    if queued or queued_eval:
        notes.append(
            f"+ batches queued by the single-process DataLoader: {req.loader_prefetch} in training "
            f"({queued * b / MIB:,.2f} MiB), {req.eval_prefetch} in eval "
            f"({queued_eval * eval_b / MIB:,.2f} MiB)"
        )
    held = req.eval_held * sample_bytes  # what the train loader still holds when the run stops mid-epoch
    return [
        (
            p,
            (seg[0], seg[1] + queued)
            if p != "eval"
            else (seg[0], seg[1] + queued_eval + held)
            if req.eval_batch_size is None
            else (seg[0] + (seg[1] + queued_eval) * eval_b, held),
        )
        for p, f in probe.fits.items()
        for seg in (f.segments or ((f.fixed_bytes, f.per_sample_bytes),))
    ]


def _probed(req: PlanRequest, base: _Base, out: ProbeOutcome, say: Callable[[str], None]) -> ModelMeasure:
    """The CPU probe's outcome as a :class:`ModelMeasure`."""
    probe, flops, stand_ins = out.probe, out.flops, out.stand_ins
    notes = list(base.notes)
    if out.note:
        notes.append(out.note)
    elif out.loss_how:
        on = f" on labels {out.label}" if out.label is not None else ""
        notes.append(f"loss: {out.loss_doc}{on}")
    sample_bytes = (
        dataset_sample_bytes(req.sample)
        if req.sample is not None
        else sum(sp.bytes_per_sample for sp in base.specs) + (out.label.bytes_per_sample if out.label else 0)
    )
    phase_lines = _queued_lines(req, probe, sample_bytes, base.eval_batch_size, notes)
    trace = flops.trace
    if trace.ops2 and not trace.aligned:
        notes.append(
            f"the forward's ops differ between batch {trace.batch1} and {trace.batch2}: GPU "
            f"times use the batch-{trace.batch2} trace scaled linearly"
        )
    cpu_time, why = cpu_time_line(probe)
    notes += [why] if why else []
    return ModelMeasure(
        ref=base.ref,
        specs=base.specs,
        info=base.info,
        states32=base.states32,
        method="cpu-probe",
        loss_doc=out.loss_doc if not out.proxy else "mean(output) (proxy)",
        label_doc=str(out.label) if out.label is not None else None,
        fwd_flops_per_sample=flops.forward_flops_per_sample,
        train_flops_per_sample=flops.train_flops_per_sample,
        act_bytes_per_sample=probe.fits["forward"].per_sample_bytes,  # saved by the forward, per sample
        fwd_ops=flops.forward_ops,
        trace=trace,
        phase_fit_bytes={p: (f.fixed_bytes, f.per_sample_bytes) for p, f in probe.fits.items()},
        phase_lines_bytes=tuple(phase_lines),
        dominant_phase=probe.dominant_phase(req.batch_size, base.eval_batch_size),
        has_conv=flops.forward_by_op.get("conv", 0) > 0,
        cpu_time_line_s=cpu_time,
        max_rel_residual=max(f.max_rel_residual for f in probe.fits.values()),
        probe_batch_sizes=tuple(m.batch_size for m in probe.measurements),
        probe=probe,
        eval_batch_size=base.eval_batch_size,
        total_ram_bytes=base.total_ram_bytes,
        notes=tuple(notes),
        stand_ins=stand_ins,
        lazy_build_failure=base.lazy_build_failure,
    )


def _analytic(base: _Base, say: Callable[[str], None]) -> ModelMeasure:
    """The analytic transformer measurement (Korthikanti et al. 2022 activations, closed-form FLOPs) of a model
    too large to probe.

    Raises:
        InputSpecError: inputs other than one 1-D int tensor of token ids, or longer than ``max_position``.
    """
    ref, specs, cfg = base.ref, base.specs, base.ref.transformer
    say("model too large to probe: analytic transformer estimate")
    if len(specs) != 1 or not specs[0].dtype.startswith("int") or len(specs[0].shape) != 1:
        seq0 = ref.default_inputs[0].shape[0]
        raise InputSpecError(
            f"{ref.name} takes one input of token ids, e.g. `--input int64[{seq0}]`; "
            f"got {' '.join(str(s) for s in specs)}."
        )
    seq = specs[0].shape[0]
    if seq > cfg.max_position:
        raise InputSpecError(
            f"{ref.name}: sequence length {seq} exceeds its max_position {cfg.max_position}; use "
            f"`--input int64[{cfg.max_position}]` or less."
        )
    fwd_flops, act = analytic_transformer_flops(cfg, seq), analytic_transformer_activation_bytes(cfg, seq)
    forward = (base.states32.total_bytes, act)
    notes = [
        *base.notes,
        f"{base.info.params / 1e9:.2f}e9 params: too large to probe on this CPU; activations from "
        "Korthikanti et al. 2022 (analytic), FLOPs from the closed form",
    ]
    return ModelMeasure(
        ref=ref,
        specs=specs,
        info=base.info,
        states32=base.states32,
        method="analytic-transformer",
        loss_doc="cross_entropy (analytic: the logits term)",
        label_doc=None,
        fwd_flops_per_sample=fwd_flops,
        train_flops_per_sample=3 * fwd_flops,
        act_bytes_per_sample=act,
        fwd_ops=0,
        trace=transformer_trace(cfg, seq),
        phase_fit_bytes={"forward": forward},
        phase_lines_bytes=(("forward", forward),),
        dominant_phase="forward",
        has_conv=False,
        cpu_time_line_s=None,
        max_rel_residual=None,
        probe_batch_sizes=(),
        probe=None,
        eval_batch_size=base.eval_batch_size,
        total_ram_bytes=base.total_ram_bytes,
        notes=tuple(notes),
        lazy_build_failure=base.lazy_build_failure,
    )
