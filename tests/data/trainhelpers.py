"""Datasets and models for the trainer tests (importable as `trainhelpers:...` through PYTHONPATH)."""

from __future__ import annotations

import hashlib
import os
import time

import numpy as np

from paddlefit.examples.datasets import ArrayDataset, digits


class SlowDataset:
    """Wraps a dataset and sleeps ``delay`` seconds per sample, so a kill lands mid-run at a known pace."""

    def __init__(self, inner, delay: float) -> None:
        self.inner = inner
        self.delay = delay

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i):
        time.sleep(self.delay)
        return self.inner[i]


def env_checked_digits(split: str = "train", name: str = "HF_TOKEN", sha256: str = "") -> ArrayDataset:
    """scikit-learn digits, once the variable ``name`` of this process holds the value whose sha256 is ``sha256``
    (so a worker proves it saw a secret the spec and the logs never name)."""
    if hashlib.sha256(os.environ.get(name, "").encode()).hexdigest() != sha256:
        raise ValueError(f"{name} does not hold the expected value in rank {os.environ.get('PADDLE_TRAINER_ID')}")
    return digits(split)


def slow_digits(split: str = "train", delay: float = 0.001) -> SlowDataset:
    """scikit-learn digits, ``delay`` seconds per sample."""
    return SlowDataset(digits(split), delay)


def nan_digits(split: str = "train", bad_from: int = 160) -> ArrayDataset:
    """scikit-learn digits whose images from index ``bad_from`` on are NaN (read in order: shuffle off).
    Use with :func:`linear_digits`: Paddle's CPU ReLU maps NaN to 0, so a CNN would hide them."""
    ds = digits(split)
    x = ds.x.copy()
    x[bad_from:] = np.nan
    return ArrayDataset(x, ds.y)


def big_digits_mlp(extra_params: int = 25_000_000):
    """A digits MLP carrying an unused parameter of ``extra_params`` floats, so a checkpoint takes long to write."""
    import paddle
    import paddle.nn as nn

    class Big(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(64, 10)
            self.ballast = self.create_parameter([extra_params], dtype="float32")

        def forward(self, x):
            return self.fc(paddle.flatten(x, 1))

    return Big()


def linear_digits():
    """A linear classifier on flattened digits (no ReLU to swallow NaN)."""
    import paddle.nn as nn

    return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))


class _Raising:
    def __init__(self, bad_from: int) -> None:
        self.inner = digits("train")
        self.bad_from = bad_from

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i):
        if i >= self.bad_from:
            raise IndexError(f"bad index {i}")
        return self.inner[i]


def raising_digits(bad_from: int = 100) -> _Raising:
    """Digits whose ``__getitem__`` raises from ``bad_from`` on (Paddle's single-process loader hangs on this)."""
    return _Raising(bad_from)


def per_sample_loss(out, y):
    """A loss that forgets to reduce: shape [N]."""
    import paddle

    return paddle.nn.functional.cross_entropy(out, y, reduction="none")


