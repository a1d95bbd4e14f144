"""One optimizer step of a built job: micro-batch forwards and backwards, the out-of-memory back-off, the update.

:class:`StepRunner` is what ``train``'s loop, ``profile`` and ``tune`` call, so they time and measure the same step.
Per optimizer step:

1. ``grad_accum_steps`` loaded batches of ``batch_size`` samples each (split ``micro.ways`` ways after back-offs);
   forward under ``paddle.amp.auto_cast`` when AMP is on (GPU only), loss scaled by its share of the step's
   samples, backward (through ``GradScaler`` for fp16). Non-final micro-steps run under ``DataParallel.no_sync()``
   so gradients are all-reduced once per step.
2. :meth:`StepRunner.optimizer_step`: GradScaler or optimizer step, ``clear_grad``, LR scheduler step.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable, Iterator
from typing import Any

from paddlefit.errors import JobFailedError, PaddlefitError
from paddlefit.jobspec.spec import JobSpec
from paddlefit.train.build import BuiltJob
from paddlefit.train.data import close_loader_iterator, next_batch
from paddlefit.train.oom import (
    OutOfMemory,
    Split,
    first_line,
    is_out_of_memory,
    oom_line,
    slice_weights,
)

__all__ = ["StepRunner", "scratch_runner"]


class StepRunner:
    """Runs optimizer steps of ``job`` on rank ``rank`` of ``world``.

    Attributes:
        micro: the train batch's :class:`~paddlefit.train.oom.Split` (``micro.size`` = micro-batch, samples).
        eval_split: the evaluation batch's split.
    """

    def __init__(self, spec: JobSpec, job: BuiltJob, world: int, rank: int, log: Callable[[str], None]) -> None:
        self.spec = spec
        self.job = job
        self.world = world
        self.rank = rank
        self.log = log
        self.micro = Split(spec.batch_size)
        self.eval_split = Split(spec.data.eval_batch_size or spec.batch_size)

    def autocast(self) -> Any:
        """``paddle.amp.auto_cast`` at the job's level and dtype when AMP is on, else a null context."""
        import paddle

        if not self.job.amp:
            return contextlib.nullcontext()
        return paddle.amp.auto_cast(level=self.spec.precision.level, dtype=self.job.amp_dtype)

    def as_batch(self, data: Any) -> Any:
        """A DataLoader batch as a :class:`~paddlefit.models.calling.Batch` (inputs by position and keyword)."""
        from paddlefit.models.calling import batch_from_loader

        return batch_from_loader(data, self.job.input_specs, self.spec.label_arg)

    def next_batch(self, it: Iterator[Any], step: int) -> Any:
        """The next train batch (:func:`paddlefit.train.data.next_batch`); ``step`` is 1-based, for messages."""
        return next_batch(it, self.job.data_errors, step, len(self.job.sampler))

    def train_step(self, it: Iterator[Any], step: int) -> tuple[float, float]:
        """Optimizer step ``step`` (1-based)'s micro-batches from ``it``: forward and backward, gradients all-reduced
        once. Returns (mean loss over the step's samples, seconds waiting for data).

        With ``oom_backoff`` an out-of-memory error (:func:`~paddlefit.train.oom.is_out_of_memory`) on any rank makes
        every rank drop the step's gradients, split each loaded batch twice as finely and redo the step on the same
        batches. Multi-device, the ranks learn of each other's error in one MAX all-reduce, which is why backward
        then runs under ``no_sync()`` for every micro-batch and the gradients are all-reduced afterwards
        (``fused_allreduce_gradients``, PaddleNLP's pattern for accumulation): a rank that failed mid-backward would
        otherwise leave the others waiting in DataParallel's bucket all-reduce.

        Raises:
            PaddlefitError: a data error; the model or loss raising (:class:`~paddlefit.errors.JobFailedError`);
                out of memory with ``oom_backoff: false`` or at micro-batch 1.
        """
        accum = self.spec.grad_accum_steps
        sync_after = self.world > 1 and self.spec.oom_backoff
        wait = 0.0
        batches: list[Any] = []  # this step's batches, kept so a back-off redoes the step on the same samples
        while True:
            weighted: list[tuple[Any, float]] = []
            failed = None
            try:
                for micro in range(accum):
                    if micro == len(batches):
                        t = time.perf_counter()
                        batches.append(self.next_batch(it, step))
                        wait += time.perf_counter() - t
                    weighted += self._backward(
                        self.as_batch(batches[micro]), step, last=micro == accum - 1, sync_after=sync_after
                    )
            except OutOfMemory as exc:
                failed = str(exc)
            failed_rank = self._agree_failed_rank(failed is not None) if sync_after else (self.rank if failed else None)
            if failed_rank is None:
                if sync_after:
                    from paddle.distributed.fleet.utils.hybrid_parallel_util import fused_allreduce_gradients

                    fused_allreduce_gradients(list(self.job.model.parameters()), None)
                return float(sum(float(x.item()) * w for x, w in weighted) / accum), wait
            weighted.clear()
            self._back_off(failed, failed_rank, step)

    def _backward(self, batch: Any, step: int, last: bool, sync_after: bool) -> list[tuple[Any, float]]:
        """Forward and backward of one loaded batch in ``micro.ways`` slices
        (:func:`~paddlefit.train.oom.slice_weights`), each slice's loss scaled by its share of the step's samples,
        so the accumulated gradient equals the whole batch's (for losses that average over the batch; BatchNorm
        statistics see the smaller slices). Returns (unscaled loss, weight) per slice.

        Raises:
            OutOfMemory: left to :meth:`train_step`.
            JobFailedError: any other error of the model or loss; PaddlefitError: a loss that is not a scalar.
        """
        from paddlefit.models.calling import call_model, describe_label
        from paddlefit.train.guards import is_collective_failure

        accum = self.spec.grad_accum_steps
        slices = slice_weights(batch.size, self.micro.ways)
        k = len(slices)
        even = batch.size % k == 0
        out = []
        for j, (a, b, w) in enumerate(slices):
            sb = batch.slice(a, b) if k > 1 else batch
            sync = self.world == 1 or (last and j == k - 1 and not sync_after)
            ctx = contextlib.nullcontext() if sync else self.job.dp_model.no_sync()
            try:
                with ctx:
                    with self.autocast():
                        o = call_model(self.job.dp_model, sb, self.spec.label_arg)
                        first = self.job.job_loss.how is None
                        loss = self.job.job_loss(o, sb)
                        del o  # the outputs (logits) must not stay alive through the backward
                        if first:
                            self.log(f"loss: {self.job.job_loss.describe()}")
                    if k == 1:
                        scaled = loss / accum if accum > 1 else loss
                    elif even:  # the same arithmetic as batch_size / k with accumulation x k
                        scaled = loss / (accum * k)
                    else:
                        scaled = loss * (w / accum)
                    (self.job.scaler.scale(scaled) if self.job.scaler else scaled).backward()
            except PaddlefitError as exc:
                raise PaddlefitError(f"step {step}: {exc}") from None
            except (Exception, SystemExit) as exc:  # a model calling sys.exit() is a failing model, not an exit
                if is_out_of_memory(exc):
                    raise OutOfMemory(oom_line(exc)) from None
                if self.world > 1 and is_collective_failure(exc):  # DataParallel's all-reduce: another rank lost
                    raise  # Trainer.run reports it (guards.as_lost_rank), not as the model's error
                from paddlefit.models.build import failing_layer, missing_cpu_kernel

                where = failing_layer(exc)
                if not self.job.on_gpu and (op := missing_cpu_kernel(exc)):
                    raise PaddlefitError(
                        f"step {step}: `model: {self.spec.model}` calls `{op}`{' in ' + where if where else ''}, which "
                        "Paddle has no CPU kernel for (a GPU-only fused op): train it on a CUDA GPU with "
                        "paddlepaddle-gpu, or build it without the fused layer (PaddleNLP's BERT: "
                        "`BertConfig(fuse=False)`); `paddlefit plan` prices it on every GPU."
                    ) from None
                raise JobFailedError(
                    f"step {step}: the model or loss raised {type(exc).__name__}: {first_line(exc)}"
                    f"{' in ' + where if where else ''} (inputs {sb.describe()}, labels {describe_label(sb.label)}; "
                    f"model `{self.spec.model}`, loss `{self.job.job_loss.describe()}`). Set PADDLEFIT_DEBUG=1 for the "
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

    def _back_off(self, error: str | None, failed_rank: int, step: int) -> None:
        """Every rank: drop the step's gradients, free cached device memory, split micro-batches twice as finely.

        Raises:
            PaddlefitError: ``oom_backoff: false`` (the job as written does not fit).
            JobFailedError: the micro-batch is already 1 sample.
        """
        current = self.micro.size
        where = f"step {step}, rank {failed_rank}, micro-batch {current}"
        what = error if error is not None else "reported by that rank"
        if not self.spec.oom_backoff:
            raise PaddlefitError(
                f"out of memory ({where}): {what}. Lower `batch_size` (raise `grad_accum_steps` to "
                "keep the global batch), or set `oom_backoff: true` to let train do that itself. "
                "`paddlefit plan --config` predicts the peak."
            )
        if not self.micro.can_halve():
            raise JobFailedError(
                f"out of memory at micro-batch 1 ({where}): {what}. There is nothing left to halve: "
                "the model states and one sample's activations do not fit. Use AMP (`precision: "
                "bf16-o1`/`fp16-o1`), a smaller model or a device with more memory; `paddlefit plan "
                "--config` predicts the peak."
            )
        self.job.optimizer.clear_grad(set_to_zero=False)  # release the gradient buffers, not just zero them
        self.free_cached()
        size = self.micro.halve()
        said = f": {error}" if error is not None else " (reported by that rank)"
        self.log(
            f"out of memory ({where}){said}. Redoing the step with micro-batch {size} x "
            f"{self.spec.grad_accum_steps * self.micro.ways} accumulation per device; global batch "
            f"{self.job.global_batch} unchanged."
        )

    def free_cached(self) -> None:
        """Collect garbage and, on GPU, return the allocator's cached blocks (``paddle.device.cuda.empty_cache``)."""
        gc.collect()
        if self.job.on_gpu:
            import paddle

            paddle.device.cuda.empty_cache()

    def optimizer_step(self) -> None:
        """Apply the accumulated gradients (through the GradScaler for fp16), clear them, step the LR schedule."""
        job = self.job
        if job.scaler is not None:
            job.scaler.step(job.optimizer)
            job.scaler.update()
        else:
            job.optimizer.step()
        job.optimizer.clear_grad()
        job.schedule.step()


@contextlib.contextmanager
def scratch_runner(spec: JobSpec, steps: int) -> Iterator[tuple[StepRunner, Callable[[], Any]]]:
    """A one-device :class:`StepRunner` of ``spec`` built for ``steps`` optimizer steps (model, DataLoader,
    optimizer, AMP exactly as ``train`` builds them), for measuring rather than training (``paddlefit profile``
    and ``tune``). Nothing is written.

    Yields:
        (runner, step_batches): call ``step_batches()`` at the start of each optimizer step for the DataLoader
        iterator to draw that step's ``grad_accum_steps`` batches from; it starts the next epoch when fewer
        remain, as ``train`` does. DataLoader workers (persistent ones included) are shut down on exit, not at
        interpreter exit, where Paddle would warn that they "exit unexpectedly"
        (``python/paddle/io/dataloader/dataloader_iter.py``, ``_try_shutdown_all``).

    Raises:
        PaddlefitError: the spec's model, data or loss fail (as in ``train``).
    """
    from paddlefit.train.build import build_job, seed_all, setup_device

    spec = spec.model_copy(update={"max_steps": steps, "epochs": None, "devices": 1})
    accum = spec.grad_accum_steps
    quiet: Callable[[str], None] = lambda m: None  # noqa: E731
    on_gpu = setup_device(spec, 1, quiet)
    seed_all(spec.seed)
    job = build_job(spec, 1, 0, on_gpu, quiet)
    runner = StepRunner(spec, job, 1, 0, quiet)
    job.model.train()
    state: dict[str, Any] = {"epoch": -1, "consumed": 0, "it": None}

    def step_batches() -> Any:
        if state["it"] is None or state["consumed"] + accum > len(job.sampler):
            state["epoch"] += 1
            state["consumed"] = 0
            job.sampler.set_position(state["epoch"], 0)
            state["it"] = iter(job.loader)
        state["consumed"] += accum
        return state["it"]

    try:
        yield runner, step_batches
    finally:
        for obj in (state["it"], getattr(job.loader, "_iterator", None)):
            if obj is not None:
                close_loader_iterator(obj)  # the public API has no shutdown (paddlefit.train.data)
        state["it"] = None
        gc.collect()
