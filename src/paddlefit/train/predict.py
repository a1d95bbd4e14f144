"""The plan's prediction for the run ``train`` is about to do, and the measured figures beside it.

At the start of a run (:func:`~paddlefit.train.run.run_job`, holding the run directory's lock, before any worker
starts) :func:`predict_run` asks the planner (:func:`paddlefit.plan.jobs.plan_job`, what ``paddlefit plan`` runs)
for the devices the run is on: the GPU's name read from NVML and matched to the catalog
(:func:`paddlefit.catalog.device_name.match_gpu`), or this CPU. The planner runs in a child process
(``python -m paddlefit.train.predict``) with ``CUDA_VISIBLE_DEVICES`` empty, so its CPU probe (a few real training
steps at micro-batches 1-3, within the probe's own 6 s budget, :class:`~paddlefit.plan.request.PlanRequest`)
neither touches the training GPU nor leaves state (allocator peaks, name generators, seeds) in the trainer. The
prediction is the uncalibrated plan (no ``calibration: runs``): every run is a fresh check of the model, and the
run registry's rows are what ``plan`` calibrates on. It goes to ``RUN_DIR/prediction.json`` and is reused on
resume when the spec, device and device count are the same.

The trainer (rank 0) measures, after ``warmup_steps`` of each process: the step time of every optimizer step
without the time it waited for data, that wait, the samples, and the allocator's peak; :func:`comparison` puts
them beside the prediction (``RUN_DIR/comparison.json`` at every checkpoint and at the end; ``summary.json``'s
``comparison``). Ratios are predicted / measured.

A plan step is one micro-batch forward + backward + optimizer update per device (plus the exposed all-reduce);
a trainer step with gradient accumulation A runs A forward + backward passes and one update, so its predicted
time is ``A x (plan step - optimizer) + optimizer`` with the optimizer's predicted seconds from the GPU row's
per-op breakdown; the CPU probe's time has no breakdown, so on CPU it is ``A x plan step`` (an upper bound).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from paddlefit.process.safepath import python_command, safe_env
from paddlefit.rundir.files import read_prediction, write_prediction
from paddlefit.units import MIB

__all__ = [
    "NO_PREDICT_ENV",
    "RunDevice",
    "catalog_gpu_name",
    "checked",
    "comparison",
    "predict_run",
    "prediction_line",
    "run_device",
    "trainer_step_s",
    "unmeasured",
]

NO_PREDICT_ENV = "PADDLEFIT_NO_PREDICT"  # "1": as `train --no-predict`
PREDICT_TIMEOUT_S = 300.0  # model build + dataset + the probe (its own budget: 6 s of steps) in the child
WARMUP_STEPS = 5  # as `paddlefit profile --warmup`'s default: DataLoader start, allocator growth, cuDNN search
#: a predicted step (forward, backward and update) shorter than this is no measurement: the planner floors a CPU
#: probe's time fit at 1e-9 s (``paddlefit.plan.rows.cpu_target``) when, under load, the times of micro-batches 1-3
#: fit a line that reaches zero or below at the run's batch (which printed "step 0.0 ms, 32,000,000,000 samples/s")
MIN_STEP_S = 1e-6


@dataclass(frozen=True)
class RunDevice:
    """The devices a run trains on: ``kind`` (``gpu``/``cpu``), the name the driver reports (``NVIDIA L4``) or
    the CPU's, the catalog GPU it matched (None on CPU or when nothing matched) and ``count`` (data parallel)."""

    kind: str
    raw_name: str
    catalog_name: str | None
    count: int

    @property
    def name(self) -> str:
        """The registry's device name: the catalog GPU name, else ``cpu`` (or the raw GPU name, unmatched)."""
        return self.catalog_name or ("cpu" if self.kind == "cpu" else self.raw_name)


def _nvml_name(visible_index: int) -> str | None:
    """The NVML name of the ``visible_index``-th visible GPU (``CUDA_VISIBLE_DEVICES`` mapped: ids or UUIDs),
    read without creating a CUDA context; None when NVML cannot tell."""
    try:
        import pynvml

        pynvml.nvmlInit()
        vis = os.environ.get("CUDA_VISIBLE_DEVICES")
        ident = vis.split(",")[visible_index].strip() if vis else str(visible_index)
        h = (
            pynvml.nvmlDeviceGetHandleByUUID(ident)
            if ident.startswith(("GPU-", "MIG-"))
            else pynvml.nvmlDeviceGetHandleByIndex(int(ident))
        )
        name = pynvml.nvmlDeviceGetName(h)
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # no NVML, a MIG slice NVML does not name, an id that does not parse
        return None


