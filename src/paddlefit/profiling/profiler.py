"""Where a training step's time goes: run N steps of a job spec through the trainer's own model, data and optimizer,
time each component, and name the bottleneck with the evidence and ranked fixes.

Per optimizer step, each micro-batch is split into: waiting for the DataLoader (``data``), host-to-device copy
(``h2d``, GPU only), ``forward`` (the model), ``loss`` (the job's loss on the output; zero when the model returns
its own, which is then in ``forward``), ``backward`` and, once per step, ``optimizer`` (step, clear_grad, LR
schedule). On a GPU every boundary calls ``paddle.device.synchronize()`` so kernels are charged to the phase
that launched them (this serialises the copy engine and compute, so the profile's step is slightly slower than an
unprofiled one). Paddle's CPU kernels run synchronously in eager mode, so no sync is needed there. The first
``warmup`` steps (allocator growth, cuDNN algorithm search, worker start) are timed but left out of the statistics.

Also sampled, in a background thread every 0.2 s: CPU utilisation of this process and of its children (the
DataLoader workers) through ``psutil``, and, when a GPU is in use, its utilisation and memory through NVML.
The verdict and the fixes: :mod:`paddlefit.profiling.verdict`.
"""

from __future__ import annotations

import math
import os
import tempfile
import threading
import time
from typing import Any

import numpy as np
import psutil

from paddlefit import options
from paddlefit.errors import PaddlefitError
from paddlefit.jobspec.spec import JobSpec, Precision
from paddlefit.profiling.verdict import COMPONENTS, ProfileResult, summarise


class _Sampler(threading.Thread):
    """Background sampling of CPU (main process + children) and, on GPU, NVML utilisation and memory."""

    def __init__(self, on_gpu: bool, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.stop_event = threading.Event()
        self.main: list[float] = []
        self.children: list[float] = []
        self.gpu_util: list[float] = []
        self.gpu_mem: list[float] = []
        self.gpu_mem_busy: list[float] = []  # NVML: % of the sample period device memory was read or written
        self.proc = psutil.Process()
        self.nvml = None
        if on_gpu:
            try:
                import pynvml

                pynvml.nvmlInit()
                dev = int(os.environ.get("FLAGS_selected_gpus", "0").split(",")[0])  # noqa: SIM112 (Paddle spells it so)
                self.nvml = (pynvml, pynvml.nvmlDeviceGetHandleByIndex(dev))
            except Exception:  # no NVML (driver mismatch): GPU columns stay empty
                self.nvml = None

    def run(self) -> None:
        self.proc.cpu_percent(None)
        kids: dict[int, psutil.Process] = {}
        while not self.stop_event.wait(self.interval):
            self.main.append(self.proc.cpu_percent(None))
            total = 0.0
            try:
                for c in self.proc.children(recursive=True):
                    if c.pid not in kids:
                        kids[c.pid] = c
                        c.cpu_percent(None)
                        continue
                    total += kids[c.pid].cpu_percent(None)
            except psutil.Error:
                pass
            self.children.append(total)
            if self.nvml is not None:
                pynvml, h = self.nvml
                try:
                    rates = pynvml.nvmlDeviceGetUtilizationRates(h)
                    self.gpu_util.append(float(rates.gpu))
                    self.gpu_mem_busy.append(float(rates.memory))
                    self.gpu_mem.append(float(pynvml.nvmlDeviceGetMemoryInfo(h).used))
                except Exception:
                    pass

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=2)


def _count_train_flops(job: Any, b: Any, spec: JobSpec) -> float:
    """Training FLOPs per sample of the job's model and loss on batch ``b`` (:class:`FlopCounter`); the gradients
    it leaves are cleared.

    Raises:
        PaddlefitError: the model or loss raises (as ``train`` says it).
    """
    from paddlefit.models.calling import call_model
    from paddlefit.probe.flops import FlopCounter, FlopsCount

    try:
        count = FlopsCount(batch_size=b.size)
        with FlopCounter(job.model, count):
            job.job_loss(call_model(job.model, b, spec.label_arg), b)
    except PaddlefitError:
        raise
    except Exception as exc:  # the model itself fails: say so as train does
        raise PaddlefitError(
            f"step 1: the model raised {type(exc).__name__}: {str(exc).strip()[:300]} (model "
            f"`{spec.model}`). Set PADDLEFIT_DEBUG=1 for the traceback."
        ) from None
    job.optimizer.clear_grad()
    return count.train_flops_per_sample


