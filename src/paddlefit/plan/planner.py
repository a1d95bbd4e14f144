"""Plan a training job: memory, FLOPs, step time and largest batch on this CPU and every catalog GPU.

Pipeline: resolve the model -> build it under ``paddle.LazyGuard`` (parameter inventory, no allocation; a real
build when the lazy one fails, :mod:`paddlefit.models.build`) -> CPU probe (real training steps of the job at
small batches: its inputs, its loss on labels of the right structure, then an evaluation forward; FLOPs counted on
the first forward) or, for models too large to probe, the analytic transformer path -> per-target predictions
-> recommendation. The peak is the max over the phases forward (with the loss), backward, optimizer step and
eval (at the eval batch size).

GPU adjustments to the CPU-probe peak (memory is not calibrated until ``paddlefit calibrate`` runs on that GPU):

- model states recomputed for the precision (:func:`~paddlefit.estimate.memory.model_state_bytes`);
- under AMP, the probe's activations x the ratio of the bytes the forward keeps for the backward at the AMP
  dtypes Paddle gives each op to the same bytes in fp32, from the operator trace
  (:func:`~paddlefit.estimate.gpu_model.saved_activation_bytes`), plus AMP O1's half copies of the weights of
  white-list ops, which live until their backward;
- + cuDNN conv workspace up to ``FLAGS_conv_workspace_size_limit`` = 512 MiB (Paddle
  ``paddle/phi/core/flags.cc`` default) for models with convolutions (an upper bound);
- capacity minus the CUDA context and kernel images, 1.3 GB (Hugging Face "Model training anatomy" docs,
  BERT-large on V100: nvidia-smi total minus allocator; a PyTorch figure, replaced by a calibration).

GPU step time: the per-operator model (:mod:`paddlefit.estimate.gpu_model`) over the operator trace recorded
in the probe (or written from the config for models too large to probe), with the efficiency parameters fitted
on published measurements (``calibration: published-fit``) or timed on that GPU (``calibration: device``);
never below the host floor measured here; data parallel adds the all-reduce that the backward does not hide.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import psutil

from paddlefit.catalog.gpus import GPU, get_gpu, load_gpus
from paddlefit.errors import CatalogError, InputSpecError, ModelError, PaddlefitError, UnknownNameError
from paddlefit.estimate import memory as mem
from paddlefit.estimate.gpu_model import (
    PerfParams,
    StepEstimate,
    dp_exposed_allreduce_s,
    estimate_step,
    load_perf_params,
    saved_activation_bytes,
)
from paddlefit.estimate.optrace import OpTrace, transformer_trace
from paddlefit.estimate.timing import measure_host_overhead, ring_allreduce_s
from paddlefit.models.build import failure_message, param_inventory
from paddlefit.models.zoo import ModelRef, resolve_model
from paddlefit.plan.calibration import Calibration, load_calibrations
from paddlefit.spec import InputSpec, OptimizerName, Precision

CONV_WORKSPACE_BYTES = 512 * 1024**2
CUDA_CONTEXT_BYTES = int(1.3e9)
DEFAULT_SAFETY_MARGIN = 0.9


@dataclass
class PlanRequest:
    """Everything ``paddlefit plan`` takes.

    Attributes:
        model: zoo name or ``package.module:factory``.
        batch_size: per-device micro-batch, samples (>= 1).
        inputs: per-sample input specs; None = the zoo default.
        optimizer, precision: see :mod:`paddlefit.spec`.
        gpus: restrict GPU targets to these names (empty = the whole catalog).
        devices: data-parallel GPUs per target (all-reduce added when > 1).
        dataset_size, epochs: samples per epoch and epochs, for the time to train.
        catalog_files, calibration_files: user data files.
        safety_margin: fraction of capacity a peak may use and still "fit" (policy, default 0.9, leaving
            10% for allocator fragmentation and the unmeasured).
        probe_batch_sizes: the CPU probe's first batch sizes; it adds 6, 12, 24... up to ``batch_size``
            while the estimated extra probe time stays within ``probe_budget_s`` seconds.
        max_probe_bytes: probe only if fp32 Adam model states (16 B/param) stay under this; None =
            min(25% of RAM, 8 GiB).
        explain: GPU names whose predicted top kernels go into ``Plan.explain`` (``plan --explain GPU``); a
            name that is not among the planned GPUs is an error (the CLI checks it before the probe).
        label, label_arg, loss: the job's label spec (None = from data or generated), the forward keyword that
            receives the label, and its loss (None = ``cross_entropy``); see :mod:`paddlefit.models.calling`.
        loss_strict: the loss is the job's (a job spec or ``--loss``): an output it cannot take is an error
            rather than planned with a proxy loss.
        eval_batch_size: samples per evaluation forward (None = ``batch_size``).
        cpu_threads: the job's Paddle CPU threads (None = every core, as ``train`` on one device); the CPU row's
            time is measured with it. ``time_threads``: also time 1, cores/2 and all cores and say which is fastest.
        eval_phase: the job evaluates (a job spec without ``data.eval`` does not): the probe measures the eval
            forward and it counts in the peak.
        sample: the first sample of the job's ``data.train`` (probe batches are copies of it); None = synthetic.
        loader_prefetch: batches Paddle's single-process DataLoader holds besides the one in use: its blocking
            queue's capacity, ``prefetch_factor`` x places (``python/paddle/io/dataloader/dataloader_iter.py``), plus
            the 2 of the double-buffering ``BufferedReader`` behind ``use_buffer_reader=True`` (measured: train's
            peak for PP-LCNet at batch 32 was 4.00 batches of 393,472 bytes above the probe's with the default
            prefetch_factor 2); added to every phase as input + label bytes x batch (0: no DataLoader, or worker
            processes, whose batches live in shared memory). ``eval_prefetch``: the same for the eval loader, added
            to the eval phase at the eval batch. ``eval_held``: training batches the train loader still holds during
            an evaluation (a run stopped mid-epoch by ``max_steps`` evaluates with the train queue full, and its last
            batch; measured on PP-LCNet: 5), added to the eval phase at the training batch.
    """

    model: str
    batch_size: int = 32
    inputs: list[InputSpec] | None = None
    model_args: dict[str, Any] = field(default_factory=dict)
    optimizer: OptimizerName = OptimizerName.ADAM
    precision: Precision = Precision.FP32
    gpus: list[str] = field(default_factory=list)
    devices: int = 1
    dataset_size: int | None = None
    epochs: float | None = None
    catalog_files: list[str] = field(default_factory=list)
    calibration_files: list[str] = field(default_factory=list)
    safety_margin: float = DEFAULT_SAFETY_MARGIN
    probe_batch_sizes: tuple[int, ...] = (1, 2, 3)
    probe_budget_s: float = 6.0
    max_probe_bytes: int | None = None
    explain: list[str] = field(default_factory=list)
    label: InputSpec | None = None
    label_arg: str | None = None
    loss: str | None = None
    loss_strict: bool = False
    eval_batch_size: int | None = None
    cpu_threads: int | None = None
    time_threads: bool = True
    loader_prefetch: int = 0
    eval_prefetch: int = 0
    eval_held: int = 0
    sample: Any = None
    eval_phase: bool = True


@dataclass
class Target:
    """One row of the plan (a device). Bytes, seconds, samples/s.

    ``grads_bytes`` is what a data-parallel step all-reduces (gradients in the precision the device trains in);
    ``checkpoint_bytes`` is what a checkpoint holds (weights + optimizer states, incl. fp32 master weights under O2).
    ``calibration`` says what the row's time rests on: ``device`` (measured on this device: the CPU probe, or a
    ``paddlefit calibrate`` file with kernel timings for this GPU), ``published-fit`` (the per-operator model
    with parameters fitted on published measurements) or ``none`` (not predicted). ``calibrated`` is
    ``calibration == "device"`` (kept for older readers). ``time_breakdown`` maps op classes to predicted
    device seconds (``seconds``, ``bound``: compute or memory, ``kernels``), plus ``allreduce_exposed``; the step
    is max(sum of the classes, the host floor) + the exposed all-reduce. ``predicted_mfu`` is the model FLOPs
    per step / step time / the dense peak of the precision's unit (PaLM, Chowdhery et al. 2022, appendix B).
    ``allreduce_s`` is the whole gradient all-reduce, ``allreduce_exposed_s`` the part the backward does not hide.
    """

    name: str
    kind: str
    fits: bool
    peak_bytes: int
    capacity_bytes: int
    max_batch_size: int | None
    step_time_s: float
    samples_per_s: float
    calibrated: bool
    notes: list[str] = field(default_factory=list)
    bound: str | None = None
    allreduce_s: float = 0.0
    time_to_train_s: float | None = None
    grads_bytes: int = 0
    checkpoint_bytes: int = 0
    calibration: str = "none"
    predicted_mfu: float | None = None
    time_breakdown: dict[str, Any] | None = None
    allreduce_exposed_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The row as the JSON object documented in the README."""
        return dict(self.__dict__)


