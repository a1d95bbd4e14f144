"""Analytic planning of large transformers (too big to probe): per-GPU memory, step time and the search over data,
sharding, tensor and pipeline parallel degrees, micro-batch and recompute.

Entry point: :func:`paddlefit.llm.search.plan_llm` (``paddlefit plan llama-2-7b --gpus 8``). Pure Python (no Paddle
import): :mod:`.memory` (per-GPU bytes), :mod:`.perf` (FLOPs and step
time), :mod:`.search` (the layouts that fit, ranked by tokens/s). The configs it plans (built-in and user files)
are :mod:`paddlefit.catalog.transformer_configs`. Formulas: ``docs/numbers.md#llm-plans``.
"""
