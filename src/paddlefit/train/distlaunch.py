"""``python -m paddlefit.train.distlaunch ARGS``: ``python -m paddle.distributed.launch ARGS`` that writes no secret.

Paddle's launcher writes its whole environment into ``--log_dir``: ``envlog.<rank>`` per worker
(``Controller.save_pod_env``, ``paddle/distributed/launch/controllers/controller.py``), ``str(os.environ)`` as the
first line of ``<job_id>.<pod>.log`` (``Controller.save_pod_log``) and ``backup_env.<rank>.json``
(``ProcessContext._start``, ``launch/utils/process_context.py``); with ``FLAGS_print_launcher_env`` set it also
prints a failed worker's environment (``job/container.py``). Seen on Paddle 3.3.1: a 2-process CPU run wrote an
``AWS_SECRET_ACCESS_KEY`` of the caller's environment into five files under RUN_DIR/launch-logs.

This entry point takes every variable outside an allow-list (:func:`paddlefit.process.secretenv.split_launcher_env`:
Paddle's, NCCL's, CUDA's, paddlefit's..., and no secret by name or value) out of its own environment before Paddle
reads it (``fetch_envs`` in ``launch/context/args_envs.py`` copies ``os.environ``), then runs
Paddle's launcher in this process with the same arguments, and adds those variables back to the environment of
each process the launcher starts (it starts them with ``subprocess.Popen``): the workers see them, no file does.

Started by ``paddlefit train --devices N`` (:func:`paddlefit.train.run.run_job`), it also inherits the run
directory's locked descriptor (``PADDLEFIT_LOCK_FD``, :mod:`paddlefit.train.lock`) and hands it to every worker
(Paddle's launcher would close it: ``close_fds``), so the directory stays locked while any process of the run
lives; and it asks the kernel for SIGTERM when that ``train`` process dies (``PR_SET_PDEATHSIG``), so a killed
``train`` does not leave the run going on without it: the workers checkpoint and stop as on any SIGTERM. Each
worker asks the same of this launcher (``PADDLEFIT_LAUNCHER_PID``, :mod:`paddlefit.train.worker`): a SIGKILLed
launcher stops its workers too, and ``train``, which sees the workers end through a pipe they all hold
(``PADDLEFIT_ALIVE_FD``), waits for them and reports the status rank 0 recorded.

Its exit code is one a scheduler reads right (:func:`scheduler_exit_code`, docs/errors.md#exit-codes): Paddle's
launcher exits with the first failed worker's code, negative for a worker killed by a signal, which the kernel
wraps to 8 bits (-9 -> 247, -15 -> 241), and with the signal's number when it is itself stopped (15, or 2, which
reads as "bad input"); Kubeflow's ``restartPolicy: ExitCode`` retries 128-255 and never 1-127.
"""

from __future__ import annotations

import contextlib
import functools
import os
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from paddlefit.process.secretenv import split_launcher_env
from paddlefit.train.lock import LOCK_FD_ENV, LOCK_PID_ENV

#: Exit codes a run's processes end with on their own (docs/errors.md): 1-127, and 130/143 for a stop by a signal.
STOP_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
#: A worker that lost a peer (:data:`paddlefit.train.peers.EXIT_PEER_LOST`; not imported: no Paddle before the launch).
PEER_LOST = 203
#: This launcher's pid, for its workers (:func:`stop_with_parent` in :mod:`paddlefit.train.worker`).
LAUNCHER_PID_ENV = "PADDLEFIT_LAUNCHER_PID"
#: The write end of a pipe from ``train`` (:func:`paddlefit.train.launcher.run_launched`) that this launcher and
#: every worker keep open: ``train`` reads end-of-file once the last of them has exited.
ALIVE_FD_ENV = "PADDLEFIT_ALIVE_FD"
#: :data:`paddlefit.train.peers.MARK_ENV` (not imported here: the module is light, but keep the launcher's
#: imports to what it needs before Paddle's).
MARK_ENV = "PADDLEFIT_PEER_MARK_DIR"
#: Paddle's launcher unsets these for its workers, keeping each as ``NAME_original`` (``fetch_envs``).
PROXY_VARIABLES = ("http_proxy", "https_proxy")


