"""Where the run is in its data: a resumable, seeded batch sampler whose order does not depend on the world size,
and guards that turn a failing dataset into an error instead of a hung DataLoader."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from paddlefit.errors import PaddlefitError
from paddlefit.job.length import steps_per_epoch
from paddlefit.train.oom import first_line

__all__ = ["ResumableBatchSampler", "close_loader_iterator", "guard_single_process", "next_batch"]


class ResumableBatchSampler:
    """One seeded global order per epoch, dealt to the ranks: the order of samples does not depend on the world size.

    Epoch ``e``'s order is ``np.random.RandomState(seed * 1_000_003 + e).permutation(n)`` (``range(n)`` without
    shuffle), the same on every rank and for every device count. Optimizer step ``s`` of the epoch takes the next
    ``global_batch = batch_size x num_replicas x grad_accum_steps`` samples of that order; its ``j``-th loaded batch
    (``j < grad_accum_steps``) is the next ``batch_size x num_replicas`` of them, of which rank ``r`` takes the
    ``r``-th run of ``batch_size``. So after ``s`` steps the epoch has used ``order[:s x global_batch]`` whatever the
    layout, and a run resumed with another device count but the same global batch continues with exactly the
    samples the epoch has not yet seen.

    An epoch is :func:`paddlefit.job.length.steps_per_epoch` optimizer steps: ``floor(n / global_batch)`` with
    ``drop_last`` (the rest of the order is unused), else ``ceil(n / global_batch)``, the last step filled up by
    repeating the order from its start (as ``paddle.io.DistributedBatchSampler`` pads its index list,
    ``python/paddle/io/dataloader/batch_sampler.py``). Paddle's sampler deals each rank a strided slice of the
    order instead, which differs with the world size. With one device, ``drop_last`` and no accumulation the order
    is Paddle's (it shuffles with ``RandomState(epoch)``; we set that epoch to ``seed * 1_000_003 + e``).

    ``len()`` is this rank's loaded batches per epoch (``steps x grad_accum_steps``); ``skip`` of them are dropped
    at the start of the next iteration (the ones consumed before the checkpoint).
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int,
        num_replicas: int,
        rank: int,
        shuffle: bool,
        drop_last: bool,
        seed: int,
        grad_accum_steps: int = 1,
    ) -> None:
        self.size = len(dataset)
        self.batch_size, self.num_replicas, self.rank = batch_size, num_replicas, rank
        self.shuffle, self.seed, self.grad_accum_steps = shuffle, seed, grad_accum_steps
        self.global_batch = batch_size * num_replicas * grad_accum_steps
        self.steps = steps_per_epoch(self.size, batch_size, num_replicas, grad_accum_steps, drop_last)
        self.epoch = 0
        self.skip = 0

    def set_position(self, epoch: int, skip: int) -> None:
        """Next iteration yields epoch ``epoch`` from this rank's loaded batch ``skip`` on."""
        self.epoch, self.skip = epoch, skip

    def order(self, epoch: int) -> np.ndarray:
        """Epoch ``epoch``'s sample indices, ``steps x global_batch`` of them (int64), the same on every rank."""
        if self.shuffle:
            base = np.random.RandomState((self.seed * 1_000_003 + epoch) % 2**32).permutation(self.size)
        else:
            base = np.arange(self.size)
        return np.resize(base, self.steps * self.global_batch)  # repeats from the start when padding

    def __iter__(self) -> Iterator[list[int]]:
        order = self.order(self.epoch)
        skip, self.skip = self.skip, 0
        round_size = self.batch_size * self.num_replicas
        for j in range(skip, len(self)):
            start = j * round_size + self.rank * self.batch_size
            yield order[start : start + self.batch_size].tolist()

    def __len__(self) -> int:
        return self.steps * self.grad_accum_steps


class _FailedSample:
    """Stands in for a sample whose ``__getitem__`` raised (single-process loading)."""

    def __init__(self, index: int, exc: BaseException) -> None:
        self.message = f"sample {index}: {type(exc).__name__}: {first_line(exc)}"


def guard_single_process(dataset: Any, errors: list[str]) -> tuple[Any, Callable[[list[Any]], Any]]:
    """Wrap ``dataset`` and Paddle's ``default_collate_fn`` so an exception in either is recorded in ``errors`` and
    the single-process loader's reader thread ends cleanly (collate returning None ends it) instead of dying and
    leaving the main thread blocked on its queue (``python/paddle/io/dataloader/dataloader_iter.py``).

    Returns:
        (dataset, collate_fn) for ``paddle.io.DataLoader``.
    """
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
            errors.append(
                f"collating a batch: {type(exc).__name__}: {first_line(exc)} (do all samples have the "
                "same shapes and dtypes?)"
            )
            return None

    return Guarded(), collate


def next_batch(it: Iterator[Any], errors: list[str], step: int, expected: int) -> Any:
    """The next batch of the train DataLoader iterator ``it``.

    Args:
        errors: filled by :func:`guard_single_process` (single-process loading).
        step: the optimizer step being run (1-based), for messages.
        expected: the sampler's batches per epoch, for messages.

    Raises:
        PaddlefitError: a dataset or collate error, or the loader ending early. (Paddle's single-process
            DataLoader would otherwise block forever when its reader thread dies.)
    """
    try:
        batch = next(it)
    except StopIteration:
        if errors:
            raise PaddlefitError(f"step {step}: reading `data.train` failed: {errors[0]}") from None
        raise PaddlefitError(
            f"step {step}: `data.train` ended early: the DataLoader yielded fewer batches than its "
            f"sampler's {expected}."
        ) from None
    except Exception as exc:  # multi-process loader: Paddle re-raises the worker's error (printed above)
        raise PaddlefitError(
            f"step {step}: the DataLoader failed: {type(exc).__name__}: {first_line(exc)} (the "
            "worker's traceback is printed above)."
        ) from None
    if errors:
        raise PaddlefitError(f"step {step}: reading `data.train` failed: {errors[0]}")
    return batch


def close_loader_iterator(it: Any) -> None:
    """Shut a ``paddle.io.DataLoader`` iterator down now, its reader thread joined (worker processes, if any, are
    Paddle's own shutdown's).

    Paddle's shutdown (``_try_shutdown_all`` in ``python/paddle/io/dataloader/dataloader_iter.py``) closes the
    batch queue, sets the reader thread's done event, then checks ``is_alive`` once a second
    (``_shutdown_thread``): a reader still running at the first check, as every run that stops mid-epoch leaves it,
    costs a whole second (measured: 1.0 s of a 2-step ``train``'s exit). Here the thread is joined after the same
    two steps (it returns within milliseconds of the queue closing), so Paddle's shutdown then finds it gone. The
    private names are read with ``getattr``: without them this is Paddle's shutdown alone.
    """
    queue, done, thread = (getattr(it, n, None) for n in ("_blocking_queue", "_thread_done_event", "_thread"))
    if queue is not None and done is not None and thread is not None and thread is not threading.current_thread():
        done.set()
        queue.close()  # closing again in Paddle's shutdown is a no-op (the C++ queue's Close sets a flag)
        thread.join(timeout=5.0)
    shutdown = getattr(it, "_try_shutdown_all", None)
    if shutdown is not None:
        shutdown()
