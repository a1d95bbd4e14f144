"""The training loop: one process per device, data parallel through ``paddle.DataParallel``.

Runs in-process for one device and inside each worker started by ``paddle.distributed.launch`` for more
(:mod:`paddlefit.train.launcher`). Per optimizer step:

1. ``grad_accum_steps`` micro-batches of ``batch_size`` samples each; forward under ``paddle.amp.auto_cast`` when
   AMP is on (GPU only), loss divided by ``grad_accum_steps``, backward (through ``GradScaler`` for fp16).
   Non-final micro-steps run under ``DataParallel.no_sync()`` so gradients are all-reduced once per step.
   Out of memory (``oom_backoff``, on by default): every rank redoes the step with each batch split in two
   (micro-batch halved, accumulation doubled, global batch unchanged), down to micro-batch 1; see
   :meth:`Trainer._train_step`.
2. One 2-element all-reduce (MAX) makes every rank agree on "a stop signal arrived somewhere" and "the loss is
   not finite somewhere", so all ranks stop at the same step and none waits forever in a collective.
3. Optimizer step, LR scheduler step, metrics line (rank 0), checkpoint when due (rank 0 writes; the others
   wait at a barrier only when the run stops).

Exit codes (``RunResult.exit_code``): 0 finished; 143 stopped by SIGTERM/SIGINT after saving a checkpoint
(128 + SIGTERM: Kubeflow's ``restartPolicy: ExitCode`` and most schedulers retry 128-255, treat 1-127 as
permanent); 3 the loss became NaN/Inf (no checkpoint of the bad state is written); 4 the budget (``budget.max_hours``
/ ``max_cost_usd``) was reached and a checkpoint saved (not retried: 1-127); 2 bad input.

Budget and ``checkpoint.auto_interval`` use wall time since the Trainer was created plus the wall time of earlier
runs of the same run directory (``totals.wall_s`` in the checkpoint). The auto interval is Daly's optimum
(:func:`paddlefit.plan.checkpoint_interval.daly_interval_s`) for the measured write time of the last checkpoint.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import math
import os
import pickle
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from paddlefit.errors import ModelError, PaddlefitError
from paddlefit.fileio import atomic_write_text
from paddlefit.spec import JobSpec, OptimizerName, Precision
from paddlefit.train.checkpoint import CheckpointStore

EXIT_OK = 0
EXIT_NONFINITE = 3
EXIT_BUDGET = 4
EXIT_REQUEUE = 143

STATUS_FILE = "status.json"
SUMMARY_FILE = "summary.json"
METRICS_FILE = "metrics.jsonl"
SPEC_FILE = "job.yaml"


@dataclass
class TrainOptions:
    """Command-line options of one run (the job spec holds the rest).

    Attributes:
        run_dir: where checkpoints, metrics.jsonl, summary.json and status.json go.
        resume: ``auto`` (newest valid checkpoint, if any), ``never``, or a checkpoint directory path.
        progress: show a progress bar (rank 0, terminal only) or log lines every ``log_every`` steps.
        log: where log lines go (default stderr).
    """

    run_dir: Path
    resume: str = "auto"
    progress: bool = True
    log: Callable[[str], None] = field(default=lambda msg: print(msg, file=sys.stderr, flush=True))


@dataclass
class RunResult:
    """What a run ended with: exit code, reason and the summary written to ``summary.json`` (rank 0)."""

    exit_code: int
    reason: str
    step: int
    summary: dict[str, Any] | None = None


class NonFiniteLossError(PaddlefitError):
    """The training loss became NaN or Inf; the run stops without checkpointing the bad state."""

    exit_code = EXIT_NONFINITE


class _StopFlag:
    """Set by SIGTERM/SIGINT; the loop checks it once per optimizer step."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._old[sig] = signal.signal(sig, self._handler)

    def restore(self) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)

    def _handler(self, signum: int, _frame: Any) -> None:
        self.signum = signum


class ResumableBatchSampler:
    """``paddle.io.DistributedBatchSampler`` with a seeded shuffle per epoch and a start position.

    The shuffle of epoch ``e`` uses ``np.random.RandomState(seed * 1_000_003 + e)`` (Paddle shuffles with
    ``RandomState(epoch)``, ``python/paddle/io/dataloader/batch_sampler.py``), so epoch order depends only on
    (seed, epoch) and a resumed run sees the same batches. ``skip`` batches are dropped at the start of the next
    iteration (the ones consumed before the checkpoint).
    """

    def __init__(self, dataset: Any, batch_size: int, num_replicas: int, rank: int, shuffle: bool,
                 drop_last: bool, seed: int) -> None:  # fmt: skip
        from paddle.io import DistributedBatchSampler

        self._inner = DistributedBatchSampler(dataset, batch_size=batch_size, num_replicas=num_replicas, rank=rank,
                                              shuffle=shuffle, drop_last=drop_last)  # fmt: skip
        self.seed = seed
        self.epoch = 0
        self.skip = 0

    def set_position(self, epoch: int, skip: int) -> None:
        """Next iteration yields epoch ``epoch`` from batch ``skip`` on."""
        self.epoch, self.skip = epoch, skip

    def __iter__(self) -> Iterator[list[int]]:
        self._inner.set_epoch((self.seed * 1_000_003 + self.epoch) % 2**32)
        skip, self.skip = self.skip, 0
        for i, batch in enumerate(self._inner):
            if i >= skip:
                yield batch

    def __len__(self) -> int:
        return len(self._inner)


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


def resolve_loss(name: str | None) -> Callable[[Any, Any], Any]:
    """The job's loss function (:func:`paddlefit.models.calling.resolve_loss`; kept here for older imports)."""
    from paddlefit.models.calling import resolve_loss as resolve

    return resolve(name)


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
    """The optimizer of ``spec.optimizer`` with ``learning_rate=schedule``, ``spec.weight_decay`` and, for Adam/AdamW,
    ``spec.lazy_mode``."""
    import paddle

    wd = spec.weight_decay  # None: Paddle's default (no decay)
    if spec.optimizer is OptimizerName.SGD:
        return paddle.optimizer.SGD(learning_rate=schedule, parameters=parameters, weight_decay=wd)
    if spec.optimizer is OptimizerName.MOMENTUM:
        return paddle.optimizer.Momentum(learning_rate=schedule, momentum=0.9, parameters=parameters, weight_decay=wd)
    if spec.optimizer is OptimizerName.ADAMW:
        # AdamW's own default decay is 0.01 (python/paddle/optimizer/adamw.py)
        return paddle.optimizer.AdamW(learning_rate=schedule, parameters=parameters,
                                      weight_decay=0.01 if wd is None else wd, lazy_mode=spec.lazy_mode)  # fmt: skip
    return paddle.optimizer.Adam(learning_rate=schedule, parameters=parameters, weight_decay=wd,
                                 lazy_mode=spec.lazy_mode)  # fmt: skip


