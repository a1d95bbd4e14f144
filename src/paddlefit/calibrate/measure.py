"""``paddlefit calibrate`` core: measure real training steps on the current device and compare with the plan.

On CPU the measurement is Paddle's host allocator peak over two fresh training steps
(:func:`~paddlefit.probe.memory.measure_training_steps`) and the prediction is the CPU probe's
extrapolation from smaller batches. On a GPU the measurement is ``paddle.device.cuda.max_memory_allocated()``
over two steps with the requested AMP level, the prediction is the plan's (uncalibrated) GPU row, and the
CUDA context is NVML's used memory minus Paddle's reserved memory. On a GPU it also times a handful of Paddle
kernels (:func:`time_kernels`) and writes the per-operator model's parameters for that device (``perf_params``),
which ``plan`` then uses instead of the published fit (``calibration: device``).
"""

from __future__ import annotations

import datetime as dt
import gc
import time
from collections.abc import Callable
from typing import Any

import psutil

from paddlefit import options
from paddlefit.catalog.device_name import match_gpu
from paddlefit.catalog.gpus import GPU, get_gpu, load_gpus
from paddlefit.catalog.units import compute_unit
from paddlefit.errors import PaddlefitError
from paddlefit.jobspec.inputs import InputSpec
from paddlefit.jobspec.optimizers import make_optimizer
from paddlefit.jobspec.spec import OptimizerName, Precision
from paddlefit.models.zoo import resolve_model
from paddlefit.plan.planner import build_plan
from paddlefit.plan.request import PlanRequest
from paddlefit.probe import memory as mem
from paddlefit.probe.job_call import JobCall
from paddlefit.units import GIB

DEFAULT_MODELS = ("lenet", "mobilenet_v3_small", "resnet18")


def current_device() -> tuple[str, str, str | None]:
    """(kind, raw device name, driver version) of the device Paddle would train on."""
    import paddle

    if paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0:
        name = paddle.device.cuda.get_device_name(0)
        driver = None
        try:
            import pynvml

            pynvml.nvmlInit()
            driver = pynvml.nvmlSystemGetDriverVersion()
            driver = driver.decode() if isinstance(driver, bytes) else driver
        except Exception:  # NVML missing: the driver version is optional metadata
            driver = None
        return "gpu", name, driver
    import platform

    return "cpu", platform.processor() or platform.machine(), None


def _timed_s(fn: Callable[[], Any], reps: int, sync: Callable[[], Any]) -> float:
    """Mean seconds per call of ``fn``: 3 warm-up calls, then ``reps`` calls between two ``sync()`` calls
    (``paddle.device.cuda.synchronize``: kernels are asynchronous; the sync makes the wall time the device's)."""
    for _ in range(3):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return (time.perf_counter() - t0) / reps


def _time_gemm_and_conv(
    scale: Callable[..., None],
    measured: dict[str, float],
    sizes: tuple[int, ...],
    reps: int,
    wait: Callable[[], Any],
    tf32: bool,
    half: bool,
    say: Callable[[str], None],
) -> None:
    """Time :func:`time_kernels`' reference matmuls (float32, float16) and 3x3 convolutions (float32 NCHW, float16
    NHWC), each passed to ``scale(key, kernel, precision, seconds)`` and recorded in ``measured``."""
    import paddle
    import paddle.nn.functional as F

    from paddlefit.estimate.kernels import Kernel

    n, nb, c, hw, _ = sizes
    for dtype in ("float32", "float16") if half else ("float32",):
        say(f"timing matmul {n}^3 {dtype}")
        a = paddle.randn([n, n]).astype(dtype)
        b = paddle.randn([n, n]).astype(dtype)
        t = _timed_s(lambda a=a, b=b: paddle.matmul(a, b), reps, wait)
        unit = "half" if dtype == "float16" else ("tf32" if tf32 else "fp32")
        eb = 2 if dtype == "float16" else 4
        k = Kernel("gemm", "matmul", "forward", 2 * n**3, 3 * eb * n * n, unit, (1, n, n, n))
        scale(f"gemm_{unit}", k, "fp16-o1" if dtype == "float16" else "fp32", t)
        measured[f"matmul_{dtype}_s"] = t
    for dtype, fmt in (("float32", "NCHW"), ("float16", "NHWC")) if half else (("float32", "NCHW"),):
        say(f"timing conv2d 3x3 {dtype} {fmt}")
        shape = [nb, c, hw, hw] if fmt == "NCHW" else [nb, hw, hw, c]
        x = paddle.randn(shape).astype(dtype)
        w = paddle.randn([c, c, 3, 3]).astype(dtype)
        t = _timed_s(lambda x=x, w=w, fmt=fmt: F.conv2d(x, w, padding=1, data_format=fmt), reps, wait)
        unit = "half" if dtype == "float16" else ("tf32" if tf32 else "fp32")
        eb = 2 if dtype == "float16" else 4
        pix = nb * hw * hw
        k = Kernel(
            "conv", "conv2d", "forward", 2 * pix * c * c * 9, eb * (2 * pix * c + c * c * 9), unit, (1, pix, c, c * 9)
        )
        scale(f"conv_{unit}", k, "fp16-o1" if dtype == "float16" else "fp32", t)
        measured[f"conv2d_{dtype}_{fmt}_s"] = t


