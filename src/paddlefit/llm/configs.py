"""Transformer configs for the analytic LLM planner: built-in models and user files (Hugging Face / PaddleNLP
``config.json``, or YAML/JSON with the same field names as :class:`LLMConfig`).

Sources of the built-in configs (each row below repeats its own):

- llama-2-7b / 13b / 70b: Hugging Face ``meta-llama/Llama-2-{7b,13b,70b}-hf`` ``config.json`` (hidden 4096/5120/8192,
  layers 32/40/80, heads 32/40/64, KV heads 32/40/8, intermediate 11008/13824/28672, vocab 32000, untied);
  Touvron et al. 2023 (arXiv 2307.09288) table 1 for GQA on 70B only. Checked against copies of these config
  files and module printouts found with the project's code search.
- llama-3-8b / 70b: ``meta-llama/Meta-Llama-3-{8B,70B}`` ``config.json`` (vocab 128256, KV heads 8, intermediate
  14336 / 28672, max position 8192, untied).
- qwen2-7b: ``Qwen/Qwen2-7B-Instruct`` ``config.json`` (hidden 3584, 28 layers, 28 heads, 4 KV heads,
  intermediate 18944, vocab 152064, untied, biases on q/k/v only, max position 32768).
- ernie-3.0-base-zh: PaddleNLP ERNIE 3.0 model card (12 layers, hidden 768, 12 heads, vocab 40000, max position
  2048, type vocab 4). ernie-3.0-xbase-zh: PaddleNLP ``model_zoo/ernie-3.0`` README CLUE table "20L1024H";
  16 heads, FFN 4096 and vocab 40000 follow the family's head size 64, FFN 4h and shared tokenizer (verify).
- gpt3-175b: Brown et al. 2020 (arXiv 2005.14165) table 2.1 (96 layers, d_model 12288, 96 heads, context 2048),
  GPT-2 vocabulary 50257, FFN 4h (Radford et al. 2019).
- bert-base / bert-large: Devlin et al. 2019 (arXiv 1810.04805) §3, vocab 30522, max position 512.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from paddlefit.errors import ModelError, UnknownNameError


class LLMConfig(BaseModel):
    """Shape of a transformer for the analytic planner. Counts, not bytes.

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
    def _shapes(self) -> LLMConfig:
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
    def kv_heads(self) -> int:
        """Key/value heads (``num_kv_heads``; the name :class:`paddlefit.models.transformer.TransformerConfig`
        uses)."""
        return self.num_kv_heads

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
        """Total parameters (equals :func:`paddlefit.models.transformer.build_transformer` of
        :func:`to_transformer_config`, tested in ``tests/test_llm.py``)."""
        return self.embedding_params + self.num_layers * self.layer_params + self.head_params


def _llama(name: str, h: int, layers: int, heads: int, kv: int, f: int, vocab: int, max_pos: int,
           source: str) -> LLMConfig:  # fmt: skip
    return LLMConfig(name=name, hidden_size=h, num_layers=layers, num_heads=heads, num_kv_heads=kv, ffn_size=f,
                     ffn_type="swiglu", vocab_size=vocab, tie_embeddings=False, norm="rmsnorm", qkv_bias=False,
                     linear_bias=False, position="rope", max_position=max_pos, source=source)  # fmt: skip


def _encoder(name: str, h: int, layers: int, heads: int, vocab: int, max_pos: int, types: int,
             source: str) -> LLMConfig:  # fmt: skip
    return LLMConfig(name=name, hidden_size=h, num_layers=layers, num_heads=heads, num_kv_heads=heads,
                     ffn_size=4 * h, vocab_size=vocab, causal=False, max_position=max_pos, type_vocab_size=types,
                     dropout=0.1, source=source)  # fmt: skip


