"""Entry script of one worker under ``paddle.distributed.launch`` (not for direct use).

``python -m paddle.distributed.launch --nproc_per_node N .../worker.py --spec RUN_DIR/.job-launch.yaml --run-dir RUN_DIR
--resume auto``. Exits with the trainer's exit code; rank 0 records the reason in status.json. On Linux each worker
asks the kernel for SIGTERM when its launcher dies (``prctl(PR_SET_PDEATHSIG)``,
:func:`paddlefit.train.distlaunch.stop_with_parent`): a SIGKILLed launcher never leaves its workers training as
orphans; they checkpoint and stop (143) as on any SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    """Parse the worker arguments, train, return the exit code (see :mod:`paddlefit.train.loop`). A stop signal
    before the loop starts exits 128 + the signal with one line (:mod:`paddlefit.process.quietstart`)."""
    import warnings

    from paddlefit.process.quietstart import install
    from paddlefit.train import peers  # noqa: F401 (its STARTED: the start-up deadline counts from the worker's start)

    install()
    from paddlefit.train.distlaunch import LAUNCHER_PID_ENV, stop_with_parent

    if LAUNCHER_PID_ENV in os.environ:  # started by distlaunch: stop (checkpoint, 143) when it dies, never orphaned
        stop_with_parent(LAUNCHER_PID_ENV)

    warnings.filterwarnings("ignore", category=UserWarning)
    os.environ.setdefault("GLOG_minloglevel", "2")
    ap = argparse.ArgumentParser(prog="paddlefit-worker")
    ap.add_argument("--spec", required=True)
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--resume", default="auto")
    ap.add_argument("--trust-checkpoint", action="store_true")
    args = ap.parse_args(argv)

    from paddlefit.errors import PaddlefitError
    from paddlefit.jobspec.spec import load_job_spec
    from paddlefit.rundir.files import read_status, record_failed_start, run_status
    from paddlefit.textsafe import log_stderr
    from paddlefit.train.guards import ignore_stop_signals
    from paddlefit.train.lock import RunDirInUseError, held_by_parent
    from paddlefit.train.loop import Trainer, TrainOptions
    from paddlefit.train.record import PREDICTION_KEY_ENV

    rank = int(os.environ.get("PADDLE_TRAINER_ID", "0"))
    run_dir = Path(args.run_dir)
    try:
        spec = load_job_spec(args.spec)
        opts = TrainOptions(
            run_dir=run_dir,
            resume=args.resume,
            progress=True,
            lock_held=held_by_parent(run_dir),
            prediction_key=os.environ.get(PREDICTION_KEY_ENV) or None,
            trust_checkpoint=args.trust_checkpoint,
        )
        return Trainer(spec, opts).run().exit_code
    except PaddlefitError as exc:
        ignore_stop_signals()  # the outcome is known: Paddle's launcher stopping the pod (SIGTERM) must not change it
        written = False
        # the parent prints the status message; print here only if it could not be recorded (or is another run's
        # directory, where this run writes nothing)
        if rank == 0 and not isinstance(exc, RunDirInUseError):
            # the trainer recorded it, with its step: keep that (a node of `paddlefit launch` has no run token:
            # its status.json is this run's when it says this error)
            written = run_status(run_dir) is not None or (read_status(run_dir) or {}).get("reason") == str(exc)
            if not written:
                with contextlib.suppress(OSError):
                    record_failed_start(run_dir, exc.exit_code, str(exc))
                    written = True
        if not written:  # `error:` (bad input) lines of ranks > 0 are what train reports for exit 2 (launcher.py)
            log_stderr(f"{'error' if exc.exit_code == 2 else 'failed'}: {exc}")
        return exc.exit_code
    finally:
        ignore_stop_signals()


if __name__ == "__main__":
    sys.exit(main())
