"""Transformer encoders (BERT/ERNIE) and decoders (GPT-2) built from a config with ``paddle.nn``.

Attention is written with functional ops (``paddle.matmul``, ``F.softmax``) as in most user code, so the
FLOPs counter must see functional calls, not just layers. The configs are the published ones:

- bert-base / bert-large: Devlin et al. 2019 (arXiv 1810.04805) §3, vocab 30522.
- ernie-3.0-base-zh / ernie-3.0-medium-zh: PaddleNLP ``ernie-3.0-*-zh`` model cards
  (vocab 40000, max position 2048, type vocab 4; base 12 layers, medium 6 layers, hidden 768, 12 heads).
- gpt2-small/medium/large/xl: Radford et al. 2019 table 2 (vocab 50257, context 1024).

The same builder also makes Llama/Qwen-style decoders from the fields of :mod:`paddlefit.llm.configs`
(grouped-query attention, SwiGLU MLP, RMSNorm, no biases, untied output head, no learned positions), so the
analytic LLM estimates can be checked against real training steps on small configs. RoPE is not applied:
it has no parameters, its FLOPs are elementwise (not in the matmul closed forms) and PaddleNLP runs it as one
fused kernel (``use_fused_rope``), so the model without it has the same parameters, matmul FLOPs and saved
activations.

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
        dropout: dropout probability on embeddings, attention probabilities and residual branches (0 = no
            dropout layers at all, as in Llama/Qwen).
        num_kv_heads: key/value heads (grouped-query attention, Ainslie et al. 2023, arXiv 2305.13245);
            0 = ``num_heads`` (multi-head attention). ``num_heads % num_kv_heads == 0``.
        ffn_type: ``gelu`` (fc1 -> GELU -> fc2) or ``swiglu`` (down(silu(gate(x)) * up(x)), Shazeer 2020,
            arXiv 2002.05202; run with Paddle's fused ``F.swiglu`` as PaddleNLP's Llama does).
        norm: ``layernorm`` or ``rmsnorm`` (Zhang & Sennrich 2019; weight only, built from elementwise ops
            because Paddle 3.3.1 has no CPU ``rms_norm`` kernel).
        tie_embeddings: output projection shares the token embedding (False: its own V x h weight).
        bias: linear layers in attention and MLP have biases.
        position: ``learned`` (embedding of ``max_position`` rows) or ``none`` (RoPE models; see module doc).
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
    num_kv_heads: int = 0
    ffn_type: str = "gelu"
    norm: str = "layernorm"
    tie_embeddings: bool = True
    bias: bool = True
    position: str = "learned"

    @property
    def kv_heads(self) -> int:
        """Key/value heads (``num_kv_heads``, or ``num_heads`` when 0)."""
        return self.num_kv_heads or self.num_heads

    @property
    def qkv_bias(self) -> bool:
        """Biases on the fused q/k/v projection (``bias``; the name :class:`paddlefit.llm.configs.LLMConfig` uses)."""
        return self.bias

    @property
    def linear_bias(self) -> bool:
        """Biases on every other linear layer (``bias``)."""
        return self.bias

    @property
    def params(self) -> int:
        """Exact trainable parameter count of :func:`build_transformer` for this config."""
        h, f, v = self.hidden_size, self.ffn_size, self.vocab_size
        hkv = h // self.num_heads * self.kv_heads
        norm = 2 * h if self.norm == "layernorm" else h
        pos = self.max_position * h if self.position == "learned" else 0
        emb = v * h + pos + self.type_vocab_size * h
        mats = 3 if self.ffn_type == "swiglu" else 2
        layer = 2 * h * h + 2 * h * hkv + mats * h * f + 2 * norm  # q, out, k, v, mlp, 2 norms
        if self.bias:
            layer += 2 * h + 2 * hkv + (mats - 1) * f + h
        untied = 0 if self.tie_embeddings else v * h
        if self.causal:
            head = norm + untied  # final norm; output projection tied to the embedding unless untied
            emb_ln = 0
        else:
            head = h * h + h + 2 * h + v + untied  # transform dense + LayerNorm + decoder bias
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
    kv = cfg.kv_heads
    bias = None if cfg.bias else False

    class Attention(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(h, h + 2 * kv * d, bias_attr=bias)
            self.out = nn.Linear(h, h, bias_attr=bias)
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
    bias = None if cfg.bias else False

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
