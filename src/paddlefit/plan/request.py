"""What ``paddlefit plan`` takes and gives: :class:`PlanRequest` (validates itself), :class:`Target`, :class:`Plan`;
the job-length limits ``plan`` and ``cost`` share (:func:`check_job_length`)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from paddlefit import options
from paddlefit.catalog.gpus import GPU, get_gpu, load_gpus, resolve_gpus
from paddlefit.errors import PaddlefitError, UnknownNameError
from paddlefit.jobspec.inputs import InputSpec
from paddlefit.jobspec.optimizers import OptimizerSettings
from paddlefit.jobspec.spec import OptimizerName, Precision
from paddlefit.plan.document import (
    MemorySection,
    ModelSection,
    PlanAssumptions,
    Recommendation,
    RunsCorrection,
    as_document,
)
from paddlefit.units import GIB
from paddlefit.validation import RequestModel

#: Fraction of a device's memory a peak may use and still "fit" (policy: 10% left for allocator fragmentation and
#: what the model does not measure).
DEFAULT_SAFETY_MARGIN = options.SAFETY_MARGIN.default
#: Default wall-clock limit of the CPU probe's child process, seconds (policy: a probe of a model near the probe's
#: size limit, 0.5e9 parameters, runs for minutes on 2 cores; a probe deadlocked by its inputs is ended
#: after this).
DEFAULT_PROBE_TIMEOUT_S = options.PROBE_TIMEOUT.shown["timeout"]
#: Step times or costs within this factor of the best tie (below the model's resolution), in every
#: ranking that then prefers headroom or the smaller choice: plan's GPUs, cost's instances, the LLM planner's
#: layouts.
TIE_FACTOR = 1.01


#: Largest probe memory limit accepted, bytes: 1 PiB, far above any machine's RAM and within what ``setrlimit``
#: takes (a C long); a typo such as ``--probe-memory-gib 1e30`` stops here instead of in the probe's process.
MAX_PROBE_MEMORY_BYTES = 2**50


class PlanRequest(RequestModel):
    """Everything ``paddlefit plan`` takes; each field's meaning is its ``description``.

    Raises (when built):
        PaddlefitError: a field of the wrong type or out of range (named by its option: ``--batch-size`` for
            ``batch_size``), ``dataset_size`` without ``epochs``, a job length past cost's limits, or an
            ``explain`` GPU that is unknown or not among ``gpus``.
        UnknownNameError: an unknown name in ``gpus`` when ``explain`` is given.
    """

    model: str = Field(
        description="Zoo name or ``package.module:factory``.", json_schema_extra=options.MODEL_ARG.field()
    )
    batch_size: int = Field(
        options.BATCH_SIZE.shown["train"],
        description="Per-device micro-batch, samples.",
        **options.BATCH_SIZE.bounds,
        json_schema_extra=options.BATCH_SIZE.field(),
    )
    inputs: list[InputSpec] | None = Field(
        None, description="Per-sample input specs; None = the zoo default.", json_schema_extra=options.INPUT.field()
    )
    model_args: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments of the model factory.")
    optimizer: OptimizerName = Field(
        OptimizerName(options.OPTIMIZER.shown["train"]),
        description="See :mod:`paddlefit.jobspec.spec`.",
        json_schema_extra=options.OPTIMIZER.field(),
    )
    lr: float = Field(
        1e-3,
        gt=0,
        description="The job's learning rate (``lr``): the probe's optimizer is the job's "
        "(:meth:`optimizer_settings`).",
    )
    weight_decay: float | None = Field(
        None,
        ge=0,
        description="The job's ``weight_decay`` (None = the optimizer's default: AdamW 0.01, the others none).",
    )
    lazy_mode: bool = Field(False, description="The job's ``lazy_mode`` (Adam/AdamW).")
    precision: Precision = Field(
        Precision(options.PRECISION.shown["train"]),
        description="See :mod:`paddlefit.jobspec.spec`.",
        json_schema_extra=options.PRECISION.field(),
    )
    attention: Literal["eager", "flash"] = Field(
        "eager",
        description=(
            "``eager`` (the model as written) or ``flash``: GPU rows (CC 8.0+, fp16/bf16) run each eager attention "
            "core of the trace as one flash-attention kernel (:func:`~paddlefit.estimate.fused.flash_trace`), time and "
            "activation memory; the CPU row stays the measurement. ``plan --flash-attention`` sets flash."
        ),
    )
    tf32: bool = Field(
        True,
        description=(
            "Paddle's TF32 switches are on (its default): fp32 GEMMs/convs run on TF32 tensor cores where a GPU has "
            "them; False (the job's ``tf32: false``, ``--no-tf32``) times them on the FP32 CUDA cores."
        ),
        json_schema_extra=options.TF32.field(),
    )
    gpus: list[str] = Field(
        default_factory=list,
        description="Restrict GPU targets to these names (empty = the whole catalog, unless ``cpu_only``).",
        json_schema_extra=options.GPU.field(),
    )
    devices: int = Field(
        1,
        description="Data-parallel GPUs per target (all-reduce added when > 1).",
        **options.DEVICES.bounds,
        json_schema_extra=options.DEVICES.field(),
    )
    dataset_size: int | None = Field(
        None,
        description="Samples per epoch, for the time to train.",
        **options.DATASET_SIZE.bounds,
        json_schema_extra=options.DATASET_SIZE.field(),
    )
    epochs: float | None = Field(
        None,
        description="Epochs, for the time to train.",
        **options.EPOCHS.bounds,
        json_schema_extra=options.EPOCHS.field(),
    )
    catalog_files: list[str] = Field(
        default_factory=list, description="User GPU catalog files.", json_schema_extra=options.CATALOG.field()
    )
    calibration_files: list[str] = Field(
        default_factory=list, description="User calibration files.", json_schema_extra=options.CALIBRATION.field()
    )
    safety_margin: float = Field(
        DEFAULT_SAFETY_MARGIN,
        description=(
            'Fraction of capacity a peak may use and still "fit" (policy, default 0.9, leaving 10% for allocator '
            "fragmentation and the unmeasured)."
        ),
        **options.SAFETY_MARGIN.bounds,
        json_schema_extra=options.SAFETY_MARGIN.field(),
    )
    probe_batch_sizes: tuple[int, ...] = Field(
        (1, 2, 3),
        description=(
            "The CPU probe's first batch sizes; it adds 6, 12, 24... up to ``batch_size`` while the estimated extra "
            "probe time stays within ``probe_budget_s``."
        ),
    )
    probe_budget_s: float = Field(
        6.0,
        description=(
            "Extra probe time allowed, seconds: the larger batches it adds and the timing of other thread counts."
        ),
    )
    max_probe_bytes: int | None = Field(
        None,
        description=(
            "Probe only if fp32 Adam model states (16 B/param) stay under this, bytes; None = min(25% of RAM, 8 GiB)."
        ),
    )
    probe_timeout_s: float = Field(
        DEFAULT_PROBE_TIMEOUT_S,
        gt=0,
        le=7 * 86400,
        description=(
            "Wall-clock seconds the CPU probe's child process may take (``--probe-timeout``); past it the child is "
            "killed and the plan fails naming the model and inputs (:mod:`paddlefit.probe.task`)."
        ),
        json_schema_extra=options.PROBE_TIMEOUT.field(),
    )
    probe_memory_bytes: int | None = Field(
        None,
        description=(
            "Private writable memory (``RLIMIT_DATA``, the child's VmData) the CPU probe's child process may use, "
            "bytes (``--probe-memory-gib``); None = 90% of the RAM available when the probe starts."
        ),
    )
    explain: list[str] = Field(
        default_factory=list,
        description=(
            "GPU names whose predicted top kernels go into ``Plan.explain`` (``plan --explain GPU``); a name that is "
            "not among the planned GPUs is an error (checked on construction, before the probe)."
        ),
        json_schema_extra=options.EXPLAIN.field(),
    )
    label: InputSpec | None = Field(
        None,
        description="The job's label spec (None = from data or generated).",
        json_schema_extra=options.LABEL.field(),
    )
    label_arg: str | None = Field(
        None,
        description="The forward keyword that receives the label (:mod:`paddlefit.models.calling`).",
        json_schema_extra=options.LABEL_ARG.field(),
    )
    loss: str | None = Field(
        None, description="The job's loss (None = ``cross_entropy``).", json_schema_extra=options.LOSS.field()
    )
    loss_strict: bool = Field(
        False,
        description="The loss is the job's (a job spec or ``--loss``): an output it "
        "cannot take is an error rather than planned with a proxy loss.",
    )
    eval_batch_size: int | None = Field(
        None,
        description="Samples per evaluation forward (None = ``batch_size``).",
        **options.EVAL_BATCH_SIZE.bounds,
        json_schema_extra=options.EVAL_BATCH_SIZE.field(),
    )
    cpu_threads: int | None = Field(
        None,
        description="The job's Paddle CPU threads (None = every core, as "
        "``train`` on one device); the CPU row's time is measured with it.",
    )
    time_threads: bool = Field(True, description="Also time 1, cores/2 and all cores and say which is fastest.")
    loader_prefetch: int = Field(
        0,
        description=(
            "Batches Paddle's single-process DataLoader holds besides the one in use: its blocking queue's capacity, "
            "``prefetch_factor`` x places (``python/paddle/io/dataloader/dataloader_iter.py``), plus the 2 of the "
            "double-buffering ``BufferedReader`` behind ``use_buffer_reader=True`` (measured: train's peak for "
            "PP-LCNet at batch 32 was 4.00 batches of 393,472 bytes above the probe's with the default prefetch_factor "
            "2); added to every phase as input + label bytes x batch (0: no DataLoader, or worker processes, whose "
            "batches live in shared memory)."
        ),
    )
    eval_prefetch: int = Field(
        0, description="The same as ``loader_prefetch`` for the eval loader, added to the eval phase at the eval batch."
    )
    eval_held: int = Field(
        0,
        description=(
            "Training batches the train loader still holds during an evaluation (a run stopped mid-epoch by "
            "``max_steps`` evaluates with the train queue full, and its last batch; measured on PP-LCNet: 5), added to "
            "the eval phase at the training batch."
        ),
    )
    sample: Any = Field(
        None,
        description="The first sample of the job's ``data.train`` (probe batches are copies of it); None = synthetic.",
    )
    eval_phase: bool = Field(
        True,
        description="The job evaluates (a job spec without ``data.eval`` does not): the "
        "probe measures the eval forward and it counts in the peak.",
    )
    probe_requested: bool = Field(
        True,
        description="The probe may also run the requested batch when its time "
        "budget allows (False keeps the plan's own row an extrapolation, as "
        "``bench/memory_accuracy.py`` checks).",
    )
    cpu_only: bool = Field(
        False, description="Plan the CPU row only (no GPU targets; ``train``'s prediction for a CPU run)."
    )
    use_runs: bool = Field(
        True,
        description="Correct each device's step time by the run registry's measured runs "
        "(:mod:`paddlefit.plan.runs_calibration`; ``--no-runs`` turns it off).",
    )

    OPTIONS: ClassVar[dict[str, str]] = {
        "attention": "attention",
        "lr": "lr",
        "weight_decay": "weight_decay",
        "lazy_mode": "lazy_mode",
    }

    @field_validator("max_probe_bytes")
    @classmethod
    def _probe_limit(cls, v: int | None) -> int | None:
        """A limit of at least one byte (the option is in GiB)."""
        if v is not None and v < 1:
            raise PaddlefitError(f"`--max-probe-gib` must be a finite number > 0 (got {v / GIB:g}).")
        return v

    @field_validator("probe_memory_bytes")
    @classmethod
    def _probe_memory(cls, v: int | None) -> int | None:
        """At least one byte and at most :data:`MAX_PROBE_MEMORY_BYTES` (the option is in GiB)."""
        if v is not None and not 1 <= v <= MAX_PROBE_MEMORY_BYTES:
            bound = f"a finite number > 0 and at most {MAX_PROBE_MEMORY_BYTES // GIB:,}"
            raise PaddlefitError(f"`--probe-memory-gib` must be {bound} (got {v / GIB:g}).")
        return v

    def optimizer_settings(self) -> OptimizerSettings:
        """The job's optimizer (:func:`paddlefit.jobspec.optimizers.make_optimizer` builds it, for the probe and for
        ``train``): name, ``lr``, ``weight_decay``, ``lazy_mode``, master weights under an O2 precision."""
        o2 = self.precision.level == "O2"
        return OptimizerSettings(self.optimizer, self.lr, self.weight_decay, self.lazy_mode, o2)

    @model_validator(mode="after")
    def _consistent(self) -> PlanRequest:
        """The checks across fields: the job length (:func:`check_job_length`), ``explain`` among ``gpus``."""
        if (self.dataset_size is None) != (self.epochs is None):
            raise PaddlefitError("`--dataset-size` and `--epochs` go together; give both or neither.")
        if self.dataset_size is not None:
            check_job_length(self.dataset_size, self.epochs)  # type: ignore[arg-type]
        if self.explain:
            check_explain(self.explain, self.gpus, load_gpus(self.catalog_files))
        return self


#: Largest job length ``plan`` and ``cost`` accept: samples per epoch and epochs (beyond them the numbers mean
#: nothing).
MAX_DATASET_SIZE = 10**13
MAX_EPOCHS = 1e6


def check_job_length(dataset_size: int, epochs: float) -> None:
    """``dataset_size`` in 1..:data:`MAX_DATASET_SIZE` samples, ``epochs`` finite in (0, :data:`MAX_EPOCHS`].

    Raises:
        PaddlefitError: naming ``--dataset-size`` and ``--epochs``.
    """
    if not 1 <= dataset_size <= MAX_DATASET_SIZE or not math.isfinite(epochs) or not 0 < epochs <= MAX_EPOCHS:
        raise PaddlefitError(
            f"`--dataset-size` must be 1..1e13 and `--epochs` a number in (0, 1e6] (got {dataset_size:g}, {epochs:g})."
        )


@dataclass(frozen=True)
class Target:
    """One row of the plan (a device). Bytes, seconds, samples/s.

    ``grads_bytes`` is what a data-parallel step all-reduces (gradients in the precision the device trains in);
    ``checkpoint_bytes`` is what a checkpoint holds (weights + optimizer states, incl. fp32 master weights under O2).
    ``calibration`` says what the row's time rests on: ``device`` (measured on this device: the CPU probe, or a
    ``paddlefit calibrate`` file with kernel timings for this GPU), ``published-fit`` (the per-operator model
    with parameters fitted on published measurements), ``uncalibrated`` (a Kunlunxin XPU row: the CUDA-fitted
    model applied to its datasheet figures, no measurement of any XPU behind it) or ``none`` (not predicted).
    ``calibrated`` is ``calibration == "device"`` (kept for older readers). ``time_breakdown`` maps op classes to
    predicted device seconds (``seconds``, ``bound``: compute or memory, ``kernels``), plus ``allreduce_exposed``;
    the step is max(sum of the classes, the host floor) + the exposed all-reduce. ``predicted_mfu`` is the model FLOPs
    per step / step time / the dense peak of the precision's unit (PaLM, Chowdhery et al. 2022, appendix B).
    ``allreduce_s`` is the whole gradient all-reduce, ``allreduce_exposed_s`` the part the backward does not hide.
    ``runs_calibration``: the correction fitted on this machine's recorded runs of the device
    (:class:`~paddlefit.plan.runs_calibration.RunsCorrection`; ``calibration`` is then ``runs (n=K)``; the step
    time, samples/s and MFU are corrected, ``time_breakdown`` is the model's, uncorrected).
    ``speed_lower_bound``: the catalog lacks the card's peak for the precision (:meth:`GPU.missing_peak`), so the
    row is timed at a slower unit's: its samples/s is a lower bound, its MFU unknown (None), and the recommendation
    does not rank it.
    ``peak_unit`` / ``peak_flops``: the compute unit the precision's GEMMs run on there (``fp16 tensor``, ``tf32
    tensor``, ``fp32``...: :func:`~paddlefit.catalog.units.unit_label`) and its dense peak, FLOP/s, from the catalog
    (:meth:`GPU.peak_flops`): the peak ``predicted_mfu`` divides by; None on the CPU row.
    """

    name: str
    kind: str
    fits: bool
    peak_bytes: int
    capacity_bytes: int
    max_batch_size: int | None
    step_time_s: float
    samples_per_s: float
    calibrated: bool
    notes: tuple[str, ...] = ()
    bound: str | None = None
    allreduce_s: float = 0.0
    time_to_train_s: float | None = None
    grads_bytes: int = 0
    checkpoint_bytes: int = 0
    calibration: str = "none"
    predicted_mfu: float | None = None
    time_breakdown: dict[str, Any] | None = None
    allreduce_exposed_s: float = 0.0
    runs_calibration: RunsCorrection | None = None
    speed_lower_bound: bool = False
    peak_unit: str | None = None
    peak_flops: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The row as the JSON object documented in the README (its fields in order, ``notes`` a list,
        ``runs_calibration`` an object)."""
        return {**self.__dict__, "notes": list(self.notes), "runs_calibration": as_document(self.runs_calibration)}


