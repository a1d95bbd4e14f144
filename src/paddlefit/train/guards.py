"""What stops a run or makes it checkpoint: the stop signal, the budget and the checkpoint schedule; and how an
error that stops it is reported (a lost rank, a failed write of the run).

Each takes its clock as an argument (default ``time.monotonic``, seconds), so tests drive them with a fake clock.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from paddlefit.errors import PaddlefitError
from paddlefit.jobspec.spec import BudgetSpec, CheckpointSpec
from paddlefit.units import SECONDS_PER_HOUR, cost_usd, hours

__all__ = [
    "Budget",
    "CheckpointSchedule",
    "StopFlag",
    "as_lost_rank",
    "as_write_failure",
    "heeded",
    "is_collective_failure",
]

Clock = Callable[[], float]
#: The signals that stop a run gracefully (checkpoint, exit 143).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class StopFlag:
    """Set by SIGTERM, SIGINT or SIGHUP (a closed terminal, a dropped ssh session) while installed; the loop
    checks it once per optimizer step, then checkpoints and exits 143 whichever it was (docs/errors.md)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    @property
    def set(self) -> bool:
        """Whether a stop signal arrived."""
        return self.signum is not None

    @property
    def reason(self) -> str:
        """``stopped by signal SIGHUP`` when the signal came to this process, else (another rank's) ``stopped by
        signal``: the reason status.json records for a stop."""
        return f"stopped by signal {signal.Signals(self.signum).name}" if self.signum else "stopped by signal"

    def install(self) -> None:
        """Catch SIGTERM, SIGINT and SIGHUP (the previous handlers are kept for :meth:`restore`). Python runs signal
        handlers in the main thread only, so a run in another thread (library use) installs none: it stops at its
        length, its budget, or when the process does."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in heeded(STOP_SIGNALS):
            self._old[sig] = signal.signal(sig, self._handler)

    def restore(self) -> None:
        """Put the previous handlers back; after a stop, ignore the stop signals instead: the run's outcome (exit
        143, recorded in status.json) is decided, and a second Ctrl-C must not exit 130 under a record of 143."""
        for sig, handler in self._old.items():
            signal.signal(sig, signal.SIG_IGN if self.set else handler)
        self._old.clear()

    def _handler(self, signum: int, _frame: Any) -> None:
        if self.signum is None:  # the first stop signal is the reason; later ones change nothing
            self.signum = signum


def ignore_stop_signals() -> None:
    """Ignore SIGTERM, SIGINT and SIGHUP from here on (main thread only): the run's outcome is decided and recorded
    (status.json, the registry), so the exit code must stay the recorded one, whatever signal comes next (Paddle's
    launcher stops the other ranks with SIGTERM when one fails; exiting 143 on it, :mod:`paddlefit.process.quietstart`,
    would report a stop with a checkpoint that did not happen)."""
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


def heeded(signals: tuple[int, ...]) -> tuple[int, ...]:
    """The ``signals`` this process does not ignore. A run started under ``nohup`` (or by a job runner that sets
    SIGHUP to SIG_IGN) must outlive its terminal, so an ignored signal stays ignored (POSIX: ``nohup`` sets SIGHUP's
    disposition to SIG_IGN, which ``exec`` and ``fork`` keep); main thread only, like ``signal.signal``."""
    return tuple(s for s in signals if signal.getsignal(s) is not signal.SIG_IGN)


#: Markers of a failed collective in an error's message (gloo on CPU, NCCL on GPU).
_COLLECTIVE_MARKS = ("gloo", "nccl", "NCCL")
#: Paddle's files of collective calls (``all_reduce``, ``barrier``; ``fused_allreduce_gradients``), not
#: ``paddle/distributed/parallel.py``, whose ``DataParallel.forward`` frames are in any data-parallel model's errors.
_COLLECTIVE_FILES = (
    "paddle/distributed/communication/",
    "paddle/distributed/collective.py",
    "fleet/utils/hybrid_parallel_util.py",
)


def is_collective_failure(exc: BaseException) -> bool:
    """Whether ``exc`` came from a collective operation between ranks (a frame in :data:`_COLLECTIVE_FILES`, or
    gloo/NCCL named in its message): what a rank meets when another rank was killed or lost (gloo:
    ``RuntimeError: [.../gloo/transport/tcp/pair.cc:576] Read error ...: Connection reset by peer``)."""
    if any(m in str(exc) for m in _COLLECTIVE_MARKS):
        return True
    tb = exc.__traceback__
    while tb is not None:
        if any(f in tb.tb_frame.f_code.co_filename.replace("\\", "/") for f in _COLLECTIVE_FILES):
            return True
        tb = tb.tb_next
    return False


def as_lost_rank(exc: Exception, trainer: Any) -> PaddlefitError:
    """``exc`` as the error :meth:`paddlefit.train.loop.Trainer.run` reports: a :class:`PaddlefitError` as it is;
    a failed collective of a multi-rank run (:func:`is_collective_failure`) naming the step and the last checkpoint:
    a :class:`~paddlefit.train.peers.PeerLostError` (exit 203, retried by schedulers) when the run spans several
    nodes, else (every rank on this node: the lost one was killed here, the OOM killer most often) a
    ``JobFailedError`` (exit 1; :func:`~paddlefit.train.peers.lost_code`). Rank 0 records it in status.json and the
    registry like any failure; the launcher's ``paddlefit:`` line names the rank that ended and how.

    Raises:
        Exception: ``exc`` itself, anything else (a bug: its traceback is the report).
    """
    if isinstance(exc, PaddlefitError):
        return exc
    if trainer.world <= 1 or not is_collective_failure(exc):
        raise exc
    from paddlefit.errors import JobFailedError
    from paddlefit.train.oom import first_line
    from paddlefit.train.peers import PeerLostError, last_checkpoint, lost_code

    state = getattr(trainer, "state", None)
    step = state.step if state is not None else 0
    waited = trainer.peers.waited() if hasattr(trainer, "peers") else ""
    code = lost_code(trainer.world)
    msg = (
        f"at step {step}: another rank was killed or lost (a collective operation failed after {waited}: "
        f"{type(exc).__name__}: {first_line(exc, 200)}). "
        + (f"Exit {code}: a scheduler restarts the job; " if code != 1 else "")
        + f"Run the same command again: `--resume auto` continues from "
        f"{last_checkpoint(trainer)}."
    )
    return PeerLostError(msg) if code != 1 else JobFailedError(msg)


def as_write_failure(exc: PaddlefitError, trainer: Any) -> PaddlefitError:
    """The error ``trainer`` (a :class:`~paddlefit.train.loop.Trainer`) raised, ``exc``, as rank 0 reports it. A
    write of the run that failed (any :class:`~paddlefit.fileio.FileWriteError`: a full disk, a quota, a read-only
    file system, a directory where a file should be; and once the run is accepted, a
    :class:`~paddlefit.train.checkpoint.CheckpointError` of a save) becomes an error of exit code 2 naming the file
    (``exc``'s message), the step reached and the last intact checkpoint, recorded in status.json or saying why it
    could not be (the same full disk, most often). Any other ``exc`` (and any on ranks > 0) is returned as it is,
    recorded in status.json by rank 0 once the run is accepted (as the registry row records it)."""
    from paddlefit.fileio import FileWriteError
    from paddlefit.rundir.files import write_status
    from paddlefit.train.checkpoint import CheckpointError

    accepted = trainer.record is not None  # the run's files and checkpoints are written from then on
    written = isinstance(exc, FileWriteError) or (accepted and isinstance(exc, CheckpointError))
    if not trainer.is_writer or not written:
        if accepted and trainer.is_writer:
            with contextlib.suppress(Exception):
                write_status(trainer.run_dir, exc.exit_code, str(exc), trainer.state.step)
        return exc
    run_dir, state, last = trainer.run_dir, trainer.state, trainer.store.latest_valid()
    step = state.step if state is not None else 0
    again = (
        f"The last intact checkpoint is {last}; free space (or fix the path) and run the same command again: "
        "`--resume auto` continues from it."
        if last
        else "There is no intact checkpoint: run again once there "
        "is space (or the path is fixed), and the run starts over."
    )
    msg = f"{f'at step {step}' if step else 'before the first step'}: {str(exc).rstrip('.')}. {again}"
    try:
        write_status(run_dir, 2, msg, step)
    except OSError as exc2:
        msg += f" status.json could not be written either: {getattr(exc2, 'why', None) or exc2.strerror}."
    return PaddlefitError(msg)


class Budget:
    """Wall time (and, at a price, cost) of a run directory's training, against ``budget.max_hours`` and
    ``budget.max_cost_usd``.

    Wall time = ``prior_s`` (earlier runs of the same run directory, ``totals.wall_s`` in the checkpoint) + the
    clock's seconds since this Budget was created.

    Args:
        spec: the job's budget section (``price_usd_per_hour`` in USD/hour).
        clock: seconds, monotonic.
    """

    def __init__(self, spec: BudgetSpec, clock: Clock = time.monotonic) -> None:
        self.spec = spec
        self.clock = clock
        self.start = clock()
        self.prior_s = 0.0

    def wall_s(self) -> float:
        """Wall seconds of this run directory's training so far."""
        return self.prior_s + self.clock() - self.start

    def cost_usd(self, wall_s: float | None = None) -> float | None:
        """USD at ``price_usd_per_hour`` for ``wall_s`` seconds (default: :meth:`wall_s` now), or None without a
        price."""
        price = self.spec.price_usd_per_hour
        return cost_usd(self.wall_s() if wall_s is None else wall_s, price) if price else None

    def limits(self) -> str:
        """The limits set, e.g. ``max_cost_usd 0.5`` (for a rank stopped by another rank's clock)."""
        b = self.spec
        return (
            ", ".join(
                f"{k} {v:g}" for k, v in (("max_hours", b.max_hours), ("max_cost_usd", b.max_cost_usd)) if v is not None
            )
            or "none"
        )

    def exceeded(self) -> str | None:
        """Why the budget is used up (``max_hours`` reached, or ``max_cost_usd`` at ``price_usd_per_hour``), else
        None."""
        b = self.spec
        spent_h = hours(self.wall_s())
        if b.max_hours is not None and spent_h >= b.max_hours:
            return f"budget: {spent_h:.4g} h of wall time reached max_hours {b.max_hours:g}"
        if (
            b.max_cost_usd is not None
            and b.price_usd_per_hour is not None
            and spent_h * b.price_usd_per_hour >= b.max_cost_usd
        ):
            return (
                f"budget: {spent_h:.4g} h x {b.price_usd_per_hour:g} USD/h = {spent_h * b.price_usd_per_hour:.4g} USD "
                f"reached max_cost_usd {b.max_cost_usd:g}"
            )
        return None


class CheckpointSchedule:
    """When rank 0 writes a checkpoint: every ``every_steps`` optimizer steps and/or ``every_minutes``, or, with
    ``auto_interval``, at Daly's optimum interval for the measured write time and ``interruptions_per_hour``
    (:func:`paddlefit.cost.checkpoint_interval.daly_interval_s`; the first checkpoint comes after one step and
    measures the write).

    Args:
        spec: the job's checkpoint section.
        log: receives a line when the auto interval is set or moves by more than 25%.
        clock: seconds, monotonic.
    """

    def __init__(
        self, spec: CheckpointSpec, log: Callable[[str], None] = lambda m: None, clock: Clock = time.monotonic
    ) -> None:
        self.spec = spec
        self.log = log
        self.clock = clock
        self.last_time = clock()
        self.last_step = 0
        self.interval_s: float | None = None  # auto_interval: set after the first measured write
        self.write_s: float | None = None

    def due(self, step: int) -> bool:
        """Whether a checkpoint is due after optimizer step ``step``."""
        c = self.spec
        if c.auto_interval:
            return self.interval_s is None or self.clock() - self.last_time >= self.interval_s
        by_steps = c.every_steps > 0 and step % c.every_steps == 0
        by_time = c.every_minutes > 0 and self.clock() - self.last_time >= c.every_minutes * 60
        return by_steps or by_time

    def reset(self, step: int) -> None:
        """Count the next interval from now and ``step`` (start of a run, or a resume)."""
        self.last_time = self.clock()
        self.last_step = step

    def written(self, step: int, write_s: float) -> None:
        """A checkpoint of ``step`` took ``write_s`` seconds to write; with ``auto_interval``, re-derive the
        interval from it."""
        self.write_s = write_s
        if self.spec.auto_interval:
            from paddlefit.cost.checkpoint_interval import daly_interval_s, young_interval_s

            mtbi = SECONDS_PER_HOUR / self.spec.interruptions_per_hour
            delta = max(write_s, 1e-3)
            new = daly_interval_s(delta, mtbi)
            if self.interval_s is None or abs(new - self.interval_s) > 0.25 * self.interval_s:
                self.log(
                    f"checkpoint interval (auto): writing took {write_s:.3f} s; Daly interval for one "
                    f"interruption per {hours(mtbi):,.1f} h = {new:.0f} s (Young "
                    f"{young_interval_s(delta, mtbi):.0f} s)"
                )
            self.interval_s = new
        self.reset(step)
