"""The one generator of a transformer's forward ops, written from its shape (no Paddle, no model built).

Every transformer FLOP figure of the package comes from here: the operator trace of models too large to run
(:func:`transformer_trace`), the closed-form forward FLOPs of the training plan
(:func:`~paddlefit.estimate.analytic.analytic_transformer_flops`) and the parallel LLM planner's per-layer and
head FLOPs (:mod:`paddlefit.llm.perf`). The ops are the ones
:func:`~paddlefit.models.transformer.build_transformer` records on the CPU, in the same order (checked in
``tests/estimate/test_gpu_model.py``): per layer the fused QKV linear, Q·Kᵀ, scale, (causal mask), softmax, (dropout),
P·V, the output linear, residual adds, two norms and the MLP (GELU: fc1, gelu, fc2; SwiGLU: gate, up, swiglu,
down); Korthikanti et al. 2022 (arXiv 2205.05198) §4 lists the same ops for one layer.

FLOPs per op (1 multiply-add = 2 FLOPs): a linear layer 2·m·n_in·n_out (+ m·n_out with a bias), a matmul
2·batch·M·N·K, softmax 3 and layer norm 8 per element, GELU 5 and SwiGLU 3 per output element, an add or scale 1,
dropout and embeddings 0 (the FLOP counter's formulas, :mod:`paddlefit.estimate.flop_formulas`).
:func:`matmul_flops` keeps the matrix multiplications only (no bias adds), the convention of the closed forms.

The config is the one transformer type, :class:`~paddlefit.catalog.transformers.TransformerConfig` (the zoo's
and the LLM planner's). Norms are traced as one ``layer_norm`` op (weight and bias) whatever ``norm`` says.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from paddlefit.catalog.transformers import TransformerConfig
from paddlefit.estimate.optrace import OpTrace, TensorRef, TracedOp


@dataclass
class _Writer:
    """Appends ops for ``b`` sequences of ``s`` tokens; tensor ids are numbered in creation order."""

    cfg: TransformerConfig
    s: int
    b: int
    ops: list[TracedOp] = field(default_factory=list)
    tid: Iterator[int] = field(default_factory=lambda: iter(range(10**9)))

    def ids(self, n: int) -> TensorRef:
        return TensorRef(next(self.tid), n, "int64")

    def act(self, n: int) -> TensorRef:
        return TensorRef(next(self.tid), n, "float32", False, True)

    def par(self, n: int) -> TensorRef:
        return TensorRef(next(self.tid), n, "float32", True, True)

    def linear(self, x: TensorRef, n_in: int, n_out: int, bias: bool) -> TensorRef:
        m = x.numel // n_in
        y = self.act(m * n_out)
        ins = (x, self.par(n_in * n_out)) + ((self.par(n_out),) if bias else ())
        self.ops.append(
            TracedOp(
                "linear", "gemm", 2 * m * n_in * n_out + (m * n_out if bias else 0), ins, (y,), (1, m, n_out, n_in)
            )
        )
        return y

    def ew(self, name: str, x: TensorRef, per: int = 1, other: TensorRef | None = None) -> TensorRef:
        y = self.act(x.numel)
        self.ops.append(TracedOp(name, "elementwise", per * x.numel, (x,) + ((other,) if other else ()), (y,)))
        return y

    def norm(self, x: TensorRef) -> TensorRef:
        y = self.act(x.numel)
        h = self.cfg.hidden_size
        self.ops.append(TracedOp("layer_norm", "norm", 8 * x.numel, (x, self.par(h), self.par(h)), (y,)))
        return y

    def residual(self, o: TensorRef, res: TensorRef) -> TensorRef:
        """dropout(o) + res, then the post-norm of an encoder (BERT); pre-norm decoders normalise first."""
        if self.cfg.dropout > 0:
            o = self.ew("dropout", o, 0)
        x = self.ew("add", o, 1, res)
        return x if self.cfg.causal else self.norm(x)

    def embed(self, ids: TensorRef, rows: int, out: TensorRef) -> None:
        self.ops.append(TracedOp("embedding", "embedding", 0, (ids, self.par(rows * self.cfg.hidden_size)), (out,)))


def _embeddings(w: _Writer) -> TensorRef:
    """Token (+ learned position, + segment) embeddings (+ the encoder's LayerNorm); returns the hidden state."""
    cfg, b, s, h = w.cfg, w.b, w.s, w.cfg.hidden_size
    ids = w.ids(b * s)
    x = w.act(b * s * h)
    w.embed(ids, cfg.vocab_size, x)
    if cfg.position == "learned":
        p = w.act(s * h)
        w.embed(w.ids(s), cfg.max_position, p)
        x = w.ew("add", x, 1, p)
    if cfg.type_vocab_size:
        t_ids = w.ids(b * s)
        sg = w.act(b * s * h)
        w.embed(t_ids, cfg.type_vocab_size, sg)
        x = w.ew("add", x, 1, sg)
    return x if cfg.causal else w.norm(x)


def _attention(w: _Writer, x: TensorRef) -> TensorRef:
    """Self-attention block with its residual (pre-norm decoder, post-norm encoder)."""
    cfg, b, s, h, a = w.cfg, w.b, w.s, w.cfg.hidden_size, w.cfg.num_heads
    d = h // a
    res = x
    hin = w.norm(x) if cfg.causal else x
    qkv = w.linear(hin, h, h + 2 * cfg.num_kv_heads * d, cfg.qkv_bias)
    q, k, vv = w.act(b * a * s * d), w.act(b * a * s * d), w.act(b * a * s * d)
    w.ops.append(TracedOp("view", "view", 0, (qkv,), (q, k, vv)))
    sc = w.act(b * a * s * s)
    w.ops.append(TracedOp("matmul", "gemm", 2 * b * a * s * s * d, (q, k), (sc,), (b * a, s, s, d)))
    sc = w.ew("multiply", sc)
    if cfg.causal:
        sc = w.ew("add", sc)
    pr = w.act(sc.numel)
    w.ops.append(TracedOp("softmax", "softmax", 3 * sc.numel, (sc,), (pr,)))
    if cfg.dropout > 0:
        pr = w.ew("dropout", pr, 0)
    ctx = w.act(b * a * s * d)
    w.ops.append(TracedOp("matmul", "gemm", 2 * b * a * s * s * d, (pr, vv), (ctx,), (b * a, s, d, s)))
    ctx2 = w.act(ctx.numel)
    w.ops.append(TracedOp("transpose", "move", 0, (ctx,), (ctx2,)))
    return w.residual(w.linear(ctx2, h, h, cfg.linear_bias), res)


def _mlp(w: _Writer, x: TensorRef) -> TensorRef:
    """MLP block (GELU or SwiGLU) with its residual."""
    cfg, h, f, bias = w.cfg, w.cfg.hidden_size, w.cfg.ffn_size, w.cfg.linear_bias
    res = x
    hin = w.norm(x) if cfg.causal else x
    if cfg.ffn_type == "swiglu":
        g = w.linear(hin, h, f, bias)
        u = w.linear(hin, h, f, bias)
        m = w.ew("swiglu", g, 3, u)
    else:
        m = w.ew("gelu", w.linear(hin, h, f, bias), 5)
    return w.residual(w.linear(m, f, h, bias), res)


def _head(w: _Writer, x: TensorRef) -> TensorRef:
    """Final norm and logits (decoder), or MLM transform (dense + GELU + LayerNorm), logits and bias (encoder)."""
    cfg, b, s, h, v = w.cfg, w.b, w.s, w.cfg.hidden_size, w.cfg.vocab_size
    x = w.norm(x) if cfg.causal else w.norm(w.ew("gelu", w.linear(x, h, h, True), 5))
    logits = w.act(b * s * v)
    w.ops.append(TracedOp("matmul", "gemm", 2 * b * s * h * v, (x, w.par(v * h)), (logits,), (1, b * s, v, h)))
    if not cfg.causal:
        logits = w.ew("add", logits, 1, w.par(v))
    return logits


def transformer_ops(cfg: TransformerConfig, seq_len: int, batch: int) -> list[TracedOp]:
    """Every forward op of the model for ``batch`` sequences of ``seq_len`` tokens, in execution order."""
    w = _Writer(cfg, seq_len, batch)
    x = _embeddings(w)
    for _ in range(cfg.num_layers):
        x = _mlp(w, _attention(w, x))
    _head(w, x)
    return w.ops


def layer_ops(cfg: TransformerConfig, seq_len: int, batch: int) -> list[TracedOp]:
    """The forward ops of one transformer layer (attention and MLP blocks)."""
    w = _Writer(cfg, seq_len, batch)
    _mlp(w, _attention(w, w.act(batch * seq_len * cfg.hidden_size)))
    return w.ops


def head_ops(cfg: TransformerConfig, seq_len: int, batch: int) -> list[TracedOp]:
    """The forward ops after the last layer (final norm and logits; an encoder's MLM transform and bias)."""
    w = _Writer(cfg, seq_len, batch)
    _head(w, w.act(batch * seq_len * cfg.hidden_size))
    return w.ops


def matmul_flops(ops: list[TracedOp]) -> int:
    """FLOPs of the matrix multiplications of ``ops``: 2·batch·M·N·K per GEMM (no bias adds)."""
    total = 0
    for o in ops:
        if o.cls == "gemm" and o.gemm:
            g, m, n, k = o.gemm
            total += 2 * g * m * n * k
    return total


def transformer_trace(cfg: TransformerConfig, seq_len: int, batch: int = 1) -> OpTrace:
    """The operator trace of a transformer (:func:`transformer_ops` at ``batch`` and ``2 x batch`` sequences of
    ``seq_len`` tokens; ``source="analytic"``), written from its shape for models too large to run here. The
    returned trace scales linearly with the batch (:meth:`~paddlefit.estimate.optrace.OpTrace.at`)."""
    return OpTrace(
        transformer_ops(cfg, seq_len, batch),
        transformer_ops(cfg, seq_len, 2 * batch),
        batch,
        2 * batch,
        source="analytic",
    )
