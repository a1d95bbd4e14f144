"""Job-spec pieces shared by every command: per-sample input specs, precision and optimizer names.

An input spec describes ONE sample (no batch dimension): ``float32[3,224,224]`` for an image,
``int64[128]`` for 128 token ids (ids drawn from ``[0, high)``; ``int64[128]:30522`` sets ``high``), ``int64[]``
for one scalar per sample (a class id). ``name=SPEC`` (``token_type_ids=int64[128]:2``) passes the input to
``forward`` as that keyword argument; unnamed inputs are positional and come first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from paddlefit.errors import InputSpecError, JobSpecError, UnknownNameError

#: Bytes per element of each dtype an input spec may use.
DTYPE_BYTES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4}

_SPEC_RE = re.compile(r"^\s*(?:(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*)?(?P<dtype>[a-z0-9]+)\s*"
                      r"\[(?P<dims>[^\]]{0,200})\]\s*(?::\s*(?P<high>\d{1,12}))?\s*$")


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


class InputSpec(BaseModel):
    """One model input, per sample: dtype and shape without the batch dimension.

    Attributes:
        dtype: one of ``DTYPE_BYTES``.
        shape: per-sample shape, e.g. ``(3, 224, 224)``; every dim >= 1; ``()`` is one scalar per sample.
        high: for integer inputs, ids are drawn from ``[0, high)`` (vocabulary size for token ids).
        name: the ``forward`` keyword argument that receives it; None = positional.
    """

    model_config = ConfigDict(frozen=True)

    dtype: str
    shape: tuple[int, ...]
    high: int | None = Field(default=None, ge=1)
    name: str | None = None

    @property
    def bytes_per_sample(self) -> int:
        """Bytes of one sample of this input."""
        n = 1
        for d in self.shape:
            n *= d
        return n * DTYPE_BYTES[self.dtype]

    def __str__(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        text = f"{self.dtype}[{dims}]" + (f":{self.high}" if self.high and self.dtype.startswith("int") else "")
        return f"{self.name}={text}" if self.name else text


def parse_input_spec(text: str) -> InputSpec:
    """Parse ``[name=]dtype[d1,d2,...]`` (optionally ``:high`` for integer ids; ``dtype[]`` is a scalar per
    sample) into an InputSpec.

    Raises:
        InputSpecError: the text does not parse, names an unknown dtype, or has a dim < 1.
    """
    m = _SPEC_RE.match(text or "")
    if not m:
        raise InputSpecError(
            f"Input spec {text!r} does not parse. Write one sample's dtype and shape without the batch "
            "dimension, e.g. `--input float32[3,224,224]` or `--input int64[128]` (token ids; "
            "`int64[128]:30522` sets the id range; `int64[]` is one scalar per sample); `name=SPEC` passes it "
            "as the keyword argument `name`, e.g. `--input token_type_ids=int64[128]:2`."
        )
    dtype = m.group("dtype")
    if dtype not in DTYPE_BYTES:
        raise InputSpecError(
            f"Input spec {text!r}: unknown dtype {dtype!r}; use one of {', '.join(DTYPE_BYTES)}."
        )
    try:
        if any(len(d.strip()) > 12 for d in m.group("dims").split(",")):
            raise InputSpecError(f"Input spec {text!r}: a dimension has more than 12 digits.")
        dims = tuple(int(d) for d in m.group("dims").split(",")) if m.group("dims").strip() else ()
    except ValueError:
        raise InputSpecError(
            f"Input spec {text!r}: dimensions must be integers, e.g. `float32[3,224,224]`."
        ) from None
    if any(d < 1 for d in dims):
        raise InputSpecError(
            f"Input spec {text!r}: every dimension must be >= 1 (the batch dimension is added by "
            "`--batch-size`; `int64[]` is one scalar per sample)."
        )
    high = int(m.group("high")) if m.group("high") else None
    if high is not None and not dtype.startswith("int"):
        raise InputSpecError(f"Input spec {text!r}: `:high` is only for integer (token id) inputs.")
    if high is not None and not 1 <= high <= 2**31 - 1:
        raise InputSpecError(f"Input spec {text!r}: the id range `:high` must be between 1 and 2147483647.")
    return InputSpec(dtype=dtype, shape=dims, high=high, name=m.group("name"))


def parse_input_specs(texts: list[str], option: str = "--input") -> list[InputSpec]:
    """Parse several input specs: positional ones first, then named ones, each name once.

    Raises:
        InputSpecError: a spec does not parse, a positional spec follows a named one, or a name repeats.
    """
    specs = [parse_input_spec(t) for t in texts]
    seen: set[str] = set()
    for i, s in enumerate(specs):
        if s.name is None and any(p.name for p in specs[:i]):
            raise InputSpecError(f"`{option} {s}` is positional but follows the named `{option} "
                                 f"{next(p for p in specs[:i] if p.name)}`; give positional inputs first, in "
                                 "forward()'s order, then `name=SPEC` ones.")  # fmt: skip
        if s.name is not None:
            if s.name in seen:
                raise InputSpecError(f"`{option}` names `{s.name}` twice; give each keyword input once.")
            seen.add(s.name)
    return specs


def parse_enum(enum_cls: type[Enum], value: str, field: str) -> Enum:
    """Turn a string into ``enum_cls`` or raise UnknownNameError naming ``field`` and the choices."""
    try:
        return enum_cls(value.strip().lower())
    except ValueError:
        choices = ", ".join(e.value for e in enum_cls)  # type: ignore[attr-defined]
        raise UnknownNameError(f"`{field}` {value!r} is not valid; choose one of: {choices}.") from None


#: Dataset names accepted in a job spec's ``data.train`` / ``data.eval`` (see :mod:`paddlefit.datasets`).
DATASETS = {"digits": "paddlefit.datasets:digits", "digits-warped": "paddlefit.datasets:digits_warped",
            "sentiment-zh": "paddlefit.datasets:sentiment_zh", "shapes": "paddlefit.datasets:shapes"}


class DataSpec(BaseModel):
    """Datasets and DataLoader settings (Paddle ``paddle.io.DataLoader`` names and defaults,
    ``python/paddle/io/reader.py``).

    ``train``/``eval`` are dataset factories, ``package.module:function`` (or a name in
    :data:`DATASETS`) called with ``train_args``/``eval_args``; each returns a ``paddle.io.Dataset`` whose
    samples are tuples ``(input..., label)`` (the last element is the label; the inputs go to ``forward`` in the
    order of the job's ``inputs``, named ones as keyword arguments) or dicts of keyword arguments (the label is
    the value under the job's ``label_arg``, else under ``label`` or ``labels``, which is then not passed).
    ``eval_batch_size``: samples per evaluation forward (default ``batch_size``); ``plan`` measures that pass.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    train: str | None = None
    train_args: dict[str, Any] = Field(default_factory=dict)
    eval: str | None = None
    eval_args: dict[str, Any] = Field(default_factory=dict)
    eval_batch_size: int | None = Field(default=None, ge=1, le=10**7, strict=True)
    shuffle: bool = True
    drop_last: bool = True
    num_workers: int = Field(default=0, ge=0)
    prefetch_factor: int = Field(default=2, ge=1)
    use_shared_memory: bool = True
    persistent_workers: bool = False


class ScheduleSpec(BaseModel):
    """Learning-rate schedule, stepped once per optimizer step (``paddle.optimizer.lr``).

    ``constant``; ``cosine`` (``CosineAnnealingDecay`` from ``lr`` to ``min_lr`` over the steps after warm-up);
    ``step`` (``StepDecay``: multiply by ``gamma`` every ``step_size`` steps). ``warmup_steps`` > 0 wraps it in
    ``LinearWarmup`` from 0 to ``lr``.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: Literal["constant", "cosine", "step"] = "constant"
    warmup_steps: int = Field(default=0, ge=0, le=10**9)
    min_lr: float = Field(default=0.0, ge=0)
    step_size: int = Field(default=1000, ge=1)
    gamma: float = Field(default=0.1, gt=0, lt=1)


class CheckpointSpec(BaseModel):
    """When to checkpoint and how many to keep. A checkpoint is also written at the end of the run and when a
    SIGTERM/SIGINT stops it. ``every_steps: 0`` and ``every_minutes: 0`` turn the periodic ones off."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    every_steps: int = Field(default=500, ge=0)
    every_minutes: float = Field(default=10.0, ge=0)
    keep_last: int = Field(default=3, ge=1)
    #: ``true``: checkpoint after the first step, then every Daly-optimal interval for the measured write time
    #: and ``interruptions_per_hour`` (``every_steps``/``every_minutes`` are not used).
    auto_interval: bool = False
    #: spot interruptions per hour assumed by ``auto_interval`` (default one per 24 h).
    interruptions_per_hour: float = Field(default=1.0 / 24.0, ge=1e-6, le=3600)


class BudgetSpec(BaseModel):
    """Stop the run cleanly (final checkpoint, exit code 4) once its wall time reaches ``max_hours`` or its cost
    ``max_cost_usd`` at ``price_usd_per_hour`` (the whole job's rate; ``train --price-per-hour``/``--instance``
    can supply it, and the trainer refuses ``max_cost_usd`` without one). Wall time counts across resumes of the
    run (it is stored in the checkpoint). Unset limits are off."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    # strict: a YAML `true` is not 1 hour (strict floats still take integers)
    max_hours: float | None = Field(default=None, gt=0, le=1e6, strict=True)
    max_cost_usd: float | None = Field(default=None, gt=0, le=1e9, strict=True)
    price_usd_per_hour: float | None = Field(default=None, gt=0, le=1e6, strict=True)


class JobSpec(BaseModel):
    """The job spec file (YAML) that `plan --config`, `train`, `doctor --config` and `image CONFIG` read.

    Unknown keys and wrong types are errors that name the key. ``batch_size`` is the per-device micro-batch;
    the global batch is ``batch_size x devices x grad_accum_steps``. ``epochs`` and ``max_steps`` (optimizer
    steps) both bound the run; the first reached ends it. ``weight_decay`` null = the optimizer's default
    (AdamW 0.01, the others none). ``loss`` is ``cross_entropy``, ``mse`` or
    ``package.module:function(output, label) -> scalar``. ``visualdl: true`` also logs scalars to
    ``RUN_DIR/visualdl`` (``visualdl --logdir RUN_DIR/visualdl``; needs the ``visualdl`` extra).
    ``oom_backoff: true`` (default): on an out-of-memory error in a step, every device halves its micro-batch and
    doubles accumulation (global batch unchanged) and redoes the step, down to micro-batch 1. On several devices
    the gradients are then all-reduced after the backward pass instead of overlapped with it; ``false`` keeps
    the overlap and makes an out-of-memory error fatal. ``cpu_threads``: Paddle's CPU math threads per training
    process (default: this node's cores / its training processes); with DataLoader workers on a CPU run, fewer
    threads leave cores to the workers (``paddlefit tune`` measures it). ``lazy_mode``: Adam/AdamW update only
    the rows that have a gradient in the batch (Paddle's ``lazy_mode``); it pays off with sparse embedding
    gradients (``paddle.nn.Embedding(sparse=True)``, e.g. ``model_args: {sparse: true}`` for the text examples).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str = Field(min_length=1)
    model_args: dict[str, Any] = Field(default_factory=dict)
    inputs: list[str] = Field(default_factory=list)
    label: str | None = None
    label_arg: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    batch_size: int = Field(default=32, ge=1)
    grad_accum_steps: int = Field(default=1, ge=1)
    epochs: float | None = Field(default=None, gt=0, le=1e6)
    max_steps: int | None = Field(default=None, ge=1, le=10**12)
    loss: str | None = None
    optimizer: OptimizerName = OptimizerName.ADAM
    lr: float = Field(default=1e-3, gt=0)
    weight_decay: float | None = Field(default=None, ge=0)
    schedule: ScheduleSpec = Field(default_factory=ScheduleSpec)
    precision: Precision = Precision.FP32
    devices: int = Field(default=1, ge=1)
    seed: int = Field(default=0, ge=0, lt=2**31)
    data: DataSpec = Field(default_factory=DataSpec)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    log_every: int = Field(default=10, ge=1)
    oom_backoff: bool = True
    lazy_mode: bool = Field(default=False, strict=True)
    cpu_threads: int | None = Field(default=None, ge=1, le=4096, strict=True)
    visualdl: bool = False
    run_dir: str = "runs/job"

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

    @model_validator(mode="after")
    def _min_lr_below_lr(self) -> JobSpec:
        if self.schedule.min_lr > self.lr:
            raise ValueError(f"schedule.min_lr {self.schedule.min_lr} is above lr {self.lr}; make it <= lr")
        if self.lazy_mode and self.optimizer not in (OptimizerName.ADAM, OptimizerName.ADAMW):
            raise ValueError(f"lazy_mode is an Adam/AdamW option; optimizer is {self.optimizer.value} (SGD updates "
                             "sparse gradients row by row already)")  # fmt: skip
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


def _unique_key_loader() -> type:
    import yaml

    class Loader(yaml.SafeLoader):
        """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last one silently)."""

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"key `{key}` is given twice",
                                                            key_node.start_mark)  # fmt: skip
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return Loader


def load_job_spec(path: str | Path, option: str = "--config") -> JobSpec:
    """Read and validate a job spec YAML file.

    Raises:
        JobSpecError: unreadable file, YAML syntax error, unknown key, wrong type or bad input spec; the
            message names the file and the key.
    """
    import yaml
    from pydantic import ValidationError

    from paddlefit.errors import PaddlefitError
    from paddlefit.fileio import read_text_limited

    unique_key_loader = _unique_key_loader()

    p = Path(path)
    try:
        text = read_text_limited(p, option, limit=1024**2)
    except PaddlefitError as exc:
        raise JobSpecError(str(exc)) from None
    try:
        # anchors and aliases are refused: a job spec needs none, and nested aliases expand exponentially
        if any(isinstance(t, yaml.AnchorToken | yaml.AliasToken) for t in yaml.scan(text)):
            raise JobSpecError(f"Job spec `{p}` uses YAML anchors/aliases (`&`/`*`); write the values out.")
        doc = yaml.load(text, Loader=unique_key_loader)  # a SafeLoader subclass
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
        e = exc.errors()[0]
        key = ".".join(str(x) for x in e["loc"]) or "?"
        hint = " (unknown key: remove it or check its spelling)" if e["type"] == "extra_forbidden" else ""
        got = repr(e.get("input"))
        got = got if len(got) <= 80 else got[:77] + "..."
        raise JobSpecError(f"Job spec `{p}`, key `{key}`: {e['msg']}{hint} (got {got}).") from None
    for key, check in (("inputs", spec.input_specs), ("label", spec.label_spec)):
        try:
            check()
        except InputSpecError as exc:
            raise JobSpecError(f"Job spec `{p}`, key `{key}`: {str(exc)[:800]}") from None
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


def merge_loader_options(spec: JobSpec | None, *, num_workers: int | None = None, prefetch_factor: int | None = None,
                         batch_size: int | None = None, inputs: list[str] | None = None,
                         devices: int | None = None) -> LoaderOptions:  # fmt: skip
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
