"""The command-line shell: one module per verb; each parses, calls the core, renders.

Importing it (the first thing ``paddlefit`` and ``python -m paddlefit.cli.main`` do, before typer, rich or Paddle
are imported) makes Ctrl-C during start-up exit 130 at once, without a traceback (:func:`exit_on_interrupt`).
"""

from __future__ import annotations

import os
import signal
import threading


def exit_on_interrupt(signum: int, frame: object) -> None:
    """SIGINT handler of the command line until a command installs its own (``train``'s loop stops gracefully
    after a checkpoint, exit 143): write ``interrupted`` to stderr and exit 130 (128 + SIGINT) at once.

    Raising ``KeyboardInterrupt`` instead (Python's default) is not reliable during start-up: a C extension being
    imported (NumPy, Paddle) turns it into ``ImportError: initialization failed`` (exit 1, a traceback), and a
    library's bare ``except:`` can swallow it (the run went on: exit 0). Nothing is left half-written: every file
    that matters is written atomically (a temporary file left by the exit is removed by the next ``train``), and the
    kernel releases the run directory's lock.
    """
    os.write(2, b"interrupted\n")
    os._exit(130)


if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is \
        signal.default_int_handler:  # fmt: skip  (not when embedded: a host's own handler stays)
    signal.signal(signal.SIGINT, exit_on_interrupt)
