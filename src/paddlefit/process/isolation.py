"""One function run in a child process under a wall-clock limit and a memory limit.

Why: the CPU probe (:mod:`paddlefit.probe.task`) runs a user's model on the user's inputs inside Paddle, and some
inputs corrupt Paddle's heap: LeNet on a 1x1 image ends in ``malloc(): unsorted double linked list
corrupted`` and a futex wait that ignores SIGTERM, SIGINT and SIGHUP, or in an abort (exit 134); a model's forward
can also loop or allocate without end. In a child process each of these is an outcome the caller reports
(:class:`ChildFailed`), never a hang of the caller.

How:

- :class:`IsolatedCall` starts ``python -m paddlefit.process.isolation MODULE:FUNCTION [PRELOAD...]`` with
  ``subprocess``, as ``train`` starts its planner child (:mod:`paddlefit.train.predict`), in a session of its own (its
  own process group), at once: the child imports Paddle while the caller goes on. :meth:`IsolatedCall.call` then writes
  the argument (a pickle) to the child's stdin and waits for the answer.
- The child asks Linux for SIGKILL when the thread that started it dies (``prctl(PR_SET_PDEATHSIG)``, ``man 2
  prctl``; :func:`signal_when_parent_dies`), so a killed caller leaves no child behind; a caller stopped by a signal
  through :mod:`paddlefit.process.quietstart` kills it first (:func:`~paddlefit.process.quietstart.at_signal_exit`). The
  child's stdout goes to its stderr (user code may print); the descriptor that was its stdout carries frames back:
  progress messages, then the function's result or the PaddlefitError it raised, each a length-prefixed pickle.
- Memory: the child sets ``RLIMIT_DATA`` before the function runs, to what it holds then (Python and the preloaded
  modules: 0.22 GiB with Paddle 3.3.1) plus the call's allowance. Linux >= 4.7 counts every private writable
  mapping against it (``brk`` and anonymous ``mmap`` alike; ``man 2 setrlimit``), and address space that is only
  reserved (``PROT_NONE``, as glibc's malloc arenas and CUDA reserve it) does not count, unlike ``RLIMIT_AS``. An
  allocation past the limit fails: Paddle 3.3.1's CPU allocator raises ``MemoryError: (ResourceExhausted) Fail to
  alloc memory of N size, error code is 12`` and NumPy ``MemoryError`` (measured here, with either limit).
  :func:`paddlefit.process.memlimit.end_memory_limit` lifts the limit for the function's error message and gives it the
  figures (:mod:`paddlefit.process.memlimit`).
- Time: the caller waits for frames with ``select`` until ``timeout_s`` seconds after the call (or until the child
  has used no CPU for ``stall_s`` seconds: a deadlock, :data:`STALL_S`), then sends SIGTERM
  to the child's process group and SIGKILL :data:`KILL_GRACE_S` later (the deadlocked child ignores SIGTERM).
- The child's exit status and peak RSS come from ``os.wait4``; its stderr goes to a temporary file, whose last lines
  a failure quotes (``malloc(): ...``) and which, after an answer, is copied to the caller's stderr.

Pickles cross only between this process and the child it started (never from a file).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import re
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from paddlefit.process.memlimit import end_memory_limit, set_memory_limit
from paddlefit.process.safepath import python_command, safe_env
from paddlefit.units import GIB

__all__ = [
    "KILL_GRACE_S",
    "ChildFailed",
    "ChildLimits",
    "IsolatedCall",
    "child_main",
    "signal_when_parent_dies",
]

#: Seconds between SIGTERM and SIGKILL when a child is stopped (a child of Paddle that is not deadlocked exits on
#: SIGTERM within milliseconds through :mod:`paddlefit.process.quietstart`; a deadlocked one never does).
KILL_GRACE_S = 2.0
#: Seconds a child that has answered gets to exit by itself before it is killed (it ends with ``os._exit``).
EXIT_WAIT_S = 5.0
#: Seconds without CPU progress after which a child that has not answered is taken as deadlocked and stopped, well
#: before its time limit. A probe always computes (it builds and runs a model on generated data); the deadlock of
#: a corrupted heap (LeNet on a 1x1 image: ``malloc(): unsorted double linked list corrupted``, then a futex wait)
#: uses no CPU at all. Progress is the child's user + system CPU time (``/proc/PID/stat``, ``man 5 proc``), which
#: grows by at least :data:`STALL_CPU_S` in any window of a working child.
STALL_S = 30.0
#: CPU seconds a window of :data:`STALL_S` must add for the child to count as working (a futex wait adds none; a
#: Python interpreter idling between imports adds milliseconds).
STALL_CPU_S = 0.05
_LEN = struct.Struct("<Q")


@dataclass(frozen=True)
class ChildLimits:
    """The limits of one :meth:`IsolatedCall.call`: ``timeout_s`` seconds of wall clock from the call to the
    answer, ``memory_bytes`` of private writable memory (``RLIMIT_DATA``, what ``VmData`` counts) the child may
    allocate beyond what it holds when the call begins (Python and its preloaded modules), and ``stall_s`` seconds
    without CPU progress after which it is taken as deadlocked (:data:`STALL_S`)."""

    timeout_s: float
    memory_bytes: int
    stall_s: float = STALL_S


class ChildFailed(Exception):
    """The child gave no answer: it ran past its time limit (``how == "timeout"``), stopped using the CPU for
    :data:`STALL_S` seconds (``"stalled"``: deadlocked, stopped before its time limit), was killed by a signal
    (``"signal"``, ``code`` the signal's number) or exited without answering (``"exit"``, ``code`` its exit code).

    Attributes:
        seconds: wall seconds from the call to the end. peak_rss_bytes: the child's peak resident set (``wait4``),
        bytes. last_words: the last lines it wrote on stderr (empty when none).
    """

    def __init__(self, how: str, code: int | None, seconds: float, peak_rss_bytes: int, last_words: str) -> None:
        self.how, self.code, self.seconds = how, code, seconds
        self.peak_rss_bytes, self.last_words = peak_rss_bytes, last_words
        super().__init__(self.what())

    def what(self) -> str:
        """What happened, in words: ``was killed by signal 6 (SIGABRT) before it answered (after 1.2 s, at 0.41 GiB
        peak RSS)``."""
        if self.how == "timeout":
            head = "gave no answer in time and was killed"
        elif self.how == "stalled":
            head = "stopped using the CPU (deadlocked) and was killed"
        elif self.how == "signal":
            head = f"was killed by signal {self.code} ({_signal_name(self.code)}) before it answered"
        else:
            head = f"exited with code {self.code} before it answered"
        return f"{head} (after {self.seconds:.1f} s, at {self.peak_rss_bytes / GIB:.2f} GiB peak RSS)"


def _signal_name(num: int | None) -> str:
    try:
        return signal.Signals(num).name  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return "unknown signal"


class IsolatedCall:
    """A child process that runs ``target`` (``package.module:function``, called as ``function(arg, progress)``)
    once, started when this object is made so that its imports (the modules ``preload`` names) overlap the caller's
    work; ``target`` is imported once the call comes, with the caller's ``sys.path`` entries the child lacks added
    after its own. Use it as a context manager, or
    :meth:`close` it: a child not called is stopped unused."""

    def __init__(self, target: str, preload: tuple[str, ...] = ()) -> None:
        import paddlefit
        from paddlefit.process.quietstart import at_signal_exit

        root = os.path.dirname(os.path.dirname(os.path.abspath(paddlefit.__file__)))
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        env = safe_env(dict(os.environ, PYTHONPATH=path, PADDLEFIT_PARENT_PID=str(os.getpid())))
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (open as long as the child: closed in close())
        # no current directory first on the child's path, as the installed console script has none: a user's
        # `paddle.py` in the job's folder must not stand in for Paddle in the probe (paddlefit.process.safepath)
        self.proc = subprocess.Popen(
            [*python_command(module="paddlefit.process.isolation"), target, *preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            start_new_session=True,
            env=env,
        )
        self._status: tuple[int, int] | None = None
        self._said = ""  # what the child wrote on stderr, read when it has ended
        pid = self.proc.pid
        self._drop = at_signal_exit(lambda: os.killpg(pid, signal.SIGKILL))  # this process stopped by a signal

    def __enter__(self) -> IsolatedCall:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, arg: Any, limits: ChildLimits, progress: Callable[[str], None] | None = None) -> Any:
        """Run the target on ``arg`` in the child under ``limits``; ``progress(message)`` hears each message the
        target sends. Returns the target's result. The child is ended when this returns or raises.

        Raises:
            PaddlefitError: the one the target raised (its class, or PaddlefitError with its message).
            ChildFailed: no answer within ``limits.timeout_s`` seconds or no CPU progress for ``limits.stall_s``
                seconds (deadlocked), or the child died (a signal, an exit).
            pickle.PicklingError, TypeError, AttributeError: ``arg`` cannot be pickled.
        """
        t0 = time.monotonic()
        deadline = t0 + limits.timeout_s
        try:
            data = pickle.dumps((list(sys.path), _warning_filters(), limits.memory_bytes, pickle.dumps(arg)))
            sent = self._send(_LEN.pack(len(data)) + data, deadline)
            end = sent or self._answer(deadline, limits.stall_s, progress)
            self._finish(0.0 if end in ("timeout", "stalled") else EXIT_WAIT_S)
        finally:
            self.close()
        if isinstance(end, tuple):
            self._relay_stderr()
            kind, value = end
            if kind == "error":
                raise value
            return value
        status, rss = self._status or (0, 0)
        how, code = (
            (end, None)
            if end in ("timeout", "stalled")
            else ("signal", os.WTERMSIG(status))
            if os.WIFSIGNALED(status)
            else ("exit", os.waitstatus_to_exitcode(status))
        )
        raise ChildFailed(how, code, time.monotonic() - t0, rss, self._last_words())

    def _send(self, data: bytes, deadline: float) -> str | None:
        """Write ``data`` to the child's stdin and close it before ``deadline``: None, else ``"timeout"`` (not
        read in time) or ``"eof"`` (the child is gone)."""
        fd = self.proc.stdin.fileno()  # type: ignore[union-attr]
        os.set_blocking(fd, False)
        view = memoryview(data)
        try:
            while view:
                if not select.select([], [fd], [], max(0.0, deadline - time.monotonic()))[1]:
                    return "timeout"
                view = view[os.write(fd, view) :]
        except (BrokenPipeError, ConnectionResetError):
            return "eof"
        finally:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()  # type: ignore[union-attr]
        return None

    def _answer(self, deadline: float, stall_s: float, progress: Callable[[str], None] | None) -> tuple[str, Any] | str:
        """Read frames, passing ``say`` ones to ``progress``, until the answer (``("ok", result)`` or
        ``("error", exception)``); ``"eof"`` when the child closed its end first, ``"timeout"`` at ``deadline``,
        ``"stalled"`` when its CPU time grew by less than :data:`STALL_CPU_S` in ``stall_s`` seconds."""
        fd, buf = self.proc.stdout.fileno(), b""  # type: ignore[union-attr]
        mark = (time.monotonic(), self._cpu_s())
        while True:
            while len(buf) >= _LEN.size and len(buf) >= _LEN.size + (n := _LEN.unpack_from(buf)[0]):
                try:
                    kind, value = pickle.loads(buf[_LEN.size : _LEN.size + n])
                except Exception:  # bytes that are no frame of ours (user code wrote to the descriptor): no answer
                    return "eof"
                buf = buf[_LEN.size + n :]
                if kind != "say":
                    return kind, value
                if progress is not None:
                    progress(str(value))
            now = time.monotonic()
            if now >= deadline:
                return "timeout"
            if not select.select([fd], [], [], min(deadline - now, 1.0))[0]:
                if self._reap() is not None:  # it exited, and a process it started still holds the pipe open
                    return "eof"
                cpu = self._cpu_s()
                if cpu is None or cpu - mark[1] >= STALL_CPU_S:
                    mark = (time.monotonic(), cpu)
                elif time.monotonic() - mark[0] >= stall_s:
                    return "stalled"
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return "eof"
            buf += chunk

    def _cpu_s(self) -> float | None:
        """The child's user + system CPU seconds so far (``/proc/PID/stat`` fields 14 and 15, in clock ticks), or
        None when it cannot be read (the child is gone)."""
        try:
            with open(f"/proc/{self.proc.pid}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return None

    def _finish(self, wait_s: float) -> None:
        """Wait up to ``wait_s`` seconds for the child to exit, then stop its process group (SIGTERM, SIGKILL after
        :data:`KILL_GRACE_S`), and reap it with ``wait4`` (exit status and peak RSS); then SIGKILL what is left of its
        process group (processes the child started), whatever the child's end."""
        end = time.monotonic() + wait_s
        while self._reap() is None and time.monotonic() < end:
            time.sleep(0.02)
        for sig, grace in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 60.0)):
            if self._status is not None:
                break
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)
            end = time.monotonic() + grace
            while self._reap() is None and time.monotonic() < end:
                time.sleep(0.02)
        with contextlib.suppress(ProcessLookupError, PermissionError):  # what the child started and left behind
            os.killpg(self.proc.pid, signal.SIGKILL)

    def _reap(self) -> tuple[int, int] | None:
        """``wait4`` without blocking: (status, peak RSS bytes) once the child has exited, else None."""
        if self._status is not None:
            return self._status
        try:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere
            pid, status, usage = self.proc.pid, 0, None
        if pid == 0:
            return None
        self._status = (status, int(usage.ru_maxrss) * 1024 if usage else 0)  # ru_maxrss: KiB on Linux
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        return self._status

    def close(self) -> None:
        """Stop the child if it still runs (at once: nothing of it is kept), keep what it wrote on stderr and release
        its pipes and file."""
        self._finish(0.0)
        if not self._stderr.closed:
            self._stderr.seek(0)
            self._said = self._stderr.read().decode("utf-8", errors="replace")
        for f in (self.proc.stdin, self.proc.stdout, self._stderr):
            with contextlib.suppress(OSError, AttributeError):
                f.close()  # type: ignore[union-attr]
        self._drop()

    def _last_words(self, lines: int = 6) -> str:
        """The child's last ``lines`` non-blank stderr lines (Python warnings left out)."""
        kept = [
            x.strip()
            for x in self._said.splitlines()
            if x.strip() and "warnings.warn(" not in x and "Warning:" not in x
        ]
        return "\n".join(kept[-lines:])

    def _relay_stderr(self) -> None:
        """Copy what the child wrote on stderr to this process's stderr (user code's prints, Paddle's warnings)."""
        text = self._said
        if text.strip():
            sys.stderr.write(text if text.endswith("\n") else text + "\n")


