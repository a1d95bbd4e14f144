"""Transformer encoders (BERT/ERNIE) and decoders (GPT-2, Llama/Qwen-style) built with ``paddle.nn`` from a
:class:`~paddlefit.catalog.transformers.TransformerConfig`.

Attention is written with functional ops (``paddle.matmul``, ``F.softmax``) as in most user code, so the
FLOPs counter must see functional calls, not just layers. The zoo's configs (:data:`TRANSFORMER_CONFIGS`) are the
published ones of :mod:`paddlefit.catalog.transformers`, each with its source there.

The same builder makes Llama/Qwen-style decoders (grouped-query attention, SwiGLU MLP, RMSNorm, no biases,
untied output head, no learned positions), so the analytic LLM estimates can be checked against real training
steps on small configs. RoPE is not applied: it has no parameters, its FLOPs are elementwise (not in the matmul
closed forms) and PaddleNLP runs it as one fused kernel (``use_fused_rope``), so the model without it has the
same parameters, matmul FLOPs and saved activations.

Paddle is imported lazily: :func:`build_transformer` imports it.
"""

from __future__ import annotations

from paddlefit.catalog.transformers import TransformerConfig, published_transformers, zoo_transformer_names

#: The zoo's transformers (``plan NAME -b``), in listing order.
TRANSFORMER_CONFIGS: dict[str, TransformerConfig] = {n: published_transformers()[n] for n in zoo_transformer_names()}


def build_transformer(cfg: TransformerConfig):  # -> paddle.nn.Layer
    """Build the model for ``cfg``.

    Input: int64 token ids of shape (batch, seq_len), seq_len <= max_position.
    Output: logits of shape (batch, seq_len, vocab_size) (MLM logits for encoders, next-token for decoders).
    Parts: :func:`_attention_class`, :func:`_block_class`, :func:`_transformer_class`.
    """
    block = _block_class(cfg, _attention_class(cfg))
    return _transformer_class(cfg, block)()


def _dropout(cfg: TransformerConfig):  # -> paddle.nn.Layer
    """Dropout of ``cfg.dropout``, or an identity layer when it is 0 (no dropout layers at all)."""
    from paddle import nn

    return nn.Dropout(cfg.dropout) if cfg.dropout > 0 else nn.Identity()


