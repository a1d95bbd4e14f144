"""The shipped copy of Paddle's AMP op lists is the installed Paddle's (a Paddle upgrade that changes them fails
here, so the copy is refreshed rather than drifting)."""

import pytest

from paddlefit.estimate.amp import amp_lists


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
@pytest.mark.parametrize("level", ["O1", "O2"])
def test_shipped_amp_lists_are_the_installed_paddles(half, level):
    al = pytest.importorskip("paddle.amp.amp_lists")
    white, black = amp_lists(half, level)
    assert white == frozenset(al.white_list()[half][level])
    assert black == frozenset(al.black_list()[half][level])
    assert "matmul_v2" in white and ("softmax" in black) == (level == "O1")
