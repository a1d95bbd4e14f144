"""BERT variants of the published runs, built from paddlefit's zoo transformer (no new layers).

- ``bert_pretrain(size, predictions, fused)``: BERT pre-training with the masked-LM head applied to ``predictions``
  positions per sequence, as both published pre-training setups gather the masked positions before the head
  (PaddleNLP ``run_pretrain.py`` with ``max_predictions_per_seq`` 80 in the Paddle Perf rows; NVIDIA
  DeepLearningExamples phase 1 with ``max_predictions_per_seq`` 20 at seq 128). The next-sentence head (2 classes)
  is included. Input int64[seq]. ``fused="fused"``: the encoder layers are ``paddle.incubate.nn.
  FusedTransformerEncoderLayer``, as PaddleNLP builds them with ``fuse_transformer=True`` (the Paddle Perf BERT
  runs), attention-probability dropout and no activation dropout as PaddleNLP's fused ERNIE sets them.
- ``bert_squad(size)``: BERT fine-tuning on SQuAD: the encoder and a 2-output span head (start/end logits),
  Devlin et al. 2019 §4.2. Input int64[seq].
"""

from __future__ import annotations

from typing import Any


def _encoder(size: str) -> Any:
    from paddlefit.models.transformer import TRANSFORMER_CONFIGS, build_transformer

    return build_transformer(TRANSFORMER_CONFIGS[f"bert-{size}"]), TRANSFORMER_CONFIGS[f"bert-{size}"]


def _encode(m: Any, ids: Any) -> Any:
    import paddle

    s = ids.shape[1]
    x = m.word(ids) + m.pos(paddle.arange(s, dtype="int64").unsqueeze(0)) + m.seg(paddle.zeros_like(ids))
    x = m.drop(m.emb_ln(x))
    for blk in m.blocks:
        x = blk(x)
    return x


def _fuse(enc: Any, cfg: Any) -> None:
    """Replace ``enc``'s blocks by Paddle's fused encoder layers of the same shape (module docstring)."""
    from paddle import nn
    from paddle.incubate.nn import FusedTransformerEncoderLayer

    enc.blocks = nn.LayerList(
        [
            FusedTransformerEncoderLayer(
                cfg.hidden_size,
                cfg.num_heads,
                cfg.ffn_size,
                dropout_rate=cfg.dropout,
                activation="gelu",
                attn_dropout_rate=cfg.dropout,
                act_dropout_rate=0,
            )
            for _ in range(cfg.num_layers)
        ]
    )


def bert_pretrain(size: str = "base", predictions: str | int = 80, fused: str = "") -> Any:
    """BERT-``size`` pre-training model: MLM head on the first ``predictions`` positions + NSP head; ``fused``
    (``"fused"``): Paddle's fused encoder layers (module docstring)."""
    import paddle
    from paddle import nn

    enc, cfg = _encoder(size)
    if fused == "fused":
        _fuse(enc, cfg)
    p = int(predictions)

    class Pretrain(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.m = enc
            self.pooler = nn.Linear(cfg.hidden_size, cfg.hidden_size)
            self.nsp = nn.Linear(cfg.hidden_size, 2)

        def forward(self, ids: Any) -> Any:
            x = _encode(self.m, ids)
            masked = x[:, :p]  # the gathered masked positions (their count, not their place, sets the cost)
            h = self.m.transform_ln(self.m.transform_act(self.m.transform(masked)))
            mlm = paddle.matmul(h, self.m.word.weight, transpose_y=True) + self.m.decoder_bias
            nsp = self.nsp(paddle.tanh(self.pooler(x[:, 0])))
            return mlm, nsp

    return Pretrain()


def bert_squad(size: str = "large") -> Any:
    """BERT-``size`` with a SQuAD span head (start/end logits per token)."""
    from paddle import nn

    enc, cfg = _encoder(size)

    class Squad(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.m = enc
            self.qa = nn.Linear(cfg.hidden_size, 2)

        def forward(self, ids: Any) -> Any:
            return self.qa(_encode(self.m, ids))

    model = Squad()
    # the MLM head's transform and decoder bias exist in the zoo model but are unused here: freeze them
    for prm in (*enc.transform.parameters(), *enc.transform_ln.parameters(), enc.decoder_bias):
        prm.stop_gradient = True
    return model