def run_device(devices: int, gpu_ids: list[int] | None, gpus_visible: int) -> RunDevice:
    """The run's :class:`RunDevice`: the first GPU it uses (``gpu_ids[0]``, else 0) when ``gpus_visible``, else
    this CPU (``platform.processor()``, else the machine name)."""
    if not gpus_visible:
        import platform

        return RunDevice("cpu", platform.processor() or platform.machine() or "cpu", None, devices)
    raw = _nvml_name(gpu_ids[0] if gpu_ids else 0) or "unknown GPU"
    return RunDevice("gpu", raw, catalog_gpu_name(raw), devices)


def catalog_gpu_name(raw_name: str) -> str | None:
    """The catalog GPU a driver-reported name denotes (:func:`paddlefit.catalog.device_name.match_gpu`: ``NVIDIA L4``
    -> ``L4``), None when no catalog row matches."""
    from paddlefit.catalog.device_name import match_gpu
    from paddlefit.catalog.gpus import load_gpus
    from paddlefit.errors import UnknownNameError

    try:
        return match_gpu(raw_name, load_gpus()).name
    except UnknownNameError:
        return None


def _not_predicted(device: RunDevice, reason: str) -> dict[str, Any]:
    return {"status": "not predicted", "reason": reason, "device": _device_doc(device)}


def _device_doc(device: RunDevice) -> dict[str, Any]:
    return {"kind": device.kind, "name": device.name, "raw_name": device.raw_name, "count": device.count}


def predict_run(
    spec_yaml: str, device: RunDevice, run_dir: Path, log: Callable[[str], None], timeout_s: float = PREDICT_TIMEOUT_S
) -> dict[str, Any]:
    """The plan's prediction of this run (module docstring), written to ``RUN_DIR/prediction.json`` (atomic) and
    returned; the one in the run directory when it was made for the same spec text, device and count.

    Never raises for a prediction that cannot be made: the document's ``status`` is then ``not predicted`` and
    ``reason`` says why (a GPU not in the catalog, CPU data parallel, the planner failing or taking longer than
    ``timeout_s`` seconds).

    Returns:
        ``{"status": "predicted", "device", "key", "calibration", "micro_step_s", "optimizer_s", "peak_memory_bytes",
        "mfu", "time_breakdown", "train_flops_per_sample", "peak_flops", "params", "batch_size", "tf32", "notes"}``
        (seconds, bytes, FLOPs per sample, FLOP/s of one device at the run's precision and ``tf32``).
    """
    key = hashlib.sha256(f"{spec_yaml}\n{device.name}\n{device.count}".encode()).hexdigest()
    with contextlib.suppress(ValueError, AttributeError):
        old: Any = read_prediction(run_dir)
        if old.get("key") == key:
            return checked(old)  # one written before the check (a resume)
    doc = checked(_predict(spec_yaml, device, log, timeout_s))
    doc["key"] = key
    write_prediction(run_dir, doc)
    return doc


def _predict(spec_yaml: str, device: RunDevice, log: Callable[[str], None], timeout_s: float) -> dict[str, Any]:
    if device.kind == "gpu" and device.catalog_name is None:
        return _not_predicted(
            device,
            f"the GPU {device.raw_name!r} is not in paddlefit's catalog (`paddlefit gpus` "
            "lists it; a row can be added with `plan --catalog FILE`)",
        )
    if device.kind == "cpu" and device.count > 1:
        return _not_predicted(
            device,
            f"{device.count} CPU processes share this machine's cores; the planner's CPU probe times one process",
        )
    log(
        f"predicting this run on {device.count} x {device.name} with the planner (as `paddlefit plan`; "
        "`--no-predict` skips it) ..."
    )
    cmd = [*python_command(module="paddlefit.train.predict"), "--devices", str(device.count)]
    if device.catalog_name:
        cmd += ["--gpu", device.catalog_name]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLE_TRAINER", "PADDLE_CURRENT", "FLAGS_sel"))}
    env = safe_env({**env, "CUDA_VISIBLE_DEVICES": "", "GLOG_minloglevel": "2", "PYTHONWARNINGS": "ignore"})
    try:
        proc = subprocess.run(
            cmd, input=spec_yaml, capture_output=True, text=True, env=env, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return _not_predicted(
            device,
            f"the planner took longer than {timeout_s:.0f} s (run `paddlefit plan --config "
            "RUN_DIR/job.yaml` for this job)",
        )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1][:300]
        return _not_predicted(device, f"the planner failed: {last}")
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    doc["device"] = _device_doc(device)
    return doc


