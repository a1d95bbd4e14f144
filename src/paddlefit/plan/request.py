"""What ``paddlefit plan`` takes and gives: :class:`PlanRequest` (validates itself), :class:`Target`, :class:`Plan`."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from paddlefit.catalog.gpus import GPU, get_gpu, load_gpus, resolve_gpus
from paddlefit.errors import PaddlefitError, UnknownNameError
from paddlefit.fieldcheck import check_field_types
from paddlefit.inputspec import InputSpec
from paddlefit.plan.document import (
    MemorySection,
    ModelSection,
    PlanAssumptions,
    Recommendation,
    RunsCorrection,
    as_document,
)
from paddlefit.spec import OptimizerName, Precision

#: Fraction of a device's memory a peak may use and still "fit" (policy: 10% left for allocator fragmentation and
#: what the model does not measure).
DEFAULT_SAFETY_MARGIN = 0.9
#: Step times or costs within this factor of the best tie (issue 26: below the model's resolution), in every
#: ranking that then prefers headroom or the smaller choice: plan's GPUs, cost's instances, the LLM planner's
#: layouts.
TIE_FACTOR = 1.01


@dataclass
class PlanRequest:
    """Everything ``paddlefit plan`` takes.

    Attributes:
        model: zoo name or ``package.module:factory``.
        batch_size: per-device micro-batch, samples (>= 1).
        inputs: per-sample input specs; None = the zoo default.
        optimizer, precision: see :mod:`paddlefit.spec`.
        attention: ``eager`` (the model as written) or ``flash``: GPU rows (CC 8.0+, fp16/bf16) run each eager
            attention core of the trace as one flash-attention kernel (:func:`~paddlefit.estimate.fused.flash_trace`),
            time and activation memory; the CPU row stays the measurement.
        tf32: Paddle's TF32 switches are on (its default): fp32 GEMMs/convs run on TF32 tensor cores where a GPU has
            them; False (the job's ``tf32: false``, ``--no-tf32``) times them on the FP32 CUDA cores.
        gpus: restrict GPU targets to these names (empty = the whole catalog, unless ``cpu_only``).
        cpu_only: plan the CPU row only (no GPU targets; ``train``'s prediction for a CPU run).
        use_runs: correct each device's step time by the run registry's measured runs on it
            (:mod:`paddlefit.plan.runs_calibration`; ``--no-runs`` turns it off).
        devices: data-parallel GPUs per target (all-reduce added when > 1).
        dataset_size, epochs: samples per epoch and epochs, for the time to train.
        catalog_files, calibration_files: user data files.
        safety_margin: fraction of capacity a peak may use and still "fit" (policy, default 0.9, leaving
            10% for allocator fragmentation and the unmeasured).
        probe_batch_sizes: the CPU probe's first batch sizes; it adds 6, 12, 24... up to ``batch_size``
            while the estimated extra probe time stays within ``probe_budget_s`` seconds.
        max_probe_bytes: probe only if fp32 Adam model states (16 B/param) stay under this; None =
            min(25% of RAM, 8 GiB).
        explain: GPU names whose predicted top kernels go into ``Plan.explain`` (``plan --explain GPU``); a
            name that is not among the planned GPUs is an error (checked on construction, before the probe).
        label, label_arg, loss: the job's label spec (None = from data or generated), the forward keyword that
            receives the label, and its loss (None = ``cross_entropy``); see :mod:`paddlefit.models.calling`.
        loss_strict: the loss is the job's (a job spec or ``--loss``): an output it cannot take is an error
            rather than planned with a proxy loss.
        eval_batch_size: samples per evaluation forward (None = ``batch_size``).
        cpu_threads: the job's Paddle CPU threads (None = every core, as ``train`` on one device); the CPU row's
            time is measured with it. ``time_threads``: also time 1, cores/2 and all cores and say which is fastest.
        eval_phase: the job evaluates (a job spec without ``data.eval`` does not): the probe measures the eval
            forward and it counts in the peak.
        probe_requested: the probe may also run the requested batch when its time budget allows (False keeps
            the plan's own row an extrapolation, as ``bench/memory_accuracy.py`` checks).
        sample: the first sample of the job's ``data.train`` (probe batches are copies of it); None = synthetic.
        loader_prefetch: batches Paddle's single-process DataLoader holds besides the one in use: its blocking
            queue's capacity, ``prefetch_factor`` x places (``python/paddle/io/dataloader/dataloader_iter.py``), plus
            the 2 of the double-buffering ``BufferedReader`` behind ``use_buffer_reader=True`` (measured: train's
            peak for PP-LCNet at batch 32 was 4.00 batches of 393,472 bytes above the probe's with the default
            prefetch_factor 2); added to every phase as input + label bytes x batch (0: no DataLoader, or worker
            processes, whose batches live in shared memory). ``eval_prefetch``: the same for the eval loader, added
            to the eval phase at the eval batch. ``eval_held``: training batches the train loader still holds during
            an evaluation (a run stopped mid-epoch by ``max_steps`` evaluates with the train queue full, and its last
            batch; measured on PP-LCNet: 5), added to the eval phase at the training batch.
    """

    model: str
    batch_size: int = 32
    inputs: list[InputSpec] | None = None
    model_args: dict[str, Any] = field(default_factory=dict)
    optimizer: OptimizerName = OptimizerName.ADAM
    precision: Precision = Precision.FP32
    attention: str = "eager"
    tf32: bool = True
    gpus: list[str] = field(default_factory=list)
    devices: int = 1
    dataset_size: int | None = None
    epochs: float | None = None
    catalog_files: list[str] = field(default_factory=list)
    calibration_files: list[str] = field(default_factory=list)
    safety_margin: float = DEFAULT_SAFETY_MARGIN
    probe_batch_sizes: tuple[int, ...] = (1, 2, 3)
    probe_budget_s: float = 6.0
    max_probe_bytes: int | None = None
    explain: list[str] = field(default_factory=list)
    label: InputSpec | None = None
    label_arg: str | None = None
    loss: str | None = None
    loss_strict: bool = False
    eval_batch_size: int | None = None
    cpu_threads: int | None = None
    time_threads: bool = True
    loader_prefetch: int = 0
    eval_prefetch: int = 0
    eval_held: int = 0
    sample: Any = None
    eval_phase: bool = True
    probe_requested: bool = True
    cpu_only: bool = False
    use_runs: bool = True

    def __post_init__(self) -> None:
        """Check the fields a CLI user gives as options; the messages name the option (``--batch-size`` for
        ``batch_size``) and the fix.

        Raises:
            PaddlefitError: a field out of range; an ``explain`` GPU that is unknown or not among ``gpus``.
            UnknownNameError: an unknown name in ``gpus`` when ``explain`` is given.
        """
        check_field_types(self, {"batch_size": "--batch-size", "devices": "--devices", "gpus": "--gpu",
                                 "dataset_size": "--dataset-size", "epochs": "--epochs", "catalog_files": "--catalog",
                                 "calibration_files": "--calibration", "explain": "--explain",
                                 "safety_margin": "--safety-margin", "tf32": "--tf32/--no-tf32",
                                 "eval_batch_size": "--eval-batch-size"})  # fmt: skip
        if self.attention not in ("eager", "flash"):
            raise PaddlefitError(f"`attention` must be eager or flash (got {self.attention!r}); `plan "
                                 "--flash-attention` sets flash.")  # fmt: skip
        if self.batch_size < 1:
            raise PaddlefitError(f"`--batch-size` must be >= 1 (got {self.batch_size}).")
        if self.devices < 1:
            raise PaddlefitError(f"`--devices` must be >= 1 (got {self.devices}).")
        if not (math.isfinite(self.safety_margin) and 0 < self.safety_margin <= 1):
            raise PaddlefitError(f"`--safety-margin` must be in (0, 1] (got {self.safety_margin}).")
        if (self.dataset_size is None) != (self.epochs is None):
            raise PaddlefitError("`--dataset-size` and `--epochs` go together; give both or neither.")
        if self.dataset_size is not None and (self.dataset_size < 1 or not math.isfinite(self.epochs)  # type: ignore
                                              or self.epochs <= 0):  # type: ignore[operator]  # fmt: skip
            raise PaddlefitError("`--dataset-size` must be >= 1 and `--epochs` a finite number > 0.")
        if self.dataset_size is not None and (self.dataset_size > 10**13 or self.epochs > 1e6):  # type: ignore
            raise PaddlefitError(f"`--dataset-size` must be at most 1e13 samples and `--epochs` at most 1e6 (got "
                                 f"{self.dataset_size:g}, {self.epochs:g}), as for `paddlefit cost`.")  # fmt: skip
        if self.max_probe_bytes is not None and self.max_probe_bytes < 1:
            raise PaddlefitError(f"`--max-probe-gib` must be a finite number > 0 (got "
                                 f"{self.max_probe_bytes / 1024**3:g}).")  # fmt: skip
        if self.explain:
            check_explain(self.explain, self.gpus, load_gpus(self.catalog_files))


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
            raise PaddlefitError("`--explain` is empty; give a GPU name from `paddlefit gpus`, e.g. "
                                 "`--explain A100-SXM4-40GB`.")  # fmt: skip
        try:
            g = get_gpu(name, pool)
        except UnknownNameError as exc:
            raise PaddlefitError(f"`--explain {name}`: {exc}") from None
        if chosen and g.name not in chosen:
            given = ", ".join(f"`--gpu {c}`" for c in sorted(chosen))
            raise PaddlefitError(f"`--explain {name}` is not among the planned GPUs ({given}); add `--gpu {g.name}` "
                                 "or drop `--explain`.")  # fmt: skip
