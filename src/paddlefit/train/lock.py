"""One writer per run directory: an exclusive OS lock that the kernel releases when the run's last process dies.

``train`` takes the lock before it writes anything into the run directory, so a second ``train`` on the same
directory (a relaunched scheduler job while the old one still runs, a shell reused) stops with exit 2 instead of
interleaving its metrics with the first one's and racing on its checkpoints. The lock is ``flock(2)`` on
``RUN_DIR/.lock``; the kernel drops it when every descriptor of that open file is closed, so a run killed in any
way, SIGKILL included, never leaves a stale lock (a leftover ``.lock`` file is only a file). Linux's NFS client
emulates ``flock`` with byte-range locks, so the lock also holds across nodes that mount the same export
(``man 2 flock``, "NFS details"). Who holds it (pid, host, start time, command) is written atomically next to it,
in ``RUN_DIR/.lock.json``, for the second run's message.

A launched job is locked once: by :func:`paddlefit.train.run.run_job` (the process that starts
``paddle.distributed.launch``), which hands the locked descriptor to the launcher and, through
:mod:`paddlefit.train.distlaunch`, to every worker (``PADDLEFIT_LOCK_FD``; ``PADDLEFIT_LOCKED_RUN_DIR`` names the
directory). The lock therefore lasts while any process of the run lives: a ``train`` process killed with SIGKILL
leaves its launcher and workers running (they are in sessions of their own) until they have stopped, and they
still hold the directory. A worker started any other way (the multi-node targets of ``paddlefit launch``) locks
from global rank 0. Readers (``export``, ``profile``, ``tune``, anything reading a run) never need the lock: every
file they read is written atomically.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shlex
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from paddlefit.errors import PaddlefitError
from paddlefit.process.isolation import pid_alive
from paddlefit.rundir.files import lock_file, read_lock_info, remove_lock_info, write_lock_info
from paddlefit.textsafe import log_stderr

__all__ = [
    "LOCK_ENV",
    "LOCK_FD_ENV",
    "LOCK_PID_ENV",
    "RunDirInUseError",
    "RunDirLock",
    "drop_lock_records",
    "held_by_parent",
]

#: set by the locking process for the workers it launches: the resolved run directory it holds
LOCK_ENV = "PADDLEFIT_LOCKED_RUN_DIR"
#: and the number of the locked descriptor they inherit (the same open file: they hold the lock with it)
LOCK_FD_ENV = "PADDLEFIT_LOCK_FD"
#: and the pid of the process that locked (the launcher stops when it dies)
LOCK_PID_ENV = "PADDLEFIT_LOCK_PID"
#: errno values with which ``flock`` says the filesystem has no locks (FUSE bucket mounts, some network filesystems)
_NO_LOCKS = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL}
#: errno values with which ``flock(LOCK_NB)`` says another open file holds the lock
_HELD = {errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES}
#: how long a refused run waits for the holder's record (a holder that has just locked writes it next)
_RECORD_WAIT_S = 1.0


class RunDirInUseError(PaddlefitError):
    """Another process holds the run directory's lock (exit 2)."""


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def held_by_parent(run_dir: Path) -> bool:
    """Whether the process that started this one holds ``run_dir``'s lock and handed it down:
    ``PADDLEFIT_LOCKED_RUN_DIR`` names ``run_dir`` and ``PADDLEFIT_LOCK_FD`` is an open descriptor of its ``.lock``
    (inherited, so this process holds the lock too). A variable left in the environment without the descriptor
    does not count."""
    if os.environ.get(LOCK_ENV) != str(Path(run_dir).resolve()):
        return False
    try:
        fd = int(os.environ.get(LOCK_FD_ENV, ""))
    except ValueError:
        return False
    return fd >= 0 and _same_file(fd, lock_file(run_dir))


def _not_writable(run_dir: Path, exc: BaseException) -> PaddlefitError:
    if isinstance(exc, FileExistsError) or (run_dir.exists() and not run_dir.is_dir()):
        return PaddlefitError(f"`--run-dir {run_dir}` is a file, not a directory; choose another --run-dir.")
    why = getattr(exc, "strerror", None) or exc
    return PaddlefitError(f"`--run-dir {run_dir}` is not writable ({why}); choose another directory.")