def peak_memory_bytes(on_gpu: bool) -> int:
    """Peak allocated bytes of Paddle's allocator in this process since the last reset, as Paddle reports it:
    ``paddle.device.cuda.max_memory_allocated()`` on GPU (excludes the CUDA context), the host allocator's
    ``Allocated`` peak on CPU. Under-reports once a DataLoader thread allocates: see :class:`PeakTracker`."""
    import paddle

    if on_gpu:
        return int(paddle.device.cuda.max_memory_allocated())
    return int(paddle.base.core.host_memory_stat_peak_value("Allocated", 0))


class PeakTracker:
    """The allocator's peak over a run, across threads.

    Paddle keeps its memory statistics per thread (``paddle/phi/core/memory/stats.h``, ``Stat::Update``): the
    process-wide peak is raised only when the allocating thread exceeds its *own* previous high. A DataLoader's
    reader thread allocates every batch and the training thread frees them, so the training thread's own count
    drifts below its early high and its later highs (an evaluation pass, a longer batch) are never recorded.
    Resetting the peak (which restarts the high from the current value) at every step boundary and keeping the
    largest reading restores them. Measured: PP-LCNet evaluating at batch 200 after 6 steps peaked at 17.40 MB;
    Paddle's counter without resets said 12.99 MB for the whole run.
    """

    def __init__(self, on_gpu: bool) -> None:
        self.on_gpu = on_gpu
        self.best = 0

    def checkpoint(self) -> None:
        """Fold the peak since the last checkpoint into the run's and restart Paddle's high from now."""
        import paddle

        self.best = max(self.best, peak_memory_bytes(self.on_gpu))
        if self.on_gpu:
            paddle.device.cuda.reset_max_memory_allocated()
        else:
            paddle.base.core.host_memory_stat_reset_peak_value("Allocated", 0)

    def peak(self) -> int:
        """The run's peak so far, bytes."""
        return max(self.best, peak_memory_bytes(self.on_gpu))


def _to_jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_to_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if hasattr(obj, "numpy"):
        return np.asarray(obj.numpy()).tolist()
    return obj


def write_status(run_dir: Path, exit_code: int, reason: str, step: int) -> None:
    """Rank 0: record how the run ended (read by the parent of a multi-device run), atomically."""
    token = os.environ.get("PADDLEFIT_RUN_TOKEN", "")
    atomic_write_text(run_dir / STATUS_FILE, json.dumps({"exit_code": exit_code, "reason": reason, "step": step,
                                                          "token": token}) + "\n", option="--run-dir")  # fmt: skip


