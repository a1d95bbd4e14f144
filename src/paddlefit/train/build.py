"""Building a job for training on this rank: device, seeds, model, loss, data loader, LR schedule, optimizer, AMP.

``train``, ``profile`` and ``tune`` all build through :func:`build_job`, so what they measure is what train runs.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from paddlefit.errors import ModelError, PaddlefitError
from paddlefit.jobspec.spec import JobSpec, Precision
from paddlefit.train.data import ResumableBatchSampler, guard_single_process

__all__ = ["BuiltJob", "apply_tf32", "build_job", "build_optimizer", "build_schedule", "seed_all", "setup_device"]


def setup_device(spec: JobSpec, world: int, log: Callable[[str], None]) -> bool:
    """Select this rank's device and, multi-device, join the process group ``paddle.distributed.launch`` set up.

    On GPU the device is ``FLAGS_selected_gpus`` (set per worker by the launcher,
    ``python/paddle/distributed/launch/controllers/collective.py``). On CPU Paddle's intra-op threads are
    ``cpu_threads`` or this node's cores / its processes (``PADDLE_LOCAL_SIZE``). The job's ``tf32`` is applied
    (:func:`apply_tf32`) before any model runs.

    Returns:
        Whether this rank trains on a GPU.
    """
    import paddle

    from paddlefit.probe.memory import use_all_cores

    on_gpu = paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0
    apply_tf32(spec.tf32, on_gpu, log)
    if world > 1:
        paddle.distributed.init_parallel_env()
    if on_gpu:
        local = int(os.environ.get("FLAGS_selected_gpus", "0").split(",")[0])  # noqa: SIM112
        paddle.set_device(f"gpu:{local}")
        return True
    paddle.set_device("cpu")
    local_world = int(os.environ.get("PADDLE_LOCAL_SIZE", str(world)))
    cores = use_all_cores()
    if spec.cpu_threads and spec.cpu_threads * local_world > cores:
        log(
            f"warning: cpu_threads {spec.cpu_threads} x {local_world} process(es) on this node exceeds its {cores} "
            "cores; the threads will contend (leave it unset for cores / processes)."
        )
    paddle.base.core.set_num_threads(spec.cpu_threads or max(1, cores // max(1, local_world)))
    return False


def apply_tf32(tf32: bool | None, on_gpu: bool, log: Callable[[str], None]) -> None:
    """Set Paddle's TF32 switches for fp32 matmuls (cuBLAS) and convolutions (cuDNN) to ``tf32``; None leaves
    Paddle's default (on).

    The switches are ``paddle.base.core.set_cublas_switch`` / ``set_cudnn_switch``: Paddle
    ``paddle/fluid/pybind/pybind.cc`` binds them to ``SetAllowTF32Cublas`` / ``SetAllowTF32Cudnn``, process-wide
    globals (``paddle/phi/backends/context_pool.cc``) read when a GEMM or convolution runs (see
    :data:`paddlefit.estimate.kernels.TF32_OFF_SOURCE`). Paddle 3.3 exposes them in CPU builds too, where they change
    nothing; a build without them is told about only when it trains on a GPU.
    """
    if tf32 is None:
        return
    import paddle

    core = paddle.base.core
    setters = [getattr(core, name, None) for name in ("set_cublas_switch", "set_cudnn_switch")]
    if not all(setters):
        if on_gpu:
            log(
                f"warning: this Paddle build has no core.set_cublas_switch/set_cudnn_switch, so `tf32: "
                f"{str(tf32).lower()}` is not applied (export NVIDIA_TF32_OVERRIDE=0 turns TF32 off instead)."
            )
        return
    for set_switch in setters:
        set_switch(tf32)  # type: ignore[misc]


def seed_all(seed: int) -> None:
    """Seed Python's ``random``, NumPy's global generator and Paddle's generators with ``seed``."""
    import paddle

    random.seed(seed)
    np.random.seed(seed)
    paddle.seed(seed)


