"""Every command-line option of ``paddlefit``, each written once: its flags, help, CLI type and default.

The commands build their typer parameters from these records (:func:`paddlefit.cli.params.command`), and the
request models name a field by the option it stands for in their messages (:meth:`Option.field`), so a flag, its
help text and its default live here and nowhere else. An option whose meaning depends on the command (``--json``
prints a different document per command, ``--out`` is a file for ``report`` and a folder for ``launch``) is
one base record and a :meth:`Option.but` per other meaning: the flag is still written once.

The request fields check the values (:mod:`paddlefit.validation`): a range several requests share is the record's
``bounds``, spread into each field; a default the core applies and the help shows is the record's ``shown``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Option:
    """One command-line option (or positional argument).

    Attributes:
        name: the Python name the command reads it by (``batch_size``: ``args.batch_size``).
        decls: the flags, as typer takes them (``("--batch-size", "-b")``, ``("--tf32/--no-tf32",)``); an
            argument's is its name.
        type: the value's type on the command line (``int``, ``list[str]`` for a repeatable option, ``Path``).
        default: the value when the option is not given (None = not given; ``...`` = a required argument).
        argument: a positional argument rather than an option.
        help: the ``--help`` text; ``{key}`` stands for ``shown[key]``, and ``{spec:KEY}`` for the job spec's
            description of ``KEY`` (:func:`paddlefit.jobspec.spec.field_help`, filled in where the command is built:
            the spec describes its keys once).
        deprecated: old spellings among ``decls``, still accepted for one release: the help says so, and using
            one prints a warning naming the new flag (:func:`paddlefit.cli.common.warn_deprecated`).
        bounds: the range a value must lie in, as pydantic's ``Field`` takes it (``{"ge": 1}``), for an option
            that several requests take: each request field spreads them (``Field(..., **options.X.bounds)``), so
            the range is written once. An option one request takes keeps its range on that field.
        empty_ok: an empty value means something (``--setup ""``: no setup); every other option refuses one.
        shown: defaults the core applies when the option is not given (the value typer sees is None), by key:
            the help shows them, and the core's field or constant reads them here (``BATCH_SIZE.shown["train"]``),
            so the figure is written once.
    """

    name: str
    decls: tuple[str, ...]
    type: Any
    default: Any = None
    argument: bool = False
    help: str = ""
    deprecated: tuple[str, ...] = ()
    empty_ok: bool = False
    bounds: Mapping[str, float] = field(default_factory=dict)
    shown: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Write ``shown`` into the help text (``{key}``; a tuple as ``1, 8, 32``, a float as ``%g``)."""
        text = self.help
        for key, value in self.shown.items():
            if isinstance(value, tuple):
                value = ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
            elif isinstance(value, float):
                value = f"{value:g}"
            text = text.replace("{" + key + "}", str(value))
        for alias in self.deprecated:
            note = f" (`{alias}`: deprecated alias, removed in the next release.)"
            text = text if text.endswith(note) else text + note
        object.__setattr__(self, "help", text)

    @property
    def flag(self) -> str:
        """How messages name it: the first flag (``--batch-size``), a boolean pair whole (``--tf32/--no-tf32``),
        an argument in capitals (``MODEL``)."""
        return self.name.upper() if self.argument else self.decls[0]

    def check(self, value: float) -> None:
        """Refuse ``value`` outside :attr:`bounds`, for a core function that takes the option as an argument
        rather than through a request field.

        Raises:
            PaddlefitError: ``value`` out of range, named by :attr:`flag` (the request messages' words).
        """
        from paddlefit.validation import check_range

        check_range(self.flag, value, self.bounds, self.type)

    def but(self, **changes: Any) -> Option:
        """This option with another meaning in one command (``help``, ``default``, ``type`` or ``name``)."""
        return dataclasses.replace(self, **changes)

    def field(self) -> dict[str, Any]:
        """``json_schema_extra`` of a request field that stands for this option: messages about the field name
        the flag (:class:`paddlefit.validation.RequestModel`)."""
        return {"flag": self.flag}


