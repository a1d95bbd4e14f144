"""Closed-form transformer estimates (Korthikanti et al. 2022, arXiv 2205.05198): activation bytes and FLOPs.

Used by the planner for zoo transformers too large to probe on this CPU; the probe
(:mod:`paddlefit.probe.memory`) and the FLOP counter (:mod:`paddlefit.probe.flops`) are the measurements
they are checked against (``tests/probe/test_memory.py``, ``tests/probe/test_flops.py``).
"""

from __future__ import annotations

from paddlefit.catalog.transformers import TransformerConfig
from paddlefit.estimate.transformer_ops import head_ops, layer_ops, matmul_flops


def analytic_transformer_activation_bytes(cfg: TransformerConfig, seq_len: int) -> float:
    """Activation bytes per sample of a zoo transformer in fp32 training, no recompute.

    Per layer Korthikanti et al. 2022 (arXiv 2205.05198, table 2, no parallelism) give s·h·(34 + 5·a·s/h)
    bytes per sample with 2-byte values and 1-byte dropout masks; of it 2·s·h + a·s² are masks. With 4-byte
    values: s·h·66 + 9·a·s² bytes per layer. Plus the fp32 logits s·V·4 and the embedding output s·h·4·2.
    Accuracy vs the CPU probe on small configs: see ``tests/probe/test_memory.py``.
    """
    s, h, a = seq_len, cfg.hidden_size, cfg.num_heads
    per_layer = s * h * 66 + 9 * a * s * s
    return cfg.num_layers * per_layer + 4 * s * cfg.vocab_size + 8 * s * h


def analytic_transformer_flops(cfg: TransformerConfig, seq_len: int) -> float:
    """Forward matmul FLOPs per sample of a transformer: 24·s·l·h²·(1 + s/(6h)) + 2·s·h·V for a multi-head,
    GELU, f = 4h model (the forward third of Korthikanti et al. 2022 eq. 7; training = 3 x forward without
    recompute), counted per matrix multiplication by :func:`~paddlefit.estimate.transformer_ops.matmul_flops` of
    the generated ops: l x one layer + the logits. An encoder's MLM transform (2·s·h²) is left out, as the closed
    form does. An exact integer as a float (the float closed form it replaces was off by rounding, < 1 FLOP).
    """
    layer = matmul_flops(layer_ops(cfg, seq_len, 1))
    logits = matmul_flops([o for o in head_ops(cfg, seq_len, 1) if o.op == "matmul"])
    return float(cfg.num_layers * layer + logits)