def _timed_step(r: Any, step_batches: Any, step: int, sync: Any, on_gpu: bool, flops: list[float]) -> dict[str, float]:
    """One optimizer step of the runner ``r``, each component's seconds (data wait, host-to-device, forward, loss,
    backward summed over the micro-batches; optimizer; the whole step). The first micro-batch of step 0 also
    counts ``flops[0]``, outside every phase's time."""
    from paddlefit.models.calling import call_model

    spec, job = r.spec, r.job
    accum = spec.grad_accum_steps
    row = dict.fromkeys(COMPONENTS, 0.0)
    t_step = time.perf_counter()
    it = step_batches()  # a new epoch's first batch then includes worker start-up
    for _ in range(accum):
        t0 = time.perf_counter()
        batch = r.next_batch(it, step + 1)
        t1 = time.perf_counter()
        b = r.as_batch(batch)
        if on_gpu:
            b = _to_gpu(b)
            sync()
        t2 = time.perf_counter()
        if step == 0 and not flops[0]:
            flops[0] = _count_train_flops(job, b, spec)
            t1 = t2 = time.perf_counter()  # the count's forward is not charged to any phase
        with r.autocast():
            out = call_model(job.dp_model, b, spec.label_arg)
            sync()
            t2b = time.perf_counter()
            loss = job.job_loss(out, b)
            del out  # as train: the outputs do not live through the backward
        sync()
        t3 = time.perf_counter()
        scaled = loss / accum if accum > 1 else loss
        (job.scaler.scale(scaled) if job.scaler else scaled).backward()
        sync()
        t4 = time.perf_counter()
        for key, seconds in (
            ("data", t1 - t0),
            ("h2d", t2 - t1),
            ("forward", t2b - t2),
            ("loss", t3 - t2b),
            ("backward", t4 - t3),
        ):
            row[key] += seconds
    t5 = time.perf_counter()
    r.optimizer_step()
    sync()
    row["optimizer"] = time.perf_counter() - t5
    row["step"] = time.perf_counter() - t_step
    return row


def _gradient_facts(job: Any, spec: JobSpec) -> tuple[float, dict[str, Any]]:
    """Bytes one all-reduce moves per rank (the planner's gradient bytes for the precision that ran) and the
    trainable parameters' {count, largest, largest_shape, largest_count} (for the sparse-update fix)."""
    from paddlefit.estimate.model_states import model_state_bytes
    from paddlefit.models.build import param_info

    info = param_info(job.model)
    ran = spec.precision if job.amp else Precision.FP32
    grads = float(model_state_bytes(info, spec.optimizer, ran).grads_bytes)
    largest, name, shape = max(
        ((math.prod(q.shape), k, list(q.shape)) for k, q in job.model.named_parameters() if not q.stop_gradient),
        default=(0, "", []),
    )
    return grads, {"count": info.trainable_params, "largest": name, "largest_shape": shape, "largest_count": largest}


