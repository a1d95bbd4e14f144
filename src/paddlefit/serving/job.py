"""``plan --inference`` / ``cost --inference`` without the rendering: options -> the served model -> GPU rows,
the CPU row measured on this machine, and the cost per million requests (:mod:`paddlefit.serving.plan`)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from pydantic import ConfigDict, Field, model_validator

from paddlefit import options
from paddlefit.catalog.currency import MoneyOptions
from paddlefit.errors import JobFailedError, PaddlefitError
from paddlefit.estimate.inference import ENGINES, PRECISIONS, eval_ops, peak_activation_bytes, weight_bytes
from paddlefit.process.quietstart import at_signal_exit
from paddlefit.serving.model import ServedModel, resolve_served
from paddlefit.serving.plan import (
    InferencePlan,
    InferencePoint,
    InferenceTarget,
    ServingSetup,
    assumptions,
    cost_per_million,
    gpu_inference_target,
)
from paddlefit.units import GIB

#: Batch sizes planned when none is given.
DEFAULT_BATCHES = options.BATCH_SIZE.shown["serve"]
#: The CPU row is measured for models whose fp32 weights are at most this (bytes): above it one forward takes
#: seconds on a few cores (GPT-2 XL, 6 GB: 2.1 s at batch 1 on this project's 2-core CI machine), and the plan would
#: spend minutes exporting and timing it.
CPU_MEASURE_MAX_WEIGHT_BYTES = 2 * GIB
#: Seconds the CPU row may take by default (``--cpu-budget-s``): enough for a ResNet-50 at batches 1 and 8 on two
#: cores; the GPU rows, which are predicted, take a second or two besides.
DEFAULT_CPU_BUDGET_S = options.CPU_BUDGET_S.shown["budget"]


class InferenceRequest(MoneyOptions):
    """What ``plan --inference`` was asked (None = not given; defaults are the fields' own).

    Raises:
        PaddlefitError: (on construction) a value no plan can have, naming the option.
    """

    model_config = ConfigDict(frozen=True)

    model: str | None = Field(
        None, description="Zoo name, import path or exported program path.", json_schema_extra=options.MODEL_ARG.field()
    )
    config: Path | None = Field(None, description="Job spec YAML.", json_schema_extra=options.CONFIG.field())
    inputs: list[str] | None = Field(
        None, description="Per-sample input specs.", json_schema_extra=options.INPUT.field()
    )
    model_args: list[str] | None = Field(
        None,
        description="``key=value`` strings for the model factory.",
        json_schema_extra=options.MODEL_ARG_PLAN.field(),
    )
    batch_sizes: list[Annotated[int, Field(ge=1, le=65536)]] = Field(
        default_factory=lambda: list(DEFAULT_BATCHES),
        min_length=1,
        description="Samples per forward.",
        json_schema_extra=options.BATCH_SIZE.field(),
    )
    precision: str = Field(
        options.PRECISION.shown["serve"],
        description="fp32 | fp16 | int8 (:data:`~paddlefit.estimate.inference.PRECISIONS`).",
        json_schema_extra=options.PRECISION.field(),
    )
    engine: str = Field(
        "paddle-inference",
        description="eager | paddle-inference | tensorrt (:data:`~paddlefit.estimate.inference.ENGINES`).",
        json_schema_extra=options.ENGINE.field(),
    )
    latency_ms: float | None = Field(
        None,
        gt=0,
        le=3_600_000,
        description="The latency target per batch, ms (at most an hour).",
        json_schema_extra=options.LATENCY_MS.field(),
    )
    gpus: list[str] = Field(
        default_factory=list,
        description="GPU names (default: the whole catalog).",
        json_schema_extra=options.GPU.field(),
    )
    catalog_files: list[str] = Field(
        default_factory=list, description="Extra GPU CSVs.", json_schema_extra=options.CATALOG.field()
    )
    cpu: bool = Field(True, description="Measure the CPU row (Paddle Inference on this machine).")
    threads: list[int] | None = Field(
        None,
        description="The CPU row's thread counts (None: 1 and the physical cores).",
        json_schema_extra=options.THREADS.field(),
    )
    cpu_budget_s: float | None = Field(
        None,
        gt=0,
        le=86_400,
        description="Wall seconds the CPU row may take: "
        "building and exporting the model, then measuring; batches it leaves are "
        "listed (None: :data:`DEFAULT_CPU_BUDGET_S`).",
        json_schema_extra=options.CPU_BUDGET_S.field(),
    )
    prices: list[str] = Field(
        default_factory=list,
        description="Price CSVs, as ``cost`` takes them.",
        json_schema_extra=options.PRICES.field(),
    )
    shipped_prices: bool = Field(False, description="Ignore SkyPilot's cached catalogs.")
    clouds: list[str] = Field(
        default_factory=list, description="Only these clouds.", json_schema_extra=options.CLOUD.field()
    )
    region: str | None = Field(
        None, description="One region for every cloud.", json_schema_extra=options.REGION.field()
    )
    safety_margin: float = Field(
        options.SAFETY_MARGIN.default,
        description="Share of (capacity - CUDA context) a peak may use.",
        **options.SAFETY_MARGIN.bounds,
        json_schema_extra=options.SAFETY_MARGIN.field(),
    )
    tf32: bool = Field(True, description="Paddle's TF32 switches.", json_schema_extra=options.TF32.field())

    @model_validator(mode="after")
    def _servable(self) -> InferenceRequest:
        """A model or a spec; an engine and a serving precision that go together; the CPU row's ``--threads`` from
        1 to this machine's logical CPUs (:func:`~paddlefit.serving.cpu_bench.check_bench_args`)."""
        if self.model is None and self.config is None:
            raise PaddlefitError(
                "Give a MODEL (zoo name, `package.module:factory`, or an exported model folder) or `--config job.yaml`."
            )
        if self.engine not in ENGINES:
            raise PaddlefitError(f"`--engine {self.engine}`: one of {', '.join(ENGINES)}.")
        if self.precision not in PRECISIONS:
            raise PaddlefitError(
                f"`--precision {self.precision}`: serving takes one of {', '.join(PRECISIONS)} "
                "(training's fp16-o1/bf16-o2 are for `plan` without --inference)."
            )
        if self.precision == "int8" and self.engine != "tensorrt":
            raise PaddlefitError(
                "`--precision int8` runs on TensorRT only (Paddle Inference's int8 GPU path is "
                "TensorRT's): add `--engine tensorrt`."
            )
        if self.cpu and self.threads is not None:  # the CPU row's thread counts, refused before any work
            from paddlefit.serving.cpu_bench import check_bench_args

            check_bench_args(self.batch_sizes, self.threads)
        return self


def cpu_target(
    served: ServedModel,
    batches: list[int],
    threads: list[int] | None,
    progress: Callable[[str], None],
    deadline: float | None = None,
) -> InferenceTarget:
    """The CPU row, measured: the model built (a zoo transformer planned from its shape) and exported
    (``paddle.jit.save``) when it is not already, then run by Paddle Inference with oneDNN on this machine
    (:func:`~paddlefit.serving.cpu_bench.benchmark_cpu`, until ``deadline``, ``time.time()`` seconds): median and p95
    per batch and thread count, the serving process's peak RSS."""
    import psutil

    from paddlefit.serving import default_threads

    threads = threads or default_threads()
    ram = psutil.virtual_memory().total
    with tempfile.TemporaryDirectory(prefix="paddlefit-serve-") as tmp:
        forget = at_signal_exit(lambda: shutil.rmtree(tmp, ignore_errors=True))  # os._exit skips the with's exit
        try:
            return _measure(served, batches, threads, ram, Path(tmp), progress, deadline)
        finally:
            forget()


def _measure(
    served: ServedModel,
    batches: list[int],
    threads: list[int],
    ram: int,
    tmp: Path,
    progress: Callable[[str], None],
    deadline: float | None,
) -> InferenceTarget:
    """:func:`cpu_target`'s work inside its temporary folder ``tmp`` (the model exported there when it is not yet;
    Paddle's native CPU kernels when oneDNN has none for one of its ops)."""
    from paddlefit.serving.cpu_bench import benchmark_cpu
    from paddlefit.serving.program import save_inference_model

    prefix = served.prefix
    if prefix is None:
        layer = served.layer
        if layer is None:
            progress("building the model for the CPU row")
            layer = served.builder()  # type: ignore[misc]
        progress("exporting the model for Paddle Inference (paddle.jit.save)")
        prefix = tmp / "model"
        save_inference_model(layer, served.specs, prefix)
    notes = [
        "measured here: Paddle Inference in fp32 with oneDNN (a CPU serves fp32 whatever the GPU engine and "
        "precision); peak = the serving process's RSS"
    ]
    try:
        rows = benchmark_cpu(prefix, served.specs, sorted(batches), threads, progress=progress, deadline=deadline)
    except JobFailedError as exc:  # an op oneDNN cannot run (Paddle 3.3.1: the DB detector's interpolation)
        if not onednn_unimplemented(str(exc)):
            raise
        progress("oneDNN failed on this model: measuring with Paddle's native CPU kernels")
        rows = benchmark_cpu(
            prefix, served.specs, sorted(batches), threads, progress=progress, onednn=False, deadline=deadline
        )
        notes = [
            "measured here: Paddle Inference in fp32 WITHOUT oneDNN (disable_mkldnn): oneDNN failed on this "
            f"model ({_last_line(str(exc))}); peak = the serving process's RSS"
        ]
    points = cpu_points(rows)
    notes += thread_notes(points)
    return InferenceTarget("this CPU", "cpu", ram, ram, 4 * served.params, points, measured=True, notes=notes)


def onednn_unimplemented(message: str) -> bool:
    """The child failed because oneDNN has no kernel for an op (Paddle's ``Unimplemented`` from its oneDNN
    instruction), not for lack of memory: then Paddle's native CPU kernels may run the model."""
    low = message.lower()
    return "onednn" in low and ("unimplemented" in low or "notimplementederror" in low) and "memoryerror" not in low


def cpu_points(rows: list[Any]) -> list[InferencePoint]:
    """Measured :class:`~paddlefit.serving.cpu_bench.CpuLatency` rows as the plan's points (latency = the median),
    the one form ``plan --inference`` and ``export --benchmark`` print and write."""
    return [
        InferencePoint(
            r.batch_size, r.median_s, r.samples_per_s, r.peak_rss_bytes, None, True, r.p95_s, r.threads, r.runs
        )
        for r in rows
    ]


def thread_notes(points: list[InferencePoint]) -> list[str]:
    """A note for each batch whose most-threads median is over 10% slower than its 1-thread median: the cores are
    shared or busy (vCPUs of one physical core, other work), so more threads do not help here."""
    out = []
    for b in sorted({p.batch_size for p in points}):
        by_t = {p.threads: p.latency_s for p in points if p.batch_size == b}
        most = max(by_t)
        if 1 in by_t and most > 1 and by_t[most] > 1.1 * by_t[1]:
            out.append(
                f"batch {b}: {most} threads {by_t[most] / by_t[1]:.1f}x slower than 1 (shared or busy cores "
                "here; serve with the thread count that measured fastest)"
            )
    return out


def _last_line(text: str) -> str:
    """The last `` | ``-separated part of an error (the child's last stderr line) without Paddle's ``(at file:line)``
    source location, at most 160 characters."""
    return text.rsplit(" | ", 1)[-1].split(" (at ", 1)[0].strip()[:160]


def plan_inference(req: InferenceRequest, progress: Callable[[str], None] | None = None) -> InferencePlan:
    """``plan --inference``: see :mod:`paddlefit.serving.plan`.

    Raises:
        PaddlefitError: a bad model, GPU or price option (messages name the option).
    """
    from paddlefit.catalog.gpus import load_gpus, resolve_gpus
    from paddlefit.catalog.prices import select_prices
    from paddlefit.catalog.skypilot import SKYPILOT_CACHE
    from paddlefit.estimate.perf_params import load_perf_params
    from paddlefit.plan.rows import CUDA_CONTEXT_BYTES

    say = progress or (lambda _msg: None)
    say("tracing the model's forward (its code on this CPU, or its exported program)")
    served = resolve_served(req.model, req.config, req.inputs, req.model_args)
    if served.kind == "exported" and req.engine == "eager":
        raise PaddlefitError(
            "`--engine eager` times the model's dygraph code, and an exported program has none: "
            "give the model (zoo name, `package.module:factory` or `--config`), or use "
            "`--engine paddle-inference` / `tensorrt` for the export."
        )
    all_gpus = load_gpus(req.catalog_files)
    gpus = resolve_gpus(req.gpus, all_gpus) if req.gpus else [g for g in all_gpus if not g.is_xpu]
    setup = ServingSetup(
        req.engine,
        req.precision,
        req.latency_ms / 1e3 if req.latency_ms else None,
        load_perf_params(),
        req.safety_margin,
        CUDA_CONTEXT_BYTES,
        req.tf32,
        sum(x.bytes_per_sample for x in served.specs),
    )
    batches = sorted(set(req.batch_sizes))
    targets = [gpu_inference_target(served.trace, g, batches, setup) for g in gpus]
    asked = req.threads is not None or req.cpu_budget_s is not None
    if req.cpu and served.layer is None and served.builder is not None and not asked:
        cpu, notes = (
            None,
            [
                f"no CPU row: {served.name} is planned from its shape; building, exporting and timing it "
                "here takes longer than the default budget: ask for it with `--cpu-budget-s 120` (or "
                "`--threads`)"
            ],
        )
    else:
        cpu, notes = (
            cpu_row(served, batches, req.threads, say, req.cpu_budget_s or DEFAULT_CPU_BUDGET_S)
            if req.cpu
            else (None, [])
        )
    if cpu is not None:
        targets.insert(0, cpu)
    prices, source = select_prices(
        req.prices,
        skypilot_root=None if req.shipped_prices else SKYPILOT_CACHE,
        region=req.region,
        clouds=req.clouds,
        rates=req.rates(),
    )
    if served.unmapped:
        notes.append(
            "program ops not timed (no rule for them): "
            + ", ".join(f"{k} x{v}" for k, v in sorted(served.unmapped.items()))
        )
    model = {
        "name": served.name,
        "kind": served.kind,
        "params": served.params,
        "inputs": [str(s) for s in served.specs],
        "forward_ops": len(eval_ops(served.trace.ops1)),
    }
    return InferencePlan(
        model,
        req.engine,
        req.precision,
        batches,
        req.latency_ms,
        targets,
        cost_per_million(targets, prices, all_gpus),
        source,
        assumptions(setup),
        notes,
    )


def cpu_row(
    served: ServedModel,
    batches: list[int],
    threads: list[int] | None,
    say: Callable[[str], None],
    budget_s: float = DEFAULT_CPU_BUDGET_S,
) -> tuple[InferenceTarget | None, list[str]]:
    """The measured CPU row (:func:`cpu_target`, within ``budget_s`` wall seconds from now) and the plan's notes
    about it. Not measured, with a note saying why: a model too large to build here or above
    :data:`CPU_MEASURE_MAX_WEIGHT_BYTES`, batches whose fp32 weights + live activations exceed half the available
    RAM, batches and thread counts the budget did not reach, and any failure of the export or of Paddle Inference
    (the GPU rows stand without it)."""
    import time

    import psutil

    deadline = time.time() + budget_s
    if served.layer is None and served.prefix is None and served.builder is None:
        if served.kind == "config":
            return None, [
                "no CPU row: a config file or built-in LLM is planned from its shape, with no code here to "
                "build it; export the model (paddle.jit.save) and plan the export for a CPU row"
            ]
        return None, [
            "no CPU row: the model is too large to build on this machine (its trace is written from its "
            "shape); export it where it fits and plan the export"
        ]
    if 4 * served.params > CPU_MEASURE_MAX_WEIGHT_BYTES:
        return None, [
            f"no CPU row: {4 * served.params / GIB:.1f} GiB of fp32 weights, above the "
            f"{CPU_MEASURE_MAX_WEIGHT_BYTES / GIB:.0f} GiB the CPU measurement takes (a forward takes "
            "seconds here); measure it with `paddlefit export RUN --benchmark` on the serving CPU"
        ]
    free = psutil.virtual_memory().available
    need = {
        b: weight_bytes(ops, "fp32") + peak_activation_bytes(ops, "fp32")
        for b in batches
        for ops in [eval_ops(served.trace.at(b))]
    }
    fit = [b for b in batches if need[b] <= free / 2]
    notes = [
        f"CPU row: batch {b} not measured ({need[b] / GIB:.1f} GiB of fp32 weights and activations, more "
        f"than half of the {free / GIB:.1f} GiB RAM available)"
        for b in batches
        if b not in fit
    ]
    if not fit:
        return None, notes
    from paddlefit.serving import default_threads

    threads = threads or default_threads()
    try:
        target = cpu_target(served, fit, threads, say, deadline)
    except Exception as exc:  # the export (the model's own code) or Paddle Inference failed: the GPU rows stand
        return None, [
            *notes,
            f"no CPU row: {_last_line(str(exc)) or type(exc).__name__} (`--no-cpu` skips the "
            "measurement; if paddle.jit.save failed, Paddle Inference and TensorRT cannot serve "
            "the model as written either)",
        ]
    return (target if target.inference else None), [*notes, *budget_notes(target, fit, threads, budget_s)]


def budget_notes(target: InferenceTarget, batches: list[int], threads: list[int], budget_s: float) -> list[str]:
    """A note naming the (batch, threads) pairs of the CPU row that its time budget did not reach."""
    have = {(p.batch_size, p.threads) for p in target.inference}
    left = [f"batch {b} ({t} thread{'s' * (t != 1)})" for t in threads for b in batches if (b, t) not in have]
    if not left:
        return []
    return [
        f"CPU row: {', '.join(left)} not measured within the {budget_s:g} s budget (`--cpu-budget-s` gives it "
        "more; `paddlefit export RUN --benchmark` measures an export without one)"
    ]