def _norm(cfg: TransformerConfig):  # -> paddle.nn.Layer
    """LayerNorm, or RMSNorm (weight only, eps 1e-6, from elementwise ops: no CPU ``rms_norm`` kernel)."""
    import paddle
    from paddle import nn

    h = cfg.hidden_size

    class RMSNorm(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.weight = self.create_parameter([h], default_initializer=nn.initializer.Constant(1.0))

        def forward(self, x):
            return x * paddle.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * self.weight

    return RMSNorm() if cfg.norm == "rmsnorm" else nn.LayerNorm(h)


def _attention_class(cfg: TransformerConfig) -> type:
    """Self-attention with functional ops: fused QKV linear, Q·Kᵀ scaled by d^-0.5, causal mask (decoders),
    softmax, dropout, P·V, output linear. Grouped-query K/V heads are repeated (as without flash attention)."""
    import paddle
    import paddle.nn.functional as F
    from paddle import nn

    h, a = cfg.hidden_size, cfg.num_heads
    d = h // a
    kv = cfg.num_kv_heads

    class Attention(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(h, h + 2 * kv * d, bias_attr=None if cfg.qkv_bias else False)
            self.out = nn.Linear(h, h, bias_attr=None if cfg.linear_bias else False)
            self.drop = _dropout(cfg)

        def forward(self, x):
            b, s = x.shape[0], x.shape[1]
            qkv = self.qkv(x)
            if kv == a:
                qkv = qkv.reshape([b, s, 3, a, d]).transpose([2, 0, 3, 1, 4])  # (3, b, a, s, d)
                q, k, v = qkv[0], qkv[1], qkv[2]
            else:  # grouped-query: each K/V head serves a/kv query heads (eager repeat, as without flash attention)
                q, k, v = paddle.split(qkv, [h, kv * d, kv * d], axis=-1)
                q = q.reshape([b, s, a, d]).transpose([0, 2, 1, 3])
                k = k.reshape([b, s, kv, d]).transpose([0, 2, 1, 3]).repeat_interleave(a // kv, axis=1)
                v = v.reshape([b, s, kv, d]).transpose([0, 2, 1, 3]).repeat_interleave(a // kv, axis=1)
            scores = paddle.matmul(q, k, transpose_y=True) * (d**-0.5)  # (b, a, s, s)
            if cfg.causal:
                mask = paddle.triu(paddle.full([s, s], -1e4, dtype=scores.dtype), diagonal=1)
                scores = scores + mask
            probs = self.drop(F.softmax(scores, axis=-1))
            ctx = paddle.matmul(probs, v).transpose([0, 2, 1, 3]).reshape([b, s, h])
            return self.out(ctx)

    return Attention


def _block_class(cfg: TransformerConfig, attention: type) -> type:
    """One layer: attention and MLP (GELU or fused SwiGLU), pre-norm (decoders) or post-LayerNorm (BERT)."""
    import paddle.nn.functional as F
    from paddle import nn

    h = cfg.hidden_size
    bias = None if cfg.linear_bias else False

    class Block(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.attn = attention()
            self.ln1 = _norm(cfg)
            if cfg.ffn_type == "swiglu":
                self.gate = nn.Linear(h, cfg.ffn_size, bias_attr=bias)
                self.up = nn.Linear(h, cfg.ffn_size, bias_attr=bias)
            else:
                self.fc1 = nn.Linear(h, cfg.ffn_size, bias_attr=bias)
                self.act = nn.GELU()
            self.fc2 = nn.Linear(cfg.ffn_size, h, bias_attr=bias)
            self.ln2 = _norm(cfg)
            self.drop1 = _dropout(cfg)
            self.drop2 = _dropout(cfg)

        def mlp(self, x):
            if cfg.ffn_type == "swiglu":
                return self.fc2(F.swiglu(self.gate(x), self.up(x)))
            return self.fc2(self.act(self.fc1(x)))

        def forward(self, x):
            if cfg.causal:  # GPT-2 / Llama: pre-norm
                x = x + self.drop1(self.attn(self.ln1(x)))
                return x + self.drop2(self.mlp(self.ln2(x)))
            x = self.ln1(x + self.drop1(self.attn(x)))  # BERT: post-LayerNorm
            return self.ln2(x + self.drop2(self.mlp(x)))

    return Block


def _transformer_class(cfg: TransformerConfig, block: type) -> type:
    """The model: embeddings, ``num_layers`` blocks, then the final norm and tied (or untied) logits (decoders)
    or the MLM head (dense, GELU, LayerNorm, tied decoder + bias; encoders)."""
    import paddle
    from paddle import nn

    h = cfg.hidden_size

    class Transformer(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.word = nn.Embedding(cfg.vocab_size, h)
            self.pos = nn.Embedding(cfg.max_position, h) if cfg.position == "learned" else None
            self.seg = nn.Embedding(cfg.type_vocab_size, h) if cfg.type_vocab_size else None
            self.emb_ln = None if cfg.causal else nn.LayerNorm(h)
            self.drop = _dropout(cfg)
            self.blocks = nn.LayerList([block() for _ in range(cfg.num_layers)])
            self.head = None if cfg.tie_embeddings else nn.Linear(h, cfg.vocab_size, bias_attr=False)
            if cfg.causal:
                self.final_ln = _norm(cfg)
            else:
                self.transform = nn.Linear(h, h)
                self.transform_act = nn.GELU()
                self.transform_ln = nn.LayerNorm(h)
                self.decoder_bias = self.create_parameter([cfg.vocab_size], is_bias=True)

        def forward(self, ids):
            s = ids.shape[1]
            x = self.word(ids)
            if self.pos is not None:
                if s > cfg.max_position:
                    raise ValueError(f"sequence length {s} exceeds max_position {cfg.max_position}")
                x = x + self.pos(paddle.arange(s, dtype="int64").unsqueeze(0))
            if self.seg is not None:
                x = x + self.seg(paddle.zeros_like(ids))
            if self.emb_ln is not None:
                x = self.emb_ln(x)
            x = self.drop(x)
            for blk in self.blocks:
                x = blk(x)
            if cfg.causal:
                x = self.final_ln(x)
                return self.head(x) if self.head is not None else paddle.matmul(x, self.word.weight, transpose_y=True)
            x = self.transform_ln(self.transform_act(self.transform(x)))
            logits = self.head(x) if self.head is not None else paddle.matmul(x, self.word.weight, transpose_y=True)
            return logits + self.decoder_bias

    return Transformer