def signal_when_parent_dies(sig: int, parent_pid: str | None) -> None:
    """Ask Linux to send ``sig`` to this process when the thread that started it exits (``prctl(PR_SET_PDEATHSIG)``,
    ``man 2 prctl``); when the parent has died already (its pid ``parent_pid`` is no longer this process's parent),
    send it now. Elsewhere than Linux (or without ``prctl``) nothing."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, sig)  # 1 = PR_SET_PDEATHSIG
        if (parent_pid or str(os.getppid())) != str(os.getppid()):  # it died before the request
            os.kill(os.getpid(), sig)


def _warning_filters() -> list[tuple[Any, ...]]:
    """This process's warning filters (``warnings.filters``) that pickle, for the child to apply (a warning this
    process would not show, Paddle's UserWarnings under the CLI's :func:`~paddlefit.cli.common.quiet_paddle`, is not
    shown by the child either)."""
    import warnings

    out = []
    for f in warnings.filters:
        with contextlib.suppress(pickle.PicklingError, TypeError, AttributeError):
            pickle.dumps(f)
            out.append(f)
    return out


def _apply_warning_filters(filters: list[tuple[Any, ...]]) -> None:
    """Make ``filters`` (``warnings.filters`` entries: action, message regex, category, module regex, line) this
    process's, in order, through the public ``warnings`` functions."""
    import warnings

    def regex(p: Any) -> str:  # a compiled pattern, or a plain string Python matches exactly (its own defaults)
        return "" if p is None else p.pattern if hasattr(p, "pattern") else re.escape(str(p)) + r"\Z"

    warnings.resetwarnings()
    for action, message, category, module, lineno in filters:
        if message is None and module is None:
            warnings.simplefilter(action, category, lineno, append=True)
        else:
            warnings.filterwarnings(action, regex(message), category, regex(module), lineno, append=True)


