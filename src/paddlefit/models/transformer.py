"""Transformer encoders (BERT/ERNIE) and decoders (GPT-2) built from a config with ``paddle.nn``.

Attention is written with functional ops (``paddle.matmul``, ``F.softmax``) as in most user code, so the
FLOPs counter must see functional calls, not just layers. The configs are the published ones:

- bert-base / bert-large: Devlin et al. 2019 (arXiv 1810.04805) §3, vocab 30522.
- ernie-3.0-base-zh / ernie-3.0-medium-zh: PaddleNLP ``ernie-3.0-*-zh`` model cards
  (vocab 40000, max position 2048, type vocab 4; base 12 layers, medium 6 layers, hidden 768, 12 heads).
- gpt2-small/medium/large/xl: Radford et al. 2019 table 2 (vocab 50257, context 1024).

Paddle is imported lazily: :func:`build_transformer` imports it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TransformerConfig:
    """Shape of a transformer. Sizes are counts (not bytes).

    Attributes:
        vocab_size: V, rows of the token embedding (tied with the output projection).
        hidden_size: h.
        num_layers: l.
        num_heads: a; ``hidden_size % num_heads == 0``.
        ffn_size: inner size of the GELU MLP (4h in all built-in configs).
        max_position: rows of the learned position embedding.
        type_vocab_size: rows of the segment embedding (0 = none, as in GPT-2).
        causal: decoder (causal mask, pre-LayerNorm, final LayerNorm) vs encoder (post-LayerNorm, MLM head).
        default_seq_len: sequence length used when no ``--input`` is given.
        dropout: dropout probability on embeddings, attention probabilities and residual branches.
    """

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    ffn_size: int
    max_position: int
    type_vocab_size: int
    causal: bool
    default_seq_len: int = 128
    dropout: float = 0.1

    @property
    def params(self) -> int:
        """Exact trainable parameter count of :func:`build_transformer` for this config."""
        h, f, v = self.hidden_size, self.ffn_size, self.vocab_size
        emb = v * h + self.max_position * h + self.type_vocab_size * h
        layer = 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h  # qkv+out, biases, mlp, 2 LayerNorms
        if self.causal:
            head = 2 * h  # final LayerNorm; output projection tied to the embedding
            emb_ln = 0
        else:
            head = h * h + h + 2 * h + v  # transform dense + LayerNorm + decoder bias (weight tied)
            emb_ln = 2 * h
        return emb + emb_ln + self.num_layers * layer + head


TRANSFORMER_CONFIGS: dict[str, TransformerConfig] = {
    "bert-base": TransformerConfig(30522, 768, 12, 12, 3072, 512, 2, causal=False),
    "bert-large": TransformerConfig(30522, 1024, 24, 16, 4096, 512, 2, causal=False),
    "ernie-3.0-base-zh": TransformerConfig(40000, 768, 12, 12, 3072, 2048, 4, causal=False),
    "ernie-3.0-medium-zh": TransformerConfig(40000, 768, 6, 12, 3072, 2048, 4, causal=False),
    "gpt2-small": TransformerConfig(50257, 768, 12, 12, 3072, 1024, 0, causal=True),
    "gpt2-medium": TransformerConfig(50257, 1024, 24, 16, 4096, 1024, 0, causal=True),
    "gpt2-large": TransformerConfig(50257, 1280, 36, 20, 5120, 1024, 0, causal=True),
    "gpt2-xl": TransformerConfig(50257, 1600, 48, 25, 6400, 1024, 0, causal=True),
}


def build_transformer(cfg: TransformerConfig):  # -> paddle.nn.Layer
    """Build the model for ``cfg``.

    Input: int64 token ids of shape (batch, seq_len), seq_len <= max_position.
    Output: logits of shape (batch, seq_len, vocab_size) (MLM logits for encoders, next-token for decoders).
    """
    import paddle
    import paddle.nn.functional as F
    from paddle import nn

    h, a = cfg.hidden_size, cfg.num_heads
    d = h // a

    class Attention(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(h, 3 * h)
            self.out = nn.Linear(h, h)
            self.drop = nn.Dropout(cfg.dropout)

        def forward(self, x):
            b, s = x.shape[0], x.shape[1]
            qkv = self.qkv(x).reshape([b, s, 3, a, d]).transpose([2, 0, 3, 1, 4])  # (3, b, a, s, d)
            q, k, v = qkv[0], qkv[1], qkv[2]
            scores = paddle.matmul(q, k, transpose_y=True) * (d**-0.5)  # (b, a, s, s)
            if cfg.causal:
                mask = paddle.triu(paddle.full([s, s], -1e4, dtype=scores.dtype), diagonal=1)
                scores = scores + mask
            probs = self.drop(F.softmax(scores, axis=-1))
            ctx = paddle.matmul(probs, v).transpose([0, 2, 1, 3]).reshape([b, s, h])
            return self.out(ctx)

    class Block(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.attn = Attention()
            self.ln1 = nn.LayerNorm(h)
            self.fc1 = nn.Linear(h, cfg.ffn_size)
            self.act = nn.GELU()
            self.fc2 = nn.Linear(cfg.ffn_size, h)
            self.ln2 = nn.LayerNorm(h)
            self.drop1 = nn.Dropout(cfg.dropout)
            self.drop2 = nn.Dropout(cfg.dropout)

        def forward(self, x):
            if cfg.causal:  # GPT-2: pre-LayerNorm
                x = x + self.drop1(self.attn(self.ln1(x)))
                return x + self.drop2(self.fc2(self.act(self.fc1(self.ln2(x)))))
            x = self.ln1(x + self.drop1(self.attn(x)))  # BERT: post-LayerNorm
            return self.ln2(x + self.drop2(self.fc2(self.act(self.fc1(x)))))

    class Transformer(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.word = nn.Embedding(cfg.vocab_size, h)
            self.pos = nn.Embedding(cfg.max_position, h)
            self.seg = nn.Embedding(cfg.type_vocab_size, h) if cfg.type_vocab_size else None
            self.emb_ln = None if cfg.causal else nn.LayerNorm(h)
            self.drop = nn.Dropout(cfg.dropout)
            self.blocks = nn.LayerList([Block() for _ in range(cfg.num_layers)])
            if cfg.causal:
                self.final_ln = nn.LayerNorm(h)
            else:
                self.transform = nn.Linear(h, h)
                self.transform_act = nn.GELU()
                self.transform_ln = nn.LayerNorm(h)
                self.decoder_bias = self.create_parameter([cfg.vocab_size], is_bias=True)

        def forward(self, ids):
            s = ids.shape[1]
            if s > cfg.max_position:
                raise ValueError(f"sequence length {s} exceeds max_position {cfg.max_position}")
            pos = paddle.arange(s, dtype="int64").unsqueeze(0)
            x = self.word(ids) + self.pos(pos)
            if self.seg is not None:
                x = x + self.seg(paddle.zeros_like(ids))
            if self.emb_ln is not None:
                x = self.emb_ln(x)
            x = self.drop(x)
            for blk in self.blocks:
                x = blk(x)
            if cfg.causal:
                return paddle.matmul(self.final_ln(x), self.word.weight, transpose_y=True)
            x = self.transform_ln(self.transform_act(self.transform(x)))
            return paddle.matmul(x, self.word.weight, transpose_y=True) + self.decoder_bias

    return Transformer()
