"""Small user models for tests (imported as `tinymodels:<factory>`)."""

import paddle
from paddle import nn


def mlp(hidden: int = 40, classes: int = 5) -> nn.Layer:
    return nn.Sequential(nn.Linear(30, hidden), nn.ReLU(), nn.Linear(hidden, classes))


class TwoInput(nn.Layer):
    """Takes an image and a token-id sequence (a multi-input model)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2D(3, 8, 3, padding=1)
        self.emb = nn.Embedding(100, 8)
        self.head = nn.Linear(16, 2)

    def forward(self, img, ids):
        a = self.conv(img).mean(axis=[2, 3])
        b = self.emb(ids).mean(axis=1)
        return self.head(paddle.concat([a, b], axis=-1))


class ReturnsLoss(nn.Layer):
    """Returns its own scalar loss."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 1)

    def forward(self, x):
        return (self.fc(x) ** 2).mean()


def not_a_layer_factory():
    raise RuntimeError("factory exploded")


def frozen() -> nn.Layer:
    layer = nn.Linear(8, 1)
    for p in layer.parameters():
        p.stop_gradient = True
    return layer


def noisy() -> nn.Layer:
    print("hello from the factory")
    return nn.Linear(8, 1)


def fdwrite():
    """Writes to file descriptor 1 in forward (as C++ code or a subprocess would), and runs more layers when the
    batch is larger than 1 (a forward whose ops depend on the batch size)."""
    import os

    import paddle

    class FdWrite(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.layers = paddle.nn.LayerList([paddle.nn.Linear(8, 8) for _ in range(4)])

        def forward(self, x):
            os.write(1, b"FD1 WRITE\n")
            for layer in self.layers[: 1 if x.shape[0] == 1 else 4]:
                x = layer(x)
            return x

    return FdWrite()


class BiLSTMClassifier(nn.Layer):
    """Token ids -> embedding -> 2-layer bidirectional LSTM -> linear (a text classifier / CRNN neck).
    ``nn.LSTM`` coalesces its weights in ``__init__``, which fails under ``paddle.LazyGuard``."""

    def __init__(self, vocab: int = 50, hidden: int = 16, classes: int = 3) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, 8)
        self.lstm = nn.LSTM(8, hidden, num_layers=2, direction="bidirect")
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, ids):
        out, _ = self.lstm(self.emb(ids))
        return self.head(out.mean(axis=1))


class FixedNames(nn.Layer):
    """Parameters with fixed names (PaddleOCR's backbones): a second build in one process clashes without a fresh
    ``unique_name.guard``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2D(1, 4, 3, weight_attr=paddle.ParamAttr(name="conv1_weights"), bias_attr=False)
        self.fc = nn.Linear(4, 3, weight_attr=paddle.ParamAttr(name="fc_weights"))

    def forward(self, x):
        return self.fc(self.conv(x).mean(axis=[2, 3]))


class InitCompute(nn.Layer):
    """Computes with its own parameters in ``__init__`` (a head that derives a buffer from its weights), which
    ``paddle.LazyGuard`` refuses: the lazy weights have no memory yet."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 4)
        with paddle.no_grad():
            self.register_buffer("prior", self.fc.weight.sum(axis=0) * 0.5)

    def forward(self, x):
        return self.fc(x) + self.prior


class KeywordModel(nn.Layer):
    """ERNIE-like signature: ``forward(input_ids, token_type_ids=None, position_ids=None, attention_mask=None,
    labels=None)``; returns ``{"loss", "logits"}`` when labels are given, else the logits."""

    def __init__(self, vocab: int = 40, classes: int = 3) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, 16)
        self.seg = nn.Embedding(2, 16)
        self.head = nn.Linear(16, classes)

    def forward(self, input_ids, token_type_ids=None, position_ids=None, attention_mask=None, labels=None):
        h = self.emb(input_ids)
        if token_type_ids is not None:
            h = h + self.seg(token_type_ids)
        if attention_mask is not None:
            h = h * attention_mask.unsqueeze(-1).astype(h.dtype)
        logits = self.head(h.mean(axis=1))
        if labels is None:
            return logits
        return {"loss": paddle.nn.functional.cross_entropy(logits, labels.reshape([-1])), "logits": logits}


class SegNet(nn.Layer):
    """A segmentation net returning a list of NCHW logit maps in train mode (main + auxiliary head) and the main
    map alone in eval mode (PaddleSeg's convention)."""

    def __init__(self, classes: int = 4) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2D(3, 8, 3, padding=1), nn.BatchNorm2D(8), nn.ReLU())
        self.main = nn.Conv2D(8, classes, 1)
        self.aux = nn.Conv2D(8, classes, 1)

    def forward(self, x):
        f = self.body(x)
        return [self.main(f), self.aux(f)] if self.training else [self.main(f)]