def _write_frame(fd: int, kind: str, value: Any) -> None:
    data = pickle.dumps((kind, value))
    view = memoryview(_LEN.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _read_payload() -> tuple[list[str], list[tuple[Any, ...]], int, bytes]:
    """The caller's (sys.path, warning filters, memory limit in bytes, pickled argument) from stdin."""
    raw = sys.stdin.buffer.read()
    (n,) = _LEN.unpack_from(raw)
    return pickle.loads(raw[_LEN.size : _LEN.size + n])


def child_main(argv: list[str]) -> None:
    """The child's side (``python -m paddlefit.process.isolation MODULE:FUNCTION [PRELOAD...]``): see the module
    docstring. Exits with ``os._exit`` once the answer is written (no teardown of a heap the call may have hurt)."""
    from paddlefit.process.quietstart import install

    install()
    signal_when_parent_dies(signal.SIGKILL, os.environ.get("PADDLEFIT_PARENT_PID"))
    out = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import warnings

    warnings.filterwarnings("ignore", message="No ccache found")  # Paddle's import warns on every machine
    for name in argv[1:]:  # while the caller goes on
        importlib.import_module(name)
    path, filters, memory, arg = _read_payload()
    # the caller's entries this process lacks go last: a package that put its own folder first on the caller's path
    # when imported (unstructured-paddleocr adds .../unstructured_paddleocr) would otherwise shadow itself here,
    # before its import, as a top-level module of the same name
    sys.path.extend(p for p in path if p not in sys.path)
    _apply_warning_filters(filters)
    module, _, name = argv[0].partition(":")
    fn = getattr(importlib.import_module(module), name)
    arg = pickle.loads(arg)
    from paddlefit.errors import PaddlefitError

    set_memory_limit(memory)
    try:
        result = fn(arg, lambda message: _write_frame(out, "say", message))
    except PaddlefitError as exc:
        end_memory_limit()
        try:
            _write_frame(out, "error", exc)
        except (pickle.PicklingError, TypeError, AttributeError):
            _write_frame(out, "error", PaddlefitError(str(exc)))
    except BaseException:
        end_memory_limit()
        raise  # its traceback on stderr, exit 1: the caller quotes the last lines
    else:
        end_memory_limit()
        _write_frame(out, "ok", result)
    sys.stderr.flush()
    os._exit(0)


def pid_alive(pid: object) -> bool:
    """Whether ``pid`` (a holder record's, any JSON value) is a live process on this host, by ``kill(pid, 0)`` (True
    when it cannot be told: not a positive int, or no permission to signal it)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


# run as paddlefit.process.isolation (not __main__), so the function sees this module's limit
if __name__ == "__main__":
    from paddlefit.process import isolation

    isolation.child_main(sys.argv[1:])