class Trainer:
    """Train ``spec`` in this process (one rank of a data-parallel job when launched with more than one).

    Args:
        spec: the validated job spec.
        opts: run directory, resume mode, step limit, progress.

    Raises (from :meth:`run`):
        PaddlefitError: bad datasets/model/loss, a dataset too small for one global batch, or a resume checkpoint
            that does not verify or belongs to a different global batch.
        CheckpointError: a checkpoint could not be written (disk full, unwritable run dir).
    """

    def __init__(self, spec: JobSpec, opts: TrainOptions) -> None:
        self.spec = spec
        self.opts = opts
        self.run_dir = Path(opts.run_dir)
        self.world = int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))
        self.rank = int(os.environ.get("PADDLE_TRAINER_ID", "0"))
        self.is_writer = self.rank == 0
        self.store = CheckpointStore(self.run_dir / "checkpoints", keep_last=spec.checkpoint.keep_last)
        self.stop = _StopFlag()
        if spec.budget.max_cost_usd is not None and spec.budget.price_usd_per_hour is None:
            raise PaddlefitError("budget.max_cost_usd needs the job's price: budget.price_usd_per_hour in the spec, or "
                                 "`train --price-per-hour USD` / `--instance TYPE`.")  # fmt: skip
        self.wall_start = time.monotonic()
        self.wall_prior = 0.0  # wall seconds of earlier runs of this run directory (from the checkpoint)
        self.ckpt_interval_s: float | None = None  # auto_interval: Daly interval after the first measured write
        self.ckpt_write_s: float | None = None
        self.micro_split = 1  # each loaded batch is split this many ways after out-of-memory back-offs
        self.oom_backoffs = 0

    def wall_s(self) -> float:
        """Wall seconds of this run directory's training so far: earlier runs + this process since start-up."""
        return self.wall_prior + time.monotonic() - self.wall_start

    def over_budget(self) -> str | None:
        """Why the budget is used up (``max_hours`` or ``max_cost_usd`` at ``price_usd_per_hour``), else None."""
        b = self.spec.budget
        hours = self.wall_s() / 3600
        if b.max_hours is not None and hours >= b.max_hours:
            return f"budget: {hours:.4g} h of wall time reached max_hours {b.max_hours:g}"
        if b.max_cost_usd is not None and b.price_usd_per_hour is not None and \
                hours * b.price_usd_per_hour >= b.max_cost_usd:  # fmt: skip
            return (f"budget: {hours:.4g} h x {b.price_usd_per_hour:g} USD/h = {hours * b.price_usd_per_hour:.4g} USD "
                    f"reached max_cost_usd {b.max_cost_usd:g}")  # fmt: skip
        return None

    # ---- setup -------------------------------------------------------------------------------------------
    def _log(self, msg: str) -> None:
        if self.is_writer:
            self.opts.log(msg)

    def _setup_device(self) -> None:
        import paddle

        from paddlefit.estimate.memory import use_all_cores

        self.on_gpu = paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0
        if self.world > 1:
            paddle.distributed.init_parallel_env()
        if self.on_gpu:
            # paddle.distributed.launch sets FLAGS_selected_gpus per worker (launch/controllers/collective.py)
            local = int(os.environ.get("FLAGS_selected_gpus", "0").split(",")[0])  # noqa: SIM112
            paddle.set_device(f"gpu:{local}")
        else:
            paddle.set_device("cpu")
            local_world = int(os.environ.get("PADDLE_LOCAL_SIZE", str(self.world)))
            cores = use_all_cores()
            if self.spec.cpu_threads and self.spec.cpu_threads * local_world > cores:
                self._log(f"warning: cpu_threads {self.spec.cpu_threads} x {local_world} process(es) on this node "
                          f"exceeds its {cores} cores; the threads will contend (leave it unset for cores / "
                          "processes).")  # fmt: skip
            paddle.base.core.set_num_threads(self.spec.cpu_threads or max(1, cores // max(1, local_world)))

    def _seed(self) -> None:
        import paddle

        random.seed(self.spec.seed)
        np.random.seed(self.spec.seed)
        paddle.seed(self.spec.seed)

    def _build(self) -> None:
        import paddle

        from paddlefit.datasets import resolve_dataset
        from paddlefit.models.zoo import resolve_model

        spec = self.spec
        self.train_ds = resolve_dataset(spec.data.train, spec.data.train_args, "data.train") if spec.data.train \
            else None  # fmt: skip
        if self.train_ds is None:
            raise PaddlefitError("the job spec has no `data.train`; set it to a dataset factory "
                                 "(e.g. `digits` or `package.module:function`).")  # fmt: skip
        self.eval_ds = resolve_dataset(spec.data.eval, spec.data.eval_args, "data.eval") if spec.data.eval else None
        ref = resolve_model(spec.model, dict(spec.model_args))
        from paddlefit.models.build import build, failing_layer
        from paddlefit.models.calling import JobLoss

        try:
            self.model = build(ref.factory)
        except ModelError as exc:
            raise ModelError(f"`model: {spec.model}`: {exc}.") from None
        except (Exception, SystemExit) as exc:
            where = failing_layer(exc)
            raise ModelError(f"`model: {spec.model}` could not be built with model_args {dict(spec.model_args)}"
                             f"{' in ' + where if where else ''}: {type(exc).__name__}: {str(exc)[:300]}") from None
        if not any(not p.stop_gradient for p in self.model.parameters()):
            raise ModelError(f"`model: {spec.model}` has no trainable parameters; nothing to train.")
        self.input_specs = spec.input_specs()
        self.job_loss = JobLoss(spec.loss, spec.label_arg)
        self.eval_loss = JobLoss(spec.loss, spec.label_arg)  # eval outputs may differ (no auxiliary heads)
        self.eval_split = 1  # each eval batch is split this many ways after out-of-memory back-offs
        self.sampler = ResumableBatchSampler(self.train_ds, spec.batch_size, self.world, self.rank,
                                             spec.data.shuffle, spec.data.drop_last, spec.seed)  # fmt: skip
        batches = len(self.sampler)
        self.global_batch = spec.batch_size * self.world * spec.grad_accum_steps
        self.steps_per_epoch = batches // spec.grad_accum_steps
        if self.steps_per_epoch < 1:
            raise PaddlefitError(
                f"`data.train` has {len(self.train_ds)} samples, fewer than one global batch "
                f"({spec.batch_size} x {self.world} devices x {spec.grad_accum_steps} accumulation); lower "
                "`batch_size` or `grad_accum_steps`.")  # fmt: skip
        limits = []
        if spec.epochs is not None:
            limits.append(max(1, round(spec.epochs * self.steps_per_epoch)))
        if spec.max_steps is not None:
            limits.append(spec.max_steps)
        if not limits:
            raise PaddlefitError("the job spec sets neither `epochs` nor `max_steps`; set one (or pass --max-steps).")
        self.total_steps = min(limits)
        cap = max(64, 8 * (os.cpu_count() or 1))
        if spec.data.num_workers > cap:
            raise PaddlefitError(f"`data.num_workers: {spec.data.num_workers}` would start that many processes per "
                                 f"device on {os.cpu_count()} cores; use at most {cap} (usually <= cores).")
        loader_kwargs: dict[str, Any] = {"num_workers": spec.data.num_workers,
                                         "use_shared_memory": spec.data.use_shared_memory}  # fmt: skip
        self.data_errors: list[str] = []
        dataset = self.train_ds
        if spec.data.num_workers > 0:
            loader_kwargs.update(prefetch_factor=spec.data.prefetch_factor,
                                 persistent_workers=spec.data.persistent_workers)  # fmt: skip
        else:
            dataset, loader_kwargs["collate_fn"] = _guard_single_process(self.train_ds, self.data_errors)
        self.loader = paddle.io.DataLoader(dataset, batch_sampler=self.sampler, **loader_kwargs)
        self.schedule = build_schedule(spec, self.total_steps)
        self.optimizer = build_optimizer(spec, self.model.parameters(), self.schedule)
        self.amp = spec.precision.is_amp and self.on_gpu
        if spec.precision.is_amp and not self.on_gpu:
            self._log(f"warning: precision {spec.precision.value} has no effect on CPU (paddle.amp.auto_cast only "
                      "acts on CUDA/XPU devices); training in fp32.")  # fmt: skip
        self.amp_dtype = "bfloat16" if spec.precision in (Precision.BF16_O1, Precision.BF16_O2) else "float16"
        if self.amp and spec.precision.level == "O2":
            self.model, self.optimizer = paddle.amp.decorate(models=self.model, optimizers=self.optimizer,
                                                             level="O2", dtype=self.amp_dtype)  # fmt: skip
        self.scaler = paddle.amp.GradScaler() if self.amp and self.amp_dtype == "float16" else None
        if self.world > 1 and spec.oom_backoff and any(getattr(m, "_sparse", False) for m in self.model.sublayers()):
            # the back-off all-reduces with fused_allreduce_gradients, which refuses sparse gradients
            # (python/paddle/distributed/fleet/utils/hybrid_parallel_util.py: "doesn't support sparse parameters")
            raise PaddlefitError("the model has sparse embedding gradients (Embedding(sparse=True)); on several "
                                 "devices set `oom_backoff: false` (DataParallel then all-reduces them itself).")
        self.dp_model = paddle.DataParallel(self.model) if self.world > 1 else self.model

    # ---- checkpoints -------------------------------------------------------------------------------------
    def _trainer_state(self) -> dict[str, Any]:
        return {
            "step": self.step, "epoch": self.epoch, "batch_in_epoch": self.pos,
            "global_batch": self.global_batch, "batch_size": self.spec.batch_size, "devices": self.world,
            "grad_accum_steps": self.spec.grad_accum_steps, "micro_batch_split": self.micro_split,
            "seed": self.spec.seed, "total_steps": self.total_steps,
            "scheduler": _to_jsonable(self.schedule.state_dict()),
            "scaler": _to_jsonable(self.scaler.state_dict()) if self.scaler else None,
            "totals": {**self.totals, "wall_s": self.wall_s()}, "last_loss": self.last_loss,
        }  # fmt: skip

    def _save(self) -> Path:
        import paddle

        def write(tmp: Path) -> None:
            paddle.save(self.model.state_dict(), str(tmp / "model.pdparams"))
            paddle.save(self.optimizer.state_dict(), str(tmp / "optimizer.pdopt"))
            (tmp / "trainer.json").write_text(json.dumps(self._trainer_state(), indent=1), encoding="utf-8")
            rng = {"python": random.getstate(), "numpy": np.random.get_state(), "paddle": paddle.get_rng_state()}
            with open(tmp / "rng.pkl", "wb") as f:
                pickle.dump(rng, f)

        t0 = time.monotonic()
        path = self.store.save(self.step, write, meta={"spec_model": self.spec.model})
        self.ckpt_write_s = time.monotonic() - t0
        if self.spec.checkpoint.auto_interval:
            self._set_auto_interval(self.ckpt_write_s)
        self.last_ckpt_time = time.monotonic()
        self.last_ckpt_step = self.step
        return path

    def _set_auto_interval(self, write_s: float) -> None:
        from paddlefit.plan.checkpoint_interval import daly_interval_s, young_interval_s

        mtbi = 3600.0 / self.spec.checkpoint.interruptions_per_hour
        delta = max(write_s, 1e-3)
        new = daly_interval_s(delta, mtbi)
        if self.ckpt_interval_s is None or abs(new - self.ckpt_interval_s) > 0.25 * self.ckpt_interval_s:
            self._log(f"checkpoint interval (auto): writing took {write_s:.3f} s; Daly interval for one interruption "
                      f"per {mtbi / 3600:,.1f} h = {new:.0f} s (Young {young_interval_s(delta, mtbi):.0f} s)")
        self.ckpt_interval_s = new

    def _choose_resume(self) -> Path | None:
        mode = self.opts.resume
        if mode == "never":
            return None
        if mode == "auto":
            return self.store.latest_valid(warn=lambda m: self._log(f"warning: {m}"))
        from paddlefit.train.checkpoint import CheckpointError, verify

        path = Path(mode)
        problem = verify(path) if path.is_dir() else "not a directory"
        if problem:
            raise CheckpointError(f"`--resume {mode}`: {problem}; pass another checkpoint or `--resume auto`.")
        return path

    def _agree_on_resume(self) -> Path | None:
        """Rank 0 chooses; the step is broadcast so every rank loads the same checkpoint."""
        import paddle

        path = self._choose_resume() if self.is_writer or self.world == 1 else None
        if self.world == 1:
            return path
        t = paddle.to_tensor([int(path.name.split("-")[1]) if path else -1], dtype="int64")
        paddle.distributed.broadcast(t, src=0)
        step = int(t.item())
        if step < 0:
            return None
        return path if path is not None else (Path(self.opts.resume) if self.opts.resume not in ("auto", "never")
                                              else self.store.path_for(step))  # fmt: skip

    def _load(self, path: Path) -> None:
        """Restore a checkpoint; any failure is a CheckpointError naming the checkpoint."""
        from paddlefit.train.checkpoint import CheckpointError

        try:
            self._load_unchecked(path)
        except PaddlefitError:
            raise
        except Exception as exc:
            raise CheckpointError(f"checkpoint {path} cannot be loaded into this job ({type(exc).__name__}: "
                                  f"{_first_line(exc, 200)}); is it from another model or paddlefit version? Pass "
                                  "another `--resume` checkpoint or start fresh with `--resume never`.") from None

    def _load_unchecked(self, path: Path) -> None:
        import paddle

        state = json.loads((path / "trainer.json").read_text(encoding="utf-8"))
        if state["global_batch"] != self.global_batch:
            raise PaddlefitError(
                f"checkpoint {path} was trained with global batch {state['global_batch']} ({state['batch_size']} x "
                f"{state['devices']} devices x {state['grad_accum_steps']} accumulation), this run has "
                f"{self.global_batch}; keep the global batch or start fresh with `--resume never`.")  # fmt: skip
        if state.get("total_steps") not in (None, self.total_steps):
            self._log(f"warning: this run is {self.total_steps} steps long, the checkpoint's run was "
                      f"{state['total_steps']}: the LR schedule now spans {self.total_steps} steps, so the result "
                      "will differ from an uninterrupted run of either length.")  # fmt: skip
        missing, unexpected = self.model.set_state_dict(paddle.load(str(path / "model.pdparams")))
        if missing or unexpected:
            raise PaddlefitError(f"checkpoint {path} does not match `model: {self.spec.model}` (missing "
                                 f"{list(missing)[:3]}, unexpected {list(unexpected)[:3]}); pass another `--resume` "
                                 "checkpoint or start fresh with `--resume never`.")  # fmt: skip
        self.optimizer.set_state_dict(paddle.load(str(path / "optimizer.pdopt")))
        self.schedule.set_state_dict(state["scheduler"])
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        with open(path / "rng.pkl", "rb") as f:
            rng = pickle.load(f)  # our own file, verified against its manifest sha256
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])
        paddle.set_rng_state(rng["paddle"])
        step, epoch, pos = int(state["step"]), int(state["epoch"]), int(state["batch_in_epoch"])
        if step < 0 or epoch < 0 or not 0 <= pos <= self.steps_per_epoch * self.spec.grad_accum_steps:
            raise PaddlefitError(f"checkpoint {path}: trainer.json position (step {step}, epoch {epoch}, micro-batch "
                                 f"{pos}) is impossible for this job; pass another checkpoint.")  # fmt: skip
        split = state.get("micro_batch_split", 1)
        if not isinstance(split, int) or split < 1 or split & (split - 1) or split > 2 * self.spec.batch_size:
            raise PaddlefitError(f"checkpoint {path}: trainer.json micro_batch_split {split!r} is not a power of 2 "
                                 f"up to 2 x batch_size; pass another checkpoint.")  # fmt: skip
        self.micro_split = split
        if split > 1:
            self._log(f"the checkpoint's run backed off after running out of memory: continuing with micro-batch "
                      f"{self.micro_batch_size()} x {self.spec.grad_accum_steps * split} accumulation")
        self.step, self.epoch, self.pos = step, epoch, pos
        self.totals.update(state.get("totals", {}))
        self.wall_prior = float(self.totals.pop("wall_s", 0.0))
        self.last_loss = state.get("last_loss")

    def _truncate_metrics(self) -> None:
        """Resumed run: drop metric lines after the checkpoint's step so metrics.jsonl reads as one run."""
        path = self.run_dir / METRICS_FILE
        if not path.exists():
            return
        kept = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                if json.loads(line).get("step", 0) <= self.step:
                    kept.append(line)
            except ValueError:
                continue  # a line cut by a kill
        atomic_write_text(path, "".join(k + "\n" for k in kept), option="--run-dir")

    # ---- the loop ----------------------------------------------------------------------------------------
    def _agree(self, stop: bool, nonfinite: bool, budget: bool) -> tuple[bool, bool, bool]:
        if self.world == 1:
            return stop, nonfinite, budget
        import paddle

        t = paddle.to_tensor([float(stop), float(nonfinite), float(budget)], dtype="float32")
        paddle.distributed.all_reduce(t, op=paddle.distributed.ReduceOp.MAX)
        a, b, c = t.numpy().tolist()
        return a > 0, b > 0, c > 0

    def _barrier(self) -> None:
        if self.world > 1:
            import paddle

            paddle.distributed.barrier()

    def _autocast(self) -> Any:
        import paddle

        if not self.amp:
            return contextlib.nullcontext()
        return paddle.amp.auto_cast(level=self.spec.precision.level, dtype=self.amp_dtype)

    def _train_step(self, it: Iterator[Any]) -> tuple[float, float]:
        """One optimizer step's micro-batches: forward and backward, gradients all-reduced once. Returns
        (mean loss over the step's samples, seconds waiting for data).

        With ``oom_backoff`` an out-of-memory error (Paddle raises ``MemoryError`` for its ResourceExhausted
        error: "Out of memory error on GPU ...", or "Fail to alloc memory" from the CPU allocator,
        ``paddle/phi/core/memory/allocation/``) on any rank makes every rank drop the step's gradients, split each
        loaded batch into twice as many micro-batches (accumulation doubles, the global batch is unchanged) and
        redo the step on the same batches. Multi-device, the ranks learn of each other's error in one MAX
        all-reduce, which is why backward then runs under ``no_sync()`` for every micro-batch and the gradients
        are all-reduced afterwards (``fused_allreduce_gradients``, PaddleNLP's pattern for accumulation): a rank
        that failed mid-backward would otherwise leave the others waiting in DataParallel's bucket all-reduce.
        """
        accum = self.spec.grad_accum_steps
        backoff = self.spec.oom_backoff
        sync_after = self.world > 1 and backoff
        wait = 0.0
        batches: list[Any] = []  # this step's batches, kept so a back-off redoes the step on the same samples
        while True:
            weighted: list[tuple[Any, float]] = []
            failed = None
            try:
                for micro in range(accum):
                    if micro == len(batches):
                        t = time.perf_counter()
                        batches.append(self._next_batch(it))
                        wait += time.perf_counter() - t
                    weighted += self._micro_batches(self._as_batch(batches[micro]), accum, last=micro == accum - 1,
                                                    sync_after=sync_after)  # fmt: skip
            except _OutOfMemory as exc:
                failed = str(exc)
            failed_rank = self._agree_failed_rank(failed is not None) if sync_after else \
                (self.rank if failed else None)  # fmt: skip
            if failed_rank is None:
                if sync_after:
                    from paddle.distributed.fleet.utils.hybrid_parallel_util import fused_allreduce_gradients

                    fused_allreduce_gradients(list(self.model.parameters()), None)
                return float(sum(float(x.item()) * w for x, w in weighted) / accum), wait
            weighted.clear()
            self._back_off(failed, failed_rank)

    def micro_batch_size(self) -> int:
        """Samples per forward/backward on one device: ``batch_size`` split ``micro_split`` ways (rounded up)."""
        return math.ceil(self.spec.batch_size / self.micro_split)

    def _as_batch(self, data: Any) -> Any:
        """A DataLoader batch as a :class:`~paddlefit.models.calling.Batch` (inputs by position and keyword)."""
        from paddlefit.models.calling import batch_from_loader

        return batch_from_loader(data, self.input_specs, self.spec.label_arg)

    def _micro_batches(self, batch: Any, accum: int, last: bool, sync_after: bool) -> list[tuple[Any, float]]:
        """Forward and backward of one loaded batch, in ``micro_split`` contiguous slices (one slice when no
        out-of-memory back-off happened). Each slice's loss is scaled by its share of the step's samples, so the
        accumulated gradient equals the whole batch's (for losses that average over the batch; BatchNorm
        statistics see the smaller slices). Returns (unscaled loss, weight) per slice for the step's mean loss.
        The loss is the model's own or the job's (:class:`~paddlefit.models.calling.JobLoss`).

        Raises:
            _OutOfMemory: out of memory (:func:`is_out_of_memory`; left to :meth:`_train_step`).
            PaddlefitError: any other error of the model or loss, or a non-scalar loss.
        """
        from paddlefit.models.calling import call_model

        n = batch.size
        k = max(1, min(self.micro_split, n))
        bounds = np.linspace(0, n, k + 1).round().astype(int).tolist() if k > 1 else [0, n]
        even = n % k == 0
        out = []
        for j in range(k):
            a, b = bounds[j], bounds[j + 1]
            sb = batch.slice(a, b) if k > 1 else batch
            sync = self.world == 1 or (last and j == k - 1 and not sync_after)
            ctx = contextlib.nullcontext() if sync else self.dp_model.no_sync()
            try:
                with ctx:
                    with self._autocast():
                        o = call_model(self.dp_model, sb, self.spec.label_arg)
                        first = self.job_loss.how is None
                        loss = self.job_loss(o, sb)
                        del o  # the outputs (logits) must not stay alive through the backward
                        if first:
                            self._log(f"loss: {self.job_loss.describe()}")
                    if k == 1:
                        scaled, w = (loss / accum if accum > 1 else loss), 1.0
                    elif even:  # the same arithmetic as batch_size / k with accumulation x k
                        scaled, w = loss / (accum * k), 1.0 / k
                    else:
                        w = (b - a) / n
                        scaled = loss * (w / accum)
                    (self.scaler.scale(scaled) if self.scaler else scaled).backward()
            except PaddlefitError as exc:
                raise PaddlefitError(f"step {self.step + 1}: {exc}") from None
            except Exception as exc:
                if is_out_of_memory(exc):
                    raise _OutOfMemory(_oom_line(exc)) from None
                from paddlefit.models.build import failing_layer

                where = failing_layer(exc)
                raise PaddlefitError(
                    f"step {self.step + 1}: the model or loss raised {type(exc).__name__}: {_first_line(exc)}"
                    f"{' in ' + where if where else ''} (inputs {sb.describe()}, labels {_describe(sb.label)}; model "
                    f"`{self.spec.model}`, loss `{self.job_loss.describe()}`). Set PADDLEFIT_DEBUG=1 for the "
                    "traceback."
                ) from None
            out.append((loss, w))
        return out

    def _agree_failed_rank(self, failed: bool) -> int | None:
        """The highest rank that ran out of memory in this step (one MAX all-reduce), or None."""
        import paddle

        t = paddle.to_tensor([self.rank + 1 if failed else 0], dtype="int64")
        paddle.distributed.all_reduce(t, op=paddle.distributed.ReduceOp.MAX)
        r = int(t.item())
        return r - 1 if r > 0 else None

    def _back_off(self, error: str | None, failed_rank: int) -> None:
        """Every rank: drop the step's gradients, free cached device memory, split micro-batches twice as finely.

        Raises:
            PaddlefitError: ``oom_backoff: false``, or the micro-batch is already 1 sample.
        """
        import paddle

        current = self.micro_batch_size()
        where = f"step {self.step + 1}, rank {failed_rank}, micro-batch {current}"
        what = error if error is not None else "reported by that rank"
        if not self.spec.oom_backoff:
            raise PaddlefitError(f"out of memory ({where}): {what}. Lower `batch_size` (raise `grad_accum_steps` to "
                                 "keep the global batch), or set `oom_backoff: true` to let train do that itself. "
                                 "`paddlefit plan --config` predicts the peak.")  # fmt: skip
        if current <= 1:
            raise PaddlefitError(f"out of memory at micro-batch 1 ({where}): {what}. There is nothing left to halve: "
                                 "the model states and one sample's activations do not fit. Use AMP (`precision: "
                                 "bf16-o1`/`fp16-o1`), a smaller model or a device with more memory; `paddlefit plan "
                                 "--config` predicts the peak.")  # fmt: skip
        self.optimizer.clear_grad(set_to_zero=False)  # release the gradient buffers, not just zero them
        gc.collect()
        if self.on_gpu:
            paddle.device.cuda.empty_cache()
        self.micro_split *= 2
        self.oom_backoffs += 1
        accum = self.spec.grad_accum_steps * self.micro_split
        said = f": {error}" if error is not None else " (reported by that rank)"
        self._log(f"out of memory ({where}){said}. Redoing the step with micro-batch {self.micro_batch_size()} x "
                  f"{accum} accumulation per device; global batch {self.global_batch} unchanged.")  # fmt: skip

    def _next_batch(self, it: Iterator[Any]) -> Any:
        """Next batch; a dataset or collate error becomes a PaddlefitError (Paddle's single-process DataLoader
        would otherwise block forever when its reader thread dies: ``io/dataloader/dataloader_iter.py``)."""
        try:
            batch = next(it)
        except StopIteration:
            if self.data_errors:
                raise PaddlefitError(f"step {self.step + 1}: reading `data.train` failed: {self.data_errors[0]}") \
                    from None  # fmt: skip
            raise PaddlefitError(f"step {self.step + 1}: `data.train` ended early: the DataLoader yielded fewer "
                                 f"batches than its sampler's {len(self.sampler)}.") from None  # fmt: skip
        except Exception as exc:  # multi-process loader: Paddle re-raises the worker's error (printed above)
            raise PaddlefitError(f"step {self.step + 1}: the DataLoader failed: {type(exc).__name__}: "
                                 f"{_first_line(exc)} (the worker's traceback is printed above).") from None
        if self.data_errors:
            raise PaddlefitError(f"step {self.step + 1}: reading `data.train` failed: {self.data_errors[0]}")
        return batch

    def _optimizer_step(self) -> None:
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.clear_grad()
        self.schedule.step()

    def eval_batch_size(self) -> int:
        """Samples per evaluation forward: ``data.eval_batch_size`` (default ``batch_size``) split ``eval_split``
        ways after out-of-memory back-offs (rounded up)."""
        return math.ceil((self.spec.data.eval_batch_size or self.spec.batch_size) / self.eval_split)

    def evaluate(self) -> dict[str, float | None]:
        """Loss and accuracy over ``data.eval`` at ``data.eval_batch_size`` samples per forward (accuracy: argmax
        of the logits == label, for the default ``cross_entropy`` with integer labels of the logits' shape). The
        loss is the model's own or the job's, as in training. Out of memory (``oom_backoff``): the eval restarts
        with half the batch, down to 1 sample."""
        while True:
            try:
                return self._evaluate_once()
            except _OutOfMemory as exc:
                current = self.eval_batch_size()
                if not self.spec.oom_backoff or current <= 1:
                    raise PaddlefitError(f"eval at step {self.step}: out of memory at eval batch {current}: {exc}. "
                                         "Lower `data.eval_batch_size`; `paddlefit plan --config` predicts the eval "
                                         "peak.") from None  # fmt: skip
                self.eval_split *= 2
                gc.collect()
                if self.on_gpu:
                    import paddle

                    paddle.device.cuda.empty_cache()
                self._log(f"eval at step {self.step}: out of memory at eval batch {current} ({exc}); evaluating "
                          f"again at {self.eval_batch_size()}.")  # fmt: skip

    def _evaluate_once(self) -> dict[str, float | None]:
        import paddle

        from paddlefit.models.calling import call_model, prediction_of

        if self.eval_ds is None:
            return {"eval_loss": None, "eval_accuracy": None}
        errors: list[str] = []
        dataset, collate = _guard_single_process(self.eval_ds, errors)
        loader = paddle.io.DataLoader(dataset, batch_size=self.eval_batch_size(), shuffle=False, collate_fn=collate)
        self.model.eval()
        total, loss_sum, correct, scored = 0, 0.0, 0, 0
        try:
            with paddle.no_grad():
                for data in loader:
                    if errors:
                        break
                    batch = self._as_batch(data)
                    with self._autocast():
                        out = call_model(self.model, batch, self.spec.label_arg)
                    n = batch.size
                    loss_sum += float(self.eval_loss(out, batch).item()) * n
                    logits = prediction_of(out, bool(self.spec.label_arg and batch.label is not None))
                    y = batch.label
                    axis = _class_axis(logits, y) if self.spec.loss_name == "cross_entropy" else None
                    if axis is not None:
                        correct += int((logits.argmax(axis=axis).reshape([-1]) == y.reshape([-1])).astype("int64")
                                       .sum().item())  # fmt: skip
                        scored += int(np.prod(y.shape))
                    total += n
                    # the next batch's forward must not run while this one's outputs are alive (two logit tensors)
                    del out, logits, batch, data
        except PaddlefitError as exc:
            raise PaddlefitError(f"eval at step {self.step}: {exc}") from None
        except Exception as exc:
            if is_out_of_memory(exc):
                raise _OutOfMemory(_oom_line(exc)) from None
            raise PaddlefitError(f"eval at step {self.step}: the model or loss raised {type(exc).__name__}: "
                                 f"{_first_line(exc)} (model `{self.spec.model}`, loss `{self.eval_loss.describe()}`, "
                                 "data.eval).") from None  # fmt: skip
        finally:
            self.model.train()
        if errors or total == 0:
            raise PaddlefitError(f"eval at step {self.step}: reading `data.eval` failed: "
                                 f"{errors[0] if errors else 'no batches'}")  # fmt: skip
        return {"eval_loss": loss_sum / total, "eval_accuracy": correct / scored if scored else None}

    def run(self) -> RunResult:
        """Train until the step limit, a stop signal or a non-finite loss; see the module docstring for exit codes.

        Raises:
            PaddlefitError / CheckpointError: see the class docstring.
        """
        import paddle

        self._setup_device()
        self._seed()
        self._build()
        self.step, self.epoch, self.pos = 0, 0, 0
        self.totals: dict[str, float] = {"train_s": 0.0, "wait_s": 0.0, "samples": 0.0}
        self.last_loss: float | None = None
        self.peaks = PeakTracker(self.on_gpu)
        self.last_eval: dict[str, float | None] = {"eval_loss": None, "eval_accuracy": None}
        if self.is_writer:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            for tmp in self.store.clean_temporaries():
                self._log(f"removed an incomplete checkpoint left by a killed writer: {tmp.name}")
            if self.opts.resume == "never" and (old := self.store.list()):
                for path in old:
                    shutil.rmtree(path)
                self._log(f"--resume never: removed {len(old)} checkpoint(s) of an earlier run from {self.store.root}")
        self._barrier()
        resume = self._agree_on_resume()
        if resume is not None:
            self._load(resume)
            self._log(f"resumed from {resume} (step {self.step}, epoch index {self.epoch}, micro-batch {self.pos} "
                      "of the epoch)")  # fmt: skip
        if self.is_writer:
            self._truncate_metrics()
        self.last_ckpt_time = time.monotonic()
        self.last_ckpt_step = self.step
        self.stop.install()
        try:
            return self._loop(paddle)
        finally:
            self.stop.restore()

    def _checkpoint_due(self) -> bool:
        c = self.spec.checkpoint
        if c.auto_interval:  # first checkpoint after one step measures the write time
            return self.ckpt_interval_s is None or time.monotonic() - self.last_ckpt_time >= self.ckpt_interval_s
        by_steps = c.every_steps > 0 and self.step % c.every_steps == 0
        by_time = c.every_minutes > 0 and time.monotonic() - self.last_ckpt_time >= c.every_minutes * 60
        return by_steps or by_time

    def _visualdl(self) -> Any:
        """Rank 0 with ``visualdl: true``: a ``visualdl.LogWriter`` on RUN_DIR/visualdl, else None."""
        if not (self.spec.visualdl and self.is_writer):
            return None
        try:
            from visualdl import LogWriter
        except ImportError:
            raise PaddlefitError("`visualdl: true` needs VisualDL: pip install 'paddlefit[visualdl]' "
                                 "(or set `visualdl: false`).") from None  # fmt: skip
        return LogWriter(logdir=str(self.run_dir / "visualdl"))

    def _loop(self, paddle: Any) -> RunResult:
        accum = self.spec.grad_accum_steps
        self.vdl = self._visualdl()
        metrics = open(self.run_dir / METRICS_FILE, "a", encoding="utf-8") if self.is_writer else None  # noqa: SIM115
        progress = _Progress(self, enabled=self.is_writer and self.opts.progress)
        try:
            self.model.train()
            while self.step < self.total_steps:
                self.sampler.set_position(self.epoch, self.pos)
                it = iter(self.loader)
                while self.pos + accum <= self.steps_per_epoch * accum and self.step < self.total_steps:
                    t0 = time.perf_counter()
                    self.peaks.checkpoint()
                    loss, wait = self._train_step(it)
                    nonfinite_here = not math.isfinite(loss) and self.scaler is None
                    stop, nonfinite, budget = self._agree(self.stop.signum is not None, nonfinite_here,
                                                          self.over_budget() is not None)  # fmt: skip
                    if nonfinite:
                        self.optimizer.clear_grad()
                        return self._end_nonfinite(loss)
                    self._optimizer_step()
                    dt = time.perf_counter() - t0
                    self.step += 1
                    self.pos += accum
                    self.last_loss = loss
                    self.totals["train_s"] += dt
                    self.totals["wait_s"] += wait
                    self.totals["samples"] += self.global_batch
                    if metrics is not None:
                        rec = {"step": self.step, "epoch": self._epochs_done(), "loss": loss,
                               "lr": float(self.optimizer.get_lr()), "samples_per_s": self.global_batch / dt,
                               "step_time_s": dt, "data_wait_s": wait,
                               "micro_batch_size": self.micro_batch_size()}  # fmt: skip
                        if self.on_gpu:
                            rec["peak_memory_bytes"] = self.peaks.peak()
                        metrics.write(json.dumps(rec) + "\n")
                        metrics.flush()
                        if self.vdl is not None:
                            for k in ("loss", "lr", "samples_per_s", "data_wait_s"):
                                self.vdl.add_scalar(tag=f"train/{k}", value=rec[k], step=self.step)
                    progress.update(loss, self.global_batch, dt)
                    if stop:
                        return self._end_stopped()
                    if budget:
                        return self._end_budget()
                    if self.is_writer and self.step < self.total_steps and self._checkpoint_due():
                        self._save()
                if self.pos + accum > self.steps_per_epoch * accum:  # epoch complete
                    self.epoch += 1
                    self.pos = 0
                    self._eval_and_log(metrics)
            if self.last_eval["eval_loss"] is None or self.pos != 0:
                self._eval_and_log(metrics)
            return self._end_done()
        finally:
            progress.close()
            if metrics is not None:
                metrics.close()
            if self.vdl is not None:
                self.vdl.close()

    def _epochs_done(self) -> float:
        """Epochs completed so far: optimizer steps / steps per epoch (a float; 15.0 at the end of epoch 15)."""
        return round(self.step / self.steps_per_epoch, 4)

    def _eval_and_log(self, metrics: Any) -> None:
        if not self.is_writer or self.eval_ds is None:
            return
        self.peaks.checkpoint()
        self.last_eval = self.evaluate()
        acc = self.last_eval["eval_accuracy"]
        self._log(f"eval at step {self.step} (epoch {self._epochs_done():.2f}): loss {self.last_eval['eval_loss']:.4f}"
                  + (f", accuracy {acc:.2%}" if acc is not None else ""))  # fmt: skip
        if metrics is not None:
            metrics.write(json.dumps({"step": self.step, "epoch": self._epochs_done(), **self.last_eval}) + "\n")
            metrics.flush()
        if self.vdl is not None:
            for k, v in self.last_eval.items():
                if v is not None:
                    self.vdl.add_scalar(tag=f"eval/{k.removeprefix('eval_')}", value=v, step=self.step)

    def _summary(self) -> dict[str, Any]:
        t = self.totals
        wall = self.wall_s()
        price = self.spec.budget.price_usd_per_hour
        return {
            "steps": self.step, "epochs": self.step / self.steps_per_epoch, "final_loss": self.last_loss,
            "eval_loss": self.last_eval["eval_loss"], "eval_accuracy": self.last_eval["eval_accuracy"],
            "samples_per_s": t["samples"] / t["train_s"] if t["train_s"] else None,
            "data_wait_fraction": t["wait_s"] / t["train_s"] if t["train_s"] else None,
            "peak_memory_bytes": self.peaks.peak(),
            "peak_memory_kind": "gpu max_memory_allocated" if self.on_gpu else "cpu host allocator (rank 0)",
            "params_sha256": params_sha256(self.model), "global_batch": self.global_batch,
            "devices": self.world, "device": "gpu" if self.on_gpu else "cpu", "precision": self.spec.precision.value,
            "amp_active": self.amp, "train_seconds": t["train_s"], "samples": int(t["samples"]),
            "last_checkpoint": self.store.path_for(self.last_ckpt_step).name if self.store.list() else None,
            "wall_seconds": wall, "checkpoint_write_s": self.ckpt_write_s,
            "checkpoint_interval_s": self.ckpt_interval_s, "cost_usd": wall / 3600 * price if price else None,
            "micro_batch_size": self.micro_batch_size(),
            "grad_accum_steps": self.spec.grad_accum_steps * self.micro_split, "oom_backoffs": self.oom_backoffs,
        }  # fmt: skip

    def _end_done(self) -> RunResult:
        summary = None
        if self.is_writer:
            self._save()
            summary = self._summary()
            atomic_write_text(self.run_dir / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n", option="--run-dir")
            write_status(self.run_dir, EXIT_OK, "finished", self.step)
        self._barrier()
        return RunResult(EXIT_OK, "finished", self.step, summary)

    def _end_stopped(self) -> RunResult:
        if self.is_writer:
            path = self._save()
            self._log(f"stop signal: saved {path} at step {self.step}; exit {EXIT_REQUEUE} (requeue); "
                      "run again with --resume auto to continue.")  # fmt: skip
            write_status(self.run_dir, EXIT_REQUEUE, "stopped by signal", self.step)
        self._barrier()
        return RunResult(EXIT_REQUEUE, "stopped by signal", self.step)

    def _end_budget(self) -> RunResult:
        reason = self.over_budget() or "budget reached on another rank"
        if self.is_writer:
            path = self._save()
            reason += (f"; saved {path} at step {self.step}. Raise the limit (wall time counts across resumes) and "
                       "run again with --resume auto to continue.")  # fmt: skip
            self._log(reason)
            write_status(self.run_dir, EXIT_BUDGET, reason, self.step)
        self._barrier()
        return RunResult(EXIT_BUDGET, reason, self.step)

    def _end_nonfinite(self, loss: float) -> RunResult:
        last = self.store.latest_valid() if self.is_writer else None
        msg = (f"the loss is {loss} at step {self.step + 1} (not finite); stopped without updating or saving. "
               f"Last good checkpoint: {last or 'none'}. Lower `lr`, add warm-up, or check the data.")  # fmt: skip
        if self.is_writer:  # the CLI prints msg (from status.json when launched)
            write_status(self.run_dir, EXIT_NONFINITE, msg, self.step)
        self._barrier()
        return RunResult(EXIT_NONFINITE, msg, self.step)


def _class_axis(logits: Any, y: Any) -> int | None:
    """The class axis for an accuracy of integer labels ``y`` against ``logits``: -1 when the labels are the logits'
    shape without the last axis (or one per sample), 1 for NCHW maps (labels (N, d1, ...) against (N, C, d1, ...)),
    None when they do not pair (no accuracy)."""
    if logits is None or y is None or "int" not in str(y.dtype):
        return None
    o, lab = list(logits.shape), list(y.shape)
    if len(o) >= 3 and lab in ([o[0], *o[2:]], [o[0], 1, *o[2:]]):
        return 1
    if int(np.prod(lab)) * o[-1] == int(np.prod(o)):
        return -1
    return None


class _OutOfMemory(MemoryError):
    """An out-of-memory error of one micro-batch, carrying Paddle's message line."""


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is Paddle running out of memory.

    Paddle raises ``MemoryError`` for its ResourceExhausted error ("(ResourceExhausted) Out of memory error on GPU
    0. Cannot allocate ..." on GPU, "(ResourceExhausted) Fail to alloc memory of N size" from the CPU allocator,
    ``paddle/phi/core/memory/allocation/cpu_allocator.cc``; measured here with paddlepaddle 3.3.1). Raised inside
    a ``PyLayer``'s backward it reaches Python wrapped as ``OSError`` "(External) ... MemoryError: (ResourceExhausted)
    ..." (also measured), hence the text check.
    """
    return isinstance(exc, MemoryError) or "(ResourceExhausted)" in str(exc)


def _oom_line(exc: BaseException) -> str:
    """The line of Paddle's message that says what ran out (the wrapped form puts it on a later line)."""
    lines = [x.strip() for x in str(exc).splitlines() if "ResourceExhausted" in x]
    return f"{type(exc).__name__}: {(lines[0] if lines else _first_line(exc))[:200].rstrip('.')}"


def _describe(x: Any) -> str:
    """Shape and dtype of a tensor, or the type name of anything else (for error messages)."""
    return f"{list(x.shape)} {x.dtype}" if hasattr(x, "shape") and hasattr(x, "dtype") else type(x).__name__


def _first_line(exc: BaseException, limit: int = 300) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else "")[:limit]