_HF = "Hugging Face {} config.json"
#: The built-in configs; sources in the module docstring and in each ``source``.
LLM_CONFIGS: dict[str, LLMConfig] = {
    c.name: c
    for c in (
        _llama("llama-2-7b", 4096, 32, 32, 32, 11008, 32000, 4096, _HF.format("meta-llama/Llama-2-7b-hf")),
        _llama("llama-2-13b", 5120, 40, 40, 40, 13824, 32000, 4096, _HF.format("meta-llama/Llama-2-13b-hf")),
        _llama("llama-2-70b", 8192, 80, 64, 8, 28672, 32000, 4096, _HF.format("meta-llama/Llama-2-70b-hf")),
        _llama("llama-3-8b", 4096, 32, 32, 8, 14336, 128256, 8192, _HF.format("meta-llama/Meta-Llama-3-8B")),
        _llama("llama-3-70b", 8192, 80, 64, 8, 28672, 128256, 8192, _HF.format("meta-llama/Meta-Llama-3-70B")),
        LLMConfig(name="qwen2-7b", hidden_size=3584, num_layers=28, num_heads=28, num_kv_heads=4, ffn_size=18944,
                  ffn_type="swiglu", vocab_size=152064, tie_embeddings=False, norm="rmsnorm", qkv_bias=True,
                  linear_bias=False, position="rope", max_position=32768,
                  source=_HF.format("Qwen/Qwen2-7B-Instruct")),
        _encoder("ernie-3.0-base-zh", 768, 12, 12, 40000, 2048, 4, "PaddleNLP ernie-3.0-base-zh model card"),
        _encoder("ernie-3.0-xbase-zh", 1024, 20, 16, 40000, 2048, 4,
                 "PaddleNLP model_zoo/ernie-3.0 README (20L1024H); heads/FFN/vocab by family convention (verify)"),
        LLMConfig(name="gpt3-175b", hidden_size=12288, num_layers=96, num_heads=96, num_kv_heads=96,
                  ffn_size=4 * 12288, vocab_size=50257, max_position=2048, dropout=0.1,
                  source="Brown et al. 2020 (arXiv 2005.14165) table 2.1; GPT-2 vocab"),
        _encoder("bert-base", 768, 12, 12, 30522, 512, 2, "Devlin et al. 2019 (arXiv 1810.04805) §3"),
        _encoder("bert-large", 1024, 24, 16, 30522, 512, 2, "Devlin et al. 2019 (arXiv 1810.04805) §3"),
    )
}

#: Hugging Face / PaddleNLP ``config.json`` keys -> LLMConfig fields.
_HF_KEYS = {
    "hidden_size": "hidden_size", "n_embd": "hidden_size", "d_model": "hidden_size",
    "num_hidden_layers": "num_layers", "n_layer": "num_layers", "num_layers": "num_layers",
    "num_attention_heads": "num_heads", "n_head": "num_heads", "num_heads": "num_heads",
    "num_key_value_heads": "num_kv_heads", "num_kv_heads": "num_kv_heads",
    "intermediate_size": "ffn_size", "n_inner": "ffn_size", "ffn_size": "ffn_size",
    "vocab_size": "vocab_size", "tie_word_embeddings": "tie_embeddings", "tie_embeddings": "tie_embeddings",
    "max_position_embeddings": "max_position", "n_positions": "max_position", "max_position": "max_position",
    "type_vocab_size": "type_vocab_size",
}  # fmt: skip
#: ``hidden_act`` values: gated (SwiGLU MLP, 3 matrices) and plain (2-matrix MLP), as Hugging Face's ACT2FN spells them.
_GATED_ACTS = ("silu", "swiglu", "swish")
_PLAIN_ACTS = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python", "quick_gelu", "relu", "tanh")
_LLAMA_LIKE = ("llama", "qwen2", "mistral", "qwen", "internlm", "baichuan", "yi")
#: our field -> the key a Hugging Face config.json uses for it (for error messages)
_HF_NAME = {"num_layers": "num_hidden_layers", "num_heads": "num_attention_heads",
            "num_kv_heads": "num_key_value_heads", "ffn_size": "intermediate_size",
            "tie_embeddings": "tie_word_embeddings", "max_position": "max_position_embeddings",
            "dropout": "hidden_dropout_prob", "linear_bias": "mlp_bias", "qkv_bias": "attention_bias"}  # fmt: skip


def _string_key(raw: dict[str, Any], key: str, name: str, default: str) -> str:
    """A config key that must be a string (``model_type``, ``hidden_act``), lower-cased.

    Raises:
        ModelError: present but not a string.
    """
    v = raw.get(key, default)
    if not isinstance(v, str):
        raise ModelError(f"Model config {name}: `{key}` must be a string (got {type(v).__name__}).")
    return v.lower()


