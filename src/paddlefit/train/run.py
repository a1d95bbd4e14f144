"""Run a job spec on 1..N devices: in this process for one device, through ``paddle.distributed.launch`` for more.

:func:`run_job` is what ``paddlefit train`` calls and what a library user calls::

    from paddlefit.jobspec.spec import load_job_spec
    from paddlefit.train.run import run_job

    outcome = run_job(load_job_spec("examples/digits.yaml"))
    print(outcome.exit_code, outcome.summary["final_loss"])
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paddlefit import options
from paddlefit.errors import PaddlefitError
from paddlefit.jobspec.spec import DATASETS, JobSpec
from paddlefit.rundir.files import (
    checkpoints_dir,
    read_status,
    read_summary,
    record_failed_start,
    spec_yaml,
    write_launch_spec,
    write_snapshot,
)
from paddlefit.textsafe import log_stderr
from paddlefit.train.lock import LOCK_FD_ENV, RunDirLock
from paddlefit.train.metrics import Progress
from paddlefit.train.predict import NO_PREDICT_ENV
from paddlefit.train.record import PREDICTION_KEY_ENV, newest_row, settle_launched_row

__all__ = ["JobOutcome", "gpu_count", "preflight", "run_job", "select_gpus"]


@dataclass
class JobOutcome:
    """How a run ended: ``exit_code`` (0 done, 3 non-finite loss, 4 budget, 143 stopped by a signal, 2 bad input
    found by a worker, 1 the job failed), ``reason``, the run directory and, when it finished, summary.json."""

    exit_code: int
    reason: str
    run_dir: Path
    summary: dict[str, Any] | None = None


def preflight(spec: JobSpec) -> None:
    """Catch import errors of the model, datasets and loss, and a spec without a length, before starting workers.

    Raises:
        PaddlefitError: the field that does not import or is missing, and the fix.
    """
    from paddlefit.models.calling import resolve_loss
    from paddlefit.models.zoo import resolve_model
    from paddlefit.process.userimport import import_callable

    resolve_model(spec.model, dict(spec.model_args))
    resolve_loss(spec.loss)
    for key, ref in (("data.train", spec.data.train), ("data.eval", spec.data.eval)):
        if ref is None:
            if key == "data.train":
                raise PaddlefitError(
                    "the job spec has no `data.train`; set it to a dataset factory "
                    f"({', '.join(DATASETS)} or `package.module:function`)."
                )
            continue
        import_callable(
            DATASETS.get(ref, ref), f"{key}: {ref}", f"use one of {', '.join(DATASETS)} or `package.module:function`"
        )
    if spec.epochs is None and spec.max_steps is None:
        raise PaddlefitError("the job spec sets neither `epochs` nor `max_steps`; set one (or pass --max-steps).")


def gpu_count() -> int:
    """GPUs this Paddle sees (0 for a CPU build)."""
    import paddle

    if not paddle.device.is_compiled_with_cuda():
        return 0
    return int(paddle.device.cuda.device_count())


def select_gpus(n: int, gpu_ids: list[int] | None, gpus: int, cores: int) -> list[int] | None:
    """The GPU ids for ``n`` devices (``gpu_ids`` when given), or None for one device or CPU processes.

    Args:
        n: devices asked for (``--devices``); ``gpu_ids``: explicit ids, or None; ``gpus``: GPUs visible;
        cores: CPU cores (at most ``max(2, cores)`` CPU processes).

    Raises:
        PaddlefitError: ids without a GPU, more devices than visible GPUs, an id that does not exist, or more CPU
            processes than cores.
    """
    asked = ",".join(str(i) for i in gpu_ids) if gpu_ids is not None else str(n)
    if gpu_ids is not None and gpus == 0:
        raise PaddlefitError(
            f"`--devices {asked}` names GPU ids but this Paddle sees no GPU; use a count "
            f"(`--devices {n}`) for {n} CPU processes."
        )
    if gpu_ids is None and gpus:
        if n > gpus:
            raise PaddlefitError(f"`--devices {n}`: only {gpus} GPU(s) visible.")
        gpu_ids = list(range(n)) if n > 1 else None
    if gpu_ids is not None and gpus and max(gpu_ids) >= gpus:
        raise PaddlefitError(
            f"`--devices {asked}`: GPU id {max(gpu_ids)} does not exist ({gpus} visible: 0..{gpus - 1})."
        )
    if not gpus and n > max(2, cores):
        raise PaddlefitError(
            f"`--devices {n}` would start {n} CPU processes on {cores} cores; use at most {max(2, cores)}."
        )
    return gpu_ids


def run_job(
    spec: JobSpec,
    *,
    gpu_ids: list[int] | None = None,
    resume: str = options.RESUME.default,
    progress_bar: Progress | None = None,
    log: Callable[[str], None] = log_stderr,
    relay: Callable[[str], None] | None = None,
    predict: bool = True,
    trust_checkpoint: bool = False,
    overwrite: bool = False,
) -> JobOutcome:
    """Train ``spec`` on ``spec.devices`` devices into ``spec.run_dir``.

    One device: :class:`~paddlefit.train.loop.Trainer` in this process. More: ``python -m
    paddle.distributed.launch`` with one worker per device (:mod:`paddlefit.train.launcher`), rank 0's log lines
    relayed to ``log``, the exit code and reason from the status.json rank 0 wrote. The workers read the spec
    from RUN_DIR/.job-launch.yaml (written atomically, removed after the run); RUN_DIR/job.yaml is written by rank 0
    once the run is accepted (its resume checkpoint fits), so a refused run leaves the run's job.yaml as it was.
    The run directory is locked (:class:`~paddlefit.train.lock.RunDirLock`) for the whole run, before anything is
    written: a second ``run_job`` on it raises instead of writing. A launched run's launcher and workers inherit
    the locked descriptor, so the directory stays locked while any of them lives (this process killed with
    SIGKILL leaves them running until they stop: the launcher gets SIGTERM when this process dies).

    Args:
        gpu_ids: explicit GPU ids (``--devices 0,1``), else the first ``spec.devices`` GPUs (or CPU processes).
        resume: ``auto``, ``never`` or a checkpoint directory.
        progress_bar: progress of an in-process run (workers log lines instead).
        log: receives the in-process run's log lines (default: stderr).
        relay: receives rank 0's log lines of a launched run and the launch line (default: ``log``).
        predict: first ask the planner what this run will measure (:mod:`paddlefit.train.predict`; off also when
            the environment has ``PADDLEFIT_NO_PREDICT=1``); the trainer records the measured figures beside it.
        trust_checkpoint: the caller vouches for the checkpoint (``--trust-checkpoint``): a ``resume`` path outside
            the run directory, or a checkpoint of an earlier version with a pickled ``rng.pkl``, is loaded.
        overwrite: with ``resume="never"``, a finished run's checkpoints may be replaced (``--overwrite``); the old
            checkpoints are deleted only once the new job is accepted (built, its data read), in every case.

    Raises:
        PaddlefitError: a bad spec, devices that do not exist, an unwritable run directory; and from an in-process
            run, what :meth:`Trainer.run` raises.
        RunDirInUseError: another process holds the run directory (exit 2).
        CheckpointError: ``resume="never"`` on a finished run without ``overwrite`` (exit 2; nothing changed).
        PaddlefitError: another one-device ``run_job`` is running in this process (a thread): one at a time.
    """
    run_dir = Path(spec.run_dir)
    # one in-process run at a time (a launched run only waits on its workers here: any number can run)
    with _one_run_per_process(run_dir) if spec.devices == 1 else contextlib.nullcontext():
        preflight(spec)
        n = spec.devices
        gpu_ids = select_gpus(n, gpu_ids, gpu_count(), os.cpu_count() or 1)
        from paddlefit.train.resume import check_resume_origin

        check_resume_origin(resume, checkpoints_dir(run_dir), trust_checkpoint)  # before workers start (rank 0 too)
        with RunDirLock(run_dir, log) as lock:  # before anything is written; the launched workers inherit it
            if resume == "never" and not overwrite:
                refuse_replacing_finished(run_dir)
            _snapshot(run_dir, log)
            key = _prediction(spec, run_dir, n, gpu_ids, log) if predict else None
            return _run_locked(
                spec, run_dir, n, gpu_ids, (resume, trust_checkpoint), progress_bar, log, relay, lock, key
            )


def refuse_replacing_finished(run_dir: Path) -> None:
    """``--resume never`` without ``--overwrite``: refuse when ``run_dir`` holds a finished run (its status.json
    records exit code 0) with checkpoints, before anything else is changed (the refusal is recorded as a failed
    start: :func:`~paddlefit.rundir.files.record_failed_start`). A stopped, failed or unrecorded run is
    replaced (starting over is what ``--resume never`` is for).

    Raises:
        CheckpointError: the finished run's checkpoints would be deleted (exit 2).
    """
    from paddlefit.train.checkpoint import CheckpointError, CheckpointStore

    status = read_status(run_dir)  # None: no readable record of how it ended
    held = CheckpointStore(checkpoints_dir(run_dir)).list()
    if status is not None and status.get("exit_code") == 0 and held:
        exc = CheckpointError(
            f"`--resume never` would delete the {len(held)} checkpoint(s) of the finished run in {run_dir} (its "
            f"status.json: exit 0, step {status.get('step')}); nothing was changed. Pass `--overwrite` to replace "
            "it, or train into another `--run-dir`."
        )
        with contextlib.suppress(OSError):
            record_failed_start(run_dir, exc.exit_code, str(exc))
        raise exc


def _snapshot(run_dir: Path, log: Callable[[str], None]) -> None:
    """RUN_DIR/snapshot.json: ``paddlefit doctor``'s snapshot of this machine (no device runs; ~50 ms after Paddle's
    import), what ``paddlefit report`` shows as the run's environment. A failure is a warning, never the run's."""
    try:
        from paddlefit.diagnose.snapshot import collect_snapshot

        snap = collect_snapshot(run_dir, run_devices=False)
        write_snapshot(run_dir, snap.to_dict())
    except Exception as exc:  # the environment record is for the report: it never stops a run
        log(f"warning: no environment snapshot in {run_dir} ({type(exc).__name__}: {str(exc)[:200]})")


def _prediction(
    spec: JobSpec, run_dir: Path, n: int, gpu_ids: list[int] | None, log: Callable[[str], None]
) -> str | None:
    """The key of RUN_DIR/prediction.json made for this run (:func:`~paddlefit.train.predict.predict_run`), or
    None when ``PADDLEFIT_NO_PREDICT=1``. Never raises for a prediction that cannot be made (it says why)."""
    if os.environ.get(NO_PREDICT_ENV) == "1":
        return None
    from paddlefit.train.predict import predict_run, prediction_line, run_device

    doc = predict_run(spec_yaml(spec), run_device(n, gpu_ids, gpu_count()), run_dir, log)
    log(prediction_line(doc, spec.grad_accum_steps, spec.batch_size * spec.grad_accum_steps * n))
    return str(doc["key"])


_RUNNING = threading.Lock()
_running_dir: list[Path] = []


@contextlib.contextmanager
def _one_run_per_process(run_dir: Path) -> Iterator[None]:
    """Refuse a second in-process :func:`run_job` while one runs in this process (another thread): Paddle keeps
    its dygraph tracer, device and name generator per process, and a second thread touching them mid-run breaks
    the first (seen on Paddle 3.3.1: tensors of the running job lost their dygraph type)."""
    if not _RUNNING.acquire(blocking=False):
        other = _running_dir[0] if _running_dir else "?"
        raise PaddlefitError(
            f"another run_job (run dir {other}) is running in this process; Paddle's state is per "
            f"process, so run {run_dir} after it returns, or in another process."
        )
    _running_dir[:] = [run_dir]
    try:
        yield
    finally:
        _running_dir.clear()
        _RUNNING.release()


def _run_locked(
    spec: JobSpec,
    run_dir: Path,
    n: int,
    gpu_ids: list[int] | None,
    resuming: tuple[str, bool],
    progress_bar: Progress | None,
    log: Callable[[str], None],
    relay: Callable[[str], None] | None,
    lock: RunDirLock,
    key: str | None,
) -> JobOutcome:
    resume, trust = resuming
    try:
        # the workers read the spec from here; rank 0 writes job.yaml once the run is accepted (not when refused)
        launch_spec = write_launch_spec(run_dir, spec)
        if n == 1:
            launch_spec.unlink()
    except OSError as exc:  # FileWriteError says why (a full disk...)
        why = getattr(exc, "why", None) or exc.strerror or exc
        raise PaddlefitError(
            f"`--run-dir {run_dir}` is not writable ({why}); free space or choose another directory."
        ) from None
    if n == 1:
        from paddlefit.train.loop import Trainer, TrainOptions

        opts = TrainOptions(
            run_dir=run_dir,
            resume=resume,
            progress_bar=progress_bar,
            log=log,
            lock_held=True,
            prediction_key=key,
            trust_checkpoint=trust,
        )
        result = Trainer(spec, opts).run()
        return JobOutcome(result.exit_code, result.reason, run_dir, result.summary)
    from paddlefit.train.launcher import launch_command, run_launched

    cmd = launch_command(launch_spec, run_dir, n, gpu_ids, resume, job_id=f"paddlefit-{run_dir.name}", trust=trust)
    relay = relay or log
    relay(f"launching {n} workers: {' '.join(cmd[1:5])} ... (logs in {run_dir}/launch-logs)")
    held = lock.share()  # the launcher and its workers hold the lock with us, and on if this process is killed
    before = newest_row(run_dir)
    try:
        code, reason = run_launched(
            cmd,
            run_dir,
            relay=relay,
            env={**held, PREDICTION_KEY_ENV: key or ""},
            pass_fds=(int(held[LOCK_FD_ENV]),) if held else (),
        )
    finally:
        launch_spec.unlink(missing_ok=True)
    settle_launched_row(run_dir, code, reason, before, log)
    summary: Any = read_summary(run_dir) if code == 0 else None
    return JobOutcome(code, reason, run_dir, summary)
