"""The job a command describes: a command's MODEL and job options (:class:`JobOptions`) merged with its
``--config`` job spec and data (:func:`resolve_job`, which builds ``data.train`` once and prints nothing: what it
inferred is in its ``notes``). Its length in optimizer steps is :mod:`paddlefit.job.length`'s.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from paddlefit import options
from paddlefit.errors import PaddlefitError
from paddlefit.job.length import batches_per_rank, job_steps, plan_job_length
from paddlefit.jobspec.inputs import parse_input_spec, parse_input_specs
from paddlefit.jobspec.spec import JobSpec, load_job_spec
from paddlefit.models.zoo import parse_model_args
from paddlefit.validation import RequestModel


def check_not_empty(values: dict[str, str | None]) -> None:
    """Each given option (name -> value; None = not given) must not be empty or blank.

    Raises:
        PaddlefitError: naming the first empty option.
    """
    for opt, value in values.items():
        if value is not None and not value.strip():
            raise PaddlefitError(
                f"`{opt}` is empty; give a value (see --help) or leave the option out for the default."
            )


def attention_option(flash: bool | None) -> str | None:
    """``--flash-attention/--no-flash-attention`` as :attr:`JobOptions.attention`: ``flash``, ``eager``, or None
    (not given: the spec's ``attention``)."""
    return None if flash is None else "flash" if flash else "eager"


class JobOptions(RequestModel):
    """What a command's MODEL argument and job options say, before ``--config`` is merged (None = not given).

    Raises:
        PaddlefitError: (on construction) a value no job can have, naming the option.
    """

    model: str | None = Field(
        None,
        description="Zoo name or ``package.module:factory``; None = the spec's.",
        json_schema_extra=options.MODEL_ARG.field(),
    )
    config: Path | None = Field(None, description="Job spec YAML path.", json_schema_extra=options.CONFIG.field())
    batch_size: int | None = Field(
        None,
        description="Per-device micro-batch, samples.",
        **options.BATCH_SIZE.bounds,
        json_schema_extra=options.BATCH_SIZE.field(),
    )
    inputs: list[str] | None = Field(
        None,
        description="Per-sample input spec strings (``float32[3,224,224]``).",
        json_schema_extra=options.INPUT.field(),
    )
    model_args: list[str] | None = Field(
        None,
        description="``key=value`` strings for the model factory.",
        json_schema_extra=options.MODEL_ARG_PLAN.field(),
    )
    optimizer: str | None = Field(
        None,
        description="Optimizer name (:class:`~paddlefit.jobspec.spec.OptimizerName`).",
        json_schema_extra=options.OPTIMIZER.field(),
    )
    precision: str | None = Field(
        None,
        description="Precision name (:class:`~paddlefit.jobspec.spec.Precision`).",
        json_schema_extra=options.PRECISION.field(),
    )
    attention: str | None = Field(
        None, description="``eager`` or ``flash`` (``--flash-attention``); None = the spec's, else eager."
    )
    label: str | None = Field(
        None, description="Per-sample label spec string (no name).", json_schema_extra=options.LABEL.field()
    )
    label_arg: str | None = Field(
        None, description="The forward() keyword that receives the label.", json_schema_extra=options.LABEL_ARG.field()
    )
    loss: str | None = Field(
        None,
        description="The loss (see :class:`~paddlefit.plan.request.PlanRequest`).",
        json_schema_extra=options.LOSS.field(),
    )
    eval_batch_size: int | None = Field(
        None,
        description="Samples per evaluation forward.",
        **options.EVAL_BATCH_SIZE.bounds,
        json_schema_extra=options.EVAL_BATCH_SIZE.field(),
    )
    devices: int | None = Field(
        None,
        description="Data-parallel devices; None = the spec's, else 1.",
        **options.DEVICES.bounds,
        json_schema_extra=options.DEVICES.field(),
    )
    tf32: bool | None = Field(
        None,
        description="``--tf32``/``--no-tf32``: Paddle's TF32 switches for fp32 "
        "GEMMs/convs (None = the spec's ``tf32``).",
        json_schema_extra=options.TF32.field(),
    )
    command: str = Field("plan", description="The CLI verb, for messages.")

    @model_validator(mode="after")
    def _well_formed(self) -> JobOptions:
        """Empty names, a ``--label-arg`` that is no identifier, a named ``--label``."""
        check_not_empty({"--precision": self.precision, "--optimizer": self.optimizer})
        if self.label_arg is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.label_arg):
            raise PaddlefitError(f"`--label-arg {self.label_arg!r}` must be a forward() argument name, e.g. `labels`.")
        for opt, value in (("--label", self.label), ("--loss", self.loss)):
            if value is not None and not value.strip():
                raise PaddlefitError(f"`{opt}` is empty; give a value (see --help) or leave the option out.")
        if self.label is not None and parse_input_spec(self.label).name:
            raise PaddlefitError(f"`--label {self.label}` takes no name; the forward() argument is `--label-arg`.")
        return self


