"""A lost peer: how a rank of a multi-rank run notices that another rank (its node killed, powered off or cut off)
is gone, within a bound paddlefit sets, and how it ends: the last complete checkpoint kept, the reason recorded by
rank 0 only, exit :data:`EXIT_PEER_LOST`, which schedulers retry (docs/errors.md).

What Paddle does on its own (paddlepaddle 3.3.1, CPU build, read in its installed source and measured here on a
2-node gloo job, two launchers on one machine):

- Paddle's launcher watches only its own node's workers (``Controller.watch`` in
  ``paddle/distributed/launch/controllers/controller.py``); with the default HTTP master (``--master host:port``)
  ``set_status``/``get_status``/``restart_peer`` do nothing (``HTTPMaster`` in ``launch/controllers/master.py``),
  so a dead peer node is never noticed by the launcher, and ``--max_restart``/``--elastic_level`` act only with an
  etcd master (``CollectiveElasticController``, ``--master etcd://``). A launcher still waiting for its peers at
  the rendezvous (``HTTPMaster.sync_peers``) waits for ever.
- A collective whose peer process died on a host that is up (the kernel closes its sockets) raises in the surviving
  worker: ``RuntimeError: [.../gloo/transport/tcp/pair.cc:584] TIMEOUT ...``, 1.5-3 s after the SIGKILL here.
- A collective whose peer is silent (a host powered off or cut off, a stopped process: no FIN, no RST) blocks
  until gloo's timeout: 30 s (``kTimeoutDefault`` in gloo's ``gloo/context.cc``; Paddle never calls
  ``setTimeout`` on its gloo contexts, ``paddle/phi/core/distributed/gloo_comm_context.cc``, so no FLAGS or
  variable changes it); measured 32.7 s here. NCCL's is ``PADDLE_PG_TIMEOUT``, default 1,800,000 ms
  (``python/paddle/distributed/parallel.py``).

paddlefit's bound (:class:`PeerWatch`, a thread in each worker): while a rank waits on its peers (a step, whose
gradient all-reduce and agreement are collectives; the start-up collectives), the wait may last at most
``floor_s + factor x`` (the longest measured step, plus the longest solo work of rank 0 that the step follows: a
checkpoint write, an evaluation); before those are measured (the start-up, the first two steps, the first step
after rank 0's first checkpoint or evaluation), ``startup_s``. Past it, the watch records the reason (rank 0) and
ends the process with :data:`EXIT_PEER_LOST`. The collective's own error (the first case) ends the run the same
way (:func:`paddlefit.train.guards.as_lost_rank`). Gloo's collectives release the GIL while they wait (measured:
a thread ticked every 0.2 s through a 4 s ``all_reduce`` and a 3 s ``barrier``), so the thread runs.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from paddlefit.errors import JobFailedError
from paddlefit.textsafe import log_stderr

__all__ = ["EXIT_PEER_LOST", "PeerLostError", "PeerWatch", "lost_code", "peer_settings", "record_peer_lost"]

#: Exit code of a rank that lost a peer: 128 + 75 (``EX_TEMPFAIL``, "temporary failure, retry", BSD
#: ``sysexits.h``), in the range Kubeflow's ``restartPolicy: ExitCode`` retries (128-255) and above the codes of a
#: process killed by a signal (128 + 1..64, Linux's ``SIGRTMAX`` is 64), so it is never read as one.
EXIT_PEER_LOST = 203
#: Environment: seconds every wait on peers is allowed at least (the floor of the bound).
FLOOR_ENV = "PADDLEFIT_PEER_TIMEOUT_S"
#: Environment: seconds a wait on peers is allowed before anything is measured (start-up, first steps).
STARTUP_ENV = "PADDLEFIT_PEER_STARTUP_S"
#: Default floor, seconds: under gloo's 30 s default timeout (so the watch, not gloo, bounds a silent peer), and
#: 10x the longest digits step measured on this 2-core machine under the full test suite's load (about 1 s).
FLOOR_S = 10.0
#: Default start-up allowance, seconds: PyTorch's rendezvous ``join_timeout`` default (600 s,
#: ``torch.distributed.elastic.rendezvous``), the time nodes of one job are given to meet.
STARTUP_S = 600.0
#: The longest measured step (and solo work) is multiplied by this in the bound: a step 10 times slower than any so
#: far is taken as a lost peer (a policy: a factor, not a figure measured; see :data:`FLOOR_S` for the floor).
FACTOR = 10.0
#: Environment (set by :mod:`paddlefit.train.distlaunch` for its workers): a directory where a worker stopped by
#: :func:`faulthandler.dump_traceback_later` leaves its stack (``rank<N>``), so the launcher tells that exit 1 apart.
MARK_ENV = "PADDLEFIT_PEER_MARK_DIR"
#: How often the watch thread looks at the clock, seconds.
POLL_S = 0.1
#: Seconds the watch keeps for ending the process: rank 0 records the ending (status.json, the registry row) and
#: exits; measured here 0.1-0.2 s (bench/node_loss.py, `silent` rows). It fires this much (plus one poll) before
#: the bound, so the process is gone by it.
RECORD_S = 0.5
#: When this process (a worker) started, monotonic seconds: the start-up deadline counts from here.
STARTED = time.monotonic()
#: Kinds of rank 0's solo work the other ranks wait through (it announces them, :meth:`PeerWatch.agree`).
SOLO_KINDS = ("save", "eval")


def lost_code(world: int, env: dict[str, str] | None = None) -> int:
    """The exit code of a rank that lost a peer: :data:`EXIT_PEER_LOST` when the run spans several nodes
    (``PADDLE_LOCAL_SIZE``, set by Paddle's launcher, below ``world``), else 1: every rank is on this node, so the
    lost one was killed here (the OOM killer most often), which a restart would most likely meet again."""
    env = os.environ if env is None else env
    try:
        local = int(env.get("PADDLE_LOCAL_SIZE", str(world)))
    except ValueError:
        local = world
    return EXIT_PEER_LOST if local < world else 1


class PeerLostError(JobFailedError):
    """Another rank of the run was lost: exit :data:`EXIT_PEER_LOST` (retried by schedulers; ``--resume auto``
    continues from the last complete checkpoint)."""

    exit_code = EXIT_PEER_LOST


def peer_settings(env: dict[str, str] | None = None) -> tuple[float, float]:
    """(floor, start-up allowance) in seconds from :data:`FLOOR_ENV` / :data:`STARTUP_ENV` (a positive number of
    seconds each), else the defaults :data:`FLOOR_S` / :data:`STARTUP_S`; a value that is not one is ignored."""
    env = os.environ if env is None else env
    out = []
    for name, default in ((FLOOR_ENV, FLOOR_S), (STARTUP_ENV, STARTUP_S)):
        try:
            value = float(env.get(name, ""))
        except ValueError:
            value = default
        out.append(value if 0 < value < 1e7 else default)
    return out[0], out[1]


class PeerWatch:
    """The bound on a rank's waits on its peers, and the thread that ends the process past it (see the module).

    Args:
        world: ranks in the run (no thread and no bound for 1).
        rank: this rank (0 writes; the others print).
        on_lost: called with the reason, in the watch thread, before the process ends (rank 0 records it).
        floor_s / startup_s: seconds (default :func:`peer_settings`); factor: see :data:`FACTOR`.
        clock: seconds, monotonic; ``exit``: ends the process (``os._exit``: the main thread is blocked in C++).
    """

    def __init__(
        self,
        world: int,
        rank: int,
        on_lost: Callable[[str], None] = lambda _r: None,
        floor_s: float | None = None,
        startup_s: float | None = None,
        factor: float = FACTOR,
        clock: Callable[[], float] = time.monotonic,
        exit: Callable[[int], Any] = os._exit,
    ) -> None:
        floor, startup = peer_settings()
        self.world, self.rank, self.on_lost = world, rank, on_lost
        self.floor_s = floor if floor_s is None else floor_s
        self.startup_s = startup if startup_s is None else startup_s
        self.factor, self.clock, self._exit = factor, clock, exit
        self.plain_s = 0.0  # the longest step that followed no solo work (the first step excluded), seconds
        self.solo_s: dict[str, float | None] = dict.fromkeys(SOLO_KINDS)  # rank 0's longest solo work, by kind
        self.steps = 0
        self._after: str | None = None  # the solo work the next step follows ("save", "eval"), if any
        self._since: float | None = None  # when the last step's agreement returned (a solo work's start)
        self._gap: dict[str, float] = {}  # this rank's solo work before the current step, to share in its agreement
        self._armed: tuple[float, float, str] | None = None  # (since, allowance, what) while waiting on peers
        self._lock = threading.Lock()
        self._ended = False
        self._thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        """Whether this run has peers to watch."""
        return self.world > 1

    def bound(self, after: str | None = None) -> float:
        """Seconds a wait on peers may last: ``floor + factor x (longest plain step + longest solo work of the kind
        ``after``)``, or the start-up allowance while the step (or that solo work) is not measured yet."""
        solo = self.solo_s.get(after) if after else 0.0
        if not self.plain_s or solo is None:
            return self.startup_s
        return self.floor_s + self.factor * (self.plain_s + solo)

    def start(self) -> None:
        """Start the watch thread (a daemon; nothing for one rank)."""
        if self.active and self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="paddlefit-peer-watch", daemon=True)
            self._thread.start()

    @contextlib.contextmanager
    def waiting(self, what: str, allowance: float | None = None, holds_gil: bool = False) -> Iterator[None]:
        """Armed while the block runs: it waits on the peers (``what`` names it in the reason) for at most
        ``allowance`` seconds (default the start-up allowance). ``holds_gil``: the block is a call that keeps the GIL
        while it waits, so the watch thread cannot run (Paddle's ``init_parallel_env``: its TCP store,
        ``core.create_or_get_global_tcp_store``, waits up to 900 s for every rank; a stack dump of a stuck survivor
        showed it there): :func:`faulthandler.dump_traceback_later` bounds it instead (its watchdog thread needs no
        GIL), writing the stack to :data:`MARK_ENV`'s directory and exiting 1, which the launcher reports as 203
        (``LaunchWatch.exit_code``)."""
        allowance = self.startup_s if allowance is None else allowance
        self._arm(what, allowance)
        gil_free = holds_gil and self.active  # counts from the worker's start (the first wait: the process group)
        left = max(POLL_S, allowance - (time.monotonic() - STARTED) - RECORD_S)
        mark = _gil_free_deadline(self.rank, left, allowance) if gil_free else None
        try:
            yield
        finally:
            self._armed = None
            if gil_free:
                faulthandler.cancel_dump_traceback_later()
            if mark is not None:
                mark.close()

    def solo_next(self, kind: str) -> None:
        """The next step follows rank 0's solo work ``kind`` (every rank knows an evaluation is due: epoch end)."""
        self._after = kind

    def step_begins(self, step: int) -> None:
        """Arm for optimizer step ``step`` (its collectives); on rank 0, the solo work just done is measured."""
        now = self.clock()
        if self._after and self._since is not None:
            self._gap[self._after] = now - self._since
        self._arm(f"step {step}", self.bound(self._after))

    def agree(self, flags: list[float], save_next: bool) -> tuple[list[bool], bool]:
        """One all-reduce (MAX) of ``flags`` (1.0/0.0 each), rank 0's ``save_next`` (it writes a checkpoint after this
        step) and the solo work measured before this step; disarms. Returns the flags agreed and ``save_next``."""
        import paddle

        gaps = [self._gap.get(k, -1.0) for k in SOLO_KINDS]
        t = paddle.to_tensor([*flags, float(save_next), *gaps], dtype="float32")
        paddle.distributed.all_reduce(t, op=paddle.distributed.ReduceOp.MAX)
        got = t.numpy().tolist()
        self._step_done(got[len(flags) + 1 :])
        save = got[len(flags)] > 0
        if save:
            self._after = "save"
        return [x > 0 for x in got[: len(flags)]], save

    def _step_done(self, gaps: list[float]) -> None:
        now = self.clock()
        armed, self._armed = self._armed, None
        for kind, gap in zip(SOLO_KINDS, gaps, strict=True):
            if gap >= 0:
                self.solo_s[kind] = max(self.solo_s[kind] or 0.0, gap)
        self.steps += 1
        if armed is not None and self.steps > 1 and self._after is None:
            self.plain_s = max(self.plain_s, now - armed[0])
        self._after, self._gap, self._since = None, {}, now

    def barrier(self, what: str, allowance: float | None = None) -> None:
        """``paddle.distributed.barrier()``, armed (:meth:`waiting`); nothing for one rank."""
        if self.active:
            import paddle

            with self.waiting(what, allowance):
                paddle.distributed.barrier()

    def waited(self) -> str:
        """How long the current wait on peers has lasted and its bound (``1.6 s of a bound 600.0 s``), or the
        bound of the next step when none is armed."""
        armed = self._armed
        if armed is None:
            return f"bound {self.bound(self._after):.1f} s"
        return f"{self.clock() - armed[0]:.1f} s of a bound {armed[1]:.1f} s"

    def stand_down(self) -> bool:
        """The main thread ends the run (a collective raised, or the run is over): the watch fires no more. False
        when it has fired already (the process is ending: write nothing)."""
        with self._lock:
            if self._ended:
                return False
            self._ended = True
            return True

    def _arm(self, what: str, allowance: float) -> None:
        self._armed = (self.clock(), allowance, what)

    def _watch(self) -> None:
        while True:
            time.sleep(POLL_S)
            armed = self._armed  # fire early enough that the process is gone by the bound
            if armed is None or self.clock() - armed[0] + POLL_S + RECORD_S <= armed[1]:
                continue
            with self._lock:
                if self._ended or self._armed is not armed:
                    if self._ended:
                        return
                    continue
                self._ended = True
            waited = self.clock() - armed[0]
            reason = (
                f"{armed[2]}: no word from another rank for {waited:.1f} s (bound {armed[1]:.1f} s): a peer was "
                f"lost (its node killed, powered off or cut off). Exit {EXIT_PEER_LOST}: a scheduler restarts "
                "the job; `--resume auto` continues from the last complete checkpoint."
            )
            code = lost_code(self.world)
            reason = (
                reason
                if code == EXIT_PEER_LOST
                else reason.replace(f"Exit {EXIT_PEER_LOST}: a scheduler restarts the job; ", "Exit 1: ")
            )
            log_stderr(f"peer lost (rank {self.rank}): {reason}")
            with contextlib.suppress(Exception):
                self.on_lost(reason)
            self._exit(code)
            return


def last_checkpoint(trainer: Any) -> str:
    """The newest complete checkpoint of ``trainer``'s run (any rank may read the shared run directory), or what
    ``--resume auto`` starts from without one."""
    with contextlib.suppress(OSError):
        if (last := trainer.store.latest_valid()) is not None:
            return str(last)
    return "the start (no checkpoint yet)"


def record_peer_lost(trainer: Any, reason: str, compare: Callable[..., Any]) -> None:
    """Rank 0 of ``trainer`` (a :class:`~paddlefit.train.loop.Trainer`), from the watch thread while its main thread
    waits in a collective (it writes nothing then): the ending in status.json and the registry, as the main thread
    records a failure (:meth:`paddlefit.train.loop.Trainer.run`; ``compare``: its ``_compare``, the registry row);
    before the job was accepted, as a failed start. Other ranks: nothing."""
    if not trainer.is_writer:
        return
    from paddlefit.rundir.files import record_failed_start, write_status

    state = getattr(trainer, "state", None)
    step = state.step if state is not None else 0
    reason = f"at step {step}: {reason.removesuffix('.')} ({last_checkpoint(trainer)})."
    code = lost_code(trainer.world)
    if trainer.record is None:
        record_failed_start(trainer.run_dir, code, reason)
        return
    write_status(trainer.run_dir, code, reason, step)
    compare(ended=(code, reason))


def _gil_free_deadline(rank: int, left: float, bound: float) -> Any:
    """Arm :func:`faulthandler.dump_traceback_later` (exit 1 in ``left`` seconds, the stack written to
    :data:`MARK_ENV`'s ``rank<N>`` after a line naming the ``bound``, else to stderr); returns the file it writes
    to (to close once cancelled), or None for stderr."""
    where = os.environ.get(MARK_ENV)
    try:
        f: Any = open(os.path.join(where, f"rank{rank}"), "w") if where else None  # noqa: SIM115 (closed by caller)
        if f is not None:
            f.write(f"bound {bound:.1f} s from the worker's start ({STARTUP_ENV})\n")
            f.flush()
    except OSError:
        f = None
    import sys

    faulthandler.dump_traceback_later(left, exit=True, file=f or sys.stderr)
    return f
