"""Signals during start-up: exit at once, with one line and the code a scheduler reads right, never a traceback.

Installed first thing by the command line (:mod:`paddlefit.cli`) and by each worker of a launched run
(:mod:`paddlefit.train.worker`), before typer, rich or Paddle are imported:

- SIGINT (Ctrl-C) -> ``interrupted``, exit 130; SIGTERM -> exit 143; SIGHUP (a closed terminal, a dropped ssh
  session) -> exit 129: 128 + the signal (docs/errors.md#exit-codes). ``train``'s loop, once started, installs its
  own handlers instead (:class:`paddlefit.train.guards.StopFlag`: checkpoint, then 143).
- A run directory lock this process holds (:class:`paddlefit.train.lock.RunDirLock`) drops its holder record
  (``RUN_DIR/.lock.json``) before the exit; the kernel releases the lock itself.
- ``import paddle`` installs glog's C++ failure handler for SIGTERM (``InitGLOG`` ->
  ``google::InstallFailureSignalHandler``, called as ``core.init_glog`` by ``__bootstrap__`` in
  ``paddle/base/__init__.py``), which prints a "C++ Traceback ... FatalError: `Termination signal` is detected ...
  Aborted" block and dies. A meta path finder wraps ``paddle.base.core.init_glog`` as that module is loaded so
  that it puts the Python handlers back right after (``signal.signal`` re-installs Python's C-level handler).
  Blocking the signals during the import instead is not enough: threads started earlier (OpenBLAS's) take them.

Exiting with ``os._exit`` rather than raising is deliberate: a C extension being imported (NumPy, Paddle) turns a
raised ``KeyboardInterrupt`` into ``ImportError: initialization failed`` (exit 1, a traceback), and a library's bare
``except:`` can swallow it. Nothing is left half-written: every file that matters is written atomically (a
temporary file left by the exit is removed by the next ``train``).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import os
import signal
import sys
import threading
from typing import Any

__all__ = ["GLOG_SIGNALS", "at_signal_exit", "exit_on_signal", "install"]

#: The signals whose Python handlers are put back over glog's once Paddle has installed it.
GLOG_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


#: What :func:`exit_on_signal` undoes before it exits (a child process to kill, a temporary folder to remove).
_AT_SIGNAL_EXIT: list[Any] = []


def at_signal_exit(undo: Any) -> Any:
    """Have :func:`exit_on_signal` call ``undo()`` (errors ignored) before it exits, as ``os._exit`` skips
    ``finally`` blocks; returns the function that takes it back (call it once the work is done)."""
    _AT_SIGNAL_EXIT.append(undo)
    return lambda: _AT_SIGNAL_EXIT.remove(undo) if undo in _AT_SIGNAL_EXIT else None


def exit_on_signal(signum: int, frame: object) -> None:
    """Start-up handler: drop this process's lock records, run what :func:`at_signal_exit` registered, write one
    line to stderr and exit 128 + ``signum`` (130 SIGINT, 143 SIGTERM, 129 SIGHUP) at once."""
    # a signal during the import of train/lock.py finds it partly run (no drop_lock_records yet, and no lock taken)
    drop = getattr(sys.modules.get("paddlefit.train.lock"), "drop_lock_records", None)
    if drop is not None:
        drop()
    for undo in list(_AT_SIGNAL_EXIT):
        with contextlib.suppress(Exception):  # an exit path: nothing may stop it
            undo()
    name = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    os.write(2, f"{name}\n".encode())
    os._exit(128 + signum)


class _PaddleImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of ``paddle.base.core`` so that, once it is loaded, its ``init_glog``
    (called by Paddle's ``__bootstrap__`` right after) re-installs the Python handlers of :data:`GLOG_SIGNALS`
    after it has installed glog's (module docstring)."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        """The real spec of ``paddle.base.core`` with a wrapped ``exec_module``; None for any other name."""
        if name != "paddle.base.core":
            return None
        sys.meta_path.remove(self)  # once: the real finders find it
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        real = loader.exec_module

        def exec_module(module: Any) -> None:
            real(module)
            init_glog = getattr(module, "init_glog", None)
            if callable(init_glog):
                module.init_glog = _then_python_handlers(init_glog)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _then_python_handlers(init_glog: Any) -> Any:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return init_glog(*args, **kwargs)
        finally:  # signal.signal works in the main thread only (Paddle imported by another thread: glog's stay)
            for sig in GLOG_SIGNALS if threading.current_thread() is threading.main_thread() else ():
                handler = signal.getsignal(sig)
                if callable(handler):  # Python's own handler: put its C-level trampoline back over glog's
                    signal.signal(sig, handler)

    return wrapped


def install() -> None:
    """Install :func:`exit_on_signal` for SIGINT, SIGTERM and SIGHUP where the default handlers are in place (not
    when embedded: a host's own handlers stay), and the Paddle import guard. Main thread only; elsewhere nothing."""
    if threading.current_thread() is not threading.main_thread():
        return
    defaults = {
        signal.SIGINT: signal.default_int_handler,
        signal.SIGTERM: signal.SIG_DFL,
        signal.SIGHUP: signal.SIG_DFL,
    }
    for sig, default in defaults.items():
        if signal.getsignal(sig) is default:
            signal.signal(sig, exit_on_signal)
    if "paddle" not in sys.modules and not any(isinstance(f, _PaddleImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PaddleImport())