#: Seconds between the launcher's checks of its workers (``Pod.watch(interval=1)`` in Paddle 3.3.1's
#: ``paddle/distributed/launch/job/pod.py``, called by ``Controller.watch``): each check is a ``poll()`` of a few
#: processes, so 0.1 s costs nothing and a run ends (or a failed worker is seen) up to 0.9 s sooner.
POD_POLL_S = 0.1


def worker_secrets(hidden: dict[str, str]) -> dict[str, str]:
    """What the workers get of the secrets taken out of the launcher's environment: each as it was, except a
    proxy variable with a password, which goes in as ``NAME_original`` as Paddle's launcher would hand it on
    (``paddle/distributed/launch/context/args_envs.py``: proxies are unset "to ensure stable NCCL communication")."""
    return {f"{k}_original" if k in PROXY_VARIABLES else k: v for k, v in hidden.items()}


def secret_env_popen(hidden: dict[str, str], keep_fds: tuple[int, ...] = ()) -> type[subprocess.Popen]:
    """A ``subprocess.Popen`` subclass that starts every process with ``hidden`` added to its environment (the
    given ``env``, or this process's when none is given) and the descriptors ``keep_fds`` open in it."""

    class SecretEnvPopen(subprocess.Popen):
        """``subprocess.Popen`` with the launcher's secret variables added back to the child's environment."""

        def __init__(self, *args: Any, env: Any = None, **kwargs: Any) -> None:
            merged = dict(os.environ if env is None else env)
            merged.update(hidden)
            if keep_fds:
                kwargs["pass_fds"] = tuple(kwargs.get("pass_fds", ())) + keep_fds
            super().__init__(*args, env=merged, **kwargs)

    return SecretEnvPopen


def inherited_lock_fd(name: str = LOCK_FD_ENV) -> int | None:
    """The descriptor named by the environment variable ``name`` this process inherited from ``paddlefit train``
    (the run directory lock's, or with :data:`ALIVE_FD_ENV` the pipe's), None without one."""
    try:
        fd = int(os.environ.get(name, ""))
        os.fstat(fd)
    except (ValueError, OSError):
        return None
    return fd


def stop_with_parent(parent_env: str = LOCK_PID_ENV) -> None:
    """Ask Linux for SIGTERM when the process that started this one dies (``prctl(PR_SET_PDEATHSIG)``,
    :func:`paddlefit.process.isolation.signal_when_parent_dies`); if it has already died (the parent is no longer the
    pid in the environment variable ``parent_env``: ``PADDLEFIT_LOCK_PID`` for this launcher, ``PADDLEFIT_LAUNCHER_PID``
    for a worker), stop now. Elsewhere (or without ``prctl``) nothing. The signal comes when the parent *thread*
    exits: Paddle's launcher starts the workers from its main thread (``Controller.run`` -> ``Pod.deploy``)."""
    from paddlefit.process.isolation import signal_when_parent_dies

    signal_when_parent_dies(signal.SIGTERM, os.environ.get(parent_env))


def scheduler_exit_code(code: object, stopped_by: int | None = None) -> int:
    """The exit code paddlefit reports for Paddle's launcher's ``sys.exit(code)`` (docs/errors.md#exit-codes).

    ``stopped_by``: the stop signal the launcher itself received (SIGTERM -> 143, SIGINT -> 130, anything else
    -> 1), whatever its code says (it exits with the signal's number). Otherwise a worker's own code 0-127, 130,
    143 or 203 (a peer lost, :mod:`paddlefit.train.peers`) stays; a negative code (a worker killed by a signal:
    the OOM killer, a SIGKILL) or any other becomes 1, the job failed, which a scheduler's ExitCode policy does not
    retry (rerun by hand: ``--resume auto`` continues from the last checkpoint). Sources: ``Controller.finalize``
    / ``signal_handler`` in ``paddle/distributed/launch/controllers/controller.py``; Kubeflow training-operator's
    ExitCode restart policy.
    """
    if stopped_by is not None:
        return STOP_CODES.get(stopped_by, 1)
    if code is None:
        return 0
    if not isinstance(code, int) or isinstance(code, bool):
        return 1
    return code if 0 <= code <= 127 or code in (*STOP_CODES.values(), PEER_LOST) else 1


