"""Transformer configs for the analytic LLM planner: the built-in ones (:data:`LLM_CONFIGS`, from the catalog's
published configs, :mod:`paddlefit.catalog.transformers`, with their sources) and user files (Hugging Face /
PaddleNLP ``config.json``, or YAML/JSON with the same field names as
:class:`~paddlefit.catalog.transformers.TransformerConfig`), all read into that one type.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from paddlefit.catalog.transformers import (
    TransformerConfig,
    llm_transformer_names,
    published_transformers,
    zoo_transformer_names,
)
from paddlefit.errors import ModelError, UnknownNameError

#: The built-in configs, in listing order; sources in :mod:`paddlefit.catalog.transformers` and each ``source``.
LLM_CONFIGS: dict[str, TransformerConfig] = {n: published_transformers()[n] for n in llm_transformer_names()}

#: Hugging Face / PaddleNLP ``config.json`` keys -> TransformerConfig fields.
_HF_KEYS = {
    "hidden_size": "hidden_size",
    "n_embd": "hidden_size",
    "d_model": "hidden_size",
    "num_hidden_layers": "num_layers",
    "n_layer": "num_layers",
    "num_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "n_head": "num_heads",
    "num_heads": "num_heads",
    "num_key_value_heads": "num_kv_heads",
    "num_kv_heads": "num_kv_heads",
    "intermediate_size": "ffn_size",
    "n_inner": "ffn_size",
    "ffn_size": "ffn_size",
    "vocab_size": "vocab_size",
    "tie_word_embeddings": "tie_embeddings",
    "tie_embeddings": "tie_embeddings",
    "max_position_embeddings": "max_position",
    "n_positions": "max_position",
    "max_position": "max_position",
    "type_vocab_size": "type_vocab_size",
}
#: ``hidden_act`` values: gated (SwiGLU MLP, 3 matrices) and plain (2-matrix MLP), as Hugging Face's ACT2FN spells them.
_GATED_ACTS = ("silu", "swiglu", "swish")
_PLAIN_ACTS = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python", "quick_gelu", "relu", "tanh")
_LLAMA_LIKE = ("llama", "qwen2", "mistral", "qwen", "internlm", "baichuan", "yi")
#: our field -> the key a Hugging Face config.json uses for it (for error messages)
_HF_NAME = {
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
    "ffn_size": "intermediate_size",
    "tie_embeddings": "tie_word_embeddings",
    "max_position": "max_position_embeddings",
    "dropout": "hidden_dropout_prob",
    "linear_bias": "mlp_bias",
    "qkv_bias": "attention_bias",
}


def _string_key(raw: dict[str, Any], key: str, name: str, default: str) -> str:
    """A config key that must be a string (``model_type``, ``hidden_act``), lower-cased.

    Raises:
        ModelError: present but not a string.
    """
    v = raw.get(key, default)
    if not isinstance(v, str):
        raise ModelError(f"Model config {name}: `{key}` must be a string (got {type(v).__name__}).")
    return v.lower()


def config_from_dict(raw: dict[str, Any], name: str) -> TransformerConfig:
    """Build a :class:`~paddlefit.catalog.transformers.TransformerConfig` from our own field names or a Hugging
    Face / PaddleNLP ``config.json``.

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
        raise ModelError(
            f"{name} is a job spec, not a model config: pass it as `--config FILE` (the parallel "
            "planner takes a built-in LLM name or a Hugging Face config.json)."
        )
    ours = set(TransformerConfig.model_fields)
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
            raise ModelError(
                f"Model config {name}: `{act_key}: {act}` is not an activation the planner knows; "
                f"use one of {', '.join(_GATED_ACTS + _PLAIN_ACTS)} (gated ones mean a 3-matrix "
                "SwiGLU MLP)."
            )
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
        return TransformerConfig(**fields)
    except ValidationError as exc:
        e = exc.errors()[0]
        field = str(e["loc"][0]) if e["loc"] else ""
        key = _HF_NAME.get(field, field) if hf else field
        got = "" if e["type"] == "missing" else f" (got {e.get('input')!r:.80})"
        what = f"`{key}`" if key else "config"
        raise ModelError(
            f"Model config {name}: {what}: {e['msg']}{got}. A config needs hidden_size, "
            f"{'num_hidden_layers, num_attention_heads' if hf else 'num_layers, num_heads'} and "
            "vocab_size (a Hugging Face config.json has them)."
        ) from None


def load_llm_config(path: str | Path) -> TransformerConfig:
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
            from paddlefit.jobspec.spec import load_plain_yaml

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
        raise ModelError(
            f"Model config {p}: expected a mapping of fields (hidden_size, ...), got {type(raw).__name__}."
        )
    return config_from_dict(raw, p.stem if p.name != "config.json" else p.parent.name or "config")


def is_llm_config_path(model: str) -> bool:
    """True when ``model`` names a JSON/YAML file, or a model directory holding a ``config.json`` (an LLM config
    rather than a zoo name)."""
    p = Path(model)
    return p.suffix.lower() in (".json", ".yaml", ".yml") or (p.is_dir() and (p / "config.json").is_file())


def resolve_llm(model: str) -> TransformerConfig:
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
    published = published_transformers()
    if key in published:  # the zoo's other transformers (gpt2-*, ernie-3.0-medium-zh), same table
        return published[key]
    close = difflib.get_close_matches(key, [*LLM_CONFIGS, *zoo_transformer_names()], n=4, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise UnknownNameError(
        f"Unknown model {model!r} for the parallel planner.{hint} Built in: "
        f"{', '.join(LLM_CONFIGS)}; or give a config.json / YAML path."
    )


def to_transformer_config(cfg: TransformerConfig) -> TransformerConfig:
    """``cfg`` itself, checked to be one :func:`paddlefit.models.transformer.build_transformer` builds as the
    planner counts it (RoPE left out: no parameters; see that module).

    Raises:
        ModelError: ``qkv_bias`` and ``linear_bias`` differ (the builder's zoo configs have one bias switch).
    """
    if cfg.qkv_bias != cfg.linear_bias:
        raise ModelError(f"{cfg.name}: the Paddle builder has one bias switch; qkv_bias and linear_bias differ.")
    return cfg
