"""One checkpoint directory's files: the manifest's check (every file's size and sha256, the step), and what a
checkpoint may hold, so deleting one (pruning, ``--resume never``) never takes another run or a user's file.

The layout and the store that writes, lists and prunes checkpoints are :mod:`paddlefit.train.checkpoint`'s; the
files are read through :mod:`paddlefit.rundir.files`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
from pathlib import Path

from paddlefit.fileio import open_regular
from paddlefit.rundir.checkpoint_files import read_manifest
from paddlefit.rundir.files import CHECKPOINT_NAME_RE, checkpoint_step
from paddlefit.rundir.layout import LEGACY_RNG_FILE, MANIFEST_FILE, MODEL_FILE, OPTIMIZER_FILE, RNG_FILE, TRAINER_FILE

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST",
    "OWN_FILES",
    "REQUIRED_FILES",
    "RNG_FILES",
    "SET_ASIDE_PREFIX",
    "delete_renamed",
    "foreign_entry",
    "foreign_in_store",
    "looks_complete",
    "recorded_step",
    "sha256_file",
    "verify",
]

MANIFEST = MANIFEST_FILE
#: Files every checkpoint written by the trainer has (a manifest listing fewer is not ours or was tampered with),
#: and one of :data:`RNG_FILES` (``rng.json``; ``rng.pkl`` in checkpoints of earlier versions)
REQUIRED_FILES = frozenset({MODEL_FILE, OPTIMIZER_FILE, TRAINER_FILE})
RNG_FILES = (RNG_FILE, LEGACY_RNG_FILE)
#: all a checkpoint directory may hold: deleting one (pruning, ``--resume never``) takes nothing else
OWN_FILES = REQUIRED_FILES | set(RNG_FILES) | {MANIFEST}
FORMAT_VERSION = 1
#: A checkpoint set aside (:meth:`~paddlefit.train.checkpoint.CheckpointStore.set_aside`) is named with this prefix.
SET_ASIDE_PREFIX = "replaced-"


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks.

    Raises:
        OSError: it cannot be read, or is no regular file (:class:`~paddlefit.fileio.NotRegularFileError`).
    """
    h = hashlib.sha256()
    with open(open_regular(path), "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def verify(path: Path, hash_files: bool = True) -> str | None:
    """Check a checkpoint directory against its manifest: every file a regular file (a FIFO, socket or device, or
    a symlink to one, is refused before any file is read), its size and (``hash_files``) sha256, and for a
    ``step-*`` directory the manifest's step against the name's. Where a symlink leads is
    :func:`paddlefit.train.resume.choose_resume`'s check (a link out of the run needs ``--trust-checkpoint``).

    Returns:
        None if it verifies; otherwise the first problem found.
    """
    try:
        manifest = read_manifest(path)
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"manifest unreadable ({type(exc).__name__}: {exc})"
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_VERSION:
        return f"manifest format is not {FORMAT_VERSION}"
    if not isinstance(files, dict) or not set(files) >= REQUIRED_FILES or not set(files) & set(RNG_FILES):
        return f"manifest does not list {', '.join(sorted(REQUIRED_FILES))} and {' or '.join(RNG_FILES)}"
    step = manifest.get("step")
    if checkpoint_step(path) not in (None, step):
        return f"manifest says step {step!r}, the directory name says {checkpoint_step(path)}"
    for name, meta in files.items():
        if not isinstance(meta, dict) or "/" in name or name.startswith("."):
            return f"manifest entry {name!r} is malformed"
        f = path / name
        try:
            mode, size = (st := f.stat()).st_mode, st.st_size
        except OSError:
            return f"{name} is missing"
        if not stat.S_ISREG(mode):  # before any hashing: a FIFO would block, /dev/zero (linked or not) never ends
            return f"{name} is not a regular file"
        if size != meta.get("bytes"):
            return f"{name} has {size} bytes, manifest says {meta.get('bytes')}"
        if hash_files:
            try:
                digest = sha256_file(f)
            except OSError as exc:  # replaced by a FIFO since the stat above, unreadable
                return f"{name} cannot be read ({exc.strerror or exc})"
            if digest != meta.get("sha256"):
                return f"{name} sha256 does not match the manifest"
    return None


def recorded_step(path: Path) -> int:
    """The step checkpoint ``path``'s manifest records (an integer), else the step in its name (0 for neither)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        step = read_manifest(path).get("step")
        if isinstance(step, int) and not isinstance(step, bool):
            return step
    return checkpoint_step(path) or 0


def looks_complete(path: Path) -> bool:
    """Whether checkpoint ``path`` passes :func:`verify` without hashing its files (the manifest, the step, every
    file's presence, kind and size): what pruning counts, at no read of the payload."""
    return verify(path, hash_files=False) is None


def foreign_entry(path: Path) -> str | None:
    """The first entry of checkpoint directory ``path`` that is not one of a checkpoint's own files
    (:data:`OWN_FILES`, none a directory): another run's directory or ``.lock``, a file of the user. None when
    ``path`` holds only a checkpoint's files, or is a symlink (deleting a link leaves what it points to). Looks
    at ``path`` itself, with no scan limit: a checkpoint holds no directory, so one level is all there is."""
    if os.path.islink(path):
        return None
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.name not in OWN_FILES or entry.is_dir(follow_symlinks=False):
                    return entry.name
    except OSError as exc:
        return f"an unreadable entry ({exc.strerror or exc})"
    return None


def foreign_in_store(root: Path) -> str | None:
    """The first entry of the store ``root`` (a ``checkpoints/`` directory) that deleting the whole store would
    take but is not a checkpoint (``step-*``, ``.tmp-*``) holding only its own files (:func:`foreign_entry`), as
    a path relative to ``root``; None when there is none or ``root`` is no directory."""
    if not root.is_dir() or root.is_symlink():
        return None
    with os.scandir(root) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.is_symlink():
                continue  # deleting the store unlinks it, never what it points to
            ours = CHECKPOINT_NAME_RE.match(entry.name) or entry.name.startswith((".tmp-", SET_ASIDE_PREFIX))
            if not entry.is_dir() or not ours:
                return entry.name
            if inner := foreign_entry(Path(entry.path)):
                return f"{entry.name}/{inner}"
    return None


def delete_renamed(path: Path) -> None:
    """Delete a checkpoint directory renamed away to be deleted (a symlink: the link only; errors are ignored)."""
    if os.path.islink(path):
        with contextlib.suppress(OSError):
            os.unlink(path)
    else:
        shutil.rmtree(path, ignore_errors=True)
