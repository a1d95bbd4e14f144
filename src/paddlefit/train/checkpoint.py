"""Atomic, verified checkpoints: a directory per checkpoint, written under a temporary name, fsynced, then renamed.

Layout under ``RUN_DIR/checkpoints/``::

    step-00000120/            one complete checkpoint (the name carries the optimizer step)
        model.pdparams        paddle.save(model.state_dict())
        optimizer.pdopt       paddle.save(optimizer.state_dict())
        trainer.json          step, epoch, sampler position, LR scheduler, GradScaler, run totals
        rng.json              python / numpy / paddle RNG states (JSON; ``rng.pkl``, a pickle, in older checkpoints)
        manifest.json         sha256 and size of every file above, and the step; written last
    .tmp-step-00000130-PID/   a checkpoint being written (or left by a killed writer): never read
    .tmp-step-00000110-PID-old/  one being deleted (pruned or replaced): never read
    (beside it: .checkpoints-old-PID/, the whole store being deleted by ``--resume never``)

A checkpoint exists only once its directory is renamed to ``step-*`` (POSIX ``rename`` is atomic), after every
file and the manifest were fsynced, and until it is renamed away to be deleted (so a kill mid-delete leaves no
half-deleted ``step-*``). ``latest_valid`` re-hashes files against the manifest, so a checkpoint damaged
after the fact (truncated copy, bit rot) is skipped with a warning and the previous one is used; so is one whose
manifest's step is not the step in its directory's name, which pruning then deletes.

A manifest proves a checkpoint intact, not who wrote it: ``model.pdparams`` / ``optimizer.pdopt`` are Paddle
pickles, so a checkpoint is code the user trusts (``docs/errors.md``, "Checkpoints are code you trust").
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from paddlefit.errors import PaddlefitError
from paddlefit.fileio import fsync_path, read_json_limited
from paddlefit.run_layout import LEGACY_RNG_FILE, MODEL_FILE, OPTIMIZER_FILE, RNG_FILE, TRAINER_FILE
from paddlefit.train.nesting import live_lock_under

MANIFEST = "manifest.json"
#: Files every checkpoint written by the trainer has (a manifest listing fewer is not ours or was tampered with),
#: and one of :data:`RNG_FILES` (``rng.json``; ``rng.pkl`` in checkpoints of earlier versions)
REQUIRED_FILES = frozenset({MODEL_FILE, OPTIMIZER_FILE, TRAINER_FILE})
RNG_FILES = (RNG_FILE, LEGACY_RNG_FILE)
#: all a checkpoint directory may hold: deleting one (pruning, ``--resume never``) takes nothing else (issue 27)
OWN_FILES = REQUIRED_FILES | set(RNG_FILES) | {MANIFEST}
FORMAT_VERSION = 1
_NAME_RE = re.compile(r"^step-(\d{8,})$")


class CheckpointError(PaddlefitError):
    """A checkpoint cannot be written (disk full, permissions) or a named checkpoint does not verify."""


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def name_step(path: Path) -> int | None:
    """The step in a ``step-NNNNNNNN`` directory name, or None for any other name (``best/``...)."""
    m = _NAME_RE.match(path.name)
    return int(m.group(1)) if m else None


def verify(path: Path) -> str | None:
    """Check a checkpoint directory against its manifest: every file's size and sha256, and for a ``step-*``
    directory the manifest's step against the name's.

    Returns:
        None if it verifies; otherwise the first problem found.
    """
    try:
        manifest = read_json_limited(path / MANIFEST, "manifest", limit=1 << 20)
        files = manifest["files"]  # type: ignore[index]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"manifest unreadable ({type(exc).__name__}: {exc})"
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_VERSION:
        return f"manifest format is not {FORMAT_VERSION}"
    if not isinstance(files, dict) or not set(files) >= REQUIRED_FILES or not set(files) & set(RNG_FILES):
        return f"manifest does not list {', '.join(sorted(REQUIRED_FILES))} and {' or '.join(RNG_FILES)}"
    step = manifest.get("step")
    if name_step(path) not in (None, step):
        return f"manifest says step {step!r}, the directory name says {name_step(path)}"
    for name, meta in files.items():
        if not isinstance(meta, dict) or "/" in name or name.startswith("."):
            return f"manifest entry {name!r} is malformed"
        f = path / name
        try:
            size = f.stat().st_size
        except OSError:
            return f"{name} is missing"
        if size != meta.get("bytes"):
            return f"{name} has {size} bytes, manifest says {meta.get('bytes')}"
        if sha256_file(f) != meta.get("sha256"):
            return f"{name} sha256 does not match the manifest"
    return None


def misnamed(path: Path) -> bool:
    """Whether ``step-N``'s manifest is readable and records a step other than N (files are not hashed)."""
    try:
        step = read_json_limited(path / MANIFEST, "manifest", limit=1 << 20).get("step")  # type: ignore[union-attr]
    except (ValueError, AttributeError):
        return False
    return name_step(path) not in (None, step)


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
            if not entry.is_dir() or not (_NAME_RE.match(entry.name) or entry.name.startswith(".tmp-")):
                return entry.name
            if inner := foreign_entry(Path(entry.path)):
                return f"{entry.name}/{inner}"
    return None