def oom_digits_cnn(max_batch: int = 16, rank: int = -1, where: str = "forward"):
    """:func:`paddlefit.models.examples.digits_cnn` that runs out of memory, as a GPU would, on batches larger than
    ``max_batch`` (on ``rank`` only, or every rank when -1): it asks Paddle's allocator for 32 TiB, so the error is
    Paddle's own (``MemoryError``: "(ResourceExhausted) Fail to alloc memory ..."). ``where="backward"`` fails in
    the backward pass after the later layers' gradients exist."""
    import os

    import paddle
    import paddle.nn as nn

    from paddlefit.models.examples import digits_cnn

    me = int(os.environ.get("PADDLE_TRAINER_ID", "0"))

    def too_big(n: int) -> bool:
        return n > max_batch and rank in (-1, me)

    class FailingBackward(paddle.autograd.PyLayer):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            if too_big(int(g.shape[0])):
                paddle.empty([2**43], dtype="float32")
            return g

    class Oom(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.net = digits_cnn()

        def forward(self, x):
            if where == "forward" and too_big(int(x.shape[0])):
                paddle.empty([2**43], dtype="float32")
            h = self.net[1](self.net[0](x))
            if where == "backward":
                h = FailingBackward.apply(h)
            for layer in list(self.net)[2:]:
                h = layer(h)
            return h

    return Oom()


class SyntheticSamples:
    """``n`` seeded random samples of fixed shapes, as tuples ``(input..., label)`` or dicts (keyword inputs and a
    ``labels`` key): data of the right structure for a model whose real dataset is not installed."""

    def __init__(self, n: int, fields: dict[str, tuple[str, tuple[int, ...], int]], as_dict: bool, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.n, self.as_dict = n, as_dict
        self.names = list(fields)
        self.cols = []
        for dtype, shape, high in fields.values():
            if dtype.startswith("int"):
                self.cols.append(rng.integers(0, high, size=(n, *shape)).astype(dtype))
            else:
                self.cols.append(rng.standard_normal((n, *shape)).astype(dtype))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        vals = [c[i] for c in self.cols]
        return dict(zip(self.names, vals, strict=True)) if self.as_dict else tuple(vals)


def seg_images(n: int = 48, size: int = 16, classes: int = 4, seed: int = 0) -> SyntheticSamples:
    """(float32[3,size,size] image, int64[size,size] mask) samples."""
    return SyntheticSamples(
        n, {"x": ("float32", (3, size, size), 0), "y": ("int64", (size, size), classes)}, False, seed
    )


def kw_tokens(
    n: int = 48, seq: int = 10, vocab: int = 40, classes: int = 3, as_dict: bool = True, seed: int = 0
) -> SyntheticSamples:
    """ERNIE-style samples: input_ids, token_type_ids and a per-sample class id under ``labels``."""
    return SyntheticSamples(
        n,
        {
            "input_ids": ("int64", (seq,), vocab),
            "token_type_ids": ("int64", (seq,), 2),
            "labels": ("int64", (), classes),
        },
        as_dict,
        seed,
    )


def failing_digits_cnn(when: str = "eval", how: str = "raise"):
    """The digits CNN whose forward fails in eval mode (``when="eval"``) or from the 3rd training forward
    (``"train"``): a RuntimeError (``how="raise"``) or ``sys.exit(0)`` (``"exit"``)."""
    import sys

    import paddle

    from paddlefit.models.examples import digits_cnn

    class Failing(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.net = digits_cnn()
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            if (when == "eval" and not self.training) or (when == "train" and self.training and self.calls > 2):
                if how == "exit":
                    sys.exit(0)
                raise RuntimeError(f"the model broke in {when}")
            return self.net(x)

    return Failing()


class _Indexed:
    def __init__(self, inner, delay: float) -> None:
        self.inner, self.delay = inner, delay

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i):
        time.sleep(self.delay)
        x, y = self.inner[i]
        return x, np.int64(i), y


def indexed_digits(split: str = "train", delay: float = 0.0) -> _Indexed:
    """Digits samples ``(image, index, label)``, ``delay`` seconds each, for :func:`index_logging_cnn`."""
    return _Indexed(digits(split), delay)


def index_logging_cnn():
    """The digits CNN called as ``forward(x, idx)``; in training mode it appends the batch's sample indices to
    ``$SAMPLE_LOG.<rank>`` (one line per forward), so a test sees which samples the steps used."""
    import os

    import paddle

    from paddlefit.models.examples import digits_cnn

    log = f"{os.environ['SAMPLE_LOG']}.{os.environ.get('PADDLE_TRAINER_ID', '0')}"

    class Logging(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.net = digits_cnn()

        def forward(self, x, idx):
            if self.training:
                with open(log, "a") as f:
                    f.write(" ".join(str(int(i)) for i in idx.numpy().reshape(-1)) + "\n")
            return self.net(x)

    return Logging()


def conv3x3_stack(c: int = 256, n: int = 4):
    """``n`` bias-free 3x3 stride-1 convolutions of ``c`` channels, then the mean: FP32 Winograd's best case."""
    import paddle

    class Conv3x3Stack(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.convs = paddle.nn.LayerList([paddle.nn.Conv2D(c, c, 3, padding=1, bias_attr=False) for _ in range(n)])

        def forward(self, x):
            for conv in self.convs:
                x = conv(x)
            return x.mean()

    return Conv3x3Stack()


class _Filling(SlowDataset):
    """Digits that fill the file system of ``path`` (a file written until ENOSPC) once ``at`` samples were read."""

    def __init__(self, inner, at: int, path: str) -> None:
        super().__init__(inner, 0.0)
        self.at, self.path, self.read = at, path, 0

    def __getitem__(self, i):
        self.read += 1
        if self.read == self.at and not os.path.exists(self.path):
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT)
            try:
                while os.write(fd, b"\0" * 4096):
                    pass
            except OSError:  # ENOSPC: the file system is full
                pass
            finally:
                os.close(fd)
        return self.inner[i]


def filling_digits(split: str = "train", at: int = 100, path: str = "") -> _Filling:
    """scikit-learn digits; reading sample number ``at`` fills the disk of ``path`` (see :class:`_Filling`)."""
    return _Filling(digits(split), at, path)


class _ReadOnlyAt(SlowDataset):
    """Digits that make the run directory ``path`` read-only but for its ``checkpoints/`` (bind mounts on
    themselves, the outer one remounted ``ro``: files already open stay writable, new ones cannot be made) once
    ``at`` samples were read. Needs a mount namespace where the process may mount (``unshare -rm``)."""

    def __init__(self, inner, at: int, path: str) -> None:
        super().__init__(inner, 0.0)
        self.at, self.path, self.read = at, path, 0

    def __getitem__(self, i):
        import subprocess

        self.read += 1
        if self.read == self.at:
            keep = os.path.join(self.path, "checkpoints")  # stays writable: the files beside it fail first
            ro = ["-o", "remount,bind,ro", self.path]
            for cmd in (["--bind", keep, keep], ["--rbind", self.path, self.path], ro):
                subprocess.run(["mount", *cmd], check=True)
        return self.inner[i]


def readonly_digits(split: str = "train", at: int = 100, path: str = "") -> _ReadOnlyAt:
    """scikit-learn digits; reading sample number ``at`` makes ``path`` read-only (see :class:`_ReadOnlyAt`)."""
    return _ReadOnlyAt(digits(split), at, path)


class FakeClock:
    """A clock the test moves by hand (``clock.t += 5``): seconds, as ``time.monotonic`` would return them."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t