def describe_exit(code: object) -> str:
    """A process exit code in words: ``signal SIGKILL`` for -9, else ``code N``."""
    if isinstance(code, int) and code < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-code).name}"
    return f"code {code}"


class LaunchWatch:
    """What Paddle's launcher went through, for :func:`scheduler_exit_code`: the stop signals it received (its
    handlers, set with ``signal.signal`` in ``Controller.__init__``, are wrapped to note them) and the workers it
    found failed (``Pod.failed_container``, ``launch/job/pod.py``: rank and exit code)."""

    def __init__(self) -> None:
        self.signals: list[int] = []
        self.failed: dict[int, object] = {}
        self.pod: Any = None
        self.deployed = threading.Event()
        self.started = time.monotonic()  # the rendezvous deadline counts from here (before Paddle's import)
        self.mark_dir: str | None = None

    def install(self) -> None:
        """Wrap ``signal.signal`` (for SIGTERM, SIGINT, SIGABRT handlers), ``Pod.failed_container``, ``Pod.deploy`` and
        ``Pod.watch`` (polled every :data:`POD_POLL_S` instead of Paddle's 1 s)."""
        from paddle.distributed.launch.job.pod import Pod

        real_signal, real_failed = signal.signal, Pod.failed_container

        def noting_signal(signum: int, handler: Any) -> Any:
            if callable(handler) and signum in (signal.SIGTERM, signal.SIGINT, signal.SIGABRT):
                inner = handler

                @functools.wraps(inner)
                def handler(sig: int, frame: Any) -> Any:
                    self.signals.append(sig)
                    return inner(sig, frame)

            return real_signal(signum, handler)

        def noting_failed(pod: Any) -> list:
            self.pod = pod
            found = real_failed(pod)
            for c in found:
                self.failed.setdefault(int(c.rank), c.exit_code)
            return found

        real_deploy = Pod.deploy

        def noting_deploy(pod: Any) -> Any:
            self.deployed.set()
            return real_deploy(pod)

        real_watch = Pod.watch

        def prompt_watch(pod: Any, *args: Any, **kwargs: Any) -> Any:
            if len(args) < 3:  # (all_list, any_list, interval, timeout): the interval not given positionally
                kwargs["interval"] = POD_POLL_S
            return real_watch(pod, *args, **kwargs)

        signal.signal = noting_signal  # type: ignore[assignment]
        Pod.failed_container = noting_failed  # type: ignore[method-assign]
        Pod.deploy = noting_deploy  # type: ignore[method-assign]
        Pod.watch = prompt_watch  # type: ignore[method-assign]

    def stuck_at_start_up(self) -> str:
        """The first line a worker's start-up deadline wrote (:mod:`paddlefit.train.peers`: faulthandler's stack
        follows a ``Timeout (`` line) in :attr:`mark_dir`, or ''."""
        for mark in sorted(Path(self.mark_dir).glob("rank*")) if self.mark_dir else []:
            with contextlib.suppress(OSError):
                text = mark.read_text(errors="replace")
                if "Timeout (" in text:
                    return text.splitlines()[0]
        return ""

    def rendezvous_deadline(self, args: list[str], exit: Callable[[int], Any] = os._exit) -> threading.Thread | None:
        """With several nodes (``--nnodes N``, or ``PADDLE_NNODES``, not 1), a thread that ends this launcher with
        exit 203 (a peer lost) when its workers are not started within the start-up allowance
        (:func:`paddlefit.train.peers.peer_settings`): Paddle's HTTP master waits for ever for a node that never
        comes or died before the rendezvous (``HTTPMaster.sync_peers`` loops while the job is not done,
        ``launch/controllers/master.py``), and a dead node 0 takes the master's store with it."""
        from paddlefit.train.peers import peer_settings

        nnodes = next(
            (args[i + 1] for i, a in enumerate(args[:-1]) if a == "--nnodes"), os.environ.get("PADDLE_NNODES", "1")
        )
        if nnodes.strip() in ("", "1"):
            return None
        allowance = peer_settings()[1]

        def watch() -> None:
            if not self.deployed.wait(max(0.0, self.started + allowance - time.monotonic())):
                print(
                    f"paddlefit: the other nodes did not meet at the rendezvous within {allowance:g} s (a node "
                    f"lost or never started; PADDLEFIT_PEER_STARTUP_S): exit {PEER_LOST}",
                    file=sys.stderr,
                    flush=True,
                )
                exit(PEER_LOST)

        thread = threading.Thread(target=watch, name="paddlefit-rendezvous-deadline", daemon=True)
        thread.start()
        return thread

    def exit_code(self, code: object) -> int:
        """:func:`scheduler_exit_code` of the launcher's ``code``; says on stderr what it mapped and why. A peer lost
        (203) because a worker of this node was killed by a signal (the OOM killer) is this node's failure: 1. So is
        a stop code (130, 143) when the launcher received no stop signal but a worker was killed by one: Paddle's
        launcher then stops the surviving workers itself (``Pod.stop``, SIGTERM), and a survivor stopped before its
        next collective failed exits as if the user had stopped it."""
        stop = self.signals[0] if self.signals else None
        out = scheduler_exit_code(code, stop)
        codes = [*self.failed.values(), *(c.exit_code for c in getattr(self.pod, "containers", None) or [])]
        if out == 1 and (said := self.stuck_at_start_up()):
            print(
                f"paddlefit: a worker of this node had no word from the other ranks at start-up ({said}): a peer "
                f"lost, exit {PEER_LOST}",
                file=sys.stderr,
                flush=True,
            )
            out = PEER_LOST
        killed = any(isinstance(c, int) and c < 0 for c in codes)
        if killed and (out == PEER_LOST or (stop is None and out in STOP_CODES.values())):
            out = 1
        if out != code or self.failed:
            why = (
                f"stopped by {signal.Signals(stop).name}"
                if stop is not None
                else ", ".join(f"rank {r} ended by {describe_exit(c)}" for r, c in sorted(self.failed.items()))
                or "no rank named"
            )
            print(
                f"paddlefit: {why} (Paddle's launcher exit {code}): exit {out}, see docs/errors.md#exit-codes",
                file=sys.stderr,
                flush=True,
            )
        return out