def time_kernels(
    gpu: GPU,
    reps: int = 20,
    progress: Callable[[str], None] | None = None,
    sizes: tuple[int, int, int, int, int] = (4096, 32, 256, 56, 1 << 26),
    sync: Callable[[], Any] | None = None,
    half: bool = True,
) -> dict[str, Any]:
    """Time a handful of Paddle kernels on this GPU and derive the per-operator model's parameters for it.

    Reference kernels (large enough to fill any catalog GPU): ``paddle.matmul`` 4096^3 in float32 (TF32
    where the GPU has it, Paddle's default) and float16; ``F.conv2d`` 3x3, 256 -> 256 channels, 32 x 56 x 56,
    float32 NCHW and float16 NHWC; a depthwise 3x3 on 32 x 256 x 56 x 56; ``paddle.add`` of two 2^26-element
    float32 tensors; a one-element ``paddle.add`` for the fixed cost per kernel (``kernel_s``).

    Each parameter is the published fit's value scaled by how much faster or slower this card ran the
    reference kernel than the published-fit model predicts for it: ``p_device = p_fit x (t_predicted -
    kernel_s) / (t_measured - kernel_s)`` (capped at 1.0, the unit's peak). A card that behaves as the fit
    assumed therefore keeps the fitted values, and the corrections the fit learned from whole training steps
    stay in. Parameters this card cannot measure (``gemm_fp32``/``conv_fp32`` on TF32 GPUs: Paddle runs fp32 as
    TF32 there) keep the fitted values.

    Args:
        gpu: the catalog row of this device (peaks, bandwidth, SM count).
        reps: timed calls per kernel.
        progress: optional ``progress(message)`` callback.
        sizes: (matmul n, conv batch, conv channels, conv height = width, add elements); the defaults fill any
            catalog GPU. Tests pass small ones.
        sync: waits for the device (default ``paddle.device.cuda.synchronize``).
        half: also time the float16 kernels (False where there are none, e.g. a test on a CPU build).

    Returns:
        ``{"values": {...}, "by_generation": {}, "provenance": {"measured": {...}, "ratios_predicted_over_measured":
        {...}, ...}}`` for the calibration file's ``perf_params`` key.
    """
    import paddle
    import paddle.nn.functional as F

    from paddlefit.estimate.gpu_model import kernel_time_s
    from paddlefit.estimate.kernels import Kernel
    from paddlefit.estimate.perf_params import PARAM_RANGE, PerfParams, load_perf_params
    from paddlefit.probe.host_overhead import measure_host_overhead
    from paddlefit.serving.predictor_overhead import measure_predictor_overhead

    say = progress or (lambda m: None)
    wait = sync or paddle.device.cuda.synchronize
    _, nb, c, hw, big = sizes
    fit = load_perf_params()
    arch = gpu.architecture
    values = {k: fit.get(k, arch) for k in fit.values}  # this generation's fitted values, flattened
    measured: dict[str, float] = {}
    ratios: dict[str, float] = {}
    one_a, one_b = paddle.ones([1]), paddle.ones([1])
    kernel_s = min(1e-3, max(_timed_s(lambda: paddle.add(one_a, one_b), 20 * reps, wait), 1e-7))
    measured["add_1_s"] = kernel_s
    tf32 = bool(gpu.tf32_tflops)

    def scale(key: str, kernel: Kernel, precision: str, t_meas: float) -> None:
        t_pred, bound = kernel_time_s(kernel, gpu, PerfParams(values), precision)
        if (bound == "memory") != (key == "bw_eff"):  # the model times it by the other term: nothing to learn
            ratios[key] = float("nan")
            return
        r = max(t_pred - values["kernel_s"], 1e-12) / max(t_meas - kernel_s, 1e-12)
        ratios[key] = r
        values[key] = min(PARAM_RANGE[key][1], max(1e-3, values[key] * r))

    say("timing elementwise add")
    u, v = paddle.randn([big]), paddle.randn([big])
    t = _timed_s(lambda: paddle.add(u, v), reps, wait)
    scale("bw_eff", Kernel("elementwise", "add", "forward", big, 3 * 4 * big, "memory"), "fp32", t)
    measured["add_2^26_s"] = t
    _time_gemm_and_conv(scale, measured, sizes, reps, wait, tf32, half, say)
    say("timing depthwise conv2d")
    x = paddle.randn([nb, c, hw, hw])
    w = paddle.randn([c, 1, 3, 3])
    t = _timed_s(lambda: F.conv2d(x, w, padding=1, groups=c), reps, wait)
    pix = nb * hw * hw
    scale(
        "dwconv",
        Kernel(
            "dwconv",
            "depthwise_conv2d",
            "forward",
            2 * pix * c * 9,
            4 * (2 * pix * c + c * 9),
            "dwconv",
            (c, pix, 1, 9),
        ),
        "fp32",
        t,
    )
    measured["depthwise_conv2d_s"] = t
    values["kernel_s"] = kernel_s
    say("timing the host: eager dispatch and the optimizer's loop")
    host = measure_host_overhead(lambda ps: make_optimizer(OptimizerName.ADAMW, ps))
    say("timing the host: a Paddle Inference request and its executor's per-op cost")
    served = measure_predictor_overhead()
    host_values = {
        "host_op_s": host.op_s,
        "host_step_s_per_tensor": host.optimizer_s_per_tensor,
        "host_step_s": host.step_s_fixed,
        "predictor_call_s": served.call_s,
        "predictor_op_s": served.op_s,
    }
    values.update(host_values)
    measured.update(host_values)
    return {
        "values": values,
        "by_generation": {},
        "provenance": {
            "measured": measured,
            "device": gpu.name,
            "ratios_predicted_over_measured": {k: (None if v != v else v) for k, v in ratios.items()},
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "method": "paddlefit calibrate: plan.calibrate.time_kernels (published fit x ratio)",
        },
    }


