"""Model states in bytes: weights, gradients and optimizer states, from a parameter inventory (no probe).

ZeRO's "model states" (Rajbhandari et al., arXiv 1910.02054 §3.1) for one precision and optimizer; exact for fp32
on Paddle's CPU allocator (``tests/probe/test_memory.py`` checks it against the allocator). The activations and the
workspace are the probe's (:mod:`paddlefit.probe.memory`).
"""

from __future__ import annotations

from dataclasses import dataclass

from paddlefit.jobspec.spec import OptimizerName, Precision

#: Bytes per parameter of optimizer state, fp32 training (Paddle ``python/paddle/optimizer``: Momentum keeps
#: ``velocity``; Adam/AdamW keep ``moment1``, ``moment2``). Adam/AdamW also keep two shape-[1] fp32
#: ``beta1_pow_acc``/``beta2_pow_acc`` tensors per parameter tensor (8 bytes per tensor, see
#: :func:`model_state_bytes`).
OPTIMIZER_STATE_BYTES_PER_PARAM = {
    OptimizerName.SGD: 0,
    OptimizerName.MOMENTUM: 4,
    OptimizerName.ADAM: 8,
    OptimizerName.ADAMW: 8,
}


@dataclass(frozen=True)
class ParamInfo:
    """Parameter inventory of a model: counts, not bytes."""

    params: int
    trainable_params: int
    trainable_tensors: int
    param_bytes_fp32: int
    #: rows of the largest ``paddle.nn.Embedding`` (0: none): token ids must stay below it
    embedding_rows: int = 0


@dataclass(frozen=True)
class ModelStates:
    """Model-state bytes for one precision and optimizer (ZeRO's "model states", arXiv 1910.02054 §3.1).

    Attributes:
        weights_bytes: parameters as stored for compute (fp32, or fp16/bf16 under AMP O2).
        grads_bytes: gradients of trainable parameters (same dtype as the weights).
        optimizer_bytes: optimizer states, including fp32 master weights under AMP O2.
    """

    weights_bytes: int
    grads_bytes: int
    optimizer_bytes: int

    @property
    def total_bytes(self) -> int:
        """Weights + gradients + optimizer states, bytes."""
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes


def model_state_bytes(info: ParamInfo, optimizer: OptimizerName, precision: Precision) -> ModelStates:
    """Model states in bytes.

    fp32 and AMP O1 (weights stay fp32): weights 4 B/param, grads 4 B/trainable param, optimizer
    ``OPTIMIZER_STATE_BYTES_PER_PARAM`` B/trainable param (+ 8 B per trainable tensor for Adam's beta-pow
    accumulators). AMP O2 (``paddle.amp.decorate(level='O2')`` with ``multi_precision``): weights and grads
    2 B/param, plus 4 B/param fp32 master weights; with Adam that is 2 + 2 + 12 = 16 B/param, the ZeRO paper's
    figure (Rajbhandari et al., arXiv 1910.02054 §3.1).

    Exact for fp32 on Paddle's CPU allocator (tested against the allocator in ``tests/probe/test_memory.py``).
    """
    per_state = OPTIMIZER_STATE_BYTES_PER_PARAM[optimizer]
    # + one fp32 [1] learning-rate tensor per optimizer (``Optimizer._create_global_learning_rate``).
    extra = 4 + (8 * info.trainable_tensors if optimizer in (OptimizerName.ADAM, OptimizerName.ADAMW) else 0)
    if precision.level == "O2":
        return ModelStates(
            weights_bytes=2 * info.params,
            grads_bytes=2 * info.trainable_params,
            optimizer_bytes=(per_state + 4) * info.trainable_params + extra,
        )
    return ModelStates(
        weights_bytes=4 * info.params,
        grads_bytes=4 * info.trainable_params,
        optimizer_bytes=per_state * info.trainable_params + extra,
    )