def _plan_doc(spec_path: Path, devices: int, gpu: str | None) -> dict[str, Any]:
    """The child's work: plan the spec for ``gpu`` (or this CPU) on ``devices`` devices, uncalibrated by runs."""
    from paddlefit.catalog.gpus import get_gpu
    from paddlefit.job.resolve import JobOptions
    from paddlefit.plan.jobs import plan_job

    jp = plan_job(
        JobOptions(config=spec_path, devices=devices, command="train"),
        gpus=[gpu] if gpu else (),
        cpu_only=gpu is None,
        use_runs=False,
    )
    gpu_only = jp.plan.model.get("gpu_only_ops") or []
    if gpu is None and gpu_only:
        return {
            "status": "not predicted",
            "reason": f"Paddle has no CPU kernel for {', '.join(gpu_only)}: this model trains on a GPU only",
        }
    t = next(t for t in jp.plan.targets if t.kind == ("gpu" if gpu else "cpu"))
    peak_flops = get_gpu(gpu).peak_flops(jp.plan.precision, jp.job.tf32)[0] if gpu else None  # the spec's tf32
    opt = ((t.time_breakdown or {}).get("optimizer") or {}).get("seconds") if gpu else None
    if t.step_time_s != t.step_time_s:  # NaN: no probe
        return {"status": "not predicted", "reason": "; ".join(t.notes) or "no step time"}
    return {
        "status": "predicted",
        "reason": None,
        "calibration": t.calibration,
        "micro_step_s": t.step_time_s,
        "optimizer_s": opt,
        "peak_memory_bytes": t.peak_bytes,
        "mfu": t.predicted_mfu,
        "time_breakdown": t.time_breakdown,
        "train_flops_per_sample": jp.plan.model["train_flops_per_sample"],
        "peak_flops": peak_flops,
        "params": jp.plan.model["params"],
        "batch_size": jp.plan.batch_size,
        "tf32": jp.job.tf32,
        "fits": t.fits,
        "notes": list(t.notes),
    }


def unmeasured(prediction: dict[str, Any]) -> str | None:
    """Why a ``predicted`` document's step time is no measurement (not a number, NaN, or under
    :data:`MIN_STEP_S`), None when it is one."""
    step = prediction.get("micro_step_s")
    if not isinstance(step, int | float) or isinstance(step, bool) or step != step:
        return "the planner gave no step time"
    if step < MIN_STEP_S:
        return (
            f"the planner's step time ({step:.3g} s) is no measurement: its probe's times (micro-batches 1-3, "
            "taken under this machine's load) fit a line that reaches zero at this batch; `paddlefit plan "
            "--config RUN_DIR/job.yaml` on an idle machine measures it"
        )
    return None


def checked(prediction: dict[str, Any]) -> dict[str, Any]:
    """``prediction`` as is, or, when it says ``predicted`` with a step time that is no measurement
    (:func:`unmeasured`), as ``not predicted`` with the reason (the other figures kept)."""
    if prediction.get("status") != "predicted" or (why := unmeasured(prediction)) is None:
        return prediction
    return {**prediction, "status": "not predicted", "reason": why}


def prediction_line(prediction: dict[str, Any], grad_accum_steps: int, global_batch: int) -> str:
    """``train``'s line for the prediction: ``predicted (CAL): step S ms, R samples/s, peak P MiB`` (seconds of
    a trainer step with ``grad_accum_steps``, ``global_batch`` samples a step), or ``not predicted: REASON``,
    also for a step time that is no measurement (:func:`checked`)."""
    doc = checked(prediction)
    if doc.get("status") != "predicted":
        return f"not predicted: {doc.get('reason') or 'no reason recorded'}"
    step = trainer_step_s(doc, grad_accum_steps)
    peak = doc.get("peak_memory_bytes")
    mib = f"{peak / MIB:,.1f} MiB" if isinstance(peak, int | float) else "-"
    return (
        f"predicted ({doc.get('calibration')}): step {step * 1e3:,.1f} ms, {global_batch / step:,.0f} "
        f"samples/s, peak {mib}"
    )