class _FailedSample:
    """Stands in for a sample whose ``__getitem__`` raised (single-process loading)."""

    def __init__(self, index: int, exc: BaseException) -> None:
        self.message = f"sample {index}: {type(exc).__name__}: {_first_line(exc)}"


def _guard_single_process(dataset: Any, errors: list[str]) -> tuple[Any, Callable[[list[Any]], Any]]:
    """Wrap ``dataset`` and Paddle's ``default_collate_fn`` so an exception in either is recorded in ``errors`` and
    the loader's reader thread ends cleanly (collate returning None ends it) instead of dying and leaving the main
    thread blocked on its queue."""
    import paddle
    from paddle.io.dataloader.collate import default_collate_fn

    class Guarded(paddle.io.Dataset):
        def __len__(self) -> int:
            return len(dataset)

        def __getitem__(self, i: int) -> Any:
            try:
                return dataset[i]
            except Exception as exc:
                return _FailedSample(i, exc)

    def collate(batch: list[Any]) -> Any:
        for sample in batch:
            if isinstance(sample, _FailedSample):
                errors.append(sample.message)
                return None
        try:
            return default_collate_fn(batch)
        except Exception as exc:
            errors.append(f"collating a batch: {type(exc).__name__}: {_first_line(exc)} (do all samples have the "
                          "same shapes and dtypes?)")  # fmt: skip
            return None

    return Guarded(), collate


