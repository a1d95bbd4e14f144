"""One transformer config type with the published configs as data, and the one generator of its ops."""

import json
from importlib import resources

from paddlefit.catalog.transformer_configs import LLM_CONFIGS, resolve_llm
from paddlefit.catalog.transformers import (
    TransformerConfig,
    llm_transformer_names,
    published_transformers,
    zoo_transformer_names,
)
from paddlefit.estimate.analytic import analytic_transformer_flops
from paddlefit.estimate.transformer_ops import head_ops, layer_ops, matmul_flops, transformer_ops, transformer_trace
from paddlefit.llm.perf import head_forward_flops, layer_forward_flops
from paddlefit.models.transformer import TRANSFORMER_CONFIGS


def test_each_published_config_is_one_sourced_row():
    raw = json.loads(resources.files("paddlefit.catalog").joinpath("data/transformers.json").read_text("utf-8"))
    names = [c["name"] for c in raw["configs"]]
    assert len(names) == len(set(names))  # bert-base and the others: one row each
    configs = published_transformers()
    assert all(isinstance(c, TransformerConfig) and c.source for c in configs.values())
    assert set(zoo_transformer_names()) | set(llm_transformer_names()) == set(configs)
    assert list(TRANSFORMER_CONFIGS) == list(zoo_transformer_names())
    assert list(LLM_CONFIGS) == list(llm_transformer_names())
    assert TRANSFORMER_CONFIGS["bert-base"] is LLM_CONFIGS["bert-base"] is resolve_llm("bert-base")
    assert resolve_llm("gpt2-xl") is TRANSFORMER_CONFIGS["gpt2-xl"]


def test_analytic_flops_are_the_exact_closed_form():
    for name, cfg in TRANSFORMER_CONFIGS.items():
        s, h, n, v = 1024 if cfg.max_position >= 1024 else 128, cfg.hidden_size, cfg.num_layers, cfg.vocab_size
        assert analytic_transformer_flops(cfg, s) == n * (24 * s * h * h + 4 * s * s * h) + 2 * s * h * v, name


def test_planner_flops_are_the_generated_matmuls():
    for cfg in (*LLM_CONFIGS.values(), TRANSFORMER_CONFIGS["gpt2-small"]):
        s, b = 256, 3
        ops = transformer_ops(cfg, s, b)
        total = cfg.num_layers * layer_forward_flops(cfg, s, b) + head_forward_flops(cfg, s, b)
        assert matmul_flops(ops) == total, cfg.name
        assert len(ops) == len(transformer_ops(cfg, s, 1))
        assert len(layer_ops(cfg, s, b)) * cfg.num_layers + len(head_ops(cfg, s, b)) < len(ops)


def test_trace_of_a_qwen_style_config_puts_biases_on_qkv_only():
    cfg = LLM_CONFIGS["qwen2-7b"].model_copy(update={"num_layers": 1})
    ops = transformer_trace(cfg, 16).ops1
    linears = [o for o in ops if o.op == "linear"]
    assert len(linears[0].inputs) == 3 and all(len(o.inputs) == 2 for o in linears[1:])
