"""What the report calls summary.json's keys: a label with its unit, as the terminal's run summary says it, instead
of the raw key (issue 26); and the Paddle CPU threads a run used, beside the environment's OMP_NUM_THREADS."""

from __future__ import annotations

from typing import Any

#: summary.json key -> (label with its unit, how its second cell reads the value): ``B`` bytes as MiB/GiB, ``%`` a
#: fraction as percent, ``""`` nothing more. Keys not listed are shown as they are.
SUMMARY_LABELS: dict[str, tuple[str, str]] = {
    "steps": ("optimizer steps", ""), "epochs": ("epochs", ""), "final_loss": ("final training loss", ""),
    "eval_loss": ("eval loss", ""), "eval_accuracy": ("eval accuracy", "%"),
    "samples_per_s": ("throughput (samples/s)", ""), "data_wait_fraction": ("data wait", "%"),
    "peak_memory_bytes": ("peak memory (B)", "B"), "peak_memory_kind": ("peak memory measured by", ""),
    "params_sha256": ("parameters SHA-256", ""), "global_batch": ("global batch (samples)", ""),
    "devices": ("devices", ""), "device": ("device", ""), "precision": ("precision", ""), "tf32": ("TF32", ""),
    "amp_active": ("AMP active", ""), "train_seconds": ("training time, steps only (s)", ""),
    "samples": ("samples trained", ""), "last_checkpoint": ("last checkpoint", ""),
    "wall_seconds": ("wall time (s)", ""), "checkpoint_write_s": ("checkpoint write time (s)", ""),
    "checkpoint_interval_s": ("checkpoint interval (s)", ""), "cost_usd": ("cost (USD)", ""),
    "micro_batch_size": ("micro-batch (samples)", ""), "grad_accum_steps": ("accumulation steps", ""),
    "oom_backoffs": ("out-of-memory back-offs", ""),
}  # fmt: skip


def summary_label(key: str) -> tuple[str, str]:
    """(label with unit, second-cell kind) of a summary.json key; an unknown key is its own label."""
    return SUMMARY_LABELS.get(key, (key, ""))


def readable(value: Any, kind: str) -> str:
    """The second cell of a summary row: bytes (``B``) as ``1.51 MiB`` / ``2.3 GiB``, a fraction (``%``) as
    ``98.66 %``; empty for anything else or a value that is not a number."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return ""
    if kind == "B":
        return f"{value / 1024**2:,.2f} MiB" if value < 1024**3 else f"{value / 1024**3:,.2f} GiB"
    if kind == "%":
        return f"{value * 100:.2f} %"
    return ""


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
