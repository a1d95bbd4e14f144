"""The trainer's state in a checkpoint: a typed ``trainer.json`` (:class:`TrainerState`), and the gradient
accumulation that keeps a checkpoint's global batch on another layout.

A checkpoint directory (written atomically by :class:`paddlefit.train.checkpoint.CheckpointStore`) holds
``model.pdparams`` and ``optimizer.pdopt`` (``paddle.save``), ``trainer.json`` (:class:`TrainerState`) and
``rng.json`` (Python, NumPy and Paddle generator states, :mod:`paddlefit.train.rngstate`; no pickle), each listed
with its sha256 in the store's manifest. Saving, loading, choosing and agreeing on a checkpoint:
:mod:`paddlefit.train.checkpoint`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from paddlefit.errors import PaddlefitError
from paddlefit.estimate.perf_params import is_finite_number
from paddlefit.train.oom import Split

__all__ = ["TrainerState", "kept_accumulation"]


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
            raise PaddlefitError(
                f"{where}: trainer.json lacks global_batch/batch_size/devices/grad_accum_steps/seed; "
                "pass another checkpoint."
            )
        known = {f.name for f in fields(cls)}
        state = cls(**{k: v for k, v in data.items() if k in known})
        for name in (
            "global_batch",
            "batch_size",
            "devices",
            "grad_accum_steps",
            "seed",
            "step",
            "epoch",
            "batch_in_epoch",
        ):
            v = getattr(state, name)
            if not isinstance(v, int) or isinstance(v, bool):
                raise PaddlefitError(
                    f"{where}: trainer.json `{name}` is {v!r}, not an integer; pass another checkpoint."
                )
        if not isinstance(state.totals, dict) or not isinstance(state.scheduler, dict):
            raise PaddlefitError(
                f"{where}: trainer.json `totals`/`scheduler` are not objects; pass another checkpoint."
            )
        _check_scheduler(state.scheduler, where)
        ts = state.total_steps
        if ts is not None and (not isinstance(ts, int) or isinstance(ts, bool) or ts < 0):
            raise PaddlefitError(
                f"{where}: trainer.json `total_steps` is {ts!r}, not an integer >= 0; pass another checkpoint."
            )
        for key, v in state.totals.items():
            if not is_finite_number(v) or v < 0:
                raise PaddlefitError(
                    f"{where}: trainer.json `totals.{key}` is {v!r}, not a finite number >= 0; pass another checkpoint."
                )
        if state.last_loss is not None and not is_finite_number(state.last_loss):
            raise PaddlefitError(
                f"{where}: trainer.json `last_loss` is {state.last_loss!r}, not a finite number; "
                "pass another checkpoint."
            )
        state.check_layout(where)
        return state

    def check_fits(self, where: str, *, global_batch: int, batch_size: int, steps_per_epoch: int) -> None:
        """Whether this state can continue a job of ``global_batch`` samples per step, ``batch_size`` per loaded
        batch and ``steps_per_epoch`` optimizer steps per epoch (:func:`paddlefit.job.length.steps_per_epoch`, which
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
                "the global batch or start fresh with `--resume never --overwrite`."
            )
        self.check_layout(where)
        accum = self.grad_accum_steps
        if (
            self.step < 0
            or self.epoch < 0
            or not 0 <= self.batch_in_epoch <= steps_per_epoch * accum
            or self.batch_in_epoch % accum != 0
            or self.step != self.epoch * steps_per_epoch + self.batch_in_epoch // accum
        ):
            raise PaddlefitError(
                f"checkpoint {where}: trainer.json position (step {self.step}, epoch {self.epoch}, "
                f"micro-batch {self.batch_in_epoch}) is impossible for this job ({steps_per_epoch} "
                "steps per epoch); pass another checkpoint."
            )
        if not Split.valid_ways(self.micro_batch_split, self.batch_size):
            raise PaddlefitError(
                f"checkpoint {where}: trainer.json micro_batch_split {self.micro_batch_split!r} is "
                "not a power of 2 up to 2 x batch_size; pass another checkpoint."
            )

    def check_layout(self, where: str) -> None:
        """``batch_size``, ``devices`` and ``grad_accum_steps`` are >= 1 and multiply to ``global_batch``.

        Raises:
            PaddlefitError: naming the checkpoint ``where`` and the four values.
        """
        layout = (self.batch_size, self.devices, self.grad_accum_steps)
        if min(layout) < 1 or math.prod(layout) != self.global_batch:
            raise PaddlefitError(
                f"checkpoint {where}: trainer.json global_batch {self.global_batch} is not batch_size "
                f"x devices x grad_accum_steps {layout}; pass another checkpoint."
            )

    def in_layout(self, batch_size: int, devices: int, grad_accum_steps: int) -> TrainerState:
        """This state (at a step boundary, :meth:`check_fits` passed) as a run of ``devices`` devices x
        ``batch_size`` x ``grad_accum_steps`` with the same global batch continues it: the epoch's steps done are
        kept, counted in the new layout's loaded batches; an out-of-memory split is kept only for the same
        micro-batch (another micro-batch starts unsplit and backs off again if it must).

        Raises:
            PaddlefitError: the layout's global batch is not this state's.
        """
        if batch_size * devices * grad_accum_steps != self.global_batch:
            raise PaddlefitError(
                f"{batch_size} x {devices} devices x {grad_accum_steps} accumulation is not the "
                f"checkpoint's global batch {self.global_batch}."
            )
        steps_in_epoch = self.batch_in_epoch // self.grad_accum_steps
        return replace(
            self,
            batch_size=batch_size,
            devices=devices,
            grad_accum_steps=grad_accum_steps,
            batch_in_epoch=steps_in_epoch * grad_accum_steps,
            micro_batch_split=self.micro_batch_split if batch_size == self.batch_size else 1,
        )


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
        f"{counts}. Or start fresh with `--resume never --overwrite`."
    )


def _check_scheduler(doc: dict[str, Any], where: str, prefix: str = "scheduler") -> None:
    """A ``paddle.optimizer.lr.LRScheduler.state_dict()`` as trainer.json holds it: ``last_epoch`` an integer,
    ``last_lr`` and any other value a finite number, one nested scheduler (``LinearWarmup_LR``) checked the same.

    Raises:
        PaddlefitError: a value of another type, named with its key (``scheduler.last_epoch``).
    """
    for key, v in doc.items():
        name = f"{prefix}.{key}"
        if isinstance(v, dict) and prefix == "scheduler":
            _check_scheduler(v, where, name)
        elif key == "last_epoch" and (not isinstance(v, int) or isinstance(v, bool) or v < -1):
            raise PaddlefitError(
                f"{where}: trainer.json `{name}` is {v!r}, not an integer >= -1 (Paddle's LR "
                "schedulers start at -1); pass another checkpoint."
            )
        elif key != "last_epoch" and not is_finite_number(v):
            raise PaddlefitError(
                f"{where}: trainer.json `{name}` is {v!r}, not a finite number; pass another checkpoint."
            )