@dataclass
class ResolvedJob:
    """The job the model/--config options describe (options override the spec), for plan and cost.

    ``notes`` are what was inferred from the data (``inputs from data.train: ...``), for the caller to show;
    ``queued`` = (train loader prefetch, eval loader prefetch, train batches held during an eval), see
    :class:`~paddlefit.plan.request.PlanRequest`; ``devices`` = data-parallel devices (option, else spec, else 1);
    ``tf32`` = Paddle's TF32 switches (option, else the spec's ``tf32``, else Paddle's default: on); ``lr``,
    ``weight_decay``, ``lazy_mode``: the spec's optimizer settings (a job spec's defaults without one), which the
    probe's optimizer takes (:mod:`paddlefit.jobspec.optimizers`).
    """

    spec: JobSpec | None
    model: str
    batch_size: int
    inputs: list[str] | None
    model_args: dict
    optimizer: str
    precision: str
    own_job: bool
    train_size: int | None
    label: str | None = None
    label_arg: str | None = None
    loss: str | None = None
    eval_batch_size: int | None = None
    sample: object = None
    evaluates: bool = True
    queued: tuple[int, int, int] = (0, 0, 0)
    devices: int = 1
    attention: str = "eager"
    notes: list[str] = field(default_factory=list)
    tf32: bool = True
    lr: float = 1e-3
    weight_decay: float | None = None
    lazy_mode: bool = False

    def call_fields(self) -> dict:
        """The :class:`~paddlefit.plan.request.PlanRequest` fields of how the job calls its model.

        Raises:
            InputSpecError: an input or label spec does not parse.
        """
        return {
            "inputs": parse_input_specs(self.inputs) if self.inputs else None,
            "label": parse_input_spec(self.label) if self.label else None,
            "label_arg": self.label_arg,
            "loss": self.loss,
            "loss_strict": self.loss is not None or self.own_job or self.label_arg is not None,
            "eval_batch_size": self.eval_batch_size,
            "cpu_threads": self.spec.cpu_threads if self.own_job and self.spec else None,
            "sample": self.sample,
            "eval_phase": self.evaluates,
            "loader_prefetch": self.queued[0],
            "eval_prefetch": self.queued[1],
            "eval_held": self.queued[2],
        }

    def length(self) -> tuple[int | None, float | None]:
        """(samples per epoch, epochs) of the spec's own job for the planner (:func:`plan_job_length`); (None,
        None) when the model is not the spec's or the length is unknown."""
        if not self.own_job or self.spec is None:
            return None, None
        return plan_job_length(self.spec, self.train_size, self.batch_size, self.devices)


