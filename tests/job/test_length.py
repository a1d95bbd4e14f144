"""paddlefit.job.length: the job length in optimizer steps, checked against the trainer's sampler."""

import itertools

import pytest

from paddlefit.errors import PaddlefitError
from paddlefit.job.length import batches_per_rank, job_steps, plan_job_length, steps_per_epoch, total_steps
from paddlefit.jobspec.spec import JobSpec


class _Sized:
    """A dataset of ``n`` samples; the sampler only asks for its length."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def _spec(**kw):
    return JobSpec(model="lenet", **kw)


def test_batches_and_steps_match_the_trainers_sampler():
    from paddlefit.train.data import ResumableBatchSampler

    for n, b, world, accum, drop_last in itertools.product(
        (1, 2, 5, 7, 9, 16, 31, 32, 33, 64, 100, 257), (1, 3, 8), (1, 2, 3, 4), (1, 2, 3), (True, False)
    ):
        ranks = [ResumableBatchSampler(_Sized(n), b, world, r, True, drop_last, 0, accum) for r in range(world)]
        lengths = {len(s) for s in ranks} | {sum(1 for _ in s) for s in ranks}  # every rank draws the same count
        assert lengths == {batches_per_rank(n, b, world, accum, drop_last)}, (n, b, world, accum, drop_last)
        assert len(ranks[0]) == steps_per_epoch(n, b, world, accum, drop_last) * accum


def test_the_epochs_order_does_not_depend_on_the_layout():
    """Every layout of global batch 24 deals one seeded permutation: step s uses the same 24 samples, each sample
    of the epoch once (drop_last: the 100 - 4 x 24 left over are the same 4 for every layout)."""
    from paddlefit.train.data import ResumableBatchSampler

    def steps(b: int, world: int, accum: int, epoch: int = 5) -> list[list[int]]:
        ranks = [ResumableBatchSampler(_Sized(100), b, world, r, True, True, 7, accum) for r in range(world)]
        for s in ranks:
            s.set_position(epoch, 0)
        batches = [list(s) for s in ranks]  # batches[rank][j]
        rounds = [list(itertools.chain(*(batches[r][j] for r in range(world)))) for j in range(len(batches[0]))]
        return [list(itertools.chain(*rounds[i : i + accum])) for i in range(0, len(rounds), accum)]

    want = steps(24, 1, 1)
    assert len(want) == 4 and all(len(s) == 24 for s in want)
    used = list(itertools.chain(*want))
    assert len(set(used)) == 96 and set(used) <= set(range(100))
    for b, world, accum in ((12, 2, 1), (6, 2, 2), (8, 3, 1), (2, 4, 3), (1, 3, 8), (4, 1, 6)):
        assert steps(b, world, accum) == want, (b, world, accum)
    assert steps(24, 1, 1, epoch=6) != want  # another epoch, another order
    one = ResumableBatchSampler(_Sized(100), 24, 1, 0, True, True, 7)
    one.set_position(5, 2)  # resume at the third step: the rest of the same order
    assert list(one) == want[2:]


def test_padding_and_accumulation_are_the_trainers():
    from paddlefit.train.data import ResumableBatchSampler

    assert steps_per_epoch(100, 32, 1, 1, drop_last=False) == 4 and steps_per_epoch(100, 32, 1, 1, True) == 3
    assert steps_per_epoch(100, 8, 2, 3, drop_last=False) == 3  # ceil(100 / 48): the last step padded
    assert batches_per_rank(100, 8, 2, 3, drop_last=False) == 9
    assert steps_per_epoch(10, 32, 1, 1, drop_last=True) == 0 and steps_per_epoch(10, 32, 1, 1, False) == 0
    s = ResumableBatchSampler(_Sized(10), 4, 1, 0, False, False, 0)
    assert list(s) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]  # filled up from the order's start, as Paddle pads


def test_job_steps_rounds_epochs_and_caps_with_max_steps():
    assert job_steps(42, 15, None) == 630
    assert job_steps(42, 2.5, None) == 105 and job_steps(3, 0.1, None) == 1  # round, at least one step
    assert job_steps(42, 15, 100) == 100 and job_steps(42, 1, 100) == 42
    assert job_steps(42, None, 7) == 7 and job_steps(42, None, None) is None


def test_total_steps_of_a_spec():
    spec = _spec(batch_size=32, epochs=15, data={"train": "digits"})
    assert total_steps(spec, 1348) == 1348 // 32 * 15
    assert total_steps(spec, 1348, batch_size=16, world=2) == 674 // 16 * 15
    assert total_steps(_spec(batch_size=8, grad_accum_steps=2, epochs=1, max_steps=3), 100) == 3
    assert total_steps(_spec(epochs=2), None) is None  # epochs without data: unknown
    assert total_steps(_spec(epochs=2, max_steps=9), None) == 9
    assert total_steps(_spec(), 100) is None
    with pytest.raises(PaddlefitError, match="fewer than one global batch"):
        total_steps(_spec(batch_size=32, epochs=1), 31)


def test_plan_job_length_is_total_steps_global_batches():
    spec = _spec(batch_size=8, grad_accum_steps=2, epochs=3, data={"drop_last": False})
    steps = total_steps(spec, 100, 8, 2)
    assert plan_job_length(spec, 100, 8, 2) == (steps * 8 * 2 * 2, 1.0)
    assert plan_job_length(_spec(epochs=1), None, 8, 1) == (None, None)
