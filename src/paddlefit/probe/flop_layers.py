"""FLOP rules for ``paddle.nn`` layers, by family: convolutions, linear, norms, activations, pooling, embedding,
recurrent layers and dropout.

:class:`~paddlefit.probe.flops.FlopCounter` hooks every leaf layer whose type :func:`layer_rules` lists; the
formulas and their sources are the table in :mod:`paddlefit.probe.flops`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from paddlefit.estimate.element_flops import per_element
from paddlefit.estimate.flop_formulas import (
    conv_gemm,
    conv_geometry,
    conv_macs,
    conv_op,
    needs_grad,
    numel,
    op_name,
)

if TYPE_CHECKING:
    from paddlefit.probe.flops import FlopCounter


def count_conv(counter: FlopCounter, layer: Any, x: Any, out: Any, transposed: bool = False) -> None:
    """FLOPs and trace of one call of a ``paddle.nn`` ConvND / ConvNDTranspose on input ``x`` (formula in
    :mod:`paddlefit.probe.flops`; Paddle's depthwise kernel named as Paddle runs it)."""
    groups = int(getattr(layer, "_groups", 1) or 1)
    fmt = str(getattr(layer, "_data_format", "NCHW"))
    name = conv_op(type(layer).__name__.lower().replace("transpose", "_transpose"), x, groups, fmt)
    counter.emit_gemm(
        "conv",
        name,
        x,
        layer.weight,
        out,
        conv_macs(layer.weight, out, transposed, x),
        layer.bias,
        conv_gemm(layer.weight, out, x, groups, transposed),
        groups,
        fmt,
        conv_geometry(layer.weight, out, getattr(layer, "_stride", 1), getattr(layer, "_dilation", 1), fmt, transposed),
    )


def count_linear(counter: FlopCounter, layer: Any, x: Any, out: Any) -> None:
    """FLOPs and trace of one call of a ``paddle.nn.Linear`` (weight K x N) on input ``x``: 2·M·N·K + bias."""
    n, k = layer.weight.shape[1], layer.weight.shape[0]
    counter.emit_gemm(
        "linear", "linear", x, layer.weight, out, numel(out) * k, layer.bias, (1, numel(out) // max(n, 1), n, k)
    )


def layer_rules(counter: FlopCounter) -> list[tuple[Any, Any]]:
    """(layer types, rule) pairs: ``rule(layer, inputs, output)`` counts one call of a layer of those types into
    ``counter`` (formulas in :mod:`paddlefit.probe.flops`); the first matching pair applies."""
    from paddle import nn

    conv = (nn.Conv1D, nn.Conv2D, nn.Conv3D)
    conv_t = (nn.Conv1DTranspose, nn.Conv2DTranspose, nn.Conv3DTranspose)
    bn = (nn.BatchNorm, nn.BatchNorm1D, nn.BatchNorm2D, nn.BatchNorm3D, nn.SyncBatchNorm)
    ln = (nn.LayerNorm, nn.GroupNorm, nn.InstanceNorm1D, nn.InstanceNorm2D, nn.InstanceNorm3D)
    act1 = (
        nn.ReLU,
        nn.ReLU6,
        nn.LeakyReLU,
        nn.PReLU,
        nn.ELU,
        nn.SiLU,
        nn.Sigmoid,
        nn.Tanh,
        nn.Hardswish,
        nn.Hardsigmoid,
        nn.Swish,
        nn.Mish,
    )
    maxpool = (
        nn.MaxPool1D,
        nn.MaxPool2D,
        nn.MaxPool3D,
        nn.AdaptiveMaxPool1D,
        nn.AdaptiveMaxPool2D,
        nn.AdaptiveMaxPool3D,
    )
    avgpool = (
        nn.AvgPool1D,
        nn.AvgPool2D,
        nn.AvgPool3D,
        nn.AdaptiveAvgPool1D,
        nn.AdaptiveAvgPool2D,
        nn.AdaptiveAvgPool3D,
    )

    def on_params_elementwise(kind, per, op=None, cls="elementwise"):
        def rule(layer, inp, out):
            tensors = (inp[0], *layer.parameters(include_sublayers=False))
            if isinstance(layer, bn):  # running mean/variance are read and updated in training
                tensors = (*tensors, *(b for b in layer.buffers(include_sublayers=False)))
            name = op or op_name(type(layer).__name__)
            counter.emit_elementwise(kind, name, per, tensors, out, cls)

        return rule

    def on_pool(op):
        def rule(layer, inp, out):
            x = inp[0]
            counter.emit("pool", op, "reduce", numel(x), numel(x) if needs_grad(x) else 0, (x,), out)

        return rule

    def on_embedding(layer, inp, out):
        counter.emit(
            "embedding",
            "embedding",
            "embedding",
            0,
            numel(out) if needs_grad(layer.weight) else 0,
            (inp[0], layer.weight),
            out,
        )

    def on_rnn(layer, inp, out):
        count_rnn(counter, layer, inp[0], out[0] if isinstance(out, list | tuple) else out)

    return [
        (conv, lambda layer, i, o: count_conv(counter, layer, i[0], o)),
        (conv_t, lambda layer, i, o: count_conv(counter, layer, i[0], o, transposed=True)),
        (nn.Linear, lambda layer, i, o: count_linear(counter, layer, i[0], o)),
        (bn, on_params_elementwise("norm", per_element("batch_norm"), "batch_norm", "norm")),
        (ln, on_params_elementwise("norm", per_element("layer_norm"), None, "norm")),
        (nn.GELU, on_params_elementwise("activation", per_element("gelu"), "gelu")),
        (act1, on_params_elementwise("activation", per_element("relu"))),
        (nn.Softmax, on_params_elementwise("softmax", per_element("softmax"), "softmax", "softmax")),
        (maxpool, on_pool("max_pool")),
        (avgpool, on_pool("avg_pool")),
        (nn.Embedding, on_embedding),
        ((nn.LSTM, nn.GRU, nn.SimpleRNN), on_rnn),
        (nn.Dropout, lambda layer, i, o: counter.emit("dropout", "dropout", "elementwise", 0, 0, i[0], o)),
    ]


def count_rnn(counter: FlopCounter, layer: Any, x: Any, out: Any) -> None:
    """FLOPs and trace of a ``paddle.nn`` LSTM/GRU/SimpleRNN (formula in :mod:`paddlefit.probe.flops`).

    Each layer and direction is traced as two GEMMs: the input projection of all T steps at once
    (B*T x G*H x I_l) and the recurrent one as a batch of T GEMMs (B x G*H x R); the GPU model therefore sees
    the recurrent FLOPs but not the latency of T dependent steps.
    """
    gates, elem = {"LSTM": (4, 9), "GRU": (3, 8)}.get(type(layer).__name__, (1, 1))
    time_major = bool(getattr(layer, "time_major", False))
    b, t = (int(x.shape[1]), int(x.shape[0])) if time_major else (int(x.shape[0]), int(x.shape[1]))
    h = int(layer.hidden_size)
    dirs = int(getattr(layer, "num_directions", 1) or 1)
    proj = int(getattr(layer, "proj_size", 0) or 0)
    r = proj or h
    params = dict(layer.named_parameters())
    size_in = int(x.shape[-1])
    for lay in range(int(layer.num_layers)):
        for d in range(dirs):
            sfx = f"l{lay}" + ("_reverse" if d else "")
            w_ih, w_hh = params.get(f"weight_ih_{sfx}"), params.get(f"weight_hh_{sfx}")
            m = b * t
            fwd_in = 2 * m * gates * h * size_in + 2 * m * gates * h
            first = lay == 0
            bwd_in = fwd_in * (2 if not first or needs_grad(x) else 1)
            counter.emit(
                "rnn", "rnn", "gemm", fwd_in, bwd_in, (x if first else out, w_ih), out, (1, m, gates * h, size_in)
            )
            fwd_rec = 2 * m * gates * h * r + 2 * m * gates * h + elem * m * h + (2 * m * h * r if proj else 0)
            counter.emit("rnn", "rnn", "gemm", fwd_rec, 2 * fwd_rec, (out, w_hh), out, (t, b, gates * h, r))
        size_in = dirs * r
