"""Closed-form transformer estimates (Korthikanti et al. 2022, arXiv 2205.05198): activation bytes and FLOPs.

Used by the planner for zoo transformers too large to probe on this CPU; the probe
(:mod:`paddlefit.probe.memory`) and the FLOP counter (:mod:`paddlefit.probe.flops`) are the measurements
they are checked against (``tests/test_memory.py``, ``tests/test_flops.py``).
"""

from __future__ import annotations

from typing import Any


def analytic_transformer_activation_bytes(cfg: Any, seq_len: int) -> float:
    """Activation bytes per sample of a zoo transformer in fp32 training, no recompute.

    Per layer Korthikanti et al. 2022 (arXiv 2205.05198, table 2, no parallelism) give s·h·(34 + 5·a·s/h)
    bytes per sample with 2-byte values and 1-byte dropout masks; of it 2·s·h + a·s² are masks. With 4-byte
    values: s·h·66 + 9·a·s² bytes per layer. Plus the fp32 logits s·V·4 and the embedding output s·h·4·2.
    Accuracy vs the CPU probe on small configs: see ``tests/test_memory.py``.
    """
    s, h, a = seq_len, cfg.hidden_size, cfg.num_heads
    per_layer = s * h * 66 + 9 * a * s * s
    return cfg.num_layers * per_layer + 4 * s * cfg.vocab_size + 8 * s * h


def analytic_transformer_flops(cfg: Any, seq_len: int) -> float:
    """Forward FLOPs per sample of a transformer: 24·s·l·h²·(1 + s/(6h)) + 2·s·h·V.

    This is the forward third of Korthikanti et al. 2022 eq. 7 (training = 3 x forward without recompute).
    """
    s, h, layers, v = seq_len, cfg.hidden_size, cfg.num_layers, cfg.vocab_size
    return 24 * s * layers * h * h * (1 + s / (6 * h)) + 2 * s * h * v
