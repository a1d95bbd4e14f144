"""Jobs on models from Paddle's own libraries: plan's CPU peak (with the job's loss and eval pass) against the peak
`paddlefit train` measures, and plan's wall time, side by side.

Each job is planned (`paddlefit plan --config JOB --gpu T4 --json`, wall time measured) and trained a few steps
(`paddlefit train JOB`, its summary's `peak_memory_bytes`: the host allocator's peak over the run) in fresh
processes. Needs the `real` extra (`make test` installs it); jobs whose library is missing are listed as skipped.
The data is generated with the jobs' real structure (`tests/data/trainhelpers.py`, `tests/data/reallibs.py`) or,
for the examples, the installed corpora.

Run: ``.venv/bin/python bench/real_models.py`` (a few minutes on 2 cores).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from paddlefit.units import MIB

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
sys.path.insert(0, str(DATA))

ERNIE = {
    "vocab_size": 1000,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 64,
    "type_vocab_size": 2,
    "num_labels": 3,
}


def jobs() -> list[tuple[str, str, dict]]:
    """(name, library module, job spec) of every job measured."""
    from reallibs import CRNN

    llama = {
        "vocab_size": 32000,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "max_position_embeddings": 128,
        "use_fused_rms_norm": False,
        "use_flash_attention": False,
    }
    return [
        (
            "ERNIE classifier (PaddleNLP), labels=",
            "paddlenlp",
            {
                "model": "paddlenlp.transformers:ErnieForSequenceClassification",
                "model_args": ERNIE,
                "label_arg": "labels",
                "batch_size": 8,
                "max_steps": 4,
                "data": {
                    "train": "trainhelpers:kw_tokens",
                    "train_args": {"seq": 16, "vocab": 1000},
                    "eval": "trainhelpers:kw_tokens",
                    "eval_args": {"seq": 16, "vocab": 1000, "seed": 1},
                    "eval_batch_size": 32,
                },
            },
        ),
        (
            "Llama causal LM, 32k vocab (PaddleNLP)",
            "paddlenlp",
            {
                "model": "paddlenlp.transformers:LlamaForCausalLM",
                "model_args": llama,
                "label_arg": "labels",
                "batch_size": 4,
                "max_steps": 3,
                "data": {"train": "reallibs:lm_tokens", "eval": "reallibs:lm_tokens", "eval_args": {"seed": 1}},
            },
        ),
        (
            "PP-LCNet x0.25 (PaddleClas), example",
            "paddleclas",
            {**yaml.safe_load((ROOT / "examples" / "pplcnet-shapes.yaml").read_text()), "max_steps": 6},
        ),
        (
            "PP-LiteSeg STDC1 (PaddleSeg), 3 heads",
            "paddleseg",
            {
                "model": "reallibs:pp_liteseg",
                "batch_size": 2,
                "max_steps": 2,
                "data": {
                    "train": "trainhelpers:seg_images",
                    "train_args": {"n": 8, "size": 64},
                    "eval": "trainhelpers:seg_images",
                    "eval_args": {"n": 8, "size": 64, "seed": 1},
                    "eval_batch_size": 8,
                },
            },
        ),
        (
            "CRNN BiLSTM + CTC (PaddleOCR)",
            "unstructured_paddleocr",
            {
                "model": "unstructured_paddleocr.ppocr.modeling.architectures:build_model",
                "model_args": {"config": CRNN},
                "loss": "reallibs:ctc_loss",
                "batch_size": 4,
                "max_steps": 3,
                "data": {"train": "reallibs:text_lines", "eval": "reallibs:text_lines", "eval_args": {"seed": 1}},
            },
        ),
        (
            "ERNIE on the review corpus, example",
            "paddlenlp",
            {**yaml.safe_load((ROOT / "examples" / "ernie-sentiment-zh.yaml").read_text()), "max_steps": 6},
        ),
        (
            "ERNIE token classifier (PaddleNLP)",
            "paddlenlp",
            {
                "model": "paddlenlp.transformers:ErnieForTokenClassification",
                "model_args": {**ERNIE, "vocab_size": 500, "num_labels": 5},
                "label_arg": "labels",
                "batch_size": 16,
                "max_steps": 3,
                "data": {
                    "train": "reallibs:token_tags",
                    "eval": "reallibs:token_tags",
                    "eval_args": {"seed": 1},
                    "eval_batch_size": 32,
                },
            },
        ),
        (
            "LSTMEncoder bidirect (PaddleNLP seq2vec)",
            "paddlenlp",
            {
                "model": "paddlenlp.seq2vec:LSTMEncoder",
                "model_args": {"input_size": 32, "hidden_size": 16, "direction": "bidirect"},
                "inputs": ["float32[20,32]", "sequence_length=int64[]:21"],
                "batch_size": 16,
                "max_steps": 3,
                "data": {
                    "train": "reallibs:embedded_lengths",
                    "eval": "reallibs:embedded_lengths",
                    "eval_args": {"seed": 1},
                },
            },
        ),
        (
            "MobileNetV3-small x0.35 (PaddleClas)",
            "paddleclas",
            {
                "model": "paddleclas.ppcls.arch.backbone:MobileNetV3_small_x0_35",
                "model_args": {"pretrained": False, "class_num": 5},
                "batch_size": 16,
                "max_steps": 5,
                "data": {
                    "train": "shapes",
                    "train_args": {"n": 320, "size": 64},
                    "eval": "shapes",
                    "eval_args": {"split": "test", "n": 320, "size": 64},
                    "eval_batch_size": 64,
                },
            },
        ),
        (
            "BiSeNetV2 (PaddleSeg), 5 heads",
            "paddleseg",
            {
                "model": "paddleseg.models:BiSeNetV2",
                "model_args": {"num_classes": 3},
                "batch_size": 4,
                "max_steps": 2,
                "data": {
                    "train": "trainhelpers:seg_images",
                    "train_args": {"n": 16, "size": 64, "classes": 3},
                    "eval": "trainhelpers:seg_images",
                    "eval_args": {"n": 8, "size": 64, "classes": 3, "seed": 1},
                    "eval_batch_size": 8,
                },
            },
        ),
        (
            "digits CNN (zoo example)",
            "paddle",
            {**yaml.safe_load((ROOT / "examples" / "digits.yaml").read_text()), "epochs": None, "max_steps": 10},
        ),
        (
            "fastText sentiment-zh (zoo example)",
            "paddle",
            {**yaml.safe_load((ROOT / "examples" / "sentiment-zh.yaml").read_text()), "epochs": None, "max_steps": 10},
        ),
    ]


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{DATA}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "paddlefit.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
        check=False,
    )


def main() -> int:
    rows, skipped = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, lib, spec) in enumerate(jobs()):
            if importlib.util.find_spec(lib) is None:
                skipped.append(f"{name}: {lib} not installed")
                continue
            run = Path(tmp) / f"run{i}"
            spec = {**spec, "run_dir": str(run), "checkpoint": {"every_steps": 0, "every_minutes": 0}}
            cfg = Path(tmp) / f"job{i}.yaml"
            cfg.write_text(yaml.safe_dump(spec, sort_keys=False))
            t0 = time.perf_counter()
            p = _cli("plan", "--config", str(cfg), "--gpu", "T4", "--json")
            wall = time.perf_counter() - t0
            if p.returncode != 0:
                skipped.append(f"{name}: plan failed: {p.stderr.strip().splitlines()[-1:]}")
                continue
            plan = json.loads(p.stdout)
            t = _cli("train", str(cfg), "--resume", "never")
            if t.returncode != 0:
                skipped.append(f"{name}: train failed: {t.stderr.strip().splitlines()[-1:]}")
                continue
            measured = json.loads((run / "summary.json").read_text())["peak_memory_bytes"]
            cpu = next(x for x in plan["targets"] if x["kind"] == "cpu")
            t4 = next(x for x in plan["targets"] if x["kind"] == "gpu")
            rows.append(
                (
                    name,
                    plan["model"]["params"],
                    plan["model"]["loss"],
                    plan["memory"]["dominant_phase"],
                    wall,
                    cpu["peak_bytes"],
                    measured,
                    t4["peak_bytes"],
                )
            )
    print("plan (CPU fp32 peak, job's loss + eval) vs train's measured peak, this machine")
    print(
        f"{'job':<40}{'params':>10}  {'dominant':<15}{'plan s':>7}{'plan MiB':>10}{'train MiB':>10}"
        f"{'plan/train':>11}{'T4 MiB':>9}  loss"
    )
    for name, params, loss, dom, wall, pred, meas, t4 in rows:
        print(
            f"{name:<40}{params:>10,}  {dom:<15}{wall:>7.1f}{pred / MIB:>10.2f}{meas / MIB:>10.2f}"
            f"{pred / meas:>11.3f}{t4 / MIB:>9.1f}  {loss}"
        )
    for s in skipped:
        print(f"skipped: {s}")
    if rows:
        worst = max(abs(r[5] / r[6] - 1) for r in rows)
        print(f"\nworst |plan/train - 1| = {worst:.1%} over {len(rows)} jobs (target <= 3%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
