"""paddlefit.train.guards: the budget and the checkpoint schedule on a fake clock, the stop flag on a real signal."""

from __future__ import annotations

import pytest
from trainhelpers import FakeClock

from paddlefit.jobspec.spec import BudgetSpec, CheckpointSpec
from paddlefit.train.guards import Budget, CheckpointSchedule, StopFlag


def test_budget_on_a_fake_clock() -> None:
    clock = FakeClock()
    b = Budget(BudgetSpec(max_hours=2.0), clock)
    b.prior_s = 3600.0  # an earlier run of the same run directory took an hour
    assert b.exceeded() is None and b.wall_s() == 3600.0 and b.cost_usd() is None
    clock.t += 3599.0
    assert b.exceeded() is None
    clock.t += 1.0
    assert b.exceeded() == "budget: 2 h of wall time reached max_hours 2"
    c = Budget(BudgetSpec(max_cost_usd=3.0, price_usd_per_hour=2.0), clock)
    clock.t += 5400.0 - 1e-6
    assert c.exceeded() is None and c.cost_usd() == pytest.approx(3.0)
    clock.t += 1e-3
    why = c.exceeded()
    assert why is not None and why.startswith("budget: 1.5 h x 2 USD/h = 3 USD reached max_cost_usd 3")


def test_checkpoint_schedule_by_steps_minutes_and_daly() -> None:
    clock = FakeClock()
    steps = CheckpointSchedule(CheckpointSpec(every_steps=5, every_minutes=0), clock=clock)
    assert [s for s in range(1, 21) if steps.due(s)] == [5, 10, 15, 20]
    timed = CheckpointSchedule(CheckpointSpec(every_steps=0, every_minutes=10), clock=clock)
    clock.t += 599.0
    assert not timed.due(1)
    clock.t += 1.0
    assert timed.due(2)
    timed.written(2, 0.5)
    assert not timed.due(3) and timed.write_s == 0.5
    lines: list[str] = []
    auto = CheckpointSchedule(CheckpointSpec(auto_interval=True, interruptions_per_hour=1.0), lines.append, clock)
    assert auto.due(1)  # the first checkpoint measures the write time
    auto.written(1, 2.0)
    from paddlefit.cost.checkpoint_interval import daly_interval_s

    assert auto.interval_s == daly_interval_s(2.0, 3600.0) and len(lines) == 1
    clock.t += auto.interval_s - 0.01
    assert not auto.due(2)
    clock.t += 0.01
    assert auto.due(3)
    auto.written(3, 2.1)  # within 25%: no new line
    assert len(lines) == 1 and auto.interval_s == daly_interval_s(2.1, 3600.0)


def test_stop_flag_catches_sigterm_keeps_the_first_and_ignores_the_rest_once_stopped() -> None:
    """Without a stop the handlers come back; after one, the stop signals are ignored (the run's 143 is decided and
    recorded: a second Ctrl-C must not exit 130), and a second signal never changes the reason."""
    import os
    import signal

    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    flag = StopFlag()
    flag.install()
    flag.restore()
    assert {s: signal.getsignal(s) for s in before} == before
    flag.install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        assert flag.set and flag.signum == signal.SIGTERM and flag.reason == "stopped by signal SIGTERM"
    finally:
        flag.restore()
        assert signal.getsignal(signal.SIGTERM) == signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        for s, h in before.items():
            signal.signal(s, h)


def test_a_failed_collective_is_a_lost_rank_and_anything_else_raises_as_it_is() -> None:
    """Rank 0's all-reduce when rank 1 was SIGKILLed raises gloo's RuntimeError (seen on Paddle 3.3.1): it becomes
    exit 1 naming the step; an error that is not a collective's (a bug) raises unchanged, as in a 1-rank run."""
    from types import SimpleNamespace

    from paddlefit.errors import JobFailedError
    from paddlefit.train.guards import as_lost_rank, is_collective_failure

    gloo = RuntimeError("[/paddle/third_party/gloo/gloo/transport/tcp/pair.cc:584] TIMEOUT self_rank = 0 pair_rank = 1")
    store = SimpleNamespace(latest_valid=lambda: "runs/r/checkpoints/step-00000025")
    trainer = SimpleNamespace(world=2, is_writer=True, state=SimpleNamespace(step=31), store=store)
    assert is_collective_failure(gloo) and not is_collective_failure(ValueError("bad shape"))
    err = as_lost_rank(gloo, trainer)
    assert isinstance(err, JobFailedError) and err.exit_code == 1
    assert str(err).startswith("at step 31: another rank was killed or lost") and "step-00000025" in str(err)
    bug = ValueError("bad shape")
    with pytest.raises(ValueError, match="bad shape"):
        as_lost_rank(bug, trainer)
    with pytest.raises(RuntimeError, match="gloo"):
        as_lost_rank(gloo, SimpleNamespace(world=1))
