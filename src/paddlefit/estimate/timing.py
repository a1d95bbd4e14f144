"""Step-time estimates for GPUs: roofline over the GPU's peak with a stated efficiency, plus ring all-reduce.

Efficiency defaults come from published measurements, not guesses: NVIDIA DeepLearningExamples ResNet-50
v1.5 training throughput (PyTorch, images/s: 1x A100-80GB TF32 938, AMP 2,470; 1x V100-16GB FP32 367),
multiplied by paddlefit's counted ResNet-50 training FLOPs per image and divided by the datasheet peak.
They are ResNet-50 figures: a GPU row uses them until a calibration file measured on that GPU replaces them
(``paddlefit calibrate``), and says ``calibrated: false`` meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass

#: ResNet-50 (224x224) training FLOPs per image, forward + backward, as counted by
#: :func:`paddlefit.estimate.flops.count_flops` (asserted in ``tests/test_flops.py``).
RESNET50_TRAIN_FLOPS_PER_IMAGE = 24_420_053_968

#: (images/s, peak FLOP/s) of the DeepLearningExamples measurements behind each efficiency class.
_DLE_RESNET50 = {
    "fp32": (367.0, 15.7e12),  # V100-16GB FP32 on CUDA cores (V100 datasheet FP32 15.7 TFLOPS)
    "tf32": (938.0, 156e12),  # A100-80GB TF32 (A100 datasheet dense TF32 156 TFLOPS)
    "half": (2470.0, 312e12),  # A100-80GB AMP (A100 datasheet dense FP16 312 TFLOPS)
}

#: Fraction of peak FLOP/s reached per compute-unit class (derived above; ~0.57, ~0.15, ~0.19).
DEFAULT_EFFICIENCY = {
    k: ips * RESNET50_TRAIN_FLOPS_PER_IMAGE / peak for k, (ips, peak) in _DLE_RESNET50.items()
}


def efficiency_class(unit: str) -> str:
    """Map a peak-FLOPs unit name (``GPU.peak_flops``) to an efficiency class: fp32, tf32 or half."""
    if unit.startswith(("fp16", "bf16")):
        return "half"
    return "tf32" if unit.startswith("tf32") else "fp32"


def ring_allreduce_s(nbytes: float, ranks: int, bandwidth_gbps: float) -> float:
    """Seconds for a ring all-reduce of ``nbytes`` over ``ranks`` at ``bandwidth_gbps`` GB/s per direction.

    Each rank sends 2·(n−1)/n·S bytes (NCCL ring; nccl-tests ``busbw = algbw · 2(n−1)/n``). Latency ignored.
    """
    if ranks <= 1:
        return 0.0
    return 2 * (ranks - 1) / ranks * nbytes / (bandwidth_gbps * 1e9)


@dataclass(frozen=True)
class RooflineTime:
    """Roofline step time (Williams et al., CACM 2009): max(compute, memory traffic), seconds."""

    compute_s: float
    memory_s: float

    @property
    def step_s(self) -> float:
        """Step seconds: the larger of the compute and memory times."""
        return max(self.compute_s, self.memory_s)

    @property
    def bound(self) -> str:
        """``compute`` or ``memory``: which roofline term sets the step time."""
        return "memory" if self.memory_s > self.compute_s else "compute"


def roofline_step(flops: float, peak_flops: float, efficiency: float, traffic_bytes: float,
                  mem_bw_gbps: float) -> RooflineTime:  # fmt: skip
    """Step time of ``flops`` FLOPs at ``efficiency`` x ``peak_flops`` FLOP/s, against ``traffic_bytes``
    of DRAM traffic at ``mem_bw_gbps`` GB/s."""
    return RooflineTime(flops / (peak_flops * efficiency), traffic_bytes / (mem_bw_gbps * 1e9))
