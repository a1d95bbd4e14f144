"""paddlefit.estimate.timing: the ResNet-50 efficiency baseline and the host floor (exact values; the host-overhead
measurement with a counting fake optimizer). Collectives: tests/estimate/test_collectives.py."""

import dataclasses

import pytest

from paddlefit.estimate import timing
from paddlefit.estimate.timing import (
    RESNET50_TRAIN_FLOPS_PER_IMAGE,
    HostOverhead,
    default_efficiency,
)
from paddlefit.probe.host_overhead import measure_host_overhead


def test_default_efficiency_is_the_published_resnet50_throughput_over_the_peak():
    # images/s (DeepLearningExamples ResNet-50 v1.5) x counted training FLOPs per image / datasheet dense peak
    assert RESNET50_TRAIN_FLOPS_PER_IMAGE == 24_420_053_968
    # by hand: 367 x 24.420053968e9 / 15.7e12, 938 x ... / 156e12, 2470 x ... / 312e12
    by_hand = {"fp32": 0.570838204, "tf32": 0.146833401, "half": 0.193325427}
    assert {k: pytest.approx(v, rel=1e-8) for k, v in by_hand.items()} == default_efficiency()
    assert {k: round(v, 2) for k, v in default_efficiency().items()} == {"fp32": 0.57, "tf32": 0.15, "half": 0.19}


def test_the_all_reduce_is_timed_in_one_place():
    # the plain ring formula 2(n-1)/n x S / link is gone: every all-reduce is paddlefit.estimate.collectives'
    assert not hasattr(timing, "ring_allreduce_s")


def test_host_floor_is_three_ops_per_forward_op_plus_the_optimizer_loop():
    h = HostOverhead(op_s=2e-6, optimizer_s_per_tensor=5e-5)
    assert h.step_s(40, 8) == pytest.approx(3 * 40 * 2e-6 + 8 * 5e-5, rel=1e-12)  # 0.64 ms
    assert h.step_s(0, 0) == 0.0
    # plus the fixed host work of a step, whatever the model
    assert HostOverhead(2e-6, 5e-5, 1.5e-4).step_s(40, 8) == pytest.approx(3 * 40 * 2e-6 + 8 * 5e-5 + 1.5e-4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        h.op_s = 1.0


def test_measure_host_overhead_steps_the_planned_optimizer_over_twenty_tensors():
    steps = []

    class CountingOptimizer:
        def __init__(self, params):
            self.params = params

        def step(self):
            assert all(p.grad is not None for p in self.params)
            steps.append(len(self.params))

        def clear_grad(self):
            pass

    made = []
    h = measure_host_overhead(lambda params: made.append(list(params)) or CountingOptimizer(params), calls=20)
    params, tiny = made
    assert [list(p.shape) for p in params] == [[1]] * 20
    assert [list(p.shape) for p in tiny] == [[1, 1], [1]]  # the fixed step's Linear(1, 1): weight, bias
    # one step creating the accumulators, then 5 repeats of 10; the fixed step: 20 warm-up, then 5 repeats of 200
    assert steps == [20] * (1 + 5 * 10) + [2] * (20 + 5 * 200)
    assert h.op_s > 0 and h.optimizer_s_per_tensor > 0 and h.step_s_fixed >= 0