#: ``paddlefit --version`` (eager: read by the root callback before any verb)
VERSION = Option("version", ("--version",), bool, default=False, help="Print the version and exit.")
MODEL_ARG = Option(
    "model",
    ("model",),
    str,
    argument=True,
    help="Zoo name (`paddlefit models`) or `package.module:factory` (or use --config).",
)
CONFIG = Option(
    "config",
    ("--config", "-c"),
    Path,
    help="Job spec YAML (model, inputs, batch_size, ...); options given on the command line override it.",
)
BATCH_SIZE = Option(
    "batch_size",
    ("--batch-size", "-b"),
    list[int],
    help=(
        "Per-device micro-batch size (samples) [{train}]. With --inference: batch sizes to serve, repeatable [{serve}]."
    ),
    shown={"train": 32, "serve": (1, 8, 32)},
    bounds={"ge": 1, "le": 10**7},
)
INPUT = Option(
    "inputs",
    ("--input", "-i"),
    list[str],
    help=(
        "Per-sample input, e.g. float32[3,224,224] or int64[128]; repeat for multi-input models, in "
        "forward()'s order; name=SPEC passes a keyword argument (token_type_ids=int64[128]:2). Default: "
        "the zoo model's own."
    ),
)
LABEL = Option(
    "label",
    ("--label",),
    str,
    help=(
        "Per-sample label spec, e.g. int64[]:10 (class ids) or int64[512,512]:19 (a mask). Default: "
        "data.train's, else generated from the loss."
    ),
)
LABEL_ARG = Option(
    "label_arg",
    ("--label-arg",),
    str,
    help="Pass the label to forward() as this keyword (a model that computes its own loss, e.g. labels).",
)
LOSS = Option(
    "loss",
    ("--loss",),
    str,
    help=(
        "cross_entropy | mse | package.module:function (default: the model's own loss if it returns one, "
        "else cross_entropy)."
    ),
)
EVAL_BATCH_SIZE = Option(
    "eval_batch_size",
    ("--eval-batch-size",),
    int,
    help="Samples per evaluation forward (default: data.eval_batch_size, else --batch-size).",
    bounds={"ge": 1, "le": 10**7},
)
MODEL_ARG_PLAN = Option(
    "model_arg",
    ("--model-arg",),
    list[str],
    help="key=value passed to the model factory.",
)
OPTIMIZER = Option(
    "optimizer",
    ("--optimizer",),
    str,
    help="sgd | momentum | adam | adamw \\[{train}; parallel planner: {llm}]",
    shown={"train": "adam", "llm": "adamw"},
)
PRECISION = Option(
    "precision",
    ("--precision",),
    str,
    help=(
        "fp32 | fp16-o1 | bf16-o1 | fp16-o2 | bf16-o2 \\[{train}; parallel planner: {llm}]; with --inference: fp32 |"
        " fp16 | int8 (TensorRT) \\[{serve}]."
    ),
    shown={"train": "fp32", "llm": "bf16-o2", "serve": "fp32"},
)
#: ``cost`` has no parallel planner: its help names the defaults it applies
OPTIMIZER_COST = OPTIMIZER.but(help="sgd | momentum | adam | adamw \\[{train}]")
PRECISION_COST = PRECISION.but(
    help=(
        "fp32 | fp16-o1 | bf16-o1 | fp16-o2 | bf16-o2 \\[{train}]; with --inference: fp32 | fp16 | int8 (TensorRT) "
        "\\[{serve}]."
    )
)
TF32 = Option(
    "tf32",
    ("--tf32/--no-tf32",),
    bool,
    help=(
        "fp32 matmul/conv on TF32 tensor cores (Ampere+; Paddle's default) or, with --no-tf32, on the FP32"
        " CUDA cores (TF32 off for reproducibility). Default: the spec's `tf32`, else on."
    ),
)
GPU = Option(
    "gpu",
    ("--gpu",),
    list[str],
    help="Only these GPUs (repeatable). Default: whole catalog.",
)
DEVICES = Option(
    "devices", ("--devices",), int, help="Data-parallel GPUs per target (adds all-reduce time) [1].", bounds={"ge": 1}
)
DATASET_SIZE = Option(
    "dataset_size", ("--dataset-size",), int, help="Samples per epoch, for time to train.", bounds={"ge": 1}
)
EPOCHS = Option("epochs", ("--epochs",), float, help="Epochs, for time to train.", bounds={"gt": 0})
CATALOG = Option(
    "catalog",
    ("--catalog",),
    list[Path],
    help="Extra GPU CSV (same header as shipped).",
)
CALIBRATION = Option(
    "calibration",
    ("--calibration",),
    list[Path],
    help="Calibration JSON from `paddlefit calibrate` on a device.",
)
SAFETY_MARGIN = Option(
    "safety_margin",
    ("--safety-margin",),
    float,
    default=0.9,
    help="Fraction of GPU memory a peak may use and still fit.",
    bounds={"gt": 0, "le": 1},
)
NO_RUNS = Option(
    "no_runs",
    ("--no-runs",),
    bool,
    default=False,
    help=(
        "Do not correct step times by the runs this machine recorded on the device (`paddlefit runs`); "
        "shown as `calibration: runs (n=K)`."
    ),
)
MAX_PROBE_GIB = Option(
    "max_probe_gib",
    ("--max-probe-gib",),
    float,
    help=("Probe on CPU only if fp32 Adam states (16 B/param) stay below this. Default: min(25% of RAM, 8 GiB)."),
)
PROBE_TIMEOUT = Option(
    "probe_timeout",
    ("--probe-timeout",),
    float,
    help=(
        "Seconds the CPU probe (run in a child process) may take before it is killed and the plan fails "
        "naming the model and inputs [{timeout}]."
    ),
    shown={"timeout": 600.0},
)
PROBE_MEMORY_GIB = Option(
    "probe_memory_gib",
    ("--probe-memory-gib",),
    float,
    help=(
        "Memory the CPU probe's child process may allocate (RLIMIT_DATA), GiB; past it the plan fails "
        "naming it. Default: 90% of the available RAM."
    ),
)
JSON = Option(
    "json_out",
    ("--json",),
    bool,
    default=False,
    help="Print one JSON document on stdout.",
)
SEQ_LEN = Option(
    "seq_len",
    ("--seq-len",),
    int,
    help="Parallel planner: tokens per sequence \\[min(max_position, 4096)].",
)
GLOBAL_BATCH = Option(
    "global_batch",
    ("--global-batch",),
    int,
    help="Parallel planner: sequences per optimizer step [4M tokens / seq-len].",
)
GPUS = Option(
    "gpus",
    ("--gpus",),
    int,
    help="Parallel planner: GPUs in the job [{gpus}].",
    shown={"gpus": 8},
)
GPUS_PER_NODE = Option(
    "gpus_per_node",
    ("--gpus-per-node",),
    int,
    default=8,
    help="Parallel planner: GPUs per node.",
)
MFU = Option(
    "mfu",
    ("--mfu",),
    float,
    help="Parallel planner: fraction of dense peak compute reaches \\[published MFU per GPU class].",
)
NETWORK_GBIT_S = Option(
    "network_gbit_s",
    ("--network-gbit-s", "--network-gbps"),
    float,
    help=("Parallel planner: inter-node network per node, Gbit/s [AWS p4d 400 / p5 3200]."),
    deprecated=("--network-gbps",),
)
FLASH_ATTENTION = Option(
    "flash_attention",
    ("--flash-attention/--no-flash-attention",),
    bool,
    help=(
        "Plan GPU rows with each eager attention core (matmul -> softmax -> matmul) as one "
        "FlashAttention-2 kernel (CC 8.0+, fp16/bf16), or as written (job spec `attention`) \\[eager]. "
        "Parallel planner: fused attention, no s x s activations \\[on]."
    ),
)
TOP = Option(
    "top",
    ("--top",),
    int,
    default=5,
    help="Parallel planner: layouts shown per GPU.",
)
EXPLAIN = Option(
    "explain",
    ("--explain",),
    list[str],
    help=(
        "Also print the predicted top operators of one step on this GPU (repeatable): a profile of a card "
        "you do not have."
    ),
)
INFERENCE = Option(
    "inference",
    ("--inference",),
    bool,
    default=False,
    help=(
        "Plan serving instead of training: latency, throughput and memory per batch on every GPU, the CPU "
        "row measured here, USD per million requests. MODEL may also be an exported model (a `paddlefit "
        "export` folder, or model.json/model.pdmodel beside model.pdiparams)."
    ),
)
ENGINE = Option(
    "engine",
    ("--engine",),
    str,
    help=(
        "With --inference: eager (dygraph under no_grad) | paddle-inference (its GPU fusion passes) | "
        "tensorrt \\[paddle-inference]."
    ),
)
LATENCY_MS = Option(
    "latency_ms",
    ("--latency-ms",),
    float,
    help="With --inference: latency target per batch, ms; each GPU gets the largest batch within it.",
)
NO_CPU = Option(
    "no_cpu",
    ("--no-cpu",),
    bool,
    default=False,
    help="With --inference: skip the CPU measurement.",
)
THREADS = Option(
    "threads",
    ("--threads",),
    list[int],
    help="With --inference: CPU threads of the measured CPU row, repeatable [1 and the physical cores].",
)
CURRENCY = Option(
    "currency",
    ("--currency",),
    str,
    help=(
        "Print amounts in this ISO 4217 currency, e.g. CNY, at its --fx-rate (--json keeps USD and records "
        "the rate) [USD]. plan: with --inference."
    ),
)
FX_RATE = Option(
    "fx_rate",
    ("--fx-rate",),
    list[str],
    help=(
        "CODE=RATE: units of that currency per USD, e.g. CNY=7.10 (repeatable); converts --prices files "
        "with a currency column and --currency. No rate is shipped. plan: with --inference."
    ),
)
CPU_BUDGET_S = Option(
    "cpu_budget_s",
    ("--cpu-budget-s",),
    float,
    help=(
        "With --inference: wall seconds the measured CPU row may take (build, export, measure); batches it"
        " does not reach are listed [{budget}]."
    ),
    shown={"budget": 20.0},
)
CONFIG_COST = CONFIG.but(
    help=(
        "Job spec YAML; the job length comes from data.train and epochs/max_steps unless "
        "--dataset-size/--epochs are given."
    )
)
FLASH_ATTENTION_COST = FLASH_ATTENTION.but(
    help=(
        "Time GPUs with each eager attention core as one FlashAttention-2 kernel (CC 8.0+, fp16/bf16), or "
        "as written (job spec `attention`) \\[eager]; see `plan`."
    )
)
CLOUD = Option(
    "cloud",
    ("--cloud",),
    list[str],
    help="Only these clouds (repeatable): aws, gcp, azure, lambda, runpod.",
)
GPU_COST = GPU.but(help="Only instances with these GPUs (repeatable).")
REGION = Option(
    "region",
    ("--region",),
    str,
    help=(
        "One region for every cloud. Default: aws us-east-1, gcp us-central1, azure eastus, lambda "
        "us-east-1, runpod US."
    ),
)
SPOT = Option(
    "spot",
    ("--spot",),
    bool,
    default=False,
    help="Rank by spot expected cost (on-demand where no spot price).",
)
INTERRUPTIONS_PER_HOUR = Option(
    "interruptions_per_hour",
    ("--interruptions-per-hour",),
    float,
    help=(
        "Spot interruptions per instance-hour, for every instance. Default: each instance's published AWS "
        "Spot Instance Advisor bucket, else 1/24 (`default (no published rate)`)."
    ),
    bounds={"gt": 0},
)
SPOT_BUCKET = Option(
    "spot_bucket",
    ("--spot-bucket",),
    str,
    help=(
        "AWS Spot Instance Advisor bucket for every instance: '<5%', '5-10%', '10-15%', '15-20%' or '>20%'"
        " (share interrupted per month)."
    ),
)
DISK_MIB_S = Option(
    "disk_mib_s",
    ("--disk-mib-s", "--disk-mbps"),
    float,
    help=("Checkpoint write bandwidth, MiB/s [125, EBS gp3]."),
    deprecated=("--disk-mbps",),
)
RESTART_MINUTES = Option(
    "restart_minutes",
    ("--restart-minutes",),
    float,
    help=("Minutes lost per interruption besides the lost work (new instance, start-up, checkpoint load) [10]."),
)
PRICES = Option(
    "prices",
    ("--prices",),
    list[Path],
    help="Extra price CSV (same header as shipped; optional `gpu` column naming the GPU catalog entry).",
)
SHIPPED_PRICES = Option(
    "shipped_prices",
    ("--shipped-prices",),
    bool,
    default=False,
    help="Ignore SkyPilot's cached catalogs (~/.sky/catalogs) and use the shipped snapshot.",
)
TOP_COST = TOP.but(default=15, help="Table rows to show (JSON has all).", bounds={"ge": 1})
WIDE = Option(
    "wide",
    ("--wide",),
    bool,
    default=False,
    help=(
        "Every table column, however wide the terminal; without it ckpt, time and spot time go, in that "
        "order, while the table is wider."
    ),
)
INFERENCE_COST = INFERENCE.but(
    help=(
        "Price serving instead of training: USD per million requests per instance type, at each GPU's "
        "serving batch (`plan --inference`)."
    )
)
CONFIG_ARG = Option(
    "config",
    ("config",),
    Path,
    default=...,
    argument=True,
    help="Job spec YAML (see examples/digits.yaml).",
)
DEVICES_TRAIN = DEVICES.but(
    type=str,
    bounds={},  # a count or GPU ids, checked by the trainer's request
    help=("{spec:devices} A count (2) or GPU ids (0,1). Default: the spec's `devices`."),
)
RUN_DIR = Option(
    "run_dir",
    ("--run-dir",),
    str,
    help=("{spec:run_dir} Default: the spec's `run_dir`."),
)
RESUME = Option(
    "resume",
    ("--resume",),
    str,
    default="auto",
    help=(
        "auto (newest checkpoint that verifies; exit 2 when there are checkpoints and none can be "
        "resumed), never (start over: on a finished run only with --overwrite), or a checkpoint directory."
    ),
)
MAX_STEPS = Option(
    "max_steps",
    ("--max-steps",),
    int,
    help=("max_steps: {spec:max_steps} The LR schedule spans the run's length."),
)
MAX_HOURS = Option(
    "max_hours",
    ("--max-hours",),
    float,
    help=("budget.max_hours: {spec:budget.max_hours} Checkpoint, exit 4; wall time counts across resumes of the run."),
)
MAX_COST = Option(
    "max_cost",
    ("--max-cost",),
    float,
    help=("budget.max_cost_usd: {spec:budget.max_cost_usd} Checkpoint, exit 4; needs --price-per-hour or --instance."),
)
PRICE_PER_HOUR = Option(
    "price_per_hour",
    ("--price-per-hour",),
    float,
    help=("budget.price_usd_per_hour: {spec:budget.price_usd_per_hour}"),
)
INSTANCE = Option(
    "instance",
    ("--instance",),
    str,
    help=(
        "Take the price from the catalog (`paddlefit cost`): an instance type such as g5.xlarge; with --cloud, --spot."
    ),
)
CLOUD_TRAIN = CLOUD.but(type=str, help="Cloud of --instance when the name is ambiguous.")
SPOT_TRAIN = SPOT.but(help="Use the spot price of --instance.")
CHECKPOINT_INTERVAL = Option(
    "checkpoint_interval",
    ("--checkpoint-interval",),
    str,
    help="`auto` (Daly optimum for the measured write time and the interruption rate) or minutes.",
)
INTERRUPTIONS_PER_HOUR_TRAIN = INTERRUPTIONS_PER_HOUR.but(
    help=("checkpoint.interruptions_per_hour: {spec:checkpoint.interruptions_per_hour} For --checkpoint-interval auto.")
)
SPOT_BUCKET_TRAIN = SPOT_BUCKET.but(
    help="An AWS Spot Instance Advisor bucket, e.g. '5-10%', instead of --interruptions-per-hour, for "
    "--checkpoint-interval auto."
)
PREDICT = Option(
    "predict",
    ("--predict/--no-predict",),
    bool,
    default=True,
    help=(
        "First ask the planner what this run will measure on its devices (a few seconds: `paddlefit "
        "plan`'s CPU probe), then record the measured figures beside it (comparison.json, summary.json). "
        "Also off with PADDLEFIT_NO_PREDICT=1."
    ),
)
OVERWRITE = Option(
    "overwrite",
    ("--overwrite",),
    bool,
    default=False,
    help=(
        "With `--resume never`: replace a finished run in the run directory (its checkpoints are deleted "
        "once the new job is accepted). Without it, `--resume never` on a finished run is refused (exit "
        "2)."
    ),
)
TRUST_CHECKPOINT = Option(
    "trust_checkpoint",
    ("--trust-checkpoint",),
    bool,
    default=False,
    help=(
        "Load a checkpoint from outside the run directory (`--resume PATH`), or one of an earlier "
        "paddlefit with a pickled rng.pkl: loading a checkpoint runs code from it (Paddle's .pdparams are "
        "pickles), so only for checkpoints you trust (docs/errors.md)."
    ),
)
JSON_TRAIN = JSON.but(
    help="Print summary.json on stdout at the end ({exit_code, reason, run_dir} when the run stops early)."
)
RUN_DIR_ARG = Option(
    "run_dir",
    ("run_dir",),
    Path,
    default=...,
    argument=True,
    help="The --run-dir of a `paddlefit train` run.",
)
CHECKPOINT = Option(
    "checkpoint",
    ("--checkpoint",),
    Path,
    help="A checkpoint directory (RUN_DIR/checkpoints/step-...). Default: the newest that verifies.",
)
OUT = Option(
    "out_dir",
    ("--out",),
    Path,
    help="Output directory (default: RUN_DIR/inference).",
)
BENCHMARK = Option(
    "benchmark",
    ("--benchmark",),
    bool,
    default=False,
    help=("Then measure the exported model's latency on this CPU with Paddle Inference (oneDNN), in a child process."),
)
BATCH_SIZE_EXPORT = BATCH_SIZE.but(
    name="batch_sizes",
    help="With --benchmark: samples per request; repeatable [{bench}].",
    shown={"bench": (1, 8)},
)
THREADS_EXPORT = THREADS.but(
    help="With --benchmark: CPU math threads; repeatable (default: 1 and the physical core count)."
)
JSON_EXPORT = JSON.but(help="Print the result as JSON.")
RUN_DIR_ARG_REPORT = RUN_DIR_ARG.but(help="The --run-dir of a `paddlefit train` run (finished, running or killed).")
OUT_REPORT = OUT.but(name="out_file", help="HTML file to write (default: RUN_DIR/report.html).")
JSON_REPORT = JSON.but(help="Print {out, plots, status, resumes} as JSON.")
CATALOG_GPUS = CATALOG.but(help="Extra GPU CSV (same header); adds/overrides rows.")
JSON_GPUS = JSON.but(help="Print one JSON document (with each row's source).")
CSV = Option(
    "csv_out",
    ("--csv",),
    bool,
    default=False,
    help="Print the catalog as CSV (a template for `--catalog`).",
)
MODEL = Option(
    "model",
    ("--model", "-m"),
    list[str],
    help="Zoo model to measure (repeatable). Default: lenet, mobilenet_v3_small, resnet18.",
)
BATCH_SIZE_CALIBRATE = BATCH_SIZE.but(help="Batch sizes (repeatable) [{calib}].", shown={"calib": (4, 8)})
PRECISION_CALIBRATE = PRECISION.but(
    type=list[str], help="Precisions (repeatable). Default: fp32 on CPU; fp32 + bf16-o1 (fp16-o1 before Ampere) on GPU."
)
DEVICE_NAME = Option(
    "device_name",
    ("--device-name",),
    str,
    help="Catalog GPU name to file results under (default: matched from the CUDA device name).",
)
OUT_CALIBRATE = Option(
    "out_file",
    ("--out", "-o"),
    Path,
    default=Path("calibration.json"),
    help="Calibration file to write.",
)
JSON_CALIBRATE = JSON.but(help="Print the calibration document on stdout.")
ALL = Option(
    "show_all",
    ("--all",),
    bool,
    default=False,
    help="Also list the checks that passed.",
)
JSON_DOCTOR = JSON.but(help="Print {snapshot, findings} as one JSON document.")
SNAPSHOT = Option(
    "snapshot_file",
    ("--snapshot",),
    Path,
    help="Save the collected snapshot to this JSON file.",
)
FROM = Option(
    "from_file",
    ("--from",),
    Path,
    help="Check a saved snapshot instead of this machine.",
)
FIX_SCRIPT = Option(
    "fix_script",
    ("--fix-script",),
    bool,
    default=False,
    help="Print the fixes that are shell exports/unsets.",
)
NUM_WORKERS = Option(
    "num_workers", ("--num-workers",), int, help="DataLoader workers per trainer (shm, cores).", bounds={"ge": 0}
)
PREFETCH_FACTOR = Option(
    "prefetch_factor", ("--prefetch-factor",), int, help="DataLoader prefetch_factor [2].", bounds={"ge": 1}
)
BATCH_SIZE_DOCTOR = BATCH_SIZE.but(type=int, help="Per-device batch size (shm need).")
INPUT_DOCTOR = INPUT.but(help="Per-sample input spec, e.g. float32[3,224,224].")
DEVICES_DOCTOR = DEVICES.but(help="Trainer processes on this machine [1].")
MODEL_DOCTOR = Option(
    "model",
    ("--model",),
    str,
    help="Zoo model or pkg.mod:factory (checkpoint size, disk check).",
)
RUN_DIR_DOCTOR = RUN_DIR.but(type=Path, help="Where checkpoints will be written (disk check) [.].")
CONFIG_DOCTOR = CONFIG.but(help="Job spec YAML: fills the job options above.")
MEASURE = Option(
    "measure",
    ("--measure/--no-measure",),
    bool,
    default=True,
    help=(
        "Time a small CPU training step under your OpenMP wait policy, the default and PASSIVE (fresh "
        "processes, a few seconds)."
    ),
)
CONFIG_ARG_IMAGE = CONFIG_ARG.but(
    default=None, help="Job spec YAML (DataLoader, devices, batch, inputs) to size the image."
)
PADDLE = Option(
    "paddle_version",
    ("--paddle",),
    str,
    help="Paddle version of the base image (default newest).",
)
CUDA = Option(
    "cuda",
    ("--cuda",),
    str,
    help="CUDA X.Y of the base image (default: newest the driver runs).",
)
CPU = Option(
    "cpu",
    ("--cpu",),
    bool,
    default=False,
    help="CPU image (no --gpus).",
)
XPU = Option(
    "xpu",
    ("--xpu",),
    bool,
    default=False,
    help=(
        "Kunlunxin XPU image: Paddle's published XPU image + the paddlepaddle-xpu wheel (chosen by itself "
        "for a snapshot of an XPU host)."
    ),
)
FROM_SNAPSHOT = Option(
    "from_snapshot",
    ("--from-snapshot",),
    Path,
    help="`paddlefit doctor --snapshot` of the host.",
)
OUT_IMAGE = OUT.but(default=Path("."), help="Directory for Dockerfile and requirements.txt.")
REQUIREMENT = Option(
    "requirement",
    ("--requirement", "-r"),
    list[str],
    help="Pinned dependency `name==version`.",
)
COMMAND = Option(
    "command",
    ("--command",),
    str,
    default="python train.py",
    help="Container command.",
)
NUM_WORKERS_IMAGE = NUM_WORKERS.but(help="DataLoader workers per trainer (sizes /dev/shm).")
BATCH_SIZE_IMAGE = BATCH_SIZE.but(type=int, help="Per-device batch size (sizes /dev/shm).")
INPUT_IMAGE = INPUT.but(help="Per-sample input spec (sizes /dev/shm).")
DEVICES_IMAGE = DEVICES.but(help="Trainer processes in the container [1].")
FIXED_SHAPE_CNN = Option(
    "fixed_shape_cnn",
    ("--fixed-shape-cnn",),
    bool,
    default=False,
    help="Bake in FLAGS_cudnn_exhaustive_search=1 (fixed input shapes only).",
)
IPC_HOST = Option(
    "ipc_host",
    ("--ipc-host",),
    bool,
    default=False,
    help="Share the host IPC namespace instead of --shm-size.",
)
ENV = Option(
    "env",
    ("--env",),
    list[str],
    help=(
        "A container variable, repeatable: NAME=value (baked in as ENV), or NAME to pass it by reference "
        "(`docker run -e NAME`, never in the image: the way to pass a secret; a secret-looking NAME=value "
        "is refused)."
    ),
)
CONFIG_ARG_LAUNCH = CONFIG_ARG.but(help="Job spec YAML.")
TARGET = Option(
    "target",
    ("--target", "-t"),
    str,
    default=...,
    help="local | ssh | skypilot | kubeflow",
)
NODES = Option("nodes", ("--nodes",), int, default=1, help="Nodes (machines or pods).", bounds={"ge": 1, "le": 1024})
GPUS_PER_NODE_LAUNCH = GPUS_PER_NODE.but(
    default=1, help="GPUs per node (0: one CPU process per node).", bounds={"ge": 0, "le": 64}
)
OUT_LAUNCH = OUT.but(default=Path("launch"), help="Directory for the files written.")
NAME = Option(
    "name",
    ("--name",),
    str,
    help="Job name: lower case, digits, '-' (default: from the spec file name).",
)
MASTER = Option(
    "master",
    ("--master",),
    str,
    help="local: node 0's HOST:PORT that every node can reach.",
)
HOSTS = Option(
    "hosts",
    ("--hosts",),
    str,
    help="ssh: comma-separated hosts, node 0 first (user@host ok).",
)
PORT = Option(
    "port",
    ("--port",),
    int,
    help="ssh/skypilot: rendezvous TCP port on node 0 [{port}].",
    shown={"port": 8090},
    bounds={"ge": 1, "le": 65535},
)
WORKDIR = Option(
    "workdir",
    ("--workdir",),
    str,
    help="ssh: directory on every host (default: this directory's path).",
)
RUN_DIR_LAUNCH = RUN_DIR.but(help="local/ssh: run directory on shared storage (default: the spec's run_dir).")
GPU_LAUNCH = GPU.but(
    type=str, help="skypilot: GPU (catalog name such as A100-SXM4-80GB or SkyPilot's A100-80GB); see `paddlefit cost`."
)
SPOT_LAUNCH = SPOT.but(help="skypilot: spot instances (managed recovery resumes the run).")
BUCKET = Option(
    "bucket",
    ("--bucket",),
    str,
    help=(
        "skypilot: checkpoint bucket URL (s3://b/p, gs://...) (default: a new bucket named <name>-ckpt-<8 "
        "random hex>, kept in the file)."
    ),
)
CLOUD_LAUNCH = CLOUD.but(type=str, help="skypilot: pin a cloud (aws, gcp, azure, lambda).")
SETUP = Option(
    "setup",
    ("--setup",),
    str,
    help=(
        "skypilot: setup commands on each node, run in the synced workdir (the directory you launch from):"
        " install paddlefit, the Paddle GPU wheel and your code's dependencies \\[{setup}]."
    ),
    empty_ok=True,
    shown={"setup": "pip install -r requirements.txt"},
)
IMAGE = Option(
    "image",
    ("--image",),
    str,
    help="kubeflow (and skypilot image_id): the container image, e.g. built from `paddlefit image`.",
)
PVC = Option(
    "pvc",
    ("--pvc",),
    str,
    help=(
        "kubeflow: PersistentVolumeClaim for checkpoints (default: <name>-checkpoints; ReadWriteMany for "
        "several nodes)."
    ),
)
SHM_GIB = Option(
    "shm_gib",
    ("--shm-gib",),
    int,
    help="kubeflow: /dev/shm size per pod, GiB [{shm}].",
    shown={"shm": 8},
    bounds={"ge": 1, "le": 4096},
)
FROM_SNAPSHOT_LAUNCH = FROM_SNAPSHOT.but(
    help="A node's `paddlefit doctor --snapshot` file: its NCCL fixes go into the environment."
)
NCCL_IFNAME = Option(
    "nccl_ifname",
    ("--nccl-ifname",),
    str,
    help="NCCL_SOCKET_IFNAME for the nodes.",
)
NO_IB = Option(
    "no_ib",
    ("--no-ib",),
    bool,
    default=False,
    help="NCCL_IB_DISABLE=1 (nodes without InfiniBand/RoCE).",
)
ENV_LAUNCH = ENV.but(
    help=(
        "A variable for the nodes, repeatable: NAME=value, or NAME to pass it by reference (read where the"
        " job starts, never written into the files; the way to pass a secret: a secret-looking NAME=value "
        "is refused)."
    )
)
JSON_LAUNCH = JSON.but(help="Print {target, files, commands} as JSON.")
CONFIG_ARG_PROFILE = CONFIG_ARG.but(help="Job spec YAML (see examples/digits-warped.yaml).")
STEPS = Option(
    "steps",
    ("--steps",),
    int,
    default=30,
    help="Measured optimizer steps (after the warm-up).",
    bounds={"ge": 3, "le": 100_000},
)
WARMUP = Option(
    "warmup",
    ("--warmup",),
    int,
    default=5,
    help="Steps run first and left out of the statistics.",
    bounds={"ge": 0, "le": 100_000},
)
PLOT = Option(
    "plot",
    ("--plot",),
    Path,
    help="Write a PNG of each step's components to this file.",
)
OPS = Option(
    "ops",
    ("--ops",),
    int,
    default=0,
    help=(
        "Also list the K operators with the most time (paddle.profiler, a few extra steps after the timed "
        "ones; 0 = off)."
    ),
)
BUDGET_MINUTES = Option(
    "budget_minutes",
    ("--budget-minutes",),
    float,
    default=5.0,
    help="Stop starting new trials after this long (the baseline and the confirmation runs always run).",
)
STEPS_TUNE = STEPS.but(help="Timed optimizer steps per trial.")
WARMUP_TUNE = WARMUP.but(help="Untimed steps before each trial's timing.")
CONFIRM = Option(
    "confirm",
    ("--confirm",),
    int,
    default=2,
    help="Extra interleaved runs of the baseline and the two best.",
    bounds={"ge": 1, "le": 20},
)
GLOBAL_BATCH_TUNE = GLOBAL_BATCH.but(
    type=str,
    default="keep",
    help=(
        "Batch-size candidates (x2, x4, x8 under the memory limit): `keep` divides grad_accum_steps by the"
        " same factor (only jobs that accumulate get candidates), `free` lets the global batch grow "
        "(changes the optimisation), `off` skips them."
    ),
)
WRITE = Option(
    "write",
    ("--write",),
    Path,
    help="Write the winning job spec (YAML) here, with its own `run_dir` (`<run_dir>-tuned`).",
)
PROFILE = Option(
    "profile",
    ("--profile",),
    Path,
    help=(
        "`paddlefit profile CONFIG --json` output: its fixes are tried first and each is said confirmed or"
        " refuted by the measurement."
    ),
)
JSON_RUNS = JSON.but(help="Print the runs as one JSON list (every field).")
MODEL_DOCTOR_RUNS = MODEL_DOCTOR.but(
    help=(
        "Only runs of this model: the spec's `model` string or its name after the module (`digits_cnn` for"
        " `paddlefit.models.examples:digits_cnn`), case-insensitive."
    )
)
DEVICE = Option(
    "device",
    ("--device",),
    str,
    help="Only runs on this device name (L4, A100-SXM4-80GB, cpu) or kind (gpu, cpu).",
)
LAST = Option(
    "last",
    ("--last",),
    int,
    help="Only the newest N runs (N >= 1).",
)
HERE = Option(
    "here",
    ("--here",),
    bool,
    default=False,
    help="Only the runs whose run directory is under the current directory (this project's).",
)
WIDE_RUNS = WIDE.but(help="Every column at its full width (default: the columns that fit the terminal).")
RUN_ID_ARG = Option(
    "run_id",
    ("run_id",),
    int,
    default=...,
    argument=True,
    help="A run id (the first column of `paddlefit runs`).",
)
JSON_RUNS_SHOW = JSON.but(help="Print the run as one JSON object (every field).")
RUN_A_ARG = Option(
    "run_a",
    ("run_a",),
    int,
    default=...,
    argument=True,
    help="The first run id (the baseline of the ratios).",
)
RUN_B_ARG = Option(
    "run_b",
    ("run_b",),
    int,
    default=...,
    argument=True,
    help="The second run id.",
)
JSON_RUNS_COMPARE = JSON.but(help="Print the comparison as one JSON object.")