def _planning_dataset(ref: str, args: dict[str, Any], key: str, inputs: list[str] | None, notes: list[str]) -> Any:
    """The dataset ``ref`` (the spec's ``key``) for planning, or None (with a note) when its module is not on this
    machine and ``inputs`` describe the samples: a job planned before its data package is installed here."""
    from paddlefit.examples.datasets import resolve_dataset
    from paddlefit.process.userimport import ModuleMissingError

    try:
        return resolve_dataset(ref, args, key)
    except ModuleMissingError:
        if not inputs:
            raise
        notes.append(
            f"{key}: `{ref}` is not importable here: planned from `inputs:` (give `--dataset-size` for the job length)"
        )
        return None


def resolve_job(options: JobOptions) -> ResolvedJob:
    """Merge MODEL/options with ``--config``; build ``data.train`` once: its first sample gives the inputs, the
    label and the probe's batches (unless ``--input`` is given), its length the job length. Dataset code may print
    on stdout: callers that keep stdout clean redirect it around this call.

    A ``data.train``/``data.eval`` whose module is not on this machine is left out when ``inputs`` are given (a
    note says so; ``train`` still needs it).

    Raises:
        PaddlefitError (exit 2): neither a model nor a spec; a bad spec or dataset; ``inputs:`` that do not
            describe ``data.train``.
    """
    o = options
    spec = load_job_spec(o.config) if o.config is not None else None
    if spec is None and o.model is None:
        raise PaddlefitError(
            f"Give a MODEL (e.g. `paddlefit {o.command} resnet50`) or a job spec with `--config FILE`."
        )
    model = o.model or spec.model  # type: ignore[union-attr]
    batch_size = o.batch_size if o.batch_size is not None else (spec.batch_size if spec else 32)
    optimizer = o.optimizer or (spec.optimizer.value if spec else "adam")
    precision = o.precision or (spec.precision.value if spec else "fp32")
    devices = o.devices if o.devices is not None else (spec.devices if spec else 1)
    attention = o.attention or (spec.attention if spec else "eager")
    tf32 = next((v for v in (o.tf32, spec.tf32 if spec else None) if v is not None), True)  # True: Paddle's default
    inputs, label, label_arg, loss, eval_batch_size = o.inputs, o.label, o.label_arg, o.loss, o.eval_batch_size
    cli_inputs = bool(inputs)
    if not inputs and spec and spec.inputs:
        inputs = spec.inputs
    own_job = spec is not None and model == spec.model
    if own_job:
        label = label or spec.label  # type: ignore[union-attr]
        label_arg = label_arg or spec.label_arg  # type: ignore[union-attr]
        loss = loss or spec.loss  # type: ignore[union-attr]
        eval_batch_size = eval_batch_size or spec.data.eval_batch_size  # type: ignore[union-attr]
    notes: list[str] = []
    train_ds = None
    if own_job and spec.data.train:  # type: ignore[union-attr]
        train_ds = _planning_dataset(spec.data.train, spec.data.train_args, "data.train", inputs, notes)  # type: ignore
    if train_ds is not None:
        from paddlefit.examples.datasets import infer_sample_specs

        found, found_label = infer_sample_specs(train_ds, f"data.train: {spec.data.train}", label_arg)  # type: ignore
        if inputs and not cli_inputs:
            check_inputs_match_data(inputs, found, spec.data.train)  # type: ignore[union-attr]
        if not inputs:
            inputs = found
            notes.append(f"inputs from data.train: {' '.join(inputs)}")
        if not label and found_label:
            label = found_label
            notes.append(f"label from data.train: {label}")
    evaluates = not own_job or bool(spec.data.eval)  # type: ignore[union-attr]
    n_eval = None
    eval_ds = None
    if own_job and spec.data.eval:  # type: ignore[union-attr]
        eval_ds = _planning_dataset(spec.data.eval, spec.data.eval_args, "data.eval", inputs, notes)  # type: ignore
    if eval_ds is not None:
        n_eval = len(eval_ds)
        eval_batch_size = min(eval_batch_size or batch_size, n_eval)  # train's eval batches hold at most the set
    queued = (0, 0, 0)
    if own_job:  # the train queue counts only for a single-process loader (workers' batches live in shared memory)
        single = spec.data.num_workers == 0 and train_ds is not None  # type: ignore[union-attr]
        queued = loader_queue(
            spec,
            len(train_ds) if single else None,
            n_eval,
            batch_size,  # type: ignore
            devices,
            eval_batch_size,
        )
    model_args = parse_model_args(o.model_args) if o.model_args else (dict(spec.model_args) if spec else {})
    return ResolvedJob(
        spec,
        model,
        batch_size,
        list(inputs) if inputs else None,
        model_args,
        optimizer,
        precision,
        own_job,
        len(train_ds) if train_ds is not None else None,
        label,
        label_arg,
        loss,
        eval_batch_size,
        # the probe's batches are copies of data.train's first sample unless --input overrides them
        train_ds[0] if train_ds is not None and not cli_inputs else None,
        evaluates,
        queued,
        devices,
        attention,
        notes,
        tf32,
        *_optimizer_fields(spec),
    )