def private_log_dir(args: list[str]) -> None:
    """Make ``--log_dir`` (from the launcher's ``args``) readable by its owner only (mode 0700) before Paddle writes
    the workers' logs into it: a worker's traceback or a user's print can still carry a value."""
    for i, a in enumerate(args[:-1]):
        if a == "--log_dir":
            with contextlib.suppress(OSError):
                os.makedirs(args[i + 1], mode=0o700, exist_ok=True)
                os.chmod(args[i + 1], 0o700)


def main(argv: list[str] | None = None) -> None:
    """Run ``paddle.distributed.launch`` with ``argv`` (default ``sys.argv[1:]``), secrets kept out of its own
    environment and handed only to the processes it starts. Exits with :meth:`LaunchWatch.exit_code` of
    Paddle's launcher's code."""
    args = sys.argv[1:] if argv is None else argv
    lock_fd, alive_fd = inherited_lock_fd(), inherited_lock_fd(ALIVE_FD_ENV)
    if lock_fd is not None:
        stop_with_parent()
    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())  # the workers stop when this process dies (worker.py)
    _, hidden = split_launcher_env(os.environ)
    for name in hidden:
        del os.environ[name]
    keep = tuple(fd for fd in (lock_fd, alive_fd) if fd is not None)
    private_log_dir(args)
    if hidden or keep:
        subprocess.Popen = secret_env_popen(worker_secrets(hidden), keep)  # type: ignore[misc]
    sys.argv = ["paddle.distributed.launch", *args]
    watch = LaunchWatch()
    with contextlib.suppress(OSError):  # where a worker stopped at start-up leaves its stack (paddlefit.train.peers)
        watch.mark_dir = os.environ[MARK_ENV] = tempfile.mkdtemp(prefix="paddlefit-peers-")
    watch.install()
    watch.rendezvous_deadline(args)
    try:
        runpy.run_module("paddle.distributed.launch", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        raise SystemExit(watch.exit_code(exc.code)) from None
    finally:
        if watch.mark_dir:
            shutil.rmtree(watch.mark_dir, ignore_errors=True)
    raise SystemExit(watch.exit_code(0))


if __name__ == "__main__":
    main()
