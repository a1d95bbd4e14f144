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