class _Progress:
    """Rank-0 progress: a rich bar with ETA on a terminal, otherwise a log line every ``log_every`` steps."""

    def __init__(self, trainer: Trainer, enabled: bool) -> None:
        self.t = trainer
        self.enabled = enabled
        self.bar = None
        self.samples = self.seconds = 0.0  # since the last log line
        if not enabled:
            return
        from rich.console import Console

        console = Console(stderr=True)
        if console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("train"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[info]}"), TimeRemainingColumn(), console=console)
            self.task = self.bar.add_task("train", total=trainer.total_steps, completed=trainer.step, info="")
            self.bar.start()

    def update(self, loss: float, samples: float, seconds: float) -> None:
        """One optimizer step of ``samples`` samples took ``seconds``; shown as the rate since the previous line
        (a single step's rate swings with DataLoader workers handing over batches unevenly)."""
        if not self.enabled:
            return
        self.samples += samples
        self.seconds += seconds
        info = f"loss {loss:.4f}  {self.samples / self.seconds if self.seconds else 0.0:,.0f} samples/s"
        if self.bar is not None:
            self.bar.update(self.task, completed=self.t.step, info=info)
            if self.t.step % self.t.spec.log_every:
                return
        elif self.t.step % self.t.spec.log_every == 0 or self.t.step == self.t.total_steps:
            self.t.opts.log(f"step {self.t.step}/{self.t.total_steps} (epoch {self.t._epochs_done():.2f}): {info}")
        else:
            return
        self.samples = self.seconds = 0.0

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


