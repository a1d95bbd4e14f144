"""paddlefit.train.oom: the out-of-memory back-off's split arithmetic and Paddle's OOM errors (exact values)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from paddlefit.errors import JobFailedError, PaddlefitError
from paddlefit.train.oom import Split, is_out_of_memory, oom_line, slice_weights


@pytest.mark.parametrize("n", [1, 2, 3, 7, 16, 31, 32, 33, 100])
@pytest.mark.parametrize("ways", [1, 2, 4, 8, 64])
def test_slices_cover_the_batch_and_weights_are_shares(n: int, ways: int) -> None:
    slices = slice_weights(n, ways)
    assert len(slices) == min(n, ways)
    assert slices[0][0] == 0 and slices[-1][1] == n
    assert all(a < b for a, b, _ in slices) and all(slices[i][1] == slices[i + 1][0] for i in range(len(slices) - 1))
    sizes = [b - a for a, b, _ in slices]
    assert max(sizes) - min(sizes) <= 1
    for a, b, w in slices:
        assert Fraction(w).limit_denominator(10**6) == Fraction(b - a, n)
    assert sum(w for _, _, w in slices) == pytest.approx(1.0, abs=1e-12)


def test_even_split_weights_are_exact_reciprocals() -> None:
    assert slice_weights(32, 4) == [(0, 8, 0.25), (8, 16, 0.25), (16, 24, 0.25), (24, 32, 0.25)]
    assert slice_weights(5, 2) == [(0, 2, 0.4), (2, 5, 0.6)]
    with pytest.raises(ValueError):
        slice_weights(0, 2)


def test_split_halves_down_to_one_sample() -> None:
    s = Split(batch_size=32)
    seen = [s.size]
    while s.can_halve():
        seen.append(s.halve())
    assert seen == [32, 16, 8, 4, 2, 1] and s.ways == 32 and s.backoffs == 5
    odd = Split(batch_size=5)
    assert [odd.size, odd.halve(), odd.halve(), odd.halve()] == [5, 3, 2, 1] and not odd.can_halve()
    assert [Split.valid_ways(w, 8) for w in (1, 2, 16, 32, 3, 0, True, 2.0)] == [
        True,
        True,
        True,
        False,
        False,
        False,
        False,
        False,
    ]


def test_out_of_memory_recognised_in_both_forms() -> None:
    direct = MemoryError("(ResourceExhausted) Fail to alloc memory of 4096 size, error code is 12.")
    wrapped = OSError(
        "(External) Error in PyLayer backward\n  MemoryError: (ResourceExhausted) Out of memory error "
        "on GPU 0. Cannot allocate 2.0GiB."
    )
    assert is_out_of_memory(direct) and is_out_of_memory(wrapped) and not is_out_of_memory(ValueError("shape"))
    assert oom_line(direct) == "MemoryError: (ResourceExhausted) Fail to alloc memory of 4096 size, error code is 12"
    assert oom_line(wrapped) == (
        "OSError: MemoryError: (ResourceExhausted) Out of memory error on GPU 0. Cannot allocate 2.0GiB"
    )
    assert JobFailedError("x").exit_code == 1 and PaddlefitError("x").exit_code == 2


def test_a_micro_batch_cuts_nested_labels_too() -> None:
    """The back-off's micro-batch keeps inputs and labels together: a dict label (CTC's {text, length}) and a list
    of maps (a DB detector's) are cut as the tensors beside them are."""
    import paddle

    from paddlefit.models.calling import Batch

    x = paddle.arange(8 * 3, dtype="float32").reshape([8, 3])
    label = {
        "text": paddle.arange(8 * 5).reshape([8, 5]),
        "length": paddle.arange(8),
        "maps": [paddle.ones([8, 4, 4]), paddle.zeros([8, 4, 4])],
        "name": "kept",
    }
    part = Batch([x], {}, label).slice(2, 5)
    assert part.args[0].shape == [3, 3] and part.args[0][0, 0].item() == 6.0
    assert part.label["text"].shape == [3, 5] and part.label["length"].tolist() == [2, 3, 4]
    assert [m.shape for m in part.label["maps"]] == [[3, 4, 4], [3, 4, 4]] and part.label["name"] == "kept"
