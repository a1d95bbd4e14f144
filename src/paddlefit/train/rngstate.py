"""The RNG states of a checkpoint as plain JSON (``rng.json``): Python's ``random``, NumPy's global generator and
Paddle's generators, stored and restored without pickle, so reading a checkpoint's RNG state can run no code.

Paddle's ``GeneratorState`` pickles through its pybind11 ``__getstate__`` / ``__setstate__`` (a tuple: device,
seed, offset and the Mersenne Twister state as the bytes of its text form); that tuple is what is stored here and
handed back to ``__setstate__`` on a fresh object, as ``pickle`` itself would do (checked on Paddle 3.3: the
restored generators draw the same numbers). Checkpoints of earlier versions hold ``rng.pkl`` (pickle); reading one
needs the user's word that the checkpoint is theirs (``--trust-checkpoint``, :func:`read_rng`).
"""

from __future__ import annotations

import pickle
import random
from pathlib import Path
from typing import Any

import numpy as np

from paddlefit.errors import PaddlefitError
from paddlefit.rundir.checkpoint_files import has_legacy_rng, has_rng_json, open_legacy_rng, read_rng_json
from paddlefit.rundir.layout import LEGACY_RNG_FILE, RNG_FILE

__all__ = ["capture_rng", "read_rng", "restore_rng"]


def capture_rng() -> dict[str, Any]:
    """This process's Python, NumPy and Paddle (current device's generators) RNG states as a JSON-able dict."""
    import paddle

    version, words, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "format": 1,
        "python": {"version": version, "state": list(words), "gauss_next": gauss},
        "numpy": {
            "name": name,
            "keys": [int(k) for k in keys],
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "paddle": [_paddle_state(s) for s in paddle.get_rng_state()],
    }


def _paddle_state(state: Any) -> list[Any]:
    """One generator's ``__getstate__`` tuple as JSON: its state bytes as text when ASCII (the Mersenne Twister's
    text form, as on CPU), else as a list of byte values."""
    device, seed, offset, raw = state.__getstate__()
    data = bytes(raw)
    return [int(device), int(seed), int(offset), data.decode("ascii") if data.isascii() else list(data)]


def restore_rng(doc: Any, where: str) -> None:
    """Set the Python, NumPy and Paddle RNG states from a :func:`capture_rng` dict (read from ``where``).

    Raises:
        PaddlefitError: the document does not have that shape (names ``where`` and the key).
    """
    import paddle
    from paddle.base.core import GeneratorState

    def bad(key: str) -> PaddlefitError:
        return PaddlefitError(
            f"checkpoint {where}: {RNG_FILE} `{key}` is malformed; pass another `--resume` "
            "checkpoint or start fresh with `--resume never --overwrite`."
        )

    if not isinstance(doc, dict) or doc.get("format") != 1:
        raise bad("format")
    py, npy, pd = doc.get("python"), doc.get("numpy"), doc.get("paddle")
    try:
        random.setstate((py["version"], tuple(py["state"]), py["gauss_next"]))
    except (TypeError, KeyError, ValueError):
        raise bad("python") from None
    try:
        np.random.set_state(
            (
                npy["name"],
                np.asarray(npy["keys"], dtype=np.uint32),
                npy["pos"],
                npy["has_gauss"],
                npy["cached_gaussian"],
            )
        )
    except (TypeError, KeyError, ValueError, OverflowError):
        raise bad("numpy") from None
    if not isinstance(pd, list) or not all(_paddle_entry_ok(e) for e in pd):
        raise bad("paddle")
    states = []
    for device, seed, offset, data in pd:
        s = GeneratorState.__new__(GeneratorState)
        s.__setstate__((device, seed, offset, list(data.encode("ascii")) if isinstance(data, str) else data))
        states.append(s)
    paddle.set_rng_state(states)


def _paddle_entry_ok(entry: Any) -> bool:
    if not (isinstance(entry, list) and len(entry) == 4 and all(isinstance(x, int) for x in entry[:3])):
        return False
    data = entry[3]
    if isinstance(data, str):
        return data.isascii()
    return isinstance(data, list) and all(isinstance(b, int) and 0 <= b < 256 for b in data)


def read_rng(path: Path, trust: bool) -> Any:
    """The RNG document (:func:`capture_rng`'s shape) of checkpoint directory ``path``: ``rng.json``, or for a
    checkpoint of an earlier version its pickled ``rng.pkl`` when ``trust`` (the user passed ``--trust-checkpoint``).

    Raises:
        PaddlefitError: only ``rng.pkl`` is there and ``trust`` is False (unpickling runs code from the file: the
            message says how to proceed); or the file is unreadable, too large or too deeply nested.
    """
    if has_rng_json(path) or not has_legacy_rng(path):
        return read_rng_json(path)
    if not trust:
        raise PaddlefitError(
            f"checkpoint {path} stores its RNG state in {LEGACY_RNG_FILE} (pickle, written by an earlier paddlefit); "
            "unpickling it can run code from the file. If you (or a job you trust) wrote this checkpoint, resume "
            "with `--trust-checkpoint` (the next checkpoints are written without pickle); otherwise start fresh "
            "with `--resume never`."
        )
    with open_legacy_rng(path) as f:
        rng = pickle.load(f)  # the user vouched for this checkpoint (--trust-checkpoint)
    doc = {
        "format": 1,
        "python": dict(zip(("version", "state", "gauss_next"), rng["python"], strict=True)),
        "numpy": dict(zip(("name", "keys", "pos", "has_gauss", "cached_gaussian"), rng["numpy"], strict=True)),
        "paddle": [_paddle_state(s) for s in rng["paddle"]],
    }
    doc["python"]["state"] = list(doc["python"]["state"])
    doc["numpy"]["keys"] = [int(k) for k in doc["numpy"]["keys"]]
    return doc
