"""The trainer's state in a checkpoint: a typed ``trainer.json``, the RNG states, saving, loading and the ranks'
agreement on which checkpoint to resume.

A checkpoint directory (written atomically by :class:`paddlefit.train.checkpoint.CheckpointStore`) holds
``model.pdparams`` and ``optimizer.pdopt`` (``paddle.save``), ``trainer.json`` (:class:`TrainerState`) and
``rng.json`` (Python, NumPy and Paddle generator states, :mod:`paddlefit.train.rngstate`; no pickle), each listed
with its sha256 in the store's manifest.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from paddlefit.errors import PaddlefitError
from paddlefit.estimate.perf_params import is_finite_number
from paddlefit.fileio import InputFileError, read_json_limited
from paddlefit.run_layout import MODEL_FILE, OPTIMIZER_FILE, RNG_FILE, TRAINER_FILE
from paddlefit.train.checkpoint import CheckpointError, CheckpointStore, verify
from paddlefit.train.oom import Split, first_line
from paddlefit.train.rngstate import capture_rng, read_rng, restore_rng

__all__ = ["TrainerState", "agree_on_resume", "check_resume_origin", "choose_resume", "kept_accumulation",
           "load_checkpoint", "read_state", "save_checkpoint", "spec_keeping_global_batch"]


@dataclass
class TrainerState:
    """Where a run is and what it has done; ``trainer.json`` of a checkpoint, key for key.

    Attributes:
        step: optimizer steps done.
        epoch: index of the epoch in progress (0-based).
        batch_in_epoch: loaded batches of that epoch consumed (a multiple of ``grad_accum_steps``).
        global_batch: samples per optimizer step over all ranks (``batch_size x devices x grad_accum_steps``).
        micro_batch_split: each loaded batch is split this many ways after out-of-memory back-offs (a power of 2).
        total_steps: the run's length in optimizer steps when it was saved (the LR schedule's span).
        scheduler / scaler: ``state_dict()`` of the LR scheduler and the fp16 GradScaler (None without one).
        totals: ``train_s`` and ``wait_s`` (seconds), ``samples``, and ``wall_s`` (wall seconds of all runs of
            the run directory, for the budget).
        last_loss: the mean loss of the last optimizer step.
    """

    global_batch: int
    batch_size: int
    devices: int
    grad_accum_steps: int
    seed: int
    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    micro_batch_split: int = 1
    total_steps: int | None = None
    scheduler: dict[str, Any] = field(default_factory=dict)
    scaler: dict[str, Any] | None = None
    totals: dict[str, float] = field(default_factory=lambda: {"train_s": 0.0, "wait_s": 0.0, "samples": 0.0})
    last_loss: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``trainer.json`` object."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any, where: str) -> TrainerState:
        """Read a ``trainer.json`` object (unknown keys are ignored; ``micro_batch_split`` and ``total_steps`` may be
        missing, as in checkpoints of earlier versions).

        Raises:
            PaddlefitError: not an object, a required key missing, or a value of the wrong type; the message names
                ``where`` (the checkpoint) and the key.
        """
        if not isinstance(data, dict):
            raise PaddlefitError(f"{where}: trainer.json is not a JSON object; pass another checkpoint.")
        if not {"global_batch", "batch_size", "devices", "grad_accum_steps", "seed"} <= data.keys():
            raise PaddlefitError(f"{where}: trainer.json lacks global_batch/batch_size/devices/grad_accum_steps/seed; "
                                 "pass another checkpoint.")  # fmt: skip
        known = {f.name for f in fields(cls)}
        state = cls(**{k: v for k, v in data.items() if k in known})
        for name in ("global_batch", "batch_size", "devices", "grad_accum_steps", "seed", "step", "epoch",
                     "batch_in_epoch"):  # fmt: skip
            v = getattr(state, name)
            if not isinstance(v, int) or isinstance(v, bool):
                raise PaddlefitError(f"{where}: trainer.json `{name}` is {v!r}, not an integer; pass another "
                                     "checkpoint.")  # fmt: skip
        if not isinstance(state.totals, dict) or not isinstance(state.scheduler, dict):
            raise PaddlefitError(f"{where}: trainer.json `totals`/`scheduler` are not objects; pass another "
                                 "checkpoint.")  # fmt: skip
        for key, v in state.totals.items():
            if not is_finite_number(v) or v < 0:
                raise PaddlefitError(f"{where}: trainer.json `totals.{key}` is {v!r}, not a finite number >= 0; pass "
                                     "another checkpoint.")  # fmt: skip
        if state.last_loss is not None and not is_finite_number(state.last_loss):
            raise PaddlefitError(f"{where}: trainer.json `last_loss` is {state.last_loss!r}, not a finite number; "
                                 "pass another checkpoint.")  # fmt: skip
        state.check_layout(where)
        return state

    def check_fits(self, where: str, *, global_batch: int, batch_size: int, steps_per_epoch: int) -> None:
        """Whether this state can continue a job of ``global_batch`` samples per step, ``batch_size`` per loaded
        batch and ``steps_per_epoch`` optimizer steps per epoch (:func:`paddlefit.job.steps_per_epoch`, which
        depends on the layout only through the global batch, so the position is checked in the checkpoint's own
        layout whatever this run's device count).

        Raises:
            PaddlefitError: another global batch; a layout that does not multiply to the global batch; a position
                (step, epoch, micro-batch) the job cannot be at; a ``micro_batch_split`` the back-off cannot reach.
        """
        if self.global_batch != global_batch:
            raise PaddlefitError(
                f"checkpoint {where} was trained with global batch {self.global_batch} ({self.batch_size} x "
                f"{self.devices} devices x {self.grad_accum_steps} accumulation), this run has {global_batch}; keep "
                "the global batch or start fresh with `--resume never`.")  # fmt: skip
        self.check_layout(where)
        accum = self.grad_accum_steps
        if (self.step < 0 or self.epoch < 0 or not 0 <= self.batch_in_epoch <= steps_per_epoch * accum
                or self.batch_in_epoch % accum != 0
                or self.step != self.epoch * steps_per_epoch + self.batch_in_epoch // accum):  # fmt: skip
            raise PaddlefitError(f"checkpoint {where}: trainer.json position (step {self.step}, epoch {self.epoch}, "
                                 f"micro-batch {self.batch_in_epoch}) is impossible for this job ({steps_per_epoch} "
                                 "steps per epoch); pass another checkpoint.")  # fmt: skip
        if not Split.valid_ways(self.micro_batch_split, self.batch_size):
            raise PaddlefitError(f"checkpoint {where}: trainer.json micro_batch_split {self.micro_batch_split!r} is "
                                 "not a power of 2 up to 2 x batch_size; pass another checkpoint.")  # fmt: skip

    def check_layout(self, where: str) -> None:
        """``batch_size``, ``devices`` and ``grad_accum_steps`` are >= 1 and multiply to ``global_batch``.

        Raises:
            PaddlefitError: naming the checkpoint ``where`` and the four values.
        """
        layout = (self.batch_size, self.devices, self.grad_accum_steps)
        if min(layout) < 1 or math.prod(layout) != self.global_batch:
            raise PaddlefitError(f"checkpoint {where}: trainer.json global_batch {self.global_batch} is not batch_size "
                                 f"x devices x grad_accum_steps {layout}; pass another checkpoint.")  # fmt: skip

    def in_layout(self, batch_size: int, devices: int, grad_accum_steps: int) -> TrainerState:
        """This state (at a step boundary, :meth:`check_fits` passed) as a run of ``devices`` devices x
        ``batch_size`` x ``grad_accum_steps`` with the same global batch continues it: the epoch's steps done are
        kept, counted in the new layout's loaded batches; an out-of-memory split is kept only for the same
        micro-batch (another micro-batch starts unsplit and backs off again if it must).

        Raises:
            PaddlefitError: the layout's global batch is not this state's.
        """
        if batch_size * devices * grad_accum_steps != self.global_batch:
            raise PaddlefitError(f"{batch_size} x {devices} devices x {grad_accum_steps} accumulation is not the "
                                 f"checkpoint's global batch {self.global_batch}.")  # fmt: skip
        steps_in_epoch = self.batch_in_epoch // self.grad_accum_steps
        return replace(self, batch_size=batch_size, devices=devices, grad_accum_steps=grad_accum_steps,
                       batch_in_epoch=steps_in_epoch * grad_accum_steps,
                       micro_batch_split=self.micro_batch_split if batch_size == self.batch_size else 1)  # fmt: skip


def kept_accumulation(state: TrainerState, where: str, devices: int, batch_size: int) -> int:
    """The gradient accumulation that keeps checkpoint ``state``'s global batch B on ``devices`` devices at
    micro-batch ``batch_size``: B / (devices x batch_size).

    Raises:
        PaddlefitError: B is not a whole multiple of devices x batch_size; the message names the micro-batches
            that work on ``devices`` devices and the device counts that work with ``batch_size``.
    """
    b = state.global_batch
    if b % (devices * batch_size) == 0:
        return b // (devices * batch_size)

    def divisors(n: int) -> list[int]:
        return [d for d in range(1, min(n, 4096) + 1) if n % d == 0][:12]

    def listed(n: int) -> str:
        return ", ".join(map(str, divisors(b // n))) if b % n == 0 else f"none ({b} is not divisible by {n})"

    micro, counts = listed(devices), listed(batch_size)
    raise PaddlefitError(
        f"checkpoint {where} was trained with global batch {b} ({state.batch_size} x {state.devices} devices x "
        f"{state.grad_accum_steps} accumulation); {devices} device(s) x micro-batch {batch_size} cannot keep it ({b} "
        f"is not a multiple of {devices * batch_size}). Micro-batches (`batch_size` in the job spec) that keep it "
        f"on {devices} device(s): {micro}; device counts (`--devices`) that keep it at micro-batch {batch_size}: "
        f"{counts}. Or start fresh with `--resume never`.")  # fmt: skip


def spec_keeping_global_batch(spec: Any, path: Path, world: int, log: Callable[[str], None]) -> tuple[Any, bool]:
    """``spec`` (a :class:`~paddlefit.spec.JobSpec`) with the gradient accumulation that keeps checkpoint
    ``path``'s global batch on ``world`` devices at ``spec.batch_size`` (:func:`kept_accumulation`), logged when it
    changes; set before the job is built, as its sampler and steps per epoch follow it.

    Returns:
        (the spec to build, whether its accumulation was changed).

    Raises:
        PaddlefitError: the global batch cannot be kept, or ``trainer.json`` is malformed.
        CheckpointError: ``trainer.json`` cannot be read.
    """
    ckpt = read_state(path)
    accum = kept_accumulation(ckpt, str(path), world, spec.batch_size)
    if accum == spec.grad_accum_steps:
        return spec, False
    log(f"resuming {path.name}: global batch {ckpt.global_batch} kept with {world} device(s) x micro-batch "
        f"{spec.batch_size} x gradient accumulation {accum} (the checkpoint's run: {ckpt.batch_size} x "
        f"{ckpt.devices} x {ckpt.grad_accum_steps}; this spec: {spec.grad_accum_steps})"
        + ("; the epoch continues with the samples it has not seen, but a run resumed on another device count is "
           "not bit-identical to an uninterrupted one (gradients are summed in another order)"
           if ckpt.devices != world else ""))  # fmt: skip
    return spec.model_copy(update={"grad_accum_steps": accum}), True


def read_state(path: Path) -> TrainerState:
    """``path``'s ``trainer.json`` (a verified checkpoint directory).

    Raises:
        PaddlefitError: the file is malformed (:meth:`TrainerState.from_json`).
        CheckpointError: it cannot be read.
    """
    try:
        data = read_json_limited(path / TRAINER_FILE, "checkpoint file", limit=1 << 20)
    except InputFileError as exc:
        raise CheckpointError(f"checkpoint {path}: trainer.json cannot be read ({first_line(exc, 200)}); pass "
                              "another `--resume` checkpoint or start fresh with `--resume never`.") from None
    return TrainerState.from_json(data, str(path))


def save_checkpoint(store: CheckpointStore, state: TrainerState, model: Any, optimizer: Any,
                    meta: dict[str, Any], keep_existing: bool = True) -> tuple[Path, float]:  # fmt: skip
    """Write a checkpoint of ``state.step`` through ``store`` (atomic: a temporary directory, fsync'd, renamed);
    ``keep_existing``: see :meth:`CheckpointStore.save`.

    Returns:
        (the checkpoint directory, seconds the write took).

    Raises:
        CheckpointError: the write failed (disk full, unwritable run directory).
    """
    import paddle

    def write(tmp: Path) -> None:
        paddle.save(model.state_dict(), str(tmp / MODEL_FILE))
        paddle.save(optimizer.state_dict(), str(tmp / OPTIMIZER_FILE))
        (tmp / TRAINER_FILE).write_text(json.dumps(state.to_json(), indent=1), encoding="utf-8")
        (tmp / RNG_FILE).write_text(json.dumps(capture_rng()), encoding="utf-8")

    t0 = time.monotonic()
    path = store.save(state.step, write, meta=meta, keep_existing=keep_existing)
    return path, time.monotonic() - t0


def load_checkpoint(path: Path, check: Callable[[TrainerState], None], model: Any, optimizer: Any, schedule: Any,
                    scaler: Any, model_name: str, trust: bool = False) -> TrainerState:  # fmt: skip
    """Read ``path``'s state, pass it to ``check`` (which raises if the job cannot continue from it), then restore
    the model, optimizer, LR schedule, GradScaler and RNG states in place. ``trust``: the user vouched for the
    checkpoint (``--trust-checkpoint``), so a pickled ``rng.pkl`` of an earlier version may be read.

    Raises:
        PaddlefitError: from ``check``; the weights do not match the model (missing/unexpected keys); a legacy
            ``rng.pkl`` without ``trust`` (:func:`~paddlefit.train.rngstate.read_rng`).
        CheckpointError: any other failure, naming the checkpoint.
    """
    import paddle

    try:
        state = read_state(path)
        check(state)
        rng = read_rng(path, trust)  # before paddle.load: of a refused checkpoint nothing is unpickled
        missing, unexpected = model.set_state_dict(paddle.load(str(path / MODEL_FILE)))
        if missing or unexpected:
            raise PaddlefitError(f"checkpoint {path} does not match `model: {model_name}` (missing "
                                 f"{list(missing)[:3]}, unexpected {list(unexpected)[:3]}); pass another `--resume` "
                                 "checkpoint or start fresh with `--resume never`.")  # fmt: skip
        optimizer.set_state_dict(paddle.load(str(path / OPTIMIZER_FILE)))
        schedule.set_state_dict(state.scheduler)
        if scaler is not None and state.scaler:
            scaler.load_state_dict(state.scaler)
        restore_rng(rng, str(path))
    except PaddlefitError:
        raise
    except Exception as exc:
        raise CheckpointError(f"checkpoint {path} cannot be loaded into this job ({type(exc).__name__}: "
                              f"{first_line(exc, 200)}); is it from another model or paddlefit version? Pass "
                              "another `--resume` checkpoint or start fresh with `--resume never`.") from None
    return state


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
        for path in store.list():
            if (problem := _unusable(path, store.root, trust)) is None:
                return path
            log(f"warning: skipping checkpoint {path.name}: {problem}; the one before it is tried")
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
        return (f"{outside}, outside this run's checkpoints: loading a checkpoint runs code from it; if you trust "
                f"it, pass `--resume {path} --trust-checkpoint`")  # fmt: skip
    try:
        TrainerState.from_json(read_json_limited(path / TRAINER_FILE, "checkpoint file", limit=1 << 20), str(path))
        if (path / RNG_FILE).is_file():
            read_json_limited(path / RNG_FILE, "checkpoint file", limit=1 << 20)
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
        "trust where it came from, add `--trust-checkpoint`; else start fresh with `--resume never`.")  # fmt: skip


def agree_on_resume(mode: str, store: CheckpointStore, world: int, is_writer: bool,
                    log: Callable[[str], None], trust: bool = False) -> Path | None:  # fmt: skip
    """Rank 0 chooses (:func:`choose_resume`); its choice is broadcast so every rank loads the same checkpoint: the
    step of the store's ``step-N`` for ``auto``, else only whether to resume (a ``--resume PATH`` may have any
    directory name, ``best/``; every rank reads ``PATH``)."""
    path = choose_resume(mode, store, log, trust) if is_writer or world == 1 else None
    if world == 1:
        return path
    import paddle

    chosen = -1 if path is None else int(path.name.split("-")[1]) if mode == "auto" else 0
    t = paddle.to_tensor([chosen], dtype="int64")
    paddle.distributed.broadcast(t, src=0)
    step = int(t.item())
    if step < 0:
        return None
    if path is not None:
        return path
    return store.path_for(step) if mode == "auto" else Path(mode)
