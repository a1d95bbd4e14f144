"""The job spec (YAML) every command reads, its field descriptions, and the names shared with it.

:class:`JobSpec` and its sections carry each field's description once (``Field(description=...)``):
:func:`paddlefit.jobspec.docs.job_spec_markdown` renders ``docs/job-spec.md`` from them (``make docs``) and
:func:`field_help` gives one field's text for CLI option help. Precision and optimizer names live here;
per-sample input specs live in :mod:`paddlefit.jobspec.inputs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from paddlefit import options
from paddlefit.errors import InputSpecError, JobSpecError, UnknownNameError
from paddlefit.jobspec.inputs import InputSpec, parse_input_spec, parse_input_specs
from paddlefit.units import MIB

__all__ = [
    "DATASETS",
    "BudgetSpec",
    "CheckpointSpec",
    "DataSpec",
    "JobSpec",
    "LoaderOptions",
    "OptimizerName",
    "Precision",
    "ScheduleSpec",
    "field_help",
    "load_job_spec",
    "load_plain_yaml",
    "merge_loader_options",
    "parse_enum",
    "unique_key_loader",
]


class Precision(str, Enum):
    """Training precision: fp32, or AMP level O1/O2 with fp16 or bf16 (``paddle.amp.auto_cast``)."""

    FP32 = "fp32"
    FP16_O1 = "fp16-o1"
    BF16_O1 = "bf16-o1"
    FP16_O2 = "fp16-o2"
    BF16_O2 = "bf16-o2"

    @property
    def is_amp(self) -> bool:
        """True for the AMP precisions (O1/O2), False for fp32."""
        return self is not Precision.FP32

    @property
    def level(self) -> str:
        """AMP level for ``paddle.amp.auto_cast(level=...)``: ``O0`` for fp32."""
        return "O0" if self is Precision.FP32 else self.value.split("-")[1].upper()


class OptimizerName(str, Enum):
    """Optimizers whose state size paddlefit knows (Paddle ``python/paddle/optimizer/*.py``)."""

    SGD = "sgd"
    MOMENTUM = "momentum"
    ADAM = "adam"
    ADAMW = "adamw"


def parse_enum(enum_cls: type[Enum], value: str, field: str) -> Enum:
    """Turn a string into ``enum_cls`` or raise UnknownNameError naming ``field`` and the choices."""
    try:
        return enum_cls(value.strip().lower())
    except ValueError:
        choices = ", ".join(e.value for e in enum_cls)  # type: ignore[attr-defined]
        raise UnknownNameError(f"`{field}` {value!r} is not valid; choose one of: {choices}.") from None


#: Dataset names accepted in a job spec's ``data.train`` / ``data.eval`` (see :mod:`paddlefit.examples.datasets`).
DATASETS = {
    "digits": "paddlefit.examples.datasets:digits",
    "digits-warped": "paddlefit.examples.datasets:digits_warped",
    "sentiment-zh": "paddlefit.examples.datasets:sentiment_zh",
    "shapes": "paddlefit.examples.datasets:shapes",
}


class _SpecSection(BaseModel):
    """A part of the job spec: a YAML boolean is never read as an integer (pydantic's lax mode takes ``true`` for
    1, so ``batch_size: true`` would train at batch 1)."""

    @field_validator("*", mode="before")
    @classmethod
    def _integers_are_not_booleans(cls, value: Any, info: Any) -> Any:
        field = cls.model_fields.get(info.field_name)
        if isinstance(value, bool) and field is not None and field.annotation in (int, int | None):
            raise ValueError(f"{str(value).lower()} is a boolean; give an integer")
        return value


class DataSpec(_SpecSection):
    """Datasets and DataLoader settings (`paddle.io.DataLoader` names and defaults, Paddle
    `python/paddle/io/reader.py`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    train: str | None = Field(
        default=None,
        description=(
            "Dataset factory `package.module:function` (called with `train_args`) returning a `paddle.io.Dataset`, or "
            "a shipped name: digits, digits-warped, sentiment-zh, shapes. Samples are tuples `(input..., label)` (the "
            "last element is the label; the inputs go to forward() in the order of `inputs`, named ones as keyword "
            "arguments) or dicts of keyword inputs (the label is the value under `label_arg`, else under `label` or "
            "`labels`, which is then not passed). `train` needs it."
        ),
    )
    train_args: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for `data.train`.")
    eval: str | None = Field(
        default=None, description="Evaluation dataset factory, as `data.train`; accuracy is reported for cross_entropy."
    )
    eval_args: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for `data.eval`.")
    eval_batch_size: int | None = Field(
        default=None,
        ge=1,
        le=10**7,
        strict=True,
        description=(
            "Samples per evaluation forward (null = `batch_size`); `plan` measures that pass as phase `eval`."
        ),
    )
    shuffle: bool = Field(default=True, description="Shuffle every epoch; the order comes from `(seed, epoch)`.")
    drop_last: bool = Field(
        default=True,
        description="Drop the last incomplete global batch: an epoch is floor(samples / global batch) optimizer steps.",
    )
    num_workers: int = Field(
        default=0, ge=0, description="DataLoader worker processes (0 = load in the training process)."
    )
    prefetch_factor: int = Field(default=2, ge=1, description="Batches each DataLoader worker prepares ahead.")
    use_shared_memory: bool = Field(
        default=True, description="Workers hand batches over through /dev/shm; false also turns doctor's shm check off."
    )
    persistent_workers: bool = Field(default=False, description="Keep the DataLoader workers alive between epochs.")


class ScheduleSpec(_SpecSection):
    """Learning-rate schedule, stepped once per optimizer step (`paddle.optimizer.lr`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: Literal["constant", "cosine", "step"] = Field(
        default="constant",
        description=(
            "constant; cosine (`CosineAnnealingDecay` from `lr` to `min_lr` over the steps after warm-up); step "
            "(`StepDecay`: multiply by `gamma` every `step_size` steps)."
        ),
    )
    warmup_steps: int = Field(
        default=0,
        ge=0,
        le=10**9,
        description="> 0 wraps the schedule in `LinearWarmup` from 0 to `lr` over this many optimizer steps.",
    )
    min_lr: float = Field(default=0.0, ge=0, description="cosine: the last learning rate (at most `lr`).")
    step_size: int = Field(default=1000, ge=1, description="step: optimizer steps between decays.")
    gamma: float = Field(default=0.1, gt=0, lt=1, description="step: the factor applied at each decay.")


class CheckpointSpec(_SpecSection):
    """When to checkpoint and how many to keep. A checkpoint is also written at the end of the run and when a
    SIGTERM/SIGINT stops it."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    every_steps: int = Field(default=500, ge=0, description="Checkpoint every N optimizer steps (0 = off).")
    every_minutes: float = Field(default=10.0, ge=0, description="Checkpoint every N minutes of wall time (0 = off).")
    keep_last: int = Field(default=3, ge=1, description="How many of the newest checkpoints are kept.")
    auto_interval: bool = Field(
        default=False,
        description=(
            "Checkpoint after the first step, then every Daly-optimal interval for the measured write time and "
            "`interruptions_per_hour` (`every_steps`/`every_minutes` are not used); `train --checkpoint-interval auto` "
            "sets it."
        ),
    )
    interruptions_per_hour: float = Field(
        default=1.0 / 24.0,
        ge=1e-6,
        le=3600,
        description=("Spot interruptions per hour assumed by `auto_interval` (default one per 24 h)."),
    )


class BudgetSpec(_SpecSection):
    """Stop the run cleanly (final checkpoint, exit code 4) at a wall-time or cost limit; unset limits are off.
    Wall time counts across resumes of the run (it is stored in the checkpoint)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    # strict: a YAML `true` is not 1 hour (strict floats still take integers)
    max_hours: float | None = Field(
        default=None, gt=0, le=1e6, strict=True, description=("Stop once the run's wall time reaches this many hours.")
    )
    max_cost_usd: float | None = Field(
        default=None,
        gt=0,
        le=1e9,
        strict=True,
        description=("Stop once wall time x `price_usd_per_hour` reaches this many USD; refused without a price."),
    )
    price_usd_per_hour: float | None = Field(
        default=None,
        gt=0,
        le=1e6,
        strict=True,
        description=(
            "The whole job's rate, USD per hour (all nodes); `train --price-per-hour` or `--instance` can supply it."
        ),
    )


class JobSpec(_SpecSection):
    """One YAML file (UTF-8, at most 1 MiB, no anchors/aliases, no key given twice, plain data nested at most 32
    levels: no `!!binary`/`!!set` tags; dates read as text) describes the job for every command (`plan --config`,
    `cost --config`, `train`, `profile`, `tune`, `launch`, `doctor --config`, `image CONFIG`). Unknown keys and
    wrong types stop with the file and the key. Options given on the command line override the file. Every key but
    `model` has a default; `train` also needs `data.train` and `epochs` or `max_steps`."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str = Field(
        min_length=1,
        description="Zoo name (`paddlefit models`) or `package.module:factory` (a "
        "class or function returning a `paddle.nn.Layer`). Required.",
    )
    model_args: dict[str, Any] = Field(
        default_factory=dict,
        description="Keyword arguments for the factory; for zoo "
        "transformers they override config fields (`num_layers: 6`).",
    )
    inputs: list[str] = Field(
        default_factory=list,
        description=(
            "Per-sample forward() inputs, without the batch dimension: `float32[3,224,224]`, `int64[128]:40000` (token "
            "ids in [0, 40000)), `int64[]` (one scalar). `name=SPEC` items, or a mapping `{input_ids: SPEC}`, are "
            "keyword arguments, after the positional ones; tuple samples' inputs are matched to these in order. "
            "Empty = data.train's first sample, else the zoo model's default."
        ),
    )
    label: str | None = Field(
        default=None,
        description="Per-sample label spec for `plan` (`int64[]:10`). "
        "null = data.train's, else generated from the loss and the output.",
    )
    label_arg: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description=(
            "Pass the label to forward() as this keyword (a model that computes its own loss, e.g. `labels`)."
        ),
    )
    batch_size: int = Field(
        default=options.BATCH_SIZE.shown["train"],
        ge=1,
        le=10**7,
        description="Per-device micro-batch (samples); the global batch is batch_size x devices x grad_accum_steps.",
    )
    grad_accum_steps: int = Field(default=1, ge=1, description="Micro-batches per optimizer step.")
    epochs: float | None = Field(
        default=None,
        gt=0,
        le=1e6,
        description="Epochs; with `max_steps` both bound the run and the first reached ends it.",
    )
    max_steps: int | None = Field(
        default=None,
        ge=1,
        le=10**12,
        description="Optimizer steps in total; with `epochs` the first reached ends the run.",
    )
    loss: str | None = Field(
        default=None,
        description=(
            "Used when the model returns no loss of its own (a 0-d tensor, a `loss` key or attribute, or the first "
            "element of a tuple when `label_arg` passed the label): `cross_entropy` (class axis from the shapes: last, "
            "or 1 for NCHW maps; summed over a list of outputs such as auxiliary heads; the `logits` of a dict), "
            "`mse`, or `package.module:function(output, label) -> scalar` (gets the output as the model returns it). "
            "null = cross_entropy."
        ),
    )
    optimizer: OptimizerName = Field(
        default=OptimizerName(options.OPTIMIZER.shown["train"]), description="sgd, momentum, adam or adamw."
    )
    lr: float = Field(default=1e-3, gt=0, description="Learning rate (the schedule's peak).")
    weight_decay: float | None = Field(
        default=None, ge=0, description="null = the optimizer's default (AdamW 0.01, the others none); 0 = off."
    )
    schedule: ScheduleSpec = Field(default_factory=ScheduleSpec, description="Learning-rate schedule.")
    precision: Precision = Field(
        default=Precision(options.PRECISION.shown["train"]),
        description=(
            "fp32, fp16-o1, bf16-o1, fp16-o2 or bf16-o2 (Paddle AMP levels O1/O2; AMP acts on GPUs only: a CPU run "
            "trains fp32 and warns)."
        ),
    )
    attention: Literal["eager", "flash"] = Field(
        default="eager",
        description=(
            "How `plan`/`cost` time the model's attention on GPUs: eager (as the model is written) or flash (each "
            "matmul -> softmax -> matmul attention core as one FlashAttention-2 kernel on CC 8.0+ GPUs in fp16/bf16: "
            "no S x S probabilities kept for the backward). `train` runs the model as written; models that call "
            "`F.scaled_dot_product_attention` are fused either way."
        ),
    )
    tf32: bool | None = Field(
        default=None,
        strict=True,
        description=(
            "fp32 matmuls and convolutions on TF32 tensor cores (Ampere and later GPUs): null = Paddle's default, on "
            "(`allow_tf32_cublas`/`allow_tf32_cudnn` in Paddle `paddle/phi/backends/context_pool.cc`); false runs them "
            "on the FP32 CUDA cores with full fp32 inputs (TF32 keeps 10 mantissa bits), for reproducibility, at 1/8 "
            "of the FLOP/s on an A100 (19.5 vs 156 TFLOPS, its datasheet). `train` sets Paddle's switches "
            "(`paddle.base.core.set_cublas_switch`/`set_cudnn_switch`) when it is given; `plan` and `cost` time the "
            "fp32 GEMMs on the unit it selects (`--no-tf32`). No effect on CPU, before Ampere, or on what AMP runs in "
            "fp16/bf16. `NVIDIA_TF32_OVERRIDE=0` in the environment turns TF32 off whatever this says (`doctor` "
            "reports it)."
        ),
    )
    devices: int = Field(
        default=1, ge=1, description="Data-parallel trainers: GPUs, or processes on a CPU-only machine."
    )
    seed: int = Field(default=0, ge=0, lt=2**31, description="Seed of every rank's RNGs and of each epoch's order.")
    data: DataSpec = Field(default_factory=DataSpec, description="Datasets and DataLoader settings.")
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec, description="Checkpoint policy.")
    budget: BudgetSpec = Field(default_factory=BudgetSpec, description="Wall-time and cost limits.")
    log_every: int = Field(default=10, ge=1, description="A log line every N steps when stderr is not a terminal.")
    oom_backoff: bool = Field(
        default=True,
        description=(
            "On out of memory in a step, every device halves its micro-batch and doubles accumulation (global batch "
            "unchanged) and redoes the step, down to micro-batch 1. On several devices the gradients are then "
            "all-reduced after the backward pass instead of overlapped with it; false keeps the overlap and makes out "
            "of memory fatal."
        ),
    )
    lazy_mode: bool = Field(
        default=False,
        strict=True,
        description=(
            "Adam/AdamW update only the rows that have a gradient in the batch (Paddle's `lazy_mode`); it pays off "
            "with sparse embedding gradients (`paddle.nn.Embedding(sparse=True)`, e.g. `model_args: {sparse: true}` "
            "for the text examples)."
        ),
    )
    cpu_threads: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        strict=True,
        description=(
            "Paddle's CPU math threads per training process (null = this node's cores / its training processes); with "
            "DataLoader workers on a CPU run, fewer threads leave cores to the workers (`paddlefit tune` measures it; "
            "`plan` times 1, cores/2 and all cores and names the fastest in the cpu row's notes)."
        ),
    )
    visualdl: bool = Field(
        default=False,
        description="Also log scalars to RUN_DIR/visualdl (`visualdl --logdir "
        "RUN_DIR/visualdl`; needs `pip install 'paddlefit[visualdl]'`).",
    )
    run_dir: str = Field(
        default="runs/job", description="Checkpoints, metrics.jsonl, summary.json and the job.yaml as run go here."
    )

    @field_validator("inputs", mode="before")
    @classmethod
    def _inputs_mapping(cls, v: Any) -> Any:
        """``{name: SPEC}`` is the same as ``[name=SPEC, ...]``; names are strings (YAML ``true:`` is not one)."""
        if isinstance(v, dict):
            bad = [k for k in v if not isinstance(k, str)]
            if bad:
                raise ValueError(f"input names must be strings; {bad[0]!r} is a {type(bad[0]).__name__} (quote it)")
            return [f"{k}={spec}" for k, spec in v.items()]
        return v

    @field_validator("run_dir")
    @classmethod
    def _run_dir_not_empty(cls, v: str) -> str:
        """An empty or blank ``run_dir`` would write the run into the current directory (or one named by spaces)."""
        if not v.strip():
            raise ValueError("run_dir is empty; give a directory such as runs/digits")
        return v

    @model_validator(mode="after")
    def _min_lr_below_lr(self) -> JobSpec:
        if self.schedule.min_lr > self.lr:
            raise ValueError(f"schedule.min_lr {self.schedule.min_lr} is above lr {self.lr}; make it <= lr")
        if self.lazy_mode and self.optimizer not in (OptimizerName.ADAM, OptimizerName.ADAMW):
            raise ValueError(
                f"lazy_mode is an Adam/AdamW option; optimizer is {self.optimizer.value} (SGD updates "
                "sparse gradients row by row already)"
            )
        return self

    def input_specs(self) -> list[InputSpec]:
        """Parsed ``inputs`` (empty = the zoo model's defaults)."""
        return parse_input_specs(self.inputs, "inputs:")

    def label_spec(self) -> InputSpec | None:
        """Parsed ``label`` (None = from the data or generated)."""
        if self.label is None:
            return None
        spec = parse_input_spec(self.label)
        if spec.name:
            raise InputSpecError(f"`label: {self.label}` takes no name; the forward argument is `label_arg`.")
        return spec

    @property
    def loss_name(self) -> str:
        """The loss used when the model returns none of its own: ``loss``, default ``cross_entropy``."""
        return self.loss or "cross_entropy"


def unique_key_loader() -> type:
    """A ``yaml.SafeLoader`` subclass that reads plain data only: a key given twice in one mapping is refused (PyYAML
    keeps the last one silently), so are tags whose values JSON cannot hold (``!!binary`` bytes, ``!!set``,
    ``!!omap``, ``!!pairs``: a spec that ``launch`` and ``train`` write back as JSON-typed YAML would change), and
    dates stay strings (``2024-01-31``, as in YAML 1.2). The job spec, ``--model-arg`` values and
    :mod:`paddlefit.catalog.transformer_configs` read YAML with it (through :func:`load_plain_yaml`)."""
    import yaml

    class Loader(yaml.SafeLoader):
        """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last one silently)."""

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key `{key}` is given twice", key_node.start_mark
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    def not_plain(loader: Any, node: Any) -> Any:
        tag = node.tag.replace("tag:yaml.org,2002:", "!!")
        raise yaml.constructor.ConstructorError(
            None,
            None,
            f"`{tag}` is not plain data (text, number, true/false, "
            "null, list or mapping); write the value as one of those",
            node.start_mark,
        )

    Loader.add_constructor("tag:yaml.org,2002:timestamp", lambda loader, node: loader.construct_scalar(node))
    for tag in ("binary", "set", "omap", "pairs"):
        Loader.add_constructor(f"tag:yaml.org,2002:{tag}", not_plain)
    return Loader


#: Deepest nesting of lists and mappings :func:`load_plain_yaml` reads (a job spec needs 3 or 4 levels).
MAX_YAML_DEPTH = 32


def load_plain_yaml(text: str) -> Any:
    """``text`` as YAML plain data (:func:`unique_key_loader`), without anchors or aliases (nested aliases expand
    exponentially) and nested at most :data:`MAX_YAML_DEPTH` levels (PyYAML's composer recurses per level).

    Raises:
        yaml.YAMLError: a syntax error, a key given twice, a tag that is not plain data (with the line).
        ValueError: anchors or aliases, too deep, or an integer too long for ``int()`` (over 4300 digits); the
            message follows the file's name ("Job spec `x.yaml` uses ...").
    """
    import yaml

    depth = 0
    for token in yaml.scan(text):
        if isinstance(token, yaml.AnchorToken | yaml.AliasToken):
            raise ValueError("uses YAML anchors/aliases (`&`/`*`); write the values out")
        if isinstance(
            token,
            yaml.BlockSequenceStartToken
            | yaml.BlockMappingStartToken
            | yaml.FlowSequenceStartToken
            | yaml.FlowMappingStartToken,
        ):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise ValueError(
                    f"nests lists/mappings more than {MAX_YAML_DEPTH} levels deep (line "
                    f"{token.start_mark.line + 1}); flatten it"
                )
        elif isinstance(token, yaml.BlockEndToken | yaml.FlowSequenceEndToken | yaml.FlowMappingEndToken):
            depth -= 1
    try:
        return yaml.load(text, Loader=unique_key_loader())  # a SafeLoader subclass
    except RecursionError:
        raise ValueError("nests lists/mappings too deeply; flatten it") from None
    except ValueError:  # int() of a literal over sys.get_int_max_str_digits() digits (4300 by default)
        raise ValueError("has an integer too long to read (Python's limit: 4300 digits); write it shorter") from None


def load_job_spec(path: str | Path, option: str = "--config") -> JobSpec:
    """Read and validate a job spec YAML file; its folder joins the folders user modules are imported from
    (:func:`paddlefit.process.userimport.add_import_dir`).

    Raises:
        JobSpecError: unreadable file, YAML syntax error, unknown key, wrong type or bad input spec; the
            message names the file and the key.
    """
    import yaml
    from pydantic import ValidationError

    from paddlefit.errors import PaddlefitError
    from paddlefit.fileio import read_text_limited
    from paddlefit.validation import first_problem

    p = Path(path)
    try:
        text = read_text_limited(p, option, limit=MIB)
    except PaddlefitError as exc:
        raise JobSpecError(str(exc)) from None
    try:
        doc = load_plain_yaml(text)
    except ValueError as exc:
        raise JobSpecError(f"Job spec `{p}` {exc}.") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise JobSpecError(f"Job spec `{p}` is not valid YAML{where}: {problem}.") from None
    if not isinstance(doc, dict) or not all(isinstance(k, str) for k in doc):
        raise JobSpecError(f"Job spec `{p}` must be a YAML mapping of named keys with at least `model:`.")
    try:
        spec = JobSpec(**doc)
    except ValidationError as exc:
        key, problem = first_problem(exc)
        raise JobSpecError(f"Job spec `{p}`, key `{key}`: {problem}.") from None
    for key, check in (("inputs", spec.input_specs), ("label", spec.label_spec)):
        try:
            check()
        except InputSpecError as exc:
            raise JobSpecError(f"Job spec `{p}`, key `{key}`: {str(exc)[:800]}") from None
    from paddlefit.process.userimport import add_import_dir

    add_import_dir(p.parent, "the job spec's folder")  # its `model`, `data.*` and `loss` modules are found beside it
    return spec


@dataclass(frozen=True)
class LoaderOptions:
    """DataLoader-side job options after merging the command line over the job spec (defaults filled)."""

    num_workers: int
    prefetch_factor: int
    batch_size: int | None
    inputs: list[str]
    devices: int
    use_shared_memory: bool


def merge_loader_options(
    spec: JobSpec | None,
    *,
    num_workers: int | None = None,
    prefetch_factor: int | None = None,
    batch_size: int | None = None,
    inputs: list[str] | None = None,
    devices: int | None = None,
) -> LoaderOptions:
    """Options given on the command line win; then the job spec; then Paddle's DataLoader defaults
    (num_workers 0, prefetch_factor 2, use_shared_memory True; ``python/paddle/io/reader.py``) and 1 device."""

    def pick(cli: Any, from_spec: Any, default: Any) -> Any:
        return cli if cli is not None else (from_spec if spec is not None else default)

    return LoaderOptions(
        num_workers=pick(num_workers, spec.data.num_workers if spec else None, 0),
        prefetch_factor=pick(prefetch_factor, spec.data.prefetch_factor if spec else None, 2),
        batch_size=pick(batch_size, spec.batch_size if spec else None, None),
        inputs=list(inputs) if inputs else (list(spec.inputs) if spec else []),
        devices=pick(devices, spec.devices if spec else None, 1),
        use_shared_memory=spec.data.use_shared_memory if spec else True,
    )


def field_help(path: str) -> str:
    """The description of one job-spec key, e.g. ``field_help("data.eval_batch_size")``, for CLI option help.

    Raises:
        KeyError: ``path`` names no job-spec key.
    """
    model: type[BaseModel] = JobSpec
    *parents, leaf = path.split(".")
    for part in parents:
        sub = model.model_fields.get(part)
        if sub is None or not (isinstance(sub.annotation, type) and issubclass(sub.annotation, BaseModel)):
            raise KeyError(f"{path!r}: {part!r} is not a job-spec section")
        model = sub.annotation
    if leaf not in model.model_fields:
        raise KeyError(f"{path!r} is not a job-spec key")
    return model.model_fields[leaf].description or ""