def config_from_dict(raw: dict[str, Any], name: str) -> LLMConfig:
    """Build an :class:`LLMConfig` from our own field names or a Hugging Face / PaddleNLP ``config.json``.

    Mapping: hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads (default: heads),
    intermediate_size (default 4h), vocab_size, tie_word_embeddings, max_position_embeddings; ``hidden_act``
    silu/swish -> SwiGLU, gelu/relu variants -> 2-matrix MLP, anything else is an error; ``model_type``
    llama/qwen2/mistral (or an ``rms_norm_eps`` key) -> RMSNorm, RoPE, no biases, untied by default (Qwen2: q/k/v
    biases); ``bert``/``ernie`` -> encoder. Unknown keys of a ``config.json`` are ignored; values are validated
    strictly (a string is not a bool, ``true`` is not 1).

    Raises:
        ModelError: a field is missing or invalid (names the key as the file spells it), or the file is a job spec.
    """
    if "model" in raw and ({"data", "batch_size", "epochs", "max_steps"} & set(raw)):
        raise ModelError(f"{name} is a job spec, not a model config: pass it as `--config FILE` (the parallel "
                         "planner takes a built-in LLM name or a Hugging Face config.json).")  # fmt: skip
    ours = set(LLMConfig.model_fields)
    hf = not set(raw) <= ours
    if not hf:
        fields = dict(raw)
    else:
        fields = {}
        for k, v in raw.items():
            if k in _HF_KEYS and v is not None:
                fields[_HF_KEYS[k]] = v
        mtype = _string_key(raw, "model_type", name, "")
        act_key = "hidden_act" if "hidden_act" in raw else "activation_function"
        act = _string_key(raw, act_key, name, "gelu")
        if act not in _GATED_ACTS + _PLAIN_ACTS:
            raise ModelError(f"Model config {name}: `{act_key}: {act}` is not an activation the planner knows; "
                             f"use one of {', '.join(_GATED_ACTS + _PLAIN_ACTS)} (gated ones mean a 3-matrix "
                             "SwiGLU MLP).")  # fmt: skip
        llama_like = mtype in _LLAMA_LIKE or "rms_norm_eps" in raw
        if act in _GATED_ACTS or llama_like:
            fields.setdefault("ffn_type", "swiglu")
        if llama_like:
            fields.update(norm="rmsnorm", position="rope", linear_bias=raw.get("mlp_bias", False))
            fields["qkv_bias"] = raw.get("attention_bias", mtype == "qwen2")
            fields.setdefault("tie_embeddings", False)
        if mtype in ("bert", "ernie", "roberta") or raw.get("is_decoder") is False:
            fields["causal"] = False
        if not llama_like:
            drop = raw.get("hidden_dropout_prob", raw.get("resid_pdrop", 0.0))
            fields["dropout"] = 0.0 if drop is None else drop
        h = fields.get("hidden_size")
        fields["source"] = f"user config ({name})"
        if isinstance(h, int) and not isinstance(h, bool) and "ffn_size" not in fields:
            fields["ffn_size"] = 4 * h
            fields["source"] += "; no intermediate_size: 4 x hidden_size assumed (GPT-2/BERT convention)"
    fields.setdefault("name", name)
    if "num_heads" in fields:
        fields.setdefault("num_kv_heads", fields["num_heads"])
    try:
        return LLMConfig(**fields)
    except ValidationError as exc:
        e = exc.errors()[0]
        field = str(e["loc"][0]) if e["loc"] else ""
        key = _HF_NAME.get(field, field) if hf else field
        got = "" if e["type"] == "missing" else f" (got {e.get('input')!r:.80})"
        what = f"`{key}`" if key else "config"
        raise ModelError(f"Model config {name}: {what}: {e['msg']}{got}. A config needs hidden_size, "
                         f"{'num_hidden_layers, num_attention_heads' if hf else 'num_layers, num_heads'} and "
                         "vocab_size (a Hugging Face config.json has them).") from None  # fmt: skip