def measure_gpu_steps(
    factory: Any, specs: list[InputSpec], batch: int, optimizer: OptimizerName, precision: Precision, steps: int = 2
) -> dict[str, float]:
    """Two fresh training steps on GPU 0 with ``paddle.amp``; peak allocated bytes and last-step seconds."""
    import paddle

    paddle.set_device("gpu:0")
    paddle.device.cuda.empty_cache()
    gc.collect()
    base = paddle.device.cuda.memory_allocated()
    paddle.device.cuda.reset_max_memory_allocated()
    from paddlefit.models.build import build

    model = build(factory)
    model.train()
    opt = make_optimizer(optimizer, model.parameters())
    dtype = "bfloat16" if precision.value.startswith("bf16") else "float16"
    if precision.level == "O2":
        model, opt = paddle.amp.decorate(models=model, optimizers=opt, level="O2", dtype=dtype)
    use_scaler = precision.value.startswith("fp16")
    scaler = paddle.amp.GradScaler() if use_scaler else None
    call = JobCall(list(specs))  # the loss plan's probe takes: cross_entropy on generated labels
    call.prepare(model)
    inputs = call.batch(batch)
    step_s = 0.0
    for _ in range(steps):
        paddle.device.synchronize()
        t0 = time.perf_counter()
        with paddle.amp.auto_cast(enable=precision.is_amp, level=precision.level, dtype=dtype):
            loss = call.loss_of(model, inputs)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        opt.clear_grad()
        paddle.device.synchronize()
        step_s = time.perf_counter() - t0
    peak = paddle.device.cuda.max_memory_allocated() - base
    reserved = paddle.device.cuda.memory_reserved()
    del model, opt, inputs
    gc.collect()
    return {"peak_bytes": float(peak), "step_time_s": step_s, "reserved_bytes": float(reserved)}


def _cuda_context_bytes(reserved: float) -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        used = pynvml.nvmlDeviceGetMemoryInfo(h).used
        return int(used - reserved) if used > reserved else None
    except Exception:  # no NVML: leave the context unmeasured
        return None


