"""What ``plan --explain GPU`` shows for a GPU row: the predicted top kernel groups of a step, each with its bound,
the efficiency it reaches and where that efficiency comes from (measured kernels, their fit carried by datasheet
figures, published end-to-end runs, a measured GEMM ceiling, a device calibration, or a prior)."""

from __future__ import annotations

from typing import Any

from paddlefit.catalog.gpus import GPU
from paddlefit.catalog.units import unit_peak
from paddlefit.estimate.gpu_model import MEMORY_KEYS, StepEstimate, efficiency_ceiling, param_key
from paddlefit.estimate.perf_params import DEVICE_MEASURED_KEYS, KERNEL_FIT_KEYS, PerfParams, kernel_fit_architectures


def efficiency_source(key: str, params: PerfParams, architecture: str) -> str:
    """Where the efficiency ``key`` of a kernel on a GPU of ``architecture`` comes from: ``device`` (timed on that
    GPU by ``paddlefit calibrate``), ``kernels`` (fitted on measured kernels of its class), ``kernels+datasheet``
    (the same fit, carried to an architecture with no measured kernel by its datasheet figures; also for a device
    calibration, which does not time these), ``published-fit``
    (end-to-end published runs, tensor cores bounded by DeepBench's FP16 GEMMs; ``+<arch>`` with a factor of that
    generation a parameter file gives), ``mamf`` (a half-precision efficiency held to the best GEMM measured on the
    architecture's cards, :func:`~paddlefit.catalog.ceilings.gemm_ceiling`) or ``prior`` (no measurement
    constrains it)."""
    if params.calibration == "device" and key in DEVICE_MEASURED_KEYS:
        return "device"
    if key in KERNEL_FIT_KEYS:
        return "kernels" if architecture in kernel_fit_architectures() else "kernels+datasheet"
    if (params.provenance.get("rows_constraining_each_parameter") or {}).get(key) == 0:
        return "prior"
    if efficiency_ceiling(key, architecture) < params.get(key, architecture):
        return "mamf"
    return "published-fit" + (f"+{architecture}" if key in params.by_generation.get(architecture, {}) else "")


def explain_rows(
    est: StepEstimate, gpu: GPU, params: PerfParams, precision: str, top: int = 15
) -> list[dict[str, Any]]:
    """The ``top`` kernel groups of a predicted step (kernels of one op name and phase summed), slowest first, each
    with its bound, the efficiency it reaches (compute-bound: FLOPs / (time x the unit's peak); memory-bound:
    bytes / (time x DRAM bandwidth)) and the source of that efficiency (:func:`efficiency_source`)."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for k, t, bound in est.kernels:
        g = groups.setdefault(
            (k.op, k.phase),
            {
                "op": k.op,
                "cls": k.cls,
                "phase": k.phase,
                "seconds": 0.0,
                "flops": 0.0,
                "bytes": 0.0,
                "kernels": 0,
                "compute_s": 0.0,
                "unit": k.unit,
                "param": None,
            },
        )
        g["seconds"] += t
        g["flops"] += k.flops
        g["bytes"] += k.bytes
        g["kernels"] += k.count
        if bound == "compute":
            g["compute_s"] += t
            g["param"] = g["param"] or param_key(k)
    rows = sorted(groups.values(), key=lambda g: -g["seconds"])[:top]
    for g in rows:
        g["bound"] = "compute" if g.pop("compute_s") >= g["seconds"] / 2 else "memory"
        g["share"] = g["seconds"] / est.device_s if est.device_s else 0.0
        param = g.pop("param")
        key = param if g["bound"] == "compute" else None
        if key:
            peak = unit_peak(gpu, "fp32" if g["unit"] == "dwconv" else g["unit"], precision)
            g["efficiency"] = g["flops"] / (g["seconds"] * peak) if g["seconds"] else 0.0
        else:
            key = MEMORY_KEYS.get(g["cls"], "bw_eff")
            g["efficiency"] = g["bytes"] / (g["seconds"] * gpu.mem_bw_gb_s * 1e9) if g["seconds"] else 0.0
        g["efficiency_of"] = key
        g["source"] = efficiency_source(key, params, gpu.architecture)
    return rows
