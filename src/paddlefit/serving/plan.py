"""``plan --inference``: latency, throughput and memory of serving a model on every GPU, priced per million requests.

Pipeline: the model's eval-mode forward trace (recorded on this CPU from the model's code, or read from an exported
program, :mod:`paddlefit.probe.program_trace`) -> the engine's fused ops at the precision
(:mod:`paddlefit.estimate.inference`) -> the forward kernels timed by the per-kernel GPU model
(:mod:`paddlefit.estimate.gpu_model`, the same fitted parameters as training rows) -> per batch size:

- latency = copy time + max(device time, host time) (:func:`request_floor`): the request's inputs go to the card
  and its results come back over the host link (the catalog's per-direction ``pcie_gb_s``), before and after the
  forward; eager dygraph dispatches every op from Python (``host_op_s`` per launched op, and one each for the
  input's ``to_tensor`` and the result's ``numpy()``); Paddle Inference's predictor costs ``predictor_call_s`` per
  request and ``predictor_op_s`` per op its C++ executor runs (a TensorRT engine is one op); both constants are
  measured by ``bench/host_overhead.py`` (``calibrate`` measures them on a real host). The kernels' own launch cost
  (``kernel_s`` each) is in the device time. A small model is then host- or copy-bound, and its row says so;
- throughput = batch / latency (one request stream per GPU, no overlap of batches);
- peak memory = weights in the engine's precision + the live activations of one forward (liveness,
  :func:`~paddlefit.estimate.inference.peak_activation_bytes`) + the conv workspace (eager: cuDNN's limit
  ``FLAGS_conv_workspace_size_limit`` = 512 MiB, as training rows; Paddle Inference's fused conv: the
  ``workspace_size_MB`` = 32 its ``conv2d_add_act_fuse_pass`` sets), fitting when at most ``safety_margin`` of
  (capacity - CUDA context), as training rows (:data:`~paddlefit.plan.rows.CUDA_CONTEXT_BYTES`);
- TensorRT's engine-build peak: Paddle's fp32 weights (loaded before the TensorRT subgraph pass converts them) +
  the engine's weights + the builder workspace (``Config.enable_tensorrt_engine(workspace_size=1 << 30)``, Paddle's
  default) + the activations at that batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from paddlefit.catalog.serving_accuracy import serving_error, serving_error_text
from paddlefit.estimate.amp import dtype_bytes
from paddlefit.estimate.gpu_model import compile_step
from paddlefit.estimate.inference import (
    eval_ops,
    forward_kernels,
    fuse,
    launched_ops,
    peak_activation_bytes,
    weight_bytes,
)
from paddlefit.estimate.optrace import OpTrace, TracedOp
from paddlefit.estimate.perf_params import PerfParams
from paddlefit.plan.rows import CONV_WORKSPACE_BYTES
from paddlefit.units import MIB, SECONDS_PER_HOUR

#: Paddle Inference's fused conv workspace: ``workspace_size_MB`` = 32 set by ``conv2d_add_act_fuse_pass``
#: (``paddle/fluid/pir/transforms/gpu/conv2d_add_act_fuse_pass.cc``).
FUSED_CONV_WORKSPACE_BYTES = 32 * MIB
#: TensorRT builder workspace: ``paddle.inference.Config.enable_tensorrt_engine(workspace_size=1 << 30)`` default.
TRT_WORKSPACE_BYTES = 1 << 30
#: Largest batch the latency-target search tries.
MAX_SEARCH_BATCH = 4096


@dataclass(frozen=True)
class InferencePoint:
    """One batch size on one target. Seconds, samples/s, bytes.

    Attributes:
        batch_size: samples per forward (one request each).
        latency_s: seconds per forward (predicted on GPUs; the median measured on the CPU row).
        samples_per_s: batch_size / latency_s.
        peak_bytes: device memory of serving at this batch, excluding the CUDA context.
        build_peak_bytes: TensorRT's engine-build peak (None for other engines and the CPU row).
        fits: peak (and build peak) within the usable memory.
        p95_s: 95th-percentile latency (CPU row, measured; None on GPU rows, which predict one latency).
        threads: CPU threads (CPU row only).
        runs: timed requests behind the median and p95 (CPU row only).
        device_s, host_s, copy_s: the parts of a GPU row's latency (:func:`request_floor`; None on the CPU row).
        bound: what sets a GPU row's latency: ``device`` (its kernels), ``host`` (the dispatch of its ops and the
            request) or ``copy`` (the request and result over the host link); None on the CPU row.
    """

    batch_size: int
    latency_s: float
    samples_per_s: float
    peak_bytes: int
    build_peak_bytes: int | None
    fits: bool
    p95_s: float | None = None
    threads: int | None = None
    runs: int | None = None
    device_s: float | None = None
    host_s: float | None = None
    copy_s: float | None = None
    bound: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON fields (``p95_s``/``threads``/``runs`` only where measured, the latency's parts only where
        predicted)."""
        d: dict[str, Any] = {
            "batch_size": self.batch_size,
            "latency_s": self.latency_s,
            "samples_per_s": self.samples_per_s,
            "peak_bytes": self.peak_bytes,
            "build_peak_bytes": self.build_peak_bytes,
            "fits": self.fits,
        }
        if self.p95_s is not None:
            d.update(p95_s=self.p95_s, threads=self.threads, runs=self.runs)
        if self.bound is not None:
            d.update(device_s=self.device_s, host_s=self.host_s, copy_s=self.copy_s, bound=self.bound)
        return d


