"""paddlefit.train.data: the DataLoader iterator a run leaves mid-epoch is closed at once."""

from __future__ import annotations


def test_close_loader_iterator_stops_the_reader_thread_of_a_half_read_epoch() -> None:
    """A run that stops mid-epoch leaves the single-process loader's reader thread filling its queue; closing the
    iterator joins it (Paddle's own shutdown polls it once a second) and marks the iterator shut down."""
    import paddle

    from paddlefit.train.data import close_loader_iterator

    ds = paddle.io.TensorDataset([paddle.arange(4000, dtype="float32").reshape([1000, 4])])
    it = iter(paddle.io.DataLoader(ds, batch_size=2))
    first = next(it)
    assert first[0].shape == [2, 4]
    thread = it._thread
    assert thread is not None and thread.is_alive()  # still reading ahead
    close_loader_iterator(it)
    assert not thread.is_alive() and it._shutdown and it._thread is None
    close_loader_iterator(it)  # twice is harmless
    close_loader_iterator(object())  # not an iterator of Paddle's: nothing to do


def test_digits_are_scikit_learns_load_digits_read_without_importing_it() -> None:
    """`digits` reads scikit-learn's digits.csv.gz itself (importing scikit-learn took ~1 s of every `train` of the
    digits job): the images and labels are load_digits()'s, in its order, and the train/test split is unchanged."""
    import subprocess
    import sys

    import numpy as np
    from sklearn.datasets import load_digits

    from paddlefit.examples.datasets import digits

    bunch = load_digits()
    train, test = digits("train"), digits("test")
    assert (len(train), len(test)) == (1348, 449)
    perm = np.random.default_rng(0).permutation(1797)
    for ds, idx in ((train, np.sort(perm[449:])), (test, np.sort(perm[:449]))):
        assert np.array_equal(ds.x, (bunch.images[idx] / 16.0).astype("float32")[:, None, :, :])
        assert np.array_equal(ds.y, bunch.target[idx].astype("int64")) and ds.y.dtype == np.int64
    code = "import sys; from paddlefit.examples.datasets import digits; digits(); print('sklearn' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert r.stdout.strip() == "False", r.stdout
