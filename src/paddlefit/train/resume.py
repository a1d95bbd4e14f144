"""Which checkpoint a run resumes from, and whether the job may continue it: ``--resume auto`` (the newest usable
one of the run's store; none usable among several is refused, never a silent fresh start), ``--resume PATH`` (its
origin checked: a checkpoint is code the user trusts), every rank agreeing on the choice, and the spec's optimizer
and LR schedule against the checkpoint's before anything is loaded.

The store itself (layout, atomic writes, pruning) and loading a chosen checkpoint are in
:mod:`paddlefit.train.checkpoint`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from paddlefit.errors import PaddlefitError
from paddlefit.rundir.checkpoint_files import has_rng_json, read_manifest, read_rng_json, read_trainer_json
from paddlefit.rundir.files import checkpoint_step, forget_ending, read_status, read_summary
from paddlefit.train.checkpoint import CheckpointError, CheckpointStore
from paddlefit.train.ckptfiles import verify
from paddlefit.train.oom import first_line
from paddlefit.train.state import TrainerState

__all__ = [
    "agree_on_resume",
    "check_resume_origin",
    "check_same_job",
    "choose_resume",
    "finished_already",
    "replace_earlier_run",
    "spec_meta",
    "warn_changed_run",
]


def spec_meta(spec: Any) -> dict[str, Any]:
    """What a checkpoint's manifest records of the job spec (:class:`~paddlefit.jobspec.spec.JobSpec`) that wrote
    it, for :func:`check_same_job`: the model, the optimizer and the LR schedule."""
    return {
        "spec_model": spec.model,
        "spec_optimizer": spec.optimizer.value,
        "spec_schedule": spec.schedule.model_dump(mode="json"),
    }


def check_same_job(path: Path, spec: Any, saved_scheduler: dict[str, Any], scheduler: dict[str, Any]) -> None:
    """Refuse to resume checkpoint ``path`` into a job (``spec``) with another optimizer or LR schedule than the
    one that wrote it (the manifest's :func:`spec_meta`; checkpoints of earlier versions lack them and are checked by
    the scheduler's state keys only: a warmup added or removed), before anything is loaded: Paddle's
    ``set_state_dict`` takes either, and the run fails at its first step or follows another schedule unsaid.

    Raises:
        CheckpointError: they differ; the message names the spec field (exit 2).
    """
    fix = "put it back in the spec, or start over with `--resume never --overwrite`."
    manifest, mine = read_manifest(path), spec_meta(spec)
    saved = manifest.get("spec_optimizer")
    if saved is not None and saved != mine["spec_optimizer"]:
        raise CheckpointError(
            f"checkpoint {path} was written by `optimizer: {saved}`, this spec says `optimizer: "
            f"{mine['spec_optimizer']}`: its optimizer states cannot continue another optimizer; "
            f"{fix}"
        )
    was = manifest.get("spec_schedule")
    if isinstance(was, dict) and (changed := [k for k in sorted(was) if was[k] != mine["spec_schedule"].get(k)]):
        said = ", ".join(f"`schedule.{k}: {was[k]}` (this spec: {mine['spec_schedule'].get(k)})" for k in changed)
        raise CheckpointError(
            f"checkpoint {path} was written with {said}: the learning rates from here would "
            f"follow another schedule than the run's; {fix}"
        )
    if saved_scheduler and set(saved_scheduler) != set(scheduler):
        raise CheckpointError(
            f"checkpoint {path} holds an LR schedule with state {sorted(saved_scheduler)}, this "
            f"spec's `schedule` has {sorted(scheduler)} (a warmup added or removed?); {fix}"
        )


def choose_resume(mode: str, store: CheckpointStore, log: Callable[[str], None], trust: bool = False) -> Path | None:
    """The checkpoint to resume: ``never`` -> None; ``auto`` -> the newest usable one (:func:`_unusable`; a warning
    for each one skipped goes to ``log``); else ``mode`` is a checkpoint directory, which must verify and, outside
    this run's ``checkpoints/`` (by real path), needs ``trust`` (``--trust-checkpoint``): Paddle's ``.pdparams`` /
    ``.pdopt`` are pickles, so loading a checkpoint runs code from it, and a manifest proves integrity, not origin.

    Raises:
        CheckpointError: ``mode`` is a path that is not a valid checkpoint, or is outside the run without ``trust``.
    """
    if mode == "never":
        return None
    if mode == "auto":
        skipped: list[str] = []
        for path in store.list():
            if (problem := _unusable(path, store.root, trust)) is None:
                return path
            skipped.append(f"{path.name}: {problem}")
            log(f"warning: skipping checkpoint {path.name}: {problem}; the one before it is tried")
        if skipped:  # never start over on top of checkpoints the user may still want (and pruning would delete)
            raise CheckpointError(
                f"`--resume auto` found {len(skipped)} checkpoint(s) in {store.root} and none can be resumed:\n  "
                + "\n  ".join(skipped)
                + "\nNothing was changed. Repair or move them, resume one with "
                "`--resume PATH`, or start over with `--resume never --overwrite` (it deletes them)."
            )
        return None
    path = Path(mode)
    problem = verify(path) if path.is_dir() else "not a directory"
    if problem:
        raise CheckpointError(f"`--resume {mode}`: {problem}; pass another checkpoint or `--resume auto`.")
    check_resume_origin(mode, store.root, trust)
    return path


def _unusable(path: Path, root: Path, trust: bool) -> str | None:
    """Why ``--resume auto`` skips checkpoint ``path`` of the store ``root``, or None: it does not verify; it (or a
    file in it) resolves outside ``root`` by real path and ``trust`` is False (the rule of ``--resume PATH``);
    its ``trainer.json`` or ``rng.json`` cannot be read (too large, too deep, not JSON) or is malformed."""
    if problem := verify(path):
        return problem
    if not trust and (outside := _outside(path, root)):
        return (
            f"{outside}, outside this run's checkpoints: loading a checkpoint runs code from it; if you trust "
            f"it, pass `--resume {path} --trust-checkpoint`"
        )
    try:
        TrainerState.from_json(read_trainer_json(path), str(path))
        if has_rng_json(path):
            read_rng_json(path)
    except PaddlefitError as exc:
        return first_line(exc, 300).removesuffix("; pass another checkpoint.")
    return None


def _outside(path: Path, root: Path) -> str | None:
    """``path`` (a checkpoint directory) or the first file in it that resolves outside ``root``, by real path
    (``"it resolves to X"``, ``"model.pdparams resolves to X"``), or None."""
    real_root = root.resolve()
    real = path.resolve()
    if not real.is_relative_to(real_root):
        return f"it resolves to {real}"
    with contextlib.suppress(OSError):
        for entry in sorted(path.iterdir()):
            if not entry.resolve().is_relative_to(real):
                return f"{entry.name} resolves to {entry.resolve()}"
    return None


def check_resume_origin(mode: str, root: Path, trust: bool) -> None:
    """A ``--resume PATH`` outside the run's checkpoints ``root`` (by real path: the directory and each file in it)
    needs ``trust``.

    Raises:
        CheckpointError: it is outside and ``trust`` is False; the message says why and how to proceed.
    """
    if trust or mode in ("auto", "never") or (outside := _outside(Path(mode), root)) is None:
        return
    raise CheckpointError(
        f"`--resume {mode}` is outside this run's checkpoints ({root}; {outside}). Loading a checkpoint runs code "
        "from it (Paddle's .pdparams/.pdopt are pickles; its manifest proves it is intact, not who wrote it): if you "
        "trust where it came from, add `--trust-checkpoint`; else start fresh with `--resume never "
        "--overwrite`."
    )


def agree_on_resume(
    mode: str, store: CheckpointStore, world: int, is_writer: bool, log: Callable[[str], None], trust: bool = False
) -> Path | None:
    """Rank 0 chooses (:func:`choose_resume`); its choice is broadcast so every rank loads the same checkpoint: the
    step of the store's ``step-N`` for ``auto``, else only whether to resume (a ``--resume PATH`` may have any
    directory name, ``best/``; every rank reads ``PATH``)."""
    path = choose_resume(mode, store, log, trust) if is_writer or world == 1 else None
    if world == 1:
        return path
    import paddle

    chosen = -1 if path is None else (checkpoint_step(path) or 0) if mode == "auto" else 0
    t = paddle.to_tensor([chosen], dtype="int64")
    paddle.distributed.broadcast(t, src=0)
    step = int(t.item())
    if step < 0:
        return None
    if path is not None:
        return path
    return store.path_for(step) if mode == "auto" else Path(mode)


def warn_changed_run(state: TrainerState, seed: int, total_steps: int, log: Callable[[str], None]) -> None:
    """Warn (through ``log``) when the job resumed from ``state`` has another seed or another length than the
    checkpoint's run: it goes on, but is not the uninterrupted run of either."""
    if state.seed != seed:
        log(
            f"warning: the checkpoint's run used seed {state.seed}, this job has {seed}: the data order from here "
            "follows the new seed, so the run is not the uninterrupted one."
        )
    if state.total_steps not in (None, total_steps):
        log(
            f"warning: this run is {total_steps} steps long, the checkpoint's run was {state.total_steps}: the LR "
            f"schedule now spans {total_steps} steps, so the result will differ from an uninterrupted run of either "
            "length."
        )


