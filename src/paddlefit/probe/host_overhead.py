"""The host overhead of a training step measured on this machine: :func:`measure_host_overhead` gives a
:class:`~paddlefit.estimate.timing.HostOverhead` (by ``bench/host_overhead.py`` for the shipped constants and by
``paddlefit calibrate`` for a training host).
"""

from __future__ import annotations

import time
from typing import Any

from paddlefit.estimate.timing import HostOverhead


def measure_host_overhead(optimizer_factory: Any, calls: int = 2000) -> HostOverhead:
    """Measure :class:`HostOverhead` on this CPU (a few tens of milliseconds).

    On a GPU every kernel is launched from the host through the same dispatcher (plus the CUDA launch itself),
    so a step cannot be faster than its op count x ``op_s``: this is a lower bound, not a guess.

    Both figures are the minimum over repeats (Python ``timeit``'s advice: other load only ever adds time), so a
    busy machine running ``plan`` does not slow the prediction for an idle GPU server.

    Args:
        optimizer_factory: ``f(parameters) -> paddle.optimizer.Optimizer`` for the planned optimizer.
    """
    import paddle

    a = paddle.ones([1])
    a.stop_gradient = False
    b = paddle.ones([1])
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            paddle.add(a, b)
        runs.append((time.perf_counter() - t0) / calls)
    params = [paddle.create_parameter([1], "float32") for _ in range(20)]
    opt = optimizer_factory(params)
    for p in params:
        p.grad = paddle.ones([1])
    opt.step()  # creates the accumulators
    per_tensor = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(10):
            opt.step()
        per_tensor.append((time.perf_counter() - t0) / 10 / len(params))
    return HostOverhead(min(runs), min(per_tensor), _fixed_step_s(optimizer_factory, min(runs), min(per_tensor)))


def _fixed_step_s(optimizer_factory: Any, op_s: float, per_tensor: float, steps: int = 200) -> float:
    """:attr:`HostOverhead.step_s_fixed`: the minimum over 5 x ``steps`` whole training steps of a ``Linear(1, 1)``
    (forward, ``out.sum()``, backward, ``optimizer.step()``, ``clear_grad()``) minus 3 x 2 ops x ``op_s`` and
    2 tensors x ``per_tensor``; never below 0."""
    import paddle

    model = paddle.nn.Linear(1, 1)
    opt = optimizer_factory(model.parameters())
    x = paddle.ones([1, 1])

    def step() -> None:
        model(x).sum().backward()
        opt.step()
        opt.clear_grad()

    for _ in range(20):
        step()
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        runs.append((time.perf_counter() - t0) / steps)
    return max(0.0, min(runs) - 3 * 2 * op_s - 2 * per_tensor)
