"""Analytic planning of large transformers (too big to probe): configs, per-GPU memory, step time and the
search over data, sharding, tensor and pipeline parallel degrees, micro-batch and recompute.

Pure Python (no Paddle import): :mod:`.configs`, :mod:`.memory`, :mod:`.perf`, :mod:`.search`.
"""
