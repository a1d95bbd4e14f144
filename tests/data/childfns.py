"""Functions for tests/test_isolation.py to run in a child process (imported as `childfns:<name>`)."""

import os
import signal
import sys
import time


def echo(arg, progress):
    progress(f"got {arg!r}")
    print("a line the function printed")  # the child's stdout goes to its stderr, relayed after the answer
    return {"arg": arg, "pid": os.getpid()}


def deadlock(arg, progress):
    """Ignores SIGTERM, SIGINT and SIGHUP and never returns, as Paddle's corrupted heap does."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    progress(f"pid {os.getpid()}")
    while True:
        time.sleep(0.1)


def abort(arg, progress):
    sys.stderr.write("malloc(): unsorted double linked list corrupted\n")
    sys.stderr.flush()
    os.abort()


def refuse(arg, progress):
    from paddlefit.errors import InputSpecError

    raise InputSpecError(f"no {arg}")


def allocate(arg, progress):
    """Allocates ``arg`` bytes; returns (allocated, the figures of the limit) or the MemoryError's."""
    from paddlefit.process.memlimit import end_memory_limit

    try:
        block = bytearray(arg)
    except MemoryError:
        return ("MemoryError", end_memory_limit())
    return ("allocated", len(block))


def stall(arg, progress):
    """Ignores SIGTERM and waits on a lock nobody releases (no CPU at all), as a futex-deadlocked Paddle does."""
    import threading

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    progress(f"pid {os.getpid()}")
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()


def spin(arg, progress):
    """Computes for ``arg`` seconds without a word, then answers."""
    end = time.monotonic() + arg
    n = 0
    while time.monotonic() < end:
        n += 1
    return n > 0


def fork_and_exit(arg, progress):
    """Starts a process that holds the answer pipe open and sleeps (987 s), then exits with code 3 without answering."""
    import subprocess

    subprocess.Popen(["sleep", "987"])
    os._exit(3)
