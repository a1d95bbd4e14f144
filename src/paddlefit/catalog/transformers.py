"""Published transformer configs shipped as data (``catalog/data/transformers.json``), each row with its source,
and the one type that describes a transformer's shape (:class:`TransformerConfig`).

The same configs serve the model zoo (``plan bert-base -b 8``: built with
:func:`paddlefit.models.transformer.build_transformer` and probed, or written as ops by
:mod:`paddlefit.estimate.transformer_ops` when too large), and the parallel LLM planner
(:mod:`paddlefit.catalog.transformer_configs`, which also reads user ``config.json`` files into this type).

Sources (each row's ``source`` repeats its own):

- bert-base / bert-large: Devlin et al. 2019 (arXiv 1810.04805) §3, vocab 30522, max position 512.
- ernie-3.0-base-zh / ernie-3.0-medium-zh: PaddleNLP ``ernie-3.0-*-zh`` model cards (vocab 40000, max position
  2048, type vocab 4; base 12 layers, medium 6 layers, hidden 768, 12 heads). ernie-3.0-xbase-zh: PaddleNLP
  ``model_zoo/ernie-3.0`` README CLUE table "20L1024H"; 16 heads, FFN 4096 and vocab 40000 follow the family's
  head size 64, FFN 4h and shared tokenizer (verify).
- gpt2-small/medium/large/xl: Radford et al. 2019 table 2 (vocab 50257, context 1024).
- llama-2-7b / 13b / 70b: Hugging Face ``meta-llama/Llama-2-{7b,13b,70b}-hf`` ``config.json`` (hidden
  4096/5120/8192, layers 32/40/80, heads 32/40/64, KV heads 32/40/8, intermediate 11008/13824/28672, vocab 32000,
  untied); Touvron et al. 2023 (arXiv 2307.09288) table 1 for GQA on 70B only. Checked against copies of these
  config files and module printouts found with the project's code search.
- llama-3-8b / 70b: ``meta-llama/Meta-Llama-3-{8B,70B}`` ``config.json`` (vocab 128256, KV heads 8, intermediate
  14336 / 28672, max position 8192, untied).
- qwen2-7b: ``Qwen/Qwen2-7B-Instruct`` ``config.json`` (hidden 3584, 28 layers, 28 heads, 4 KV heads,
  intermediate 18944, vocab 152064, untied, biases on q/k/v only, max position 32768).
- gpt3-175b: Brown et al. 2020 (arXiv 2005.14165) table 2.1 (96 layers, d_model 12288, 96 heads, context 2048),
  GPT-2 vocabulary 50257, FFN 4h (Radford et al. 2019).
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class TransformerConfig(BaseModel):
    """Shape of a transformer: what the Paddle builder, the op generator and the parallel planner read. Counts,
    not bytes.

    Attributes:
        name: label.
        hidden_size: h.  num_layers: l.  num_heads: a (query heads).
        num_kv_heads: key/value heads (grouped-query attention; = a for multi-head attention).
        ffn_size: f, inner size of the MLP.
        ffn_type: ``gelu`` (2 matrices h x f) or ``swiglu`` (3 matrices: gate, up, down).
        vocab_size: V.  tie_embeddings: the output projection shares the token embedding.
        causal: decoder (next-token logits) vs encoder (MLM head: dense + LayerNorm + tied decoder + bias).
        norm: ``layernorm`` (weight + bias) or ``rmsnorm`` (weight only).
        qkv_bias / linear_bias: biases on the q/k/v projections / on every other linear layer.
        position: ``learned`` (max_position x h embedding) or ``rope`` (no parameters).
        max_position: longest sequence the model takes.  type_vocab_size: segment embedding rows (0 = none).
        dropout: dropout probability (0 for Llama/Qwen; masks cost 1 byte/element when > 0).
        source: where the numbers come from.
    """

    # strict: a JSON "false" is not False and `true` is not 1. Upper bounds are sanity limits (policy), far above
    # published models (GPT-3: h 12288, 96 layers; Llama 3 405B: 126 layers; vocabularies up to 256k).
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    name: str = Field(min_length=1)
    hidden_size: int = Field(ge=1, le=2**20)
    num_layers: int = Field(ge=1, le=1024)
    num_heads: int = Field(ge=1, le=2**16)
    num_kv_heads: int = Field(ge=1, le=2**16)
    ffn_size: int = Field(ge=1, le=2**22)
    ffn_type: Literal["gelu", "swiglu"] = "gelu"
    vocab_size: int = Field(ge=1, le=2**24)
    tie_embeddings: bool = True
    causal: bool = True
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    qkv_bias: bool = True
    linear_bias: bool = True
    position: Literal["learned", "rope"] = "learned"
    max_position: int = Field(default=4096, ge=1, le=2**24)
    type_vocab_size: int = Field(default=0, ge=0, le=2**16)
    dropout: float = Field(default=0.0, ge=0, lt=1, allow_inf_nan=False)
    source: str = ""

    @model_validator(mode="after")
    def _shapes(self) -> TransformerConfig:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not divisible by num_kv_heads {self.num_kv_heads}")
        return self

    @property
    def head_dim(self) -> int:
        """d = h / a."""
        return self.hidden_size // self.num_heads

    @property
    def kv_size(self) -> int:
        """Width of K (and of V): num_kv_heads x head_dim (= h without GQA)."""
        return self.num_kv_heads * self.head_dim

    @property
    def ffn_matrices(self) -> int:
        """Weight matrices of size h x f in the MLP: 2 for GELU, 3 for SwiGLU."""
        return 3 if self.ffn_type == "swiglu" else 2

    @property
    def norm_params(self) -> int:
        """Parameters of one norm layer: 2h (LayerNorm weight + bias) or h (RMSNorm weight)."""
        return 2 * self.hidden_size if self.norm == "layernorm" else self.hidden_size

    @property
    def layer_matrix_params(self) -> int:
        """Weights of one layer's linear layers (split by tensor parallelism): q, o (h x h), k, v (h x kv_size),
        MLP (ffn_matrices x h x f), plus their biases."""
        h, hk, f = self.hidden_size, self.kv_size, self.ffn_size
        n = 2 * h * h + 2 * h * hk + self.ffn_matrices * h * f
        if self.qkv_bias:
            n += h + 2 * hk
        if self.linear_bias:
            n += h + (self.ffn_matrices - 1) * f + h
        return n

    @property
    def layer_params(self) -> int:
        """All parameters of one layer: :attr:`layer_matrix_params` + two norms."""
        return self.layer_matrix_params + 2 * self.norm_params

    @property
    def embedding_params(self) -> int:
        """Input side: token (V x h) + learned position + segment embeddings (+ LayerNorm for encoders)."""
        h = self.hidden_size
        n = self.vocab_size * h + self.type_vocab_size * h
        if self.position == "learned":
            n += self.max_position * h
        return n + (0 if self.causal else 2 * h)

    @property
    def head_params(self) -> int:
        """Output side: final norm (decoder) or MLM transform + LayerNorm + decoder bias (encoder), plus an
        untied V x h output projection."""
        h, v = self.hidden_size, self.vocab_size
        n = self.norm_params if self.causal else h * h + h + 2 * h + v
        return n + (0 if self.tie_embeddings else v * h)

    @property
    def params(self) -> int:
        """Total parameters (equals those of :func:`paddlefit.models.transformer.build_transformer`, tested in
        ``tests/llm/test_llm.py``)."""
        return self.embedding_params + self.num_layers * self.layer_params + self.head_params


@lru_cache(maxsize=1)
def _table() -> tuple[dict[str, TransformerConfig], tuple[str, ...], tuple[str, ...]]:
    raw = json.loads(resources.files("paddlefit.catalog").joinpath("data/transformers.json").read_text("utf-8"))
    configs = {c["name"]: TransformerConfig(**c) for c in raw["configs"]}
    return configs, tuple(raw["zoo"]), tuple(raw["llm"])


def published_transformers() -> dict[str, TransformerConfig]:
    """Every published config of ``catalog/data/transformers.json`` by name (a new dict; the configs are frozen).

    Raises:
        pydantic.ValidationError: a row is invalid (a packaging error; ``tests/llm/test_llm.py`` loads them all).
    """
    return dict(_table()[0])


def zoo_transformer_names() -> tuple[str, ...]:
    """Names of the configs the model zoo builds and probes (``plan NAME -b``), in listing order."""
    return _table()[1]


def llm_transformer_names() -> tuple[str, ...]:
    """Names of the parallel LLM planner's built-in configs, in listing order."""
    return _table()[2]
