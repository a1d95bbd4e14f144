"""Run directories never nest: a run directory may not be inside another one (its ``checkpoints/`` tree included)
nor hold one below it, compared by real path (symlinks resolved).

Nested, the outer run's checkpoint pruning and ``--resume never`` delete the inner run's directory, lock and
metrics included, while it runs. A run directory is recognised by the lock file ``train`` makes in it at its
first moment and keeps after the run (``.lock``) beside one more file of a run (``.lock.json`` from the same moment,
``job.yaml``, ``metrics.jsonl``, ``status.json``, ``checkpoints/``...), so a finished run, a running one and one
that is only starting are all seen, and a project folder holding the job spec ``job.yaml`` is not taken for one.
Deleting (pruning, ``--resume never``) also checks that nothing below the doomed directory holds a live lock
(:func:`live_lock_under`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

from paddlefit.errors import PaddlefitError
from paddlefit.rundir.files import checkpoints_dir, lock_file
from paddlefit.rundir.layout import LOCK_FILE, RUN_MARKERS

__all__ = ["MAX_SCAN_DIRS", "RUN_MARKERS", "check_not_nested", "check_own_store", "live_lock_under", "run_marker"]

#: a run directory holds ``.lock`` (from the first moment of a run) and one of these
#: directories below a new run directory looked at for another run (a run dir is small: its checkpoints, logs)
MAX_SCAN_DIRS = 10_000


def run_marker(directory: Path) -> str | None:
    """``.lock`` and the first of :data:`RUN_MARKERS` that ``directory`` holds (``".lock and job.yaml"``), or
    None when it is not a run directory."""
    with contextlib.suppress(OSError):
        if lock_file(directory).is_file():
            return next((f".lock and {name}" for name in RUN_MARKERS if (directory / name).exists()), None)
    return None


def check_not_nested(run_dir: Path, option: str = "--run-dir") -> None:
    """Refuse ``run_dir`` inside another run directory or holding one (up to :data:`MAX_SCAN_DIRS` directories
    below it are looked at: one holding more is refused, unchecked).

    Raises:
        PaddlefitError: naming both directories and the file that marks the other one as a run, or saying that
            ``run_dir`` holds too many directories to check (exit 2).
    """
    check_own_store(run_dir, option)
    real = Path(os.path.realpath(run_dir))
    for parent in real.parents:
        if marker := run_marker(parent):
            raise PaddlefitError(
                f"`{option} {run_dir}` is inside the run directory {parent} (it has {marker}): run directories "
                f"never nest (the outer run's checkpoint pruning or `--resume never` would delete {real}). Choose "
                "a --run-dir outside it."
            )
    if not real.is_dir():
        return
    for seen, (top, dirs, _files) in enumerate(os.walk(real)):
        dirs.sort()
        if seen >= MAX_SCAN_DIRS:  # unchecked is not accepted: what is below may hold a run
            raise PaddlefitError(
                f"`{option} {run_dir}` holds more than {MAX_SCAN_DIRS} directories, too many to check that none is "
                "another run directory (run directories never nest: this run's checkpoint pruning or `--resume "
                "never` could delete it). Choose a new or smaller --run-dir."
            )
        if top != str(real) and (marker := run_marker(Path(top))):
            raise PaddlefitError(
                f"`{option} {run_dir}` holds the run directory {top} (it has {marker}): run directories never "
                f"nest (this run's checkpoint pruning or `--resume never` could delete it). Choose another "
                "--run-dir, or move that run out first."
            )


def check_own_store(run_dir: Path, option: str = "--run-dir") -> None:
    """``run_dir``'s ``checkpoints/`` (when there is one) must be its own: no symlink, and by real path the
    ``checkpoints`` right in ``run_dir``'s real path. Else two run directories could share one store, each resuming
    the other's state and pruning its checkpoints.

    Raises:
        PaddlefitError: naming ``run_dir``, its ``checkpoints`` and where that resolves (and the run directory it
            belongs to, if any) (exit 2).
    """
    store = checkpoints_dir(run_dir)
    real = Path(os.path.realpath(store))
    if not os.path.lexists(store) or (not store.is_symlink() and real == Path(os.path.realpath(run_dir)) / store.name):
        return
    owner = next((p for p in real.parents if run_marker(p)), None)
    whose = f"the run directory {owner}'s" if owner else "not this run directory's"
    raise PaddlefitError(
        f"`{option} {run_dir}`: its checkpoints {store} resolve to {real} ({whose}): a run directory's checkpoints "
        "must be its own directory, or two runs would resume each other's state and prune each other's "
        "checkpoints. Remove the link (move the checkpoints in if they are this run's) or choose another "
        f"{option}."
    )


def live_lock_under(tree: Path) -> Path | None:
    """A ``.lock`` file below ``tree`` (inclusive) that a live process holds (``flock`` probe on a new open file:
    the kernel says whether another open file holds it), or None. A directory holding one is another running
    ``train``'s, and must not be deleted."""
    if not tree.is_dir():
        return None
    for top, _dirs, files in os.walk(tree):
        if LOCK_FILE in files and _held(Path(top) / LOCK_FILE):
            return Path(top) / LOCK_FILE
    return None


def _held(lock_file: Path) -> bool:
    try:
        # read-write, as the lock itself: NFS emulates flock with byte-range locks, which need a writable descriptor
        fd = os.open(lock_file, os.O_RDWR | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
    finally:
        os.close(fd)  # also drops the probe's own lock
    return False