class DictOut(nn.Layer):
    """Returns a dict of two heads (no logits key)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 3)
        self.b = nn.Linear(6, 2)

    def forward(self, x):
        return {"cls": self.a(x), "box": self.b(x)}


def gpu_only_kernel() -> nn.Layer:
    """A forward that calls a kernel Paddle registers for GPU only (as PaddleFormers' fused_rms_norm_ext)."""

    class Fused(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            from paddle import _C_ops

            h = self.fc(x)
            return _C_ops.fused_rms_norm_ext(h, paddle.ones([8]), 1e-6)

    return Fused()


class EagerAttention(nn.Layer):
    """One post-norm transformer encoder layer (paddle.nn.MultiHeadAttention: matmul -> softmax -> dropout -> matmul)
    over float32[S, 64] and a 5-class head."""

    def __init__(self, heads: int = 4) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(64, heads, 128, dropout=0.1)
        self.head = nn.Linear(64, 5)

    def forward(self, x):
        return self.head(self.layer(x).mean(axis=1))


class FusedAttention(nn.Layer):
    """Self-attention through F.scaled_dot_product_attention ([B, S, H, D]), 4 heads of 16 over float32[S, 64]."""

    def __init__(self, causal: bool = False) -> None:
        super().__init__()
        self.qkv = nn.Linear(64, 192)
        self.head = nn.Linear(64, 5)
        self.causal = causal

    def forward(self, x):
        b, s = x.shape[0], x.shape[1]
        q, k, v = self.qkv(x).reshape([b, s, 3, 4, 16]).unbind(2)
        o = nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.1, is_causal=self.causal)
        return self.head(o.reshape([b, s, 64]).mean(axis=1))


def paddlenlp_bert(fuse: bool = False) -> nn.Layer:
    """A two-layer PaddleNLP BertForSequenceClassification; ``fuse``: its encoder built from Paddle's fused
    transformer layers (``BertConfig(fuse=True)``, as ``run_pretrain.py --fuse_transformer`` does)."""
    from paddlenlp.transformers import BertConfig, BertForSequenceClassification

    return BertForSequenceClassification(
        BertConfig(
            vocab_size=1000,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=256,
            num_labels=2,
            fuse=fuse,
        )
    )


def paddlenlp_fused_bert() -> nn.Layer:
    """:func:`paddlenlp_bert` with ``fuse=True``."""
    return paddlenlp_bert(fuse=True)


def fused_ffn_digits() -> nn.Layer:
    """Digits ([1, 8, 8] images) through ``paddle.incubate.nn.FusedFeedForward`` (a GPU-only fused op: Paddle's
    CPU build has no ``fused_feedforward``), then a 10-way head."""
    from paddle.incubate.nn import FusedFeedForward

    class FusedFFN(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.ff = FusedFeedForward(64, 128, dropout_rate=0.0)
            self.head = nn.Linear(64, 10)

        def forward(self, x):
            return self.head(self.ff(x.reshape([-1, 1, 64])).reshape([-1, 64]))

    return FusedFFN()


def depthwise(kernel: int = 3, channels: int = 64, frozen: bool = False) -> nn.Layer:
    """One depthwise ``kernel`` x ``kernel`` convolution (groups = channels) on the input, then the mean and a
    10-way head. Forward: 2 k^2 FLOPs per output element against 8 bytes moved (FP32), so a 3x3 one is
    memory-bound on any GPU and a 7x7 one (ConvNeXt's) compute-bound on a T4 at the depthwise prior; ``frozen``
    leaves its filter untrained, so it has no backward kernel (its input is the data)."""
    conv = nn.Conv2D(channels, channels, kernel, padding=kernel // 2, groups=channels)
    conv.weight.stop_gradient = conv.bias.stop_gradient = frozen
    return nn.Sequential(conv, nn.AdaptiveAvgPool2D(1), nn.Flatten(), nn.Linear(channels, 10))


def huge_activation() -> nn.Layer:
    """A linear layer whose forward also asks for a 400 GB activation per sample (10^11 float32): the allocation
    fails at once on any machine, as a model whose activations outgrow the host's RAM does."""

    class Huge(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 2)

        def forward(self, x):
            return self.fc(x) + paddle.zeros([x.shape[0], 10**11]).sum()

    return Huge()


class Hungry(nn.Layer):
    """Allocates ``gib`` GiB in its forward: a model whose forward exhausts the memory."""

    def __init__(self, gib: float = 2.0) -> None:
        super().__init__()
        self.gib = gib
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        waste = paddle.zeros([int(self.gib * 2**30) // 4], dtype="float32")
        return self.fc(x) + waste[:1]


class SlowInit(nn.Layer):
    """Waits in its ``__init__`` for what never comes (a lock, a download): built in the probe's child only, so
    `plan` stops it at its time limit."""

    def __init__(self) -> None:
        super().__init__()
        import time

        time.sleep(3600)
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc(x)