def load_llm_config(path: str | Path) -> LLMConfig:
    """Read a JSON or YAML model config (see :func:`config_from_dict`).

    Raises:
        ModelError: unreadable file, not a mapping, or bad fields.
    """
    from paddlefit.errors import PaddlefitError
    from paddlefit.fileio import read_text_limited

    p = Path(path)
    try:
        text = read_text_limited(p, "MODEL")
    except PaddlefitError as exc:
        raise ModelError(f"Model config: {exc}") from None
    is_json = p.suffix.lower() == ".json"

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        if dup := next((k for k in keys if keys.count(k) > 1), None):
            raise ModelError(f"Model config {p}: key `{dup}` is given twice; keep one.")
        return dict(pairs)

    try:
        if is_json:
            raw = json.loads(text, object_pairs_hook=no_duplicates)
        else:  # as job specs: no anchors/aliases (nested aliases expand exponentially), no key twice, not too deep
            from paddlefit.spec import load_plain_yaml

            try:
                raw = load_plain_yaml(text)
            except ValueError as exc:
                raise ModelError(f"Model config {p} {exc}.") from None
    except (ValueError, yaml.YAMLError) as exc:  # JSONDecodeError is a ValueError; so is an int over 4300 digits
        problem = str(exc).splitlines()[0]
        if "integer string conversion" in problem:
            problem = "an integer too long to read (Python's limit: 4300 digits)"
        raise ModelError(f"Model config {p}: not valid {'JSON' if is_json else 'YAML'}: {problem}.") from None
    except RecursionError:
        raise ModelError(f"Model config {p}: nested too deeply to be a model config.") from None
    if not isinstance(raw, dict):
        raise ModelError(f"Model config {p}: expected a mapping of fields (hidden_size, ...), got "
                         f"{type(raw).__name__}.")  # fmt: skip
    return config_from_dict(raw, p.stem if p.name != "config.json" else p.parent.name or "config")


def is_llm_config_path(model: str) -> bool:
    """True when ``model`` names a JSON/YAML file, or a model directory holding a ``config.json`` (an LLM config
    rather than a zoo name)."""
    p = Path(model)
    return p.suffix.lower() in (".json", ".yaml", ".yml") or (p.is_dir() and (p / "config.json").is_file())


def resolve_llm(model: str) -> LLMConfig:
    """A built-in name (case-insensitive) or a JSON/YAML config path.

    Raises:
        UnknownNameError: neither; lists close built-in names.
        ModelError: the file is bad.
    """
    if is_llm_config_path(model):
        p = Path(model)
        return load_llm_config(p / "config.json" if p.is_dir() else p)
    key = model.strip().lower()
    if key in LLM_CONFIGS:
        return LLM_CONFIGS[key]
    from paddlefit.models.transformer import TRANSFORMER_CONFIGS

    if key in TRANSFORMER_CONFIGS:  # the zoo's other transformers (gpt2-*, ernie-3.0-medium-zh), same sources
        t = TRANSFORMER_CONFIGS[key]
        return LLMConfig(name=key, hidden_size=t.hidden_size, num_layers=t.num_layers, num_heads=t.num_heads,
                         num_kv_heads=t.kv_heads, ffn_size=t.ffn_size, vocab_size=t.vocab_size, causal=t.causal,
                         max_position=t.max_position, type_vocab_size=t.type_vocab_size, dropout=t.dropout,
                         source="paddlefit.models.transformer (see its module docstring)")  # fmt: skip
    close = difflib.get_close_matches(key, [*LLM_CONFIGS, *TRANSFORMER_CONFIGS], n=4, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise UnknownNameError(f"Unknown model {model!r} for the parallel planner.{hint} Built in: "
                           f"{', '.join(LLM_CONFIGS)}; or give a config.json / YAML path.")  # fmt: skip


def to_transformer_config(cfg: LLMConfig, default_seq_len: int = 128) -> Any:
    """The :class:`paddlefit.models.transformer.TransformerConfig` that builds the same model in Paddle (RoPE
    left out: no parameters; see that module). Needs ``qkv_bias == linear_bias`` (one bias switch there)."""
    from paddlefit.models.transformer import TransformerConfig

    if cfg.qkv_bias != cfg.linear_bias:
        raise ModelError(f"{cfg.name}: the Paddle builder has one bias switch; qkv_bias and linear_bias differ.")
    return TransformerConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_layers=cfg.num_layers,
        num_heads=cfg.num_heads, ffn_size=cfg.ffn_size,
        max_position=cfg.max_position, type_vocab_size=cfg.type_vocab_size, causal=cfg.causal,
        default_seq_len=min(default_seq_len, cfg.max_position), dropout=cfg.dropout,
        num_kv_heads=cfg.num_kv_heads, ffn_type=cfg.ffn_type, norm=cfg.norm, tie_embeddings=cfg.tie_embeddings,
        bias=cfg.linear_bias, position="learned" if cfg.position == "learned" else "none",
    )  # fmt: skip
