"""What the report calls summary.json's keys and ``runs show``/``runs compare`` the run registry's columns: a label
with its unit, as the terminal's run summary says it, instead of the raw key; and the Paddle CPU threads a
run used, beside the environment's OMP_NUM_THREADS.

Two windows of one run are named apart: summary.json's ``samples_per_s`` and ``data_wait_fraction`` are over the
whole run (every step since the run, or its resume, started); the registry's and the predicted-vs-measured
document's are after the warm-up steps (:func:`paddlefit.train.predict.comparison`'s window). The labels say which."""

from __future__ import annotations

from typing import Any

#: the two windows a run's rates are measured over (see the module docstring)
WHOLE_RUN, AFTER_WARMUP = "whole run", "after warm-up"

#: summary.json key -> (label with its unit, how its second cell reads the value): ``B`` bytes as MiB/GiB, ``%`` a
#: fraction as percent, ``1/s`` a rate (the value's own cell says it as the terminal does), ``""`` nothing more.
#: Keys not listed are shown as they are.
SUMMARY_LABELS: dict[str, tuple[str, str]] = {
    "steps": ("optimizer steps", ""),
    "epochs": ("epochs", ""),
    "final_loss": ("final training loss", ""),
    "eval_loss": ("eval loss", ""),
    "eval_accuracy": ("eval accuracy", "%"),
    "samples_per_s": (f"throughput ({WHOLE_RUN}, samples/s)", "1/s"),
    "data_wait_fraction": (f"data wait ({WHOLE_RUN})", "%"),
    "peak_memory_bytes": ("peak memory (B)", "B"),
    "peak_memory_kind": ("peak memory measured by", ""),
    "params_sha256": ("parameters SHA-256", ""),
    "global_batch": ("global batch (samples)", ""),
    "devices": ("devices", ""),
    "device": ("device", ""),
    "precision": ("precision", ""),
    "tf32": ("TF32", ""),
    "amp_active": ("AMP active", ""),
    "train_seconds": ("training time, steps only (s)", ""),
    "samples": ("samples trained", ""),
    "last_checkpoint": ("last checkpoint", ""),
    "wall_seconds": ("wall time (s)", ""),
    "checkpoint_write_s": ("checkpoint write time (s)", ""),
    "checkpoint_interval_s": ("checkpoint interval (s)", ""),
    "cost_usd": ("cost (USD)", ""),
    "micro_batch_size": ("micro-batch (samples)", ""),
    "grad_accum_steps": ("accumulation steps", ""),
    "oom_backoffs": ("out-of-memory back-offs", ""),
}


#: run registry column -> (label, unit as :func:`paddlefit.runs.view.fmt` takes it: ``s`` seconds shown as ms/s,
#: ``B`` bytes as MiB/GiB, ``%`` a fraction as percent, ``1/s`` a rate, ``text`` as stored, ``""`` a number).
#: ``runs show`` and ``runs compare`` print these labels; ``--json`` keeps the column names.
RUN_LABELS: dict[str, tuple[str, str]] = {
    "id": ("run id", "text"),
    "run_dir": ("run directory", "text"),
    "host": ("host", "text"),
    "pid": ("process id", "text"),
    "started_at": ("started (UTC)", "text"),
    "ended_at": ("ended (UTC)", "text"),
    "status": ("status", "text"),
    "exit_code": ("exit code", "text"),
    "reason": ("reason", "text"),
    "resumes": ("resumes", ""),
    "spec_sha256": ("job spec SHA-256", "text"),
    "model": ("model", "text"),
    "params": ("parameters", ""),
    "device_kind": ("device kind", "text"),
    "device_name": ("device", "text"),
    "device_count": ("device count", ""),
    "precision": ("precision", "text"),
    "micro_batch_size": ("micro-batch (samples)", ""),
    "grad_accum_steps": ("accumulation steps", ""),
    "global_batch": ("global batch (samples)", ""),
    "paddle_version": ("Paddle", "text"),
    "cuda_version": ("CUDA", "text"),
    "driver_version": ("driver", "text"),
    "steps": ("optimizer steps", ""),
    "predicted_step_s": ("predicted step time", "s"),
    "measured_step_s": ("measured step time (median)", "s"),
    "measured_step_p95_s": ("measured step time (p95)", "s"),
    "predicted_samples_per_s": ("predicted samples/s", "1/s"),
    "measured_samples_per_s": (f"measured samples/s ({AFTER_WARMUP})", "1/s"),
    "predicted_peak_bytes": ("predicted peak memory", "B"),
    "measured_peak_bytes": ("measured peak memory", "B"),
    "predicted_mfu": ("predicted MFU", "%"),
    "measured_mfu": ("measured MFU", "%"),
    "data_wait_fraction": (f"data wait ({AFTER_WARMUP})", "%"),
    "final_loss": ("final training loss", ""),
    "eval_loss": ("eval loss", ""),
    "eval_accuracy": ("eval accuracy", "%"),
    "spec_json": ("job spec", "text"),
    "comparison_json": ("predicted vs measured", "text"),
}


def run_label(column: str) -> tuple[str, str]:
    """(label, unit) of a run registry column (:data:`RUN_LABELS`); an unknown column is its own label, a number."""
    return RUN_LABELS.get(column, (column, ""))


def summary_label(key: str) -> tuple[str, str]:
    """(label with unit, second-cell kind) of a summary.json key; an unknown key is its own label."""
    return SUMMARY_LABELS.get(key, (key, ""))


def paddle_threads(cpu_threads: Any, cores: Any, devices: Any, omp: Any) -> str:
    """The Paddle CPU threads a run used, explained: ``train`` sets them itself (``paddle.base.core.set_num_threads``
    in :func:`paddlefit.train.build.setup_device`): the job's ``cpu_threads``, else the usable cores / the
    processes on the node; ``omp`` (the environment's OMP_NUM_THREADS) is said not to be what the run used when it
    differs. ``-`` when the cores are unknown."""
    if isinstance(cpu_threads, int) and cpu_threads > 0:
        n, why = cpu_threads, "the job's cpu_threads"
    elif isinstance(cores, int) and cores > 0:
        procs = devices if isinstance(devices, int) and devices > 0 else 1
        n, why = max(1, cores // procs), f"cpu_threads unset: {cores} usable cores / {procs} process(es)"
    else:
        return "-"
    said = f"{n} ({why}; set by train"
    if omp is not None and str(omp) != str(n):
        said += f"; the environment's OMP_NUM_THREADS={omp} is not what Paddle ran with"
    return said + ")"
