"""The FLOP formulas and implicit-GEMM shapes of single ops, from their tensors' shapes (1 MAC = 2 FLOPs).

The rules they implement, and their sources, are the table in :mod:`paddlefit.probe.flops`; the layer and
functional rules (:mod:`paddlefit.probe.flop_layers`, :mod:`paddlefit.probe.flop_functional`) call them.
No Paddle import: they read ``.shape`` and ``.stop_gradient``.
"""

from __future__ import annotations

import math
from typing import Any


def numel(t: Any) -> int:
    """Elements of a tensor (product of its ``.shape``); 1 for a value without a shape (a Python scalar)."""
    shape = getattr(t, "shape", None)
    return math.prod(shape) if shape is not None else 1


def needs_grad(t: Any) -> bool:
    """True when ``t`` is a tensor that requires a gradient (``stop_gradient`` is False)."""
    return hasattr(t, "stop_gradient") and not t.stop_gradient


def op_name(layer_type: str) -> str:
    """Paddle op name of an activation/norm layer class (``ReLU6`` -> ``relu6``, ``LayerNorm`` -> ``layer_norm``)."""
    names = {
        "LayerNorm": "layer_norm",
        "GroupNorm": "group_norm",
        "SiLU": "silu",
        "Swish": "swish",
        "LeakyReLU": "leaky_relu",
        "InstanceNorm1D": "instance_norm",
        "InstanceNorm2D": "instance_norm",
        "InstanceNorm3D": "instance_norm",
        "Hardswish": "hardswish",
        "Hardsigmoid": "hardsigmoid",
    }
    return names.get(layer_type, layer_type.lower())


def conv_op(name: str, x: Any, groups: int, data_format: str) -> str:
    """Paddle's op for a convolution: ``depthwise_<name>`` when groups == input channels (Paddle then runs its
    own depthwise kernel, ``depthwise_conv2d`` / ``depthwise_conv2d_transpose``,
    ``python/paddle/nn/functional/conv.py``), else ``name``."""
    channels = x.shape[1 if data_format.upper().startswith("NC") else -1]
    return "depthwise_" + name if groups > 1 and groups == channels else name


def gemm_flops(x: Any, w: Any, out: Any, macs: int, bias: Any) -> tuple[int, int]:
    """(forward, backward) FLOPs of a GEMM-like op (rule in the module docstring)."""
    fwd = 2 * macs + (numel(out) if bias is not None else 0)
    bwd = 0
    if needs_grad(x):
        bwd += 2 * macs
    if needs_grad(w):
        bwd += 2 * macs
    if bias is not None and needs_grad(bias):
        bwd += numel(out)
    return fwd, bwd


def conv_macs(weight: Any, out: Any, transposed: bool, x: Any) -> int:
    """Multiply-accumulates of a convolution (``paddle.hapi.dynamic_flops``'s count): out_numel x C_in/groups x
    prod(kernel); a transposed convolution scatters every input element into C_out/groups x prod(kernel) outputs."""
    wshape = list(weight.shape)
    kernel = math.prod(wshape[2:])
    if transposed:  # weight (C_in, C_out/groups, *k): every input element scatters into C_out/g * k outputs
        return numel(x) * wshape[1] * kernel
    return numel(out) * wshape[1] * kernel  # weight (C_out, C_in/groups, *k)


def conv_gemm(weight: Any, out: Any, x: Any, groups: int, transposed: bool) -> tuple[int, int, int, int]:
    """Implicit-GEMM shape (groups, M, N, K) of a convolution (NCHW): M = samples x output pixels,
    N = output channels per group, K = input channels per group x kernel elements."""
    wshape = list(weight.shape)
    kernel = math.prod(wshape[2:])
    if transposed:  # as the GEMM of its gradient: M = input pixels, N = C_out/g x k, K = C_in/g
        cin = wshape[0]
        return groups, numel(x) // max(cin, 1), wshape[1] * kernel, cin // groups
    cout = wshape[0]
    return groups, numel(out) // max(cout, 1), cout // groups, wshape[1] * kernel


def conv_geometry(
    weight: Any, out: Any, stride: Any, dilation: Any, data_format: str, transposed: bool
) -> tuple[int, int, int, int, int, int, int, int] | None:
    """(kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w, out_h, out_w) of a 2-D convolution, what
    decides whether cuDNN can run it as Winograd (:func:`~paddlefit.estimate.kernel_model.winograd_s`); None for
    transposed and non-2-D convolutions. ``stride``/``dilation``: an int or a pair, as Paddle's ``Conv2D`` takes."""
    wshape, oshape = list(weight.shape), list(out.shape)
    if transposed or len(wshape) != 4 or len(oshape) != 4:
        return None

    def pair(v: Any) -> tuple[int, int]:
        v = list(v) if isinstance(v, list | tuple) else [v, v]
        return (int(v[0]), int(v[-1])) if v and all(isinstance(x, int) for x in v) else (0, 0)

    oh, ow = oshape[2:4] if data_format.upper().startswith("NC") else oshape[1:3]
    return (int(wshape[2]), int(wshape[3]), *pair(stride), *pair(dilation), int(oh), int(ow))


def matmul_gemm(x: Any, y: Any, out: Any, k: int) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of ``paddle.matmul``: a 2-D right operand folds every leading dim of x into M."""
    oshape = list(out.shape)
    n = oshape[-1] if oshape else 1
    if len(y.shape) <= 2:
        return 1, numel(out) // max(n, 1), n, k
    m = oshape[-2] if len(oshape) > 1 else 1
    return numel(out) // max(m * n, 1), m, n, k
