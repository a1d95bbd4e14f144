"""One writer per run directory: an exclusive OS lock that the kernel releases when its process dies.

``train`` takes the lock before it writes anything into the run directory, so a second ``train`` on the same
directory (a relaunched scheduler job while the old one still runs, a shell reused) stops with exit 2 instead of
interleaving its metrics with the first one's and racing on its checkpoints. The lock is ``flock(2)`` on
``RUN_DIR/.lock`` through `filelock <https://py-filelock.readthedocs.io>`_; the kernel drops it when the holding
process exits in any way, SIGKILL included, so a killed run never leaves a stale lock (a leftover ``.lock`` file is
only a file). Linux's NFS client emulates ``flock`` with byte-range locks, so the lock also holds across nodes that
mount the same export (``man 2 flock``, "NFS details"). Who holds it (pid, host, start time, command) is written
atomically next to it, in ``RUN_DIR/.lock.json``, for the second run's message.

A launched job is locked once: by :func:`paddlefit.train.run.run_job` (the process that starts
``paddle.distributed.launch``), which tells its workers through ``PADDLEFIT_LOCKED_RUN_DIR``; a worker started
any other way (the multi-node targets of ``paddlefit launch``) locks from global rank 0. Readers (``export``,
``profile``, ``tune``, anything reading a run) never need the lock: every file they read is written atomically.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shlex
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from paddlefit.errors import PaddlefitError
from paddlefit.fileio import atomic_write_text

__all__ = ["LOCK_ENV", "LOCK_FILE", "LOCK_INFO_FILE", "RunDirInUseError", "RunDirLock", "held_by_parent"]

LOCK_FILE = ".lock"
LOCK_INFO_FILE = ".lock.json"
#: set by the locking process for the workers it launches: the resolved run directory it holds
LOCK_ENV = "PADDLEFIT_LOCKED_RUN_DIR"
#: errno values with which ``flock`` says the filesystem has no locks (FUSE bucket mounts, some network filesystems)
_NO_LOCKS = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL}


class RunDirInUseError(PaddlefitError):
    """Another process holds the run directory's lock (exit 2)."""


def held_by_parent(run_dir: Path) -> bool:
    """Whether the process that started this one holds ``run_dir``'s lock (``PADDLEFIT_LOCKED_RUN_DIR``)."""
    return os.environ.get(LOCK_ENV) == str(Path(run_dir).resolve())


class RunDirLock:
    """The exclusive lock of ``run_dir`` (a context manager; :meth:`acquire` / :meth:`release`).

    Args:
        run_dir: the run directory (created if missing: the lock file lives in it).
        log: receives a warning when the filesystem cannot lock (the run then goes on unprotected).

    Raises (from :meth:`acquire`):
        RunDirInUseError: another process holds it; the message names its pid, host, start time and command.
        PaddlefitError: the run directory cannot be created or written.
    """

    def __init__(self, run_dir: Path, log: Callable[[str], None] | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self._lock: Any = None
        self.locked = False

    def acquire(self) -> RunDirLock:
        """Take the lock without waiting and record the holder; returns ``self``."""
        from filelock import FileLock, Timeout

        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            lock = FileLock(str(self.run_dir / LOCK_FILE), timeout=0)
            lock.acquire()
        except Timeout:
            raise RunDirInUseError(self._in_use_message()) from None
        except OSError as exc:
            if exc.errno in _NO_LOCKS:
                self.log(f"warning: the filesystem of {self.run_dir} cannot lock files ({exc.strerror}); nothing "
                         "stops a second `train` on this run directory.")  # fmt: skip
                return self
            raise PaddlefitError(f"`--run-dir {self.run_dir}` is not writable ({exc.strerror or exc}); choose "
                                 "another directory.") from None  # fmt: skip
        self._lock, self.locked = lock, True
        info = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "command": shlex.join(sys.argv)[:500]}  # fmt: skip
        try:
            atomic_write_text(self.run_dir / LOCK_INFO_FILE, json.dumps(info) + "\n", option="--run-dir")
        except (PaddlefitError, OSError) as exc:
            self.release()
            why = getattr(exc, "strerror", None) or exc
            raise PaddlefitError(f"`--run-dir {self.run_dir}` is not writable ({why}); choose another "
                                 "directory.") from None  # fmt: skip
        return self

    def release(self) -> None:
        """Drop the lock (the holder record goes first, so it never names a process that no longer holds it)."""
        if self._lock is None:
            return
        with contextlib.suppress(OSError):
            (self.run_dir / LOCK_INFO_FILE).unlink()
        self._lock.release()
        self._lock, self.locked = None, False

    def _in_use_message(self) -> str:
        try:
            info = json.loads((self.run_dir / LOCK_INFO_FILE).read_text(encoding="utf-8"))
            who = (f"pid {info['pid']} on host {info['host']} since {info['since']} (started by "
                   f"`{info['command']}`)")  # fmt: skip
        except (OSError, ValueError, KeyError, TypeError):
            who = "another process (it has not recorded itself yet)"
        return f"run dir {self.run_dir} is in use by {who}; wait for it, or choose another --run-dir."

    def __enter__(self) -> RunDirLock:
        return self.acquire()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:  # fmt: skip
        self.release()
