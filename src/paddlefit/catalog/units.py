"""Compute units: the one vocabulary for what a GPU computes on, shared by the catalog's dense peaks
(:meth:`~paddlefit.catalog.gpus.GPU.peak_flops`), the per-kernel GPU model (``Kernel.unit``,
:mod:`paddlefit.estimate.kernels`) and calibration files (their ``efficiency_class``).

Units (:data:`COMPUTE_UNITS`): ``fp32`` (CUDA cores), ``tf32`` (TF32 tensor cores: FP32 GEMMs while Paddle's TF32
switches are on), ``half`` (FP16 or BF16 tensor cores, by the AMP precision), ``int8`` (INT8 tensor cores;
quantized inference). The kernel model adds two kernel kinds that are not peaks of the catalog: ``dwconv``
(depthwise/grouped convolutions, on the CUDA cores at the fp32 peak) and ``memory`` (no arithmetic).
Peaks are the catalog's datasheet figures (``catalog/data/gpus.csv``, dense). Which half precisions Paddle's AMP
runs at all on a card (:data:`AMP_MIN_CC`, :func:`cuda_amp_blocked`) lives here too: below it a precision runs on
the fp32 unit.
"""

from __future__ import annotations

from typing import Any

#: Lowest CUDA compute capability / Kunlunxin XPU generation at which ``paddle.amp.auto_cast`` runs each half
#: precision; below it Paddle warns and runs fp32 (``python/paddle/amp/auto_cast.py``:
#: ``_is_gpu_float16_supported``, ``_is_gpu_bfloat16_supported``, ``_is_xpu_float16_supported``,
#: ``_is_xpu_bfloat16_supported``). The one place this rule lives.
AMP_MIN_CC = {"fp16": 7.0, "bf16": 8.0}
AMP_MIN_XPU = {"fp16": 2, "bf16": 3}


def cuda_amp_blocked(compute_capability: float | None, precision: str) -> str | None:
    """Why ``paddle.amp.auto_cast`` runs ``precision`` (``fp16-o1``, ``bf16-o2``, ...) as fp32 on a CUDA GPU of
    ``compute_capability`` (None: unknown, taken as too old), or None when it runs (see :data:`AMP_MIN_CC`)."""
    half = precision.split("-")[0]
    need = AMP_MIN_CC.get(half)
    if need is not None and (compute_capability or 0) < need:
        return f"{half} AMP needs CC {need:.1f}+: Paddle runs fp32"
    return None


#: Every compute unit with a dense peak in the catalog.
COMPUTE_UNITS = ("fp32", "tf32", "half", "int8")
#: The units a training precision runs its GEMMs on (a calibration row's ``efficiency_class``).
TRAINING_UNITS = ("fp32", "tf32", "half")


def compute_unit(gpu: Any, precision: str, tf32: bool = True) -> str:
    """The unit a training ``precision`` (``fp32``, ``fp16-o1``, ``bf16-o2``...) runs at on ``gpu``: ``half``
    when the catalog has the precision's tensor-core peak, else ``tf32`` when it has a TF32 peak and ``tf32`` is on
    (Paddle's default, ``core.get_cudnn_switch()``), else ``fp32``."""
    if precision.startswith("bf16") and gpu.bf16_tflops:
        return "half"
    if precision.startswith("fp16") and gpu.fp16_tflops:
        return "half"
    if gpu.tf32_tflops and tf32:
        return "tf32"
    return "fp32"


def unit_peak(gpu: Any, unit: str, precision: str) -> float:
    """Dense peak FLOP/s (int8: OP/s) of ``unit`` on ``gpu`` (datasheet figures from the catalog; ``half``: the
    BF16 or FP16 figure by ``precision``, FP32's when missing; ``tf32``: FP32's when missing; ``int8``: the INT8
    tensor cores' dense TOPS, 0 when the catalog has none; any other unit: FP32's)."""
    if unit == "int8":
        return (gpu.int8_tops or 0.0) * 1e12
    if unit == "half":
        tf = gpu.bf16_tflops if precision.startswith("bf16") else gpu.fp16_tflops
        return (tf or gpu.fp32_tflops) * 1e12
    if unit == "tf32":
        return (gpu.tf32_tflops or gpu.fp32_tflops) * 1e12
    return gpu.fp32_tflops * 1e12


def unit_label(unit: str, precision: str) -> str:
    """How plans print a unit: ``fp32``, ``tf32 tensor``, ``int8 tensor``, or ``fp16 tensor`` / ``bf16 tensor``
    for ``half`` (by ``precision``)."""
    if unit == "half":
        return f"{precision.split('-')[0]} tensor"
    return unit if unit == "fp32" else f"{unit} tensor"


def unit_of_label(label: str) -> str:
    """The training unit a printed label (:func:`unit_label`) names: ``fp16 …``/``bf16 …`` -> ``half``,
    ``tf32 …`` -> ``tf32``, anything else -> ``fp32``."""
    if label.startswith(("fp16", "bf16")):
        return "half"
    return "tf32" if label.startswith("tf32") else "fp32"
