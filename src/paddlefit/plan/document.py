"""The sections of the plan document (``paddlefit plan --json``) as frozen values: the model, its memory, the
recommendation, the assumptions and a row's runs correction. :meth:`Section.to_dict` is their serialisation, in
the order of the fields (the document's key order, which users and the ``cost``, ``report``, ``predict`` and
``runs`` commands read).

A section also reads like the dict it serialises to (``plan.model["name"]``, ``plan.memory.get("notes")``), for the
readers of the document written before it was typed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = [
    "CpuFp32Memory",
    "MemorySection",
    "ModelSection",
    "PhaseFitDoc",
    "PlanAssumptions",
    "Recommendation",
    "RunsCorrection",
    "Section",
]


def as_document(value: Any) -> Any:
    """``value`` as JSON data: a :class:`Section` as its dict, tuples as lists, dicts and lists item by item."""
    if isinstance(value, Section):
        return value.to_dict()
    if isinstance(value, list | tuple):
        return [as_document(v) for v in value]
    if isinstance(value, dict):
        return {k: as_document(v) for k, v in value.items()}
    return value


class Section:
    """A frozen dataclass of the plan document: :meth:`to_dict` serialises it (fields in order), and it reads like
    that dict (``section["key"]``, :meth:`get`)."""

    def to_dict(self) -> dict[str, Any]:
        """The section as the JSON object of the document (its fields in order; tuples as lists)."""
        return {f.name: as_document(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]

    def __getitem__(self, key: str) -> Any:
        """The document's value of ``key``.

        Raises:
            KeyError: ``key`` is not a field of the section.
        """
        return self.to_dict()[key]

    def get(self, key: str, default: Any = None) -> Any:
        """The document's value of ``key``, ``default`` when the section has no such field."""
        return self.to_dict().get(key, default)


@dataclass(frozen=True)
class ModelSection(Section):
    """The plan document's ``model``: name, parameter counts, FLOPs per sample of the forward and of a training
    step (the probe's count or the closed form), the loss and label trained with, and Paddle's GPU-only ops the
    probe ran paddlefit's CPU references for (:mod:`paddlefit.probe.fused_ref`)."""

    name: str
    params: int
    trainable_params: int
    forward_flops_per_sample: float
    train_flops_per_sample: float
    loss: str
    label: str | None
    gpu_only_ops: tuple[str, ...]


@dataclass(frozen=True)
class PhaseFitDoc(Section):
    """One phase's line of the memory section: ``fixed_bytes`` + ``per_sample_bytes`` x batch."""

    fixed_bytes: float
    per_sample_bytes: float


@dataclass(frozen=True)
class CpuFp32Memory(Section):
    """The memory section's ``cpu_fp32``: fp32 model states, activations per sample and the rest of the CPU peak at
    the batch (workspace and temporaries, some of which grow with the batch: ``fixed_bytes``), bytes."""

    weights_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    activation_bytes_per_sample: float
    fixed_bytes: float


@dataclass(frozen=True)
class MemorySection(Section):
    """The plan document's ``memory``: how it was measured (``cpu-probe`` or ``analytic-transformer``), the model
    states of the request's precision, its activations per sample and fixed bytes (the AMP ratio and cast weights
    applied, + the conv workspace), the fp32 CPU figures, the dominant phase, each phase's fit and peak at the batch
    (bytes), the eval batch, the probe's batches and worst relative residual, the model section's notes and the
    paddle.LazyGuard failure."""

    method: str
    weights_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    activation_bytes_per_sample: float
    fixed_bytes: float
    precision_of_breakdown: str
    cpu_fp32: CpuFp32Memory
    dominant_phase: str
    phases: dict[str, PhaseFitDoc]
    phase_peak_bytes: dict[str, float]
    eval_batch_size: int
    probe_batch_sizes: tuple[int, ...]
    probe_max_rel_residual: float | None
    notes: tuple[str, ...]
    lazy_build_failure: str | None


