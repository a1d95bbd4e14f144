"""The training loop: one process per device, data parallel through ``paddle.DataParallel``.

Runs in-process for one device and inside each worker started by ``paddle.distributed.launch`` for more
(:func:`paddlefit.train.run.run_job`). :meth:`Trainer.run` reads top to bottom in the order things happen: set up
(device, seeds, build), clean the run directory, agree on a checkpoint and resume from it, then
``while step < total_steps``: one step (:class:`~paddlefit.train.step.StepRunner`), agree, optimizer, log,
checkpoint; evaluate at each epoch's end; finish.

After each step's backward, one 3-element all-reduce (MAX) makes every rank agree on "a stop signal arrived
somewhere", "the loss is not finite somewhere" and "the budget is used up somewhere", so all ranks stop at the
same step and none waits forever in a collective. Only rank 0 writes (checkpoints, metrics, summary, status).

Exit codes (``RunResult.exit_code``; why each, and how schedulers read them: ``docs/errors.md``): 0 finished; 143
stopped by a signal after a checkpoint; 3 the loss became NaN/Inf (no checkpoint of it); 4 the budget was reached,
checkpoint saved. Errors raise :class:`~paddlefit.errors.PaddlefitError` (exit 2) or ``JobFailedError`` (exit 1).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paddlefit import options
from paddlefit.errors import PaddlefitError
from paddlefit.jobspec.spec import JobSpec
from paddlefit.rundir.files import checkpoints_dir, clean_temporaries, write_run_spec, write_status, write_summary
from paddlefit.textsafe import log_stderr
from paddlefit.train.build import BuiltJob, build_job, seed_all, setup_device
from paddlefit.train.checkpoint import CheckpointStore, load_checkpoint, save_checkpoint
from paddlefit.train.checkpoint import spec_keeping_global_batch as keeping_batch
from paddlefit.train.data import close_loader_iterator
from paddlefit.train.evaluate import NO_EVAL, evaluate
from paddlefit.train.guards import Budget, CheckpointSchedule, Clock, StopFlag, as_lost_rank, as_write_failure
from paddlefit.train.lock import RunDirLock
from paddlefit.train.metrics import LogLines, MetricsLog, PeakTracker, Progress, params_sha256, to_jsonable
from paddlefit.train.peers import PeerWatch, record_peer_lost
from paddlefit.train.record import RunRecord
from paddlefit.train.resume import (
    agree_on_resume,
    check_same_job,
    finished_already,
    replace_earlier_run,
    spec_meta,
    warn_changed_run,
)
from paddlefit.train.state import TrainerState
from paddlefit.train.step import StepRunner

__all__ = ["EXIT_BUDGET", "EXIT_NONFINITE", "EXIT_OK", "EXIT_REQUEUE", "RunResult", "TrainOptions", "Trainer"]

EXIT_OK = 0
EXIT_NONFINITE = 3
EXIT_BUDGET = 4
EXIT_REQUEUE = 143


@dataclass
class TrainOptions:
    """Options of one run (the job spec holds the rest).

    Attributes:
        run_dir: where checkpoints, metrics.jsonl, summary.json and status.json go.
        resume: ``auto`` (newest valid checkpoint, if any), ``never``, or a checkpoint directory path.
        progress: report progress (rank 0): to ``progress_bar`` when given, else log lines every ``log_every`` steps.
        progress_bar: a :class:`~paddlefit.train.metrics.Progress` (the CLI passes a rich bar on a terminal).
        log: where log lines go (default stderr).
        lock_held: the caller holds the run directory's :class:`~paddlefit.train.lock.RunDirLock` (``run_job``,
            or the process that launched this worker); else rank 0 takes it.
        prediction_key: the key of the RUN_DIR/prediction.json made for this run (:mod:`paddlefit.train.predict`).
        trust_checkpoint: ``--trust-checkpoint`` (a ``--resume PATH`` outside the run dir, a legacy ``rng.pkl``).
    """

    run_dir: Path
    resume: str = options.RESUME.default
    progress: bool = True
    progress_bar: Progress | None = None
    lock_held: bool = False
    prediction_key: str | None = None
    trust_checkpoint: bool = False
    log: Callable[[str], None] = field(default=log_stderr)


@dataclass
class RunResult:
    """What a run ended with: exit code, reason and the summary written to ``summary.json`` (rank 0)."""

    exit_code: int
    reason: str
    step: int
    summary: dict[str, Any] | None = None


class Trainer:
    """Train ``spec`` in this process (one rank of a data-parallel job when launched with more than one).

    The rank and world size come from ``PADDLE_TRAINER_ID`` / ``PADDLE_TRAINERS_NUM`` (set by
    ``paddle.distributed.launch``). ``clock`` (seconds, monotonic) drives the budget and the checkpoint schedule.

    Raises (from :meth:`run`):
        PaddlefitError: bad datasets/model/loss, a dataset too small for one global batch, or a resume checkpoint
            that does not verify or belongs to a different global batch.
        JobFailedError: out of memory at micro-batch 1, or the model raising mid-training (exit 1).
        CheckpointError: a checkpoint could not be written (disk full, unwritable run dir).
    """

    def __init__(self, spec: JobSpec, opts: TrainOptions, clock: Clock = time.monotonic) -> None:
        if spec.budget.max_cost_usd is not None and spec.budget.price_usd_per_hour is None:
            raise PaddlefitError(
                "budget.max_cost_usd needs the job's price: budget.price_usd_per_hour in the spec, or "
                "`train --price-per-hour USD` / `--instance TYPE`."
            )
        self.spec = spec
        self.opts = opts
        self.run_dir = Path(opts.run_dir)
        self.world = int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))
        self.rank = int(os.environ.get("PADDLE_TRAINER_ID", "0"))
        self.is_writer = self.rank == 0
        self.store = CheckpointStore(checkpoints_dir(self.run_dir), keep_last=spec.checkpoint.keep_last)
        self.stop = StopFlag()
        self.peers = PeerWatch(self.world, self.rank, lambda why: record_peer_lost(self, why, self._compare))
        self.budget = Budget(spec.budget, clock)  # wall time counts from here (plus earlier runs, on resume)
        self.ckpt = CheckpointSchedule(spec.checkpoint, self.log, clock)
        # made by setup()
        self.job: BuiltJob = None  # type: ignore[assignment]
        self.runner: StepRunner = None  # type: ignore[assignment]
        self.state: TrainerState = None  # type: ignore[assignment]
        self.peaks: PeakTracker = None  # type: ignore[assignment]
        # made by run()
        self.last_eval: dict[str, float | None] = dict(NO_EVAL)
        self.metrics: MetricsLog | None = None
        self.last_ckpt_step = 0  # the step of the newest checkpoint (the resumed one before any save)
        self.record: RunRecord | None = None  # rank 0's measured steps and prediction (made by run())

    def log(self, msg: str) -> None:
        """A log line from rank 0 (the other ranks are silent)."""
        if self.is_writer:
            self.opts.log(msg)

    def setup(self, on_gpu: bool) -> None:
        """Seeds, the job built (model, loader, optimizer, AMP, as :func:`~paddlefit.train.step.scratch_runner`
        builds it for ``profile`` and ``tune``) on the device :func:`~paddlefit.train.build.setup_device` chose,
        the step runner and a fresh :class:`TrainerState`."""
        seed_all(self.spec.seed)
        self.job = build_job(self.spec, self.world, self.rank, on_gpu, self.log)
        self.runner = StepRunner(self.spec, self.job, self.world, self.rank, self.log)
        self.peaks = PeakTracker(on_gpu)
        s = self.spec
        self.state = TrainerState(
            global_batch=self.job.global_batch,
            batch_size=s.batch_size,
            devices=self.world,
            grad_accum_steps=s.grad_accum_steps,
            seed=s.seed,
            total_steps=self.job.total_steps,
        )

    def run(self) -> RunResult:
        """Train until the step limit, a stop signal, the budget or a non-finite loss (exit codes: module docstring).

        Raises:
            PaddlefitError / JobFailedError / CheckpointError: see the class docstring;
            :class:`~paddlefit.train.lock.RunDirInUseError` when another process holds the run directory.
        """
        import paddle

        if not paddle.in_dynamic_mode():  # Paddle first imported in another thread leaves this one static
            paddle.disable_static()
        lock = RunDirLock(self.run_dir, self.log) if self.is_writer and not self.opts.lock_held else None
        if lock is not None:
            lock.acquire()  # before anything is written (a multi-node worker: global rank 0 holds it)
        try:
            # fresh names: the optimizer names its accumulators (``conv2d_0.w_0_moment1_0``) from Paddle's global
            # generator, and a checkpoint's state loads into the same names only: a second run_job in one process too
            with paddle.utils.unique_name.guard():
                return self._run()
        except Exception as exc:  # failed mid-run (out of memory at micro-batch 1, the model raising, a rank lost)
            if not self.peers.stand_down():  # the watch found a peer lost first: it records that, ends the process
                time.sleep(60)
            # status.json; a failed write (a full disk): step and checkpoint; anything else raises as it is
            exc = as_write_failure(as_lost_rank(exc, self), self)
            with contextlib.suppress(Exception):  # no record (rank > 0, refused before it): nothing
                self._compare(ended=(exc.exit_code, str(exc)))
            if self.record is None and self.is_writer:  # refused before the job was accepted: a failed start
                with contextlib.suppress(Exception):
                    from paddlefit.rundir.files import record_failed_start

                    record_failed_start(self.run_dir, getattr(exc, "exit_code", 1), str(exc))
            raise exc from None
        finally:
            if lock is not None:
                lock.release()

    def _run(self) -> RunResult:
        self.peers.start()
        with self.peers.waiting("start-up (the process group: init_parallel_env)", holds_gil=True):
            on_gpu = setup_device(self.spec, self.world, self.log)
        if self.is_writer:
            self._clean_run_dir()
        self.peers.barrier("start-up (the barrier after rank 0 cleaned the run directory)")
        o = self.opts
        with self.peers.waiting("start-up (agreeing on the checkpoint to resume)"):
            resume = agree_on_resume(o.resume, self.store, self.world, self.is_writer, self.log, o.trust_checkpoint)
        if resume is not None:
            self.spec, kept = keeping_batch(self.spec, resume, self.world, self.log)
        try:
            self.setup(on_gpu)
        except PaddlefitError as exc:
            if resume is None or not kept:
                raise
            raise PaddlefitError(
                f"{exc} (Gradient accumulation {self.spec.grad_accum_steps} comes from {resume}: "
                "it keeps that checkpoint's global batch on this run's devices; pass another "
                "`--resume` checkpoint or `--resume never --overwrite`.)"
            ) from None
        if resume is not None:
            self._resume(resume)
            if (done := finished_already(self.run_dir, self.state.step, self.job.total_steps)) is not None:
                self.log(
                    f"the run finished at step {self.state.step} already: nothing to train, its records kept "
                    "(`--max-steps` above it goes on; `--resume never --overwrite` starts over)"
                )
                if self.is_writer:  # the same ending, for this launch's token (the launcher reads it)
                    write_status(self.run_dir, EXIT_OK, "finished", self.state.step)
                return RunResult(EXIT_OK, "finished", self.state.step, done)
        if self.is_writer:  # accepted: an earlier run's checkpoints go (--resume never), the spec is recorded...
            replaced = self.opts.resume == "never" and replace_earlier_run(self.store, self.run_dir, self.log)
            write_run_spec(self.run_dir, self.spec)
            MetricsLog.truncate_after(self.run_dir, self.state.step, resumed=resume is not None)
            if resume is not None and self.opts.resume not in ("auto", "never"):
                self.store.drop_after(self.state.step, f"--resume {self.opts.resume}", self.log)
            self.record = RunRecord(self.run_dir, self.opts.prediction_key, self.log)
            self.record.begin(
                self.spec,
                model=self.job.model,
                on_gpu=self.job.on_gpu,
                world=self.world,
                global_batch=self.job.global_batch,
                resumed=resume is not None,
                replaced=replaced,
            )
        self.ckpt.reset(self.state.step)
        self.last_ckpt_step = self.state.step
        self.stop.install()
        try:
            return self._loop()
        finally:
            self.stop.restore()

    def _loop(self) -> RunResult:
        st, job, accum = self.state, self.job, self.spec.grad_accum_steps
        batches_per_epoch = job.steps_per_epoch * accum  # the loaded batches an epoch uses
        self.metrics = MetricsLog(self.run_dir, self.spec.visualdl) if self.is_writer else None
        progress: Progress | None = None
        if self.is_writer and self.opts.progress:
            progress = self.opts.progress_bar or LogLines(self.opts.log, self.spec.log_every)
            progress.start(st.step, job.total_steps)
        it = None  # the epoch's DataLoader iterator, closed at once at the end (Paddle's own close waits 1 s)
        try:
            job.model.train()
            while st.step < job.total_steps:
                job.sampler.set_position(st.epoch, st.batch_in_epoch)
                it = iter(job.loader)
                while st.batch_in_epoch + accum <= batches_per_epoch and st.step < job.total_steps:
                    ended = self._step(it, progress)
                    if ended is not None:
                        return ended
                if st.batch_in_epoch + accum > batches_per_epoch:  # epoch complete: rank 0 evaluates alone
                    st.epoch += 1
                    st.batch_in_epoch = 0
                    self.peers.solo_next("eval")
                    self._evaluate()
            if self.last_eval["eval_loss"] is None or st.batch_in_epoch != 0:
                self._evaluate()
            return self._end_done()
        finally:
            close_loader_iterator(it)
            if progress is not None:
                progress.close()
            if self.metrics is not None:
                self.metrics.close()

    def _step(self, it: Any, progress: Progress | None) -> RunResult | None:
        """One optimizer step and what follows it; a RunResult when the run ends here."""
        st, job = self.state, self.job
        t0 = time.perf_counter()
        self.peaks.checkpoint()
        self.peers.step_begins(st.step + 1)
        loss, wait = self.runner.train_step(it, st.step + 1)
        nonfinite_here = not math.isfinite(loss) and job.scaler is None  # fp16's GradScaler skips inf steps itself
        due = self.is_writer and st.step + 1 < job.total_steps and self.ckpt.due(st.step + 1)  # announced to all
        stop, nonfinite, budget, save = self._agree(
            self.stop.set, nonfinite_here, self.budget.exceeded() is not None, save_next=due
        )
        if nonfinite:
            job.optimizer.clear_grad()
            return self._end_nonfinite(loss)
        self.runner.optimizer_step()
        dt = time.perf_counter() - t0
        if self.record is not None:
            self.record.step(dt, wait)
        st.step += 1
        st.batch_in_epoch += self.spec.grad_accum_steps
        st.last_loss = loss
        st.totals["train_s"] += dt
        st.totals["wait_s"] += wait
        st.totals["samples"] += job.global_batch
        if self.metrics is not None:
            rec = {
                "step": st.step,
                "epoch": self.epochs_done(),
                "loss": loss,
                "lr": float(job.optimizer.get_lr()),
                "samples_per_s": job.global_batch / dt,
                "step_time_s": dt,
                "data_wait_s": wait,
                "micro_batch_size": self.runner.micro.size,
            }
            if job.on_gpu:
                rec["peak_memory_bytes"] = self.peaks.peak()
            self.metrics.write(rec, ("loss", "lr", "samples_per_s", "data_wait_s"))
        if progress is not None:
            progress.update(st.step, self.epochs_done(), loss, job.global_batch, dt)
        if stop:
            return self._end_stopped()
        if budget:
            return self._end_budget()
        if save and self.is_writer:
            self._save()
            self._compare()
        return None

    def epochs_done(self) -> float:
        """Epochs completed so far: optimizer steps / steps per epoch (a float; 15.0 at the end of epoch 15)."""
        return round(self.state.step / self.job.steps_per_epoch, 4)

    def _agree(self, *flags: bool, save_next: bool) -> tuple[bool, ...]:
        """Every rank's flags, MAX-reduced, and rank 0's ``save_next`` (:meth:`PeerWatch.agree`, watched)."""
        agreed, save = self.peers.agree([float(f) for f in flags], save_next) if self.world > 1 else (flags, save_next)
        return (*agreed, save)

    # ---- checkpoints -------------------------------------------------------------------------------------
    def _clean_run_dir(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for tmp in self.store.clean_temporaries():
            self.log(f"removed an incomplete checkpoint left by a killed writer: {tmp.name}")
        for tmp in clean_temporaries(self.run_dir):
            self.log(f"removed a temporary file left by a killed writer: {tmp.name}")

    def _save(self) -> Path:
        st, job = self.state, self.job
        st.micro_batch_split = self.runner.micro.ways
        st.scheduler = to_jsonable(job.schedule.state_dict())
        st.scaler = to_jsonable(job.scaler.state_dict()) if job.scaler else None
        saved = dataclasses.replace(st, totals={**st.totals, "wall_s": self.budget.wall_s()})
        # a checkpoint already there for this step is this run's only at the step it resumed or last saved at
        path, seconds = save_checkpoint(
            self.store,
            saved,
            job.model,
            job.optimizer,
            spec_meta(self.spec),
            keep_existing=st.step == self.last_ckpt_step,
        )
        self.ckpt.written(st.step, seconds)
        self.last_ckpt_step = st.step
        return path

    def _compare(self, ended: tuple[int, str] | None = None) -> dict[str, Any] | None:
        """Rank 0: RUN_DIR/comparison.json, the measured figures beside the prediction, now; and the registry row
        (at the end with the status, ``ended`` = exit code, reason, and the results)."""
        if self.record is None:
            return None
        doc = self.record.write(
            global_batch=self.job.global_batch,
            batch_size=self.spec.batch_size,
            grad_accum_steps=self.spec.grad_accum_steps,
            devices=self.world,
            peak_memory_bytes=self.peaks.peak(),
            failed=bool(ended and ended[0]),
        )
        results = {"steps": self.state.step, "final_loss": self.state.last_loss, **self.last_eval} if ended else None
        self.record.update(doc, ended=ended, results=results)
        return doc

    def _resume(self, path: Path) -> None:
        job = self.job

        def check(state: TrainerState) -> None:
            state.check_fits(
                str(path),
                global_batch=job.global_batch,
                batch_size=self.spec.batch_size,
                steps_per_epoch=job.steps_per_epoch,
            )
            check_same_job(path, self.spec, state.scheduler, job.schedule.state_dict())
            warn_changed_run(state, self.spec.seed, job.total_steps, self.log)

        state = load_checkpoint(
            path, check, job.model, job.optimizer, job.schedule, job.scaler, self.spec.model, self.opts.trust_checkpoint
        )
        state = state.in_layout(self.spec.batch_size, self.world, self.spec.grad_accum_steps)
        self.runner.micro.ways = state.micro_batch_split
        if state.micro_batch_split > 1:
            self.log(
                f"the checkpoint's run backed off after running out of memory: continuing with micro-batch "
                f"{self.runner.micro.size} x {self.spec.grad_accum_steps * state.micro_batch_split} accumulation"
            )
        self.budget.prior_s = float(state.totals.pop("wall_s", 0.0))
        state.totals = {**self.state.totals, **state.totals}
        state.total_steps = job.total_steps
        self.state = state
        self.log(
            f"resumed from {path} (step {state.step}, epoch index {state.epoch}, micro-batch "
            f"{state.batch_in_epoch} of the epoch)"
        )

    # ---- evaluation and the end --------------------------------------------------------------------------
    def _evaluate(self) -> None:
        if not self.is_writer or self.job.eval_ds is None:
            return
        self.peaks.checkpoint()
        self.last_eval = evaluate(self.runner, self.state.step)
        acc = self.last_eval["eval_accuracy"]
        self.log(
            f"eval at step {self.state.step} (epoch {self.epochs_done():.2f}): loss "
            f"{self.last_eval['eval_loss']:.4f}" + (f", accuracy {acc:.2%}" if acc is not None else "")
        )
        if self.metrics is not None:
            self.metrics.write(
                {"step": self.state.step, "epoch": self.epochs_done(), **self.last_eval},
                ("eval_loss", "eval_accuracy"),
                prefix="eval",
            )

    def summary(self, comparison: dict[str, Any] | None = None) -> dict[str, Any]:
        """summary.json: steps, losses, rates (samples/s), peak allocated bytes, params sha256, wall seconds, cost (USD
        at ``budget.price_usd_per_hour``), the micro-batch and accumulation that ran, ``tf32``, ``comparison``."""
        st, job, t = self.state, self.job, self.state.totals
        wall = self.budget.wall_s()  # once: wall_seconds and cost_usd must agree
        return {
            "steps": st.step,
            "epochs": st.step / job.steps_per_epoch,
            "final_loss": st.last_loss,
            "eval_loss": self.last_eval["eval_loss"],
            "eval_accuracy": self.last_eval["eval_accuracy"],
            "samples_per_s": t["samples"] / t["train_s"] if t["train_s"] else None,
            "data_wait_fraction": t["wait_s"] / t["train_s"] if t["train_s"] else None,
            "peak_memory_bytes": self.peaks.peak(),
            "peak_memory_kind": "gpu max_memory_allocated" if job.on_gpu else "cpu host allocator (rank 0)",
            "params_sha256": params_sha256(job.model),
            "global_batch": job.global_batch,
            "devices": self.world,
            "device": "gpu" if job.on_gpu else "cpu",
            "precision": self.spec.precision.value,
            "tf32": self.spec.tf32,
            "amp_active": job.amp,
            "train_seconds": t["train_s"],
            "samples": int(t["samples"]),
            "last_checkpoint": self.store.path_for(self.last_ckpt_step).name if self.store.list() else None,
            "wall_seconds": wall,
            "checkpoint_write_s": self.ckpt.write_s,
            "checkpoint_interval_s": self.ckpt.interval_s,
            "cost_usd": self.budget.cost_usd(wall),
            "micro_batch_size": self.runner.micro.size,
            "grad_accum_steps": self.spec.grad_accum_steps * self.runner.micro.ways,
            "oom_backoffs": self.runner.micro.backoffs,
            "comparison": comparison,
        }

    def _end(self, code: int, reason: str, summary: dict[str, Any] | None = None) -> RunResult:
        if self.is_writer:
            write_status(self.run_dir, code, reason, self.state.step)
            if summary is None:  # a finished run's summary carries the comparison, recorded with it
                self._compare(ended=(code, reason))
        self.peers.stand_down()  # the outcome is recorded: a peer lost in this barrier must not change it
        self.peers.barrier("the end")
        return RunResult(code, reason, self.state.step, summary)

    def _end_done(self) -> RunResult:
        summary = None
        if self.is_writer:
            self._save()
            summary = self.summary(self._compare(ended=(EXIT_OK, "finished")))
            write_summary(self.run_dir, summary)
        return self._end(EXIT_OK, "finished", summary)

    def _end_stopped(self) -> RunResult:
        if self.is_writer:
            path = self._save()
            self.log(
                f"stop signal: saved {path} at step {self.state.step}; exit {EXIT_REQUEUE} (requeue); run again "
                "with --resume auto to continue."
            )
        return self._end(EXIT_REQUEUE, self.stop.reason)

    def _end_budget(self) -> RunResult:
        reason = self.budget.exceeded() or f"budget reached on another rank ({self.budget.limits()})"
        if self.is_writer:
            path = self._save()
            reason += (
                f"; saved {path} at step {self.state.step}. Raise the limit (wall time counts across resumes) "
                "and run again with --resume auto to continue."
            )
            self.log(reason)
        return self._end(EXIT_BUDGET, reason)

    def _end_nonfinite(self, loss: float) -> RunResult:
        last = self.store.latest_valid() if self.is_writer else None
        msg = (
            f"the loss is {loss} at step {self.state.step + 1} (not finite); stopped without updating or saving. "
            f"Last good checkpoint: {last or 'none'}. Lower `lr`, add warm-up, or check the data."
        )
        return self._end(EXIT_NONFINITE, msg)  # the CLI prints msg (from status.json when launched)