@contextlib.contextmanager
def scratch_trainer(spec: JobSpec, steps: int) -> Iterator[tuple[Trainer, Callable[[], Any]]]:
    """A one-device :class:`Trainer` of ``spec`` built for ``steps`` optimizer steps in a temporary run directory
    (model, DataLoader, optimizer, AMP exactly as ``train`` builds them), for measuring rather than training
    (``paddlefit profile`` and ``tune``).

    Yields:
        (trainer, step_batches): call ``step_batches()`` at the start of each optimizer step for the DataLoader
        iterator to draw that step's ``grad_accum_steps`` micro-batches from; it starts the next epoch when fewer
        remain, as ``train`` does. DataLoader workers (persistent ones included) are shut down on exit, not at
        interpreter exit, where Paddle would warn that they "exit unexpectedly"
        (``python/paddle/io/dataloader/dataloader_iter.py``, ``_try_shutdown_all``).

    Raises:
        PaddlefitError: the spec's model, data or loss fail (as in ``train``).
    """
    spec = spec.model_copy(update={"max_steps": steps, "epochs": None, "devices": 1})
    accum = spec.grad_accum_steps
    with tempfile.TemporaryDirectory(prefix="paddlefit-scratch-") as tmp:
        t = Trainer(spec, TrainOptions(run_dir=Path(tmp), resume="never", progress=False, log=lambda m: None))
        t._setup_device()
        t._seed()
        t._build()
        t.model.train()
        state: dict[str, Any] = {"epoch": -1, "consumed": 0, "it": None}

        def step_batches() -> Any:
            if state["it"] is None or state["consumed"] + accum > len(t.sampler):
                state["epoch"] += 1
                state["consumed"] = 0
                t.sampler.set_position(state["epoch"], 0)
                state["it"] = iter(t.loader)
            state["consumed"] += accum
            return state["it"]

        try:
            yield t, step_batches
        finally:
            for obj in (state["it"], getattr(t.loader, "_iterator", None)):
                if obj is not None and hasattr(obj, "_try_shutdown_all"):
                    obj._try_shutdown_all()
            state["it"] = None
            gc.collect()