@dataclass(frozen=True)
class Recommendation(Section):
    """The plan's recommendation (:func:`~paddlefit.plan.rows.recommend`): the row to use (None: no fit), why,
    the smallest card that fits and the tie-break said (empty when none)."""

    target: str | None
    reason: str
    smallest_fit: str | None
    tie_break: str


@dataclass(frozen=True)
class PlanAssumptions(Section):
    """The plan document's ``assumptions``: what every row took as given. Fractions, bytes, seconds.

    ``safety_margin``: the fraction of the usable memory a peak may fill; ``tf32``/``tf32_means``: Paddle's TF32
    switch and what it means; ``amp_activation_factor``/``amp_cast_weight_bytes``: the AMP activation ratio and O1's
    cast weights (:func:`~paddlefit.plan.rows.amp_activation_memory`); ``cuda_context_bytes`` and
    ``conv_workspace_bytes`` (:mod:`paddlefit.plan.rows`); ``gpu_model``, its parameters (``gpu_model_params``, by
    generation, and their source file); ``trace_ops``: ops of the timed forward; ``attention`` and
    ``flash_attention_blocks``; ``trace_source``; ``allreduce``: the all-reduce model; the host floor's constants
    (``host_op_s``, ``host_optimizer_s_per_tensor``, ``host_step_s``), its value ``host_floor_s`` and formula
    ``host_floor`` (:func:`~paddlefit.estimate.timing.host_floor_s`); the CPU probe's threads and step seconds per
    thread count (None and empty on the analytic path); ``OMP_WAIT_POLICY``; what ``batch_size`` is."""

    safety_margin: float
    tf32: bool
    tf32_means: str
    amp_activation_factor: float
    amp_cast_weight_bytes: float
    cuda_context_bytes: int
    conv_workspace_bytes: int
    gpu_model: str
    gpu_model_params: dict[str, float]
    gpu_model_params_by_generation: dict[str, dict[str, float]]
    gpu_model_params_source: str
    trace_ops: int
    attention: str
    flash_attention_blocks: int
    trace_source: str
    allreduce: str
    host_op_s: float
    host_optimizer_s_per_tensor: float
    host_step_s: float
    host_floor_s: float
    host_floor: str
    cpu_threads: int | None
    cpu_thread_step_s: dict[str, float]
    omp_wait_policy: str | None
    batch_size_is: str


@dataclass(frozen=True)
class RunsCorrection(Section):
    """A step-time correction fitted on ``n`` recorded runs of one device
    (:func:`~paddlefit.plan.runs_calibration.fit_correction`): a row's ``runs_calibration`` in the plan document
    (:meth:`Section.to_dict`, the fields in order).

    Attributes:
        device: catalog GPU name or ``cpu``.
        n: runs fitted; ``same_model``: they are all of the planned model.
        factor: multiplies the predicted step time (1.2 = runs took 20 % longer than predicted).
        residuals_before, residuals_after: ``predicted / measured - 1`` of each run, before and after the factor.
        run_ids: the registry ids of the runs.
        uncalibrated_step_s: the model's step time before the factor, seconds (given by
            :func:`~paddlefit.plan.runs_calibration.apply_runs`).
    """

    device: str
    n: int
    factor: float
    same_model: bool
    residuals_before: list[float] = field(default_factory=list)
    residuals_after: list[float] = field(default_factory=list)
    run_ids: list[int] = field(default_factory=list)
    uncalibrated_step_s: float | None = None

    @property
    def label(self) -> str:
        """The plan's ``calibration`` value: ``runs (n=K)``."""
        return f"runs (n={self.n})"

    def note(self) -> str:
        """One line for the plan's notes: factor, which runs, median |residual| before -> after."""
        med = _median_abs
        return (
            f"calibration: runs (n={self.n}{', same model' if self.same_model else ', other models'}): step "
            f"time x {self.factor:.3f}; median |predicted/measured - 1| over those runs "
            f"{med(self.residuals_before):.0%} -> {med(self.residuals_after):.0%} (`--no-runs` turns it off)"
        )


def _median_abs(values: list[float]) -> float:
    v = sorted(abs(x) for x in values)
    if not v:
        return math.nan
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2