class RunDirLock:
    """The exclusive lock of ``run_dir`` (a context manager; :meth:`acquire` / :meth:`release`).

    Args:
        run_dir: the run directory (created if missing: the lock file lives in it).
        log: receives a warning when the filesystem cannot lock (the run then goes on unprotected).

    Raises (from :meth:`acquire`):
        RunDirInUseError: another process holds it; the message names its pid, host, start time and command.
        PaddlefitError: the run directory cannot be created or written, or is a file; or it is inside another run
            directory or holds one (:func:`~paddlefit.train.nesting.check_not_nested`).
    """

    def __init__(self, run_dir: Path, log: Callable[[str], None] | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.log = log or log_stderr
        self._fd: int | None = None
        self._shared = False
        self.locked = False

    def acquire(self) -> RunDirLock:
        """Take the lock without waiting and record the holder; returns ``self``."""
        from paddlefit.train.nesting import check_not_nested

        path = lock_file(self.run_dir)
        check_not_nested(self.run_dir)  # before the directory is made: never inside or around another run's
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError as exc:
            raise _not_writable(self.run_dir, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in _HELD:
                raise RunDirInUseError(self._in_use_message()) from None
            if exc.errno in _NO_LOCKS:
                self.log(
                    f"warning: the filesystem of {self.run_dir} cannot lock files ({exc.strerror}); nothing "
                    "stops a second `train` on this run directory."
                )
                return self
            raise _not_writable(self.run_dir, exc) from None
        except BaseException:  # KeyboardInterrupt: the descriptor must not outlive the attempt
            os.close(fd)
            raise
        self._fd, self.locked = fd, True
        _HOLDING.append(self)
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": _command_line(),
        }
        try:
            write_lock_info(self.run_dir, info)
        except (PaddlefitError, OSError) as exc:
            self.release()
            raise _not_writable(self.run_dir, exc) from None
        return self

    def share(self) -> dict[str, str]:
        """Hand the lock to the processes this one starts: the environment to add (``PADDLEFIT_LOCK_FD``,
        ``PADDLEFIT_LOCKED_RUN_DIR``, ``PADDLEFIT_LOCK_PID``); pass ``pass_fds=(int(env[LOCK_FD_ENV]),)`` to
        ``subprocess.Popen``. Empty
        when the lock is not held (a filesystem without locks). From then on :meth:`release` leaves the lock and
        its record to those processes if they outlive this one's hold."""
        if self._fd is None:
            return {}
        self._shared = True
        return {LOCK_FD_ENV: str(self._fd), LOCK_ENV: str(self.run_dir.resolve()), LOCK_PID_ENV: str(os.getpid())}

    def release(self) -> None:
        """Drop the lock (the holder record goes first, so it never names a run that no longer holds it). When
        it was :meth:`share`-d and a process started from here still has it (a worker whose launcher was
        killed), the lock stays with that process and so does the record, and a warning says so."""
        if self._fd is None:
            return
        fd, self._fd, self.locked = self._fd, None, False
        with contextlib.suppress(ValueError):
            _HOLDING.remove(self)
        if not self._shared:
            with contextlib.suppress(OSError):
                remove_lock_info(self.run_dir)
            os.close(fd)
            return
        os.close(fd)  # the lock lasts while a child keeps its copy of the descriptor: probe with a new open file
        try:
            probe = os.open(lock_file(self.run_dir), os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in _HELD:
                self.log(
                    f"warning: processes this run started still hold {self.run_dir} (a worker whose launcher "
                    "was killed?); a new `train` there is refused until they exit."
                )
        else:
            with contextlib.suppress(OSError):
                remove_lock_info(self.run_dir)
        finally:
            os.close(probe)

    def _in_use_message(self) -> str:
        # a holder writes its record right after it locks: wait a moment for a missing one, or for a new one
        # replacing the record of a dead process (a holder killed before)
        deadline = time.monotonic() + _RECORD_WAIT_S
        who = "another process (it has not recorded itself)"
        while True:
            try:
                info = read_lock_info(self.run_dir)
                who = f"pid {info['pid']} on host {info['host']} since {info['since']} (started by `{info['command']}`)"
                dead = info["host"] == socket.gethostname() and not pid_alive(info["pid"])
            except (OSError, ValueError, KeyError, TypeError):
                dead = None
            if dead is False or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if dead:
            who += (
                f"; pid {info['pid']} has exited, but processes it started (its launcher or workers) still "
                "hold the lock until they stop"
            )
        return f"run dir {self.run_dir} is in use by {who}; wait for it, or choose another --run-dir."

    def __enter__(self) -> RunDirLock:
        return self.acquire()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


#: The locks this process holds, for :func:`drop_lock_records`.
_HOLDING: list[RunDirLock] = []


def drop_lock_records() -> None:
    """Remove the holder record (``RUN_DIR/.lock.json``) of every lock this process holds and has not handed on
    (:meth:`RunDirLock.share`), for a process about to ``os._exit`` (a signal during start-up,
    :mod:`paddlefit.process.quietstart`): the kernel drops the lock, and no record names the dead process."""
    for lock in list(_HOLDING):
        if not lock._shared:
            with contextlib.suppress(OSError):
                remove_lock_info(lock.run_dir)


def _command_line() -> str:
    """This process's command line for the holder record (500 characters at most), an argument that looks like a
    credential (:func:`paddlefit.process.secretenv.looks_like_credential_value`) written as ``<redacted>``."""
    from paddlefit.process.secretenv import REDACTED, looks_like_credential_value

    return shlex.join(REDACTED if looks_like_credential_value(a) else a for a in sys.argv)[:500]