def _delete(path: Path) -> None:
    """Delete a checkpoint directory renamed away to be deleted (a symlink: the link only)."""
    if os.path.islink(path):
        with contextlib.suppress(OSError):
            os.unlink(path)
    else:
        shutil.rmtree(path, ignore_errors=True)


class CheckpointStore:
    """The checkpoints of one run: save atomically, keep the last ``keep_last``, find the newest valid one.

    Only global rank 0 may call :meth:`save` (the trainer enforces it); every rank may read.

    Args:
        root: the ``checkpoints`` directory (created on first save).
        keep_last: complete checkpoints kept after a save (older ones are deleted), >= 1.
    """

    def __init__(self, root: Path, keep_last: int = 3) -> None:
        if keep_last < 1:
            raise ValueError("keep_last must be >= 1")
        self.root = Path(root)
        self.keep_last = keep_last

    def path_for(self, step: int) -> Path:
        """Directory name of the checkpoint at optimizer step ``step``."""
        return self.root / f"step-{step:08d}"

    def list(self) -> list[Path]:
        """Complete-looking checkpoint directories, newest (highest step) first; temporaries excluded."""
        if not self.root.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.root.iterdir() if (m := _NAME_RE.match(p.name)) and p.is_dir()]
        return [p for _, p in sorted(found, reverse=True)]

    def latest_valid(self, warn: Callable[[str], None] = lambda _msg: None) -> Path | None:
        """Newest checkpoint whose manifest verifies; each skipped one is reported through ``warn``."""
        for path in self.list():
            problem = verify(path)
            if problem is None:
                return path
            warn(f"skipping checkpoint {path.name}: {problem}")
        return None

    def clean_temporaries(self) -> list[Path]:
        """Delete ``.tmp-*`` directories left by writers that were killed, and a whole old store
        :meth:`remove_all` was deleting; returns what was removed."""
        removed = []
        if self.root.is_dir():
            for p in self.root.glob(".tmp-*"):
                if foreign_entry(p) is None:  # else not a checkpoint's: kept
                    _delete(p)
                    removed.append(p)
        for p in self.root.parent.glob(f".{self.root.name}-old-*"):
            if foreign_in_store(p) is None:
                _delete(p)
                removed.append(p)
        return removed

    def remove_all(self) -> list[Path]:
        """Delete every checkpoint at once (``--resume never``): the store directory is renamed away in one atomic
        rename (``.checkpoints-old-PID`` beside it), then deleted, so a kill mid-delete can never leave some of
        the old run's checkpoints for a later ``--resume auto`` to pick up. Returns the checkpoints it held.

        Raises:
            OSError: the rename failed.
            CheckpointError: a live lock of another run is below the store, or the store holds anything but
                checkpoints of their own files (:func:`foreign_in_store`: a run directory, a ``.lock``, a file
                of the user); nothing is deleted.
        """
        old = self.list()
        if held := live_lock_under(self.root):
            raise CheckpointError(f"`--resume never` would delete {self.root}, but another running `train` holds "
                                  f"{held.parent} inside it; nothing was deleted. Stop that run (run directories "
                                  "never nest) or choose another --run-dir.")  # fmt: skip
        if foreign := foreign_in_store(self.root):
            raise CheckpointError(f"`--resume never` would delete {self.root}, but it holds {self.root / foreign}, "
                                  "which is not a checkpoint's file; nothing was deleted. Move it out of "
                                  f"{self.root} (run directories never nest) and run again.")  # fmt: skip
        if self.root.is_dir():
            doomed = self.root.parent / f".{self.root.name}-old-{os.getpid()}"
            os.rename(self.root, doomed)
            _delete(doomed)
        return old

    def remove(self, path: Path) -> None:
        """Delete the checkpoint directory ``path``: renamed to a ``.tmp-*`` name first (atomic), then deleted, so
        a kill mid-delete leaves a temporary for :meth:`clean_temporaries`, never a half-deleted ``step-*``.

        Raises:
            OSError: the rename failed, a running ``train`` holds a lock inside ``path``, or ``path`` holds anything
                but a checkpoint's own files (:func:`foreign_entry`: another run, a ``.lock``, a file of the user);
                it is then kept whole.
        """
        if held := live_lock_under(path):
            raise OSError(errno.EBUSY, f"another running `train` holds {held.parent}; {path} is kept")
        if foreign := foreign_entry(path):
            raise OSError(errno.ENOTEMPTY, f"{path} holds {foreign}, not a checkpoint's file; {path} is kept")
        doomed = self.root / f".tmp-{path.name}-{os.getpid()}-old"
        os.rename(path, doomed)
        _delete(doomed)

    def drop_after(self, step: int, why: str, log: Callable[[str], None]) -> list[Path]:
        """Remove the checkpoints after ``step`` (``--resume PATH`` to an older checkpoint: the ones after it are
        of the run abandoned there; left, ``--resume auto`` would go back to them after a stop); logs what went,
        ``why`` first (``--resume PATH``). Returns the removed paths (a checkpoint that cannot be removed stays)."""
        later = []
        for path in (p for p in self.list() if int(p.name.split("-")[1]) > step):
            with contextlib.suppress(OSError):
                self.remove(path)
                later.append(path)
        if later:
            log(f"{why}: removed {len(later)} later checkpoint(s) of the run that went on from there "
                f"({', '.join(p.name for p in later[:3])}{', ...' if len(later) > 3 else ''}); this run continues "
                f"from step {step}")  # fmt: skip
        return later

    def save(self, step: int, write_files: Callable[[Path], None], meta: dict | None = None,
             keep_existing: bool = True) -> Path:  # fmt: skip
        """Write a checkpoint for ``step``: ``write_files(tmpdir)`` writes the payload, then this hashes and fsyncs
        every file, writes the manifest, fsyncs the directory and renames it into place, then prunes old ones.

        If a complete checkpoint for ``step`` already exists it is kept and returned (same step, same state) when
        ``keep_existing``; else it is replaced (the caller knows it holds another state: a run abandoned there).

        Raises:
            CheckpointError: the write failed (disk full, read-only or missing directory...). The temporary
                directory is removed and earlier checkpoints are untouched.
        """
        final = self.path_for(step)
        if keep_existing and final.is_dir() and verify(final) is None:
            return final
        tmp = self.root / f".tmp-{final.name}-{os.getpid()}"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            if tmp.exists():
                shutil.rmtree(tmp)
            tmp.mkdir()
            write_files(tmp)
            files = {}
            for f in sorted(tmp.iterdir()):
                fsync_path(f)
                files[f.name] = {"bytes": f.stat().st_size, "sha256": sha256_file(f)}
            manifest = {"format": FORMAT_VERSION, "step": step, "created_unix": time.time(), "files": files,
                        **(meta or {})}  # fmt: skip
            with open(tmp / MANIFEST, "w", encoding="utf-8") as fh:
                json.dump(manifest, fh, indent=1, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            fsync_path(tmp)
            if final.exists():  # an incomplete, corrupt or abandoned one with the same name: replace it
                self.remove(final)
            os.rename(tmp, final)
            fsync_path(self.root)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            why = "the disk is full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
            previous = next((p.name for p in self.list() if p != final), None)
            kept = f"; the previous checkpoint {previous} is intact" if previous else ""
            raise CheckpointError(f"checkpoint for step {step} could not be written to {self.root}: {why}{kept}. "
                                  "Free space or choose another --run-dir.") from None  # fmt: skip
        self.prune()
        return final

    def prune(self) -> None:
        """Delete all but the newest ``keep_last`` checkpoints, and every one whose manifest names another step
        than its directory (never resumed from; left, its high step would keep it first in the list forever)."""
        kept = 0
        for path in self.list():
            if kept < self.keep_last and not misnamed(path):
                kept += 1
                continue
            with contextlib.suppress(OSError):
                self.remove(path)
