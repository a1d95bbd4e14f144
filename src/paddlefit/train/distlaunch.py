"""``python -m paddlefit.train.distlaunch ARGS``: ``python -m paddle.distributed.launch ARGS`` that writes no secret.

Paddle's launcher writes its whole environment into ``--log_dir``: ``envlog.<rank>`` per worker
(``Controller.save_pod_env``, ``paddle/distributed/launch/controllers/controller.py``), ``str(os.environ)`` as the
first line of ``<job_id>.<pod>.log`` (``Controller.save_pod_log``) and ``backup_env.<rank>.json``
(``ProcessContext._start``, ``launch/utils/process_context.py``); with ``FLAGS_print_launcher_env`` set it also
prints a failed worker's environment (``job/container.py``). Seen on Paddle 3.3.1: a 2-process CPU run wrote an
``AWS_SECRET_ACCESS_KEY`` of the caller's environment into five files under RUN_DIR/launch-logs.

This entry point takes every variable :func:`paddlefit.secretenv.is_secret` flags out of its own environment
before Paddle reads it (``fetch_envs`` in ``launch/context/args_envs.py`` copies ``os.environ``), then runs
Paddle's launcher in this process with the same arguments, and adds those variables back to the environment of
each process the launcher starts (it starts them with ``subprocess.Popen``): the workers see them, no file does.

Started by ``paddlefit train --devices N`` (:func:`paddlefit.train.run.run_job`), it also inherits the run
directory's locked descriptor (``PADDLEFIT_LOCK_FD``, :mod:`paddlefit.train.lock`) and hands it to every worker
(Paddle's launcher would close it: ``close_fds``), so the directory stays locked while any process of the run
lives; and it asks the kernel for SIGTERM when that ``train`` process dies (``PR_SET_PDEATHSIG``), so a killed
``train`` does not leave the run going on without it: the workers checkpoint and stop as on any SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import signal
import subprocess
import sys
from typing import Any

from paddlefit.secretenv import split_secrets
from paddlefit.train.lock import LOCK_FD_ENV, LOCK_PID_ENV

#: Paddle's launcher unsets these for its workers, keeping each as ``NAME_original`` (``fetch_envs``).
PROXY_VARIABLES = ("http_proxy", "https_proxy")


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


def inherited_lock_fd() -> int | None:
    """The run directory lock's descriptor this process inherited from ``paddlefit train`` (None without one)."""
    try:
        fd = int(os.environ.get(LOCK_FD_ENV, ""))
        os.fstat(fd)
    except (ValueError, OSError):
        return None
    return fd


def stop_with_parent() -> None:
    """Ask Linux for SIGTERM when the process that started this one dies (``prctl(PR_SET_PDEATHSIG)``); if it has
    already died (it is not ``PADDLEFIT_LOCK_PID``), stop now. Elsewhere (or without ``prctl``) nothing."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
        if os.environ.get(LOCK_PID_ENV, str(os.getppid())) != str(os.getppid()):  # it died before the request
            os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str] | None = None) -> None:
    """Run ``paddle.distributed.launch`` with ``argv`` (default ``sys.argv[1:]``), secrets kept out of its own
    environment and handed only to the processes it starts. Exits as Paddle's launcher does."""
    args = sys.argv[1:] if argv is None else argv
    lock_fd = inherited_lock_fd()
    if lock_fd is not None:
        stop_with_parent()
    _, hidden = split_secrets(os.environ)
    for name in hidden:
        del os.environ[name]
    if hidden or lock_fd is not None:
        keep = (lock_fd,) if lock_fd is not None else ()
        subprocess.Popen = secret_env_popen(worker_secrets(hidden), keep)  # type: ignore[misc]
    sys.argv = ["paddle.distributed.launch", *args]
    runpy.run_module("paddle.distributed.launch", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