def profile_job(
    spec: JobSpec,
    steps: int = options.STEPS.default,
    warmup: int = options.WARMUP.default,
    progress: Any = None,
    top_ops: int = options.OPS.default,
) -> ProfileResult:
    """Run ``warmup + steps`` optimizer steps of ``spec`` on one device and time every component.

    Args:
        spec: the job (its ``data.train``, model, optimizer, precision, DataLoader settings).
        steps: measured steps (>= 3); warmup: steps run first and left out of the statistics (>= 0).
        progress: optional ``progress(done, total)`` callable.
        top_ops: when > 0, run ``min(steps, 5)`` more steps under ``paddle.profiler`` (after the timed ones, so its
            overhead stays out of the breakdown) and report the ``top_ops`` operators with the most time.

    Returns:
        ProfileResult.

    Raises:
        PaddlefitError: the spec's model, data or loss fail (as in ``train``).
        PaddlefitError: ``steps`` not 3..100000, ``warmup`` not 0..100000 or ``top_ops`` not 0..1000 (named by their
            CLI options).
    """
    options.STEPS.check(steps)
    options.WARMUP.check(warmup)
    if not 0 <= top_ops <= 1000:
        raise PaddlefitError(f"`--ops` must be 0..1000 (got {top_ops}).")
    import paddle

    from paddlefit.train.metrics import PeakTracker
    from paddlefit.train.step import scratch_runner

    total = steps + warmup
    spec_devices = spec.devices  # scratch_runner runs one device; the all-reduce of the real job is estimated
    with scratch_runner(spec, total) as (r, step_batches):
        spec, job = r.spec, r.job
        on_gpu = job.on_gpu
        sync = paddle.device.synchronize if on_gpu else (lambda: None)
        rows: list[dict[str, float]] = []
        flops = [0.0]  # training FLOPs per sample, counted on the first micro-batch
        sampler = _Sampler(on_gpu)
        sampler.start()
        try:
            peaks = PeakTracker(on_gpu)
            for step in range(total):
                peaks.checkpoint()
                row = _timed_step(r, step_batches, step, sync, on_gpu, flops)
                row["warmup"] = float(step < warmup)
                rows.append(row)
                if progress:
                    progress(step + 1, total)
        finally:
            sampler.stop()
        operators = _operator_top_k(r, step_batches, min(steps, 5), top_ops, on_gpu) if top_ops > 0 else None
        produce_s = _batch_production_s(job.train_ds, spec.batch_size)
        device = "gpu" if on_gpu else "cpu"
        gpu_name = paddle.device.cuda.get_device_name() if on_gpu else None
        peak = peaks.peak()
        grads, params = _gradient_facts(job, spec)
        gemm = None if on_gpu else cpu_gemm_flops_per_s()
    result = summarise(
        spec,
        rows,
        warmup,
        device,
        gpu_name,
        flops[0],
        sampler,
        produce_s,
        peak_bytes=peak,
        grads_bytes=grads,
        devices=spec_devices,
        params=params,
        cpu_gemm_flops_per_s=gemm,
    )
    result.operators = operators
    return result


def _to_gpu(b: Any) -> Any:
    """The batch's tensors on the GPU (the DataLoader yields host tensors)."""

    def mv(x: Any) -> Any:
        return x.cuda() if hasattr(x, "cuda") and not x.place.is_gpu_place() else x

    b.args = [mv(x) for x in b.args]
    b.kwargs = {k: mv(v) for k, v in b.kwargs.items()}
    b.label = mv(b.label) if b.label is not None else None
    return b


