"""Host overhead and the previous whole-step roofline.

- :func:`host_floor_s`: the host floor of a GPU step from the model's constants ``host_op_s``,
  ``host_step_s_per_tensor`` and ``host_step_s`` (shipped, or measured on the training host by ``paddlefit
  calibrate``), so a GPU row does not depend on the machine that plans it.
- :class:`HostOverhead`: those three figures, measured on this machine by
  :func:`~paddlefit.probe.host_overhead.measure_host_overhead` (by
  ``bench/host_overhead.py`` for the shipped constants and by ``paddlefit calibrate``).
- :func:`default_efficiency`: one efficiency per unit class, from ResNet-50 alone: NVIDIA DeepLearningExamples
  ResNet-50 v1.5 throughput (PyTorch, images/s: 1x A100-80GB TF32 938, AMP 2,470; 1x V100-16GB FP32 367) x
  paddlefit's counted ResNet-50 training FLOPs per image / the datasheet peak. The baseline that
  ``bench/gpu_accuracy.py`` compares the per-operator model against.

Collectives (the gradient all-reduce, TP and sharding collectives) are timed in :mod:`paddlefit.estimate.collectives`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: ResNet-50 (224x224) training FLOPs per image, forward + backward, as counted by
#: :func:`paddlefit.probe.flops.count_flops` (asserted in ``tests/probe/test_flops.py``).
RESNET50_TRAIN_FLOPS_PER_IMAGE = 24_420_053_968


def default_efficiency() -> dict[str, float]:
    """Fraction of the dense peak FLOP/s reached per compute-unit class (``fp32``, ``tf32``, ``half``; ~0.57, ~0.15,
    ~0.19): each ``resnet50_train_images_s.<GPU>.<precision>`` row of ``catalog/data/published_figures.csv``
    (NVIDIA DeepLearningExamples) x :data:`RESNET50_TRAIN_FLOPS_PER_IMAGE` / that GPU's catalog peak for the unit
    the precision runs on."""
    from paddlefit.catalog.gpus import get_gpu
    from paddlefit.catalog.published import figures
    from paddlefit.catalog.units import compute_unit, unit_peak

    out = {}
    for key, f in figures("resnet50_train_images_s").items():
        name, precision = key.rsplit(".", 1)
        gpu = get_gpu(name)
        unit = compute_unit(gpu, precision)
        out[unit] = f.value * RESNET50_TRAIN_FLOPS_PER_IMAGE / unit_peak(gpu, unit, precision)
    return out


@dataclass(frozen=True)
class HostOverhead:
    """Host-side seconds that a training step spends whatever the device: measured on this machine.

    Attributes:
        op_s: dispatch of one eager op that records autograd (median of 3 x 2000 1-element ``paddle.add``).
        optimizer_s_per_tensor: one ``optimizer.step()`` divided by its number of parameter tensors, for
            20 one-element parameters (Paddle's optimizers loop over tensors in Python).
        step_s_fixed: the rest of a step's host work, whatever the model: starting ``loss.backward()``'s engine,
            the ``optimizer.step()`` and ``clear_grad()`` calls themselves: a whole training step of a
            ``Linear(1, 1)`` whose loss is ``out.sum()`` (2 forward ops, 2 tensors) minus its ops and tensors
            at the two figures above (measured: 263 us for the whole tiny step against 58 us of ops and tensors).
    """

    op_s: float
    optimizer_s_per_tensor: float
    step_s_fixed: float = 0.0

    def step_s(self, forward_ops: int, trainable_tensors: int) -> float:
        """Host floor of one step: forward ops + ~2x as many backward ops, the optimizer loop, the fixed work."""
        return 3 * forward_ops * self.op_s + trainable_tensors * self.optimizer_s_per_tensor + self.step_s_fixed


def host_floor_s(params: Any, forward_ops: int, trainable_tensors: int, architecture: str | None = None) -> float:
    """Host seconds of one GPU training step, a lower bound of the step: every kernel is launched from the host
    through Paddle's eager dispatch, forward ops and ~2x as many backward ops, plus ``optimizer.step()``'s loop
    over parameter tensors, and the step's fixed host work: 3 x ``forward_ops`` x ``host_op_s`` +
    ``trainable_tensors`` x ``host_step_s_per_tensor`` + ``host_step_s`` (a
    :class:`~paddlefit.estimate.perf_params.PerfParams`' constants, :class:`HostOverhead`)."""
    return HostOverhead(
        params.get("host_op_s", architecture),
        params.get("host_step_s_per_tensor", architecture),
        params.get("host_step_s", architecture),
    ).step_s(forward_ops, trainable_tensors)