def _calibration_row(
    ref: Any,
    specs: list[Any],
    b: int,
    precision: Precision,
    optimizer: OptimizerName,
    kind: str,
    gpu: Any,
    context: float | None,
) -> tuple[dict[str, Any], float | None]:
    """One measured row of the calibration document beside ``build_plan``'s prediction for it, and the CUDA
    context bytes (the first GPU measurement's, kept after).

    Raises:
        PaddlefitError: the model's plan is analytic (too large), or the batch does not fit (this CPU's free RAM,
            the GPU's predicted memory).
    """
    import paddle

    paddle.set_device("cpu")
    plan = build_plan(
        PlanRequest(
            model=ref.name, batch_size=b, optimizer=optimizer, precision=precision, gpus=[gpu.name] if gpu else []
        )
    )
    if plan.memory["method"] != "cpu-probe":
        raise PaddlefitError(
            f"{ref.name} is too large to calibrate on this machine (its plan is analytic); "
            "calibrate with smaller zoo models: the corrections apply to every model on the device."
        )
    cpu_row = next(t for t in plan.targets if t.kind == "cpu")
    free = psutil.virtual_memory().available
    if kind == "cpu" and cpu_row.peak_bytes > 0.8 * free:
        raise PaddlefitError(
            f"{ref.name} at batch {b} needs about {cpu_row.peak_bytes / GIB:.1f} GiB, more than "
            f"80% of the {free / GIB:.1f} GiB free here; use smaller `--batch-size` values."
        )
    if kind == "gpu":
        row_t = next(t for t in plan.targets if t.kind == "gpu")
        if not row_t.fits:
            raise PaddlefitError(
                f"{ref.name} at batch {b} ({precision.value}) is predicted not to fit this GPU "
                f"({row_t.peak_bytes / GIB:.1f} GiB); use smaller `--batch-size` values."
            )
        m = measure_gpu_steps(ref.factory, specs, b, optimizer, precision)
        context = context or _cuda_context_bytes(m["reserved_bytes"])
        peak_flops = gpu.peak_flops(precision.value)[0]  # type: ignore[union-attr]
        eclass = compute_unit(gpu, precision.value)
    else:
        row_t = cpu_row
        meas = mem.measure_training_steps(ref.factory, specs, b, optimizer)
        m = {"peak_bytes": float(meas.peak_bytes), "step_time_s": meas.step_time_s}
        peak_flops, eclass = None, None
    return {
        "model": ref.name,
        "batch_size": b,
        "precision": precision.value,
        "peak_bytes": int(m["peak_bytes"]),
        "predicted_peak_bytes": int(row_t.peak_bytes),
        "step_time_s": m["step_time_s"],
        "predicted_step_time_s": row_t.step_time_s,
        "train_flops_per_sample": plan.model["train_flops_per_sample"],
        "peak_flops": peak_flops,
        "efficiency_class": eclass,
    }, context


def run_calibration(
    models: list[str] | None = None,
    batch_sizes: tuple[int, ...] = options.BATCH_SIZE_CALIBRATE.shown["calib"],
    precisions: list[Precision] | None = None,
    optimizer: OptimizerName = OptimizerName.ADAM,
    device_name: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure each (model, batch size, precision) on the current device; return the calibration document.

    Args:
        models: zoo names (default :data:`DEFAULT_MODELS`).
        batch_sizes: batch sizes to measure; must be larger than the probe's (1, 2, 3) to test extrapolation.
        precisions: default fp32 on CPU; fp32 + fp16-o1 (+ bf16-o1 on Ampere+) on GPU.
        device_name: catalog GPU name to file the measurements under (default: matched from CUDA's name).

    Returns:
        The JSON-able document described in :mod:`paddlefit.plan.calibration`.

    Raises:
        PaddlefitError: unknown model or GPU, or batch sizes < 1.
    """
    if any(b < 1 for b in batch_sizes):
        raise PaddlefitError(f"`--batch-size` values must be >= 1 (got {list(batch_sizes)}).")
    import paddle

    say = progress or (lambda m: None)
    kind, raw, driver = current_device()
    gpu = None
    if kind != "gpu" and device_name:
        raise PaddlefitError(
            f"`--device-name {device_name}` files GPU measurements under a catalog GPU, but this "
            "Paddle sees no GPU; run calibrate on the GPU machine, or leave it out for a CPU file."
        )
    if kind == "gpu":
        gpu = get_gpu(device_name, load_gpus()) if device_name else match_gpu(raw, load_gpus())
    if precisions is None:
        precisions = [Precision.FP32]
        if kind == "gpu":
            precisions.append(Precision.BF16_O1 if gpu and gpu.bf16_tflops else Precision.FP16_O1)
    refs = [resolve_model(m) for m in (models or DEFAULT_MODELS)]
    rows: list[dict[str, Any]] = []
    context = None
    for ref in refs:
        specs = list(ref.default_inputs)
        for precision in precisions:
            for b in batch_sizes:
                say(f"{ref.name} batch {b} {precision.value}")
                row, context = _calibration_row(ref, specs, b, precision, optimizer, kind, gpu, context)
                rows.append(row)
    doc = {
        "device": gpu.name if gpu else "cpu",
        "device_name": raw,
        "driver": driver,
        "paddle_version": paddle.__version__,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "cuda_context_bytes": context,
        "rows": rows,
    }
    if kind == "gpu" and gpu is not None:
        doc["perf_params"] = time_kernels(gpu, progress=say)
    return doc
