"""paddlefit.process.isolation: a function in a child process under a wall-clock and a memory limit, through real child
processes (the functions are tests/data/childfns.py)."""

import os
import signal
import subprocess
import sys
import time

import pytest

from paddlefit.errors import InputSpecError
from paddlefit.process.isolation import KILL_GRACE_S, ChildFailed, ChildLimits, IsolatedCall
from paddlefit.units import GIB, MIB

LIMITS = ChildLimits(timeout_s=60.0, memory_bytes=2 * GIB)


def _gone(pid: int, within_s: float = 10.0) -> bool:
    end = time.monotonic() + within_s
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.05)


def test_the_answer_and_the_progress_come_back_and_the_child_is_gone(capsys):
    heard = []
    with IsolatedCall("childfns:echo") as child:
        out = child.call([1, "two"], LIMITS, heard.append)
    assert out["arg"] == [1, "two"] and out["pid"] != os.getpid()
    assert heard == ["got [1, 'two']"]
    assert "a line the function printed" in capsys.readouterr().err
    assert _gone(out["pid"], 1.0)


def test_a_child_that_ignores_sigterm_is_killed_at_its_time_limit():
    heard = []
    t0 = time.monotonic()
    with pytest.raises(ChildFailed) as info:
        IsolatedCall("childfns:deadlock").call(None, ChildLimits(3.0, LIMITS.memory_bytes), heard.append)
    took = time.monotonic() - t0
    assert info.value.how == "timeout" and "gave no answer in time and was killed" in str(info.value)
    assert 3.0 <= took <= 3.0 + KILL_GRACE_S + 5.0, took
    assert _gone(int(heard[0].split()[1]), 1.0)


def test_a_child_that_stops_using_the_cpu_is_stopped_before_its_time_limit():
    heard = []
    t0 = time.monotonic()
    with pytest.raises(ChildFailed) as info:
        IsolatedCall("childfns:stall").call(None, ChildLimits(60.0, LIMITS.memory_bytes, stall_s=2.0), heard.append)
    took = time.monotonic() - t0
    assert info.value.how == "stalled" and "stopped using the CPU (deadlocked) and was killed" in str(info.value)
    assert 2.0 <= took <= 2.0 + KILL_GRACE_S + 5.0, took  # the 60 s limit never came
    assert _gone(int(heard[0].split()[1]), 1.0)
    # a child that computes silently for longer than the stall window is working: it answers
    assert IsolatedCall("childfns:spin").call(3.0, ChildLimits(60.0, LIMITS.memory_bytes, stall_s=1.0)) is True


def test_a_child_that_exits_while_its_own_child_holds_the_pipe_is_its_exit_and_leaves_nothing():
    t0 = time.monotonic()
    with pytest.raises(ChildFailed) as info:
        IsolatedCall("childfns:fork_and_exit").call(None, ChildLimits(60.0, LIMITS.memory_bytes, stall_s=20.0))
    assert (info.value.how, info.value.code) == ("exit", 3)
    assert time.monotonic() - t0 < 15.0  # seen as an exit at once, not as a stall or a timeout
    left = subprocess.run(["pgrep", "-f", "^sleep 987$"], capture_output=True, text=True).stdout.split()
    assert all(_gone(int(pid), 5.0) for pid in left)  # the sleep it started is killed with its process group


def test_a_crash_is_the_signal_and_the_last_words():
    with pytest.raises(ChildFailed) as info:
        IsolatedCall("childfns:abort").call(None, LIMITS)
    assert (info.value.how, info.value.code) == ("signal", signal.SIGABRT)
    assert "was killed by signal 6 (SIGABRT) before it answered" in info.value.what()
    assert info.value.last_words.endswith("malloc(): unsorted double linked list corrupted")


def test_the_paddlefit_error_the_function_raises_is_raised_here():
    with pytest.raises(InputSpecError, match="no inputs"):
        IsolatedCall("childfns:refuse").call("inputs", LIMITS)


def test_an_allocation_past_the_memory_limit_fails_in_the_child():
    limit = 256 * MIB
    kind, figures = IsolatedCall("childfns:allocate").call(512 * MIB, ChildLimits(60.0, limit))
    assert kind == "MemoryError" and figures[1] == limit and figures[0] < limit
    assert IsolatedCall("childfns:allocate").call(128 * MIB, ChildLimits(60.0, limit)) == (
        "allocated",
        128 * MIB,
    )


def test_the_child_dies_with_the_process_that_started_it():
    """A caller killed by SIGKILL runs no cleanup: the kernel's PR_SET_PDEATHSIG ends its child."""
    code = (
        "import sys, time\n"
        "from paddlefit.process.isolation import IsolatedCall, ChildLimits\n"
        "IsolatedCall('childfns:deadlock').call(None, ChildLimits(600, 2**31), lambda m: print(m, flush=True))\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    pid = None
    try:
        pid = int(parent.stdout.readline().split()[1])  # the deadlocked child's "pid N"
        assert not _gone(pid, 0.5)
        parent.kill()
        parent.wait(10)
        assert _gone(pid), f"child {pid} outlived its killed parent"
    finally:
        parent.kill()
        parent.wait(10)
        parent.stdout.close()
        if pid is not None and not _gone(pid, 0.0):
            os.kill(pid, signal.SIGKILL)