def build_schedule(spec: JobSpec, total_steps: int) -> Any:
    """The LR scheduler of ``spec.schedule`` over ``total_steps`` optimizer steps (``paddle.optimizer.lr``)."""
    from paddle.optimizer import lr as lr_mod

    s = spec.schedule
    decay_steps = max(1, total_steps - s.warmup_steps)
    if s.name == "cosine":
        sched = lr_mod.CosineAnnealingDecay(spec.lr, T_max=decay_steps, eta_min=s.min_lr)
    elif s.name == "step":
        sched = lr_mod.StepDecay(spec.lr, step_size=s.step_size, gamma=s.gamma)
    else:
        sched = lr_mod.LambdaDecay(spec.lr, lambda _step: 1.0)
    if s.warmup_steps:
        sched = lr_mod.LinearWarmup(sched, warmup_steps=s.warmup_steps, start_lr=0.0, end_lr=spec.lr)
    return sched


def build_optimizer(spec: JobSpec, parameters: Any, schedule: Any) -> Any:
    """The job's optimizer with ``learning_rate=schedule``: :func:`paddlefit.jobspec.optimizers.make_optimizer` of
    :func:`~paddlefit.jobspec.optimizers.optimizer_settings` (the factory ``plan``'s probe builds with too)."""
    from paddlefit.jobspec.optimizers import make_optimizer, optimizer_settings

    return make_optimizer(optimizer_settings(spec), parameters, schedule)


@dataclass
class BuiltJob:
    """Everything :func:`build_job` made for one rank.

    Attributes:
        steps_per_epoch: optimizer steps per epoch (:func:`paddlefit.job.length.steps_per_epoch`, the sampler's).
        total_steps: optimizer steps of the run (:func:`paddlefit.job.length.job_steps`).
        global_batch: samples per optimizer step over all ranks.
        amp: AMP is on (a GPU and an AMP precision); ``amp_dtype`` is ``float16`` or ``bfloat16``.
        scaler: ``paddle.amp.GradScaler`` for fp16 AMP, else None.
        data_errors: dataset/collate errors of the single-process loader (see
            :func:`paddlefit.train.data.guard_single_process`).
    """

    on_gpu: bool
    model: Any
    dp_model: Any
    train_ds: Any
    eval_ds: Any
    input_specs: list[Any]
    job_loss: Any
    eval_loss: Any
    sampler: ResumableBatchSampler
    loader: Any
    steps_per_epoch: int
    total_steps: int
    global_batch: int
    schedule: Any
    optimizer: Any
    amp: bool
    amp_dtype: str
    scaler: Any
    data_errors: list[str] = field(default_factory=list)


def _build_model(spec: JobSpec) -> Any:
    from paddlefit.models.build import build, failing_layer
    from paddlefit.models.zoo import resolve_model

    ref = resolve_model(spec.model, dict(spec.model_args))
    try:
        model = build(ref.factory)
    except ModelError as exc:
        raise ModelError(f"`model: {spec.model}`: {exc}.") from None
    except (Exception, SystemExit) as exc:
        where = failing_layer(exc)
        raise ModelError(
            f"`model: {spec.model}` could not be built with model_args {dict(spec.model_args)}"
            f"{' in ' + where if where else ''}: {type(exc).__name__}: {str(exc)[:300]}"
        ) from None
    if not any(not p.stop_gradient for p in model.parameters()):
        raise ModelError(f"`model: {spec.model}` has no trainable parameters; nothing to train.")
    return model


