"""The bound on a rank's waits on its peers (paddlefit.train.peers), the launcher's side of a lost node
(distlaunch: exit 203 kept, 1 when a worker of its own node was killed, the rendezvous deadline), and a real 2-node
job on this machine losing a node (bench/node_loss.py's machinery)."""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from trainhelpers import FakeClock

from paddlefit.train.distlaunch import LaunchWatch, scheduler_exit_code
from paddlefit.train.peers import EXIT_PEER_LOST, FACTOR, PeerWatch, lost_code, peer_settings


def test_the_bound_is_the_start_up_allowance_until_steps_and_solo_work_are_measured() -> None:
    clock = FakeClock(100.0)
    w = PeerWatch(2, 1, floor_s=10, startup_s=600, clock=clock, exit=lambda _c: None)
    assert w.bound() == 600  # nothing measured
    for step, took in ((1, 5.0), (2, 0.5), (3, 0.25)):  # the first step (warm-up) is not a plain step
        w.step_begins(step)
        clock.t += took
        w._step_done([-1.0, -1.0])
    assert w.plain_s == 0.5
    assert w.bound() == 10 + FACTOR * 0.5
    w._after = "save"  # rank 0 announced a checkpoint: never measured yet
    assert w.bound("save") == 600
    w.step_begins(4)
    clock.t += 1.0
    w._step_done([2.0, -1.0])  # rank 0's first save took 2 s (shared through the agreement)
    assert w.solo_s == {"save": 2.0, "eval": None}
    assert w.plain_s == 0.5  # a step after solo work is not a plain step
    assert w.bound("save") == 10 + FACTOR * (0.5 + 2.0)
    assert w.bound("eval") == 600


def test_the_watch_ends_the_process_past_the_bound_with_exit_203_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PADDLE_LOCAL_SIZE", "1")  # one rank on this node, the other on another: a node lost
    ended: list[int] = []
    said: list[str] = []
    w = PeerWatch(2, 0, on_lost=said.append, floor_s=10, startup_s=600, exit=ended.append)
    w.start()
    with w.waiting("step 7", allowance=0.2):
        time.sleep(0.8)
    assert ended == [EXIT_PEER_LOST]
    assert "step 7: no word from another rank" in said[0] and "(bound 0.2 s)" in said[0]
    assert not w.stand_down()  # it fired: the main thread must write nothing


def test_a_watch_stood_down_never_fires() -> None:
    ended: list[int] = []
    w = PeerWatch(2, 1, floor_s=10, startup_s=600, exit=ended.append)
    w.start()
    assert w.stand_down()
    with w.waiting("the end", allowance=0.1):
        time.sleep(0.4)
    assert ended == []
    assert PeerWatch(1, 0).active is False  # one rank: nothing to watch


def test_a_peer_lost_on_this_node_is_exit_1_on_another_203() -> None:
    """Every rank on this node (`train --devices N`): the lost one was killed here (the OOM killer): the job failed."""
    assert lost_code(2, {"PADDLE_LOCAL_SIZE": "2"}) == 1 and lost_code(2, {}) == 1
    assert lost_code(2, {"PADDLE_LOCAL_SIZE": "1"}) == EXIT_PEER_LOST == 203


def test_peer_settings_read_the_environment() -> None:
    assert peer_settings({}) == (10.0, 600.0)
    assert peer_settings({"PADDLEFIT_PEER_TIMEOUT_S": "3", "PADDLEFIT_PEER_STARTUP_S": "45"}) == (3.0, 45.0)
    assert peer_settings({"PADDLEFIT_PEER_TIMEOUT_S": "x", "PADDLEFIT_PEER_STARTUP_S": "-1"}) == (10.0, 600.0)


def test_exit_203_is_kept_unless_a_worker_of_this_node_was_killed() -> None:
    assert scheduler_exit_code(EXIT_PEER_LOST) == EXIT_PEER_LOST
    watch = LaunchWatch()
    watch.failed = {0: EXIT_PEER_LOST}
    assert watch.exit_code(EXIT_PEER_LOST) == EXIT_PEER_LOST  # the lost rank was on another node: retried
    watch.failed = {0: EXIT_PEER_LOST, 1: -9}
    assert watch.exit_code(EXIT_PEER_LOST) == 1  # killed here (the OOM killer): the job failed


def test_a_survivor_stopped_by_the_launcher_after_a_kill_is_a_failure_not_a_stop() -> None:
    """Paddle's launcher SIGTERMs the surviving workers when one is killed; a survivor stopped before its next
    collective failed exits 143, which is a failed job (1), not a user's stop, unless the launcher itself was
    stopped."""
    watch = LaunchWatch()
    watch.failed = {0: 143, 1: -9}
    assert watch.exit_code(143) == 1
    watch.failed = {0: 143}
    assert watch.exit_code(143) == 143  # no worker killed: a stop stays a stop
    watch = LaunchWatch()
    watch.signals.append(signal.SIGTERM)
    watch.failed = {0: 143, 1: -9}
    assert watch.exit_code(143) == 143  # the launcher was stopped: the kill came with the stop


def test_the_launchers_rendezvous_has_a_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Paddle's HTTP master waits for ever for a node that never comes: distlaunch gives up after the start-up
    allowance with exit 203; with one node there is no rendezvous to wait for."""
    monkeypatch.setenv("PADDLEFIT_PEER_STARTUP_S", "0.2")
    monkeypatch.delenv("PADDLE_NNODES", raising=False)
    ended: list[int] = []
    watch = LaunchWatch()
    assert watch.rendezvous_deadline(["--nnodes", "1", "w.py"], exit=ended.append) is None
    thread = watch.rendezvous_deadline(["--nnodes", "2", "--master", "h:1", "w.py"], exit=ended.append)
    assert isinstance(thread, threading.Thread)
    thread.join(5)
    assert ended == [EXIT_PEER_LOST]
    watch = LaunchWatch()
    watch.deployed.set()  # the workers started: the deadline never fires
    thread = watch.rendezvous_deadline(["--nnodes", "2", "w.py"], exit=ended.append)
    assert thread is not None
    thread.join(5)
    assert ended == [EXIT_PEER_LOST]


@pytest.mark.slow
def test_a_node_sigkilled_mid_run_stops_the_survivor_within_the_bound_and_resumes_bit_exact(tmp_path: Path) -> None:
    """A 2-node job (two launchers, gloo) loses node 0 (rank 0, the master and the collective
    store) mid-run; the survivor stops within its bound with exit 203 (retried by schedulers), and `train --resume
    auto` on one node continues from the step-5 checkpoint to the uninterrupted run's parameters, bit for bit."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import node_loss

    spec, want = node_loss.reference(tmp_path)
    row = node_loss.lose_node(tmp_path, spec, "mid-step", 0, want)
    assert row.code == EXIT_PEER_LOST, row
    assert row.stop_s is not None and row.bound_s is not None and row.stop_s <= row.bound_s, row
    assert row.resumed_from == 5 and row.exact and not row.problem, row