@dataclass
class Plan:
    """The result of :func:`build_plan`; ``to_dict()`` is the ``--json`` document."""

    model: dict[str, Any]
    batch_size: int
    precision: str
    optimizer: str
    devices: int
    inputs: list[str]
    memory: dict[str, Any]
    targets: list[Target]
    recommendation: dict[str, Any]
    assumptions: dict[str, Any]
    explain: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document (targets as dicts)."""
        d = dict(self.__dict__)
        d["targets"] = [t.to_dict() for t in self.targets]
        return d


def _max_batch(phases: list[tuple[float, float]], limit: float) -> int | None:
    """Largest integer b >= 0 with fixed + per_sample * b <= limit for every (fixed, per_sample) phase;
    None if no phase grows with the batch and all fit."""
    best: float = math.inf
    for fixed, slope in phases:
        if fixed > limit:
            return 0
        if slope > 0:
            best = min(best, (limit - fixed) / slope)
    return None if best == math.inf else math.floor(best)


def _specs_for(ref: ModelRef, inputs: list[InputSpec] | None) -> list[InputSpec]:
    specs = list(inputs) if inputs else list(ref.default_inputs)
    if not specs:
        raise InputSpecError(
            f"Model {ref.name!r} has no default input; give one per model input, e.g. "
            "`--input float32[3,224,224]` or `--input int64[128]`."
        )
    if ref.transformer is not None:
        vocab = ref.transformer.vocab_size
        specs = [s.model_copy(update={"high": vocab}) if s.dtype.startswith("int") and not s.high else s
                 for s in specs]  # fmt: skip
    return specs


def _check_id_ranges(ref: ModelRef, specs: list[InputSpec], info: mem.ParamInfo) -> None:
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
        if s.dtype.startswith("int") and s.high and s.high > info.embedding_rows and \
                (s.name is None or "id" in s.name.lower()):  # fmt: skip
            raise InputSpecError(
                f"`--input {s}` draws ids up to {s.high - 1}, but the largest embedding of {ref.name!r} has "
                f"{info.embedding_rows} rows (ids 0..{info.embedding_rows - 1}); Paddle's CPU kernel would read past "
                f"it. Use `:{info.embedding_rows}` or less (`{s.dtype}[{','.join(map(str, s.shape))}]:"
                f"{info.embedding_rows}`), or raise the model's vocabulary size.")


def _sample_bytes(sample: Any) -> int:
    """Bytes of one dataset sample's arrays (nested lists, tuples and dicts)."""
    import numpy as np

    if isinstance(sample, dict):
        return sum(_sample_bytes(v) for v in sample.values())
    if isinstance(sample, list | tuple):
        return sum(_sample_bytes(v) for v in sample)
    try:
        return int(np.asarray(sample).nbytes)
    except (TypeError, ValueError):
        return 0