def finished_already(run_dir: Path, step: int, total_steps: int) -> dict[str, Any] | None:
    """The summary of the run in ``run_dir`` when resuming it at ``step`` leaves nothing to do: the checkpoint is at
    the job's ``total_steps`` and status.json records the run finished at that step (exit 0) beside a summary.json.
    None otherwise: the loop then runs what is left (the last evaluation, the summary). Run again after it
    finished, ``train`` would otherwise rewrite the finished run's summary and registry row with a run of 0
    measured steps."""
    if step < total_steps:
        return None
    status = read_status(run_dir)
    if status is None or status.get("exit_code") != 0 or status.get("step") != step:
        return None
    try:
        summary = read_summary(run_dir)
    except (OSError, ValueError, PaddlefitError):
        return None
    return summary if isinstance(summary, dict) else None


def replace_earlier_run(store: CheckpointStore, run_dir: Path, log: Callable[[str], None]) -> bool:
    """``--resume never``, once the new job is accepted (built, its data read): delete the earlier run's
    checkpoints (:meth:`~paddlefit.train.checkpoint.CheckpointStore.remove_all`) and its ending (status.json with
    its refused starts, summary.json), which are not this run's. Returns whether there were checkpoints.

    Raises:
        CheckpointError: the store holds something that is not a checkpoint, or another run's lock (nothing deleted).
        OSError: the store or a file could not be removed.
    """
    old = store.remove_all()
    if old:
        log(f"--resume never: removed {len(old)} checkpoint(s) of an earlier run from {store.root}")
    forget_ending(run_dir)
    return bool(old)
