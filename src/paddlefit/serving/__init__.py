"""Serving a trained model: the inference plan of every GPU (``plan --inference``, ``cost --inference``) and the
measurements behind it on this machine.

Modules: ``model`` (what is served: an exported program or a model built and traced here, or a known
transformer's analytic trace), ``plan`` (:func:`~paddlefit.serving.plan.forward_point` and the serving rows: each
engine's fused kernels timed per GPU, the request floor, the memory), ``job`` (what the commands call: the model,
the CPU rows within their budget, the GPU rows, prices), ``program`` (an exported model's files and inputs),
``cpu_bench`` (Paddle Inference's CPU predictor timed here), ``predictor_overhead`` (the predictor's per-call host
cost and the request copies, measured).
"""

from __future__ import annotations


def default_threads() -> list[int]:
    """CPU thread counts measured when none are given: 1 and this machine's physical cores
    (``psutil.cpu_count(logical=False)``, else the logical count), each once."""
    import os

    import psutil

    return list(dict.fromkeys([1, psutil.cpu_count(logical=False) or os.cpu_count() or 1]))