def amp_activation_memory(trace: OpTrace, precision: Precision) -> tuple[float, float]:
    """(activation ratio, cast-weight bytes) of ``precision`` against fp32 for the traced model.

    The ratio is the per-sample growth of the bytes the forward keeps for the backward at the AMP dtypes
    (:func:`~paddlefit.estimate.gpu_model.saved_activation_bytes`) over the same growth in fp32; the cast-weight
    bytes are O1's half copies of white-list weights (fixed). fp32: (1.0, 0.0).
    """
    if not precision.is_amp:
        return 1.0, 0.0
    a1, cast = saved_activation_bytes(trace.at(1), precision.value)
    a2, _ = saved_activation_bytes(trace.at(2), precision.value)
    f1, _ = saved_activation_bytes(trace.at(1), "fp32")
    f2, _ = saved_activation_bytes(trace.at(2), "fp32")
    if f2 - f1 > 0:
        return (a2 - a1) / (f2 - f1), cast
    return (a1 / f1 if f1 > 0 else 1.0), cast


def explain_rows(est: StepEstimate, top: int = 15) -> list[dict[str, Any]]:
    """The ``top`` kernel groups of a predicted step (kernels of one op name and phase summed), slowest first."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for k, t, bound in est.kernels:
        g = groups.setdefault((k.op, k.phase), {"op": k.op, "cls": k.cls, "phase": k.phase, "seconds": 0.0,
                                                "flops": 0.0, "bytes": 0.0, "kernels": 0, "compute_s": 0.0,
                                                "unit": k.unit})  # fmt: skip
        g["seconds"] += t
        g["flops"] += k.flops
        g["bytes"] += k.bytes
        g["kernels"] += k.count
        if bound == "compute":
            g["compute_s"] += t
    rows = sorted(groups.values(), key=lambda g: -g["seconds"])[:top]
    for g in rows:
        g["bound"] = "compute" if g.pop("compute_s") >= g["seconds"] / 2 else "memory"
        g["share"] = g["seconds"] / est.device_s if est.device_s else 0.0
    return rows


def effective_precision(gpu: GPU, precision: Precision) -> Precision:
    """The precision Paddle really trains in on ``gpu``: ``paddle.amp.auto_cast`` disables AMP (O0, fp32)
    for bf16 below compute capability 8.0 and for fp16 below 7.0 (Paddle ``python/paddle/amp/auto_cast.py``)."""
    if precision.value.startswith("bf16") and gpu.compute_capability < 8.0:
        return Precision.FP32
    if precision.value.startswith("fp16") and gpu.compute_capability < 7.0:
        return Precision.FP32
    return precision


def _gpu_notes(gpu: GPU, asked: Precision, prec: Precision, unit: str) -> list[str]:
    """Short per-row notes; the long form of each is in the README ("Notes in plan rows")."""
    notes = []
    if prec is not asked:
        need = "8.0" if asked.value.startswith("bf16") else "7.0"
        notes.append(f"{asked.value.split('-')[0]} AMP needs CC {need}+: Paddle runs fp32")
    if prec is Precision.FP32 and unit.startswith("tf32"):
        notes.append("fp32 runs as TF32")
    if gpu.compute_capability < 7.5:
        notes.append("no CUDA 13 build (Volta): use cu126/cu129")
    if gpu.verified != "datasheet":
        notes.append(f"specs {gpu.verified}")
    return notes


def build_plan(req: PlanRequest, progress: Any = None) -> Plan:
    """Predict memory, FLOPs and speed of ``req`` on this CPU and every catalog GPU.

    Args:
        req: the request (see :class:`PlanRequest`).
        progress: optional callable ``progress(message: str)`` for long steps (the CLI shows a spinner).

    Returns:
        Plan with targets sorted: fitting targets first, fastest first; the CPU row is named ``cpu``.

    Raises:
        UnknownNameError: unknown model or GPU name.
        ModelError: the model cannot be imported/built, rejects its inputs, or is too large to probe and
            has no analytic model.
        InputSpecError: no inputs given for a model without defaults.
        CatalogError: malformed catalog or calibration file.
        ValueError: batch_size < 1, devices < 1 or safety_margin outside (0, 1] (the CLI validates first).
    """
    if req.batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    if req.devices < 1:
        raise ValueError("devices must be >= 1")
    if not 0 < req.safety_margin <= 1:
        raise ValueError("safety_margin must be in (0, 1]")
    if req.max_probe_bytes is not None and req.max_probe_bytes < 1:
        raise ValueError("max_probe_bytes must be >= 1")
    say = progress or (lambda msg: None)
    gpus_all = load_gpus(req.catalog_files)
    gpus = list({g.name: g for g in (get_gpu(n, gpus_all) for n in req.gpus)}.values()) if req.gpus else gpus_all
    calibrations = {}
    for key, cal in load_calibrations(req.calibration_files).items():
        if key == "cpu":
            calibrations[key] = cal
            continue
        try:  # an alias (`a100`) files under the catalog name; an unknown device is an error, not ignored
            calibrations[get_gpu(cal.device, gpus_all).name.lower()] = cal
        except UnknownNameError:
            raise CatalogError(f"Calibration `{cal.source}`: device {cal.device!r} is not a GPU of the catalog; "
                               "rerun `paddlefit calibrate --device-name NAME` with a name from `paddlefit gpus`, "
                               "or add the GPU with `--catalog FILE`.") from None
    ref = resolve_model(req.model, req.model_args)
    specs = _specs_for(ref, req.inputs)

    say(f"building {ref.name} under paddle.LazyGuard")
    info, build_note = param_inventory(ref)
    if info.trainable_params == 0:
        raise ModelError(
            f"Model {ref.name!r} has no trainable parameters ({info.params:,} frozen); nothing to train. "
            "Unfreeze some (`stop_gradient = False`) or plan the model you will fine-tune."
        )

    _check_id_ranges(ref, specs, info)
    if req.label_arg and any(s.name == req.label_arg for s in specs):
        raise InputSpecError(f"`label_arg: {req.label_arg}` would pass the label as `{req.label_arg}=`, which is also "
                             f"an input (`{req.label_arg}=...`); use another name for one of them.")
    total_ram = psutil.virtual_memory().total
    limit = req.max_probe_bytes if req.max_probe_bytes is not None else min(total_ram // 4, 8 * 1024**3)
    b = req.batch_size
    states32 = mem.model_state_bytes(info, req.optimizer, Precision.FP32)
    notes_model: list[str] = [build_note] if build_note else []
    eval_b = req.eval_batch_size or b
    if 16 * info.params <= limit:
        say(f"CPU probe: {len(req.probe_batch_sizes) + 1} training steps at batch {req.probe_batch_sizes}")
        call = mem.JobCall(specs, req.label, req.label_arg, req.loss, strict=req.loss_strict, sample=req.sample)
        try:
            probe, flops = mem.probe_memory(ref.factory, specs, req.optimizer, req.probe_batch_sizes,
                                            extend_to=max(b, eval_b), budget_s=req.probe_budget_s, call=call,
                                            cpu_threads=req.cpu_threads, time_threads=req.time_threads,
                                            eval_phase=req.eval_phase)
        except mem.ProbeTooLargeError as exc:
            raise ModelError(
                f"Model {ref.name!r} with inputs {' '.join(str(s) for s in specs)} is too large to probe on this "
                f"machine: the CPU probe would need about {exc.need_bytes / 1024**3:.1f} GiB at batch {exc.batch} "
                f"and {exc.free_bytes / 1024**3:.1f} GiB is free. Plan with smaller per-sample inputs (activations "
                "scale with them) or on a machine with more RAM."
            ) from None
        except MemoryError:
            raise ModelError(
                f"Model {ref.name!r} ran out of host memory in the CPU probe at batch 1 with inputs "
                f"{' '.join(str(s) for s in specs)}; plan with smaller per-sample inputs or on a larger machine."
            ) from None
        except KeyboardInterrupt:
            raise
        except PaddlefitError:
            raise
        except (Exception, SystemExit) as exc:
            raise ModelError(failure_message(ref.name, exc, "train", " ".join(f"`--input {s}`" for s in specs),
                                             req.label_arg)) from None  # fmt: skip
        if call.note:
            notes_model.append(call.note)
        elif call.job_loss.how:
            notes_model.append(f"loss: {call.job_loss.describe()}"
                               + (f" on labels {call.label}" if call.label is not None else ""))
        method = "cpu-probe"
        loss_doc = call.job_loss.describe() if not call.proxy else "mean(output) (proxy)"
        label_doc = str(call.label) if call.label is not None else None
        fwd_flops = flops.forward_flops_per_sample
        train_flops = flops.train_flops_per_sample
        phases = {p: (f.fixed_bytes, f.per_sample_bytes) for p, f in probe.fits.items()}
        # Paddle's single-process DataLoader holds `loader_prefetch` more batches than the probe's one
        sample_bytes = _sample_bytes(req.sample) if req.sample is not None else \
            sum(sp.bytes_per_sample for sp in specs) + (call.label.bytes_per_sample if call.label else 0)  # fmt: skip
        queued, queued_eval = req.loader_prefetch * sample_bytes, req.eval_prefetch * sample_bytes
        if queued or queued_eval:
            notes_model.append(f"+ batches queued by the single-process DataLoader: {req.loader_prefetch} in training "
                               f"({queued * b / 1024**2:,.2f} MiB), {req.eval_prefetch} in eval "
                               f"({queued_eval * eval_b / 1024**2:,.2f} MiB)")
        # the eval phase grows with the eval batch: with its own eval_batch_size it is a constant of the batch
        # eval: its loader's queue, and what the train loader still holds when the run stops mid-epoch
        held = req.eval_held * sample_bytes
        phase_lines = [(p, (seg[0], seg[1] + queued) if p != "eval" else
                        (seg[0], seg[1] + queued_eval + held) if req.eval_batch_size is None else
                        (seg[0] + (seg[1] + queued_eval) * eval_b, held))
                       for p, f in probe.fits.items()
                       for seg in (f.segments or ((f.fixed_bytes, f.per_sample_bytes),))]  # fmt: skip
        probed = [m.batch_size for m in probe.measurements]
        dominant = probe.dominant_phase(b, eval_b)
        act_per_sample = probe.fits["forward"].per_sample_bytes  # saved by the forward, per sample
        fwd_ops = flops.forward_ops
        trace = flops.trace
        if trace.ops2 and not trace.aligned:
            notes_model.append(f"the forward's ops differ between batch {trace.batch1} and {trace.batch2}: GPU "
                               f"times use the batch-{trace.batch2} trace scaled linearly")
        has_conv = flops.forward_by_op.get("conv", 0) > 0
        cpu_time = (probe.time_fit.fixed_bytes, probe.time_fit.per_sample_bytes)
        residual = max(f.max_rel_residual for f in probe.fits.values())
    elif ref.transformer is not None:
        say("model too large to probe: analytic transformer estimate")
        cfg = ref.transformer
        if len(specs) != 1 or not specs[0].dtype.startswith("int") or len(specs[0].shape) != 1:
            raise InputSpecError(
                f"{ref.name} takes one input of token ids, e.g. `--input int64[{cfg.default_seq_len}]`; got "
                f"{' '.join(str(s) for s in specs)}."
            )
        seq = specs[0].shape[0]
        if seq > cfg.max_position:
            raise InputSpecError(
                f"{ref.name}: sequence length {seq} exceeds its max_position {cfg.max_position}; use "
                f"`--input int64[{cfg.max_position}]` or less."
            )
        method = "analytic-transformer"
        loss_doc, label_doc = "cross_entropy (analytic: the logits term)", None
        fwd_flops = mem.analytic_transformer_flops(cfg, seq)
        train_flops = 3 * fwd_flops
        act_per_sample = mem.analytic_transformer_activation_bytes(cfg, seq)
        fwd_ops = 0
        trace = transformer_trace(cfg, seq)
        phases = {"forward": (states32.total_bytes, act_per_sample)}
        dominant = "forward"
        has_conv = False
        cpu_time = None
        residual = None
        phase_lines = [("forward", phases["forward"])]
        probed = []
        notes_model.append(
            f"{info.params / 1e9:.2f}e9 params: too large to probe on this CPU; activations from "
            "Korthikanti et al. 2022 (analytic), FLOPs from the closed form"
        )
    else:
        raise ModelError(
            f"Model {ref.name!r} has {info.params:,} parameters: its fp32 Adam states "
            f"({16 * info.params / 1024**3:.1f} GiB) exceed the probe limit ({limit / 1024**3:.1f} GiB) and "
            "paddlefit has no analytic activation model for it. Plan a smaller variant, or raise the limit "
            "with `--max-probe-gib`."
        )

    lines = [seg for _, seg in phase_lines]
    amp_memory: dict[Precision, tuple[float, float]] = {}

    def amp_for(precision: Precision) -> tuple[float, float]:
        """:func:`amp_activation_memory` of the trace, once per precision (GPU rows share it)."""
        if precision not in amp_memory:
            amp_memory[precision] = amp_activation_memory(trace, precision)
        return amp_memory[precision]

    def cpu_phases_for(precision: Precision) -> list[tuple[float, float]]:
        """Probe lines re-based on the precision's model states, activations x its AMP ratio, + O1's weight
        copies in the forward and backward phases."""
        st = mem.model_state_bytes(info, req.optimizer, precision).total_bytes
        f, cast = amp_for(precision)
        return [(st + f * (fx - states32.total_bytes) + (cast if p != "optimizer_step" else 0.0), f * sl)
                for p, (fx, sl) in phase_lines]  # fmt: skip

    targets: list[Target] = []
    # ---- CPU target (fp32: AMP has no effect on CPU)
    cpu_cap = int(total_ram)
    cpu_peak = max(fx + sl * b for fx, sl in lines)
    # breakdown that adds up to the peak: states + activations x batch + the rest (workspace, temporaries)
    fixed = cpu_peak - states32.total_bytes - act_per_sample * b
    cpu_notes = [f"{os.cpu_count()} cores, {total_ram / 1024**3:.1f} GiB RAM"]
    if req.precision.is_amp:
        cpu_notes.append("AMP has no effect on CPU: fp32 planned")
    if req.devices > 1:
        cpu_notes.append("one CPU process; --devices applies to GPUs")
    if method == "cpu-probe":
        cpu_notes.append(f"{probe.threads} Paddle CPU thread(s)" + ("" if req.cpu_threads else " (all cores)"))
        ts = probe.thread_step_s
        if ts:
            best = min(ts, key=ts.__getitem__)
            if probe.threads in ts and ts[probe.threads] > 1.10 * ts[best]:
                cpu_notes.append(f"measured at batch {max(req.probe_batch_sizes)}: "
                                 + ", ".join(f"{n} thread(s) {v * 1e3:,.0f} ms" for n, v in sorted(ts.items()))
                                 + f"; set `cpu_threads: {best}` ({ts[probe.threads] / ts[best]:.2f}x faster)")
    if cpu_time is not None:
        cpu_step = max(cpu_time[0] + cpu_time[1] * b, 1e-9)
        cpu_calibrated = True
    else:
        cpu_step = float("nan")
        cpu_calibrated = False
        cpu_notes.append("no probe: CPU step time not measured")
    targets.append(Target(
        name="cpu", kind="cpu", fits=cpu_peak <= req.safety_margin * cpu_cap, peak_bytes=int(cpu_peak),
        capacity_bytes=cpu_cap, max_batch_size=_max_batch(lines, req.safety_margin * cpu_cap),
        step_time_s=cpu_step, samples_per_s=b / cpu_step if cpu_step == cpu_step else float("nan"),
        calibrated=cpu_calibrated, notes=cpu_notes, bound=None, grads_bytes=states32.grads_bytes,
        checkpoint_bytes=states32.weights_bytes + states32.optimizer_bytes,
        calibration="device" if cpu_calibrated else "none",
    ))  # fmt: skip

    # ---- GPU targets
    if fwd_ops:
        host = measure_host_overhead(lambda ps: mem.make_optimizer(req.optimizer, ps))
        host_s = host.step_s(fwd_ops, info.trainable_tensors)
    else:  # analytic path: no op count; large models are compute-bound
        host, host_s = None, 0.0
    published = load_perf_params()
    explain_for = {get_gpu(n, gpus_all).name for n in req.explain}
    if explain_for - {g.name for g in gpus}:
        raise ValueError(f"--explain {sorted(explain_for - {g.name for g in gpus})} is not among the planned GPUs")
    ops_b = trace.at(b)
    explain: dict[str, list[dict[str, Any]]] = {}
    gpu_states = mem.model_state_bytes(info, req.optimizer, req.precision)
    for gpu in gpus:
        cal: Calibration | None = calibrations.get(gpu.name.lower())
        prec = effective_precision(gpu, req.precision)
        g_states = mem.model_state_bytes(info, req.optimizer, prec)
        ph = cpu_phases_for(prec)
        if has_conv:
            ph = [(fx + CONV_WORKSPACE_BYTES, sl) for fx, sl in ph]
        ratio = cal.memory_ratio if cal else 1.0
        ph = [(fx * ratio, sl * ratio) for fx, sl in ph]
        context = cal.cuda_context_bytes if cal and cal.cuda_context_bytes else CUDA_CONTEXT_BYTES
        cap = gpu.capacity_bytes
        usable = req.safety_margin * (cap - context)
        peak = max(fx + sl * b for fx, sl in ph)
        peak_flops, unit = gpu.peak_flops(prec.value)
        params: PerfParams = cal.perf_params if cal and cal.perf_params is not None else published
        est = estimate_step(ops_b, prec.value, gpu, req.optimizer.value, info.trainable_params,
                            info.trainable_tensors, params)  # fmt: skip
        bw, link = gpu.interconnect_gbps(req.devices)
        ar = ring_allreduce_s(g_states.grads_bytes, req.devices, bw)
        ar_exposed = dp_exposed_allreduce_s(ar, est.by_phase.get("backward", 0.0), g_states.grads_bytes)
        step = max(est.device_s, host_s) + ar_exposed
        top_cls = max(est.by_class, key=lambda c: est.by_class[c]["seconds"]) if est.by_class else None
        bound = "host" if host_s > est.device_s else (est.by_class[top_cls]["bound"] if top_cls else None)
        notes = _gpu_notes(gpu, req.precision, prec, unit)
        if bound == "host":
            notes.append("host-bound")
        elif bound == "memory":
            notes.append(f"memory-bound ({top_cls})")
        if cal is not None and cal.perf_params is None:
            notes.append("memory calibrated on this device; the calibration file has no kernel timings, so time "
                         "is the published fit")
        unfit = [k for k, n in (params.provenance.get("rows_constraining_each_parameter") or {}).items() if n == 0]
        if params.calibration == "published-fit" and "dwconv" in unfit and "dwconv" in est.by_class:
            notes.append("depthwise conv efficiency not fitted (no published run constrains it)")
        fitted_archs = params.provenance.get("architectures")
        if params.calibration == "published-fit" and fitted_archs and gpu.architecture not in fitted_archs:
            notes.append(f"no published run on {gpu.architecture} in the fit")
        if req.devices > 1:
            notes.append(f"all-reduce {ar * 1e3:.1f} ms over {link}, {ar_exposed * 1e3:.1f} ms not hidden by "
                         f"DataParallel (paddlefit train's default oom_backoff: true waits for it: "
                         f"+{(ar - ar_exposed) * 1e3:.1f} ms)")
        breakdown = {c: {"seconds": v["seconds"], "bound": v["bound"], "kernels": v["kernels"]}
                     for c, v in sorted(est.by_class.items(), key=lambda kv: -kv[1]["seconds"])}  # fmt: skip
        if req.devices > 1:
            breakdown["allreduce_exposed"] = {"seconds": ar_exposed, "bound": "communication", "kernels": 0}
        calibration = params.calibration  # "device" only with kernel timings measured on this GPU
        if gpu.name in explain_for:
            explain[gpu.name] = explain_rows(est)
        targets.append(Target(
            name=gpu.name, kind="gpu", fits=peak <= usable, peak_bytes=int(peak), capacity_bytes=cap,
            max_batch_size=_max_batch(ph, usable), step_time_s=step, samples_per_s=req.devices * b / step,
            calibrated=calibration == "device", notes=notes, bound=bound, allreduce_s=ar,
            grads_bytes=g_states.grads_bytes, checkpoint_bytes=g_states.weights_bytes + g_states.optimizer_bytes,
            calibration=calibration, predicted_mfu=train_flops * b / step / peak_flops, time_breakdown=breakdown,
            allreduce_exposed_s=ar_exposed,
        ))  # fmt: skip

    if req.dataset_size and req.epochs:
        for t in targets:
            per_step = b * (req.devices if t.kind == "gpu" else 1)
            if t.step_time_s == t.step_time_s:
                t.time_to_train_s = math.ceil(req.dataset_size / per_step) * req.epochs * t.step_time_s

    targets.sort(key=lambda t: (not t.fits, -(t.samples_per_s if t.samples_per_s == t.samples_per_s else 0)))
    recommendation = _recommend(targets, b)
    act_ratio, cast_bytes = amp_for(req.precision)
    model_doc = {
        "name": ref.name,
        "params": info.params,
        "trainable_params": info.trainable_params,
        "forward_flops_per_sample": fwd_flops,
        "train_flops_per_sample": train_flops,
        "loss": loss_doc,
        "label": label_doc,
    }
    memory_doc = {
        "method": method,
        "weights_bytes": gpu_states.weights_bytes,
        "grads_bytes": gpu_states.grads_bytes,
        "optimizer_bytes": gpu_states.optimizer_bytes,
        "activation_bytes_per_sample": act_per_sample * act_ratio,
        "fixed_bytes": fixed * act_ratio + cast_bytes + (CONV_WORKSPACE_BYTES if has_conv else 0),
        "precision_of_breakdown": req.precision.value,
        "cpu_fp32": {
            "weights_bytes": states32.weights_bytes,
            "grads_bytes": states32.grads_bytes,
            "optimizer_bytes": states32.optimizer_bytes,
            "activation_bytes_per_sample": act_per_sample,
            "fixed_bytes": fixed,
        },
        "dominant_phase": dominant,
        "phases": {p: {"fixed_bytes": fx, "per_sample_bytes": sl} for p, (fx, sl) in phases.items()},
        "phase_peak_bytes": {p: max(fx + sl * b for q, (fx, sl) in phase_lines if q == p)
                             for p in dict(phase_lines)},
        "eval_batch_size": eval_b,
        "probe_batch_sizes": probed,
        "probe_max_rel_residual": residual,
        "notes": notes_model,
    }
    assumptions = {
        "safety_margin": req.safety_margin,
        "amp_activation_factor": act_ratio,
        "amp_cast_weight_bytes": cast_bytes,
        "cuda_context_bytes": CUDA_CONTEXT_BYTES,
        "conv_workspace_bytes": CONV_WORKSPACE_BYTES if has_conv else 0,
        "gpu_model": "per-operator roofline: sum over kernels of max(FLOPs / (unit peak x efficiency x wave "
                     "efficiency), bytes / (bandwidth x bw_eff)) + kernel_s",
        "gpu_model_params": dict(published.values),
        "gpu_model_params_by_generation": {g: dict(v) for g, v in published.by_generation.items()},
        "gpu_model_params_source": "paddlefit/catalog/data/gpu_perf_params.json ("
                                   f"{published.provenance.get('fitted_by', 'not fitted')}, "
                                   f"{published.provenance.get('date', '?')})",
        "trace_ops": len(ops_b),
        "trace_source": trace.source,
        "allreduce": "ring, 2(n-1)/n x gradient bytes per rank; DataParallel overlaps it with the backward in "
                     "buckets: exposed = max(last 1 MB bucket, all-reduce - backward)",
        "host_op_s": host.op_s if host else None,
        "host_optimizer_s_per_tensor": host.optimizer_s_per_tensor if host else None,
        "host_floor_s": host_s,
        "host_floor": "3 x forward ops x op_s + trainable tensors x optimizer_s_per_tensor (measured here)",
        "cpu_threads": probe.threads if method == "cpu-probe" else None,
        "cpu_thread_step_s": {str(k): v for k, v in probe.thread_step_s.items()} if method == "cpu-probe" else {},
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "batch_size_is": "per device (micro-batch); global batch = batch_size x devices",
    }
    return Plan(
        model=model_doc, batch_size=b, precision=req.precision.value, optimizer=req.optimizer.value,
        devices=req.devices, inputs=[str(s) for s in specs], memory=memory_doc, targets=targets,
        recommendation=recommendation, assumptions=assumptions, explain=explain,
    )  # fmt: skip


def _recommend(targets: list[Target], batch: int) -> dict[str, Any]:
    gpu_fit = [t for t in targets if t.kind == "gpu" and t.fits]
    if gpu_fit:
        best = gpu_fit[0]
        smallest = min(gpu_fit, key=lambda t: (t.capacity_bytes, -t.samples_per_s))
        reason = (
            f"fastest GPU that fits: {best.samples_per_s:,.0f} samples/s predicted, peak "
            f"{best.peak_bytes / 1024**3:.1f} of {best.capacity_bytes / 1024**3:.0f} GiB"
        )
        if smallest.name != best.name:
            reason += (
                f"; smallest card that fits: {smallest.name} ({smallest.samples_per_s:,.0f} samples/s, "
                f"peak {smallest.peak_bytes / 1024**3:.1f} of {smallest.capacity_bytes / 1024**3:.0f} GiB)"
            )
        return {"target": best.name, "reason": reason, "smallest_fit": smallest.name}
    gpus = [t for t in targets if t.kind == "gpu"]
    if not gpus:
        cpu = targets[0]
        return {"target": "cpu" if cpu.fits else None, "reason": "no GPU targets selected",
                "smallest_fit": None}  # fmt: skip
    roomiest = max(gpus, key=lambda t: t.max_batch_size or 0)
    mb = roomiest.max_batch_size or 0
    if mb >= 1:
        reason = (
            f"batch {batch} fits no GPU; largest that fits is {mb} on {roomiest.name}: lower --batch-size "
            "with gradient accumulation, use AMP (--precision bf16-o1/fp16-o1), or shard across devices"
        )
    else:
        reason = "model states alone exceed every GPU: use AMP O2, sharding or tensor/pipeline parallel"
    return {"target": None, "reason": reason, "smallest_fit": None}
