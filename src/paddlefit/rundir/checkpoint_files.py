"""A checkpoint directory's files, read and written in one place: the manifest, ``model.pdparams``,
``trainer.json`` and ``rng.json`` (``rng.pkl`` of earlier versions). ``train`` writes them into the checkpoint's
temporary directory, which :class:`~paddlefit.train.checkpoint.CheckpointStore` fsyncs and renames into place (the
manifest is fsynced here); resume, ``export`` and ``report`` read them, bounded in size and JSON depth
(:func:`~paddlefit.fileio.read_json_limited`) and regular files only (:func:`~paddlefit.fileio.open_regular`).
The names are :mod:`paddlefit.rundir.layout`'s; the run directory's other files are :mod:`paddlefit.rundir.files`'s.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any

from paddlefit.fileio import open_regular, read_json_limited
from paddlefit.rundir.files import SMALL_JSON_BYTES
from paddlefit.rundir.layout import LEGACY_RNG_FILE, MANIFEST_FILE, MODEL_FILE, RNG_FILE, TRAINER_FILE

__all__ = [
    "has_legacy_rng",
    "has_rng_json",
    "open_legacy_rng",
    "read_manifest",
    "read_model_bytes",
    "read_rng_json",
    "read_trainer_json",
    "write_manifest",
    "write_rng_json",
    "write_trainer_json",
]


def read_manifest(ckpt: Path, where: str = "manifest") -> Any:
    """The checkpoint directory ``ckpt``'s manifest.json as parsed (1 MiB at most); ``where`` names it in messages.

    Raises:
        InputFileError: missing, unreadable, too large or not JSON.
    """
    return read_json_limited(Path(ckpt) / MANIFEST_FILE, where, limit=SMALL_JSON_BYTES)


def read_model_bytes(ckpt: Path) -> bytes:
    """The checkpoint ``ckpt``'s model.pdparams, whole (``export`` checks it against the manifest, then loads it).

    Raises:
        OSError: it cannot be read, or is no regular file (:class:`~paddlefit.fileio.NotRegularFileError`).
    """
    with open(open_regular(Path(ckpt) / MODEL_FILE), "rb") as f:
        return f.read()


def write_manifest(ckpt: Path, manifest: dict[str, Any]) -> None:
    """Write ``manifest`` as the manifest.json of the checkpoint being written in ``ckpt`` (a temporary directory),
    fsynced (the store renames the directory into place after).

    Raises:
        OSError: the write or fsync failed.
    """
    with open(Path(ckpt) / MANIFEST_FILE, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())


def read_trainer_json(ckpt: Path, where: str = "checkpoint file") -> Any:
    """The checkpoint ``ckpt``'s trainer.json as parsed (1 MiB at most).

    Raises:
        InputFileError: missing, unreadable, too large or not JSON.
    """
    return read_json_limited(Path(ckpt) / TRAINER_FILE, where, limit=SMALL_JSON_BYTES)


def write_trainer_json(ckpt: Path, doc: dict[str, Any]) -> None:
    """Write trainer.json into the checkpoint being written in ``ckpt``. Raises OSError: the write failed."""
    (Path(ckpt) / TRAINER_FILE).write_text(json.dumps(doc, indent=1), encoding="utf-8")


def has_rng_json(ckpt: Path) -> bool:
    """Whether checkpoint ``ckpt`` holds rng.json."""
    return (Path(ckpt) / RNG_FILE).is_file()


def has_legacy_rng(ckpt: Path) -> bool:
    """Whether checkpoint ``ckpt`` holds the pickled rng.pkl of an earlier version."""
    return (Path(ckpt) / LEGACY_RNG_FILE).is_file()


def read_rng_json(ckpt: Path) -> Any:
    """The checkpoint ``ckpt``'s rng.json as parsed (1 MiB at most).

    Raises:
        InputFileError: missing, unreadable, too large or not JSON.
    """
    return read_json_limited(Path(ckpt) / RNG_FILE, "checkpoint file", limit=SMALL_JSON_BYTES)


def write_rng_json(ckpt: Path, doc: dict[str, Any]) -> None:
    """Write rng.json into the checkpoint being written in ``ckpt``. Raises OSError: the write failed."""
    (Path(ckpt) / RNG_FILE).write_text(json.dumps(doc), encoding="utf-8")


def open_legacy_rng(ckpt: Path) -> IO[bytes]:
    """The checkpoint ``ckpt``'s rng.pkl opened for reading (binary); only for a checkpoint the user trusts.

    Raises:
        OSError: it cannot be opened.
    """
    return open(Path(ckpt) / LEGACY_RNG_FILE, "rb")  # the caller closes it