def build_job(spec: JobSpec, world: int, rank: int, on_gpu: bool, log: Callable[[str], None]) -> BuiltJob:
    """Build ``spec`` for rank ``rank`` of ``world`` (after :func:`setup_device` and :func:`seed_all`).

    Raises:
        PaddlefitError: no ``data.train``; a dataset smaller than one global batch; neither ``epochs`` nor
            ``max_steps``; too many DataLoader workers; sparse gradients with ``oom_backoff`` on several devices.
        ModelError: the model cannot be built or has no trainable parameters.
    """
    import paddle

    from paddlefit.examples.datasets import resolve_dataset
    from paddlefit.job.length import job_steps
    from paddlefit.models.calling import JobLoss

    if not spec.data.train:
        raise PaddlefitError(
            "the job spec has no `data.train`; set it to a dataset factory "
            "(e.g. `digits` or `package.module:function`)."
        )
    train_ds = resolve_dataset(spec.data.train, spec.data.train_args, "data.train")
    eval_ds = resolve_dataset(spec.data.eval, spec.data.eval_args, "data.eval") if spec.data.eval else None
    model = _build_model(spec)
    sampler = ResumableBatchSampler(
        train_ds, spec.batch_size, world, rank, spec.data.shuffle, spec.data.drop_last, spec.seed, spec.grad_accum_steps
    )
    global_batch = sampler.global_batch
    steps_per_epoch = (
        sampler.steps
    )  # paddlefit.job.length.steps_per_epoch: it depends on the layout only by global_batch
    if steps_per_epoch < 1:
        raise PaddlefitError(
            f"`data.train` has {len(train_ds)} samples, fewer than one global batch ({spec.batch_size} x {world} "
            f"devices x {spec.grad_accum_steps} accumulation); lower `batch_size` or `grad_accum_steps`."
        )
    steps = job_steps(steps_per_epoch, spec.epochs, spec.max_steps)
    if steps is None:
        raise PaddlefitError("the job spec sets neither `epochs` nor `max_steps`; set one (or pass --max-steps).")
    cap = max(64, 8 * (os.cpu_count() or 1))
    if spec.data.num_workers > cap:
        raise PaddlefitError(
            f"`data.num_workers: {spec.data.num_workers}` would start that many processes per "
            f"device on {os.cpu_count()} cores; use at most {cap} (usually <= cores)."
        )
    loader_kwargs: dict[str, Any] = {
        "num_workers": spec.data.num_workers,
        "use_shared_memory": spec.data.use_shared_memory,
    }
    errors: list[str] = []
    dataset = train_ds
    if spec.data.num_workers > 0:
        loader_kwargs.update(prefetch_factor=spec.data.prefetch_factor, persistent_workers=spec.data.persistent_workers)
    else:
        dataset, loader_kwargs["collate_fn"] = guard_single_process(train_ds, errors)
    loader = paddle.io.DataLoader(dataset, batch_sampler=sampler, **loader_kwargs)
    schedule = build_schedule(spec, steps)
    optimizer = build_optimizer(spec, model.parameters(), schedule)
    amp = spec.precision.is_amp and on_gpu
    if spec.precision.is_amp and not on_gpu:
        log(
            f"warning: precision {spec.precision.value} has no effect on CPU (paddle.amp.auto_cast only acts on "
            "CUDA/XPU devices); training in fp32."
        )
    amp_dtype = "bfloat16" if spec.precision in (Precision.BF16_O1, Precision.BF16_O2) else "float16"
    if amp and spec.precision.level == "O2":
        model, optimizer = paddle.amp.decorate(models=model, optimizers=optimizer, level="O2", dtype=amp_dtype)
    scaler = paddle.amp.GradScaler() if amp and amp_dtype == "float16" else None
    if world > 1 and spec.oom_backoff and any(getattr(m, "_sparse", False) for m in model.sublayers()):
        # the back-off all-reduces with fused_allreduce_gradients, which refuses sparse gradients
        # (python/paddle/distributed/fleet/utils/hybrid_parallel_util.py: "doesn't support sparse parameters")
        raise PaddlefitError(
            "the model has sparse embedding gradients (Embedding(sparse=True)); on several "
            "devices set `oom_backoff: false` (DataParallel then all-reduces them itself)."
        )
    return BuiltJob(
        on_gpu=on_gpu,
        model=model,
        dp_model=paddle.DataParallel(model) if world > 1 else model,
        train_ds=train_ds,
        eval_ds=eval_ds,
        input_specs=spec.input_specs(),
        job_loss=JobLoss(spec.loss, spec.label_arg),
        eval_loss=JobLoss(spec.loss, spec.label_arg),  # eval outputs may differ (no auxiliary heads)
        sampler=sampler,
        loader=loader,
        steps_per_epoch=steps_per_epoch,
        total_steps=steps,
        global_batch=global_batch,
        schedule=schedule,
        optimizer=optimizer,
        amp=amp,
        amp_dtype=amp_dtype,
        scaler=scaler,
        data_errors=errors,
    )
