"""Start a multi-device run through ``python -m paddle.distributed.launch`` and wait for it.

The launcher runs through :mod:`paddlefit.train.distlaunch`, which keeps the environment's secrets out of the
files Paddle's launcher writes into RUN_DIR/launch-logs (``envlog.*``, ``backup_env.*.json``, the pod log).

paddlefit never starts processes or process groups itself for data parallel: the launcher starts one worker per
device (``--nproc_per_node N`` on CPU with gloo, ``--devices 0,1,...`` on GPU with NCCL), sets the rank
environment, and on SIGTERM/SIGINT sends SIGTERM to every worker and waits up to 30 s before killing them
(``paddle/distributed/launch/controllers/controller.py``, ``Pod.stop(timeout=30)``). The workers agree to stop,
rank 0 saves and every worker exits; this wrapper forwards its own SIGTERM/SIGINT to the launcher, relays rank 0's
log lines, and returns the exit code rank 0 recorded in ``status.json``.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from paddlefit.errors import PaddlefitError
from paddlefit.process.safepath import python_command, safe_env
from paddlefit.rundir.files import launch_log_dir, launcher_log, rank0_log, rewrite_status, run_status
from paddlefit.train import worker
from paddlefit.train.distlaunch import ALIVE_FD_ENV, PEER_LOST, STOP_CODES, describe_exit, scheduler_exit_code
from paddlefit.train.guards import STOP_SIGNALS, heeded

#: Seconds ``train`` waits for the workers of a killed launcher to checkpoint and stop (Paddle's own launcher, when
#: stopped, gives them 30 s before SIGKILL: ``Pod.stop(timeout=30)``; a large model's checkpoint can take longer).
WORKERS_STOP_S = 300.0
_NOISE = ("LAUNCH INFO", "=====", "FLAGS(name=")


def launch_command(
    spec_file: Path,
    run_dir: Path,
    nprocs: int,
    gpu_ids: list[int] | None,
    resume: str,
    job_id: str,
    trust: bool = False,
) -> list[str]:
    """The ``paddle.distributed.launch`` command line for this run, through :mod:`paddlefit.train.distlaunch`
    (arguments from Paddle's launch docs: ``--nproc_per_node``, ``--devices``, ``--log_dir``, ``--job_id``);
    ``trust``: the workers get ``--trust-checkpoint``."""
    cmd = [
        *python_command(module="paddlefit.train.distlaunch"),
        "--log_dir",
        str(launch_log_dir(run_dir)),
        "--job_id",
        job_id,
    ]
    if gpu_ids:
        cmd += ["--devices", ",".join(str(i) for i in gpu_ids)]
    else:
        cmd += ["--nproc_per_node", str(nprocs)]
    cmd += [worker.__file__, "--spec", str(spec_file), "--run-dir", str(run_dir), "--resume", resume]
    return cmd + (["--trust-checkpoint"] if trust else [])


def run_launched(
    cmd: list[str],
    run_dir: Path,
    relay: Callable[[str], None],
    on_start: Callable[[subprocess.Popen], None] | None = None,
    env: dict[str, str] | None = None,
    pass_fds: tuple[int, ...] = (),
) -> tuple[int, str]:
    """Run the launcher, relay rank 0's log, forward SIGTERM/SIGINT; return (exit code, reason).

    The exit code and reason come from ``status.json`` written by rank 0 for this run (matched by a token);
    without one: 128 + the signal when this process was stopped by one (SIGTERM during the workers' start-up:
    143, retried like any stop), else (a worker crashed before writing it) the launcher's exit code as
    :func:`~paddlefit.train.distlaunch.scheduler_exit_code` maps it (a killed worker: 1, never a wrapped
    negative), and the tail of rank 0's log with the launcher's ``paddlefit:`` line naming the failed rank.
    When the launcher itself is killed (SIGKILL), its workers get SIGTERM (:mod:`paddlefit.train.worker`): this
    waits for them all to exit (up to :data:`WORKERS_STOP_S`; a pipe they all hold reads end-of-file) and returns
    their status, the launcher's end named in the reason.
    ``env`` is added to the launcher's (and so the workers') environment; ``pass_fds`` are descriptors it inherits
    (the run directory's lock, :meth:`~paddlefit.train.lock.RunDirLock.share`).
    """
    token = uuid.uuid4().hex
    log_dir = launch_log_dir(run_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    rank0 = rank0_log(run_dir)
    if rank0.exists():
        rank0.unlink()  # the launcher appends: start this run's log empty
    alive_r, alive_w = os.pipe()  # the launcher and every worker hold alive_w: end-of-file when all have exited
    try:
        env = safe_env(
            dict(
                os.environ,
                **(env or {}),
                PADDLEFIT_RUN_TOKEN=token,
                PYTHONUNBUFFERED="1",
                **{ALIVE_FD_ENV: str(alive_w)},
            )
        )
        with open(launcher_log(run_dir), "ab") as launcher_out:
            proc = subprocess.Popen(
                cmd, env=env, stdout=launcher_out, stderr=subprocess.STDOUT, pass_fds=(*pass_fds, alive_w)
            )
    except BaseException:
        os.close(alive_r)
        raise
    finally:
        os.close(alive_w)
    try:
        return _wait(proc, token, run_dir, relay, on_start, alive_r)
    finally:
        os.close(alive_r)


def _wait(
    proc: subprocess.Popen,
    token: str,
    run_dir: Path,
    relay: Callable[[str], None],
    on_start: Callable[[subprocess.Popen], None] | None,
    alive_r: int,
) -> tuple[int, str]:
    """:func:`run_launched` once the launcher is started: relay, forward signals, wait, read the outcome."""
    rank0 = rank0_log(run_dir)
    if on_start:
        on_start(proc)

    forwarded: list[int] = []

    def forward(signum: int, _frame: Any) -> None:
        forwarded.append(signum)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)

    # signal handlers can be set in the main thread only (run_job called from another thread forwards nothing)
    main = threading.current_thread() is threading.main_thread()
    old = {s: signal.signal(s, forward) for s in heeded(STOP_SIGNALS)} if main else {}
    offset = 0
    try:
        while True:
            done = proc.poll() is not None
            offset = _relay(rank0, offset, relay)
            if done:
                break
            time.sleep(0.3)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if proc.returncode < 0:  # the launcher killed: its workers got SIGTERM (worker.py); wait for them to stop
        _await_workers(alive_r, rank0, offset, relay)
    return _outcome(proc.returncode, token, run_dir, forwarded)


def _outcome(rc: int, token: str, run_dir: Path, forwarded: list[int]) -> tuple[int, str]:
    """(exit code, reason) of a launched run whose launcher exited with ``rc`` (see :func:`run_launched`)."""
    log_dir, rank0 = launch_log_dir(run_dir), rank0_log(run_dir)
    try:
        status: Any = run_status(run_dir, token)
        if status is not None:
            if rc < 0:
                return int(status["exit_code"]), (
                    f"Paddle's launcher ended by {describe_exit(rc)}; its workers stopped ({status['reason']})."
                )
            said = [x for x in _read_lines(launcher_log(run_dir)) if x.startswith("paddlefit: ")][-1:]
            code = int(status["exit_code"])
            lost = code == PEER_LOST and rc == 1  # the lost rank was killed here: exit 1
            # rank 0 stopped by Paddle's launcher (not by the user: nothing forwarded) after another rank was killed
            halted = code in STOP_CODES.values() and rc == 1 and not forwarded
            if halted and said:
                status["reason"] = (
                    f"another rank was killed or lost; Paddle's launcher then stopped rank 0 ({status['reason']})"
                )
            if (code == 1 or lost or halted) and said:  # the launcher's line names the rank and how,
                status["exit_code"], status["reason"] = 1, f"{status['reason']}\n{said[0]}"  # in status.json too
                with contextlib.suppress(OSError, PaddlefitError):
                    rewrite_status(run_dir, status)
                return 1, status["reason"]
            return int(status["exit_code"]), str(status["reason"])
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    if forwarded:  # stopped before any rank could record a status: during start-up, nothing to save yet
        name = signal.Signals(forwarded[0]).name
        return 128 + forwarded[0], (
            f"stopped by {name} during start-up, before the first step (nothing to save); run the same command again."
        )
    errors = [
        f"{log.name}: {line}"
        for log in sorted(log_dir.glob("workerlog.*"))
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines()
        if line.startswith("error:")
    ]
    if errors:  # a rank other than 0 stopped on bad input (only rank 0 writes status.json)
        return 2, "\n".join(errors[:4])
    tail = rank0.read_text(encoding="utf-8", errors="replace").splitlines()[-15:] if rank0.exists() else []
    said = [line for line in _read_lines(launcher_log(run_dir)) if line.startswith("paddlefit: ")][-1:]
    if rc < 0:  # the launcher itself killed (SIGKILL, the OOM killer): no code of its own
        said.append(f"paddlefit: Paddle's launcher ended by {describe_exit(rc)}")
    return scheduler_exit_code(rc) or 1, (
        "workers exited without a status (see " + str(log_dir) + "):\n" + "\n".join([*tail, *said])
    )


def _await_workers(
    alive_r: int, rank0_log: Path, offset: int, relay: Callable[[str], None], timeout_s: float = WORKERS_STOP_S
) -> None:
    """Relay rank 0's log until every process holding the pipe's write end has exited (end-of-file on
    ``alive_r``: nothing is ever written to it) or ``timeout_s`` seconds have passed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([alive_r], [], [], 0.3)
        offset = _relay(rank0_log, offset, relay)
        if ready and not os.read(alive_r, 1):
            return


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def _relay(path: Path, offset: int, relay: Callable[[str], None]) -> int:
    if not path.exists():
        return offset
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    for line in data[:end].decode("utf-8", errors="replace").splitlines():
        # Paddle's own banners (launcher INFO, "Modified FLAGS detected" box) stay in the log files
        if line.strip() and not line.startswith(_NOISE):
            relay(line)
    return offset + end
