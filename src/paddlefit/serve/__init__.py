"""Serving an exported model: its inference latency and memory measured with Paddle Inference (:mod:`.cpu_bench`)."""

from __future__ import annotations


def default_threads() -> list[int]:
    """CPU thread counts measured when none are given: 1 and this machine's physical cores
    (``psutil.cpu_count(logical=False)``, else the logical count), each once."""
    import os

    import psutil

    return list(dict.fromkeys([1, psutil.cpu_count(logical=False) or os.cpu_count() or 1]))
