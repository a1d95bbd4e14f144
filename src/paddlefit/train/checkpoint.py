"""Checkpoints, all in one place: the store (a directory per checkpoint, written under a temporary name, fsynced,
then renamed; pruned), saving the trainer's state into it, loading one back, choosing the one to resume (``--resume
auto|never|PATH``) and the ranks' agreement on that choice.

Layout under ``RUN_DIR/checkpoints/``::

    step-00000120/            one complete checkpoint (the name carries the optimizer step)
        model.pdparams        paddle.save(model.state_dict())
        optimizer.pdopt       paddle.save(optimizer.state_dict())
        trainer.json          step, epoch, sampler position, LR scheduler, GradScaler, run totals
        rng.json              python / numpy / paddle RNG states (JSON; ``rng.pkl``, a pickle, in older checkpoints)
        manifest.json         sha256 and size of every file above, and the step; written last
    .tmp-step-00000130-PID/   a checkpoint being written (or left by a killed writer): never read
    .tmp-step-00000110-PID-old/  one being deleted (pruned or replaced): never read
    replaced-step-00000130-T/  a checkpoint a resume skipped, set aside when the run wrote that step again: kept
    (beside it: .checkpoints-old-PID/, the whole store being deleted by ``--resume never``)

A checkpoint exists only once its directory is renamed to ``step-*`` (POSIX ``rename`` is atomic), after every
file and the manifest were fsynced, and until it is renamed away to be deleted (so a kill mid-delete leaves no
half-deleted ``step-*``). ``latest_valid`` re-hashes files against the manifest, so a checkpoint damaged
after the fact (truncated copy, bit rot, a FIFO or symlink in it) is skipped with a warning and the previous one is
used; so is one whose manifest's step is not the step in its directory's name. Pruning deletes a checkpoint only
once ``keep_last`` complete ones of higher steps exist, never because a resume skipped it (choosing the checkpoint
to resume: :mod:`paddlefit.train.resume`; the manifest check and what a checkpoint may hold:
:mod:`paddlefit.train.ckptfiles`; the files' reads and writes: :mod:`paddlefit.rundir.files`; ``trainer.json``'s
content: :class:`~paddlefit.train.state.TrainerState`).

A manifest proves a checkpoint intact, not who wrote it: ``model.pdparams`` / ``optimizer.pdopt`` are Paddle
pickles, so a checkpoint is code the user trusts (``docs/errors.md``, "Checkpoints are code you trust").
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from paddlefit.errors import PaddlefitError
from paddlefit.fileio import InputFileError, fsync_path
from paddlefit.rundir.checkpoint_files import read_trainer_json, write_manifest, write_rng_json, write_trainer_json
from paddlefit.rundir.files import checkpoint_name, checkpoint_step
from paddlefit.rundir.layout import MODEL_FILE, OPTIMIZER_FILE
from paddlefit.train.ckptfiles import (
    FORMAT_VERSION,
    MANIFEST,
    REQUIRED_FILES,
    SET_ASIDE_PREFIX,
    delete_renamed,
    foreign_entry,
    foreign_in_store,
    looks_complete,
    recorded_step,
    sha256_file,
    verify,
)
from paddlefit.train.nesting import live_lock_under
from paddlefit.train.oom import first_line
from paddlefit.train.rngstate import capture_rng, read_rng, restore_rng
from paddlefit.train.state import TrainerState, kept_accumulation

__all__ = [
    "MANIFEST",
    "REQUIRED_FILES",
    "CheckpointError",
    "CheckpointStore",
    "load_checkpoint",
    "read_state",
    "save_checkpoint",
    "sha256_file",
    "spec_keeping_global_batch",
    "verify",
]


class CheckpointError(PaddlefitError):
    """A checkpoint cannot be written (disk full, permissions) or a named checkpoint does not verify."""


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
        return self.root / checkpoint_name(step)

    def list(self) -> list[Path]:
        """Complete-looking checkpoint directories, newest (highest step) first; temporaries excluded."""
        if not self.root.is_dir():
            return []
        found = [(step, p) for p in self.root.iterdir() if (step := checkpoint_step(p)) is not None and p.is_dir()]
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
                    delete_renamed(p)
                    removed.append(p)
        for p in self.root.parent.glob(f".{self.root.name}-old-*"):
            if foreign_in_store(p) is None:
                delete_renamed(p)
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
            raise CheckpointError(
                f"`--resume never` would delete {self.root}, but another running `train` holds "
                f"{held.parent} inside it; nothing was deleted. Stop that run (run directories "
                "never nest) or choose another --run-dir."
            )
        if foreign := foreign_in_store(self.root):
            raise CheckpointError(
                f"`--resume never` would delete {self.root}, but it holds {self.root / foreign}, "
                "which is not a checkpoint's file; nothing was deleted. Move it out of "
                f"{self.root} (run directories never nest) and run again."
            )
        if self.root.is_dir():
            doomed = self.root.parent / f".{self.root.name}-old-{os.getpid()}"
            os.rename(self.root, doomed)
            delete_renamed(doomed)
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
        delete_renamed(doomed)

    def set_aside(self, path: Path) -> Path:
        """Rename checkpoint ``path`` to ``replaced-<name>-<unix time>`` beside it (not a checkpoint by name: never
        listed, resumed or pruned; deleted with the store by ``--resume never``), to make room for a new checkpoint
        of its step: the one there could not be resumed (a resume skipped it), and may still hold weights the user
        wants. Returns the new path.

        Raises:
            OSError: the rename failed, or a running ``train`` holds a lock inside ``path`` (``EBUSY``).
        """
        if held := live_lock_under(path):
            raise OSError(errno.EBUSY, f"another running `train` holds {held.parent}; {path} is kept")
        aside = self.root / f"{SET_ASIDE_PREFIX}{path.name}-{int(time.time())}"
        os.rename(path, aside)
        return aside

    def drop_after(self, step: int, why: str, log: Callable[[str], None]) -> list[Path]:
        """Remove the checkpoints after ``step`` (``--resume PATH`` to an older checkpoint: the ones after it are
        of the run abandoned there; left, ``--resume auto`` would go back to them after a stop); logs what went,
        ``why`` first (``--resume PATH``). Returns the removed paths (a checkpoint that cannot be removed stays)."""
        later = []
        for path in (p for p in self.list() if (checkpoint_step(p) or 0) > step):
            with contextlib.suppress(OSError):
                self.remove(path)
                later.append(path)
        if later:
            log(
                f"{why}: removed {len(later)} later checkpoint(s) of the run that went on from there "
                f"({', '.join(p.name for p in later[:3])}{', ...' if len(later) > 3 else ''}); this run continues "
                f"from step {step}"
            )
        return later

    def save(
        self, step: int, write_files: Callable[[Path], None], meta: dict | None = None, keep_existing: bool = True
    ) -> Path:
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
            manifest = {
                "format": FORMAT_VERSION,
                "step": step,
                "created_unix": time.time(),
                "files": files,
                **(meta or {}),
            }
            write_manifest(tmp, manifest)
            fsync_path(tmp)
            if final.exists():  # one a resume skipped (damaged, unreadable): kept aside, never deleted here
                self.set_aside(final)
            os.rename(tmp, final)
            fsync_path(self.root)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            why = "the disk is full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
            previous = next((p.name for p in self.list() if p != final), None)
            kept = f"; the previous checkpoint {previous} is intact" if previous else ""
            raise CheckpointError(
                f"checkpoint for step {step} could not be written to {self.root}: {why}{kept}. "
                "Free space or choose another --run-dir."
            ) from None
        self.prune()
        return final

    def prune(self) -> None:
        """Delete each checkpoint that has ``keep_last`` complete checkpoints of higher steps, and only those: one a
        resume skipped (a damaged manifest, a newer format) stays until ``keep_last`` newer ones are complete, so
        pruning never deletes what a resume could not read. A checkpoint's step is the one its manifest records
        (a ``step-00000099`` holding step 10 is as old as step 10), else its name's. Complete:
        :func:`looks_complete` (the manifest and file sizes; the hashes were checked when each was written)."""
        found = [(path, recorded_step(path), looks_complete(path)) for path in self.list()]
        done = [step for _, step, ok in found if ok]
        for path, step, _ in found:
            if sum(1 for s in done if s > step) >= self.keep_last:
                with contextlib.suppress(OSError):
                    self.remove(path)


def spec_keeping_global_batch(spec: Any, path: Path, world: int, log: Callable[[str], None]) -> tuple[Any, bool]:
    """``spec`` (a :class:`~paddlefit.jobspec.spec.JobSpec`) with the gradient accumulation that keeps checkpoint
    ``path``'s global batch on ``world`` devices at ``spec.batch_size`` (:func:`kept_accumulation`), logged when it
    changes; set before the job is built, as its sampler and steps per epoch follow it.

    Returns:
        (the spec to build, whether its accumulation was changed).

    Raises:
        PaddlefitError: the global batch cannot be kept, or ``trainer.json`` is malformed.
        CheckpointError: ``trainer.json`` cannot be read.
    """
    ckpt = read_state(path)
    accum = kept_accumulation(ckpt, str(path), world, spec.batch_size)
    if accum == spec.grad_accum_steps:
        return spec, False
    log(
        f"resuming {path.name}: global batch {ckpt.global_batch} kept with {world} device(s) x micro-batch "
        f"{spec.batch_size} x gradient accumulation {accum} (the checkpoint's run: {ckpt.batch_size} x "
        f"{ckpt.devices} x {ckpt.grad_accum_steps}; this spec: {spec.grad_accum_steps})"
        + (
            "; the epoch continues with the samples it has not seen, but a run resumed on another device count is "
            "not bit-identical to an uninterrupted one (gradients are summed in another order)"
            if ckpt.devices != world
            else ""
        )
    )
    return spec.model_copy(update={"grad_accum_steps": accum}), True


def read_state(path: Path) -> TrainerState:
    """``path``'s ``trainer.json`` (a verified checkpoint directory).

    Raises:
        PaddlefitError: the file is malformed (:meth:`TrainerState.from_json`).
        CheckpointError: it cannot be read.
    """
    try:
        data = read_trainer_json(path)
    except InputFileError as exc:
        raise CheckpointError(
            f"checkpoint {path}: trainer.json cannot be read ({first_line(exc, 200)}); pass "
            "another `--resume` checkpoint or start fresh with `--resume never "
            "--overwrite`."
        ) from None
    return TrainerState.from_json(data, str(path))


def save_checkpoint(
    store: CheckpointStore,
    state: TrainerState,
    model: Any,
    optimizer: Any,
    meta: dict[str, Any],
    keep_existing: bool = True,
) -> tuple[Path, float]:
    """Write a checkpoint of ``state.step`` through ``store`` (atomic: a temporary directory, fsync'd, renamed);
    ``keep_existing``: see :meth:`CheckpointStore.save`.

    Returns:
        (the checkpoint directory, seconds the write took).

    Raises:
        CheckpointError: the write failed (disk full, unwritable run directory).
    """
    import paddle

    def write(tmp: Path) -> None:
        paddle.save(model.state_dict(), str(tmp / MODEL_FILE))
        paddle.save(optimizer.state_dict(), str(tmp / OPTIMIZER_FILE))
        write_trainer_json(tmp, state.to_json())
        write_rng_json(tmp, capture_rng())

    t0 = time.monotonic()
    path = store.save(state.step, write, meta=meta, keep_existing=keep_existing)
    return path, time.monotonic() - t0


def load_checkpoint(
    path: Path,
    check: Callable[[TrainerState], None],
    model: Any,
    optimizer: Any,
    schedule: Any,
    scaler: Any,
    model_name: str,
    trust: bool = False,
) -> TrainerState:
    """Read ``path``'s state, pass it to ``check`` (which raises if the job cannot continue from it), then restore
    the model, optimizer, LR schedule, GradScaler and RNG states in place. ``trust``: the user vouched for the
    checkpoint (``--trust-checkpoint``), so a pickled ``rng.pkl`` of an earlier version may be read.

    Raises:
        PaddlefitError: from ``check``; the weights do not match the model (missing/unexpected keys); a legacy
            ``rng.pkl`` without ``trust`` (:func:`~paddlefit.train.rngstate.read_rng`).
        CheckpointError: any other failure, naming the checkpoint.
    """
    import paddle

    try:
        state = read_state(path)
        check(state)
        rng = read_rng(path, trust)  # before paddle.load: of a refused checkpoint nothing is unpickled
        weights = paddle.load(str(path / MODEL_FILE))
        if mismatch := _weights_mismatch(model.state_dict(), weights):
            raise PaddlefitError(
                f"checkpoint {path} does not match `model: {model_name}` ({mismatch}); pass another "
                "`--resume` checkpoint or start fresh with `--resume never --overwrite`."
            )
        model.set_state_dict(weights)
        optimizer.set_state_dict(paddle.load(str(path / OPTIMIZER_FILE)))
        schedule.set_state_dict(state.scheduler)
        if scaler is not None and state.scaler:
            scaler.load_state_dict(state.scaler)
        restore_rng(rng, str(path))
    except PaddlefitError:
        raise
    except Exception as exc:
        raise CheckpointError(
            f"checkpoint {path} cannot be loaded into this job ({type(exc).__name__}: "
            f"{first_line(exc, 200)}); is it from another model or paddlefit version? Pass "
            "another `--resume` checkpoint or start fresh with `--resume never "
            "--overwrite`."
        ) from None
    return state


def _weights_mismatch(want: dict[str, Any], have: dict[str, Any]) -> str | None:
    """What differs between the model's state dict ``want`` and a checkpoint's ``have``, as one list each: the
    keys of another shape (``name [checkpoint] vs [model]``), then the missing and the unexpected ones (3 each)."""
    shapes = [
        f"{k} {list(have[k].shape)} vs {list(v.shape)}"
        for k, v in want.items()
        if k in have and hasattr(have[k], "shape") and list(have[k].shape) != list(v.shape)
    ]
    missing, unexpected = [k for k in want if k not in have], [k for k in have if k not in want]
    parts = (("other shape (checkpoint vs model):", shapes), ("missing", missing), ("unexpected", unexpected))
    said = [f"{label} {items[:3]}" for label, items in parts if items]
    return "; ".join(said) or None