@dataclass
class Plan:
    """The result of :func:`~paddlefit.plan.planner.build_plan`; ``to_dict()`` is the ``--json`` document (the
    sections' serialisation, :mod:`paddlefit.plan.document`)."""

    model: ModelSection
    batch_size: int
    precision: str
    optimizer: str
    devices: int
    inputs: list[str]
    memory: MemorySection
    targets: list[Target]
    recommendation: Recommendation
    assumptions: PlanAssumptions
    explain: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document (sections and targets as dicts, in the order of the fields)."""
        d = dict(self.__dict__)
        for key in ("model", "memory", "recommendation", "assumptions"):
            d[key] = as_document(d[key])
        d["targets"] = [t.to_dict() for t in self.targets]
        return d


def check_explain(explain: Iterable[str], gpus: Iterable[str], pool: list[GPU]) -> None:
    """Every ``explain`` name must be a GPU of ``pool`` and, when ``gpus`` restricts the targets, among them.

    Raises:
        PaddlefitError: an empty or unknown name (with close matches), or one not planned (names the fix).
        UnknownNameError: an unknown name in ``gpus``.
    """
    chosen = {g.name for g in resolve_gpus(gpus, pool)}
    for name in explain:
        if not name.strip():
            raise PaddlefitError(
                "`--explain` is empty; give a GPU name from `paddlefit gpus`, e.g. `--explain A100-SXM4-40GB`."
            )
        try:
            g = get_gpu(name, pool)
        except UnknownNameError as exc:
            raise PaddlefitError(f"`--explain {name}`: {exc}") from None
        if chosen and g.name not in chosen:
            given = ", ".join(f"`--gpu {c}`" for c in sorted(chosen))
            raise PaddlefitError(
                f"`--explain {name}` is not among the planned GPUs ({given}); add `--gpu {g.name}` or drop `--explain`."
            )
