"""Plan a training job: memory, FLOPs, step time and largest batch on this CPU and every catalog GPU.

Pipeline: resolve the model -> in a child process with a time and a memory limit (:mod:`paddlefit.plan.measure`,
:mod:`paddlefit.probe.task`), build it under ``paddle.LazyGuard`` (parameter inventory, no allocation; a real
build when the lazy one fails, :mod:`paddlefit.models.build`), then the CPU probe (real training steps of the job
at small batches: its inputs, its loss on labels of the right structure, then an evaluation forward; FLOPs counted
on the first forward) or, for models too large to probe, the analytic transformer path -> per-target predictions
-> recommendation. The peak is the max over the phases forward (with the loss), backward, optimizer step and
eval (at the eval batch size).

GPU adjustments to the CPU-probe peak (memory is not calibrated until ``paddlefit calibrate`` runs on that GPU):

- model states recomputed for the precision (:func:`~paddlefit.estimate.model_states.model_state_bytes`);
- under AMP, the probe's activations x the ratio of the bytes the forward keeps for the backward at the AMP
  dtypes Paddle gives each op to the same bytes in fp32, from the operator trace
  (:func:`~paddlefit.estimate.amp.saved_activation_bytes`), plus AMP O1's half copies of the weights of
  white-list ops, which live until their backward;
- + cuDNN conv workspace up to ``FLAGS_conv_workspace_size_limit`` = 512 MiB (Paddle
  ``paddle/phi/core/flags.cc`` default) for models with convolutions (an upper bound);
- capacity minus the CUDA context and kernel images, 1.3 GB (Hugging Face "Model training anatomy" docs,
  BERT-large on V100: nvidia-smi total minus allocator; a PyTorch figure, replaced by a calibration).

GPU step time: the per-operator model (:mod:`paddlefit.estimate.gpu_model`) over the operator trace recorded
in the probe (or written from the config for models too large to probe), with the efficiency parameters fitted
on published measurements (``calibration: published-fit``) or timed on that GPU (``calibration: device``);
never below the host floor (Paddle's eager dispatch per op and the optimizer's loop per tensor: constants of the
model, :func:`~paddlefit.estimate.timing.host_floor_s`, so a row does not depend on the planning machine); data
parallel adds the all-reduce that the backward does not hide.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from paddlefit.catalog.gpus import GPU, get_gpu, load_gpus, resolve_gpus
from paddlefit.errors import CatalogError, UnknownNameError
from paddlefit.estimate.collectives import RING_EFFICIENCY
from paddlefit.estimate.fused import attention_note, flash_trace, fused_amp_note
from paddlefit.estimate.model_states import model_state_bytes
from paddlefit.estimate.perf_params import load_perf_params
from paddlefit.estimate.timing import host_floor_s
from paddlefit.plan.calibration import Calibration, load_calibrations
from paddlefit.plan.document import CpuFp32Memory, MemorySection, ModelSection, PhaseFitDoc, PlanAssumptions
from paddlefit.plan.explain import explain_rows
from paddlefit.plan.measure import ModelMeasure, measure_model
from paddlefit.plan.request import Plan, PlanRequest, Target, check_explain
from paddlefit.plan.rows import (
    CONV_WORKSPACE_BYTES,
    CUDA_CONTEXT_BYTES,
    AmpMemory,
    cpu_fixed_bytes,
    cpu_target,
    effective_precision,
    flash_runs,
    gpu_target,
    recommend,
    row_params,
    set_time_to_train,
)
from paddlefit.plan.runs_calibration import DeviceRuns, apply_runs, read_device_runs

# the planner's public entry point; its request, measurement and rows live in request/measure/rows
__all__ = ["build_plan"]


def build_plan(req: PlanRequest, progress: Any = None, runs: Mapping[str, DeviceRuns] | None = None) -> Plan:
    """Predict memory, FLOPs and speed of ``req`` on this CPU and every catalog GPU.

    Args:
        req: the request (see :class:`PlanRequest`; it validated its fields when built).
        progress: optional callable ``progress(message: str)`` for long steps (the CLI shows a spinner).
        runs: the recorded runs of each GPU by catalog name, that correct its row when ``req.use_runs``
            (:func:`~paddlefit.plan.runs_calibration.apply_runs`); None reads them from the user's run registry
            (:func:`~paddlefit.plan.runs_calibration.read_device_runs`).

    Returns:
        Plan with targets sorted: fitting targets first, fastest first; the CPU row is named ``cpu``.

    Raises:
        UnknownNameError: unknown model or GPU name.
        ModelError: the model cannot be imported/built, rejects its inputs, or is too large to probe and
            has no analytic model.
        InputSpecError: no inputs given for a model without defaults.
        CatalogError: malformed catalog or calibration file.
        PaddlefitError: an ``explain`` GPU that is not planned.
    """
    say = progress or (lambda msg: None)
    gpus_all = load_gpus(req.catalog_files)
    gpus = [] if req.cpu_only else resolve_gpus(req.gpus, gpus_all) if req.gpus else gpus_all
    calibrations = _calibrations(req, gpus_all)
    m = measure_model(req, say)
    b = req.batch_size
    targets = [cpu_target(req, m)]
    check_explain(req.explain, req.gpus, gpus_all)
    explain_for = {g.name for g in resolve_gpus(req.explain, gpus_all)}
    rt = _row_trace(req, m)
    rows, explain = _gpu_rows(req, m, rt, gpus, calibrations, explain_for)
    targets += rows
    if req.use_runs:
        if runs is None:  # the shell reads the user's run registry (the rows with a step time); apply_runs is pure
            runs = read_device_runs(t.name for t in rows if t.step_time_s == t.step_time_s)
        targets = [apply_runs(t, runs.get(t.name), req.model) for t in targets]
    targets = set_time_to_train(targets, req)
    targets.sort(key=lambda t: (not t.fits, -(t.samples_per_s if t.samples_per_s == t.samples_per_s else 0)))
    recommendation = recommend(targets, b)
    # the recommended row first (a tie within 1% can go to a card a little slower than the fastest)
    targets.sort(key=lambda t: t.name != recommendation.target)
    act_ratio, cast_bytes = rt.flash_amp(req.precision)
    model_doc, memory_doc = _model_doc(m), _memory_doc(req, m, act_ratio, cast_bytes, rt.notes)
    assumptions = _assumptions(req, m, rt, act_ratio, cast_bytes)
    return Plan(
        model=model_doc,
        batch_size=b,
        precision=req.precision.value,
        optimizer=req.optimizer.value,
        devices=req.devices,
        inputs=[str(s) for s in m.specs],
        memory=memory_doc,
        targets=targets,
        recommendation=recommendation,
        assumptions=assumptions,
        explain=explain,
    )


def _calibrations(req: PlanRequest, gpus_all: list[GPU]) -> dict[str, Calibration]:
    """``req``'s calibration files by lower-case catalog GPU name (an alias files under the catalog name; ``cpu``
    as is).

    Raises:
        CatalogError: a file names a device that is not a GPU of the catalog.
    """
    out: dict[str, Calibration] = {}
    for key, cal in load_calibrations(req.calibration_files).items():
        if key == "cpu":
            out[key] = cal
            continue
        try:  # an unknown device is an error, not ignored
            out[get_gpu(cal.device, gpus_all).name.lower()] = cal
        except UnknownNameError:
            raise CatalogError(
                f"Calibration `{cal.source}`: device {cal.device!r} is not a GPU of the catalog; "
                "rerun `paddlefit calibrate --device-name NAME` with a name from `paddlefit gpus`, "
                "or add the GPU with `--catalog FILE`."
            ) from None
    return out


@dataclass(frozen=True)
class _RowTrace:
    """The forward the GPU rows time, at the micro-batch: as traced (``ops``, ``amp``) and with each eager
    attention core as one flash-attention kernel (``flash_ops``, ``flash_amp``; ``blocks`` replaced, 0 when
    ``attention`` is not ``flash``); ``fwd_ops``: the forward ops the host floor counts (the probe's, or on the
    analytic path the trace's, so a model planned either way has a floor); ``notes``: the attention and AMP notes the
    model section says after the measurement's own."""

    ops: list[Any]
    amp: AmpMemory
    flash_ops: list[Any]
    flash_amp: AmpMemory
    blocks: int
    fwd_ops: int
    notes: tuple[str, ...] = ()


def _row_trace(req: PlanRequest, m: ModelMeasure) -> _RowTrace:
    """:class:`_RowTrace` of ``m``'s trace, with the attention and AMP notes of the model section."""
    b = req.batch_size
    amp, ops_b = AmpMemory(m.trace), m.trace.at(b)
    flash, blocks = flash_trace(m.trace) if req.attention == "flash" else (m.trace, 0)
    flash_amp, flash_ops = (AmpMemory(m.trace, flash), flash.at(b)) if blocks else (amp, ops_b)
    notes = [attention_note(blocks, m.trace)] if req.attention == "flash" else []
    if amp_note := fused_amp_note(m.trace, req.precision.value):
        notes.append(amp_note)
    return _RowTrace(
        ops_b, amp, flash_ops, flash_amp, blocks, m.fwd_ops or sum(o.cls != "view" for o in ops_b), tuple(notes)
    )


def _gpu_rows(
    req: PlanRequest,
    m: ModelMeasure,
    rt: _RowTrace,
    gpus: list[GPU],
    calibrations: dict[str, Calibration],
    explain_for: set[str],
) -> tuple[list[Target], dict[str, list[dict[str, Any]]]]:
    """One row per GPU (flash attention where the card runs it, with ``req.attention == "flash"``) and the
    ``--explain`` tables."""
    blocks = rt.blocks
    removed = sum(o.cls != "view" for o in rt.ops) - sum(o.cls != "view" for o in rt.flash_ops)
    published = load_perf_params()
    rows, explain = [], {}
    for gpu in gpus:
        cal = calibrations.get(gpu.name.lower())
        params = row_params(cal, published)
        why_not = flash_runs(gpu, effective_precision(gpu, req.precision)) if blocks else None
        use_flash = bool(blocks) and why_not is None
        host_s = host_floor_s(
            params, rt.fwd_ops - (removed if use_flash else 0), m.info.trainable_tensors, gpu.architecture
        )
        target, est = gpu_target(
            req,
            m,
            gpu,
            cal,
            published,
            host_s,
            rt.flash_amp if use_flash else rt.amp,
            rt.flash_ops if use_flash else rt.ops,
        )
        said = f"flash attention ({blocks} block{'s' if blocks > 1 else ''})" if use_flash else why_not
        if said:  # rows are frozen: a new row with the note
            target = replace(target, notes=(*target.notes, said))
        if gpu.name in explain_for:
            explain[gpu.name] = explain_rows(est, gpu, params, effective_precision(gpu, req.precision).value)
        rows.append(target)
    return rows, explain


def _model_doc(m: ModelMeasure) -> ModelSection:
    """The plan document's ``model`` section."""
    return ModelSection(
        name=m.ref.name,
        params=m.info.params,
        trainable_params=m.info.trainable_params,
        forward_flops_per_sample=m.fwd_flops_per_sample,
        train_flops_per_sample=m.train_flops_per_sample,
        loss=m.loss_doc,
        label=m.label_doc,
        gpu_only_ops=m.stand_ins,  # no CPU kernel: the probe ran paddlefit's references (fused_ref.py)
    )


def _memory_doc(
    req: PlanRequest, m: ModelMeasure, act_ratio: float, cast_bytes: float, row_notes: tuple[str, ...] = ()
) -> MemorySection:
    """The plan document's ``memory`` section: the request's precision's states and activations (bytes), the
    fp32 CPU figures, the phase fits and the probe's batches; its notes are ``m``'s, then ``row_notes``."""
    b = req.batch_size
    fixed = cpu_fixed_bytes(m, b)
    gpu_states = model_state_bytes(m.info, req.optimizer, req.precision)
    cpu_fp32 = CpuFp32Memory(
        m.states32.weights_bytes, m.states32.grads_bytes, m.states32.optimizer_bytes, m.act_bytes_per_sample, fixed
    )
    return MemorySection(
        method=m.method,
        weights_bytes=gpu_states.weights_bytes,
        grads_bytes=gpu_states.grads_bytes,
        optimizer_bytes=gpu_states.optimizer_bytes,
        activation_bytes_per_sample=m.act_bytes_per_sample * act_ratio,
        fixed_bytes=fixed * act_ratio + cast_bytes + (CONV_WORKSPACE_BYTES if m.has_conv else 0),
        precision_of_breakdown=req.precision.value,
        cpu_fp32=cpu_fp32,
        dominant_phase=m.dominant_phase,
        phases={p: PhaseFitDoc(fx, sl) for p, (fx, sl) in m.phase_fit_bytes.items()},
        phase_peak_bytes={
            p: max(fx + sl * b for q, (fx, sl) in m.phase_lines_bytes if q == p) for p in dict(m.phase_lines_bytes)
        },
        eval_batch_size=m.eval_batch_size,
        probe_batch_sizes=m.probe_batch_sizes,
        probe_max_rel_residual=m.max_rel_residual,
        notes=(*m.notes, *row_notes),
        lazy_build_failure=m.lazy_build_failure,
    )


def _assumptions(
    req: PlanRequest, m: ModelMeasure, rt: _RowTrace, act_ratio: float, cast_bytes: float
) -> PlanAssumptions:
    """The plan document's ``assumptions``: what every row took as given, with the GPU model's constants."""
    published = load_perf_params()
    return PlanAssumptions(
        safety_margin=req.safety_margin,
        tf32=req.tf32,
        tf32_means="fp32 matmul/conv on TF32 tensor cores where a GPU has them (Paddle's default)"
        if req.tf32
        else "fp32 matmul/conv on the FP32 CUDA cores (TF32 off: the job's `tf32: false`, --no-tf32)",
        amp_activation_factor=act_ratio,
        amp_cast_weight_bytes=cast_bytes,
        cuda_context_bytes=CUDA_CONTEXT_BYTES,
        conv_workspace_bytes=CONV_WORKSPACE_BYTES if m.has_conv else 0,
        gpu_model="per-kernel model (paddlefit.estimate.kernel_model): sum over kernels of max(GEMM tiles x "
        "waves / (unit peak x efficiency), bytes / (DRAM or L2 bandwidth x efficiency)) + kernel_s; "
        "constants fitted per op class on measured kernels (bench/gpu_kernels.py) and end-to-end "
        "runs (bench/gpu_fit.py)",
        gpu_model_params=dict(published.values),
        gpu_model_params_by_generation={g: dict(v) for g, v in published.by_generation.items()},
        gpu_model_params_source="paddlefit/catalog/data/gpu_perf_params.json ("
        f"{published.provenance.get('fitted_by', 'not fitted')}, "
        f"{published.provenance.get('date', '?')})",
        trace_ops=len(rt.ops),
        attention=req.attention,
        flash_attention_blocks=rt.blocks,
        trace_source=m.trace.source,
        allreduce="NCCL model (paddlefit.estimate.collectives: per-step latency, LL/LL128/Simple ramp, ring at "
        f"{RING_EFFICIENCY:.1%} of the link, NVLS on NVSwitch) of paddlefit train's 128 MiB fused buckets "
        "after the backward; DataParallel overlaps its 25 MB buckets with the backward: exposed = "
        "max(last 1 MB bucket, all buckets - backward)",
        host_op_s=published.values["host_op_s"],
        host_optimizer_s_per_tensor=published.values["host_step_s_per_tensor"],
        host_step_s=published.values["host_step_s"],
        host_floor_s=host_floor_s(published, rt.fwd_ops, m.info.trainable_tensors),
        host_floor="3 x forward ops x host_op_s + trainable tensors x host_step_s_per_tensor + host_step_s: "
        "constants of the GPU model (bench/host_overhead.py), or measured on the training host by "
        "paddlefit calibrate",
        cpu_threads=m.probe.threads if m.method == "cpu-probe" else None,
        cpu_thread_step_s={str(k): v for k, v in m.probe.thread_step_s.items()} if m.method == "cpu-probe" else {},
        omp_wait_policy=os.environ.get("OMP_WAIT_POLICY"),
        batch_size_is="per device (micro-batch); global batch = batch_size x devices",
    )
