"""Where the run is in its data: a resumable, seeded batch sampler, and guards that turn a failing dataset into
an error instead of a hung DataLoader."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from paddlefit.errors import PaddlefitError
from paddlefit.train.oom import first_line

__all__ = ["ResumableBatchSampler", "guard_single_process", "next_batch"]


class ResumableBatchSampler:
    """``paddle.io.DistributedBatchSampler`` with a seeded shuffle per epoch and a start position.

    The shuffle of epoch ``e`` uses ``np.random.RandomState(seed * 1_000_003 + e)`` (Paddle shuffles with
    ``RandomState(epoch)``, ``python/paddle/io/dataloader/batch_sampler.py``), so epoch order depends only on
    (seed, epoch) and a resumed run sees the same batches. ``skip`` batches are dropped at the start of the next
    iteration (the ones consumed before the checkpoint). ``len()`` is the batches per epoch of this rank
    (Paddle's: ``ceil(len(dataset) / num_replicas)`` samples, padded by repetition, in batches of ``batch_size``,
    the last one dropped when short and ``drop_last``).
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
            errors.append(f"collating a batch: {type(exc).__name__}: {first_line(exc)} (do all samples have the "
                          "same shapes and dtypes?)")  # fmt: skip
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
        raise PaddlefitError(f"step {step}: `data.train` ended early: the DataLoader yielded fewer batches than its "
                             f"sampler's {expected}.") from None  # fmt: skip
    except Exception as exc:  # multi-process loader: Paddle re-raises the worker's error (printed above)
        raise PaddlefitError(f"step {step}: the DataLoader failed: {type(exc).__name__}: {first_line(exc)} (the "
                             "worker's traceback is printed above).") from None  # fmt: skip
    if errors:
        raise PaddlefitError(f"step {step}: reading `data.train` failed: {errors[0]}")
    return batch