@dataclass
class InferenceTarget:
    """One device's serving rows.

    Attributes:
        name, kind: GPU catalog name (``gpu``) or ``this CPU`` (``cpu``, measured).
        capacity_bytes: memory a process can use; usable_bytes: the share a peak may take.
        weights_bytes: weights in the engine's precision.
        inference: one :class:`InferencePoint` per requested batch size (CPU: per batch and thread count).
        max_batch_within_latency: largest batch whose latency meets ``--latency-ms`` and that fits (None: no target
            given, or none meets it).
        fusions: fusion rule -> times applied. notes: what the reader should know about the row.
        measured: the rows are measurements on this machine (the CPU row), not predictions.
        serving: the point a service would run and ``cost`` prices: the latency target's largest batch, else the
            listed batch with the most samples/s that fits (None: nothing fits).
        measured_error: how far rows of this engine and precision are from measurements
            (:func:`~paddlefit.catalog.serving_accuracy.serving_error`; None: none checks them, or the CPU row).
    """

    name: str
    kind: str
    capacity_bytes: int
    usable_bytes: int
    weights_bytes: int
    inference: list[InferencePoint]
    max_batch_within_latency: int | None = None
    fusions: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    measured: bool = False
    serving: InferencePoint | None = None
    measured_error: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON fields."""
        return {
            "name": self.name,
            "kind": self.kind,
            "capacity_bytes": self.capacity_bytes,
            "usable_bytes": self.usable_bytes,
            "weights_bytes": self.weights_bytes,
            "inference": [p.to_dict() for p in self.inference],
            "max_batch_within_latency": self.max_batch_within_latency,
            "fusions": self.fusions,
            "notes": self.notes,
            "measured": self.measured,
            "serving": self.serving.to_dict() if self.serving else None,
            "measured_error": self.measured_error,
        }


@dataclass(frozen=True)
class ServingSetup:
    """What every GPU row of one plan shares. engine/precision: :data:`~paddlefit.estimate.inference.ENGINES` /
    ``PRECISIONS``; latency_s: the latency target (None: none); params: the per-kernel model's parameters;
    safety_margin, context_bytes: as training rows; request_bytes: bytes of one sample's inputs as the client sends
    them (:attr:`~paddlefit.jobspec.inputs.InputSpec.bytes_per_sample`, summed over the inputs)."""

    engine: str
    precision: str
    latency_s: float | None
    params: PerfParams
    safety_margin: float
    context_bytes: int
    tf32: bool = True
    request_bytes: int = 0


def precision_blocked(gpu: Any, engine: str, precision: str) -> str | None:
    """Why ``precision`` cannot run on ``gpu`` under ``engine`` (the row's note), or None.

    int8 needs INT8 tensor cores (the catalog's ``int8_tops``; Turing and later). A GPU without an FP16 or TF32
    figure is still timed, at a slower unit's peak (:meth:`~paddlefit.catalog.gpus.GPU.missing_peak`, a note).
    """
    if precision == "int8" and not getattr(gpu, "int8_tops", None):
        return "no INT8 tensor-core rate in the catalog for this GPU"
    return None


def forward_point(trace: OpTrace, batch: int, gpu: Any, setup: ServingSetup) -> tuple[InferencePoint, dict, int]:
    """The :class:`InferencePoint` of ``batch`` on ``gpu``, the fusions applied and the weights' bytes."""
    ops, fusions = fuse(eval_ops(trace.at(batch)), setup.engine, setup.precision, gpu)
    ks = forward_kernels(ops, setup.precision, gpu, setup.tf32)
    compiled = compile_step(ks, gpu, "fp16-o2" if setup.precision != "fp32" else "fp32", setup.engine == "tensorrt")
    t, _ = compiled.times(setup.params)
    device_s = float(t.sum())
    copy_s, host_s = request_floor(ops, batch, gpu, setup, trace.returned_bytes(batch))
    latency = copy_s + max(device_s, host_s)
    bound = "copy" if copy_s > max(device_s, host_s) else "host" if host_s > device_s else "device"
    weights = weight_bytes(ops, setup.precision)
    acts = peak_activation_bytes(ops, setup.precision)
    has_conv = any(o.cls in ("conv", "dwconv") for o in ops)
    work = (
        0
        if not has_conv or setup.engine == "tensorrt"
        else FUSED_CONV_WORKSPACE_BYTES
        if setup.engine == "paddle-inference"
        else CONV_WORKSPACE_BYTES
    )
    peak = weights + acts + work
    build = None
    if setup.engine == "tensorrt":
        fp32_w = weight_bytes(ops, "fp32")
        build = fp32_w + weights + TRT_WORKSPACE_BYTES + acts
    usable = usable_bytes(gpu, setup)
    fits = peak <= usable and (build is None or build <= usable)
    point = InferencePoint(
        batch,
        latency,
        batch / latency,
        int(peak),
        build,
        fits,
        device_s=device_s,
        host_s=host_s,
        copy_s=copy_s,
        bound=bound,
    )
    return point, fusions, weights


def result_bytes(ops: list[TracedOp]) -> int:
    """Bytes a request returns when the trace did not record it (an exported program, a transformer written from its
    shape, a cached trace): the outputs of the forward's last op, in the dtype the trace recorded (0 for no ops).
    Not every tensor no later op reads: a recorded trace misses some reads (views, ops it does not trace), which
    would count batch norm outputs of an HRNet as results."""
    return sum(t.numel * dtype_bytes(t.dtype) for t in ops[-1].outputs) if ops else 0


def request_floor(
    ops: list[TracedOp], batch: int, gpu: Any, setup: ServingSetup, returned: int | None = None
) -> tuple[float, float]:
    """(copy seconds, host seconds) of one request of ``batch`` samples through the fused ``ops`` on ``gpu``.

    Copy: ``setup.request_bytes`` x batch to the card and the result back (``returned`` bytes, what the recorded
    forward returned; else :func:`result_bytes` of the ops), each at the catalog's
    per-direction host-link rate (``pcie_gb_s``, GB/s; PCI-SIG figures for x16), one after the other and around the
    forward (a request's inputs must arrive before its forward, its results leave after it), so a lower bound.
    Host: eager, (launched ops + 2) x ``host_op_s`` (the input's ``to_tensor`` and the result's ``numpy()`` are a
    dispatch each); Paddle Inference, ``predictor_call_s`` + launched ops x ``predictor_op_s``; TensorRT, the
    same with the engine as one op (``predictor_call_s`` + ``predictor_op_s``). The constants are measured
    (:class:`~paddlefit.serving.predictor_overhead.PredictorOverhead`, ``bench/host_overhead.py``).
    """
    arch = getattr(gpu, "architecture", None)
    link = (getattr(gpu, "pcie_gb_s", None) or 0.0) * 1e9
    back = result_bytes(ops) if returned is None else returned
    copy_s = (setup.request_bytes * batch + back) / link if link > 0 else 0.0
    get = setup.params.get
    if setup.engine == "eager":
        host_s = (launched_ops(ops) + 2) * get("host_op_s", arch)
    else:
        executed = 1 if setup.engine == "tensorrt" else launched_ops(ops)
        host_s = get("predictor_call_s", arch) + executed * get("predictor_op_s", arch)
    return copy_s, host_s


def usable_bytes(gpu: Any, setup: ServingSetup) -> int:
    """Bytes a serving peak may use on ``gpu``: safety_margin x (capacity - CUDA context), 0 for a card smaller
    than the context."""
    return max(0, int(setup.safety_margin * (gpu.capacity_bytes - setup.context_bytes)))


def largest_batch_within(trace: OpTrace, gpu: Any, setup: ServingSetup) -> int | None:
    """The largest batch (<= :data:`MAX_SEARCH_BATCH`) whose predicted latency is within ``setup.latency_s`` and
    that fits; None when batch 1 does not. Latency and memory grow with the batch, so a bisection finds it."""
    if setup.latency_s is None:
        return None

    def ok(b: int) -> bool:
        p = forward_point(trace, b, gpu, setup)[0]
        return p.fits and p.latency_s <= setup.latency_s  # type: ignore[operator]

    if not ok(1):
        return None
    lo, hi = 1, 2
    while hi <= MAX_SEARCH_BATCH and ok(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, MAX_SEARCH_BATCH + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def gpu_inference_target(trace: OpTrace, gpu: Any, batches: list[int], setup: ServingSetup) -> InferenceTarget:
    """One GPU's serving rows (see the module docstring)."""
    usable = usable_bytes(gpu, setup)
    blocked = precision_blocked(gpu, setup.engine, setup.precision)
    if blocked:
        return InferenceTarget(gpu.name, "gpu", gpu.capacity_bytes, usable, 0, [], notes=[f"not predicted: {blocked}"])
    points, fusions, weights = [], {}, 0
    for b in batches:
        p, fusions, weights = forward_point(trace, b, gpu, setup)
        points.append(p)
    notes = []
    if (
        setup.engine == "tensorrt"
        and points
        and not all(p.fits for p in points)
        and any(p.peak_bytes <= usable for p in points)
    ):
        notes.append(
            "the TensorRT engine build does not fit where serving would: build elsewhere on the same GPU "
            "model with less workspace, or lower `workspace_size`"
        )
    if (
        setup.engine == "eager"
        and setup.precision != "fp32"
        and any(o.cls == "conv" and o.layout.upper().startswith("NC") for o in trace.ops1)
    ):
        notes.append(
            "eager fp16 convolutions on NCHW tensors pay cuDNN's NCHW<->NHWC transposes around each "
            "(tensor cores run channels-last); layers built with data_format='NHWC', or Paddle Inference / "
            "TensorRT (which convert the layout), avoid them"
        )
    slow = gpu.missing_peak("fp32" if setup.precision == "fp32" else "fp16-o2", setup.tf32)
    if slow:
        notes.append(slow)
    if setup.precision == "int8":
        notes.append(
            "int8 GEMMs/convs timed at the FP16 kernels' fitted efficiency on the INT8 peak (no INT8 kernel measured)"
        )
    if getattr(gpu, "is_xpu", False):
        notes.append(
            "a Kunlunxin XPU: timed with the CUDA engines' fusions and kernel model (Paddle Inference's XPU "
            "passes and kernels are not modelled), a rough guess"
        )
    target = InferenceTarget(
        gpu.name,
        "gpu",
        gpu.capacity_bytes,
        usable,
        weights,
        points,
        fusions=fusions,
        notes=notes,
        measured_error=serving_error(setup.engine, setup.precision, gpu.architecture),
    )
    best = largest_batch_within(trace, gpu, setup)
    target.max_batch_within_latency = best
    fitting = [p for p in points if p.fits]
    if best is not None:
        target.serving = (
            next((p for p in points if p.batch_size == best), None) or forward_point(trace, best, gpu, setup)[0]
        )
    elif setup.latency_s is None and fitting:
        target.serving = max(fitting, key=lambda p: p.samples_per_s)
    return target


def cost_per_million(targets: list[InferenceTarget], prices: list[Any], gpus: list[Any]) -> list[dict[str, Any]]:
    """USD per million requests on every priced instance whose GPU has a serving point
    (:attr:`InferenceTarget.serving`): the instance runs one model replica per GPU at that batch, so requests/s =
    GPUs x samples/s and USD per 1e6 requests = USD per instance-hour / (requests/s x 3600) x 1e6. On-demand and
    (where priced) spot; cheapest on-demand first."""
    from paddlefit.catalog.prices import catalog_gpu

    by_name = {t.name: t for t in targets if t.kind == "gpu" and t.serving is not None}
    rows = []
    for p in prices:
        g = catalog_gpu(p, gpus)
        t = by_name.get(g.name) if g is not None else None
        if t is None or t.serving is None:
            continue
        rps = p.gpu_count * t.serving.samples_per_s
        rows.append(
            {
                "cloud": p.cloud,
                "instance_type": p.instance_type,
                "region": p.region,
                "gpu": t.name,
                "gpus": p.gpu_count,
                "batch_size": t.serving.batch_size,
                "latency_s": t.serving.latency_s,
                "requests_per_s": rps,
                "on_demand_usd_per_hour": p.on_demand_usd_per_hour,
                "spot_usd_per_hour": p.spot_usd_per_hour,
                "usd_per_million": _per_million(p.on_demand_usd_per_hour, rps),
                "spot_usd_per_million": _per_million(p.spot_usd_per_hour, rps),
            }
        )
    return sorted(rows, key=lambda r: r["usd_per_million"])


def _per_million(usd_per_hour: float | None, requests_per_s: float) -> float | None:
    """USD per 1e6 requests at ``usd_per_hour`` and ``requests_per_s`` (None when the price is unknown)."""
    return None if usd_per_hour is None else usd_per_hour / (requests_per_s * SECONDS_PER_HOUR) * 1e6


@dataclass
class InferencePlan:
    """The ``plan --inference`` document: the model, the setup, one :class:`InferenceTarget` per device (the CPU
    row measured, first, when taken), and the cost per million requests per priced instance type."""

    model: dict[str, Any]
    engine: str
    precision: str
    batch_sizes: list[int]
    latency_ms: float | None
    targets: list[InferenceTarget]
    cost: list[dict[str, Any]]
    prices_source: str
    assumptions: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON fields (``kind: inference``)."""
        return {
            "kind": "inference",
            "model": self.model,
            "engine": self.engine,
            "precision": self.precision,
            "batch_sizes": self.batch_sizes,
            "latency_ms": self.latency_ms,
            "targets": [t.to_dict() for t in self.targets],
            "cost_per_million_requests": self.cost,
            "prices_source": self.prices_source,
            "assumptions": self.assumptions,
            "notes": self.notes,
        }


def assumptions(setup: ServingSetup) -> dict[str, Any]:
    """What every GPU row assumes, with the constants' values (for ``--json`` and the table's legend)."""
    return {
        "engine": setup.engine,
        "precision": setup.precision,
        "tf32": setup.tf32,
        "safety_margin": setup.safety_margin,
        "cuda_context_bytes": setup.context_bytes,
        "conv_workspace_bytes": {
            "eager": CONV_WORKSPACE_BYTES,
            "paddle-inference": FUSED_CONV_WORKSPACE_BYTES,
            "tensorrt": 0,
        }[setup.engine],
        "tensorrt_workspace_bytes": TRT_WORKSPACE_BYTES if setup.engine == "tensorrt" else None,
        "host": "eager: one Python dispatch (host_op_s) per launched op, the input and the result"
        if setup.engine == "eager"
        else "Paddle Inference: predictor_call_s per request + predictor_op_s "
        "per executed op" + (" (the TensorRT engine is one op)" if setup.engine == "tensorrt" else ""),
        "host_op_s": setup.params.get("host_op_s"),
        "predictor_call_s": setup.params.get("predictor_call_s"),
        "predictor_op_s": setup.params.get("predictor_op_s"),
        "request_bytes_per_sample": setup.request_bytes,
        "copy": "inputs to the card and results back at the catalog's per-direction pcie_gb_s",
        "measured_error": serving_error_text(setup.engine, setup.precision),
        "calibration": setup.params.calibration,
        "latency_search_max_batch": MAX_SEARCH_BATCH,
    }