def trainer_step_s(prediction: dict[str, Any], grad_accum_steps: int) -> float:
    """Predicted seconds of one optimizer step with ``grad_accum_steps`` micro-batches (module docstring)."""
    micro, opt = float(prediction["micro_step_s"]), prediction.get("optimizer_s")
    return grad_accum_steps * (micro - opt) + opt if opt is not None else grad_accum_steps * micro


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def comparison(
    prediction: dict[str, Any] | None,
    *,
    step_s: list[float],
    wait_s: list[float],
    global_batch: int,
    batch_size: int,
    grad_accum_steps: int,
    devices: int,
    peak_memory_bytes: int,
    warmup_steps: int,
) -> dict[str, Any]:
    """Predicted beside measured (the module docstring's document).

    Args:
        prediction: :func:`predict_run`'s document (None: not predicted).
        step_s, wait_s: seconds of each measured optimizer step (after warm-up) and of its wait for data.
        global_batch, batch_size, grad_accum_steps, devices: the run's (samples, micro-batch, A, D).
        peak_memory_bytes: the allocator's peak (rank 0), bytes.
        warmup_steps: steps left out at the start of each process.

    Returns:
        ``{"device", "status", "reason", "calibration", "figures": [{"name", "label", "unit", "predicted",
        "measured", "ratio"}], "warmup_steps", "measured_steps", "time_breakdown"}``; ratio = predicted / measured.
    """
    p = prediction or {
        "status": "not predicted",
        "reason": "no prediction was made for this run (`train "
        "--no-predict`, PADDLEFIT_NO_PREDICT=1, or workers "
        "started without `paddlefit train`)",
    }
    p = checked(p)
    ok = p.get("status") == "predicted"
    compute = [s - w for s, w in zip(step_s, wait_s, strict=True)]
    med = _pct(compute, 50)
    total = sum(step_s)
    pred_step = pred_mfu = None
    if ok:
        pred_step = trainer_step_s(p, grad_accum_steps)
        pred_mfu = p.get("mfu")
    meas_mfu = None
    if ok and p.get("peak_flops") and med:
        meas_mfu = p["train_flops_per_sample"] * global_batch / (med * devices * p["peak_flops"])
    rows = [
        ("step_time_s", "step time (median, excl. data wait)", "s", pred_step, med),
        ("step_time_p95_s", "step time (p95, excl. data wait)", "s", None, _pct(compute, 95)),
        (
            "samples_per_s",
            "samples/s (after warm-up, as run)",
            "1/s",
            global_batch / pred_step if pred_step else None,
            len(step_s) * global_batch / total if total else None,
        ),
        (
            "peak_memory_bytes",
            "peak allocated memory",
            "B",
            p.get("peak_memory_bytes") if ok else None,
            peak_memory_bytes or None,
        ),
        ("mfu", "MFU", "", pred_mfu, meas_mfu),
        ("data_wait_fraction", "data wait (after warm-up)", "", None, sum(wait_s) / total if total else None),
    ]
    figures = [
        {
            "name": n,
            "label": lab,
            "unit": u,
            "predicted": pr,
            "measured": me,
            "ratio": pr / me if pr is not None and me else None,
        }
        for n, lab, u, pr, me in rows
    ]
    return {
        "device": p.get("device"),
        "status": p.get("status"),
        "reason": p.get("reason"),
        "calibration": p.get("calibration"),
        "batch_size": batch_size,
        "grad_accum_steps": grad_accum_steps,
        "figures": figures,
        "warmup_steps": warmup_steps,
        "measured_steps": len(step_s),
        "time_breakdown": p.get("time_breakdown") if ok else None,
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m paddlefit.train.predict [--gpu NAME] --devices D`` < spec YAML: one JSON line on stdout."""
    import argparse
    import tempfile

    ap = argparse.ArgumentParser(prog="python -m paddlefit.train.predict")
    ap.add_argument("--gpu")
    ap.add_argument("--devices", type=int, default=1)
    a = ap.parse_args(argv)
    text = sys.stdin.read()
    real_stdout = sys.stdout
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(sys.stderr):  # dataset code may print
        path = Path(tmp) / "job.yaml"
        path.write_text(text, encoding="utf-8")
        doc = _plan_doc(path, a.devices, a.gpu)
    print(json.dumps(doc), file=real_stdout)
    return 0


if __name__ == "__main__":
    from paddlefit.errors import PaddlefitError

    try:
        sys.exit(main())
    except PaddlefitError as exc:
        print(str(exc), file=sys.stderr)
        sys.exit(2)
