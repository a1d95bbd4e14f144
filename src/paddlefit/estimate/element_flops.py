"""FLOPs per output element of Paddle's elementwise, activation, normalisation, softmax and loss kernels: the one
table the dygraph FLOP counter (:mod:`~paddlefit.probe.flop_functional`, :mod:`~paddlefit.probe.flop_layers`),
the fused-op rules (:mod:`~paddlefit.estimate.fused`) and the program reader
(:mod:`~paddlefit.probe.program_trace`) take them from. Keys are Paddle's op names (PIR / fluid); each entry is
``(trace class, FLOPs per output element)``. The backward rule is :mod:`paddlefit.probe.flops`'s.

Sources, as Paddle's static cost model ``python/paddle/utils/flops.py`` (Paddle 3.3.1) counts where it has the op:

===========================  ====  ===================================================================
op                           FLOP  source
===========================  ====  ===================================================================
relu-class, silu, sigmoid,   1     flops.py ``relu``/``silu``/``elu``/``prelu``/``relu6`` and the
tanh, hardswish, exp, + - *        ``elementwise_add``/``_mul``/``_div`` rule (one per output element)
/, comparisons, ...
gelu                         5     flops.py ``gelu``
softmax, log_softmax         3     flops.py ``softmax``
layer/group/instance norm    8     flops.py ``layer_norm`` with epsilon (7 + 1)
batch norm                   4     ``paddle.hapi.dynamic_flops.count_bn`` (2 MACs per element)
rms norm                     4     square, sum, scale by the inverse root, weight (Zhang & Sennrich 2019,
                                   arXiv 1910.07467, eq. 4)
rotary embedding             3     x·cos + rotate(x)·sin: two multiplies, one add (Su et al. 2021,
                                   arXiv 2104.09864, eq. 34)
swiglu / geglu               3 / 6 silu(a)·b = a·sigmoid(a)·b: sigmoid 1 + 2 multiplies; gelu(a)·b: gelu 5
                                   + 1 multiply (Shazeer 2020, arXiv 2002.05202, eq. 5-6)
cross entropy, ctc           3     the softmax rule on the logits (the gather and log are per row)
bce, mse, l1, nll, huber     1     the elementwise rule
dropout, embedding, moves    0     flops.py ``dropout``/``c_embedding``/``transpose2``/``reshape2``
===========================  ====  ===================================================================
"""

from __future__ import annotations

#: Ops of one FLOP per output element (flops.py's relu-class and elementwise rules).
_ONE = (
    "relu",
    "relu6",
    "leaky_relu",
    "prelu",
    "elu",
    "selu",
    "silu",
    "swish",
    "sigmoid",
    "tanh",
    "hardswish",
    "hardsigmoid",
    "hardtanh",
    "mish",
    "softplus",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "abs",
    "square",
    "pow",
    "reciprocal",
    "erf",
    "sin",
    "cos",
    "clip",
    "add",
    "subtract",
    "multiply",
    "divide",
    "maximum",
    "minimum",
    "elementwise_pow",
    "floor_divide",
    "remainder",
    "where",
    "equal",
    "not_equal",
    "less_than",
    "less_equal",
    "greater_than",
    "greater_equal",
    "logical_and",
    "logical_or",
    "logical_not",
    "sign",
    "floor",
    "ceil",
    "round",
    "scale",
)

#: op -> (trace class, FLOPs per output element); see the module docstring for each figure's source.
ELEMENT_FLOPS: dict[str, tuple[str, int]] = {
    **dict.fromkeys(_ONE, ("elementwise", 1)),
    "gelu": ("elementwise", 5),
    "swiglu": ("elementwise", 3),
    "geglu": ("elementwise", 6),
    "dropout": ("elementwise", 0),
    "softmax": ("softmax", 3),
    "log_softmax": ("softmax", 3),
    "layer_norm": ("norm", 8),
    "group_norm": ("norm", 8),
    "instance_norm": ("norm", 8),
    "batch_norm": ("norm", 4),
    "rms_norm": ("norm", 4),
    "fused_rotary_position_embedding": ("elementwise", 3),
    "softmax_with_cross_entropy": ("softmax", 3),
    "cross_entropy_with_softmax": ("softmax", 3),
    "warpctc": ("softmax", 3),
    "nll_loss": ("elementwise", 1),
    "sigmoid_cross_entropy_with_logits": ("elementwise", 1),
    "bce_loss": ("elementwise", 1),
    "mse_loss": ("elementwise", 1),
    "l1_loss": ("elementwise", 1),
    "huber_loss": ("elementwise", 1),
}


def per_element(op: str) -> int:
    """FLOPs per output element of Paddle op ``op`` (:data:`ELEMENT_FLOPS`).

    Raises:
        KeyError: ``op`` is not in the table (a caller's bug: every counted op has an entry).
    """
    return ELEMENT_FLOPS[op][1]