def _optimizer_fields(spec: JobSpec | None) -> tuple[float, float | None, bool]:
    """(lr, weight_decay, lazy_mode) of ``spec``, else a job spec's defaults."""
    s = spec or JobSpec(model="-")
    return s.lr, s.weight_decay, s.lazy_mode


def loader_queue(
    spec: JobSpec,
    train_size: int | None,
    eval_size: int | None,
    batch_size: int,
    devices: int,
    eval_batch_size: int | None,
) -> tuple[int, int, int]:
    """Batches Paddle's single-process DataLoader holds besides the one in use (``PlanRequest.loader_prefetch``,
    ``eval_prefetch``, ``eval_held``): its blocking queue (``prefetch_factor``) + the BufferedReader's 2, never more
    than the loader has left. The train loader has :func:`batches_per_rank` batches an epoch.
    """
    train_q = eval_q = held = 0
    if train_size is not None:
        batches = batches_per_rank(train_size, batch_size, devices, spec.grad_accum_steps, spec.data.drop_last)
        train_q = max(0, min(spec.data.prefetch_factor + 2, batches - 1))
        # the last eval comes mid-epoch when the run stops there (max_steps): the train loader then still holds its
        # queue and the batch it last handed out; evals at epoch ends find it drained
        per_epoch = max(1, batches // spec.grad_accum_steps)
        total = job_steps(per_epoch, spec.epochs, spec.max_steps) or per_epoch
        left = (per_epoch - total % per_epoch) * spec.grad_accum_steps
        if total % per_epoch:
            held = min(train_q, left) + 1
    if eval_size is not None:
        eval_b = eval_batch_size or batch_size
        eval_q = max(0, min(spec.data.prefetch_factor + 2, math.ceil(eval_size / eval_b) - 1))
    return train_q, eval_q, held


def check_inputs_match_data(given: list[str], found: list[str], dataset: str) -> None:
    """The job's ``inputs:`` must describe ``data.train``'s samples (train calls the model with the data): the
    same count, dtypes and shapes (names: the dict keys of dict samples; id ranges may differ).

    Raises:
        PaddlefitError: naming both lists.
    """
    g, f = parse_input_specs(given, "inputs:"), parse_input_specs(found, "inputs:")
    dict_samples = all(s.name for s in f) and f

    def key(s: Any) -> tuple:
        return (s.name if dict_samples else None, s.dtype, s.shape)

    same = (
        sorted(map(key, g)) == sorted(map(key, f))
        if dict_samples
        else [(s.dtype, s.shape) for s in g] == [(s.dtype, s.shape) for s in f]
    )
    if not same:
        raise PaddlefitError(
            f"`inputs: {' '.join(given)}` does not describe data.train ({dataset}), whose first sample has "
            f"{' '.join(found)}; train calls the model with the data, so fix `inputs:` or remove it (plan reads "
            "the data's)."
        )