def cpu_gemm_flops_per_s(n: int = 1024, reps: int = 3) -> float:
    """FLOP/s of a dense n x n x n float32 ``paddle.matmul`` on this CPU at Paddle's current thread count: the best
    of ``reps`` (2 n^3 FLOPs each, after one warm-up): what the CPU attains when arithmetic is the limit."""
    import paddle

    a, b = paddle.randn([n, n]), paddle.randn([n, n])
    paddle.matmul(a, b)
    best = math.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        paddle.matmul(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def _operator_top_k(r: Any, step_batches: Any, steps: int, k: int, on_gpu: bool) -> list[dict[str, Any]]:
    """The ``k`` operators with the most time over ``steps`` training steps run under ``paddle.profiler.Profiler``
    (one warm-up step in its scheduler), from the same per-operator statistics ``Profiler.summary`` prints
    (``paddle.profiler.profiler_statistic.StatisticData``, ``event_summary.items``): GPU kernel time on a GPU,
    CPU time otherwise. Operator events nest (a grad node contains the kernels it launches), so the shares can
    add up to more than 100%.

    Returns:
        [{name, calls (per step), ms_per_step, share (of the profiled steps' wall time)}], busiest first.
    """
    import paddle
    from paddle.profiler import Profiler, ProfilerTarget
    from paddle.profiler.profiler_statistic import StatisticData

    targets = [ProfilerTarget.CPU] + ([ProfilerTarget.GPU] if on_gpu else [])
    # on_trace_ready: no-op (the default exports a chrome trace to ./profiler_log in the working directory)
    prof = Profiler(targets=targets, scheduler=(1, steps + 1), on_trace_ready=lambda p: None)
    prof.start()
    wall = 0.0
    for i in range(steps + 1):
        t0 = time.perf_counter()
        r.train_step(step_batches(), i + 1)
        r.optimizer_step()
        if on_gpu:
            paddle.device.synchronize()
        if i >= 1:
            wall += time.perf_counter() - t0
        prof.step()
    prof.stop()
    result = prof.profiler_result
    if not result:
        return []
    items = StatisticData(result.get_data(), result.get_extra_info()).event_summary.items.values()

    def busy_ns(it: Any) -> float:
        return float(it.general_gpu_time if on_gpu else it.cpu_time)

    top = sorted(items, key=lambda it: -busy_ns(it))[:k]
    return [
        {
            "name": it.name,
            "calls": it.call / steps,
            "ms_per_step": busy_ns(it) / 1e6 / steps,
            "share": busy_ns(it) / 1e9 / wall if wall else 0.0,
            "profiled_step_s": wall / steps,
        }
        for it in top
    ]


def _batch_production_s(dataset: Any, batch_size: int, batches: int = 5) -> float:
    """Median seconds to read and collate one micro-batch in this thread (``dataset[i]`` + Paddle's
    ``default_collate_fn``): the CPU work the data pipeline does per batch, whether or not a prefetch thread or
    workers hide it from the step's wait."""
    from paddle.io.dataloader.collate import default_collate_fn

    n = len(dataset)
    times = []
    for b in range(batches):
        idx = [(b * batch_size + k) % n for k in range(batch_size)]
        t0 = time.perf_counter()
        default_collate_fn([dataset[i] for i in idx])
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def plot_profile(result: ProfileResult, path: str) -> None:
    """Stacked bars of each step's components (seconds), warm-up steps hatched, written to ``path`` (PNG) atomically.

    Raises:
        PaddlefitError: matplotlib is missing or the file cannot be written.
    """
    from paddlefit.fileio import check_output_path

    try:
        import logging

        import matplotlib

        logging.getLogger("matplotlib").setLevel(logging.WARNING)  # no font-cache INFO lines on stderr
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PaddlefitError("`--plot` needs matplotlib: pip install matplotlib.") from None
    out = check_output_path(path, "--plot")
    rows = result.per_step
    x = np.arange(1, len(rows) + 1)
    fig, ax = plt.subplots(figsize=(9, 4))
    bottom = np.zeros(len(rows))
    for c in COMPONENTS:
        vals = np.array([r[c] for r in rows]) * 1e3
        if vals.any():
            ax.bar(x, vals, bottom=bottom, label=c, width=0.85)
            bottom += vals
    rest = np.array([r["step"] for r in rows]) * 1e3 - bottom
    ax.bar(x, np.clip(rest, 0, None), bottom=bottom, label="other", width=0.85, color="lightgrey")
    if result.warmup:
        ax.axvspan(0.5, result.warmup + 0.5, color="k", alpha=0.06, label="warm-up (not in the stats)")
    ax.set_xlabel("step")
    ax.set_ylabel("ms")
    ax.set_title(f"{result.model}: {result.verdict}, {result.samples_per_s:,.0f} samples/s on {result.device}")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    from paddlefit.fileio import current_umask

    fmt = out.suffix.lower().lstrip(".") or "png"
    if fmt not in ("png", "svg", "pdf"):
        plt.close(fig)
        raise PaddlefitError(f"`--plot {path}`: use a .png, .svg or .pdf file name.")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=f".{fmt}", dir=out.parent)
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes 0600; give the file the mode open() would
        os.close(fd)
        fig.savefig(tmp, dpi=100, format=fmt)
        os.replace(tmp, out)
    except OSError as exc:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
        raise PaddlefitError(f"`--plot {path}` cannot be written ({exc.strerror or exc}).") from None
    finally:
        plt.close(fig)
