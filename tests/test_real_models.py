"""Models from Paddle's own libraries, as users build them (the `real` extra: PaddleNLP, PaddleClas, PaddleSeg,
PaddleOCR's training code from the `unstructured-paddleocr` wheel and PaddleDetection's `paddledet` 2.6.0, both
installed by the Makefile with --no-deps; nothing is downloaded, weights are random): plan each job (its real loss,
eval pass), train it a few steps, evaluate, export, and check plan's CPU peak against train's measured one. A library
that is not installed is skipped with the reason.

PaddleDetection (PicoDet-S) is planned and trained, not evaluated or exported (docs/guides/real-models.md says what
it takes on Paddle 3.3.1: int64 class ids for ppdet 2.6.0's assigners, a fresh `spatial_scales` list for LCPAN): its
eval forward returns boxes (mAP, no loss), and exporting it fails in ppdet's `multiclass_nms` under PIR
(`ppdet/modeling/ops.py:584`, legacy `LayerHelper.append_op`) or, without NMS, on the `gt_*` inputs the eval graph
does not use. Not here: PaddleFormers (its aistudio-sdk >= 0.3 and huggingface_hub >= 1 conflict with PaddleNLP's
pins, so it needs a second environment).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

DATA = Path(__file__).parent / "data"
EXAMPLES = Path(__file__).parent.parent / "examples"
ENV = {**os.environ, "PYTHONPATH": f"{DATA}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "HF_HUB_OFFLINE": "1"}

pytestmark = pytest.mark.slow


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "paddlefit.cli.main", *args],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=cwd,
        timeout=900,
        check=False,
    )


def _job(tmp_path: Path, spec: dict) -> Path:
    spec = {"checkpoint": {"every_steps": 0, "every_minutes": 0}, "run_dir": str(tmp_path / "run"), **spec}
    cfg = tmp_path / "job.yaml"
    cfg.write_text(yaml.safe_dump(spec, sort_keys=False))
    return cfg


def _plan_train_export(cfg: Path, run: Path, rel: float = 0.03) -> tuple[dict, dict]:
    """plan --json, train, export; asserts plan's CPU peak is within ``rel`` of train's measured peak."""
    p = _cli("plan", "--config", str(cfg), "--gpu", "T4", "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    plan = json.loads(p.stdout)
    t = _cli("train", str(cfg), "--resume", "never")
    assert t.returncode == 0, t.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["eval_loss"] is not None
    cpu = next(x for x in plan["targets"] if x["kind"] == "cpu")
    assert cpu["peak_bytes"] == pytest.approx(summary["peak_memory_bytes"], rel=rel), (
        plan["memory"]["phase_peak_bytes"],
        summary["peak_memory_bytes"],
    )
    e = _cli("export", str(run))
    assert e.returncode == 0, e.stderr[-3000:]
    assert "max |diff|" in e.stdout + e.stderr
    return plan, summary


def test_paddlenlp_ernie_classifier_keyword_inputs_and_its_own_loss(tmp_path: Path) -> None:
    """PaddleNLP's ErnieForSequenceClassification built from its config class: dict samples (input_ids,
    token_type_ids, labels), the label passed as `labels=`, so the model returns (loss, logits)."""
    pytest.importorskip("paddlenlp", reason="the `real` extra (PaddleNLP 2.8.1) is not installed")
    cfg = _job(
        tmp_path,
        {
            "model": "paddlenlp.transformers:ErnieForSequenceClassification",
            "model_args": {
                "vocab_size": 1000,
                "hidden_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "intermediate_size": 128,
                "max_position_embeddings": 64,
                "type_vocab_size": 2,
                "num_labels": 3,
            },
            "label_arg": "labels",
            "batch_size": 8,
            "max_steps": 4,
            "optimizer": "adamw",
            "data": {
                "train": "trainhelpers:kw_tokens",
                "train_args": {"seq": 16, "vocab": 1000},
                "eval": "trainhelpers:kw_tokens",
                "eval_args": {"seq": 16, "vocab": 1000, "seed": 1},
                "eval_batch_size": 32,
            },
        },
    )
    plan, _ = _plan_train_export(cfg, tmp_path / "run")
    assert plan["model"]["loss"] == "the model's own loss"
    ids, types = plan["inputs"]  # read off data.train: ids up to the largest seen + 1
    assert ids.startswith("input_ids=int64[16]:") and types == "token_type_ids=int64[16]:2"


def test_paddleclas_pplcnet_example(tmp_path: Path) -> None:
    """The shipped example: PaddleClas PP-LCNet x0.25 on generated shape images, plan -> train -> export."""
    pytest.importorskip("paddleclas", reason="the `real` extra (PaddleClas 2.6.0) is not installed")
    spec = yaml.safe_load((EXAMPLES / "pplcnet-shapes.yaml").read_text())
    spec.update(max_steps=6, run_dir=str(tmp_path / "run"))
    spec["data"]["train_args"] = {"n": 200}
    spec["data"]["eval_args"] = {"split": "test", "n": 200}
    cfg = _job(tmp_path, spec)
    plan, _ = _plan_train_export(cfg, tmp_path / "run")
    assert plan["model"]["label"] == "int64[]:5" and plan["model"]["loss"] == "cross_entropy"


def test_paddleseg_ppliteseg_auxiliary_heads_and_eval_batch(tmp_path: Path) -> None:
    """PaddleSeg PP-LiteSeg returns three NCHW logit maps in training (one in eval): cross_entropy over the class
    axis, summed over the heads (PaddleSeg's loss coefficients [1, 1, 1]); the eval pass at a larger batch is
    planned as its own phase."""
    pytest.importorskip("paddleseg", reason="the `real` extra (PaddleSeg 2.8.0) is not installed")
    cfg = _job(
        tmp_path,
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
    )
    plan, _ = _plan_train_export(cfg, tmp_path / "run")
    assert plan["model"]["loss"] == "cross_entropy summed over the model's 3 outputs"
    assert plan["model"]["label"] == "int64[64,64]:4" and plan["memory"]["eval_batch_size"] == 8


def test_paddledet_picodet_its_own_loss(tmp_path: Path) -> None:
    """`examples/det-picodet.yaml`: PaddleDetection's PicoDet-S (pip `paddledet` 2.6.0, installed without its
    numpy < 1.24 pin; `paddlefit.examples.det`) on generated
    images of coloured rectangles: dict samples (image, gt_bbox, gt_class, pad_gt_mask, ...) reach ppdet's
    architecture as the one dict it takes, and training returns ppdet's loss dict (VFL + GIoU + DFL with the ATSS
    assigner), whose `loss` is backpropagated. Plan's CPU peak within 3% of train's. No eval (ppdet evaluates mAP,
    not a loss) and no export (see the module docstring)."""
    pytest.importorskip("ppdet", reason="PaddleDetection (paddledet 2.6.0, see the Makefile) is not installed")
    spec = yaml.safe_load((EXAMPLES / "det-picodet.yaml").read_text())  # the shipped example, made small
    spec["data"]["train_args"].update(n=8)
    cfg = _job(tmp_path, {**spec, "batch_size": 2, "max_steps": 3, "run_dir": str(tmp_path / "run")})
    p = _cli("plan", "--config", str(cfg), "--gpu", "T4", "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    plan = json.loads(p.stdout)
    assert plan["model"]["loss"] == "the model's own loss" and plan["model"]["params"] == 1_176_576
    assert plan["inputs"][:3] == ["image=float32[3,320,320]", "gt_bbox=float32[3,4]", "gt_class=int64[3,1]:4"]
    t = _cli("train", str(cfg), "--resume", "never")
    assert t.returncode == 0, t.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["final_loss"] > 0
    cpu = next(x for x in plan["targets"] if x["kind"] == "cpu")
    assert cpu["peak_bytes"] == pytest.approx(summary["peak_memory_bytes"], rel=0.03), (
        plan["memory"]["phase_peak_bytes"],
        summary["peak_memory_bytes"],
    )


def _ocr_example(tmp_path: Path, name: str, train_args: dict, eval_args: dict, **over: object) -> Path:
    """The shipped ``examples/NAME.yaml`` made small: ``train_args``/``eval_args`` merged into the data's,
    one process for the DataLoader, ``over`` on top; the run goes to ``tmp_path/run``."""
    pytest.importorskip(
        "unstructured_paddleocr", reason="PaddleOCR's training code (unstructured-paddleocr) is not installed"
    )
    spec = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    spec["data"]["train_args"].update(train_args)
    spec["data"]["eval_args"].update(eval_args)
    spec["data"]["num_workers"] = 0
    spec.update(run_dir=str(tmp_path / "run"), **over)
    return _job(tmp_path, spec)


def test_paddleocr_crnn_example_on_encoded_text_lines(tmp_path: Path) -> None:
    """The shipped OCR recognition example (examples/ocr-rec-crnn.yaml): PaddleOCR's CRNN of
    rec_mv3_none_bilstm_ctc.yml (BiLSTM neck: no lazy build) and its CTCLoss, on PNG bytes decoded and transformed
    by PaddleOCR's own operators in the Dataset; dict samples whose label is a dict {text, length}: probe batches
    are the data's own structure. Plan's CPU peak within 3% of train's, export checked."""
    cfg = _ocr_example(tmp_path, "ocr-rec-crnn", {"n": 24}, {"n": 8}, batch_size=4, max_steps=2)
    plan, summary = _plan_train_export(cfg, tmp_path / "run")
    assert any("built with its real weights (1,464,155 parameters)" in n for n in plan["memory"]["notes"])
    assert plan["memory"]["lazy_build_failure"].startswith("paddle.LazyGuard failed in ")
    assert plan["inputs"] == ["x=float32[3,32,100]"] and plan["model"]["loss"] == "paddlefit.examples.ocr:ctc_loss"
    assert plan["model"]["params"] == 1_464_155  # rec_mv3_none_bilstm_ctc.yml's CRNN over 37 classes
    assert summary["steps"] == 2 and summary["eval_loss"] > 0


def test_paddleocr_db_example_on_generated_boxes(tmp_path: Path) -> None:
    """The shipped OCR detection example (examples/ocr-det-db.yaml): PaddleOCR's DB detector of det_mv3_db.yml and
    its DBLoss, the shrink and threshold maps made by PaddleOCR's MakeShrinkMap/MakeBorderMap from JPEG bytes and
    JSON polygons; the eval pass (DBHead's one-channel map) has a loss; plan's CPU peak within 3% of train's."""
    cfg = _ocr_example(tmp_path, "ocr-det-db", {"n": 8, "size": 64}, {"n": 4, "size": 64}, batch_size=2, max_steps=2)
    plan, summary = _plan_train_export(cfg, tmp_path / "run")
    assert plan["inputs"] == ["x=float32[3,64,64]"] and plan["model"]["loss"] == "paddlefit.examples.ocr:db_loss"
    assert summary["steps"] == 2 and summary["eval_loss"] > 0


def test_paddleocr_backbone_with_fixed_parameter_names_plans_twice_in_one_process() -> None:
    """PaddleOCR's rec_resnet_vd names its parameters (`ParamAttr(name="conv1_1_weights")`): a second build in one
    process used to fail with "parameter name [...] have be been used"; each build now has its own
    unique_name.guard, so two plans in one process agree."""
    pytest.importorskip(
        "unstructured_paddleocr", reason="PaddleOCR's training code (unstructured-paddleocr) is not installed"
    )
    from paddlefit.jobspec.inputs import parse_input_spec
    from paddlefit.plan.planner import build_plan
    from paddlefit.plan.request import PlanRequest

    req = PlanRequest(
        model="unstructured_paddleocr.ppocr.modeling.backbones.rec_resnet_vd:ResNet",
        model_args={"in_channels": 3, "layers": 18},
        batch_size=2,
        inputs=[parse_input_spec("float32[3,32,64]")],
        gpus=["T4"],
        time_threads=False,
    )
    first, second = build_plan(req), build_plan(req)
    assert first.model["params"] == second.model["params"] == 11_209_824
    assert first.memory["phase_peak_bytes"]["forward"] == pytest.approx(
        second.memory["phase_peak_bytes"]["forward"], rel=0.01
    )


def test_paddlenlp_published_size_from_the_installed_config_class() -> None:
    """`model_args: {config: ernie-3.0-mini-zh}` builds ERNIE 3.0 mini as PaddleNLP publishes it (its config
    class's `pretrained_init_configuration`, nothing downloaded); other model_args override its fields; an unknown
    size names the close ones."""
    pytest.importorskip("paddlenlp", reason="the `real` extra (PaddleNLP 2.8.1) is not installed")
    from paddlenlp.transformers import ErnieConfig

    from paddlefit.errors import ModelError
    from paddlefit.models import resolve_model

    c = ErnieConfig.pretrained_init_configuration["ernie-3.0-mini-zh"]
    model = resolve_model(
        "paddlenlp.transformers:ErnieForSequenceClassification", {"config": "ernie-3.0-mini-zh", "num_labels": 5}
    ).factory()
    h, i, n = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    assert (model.config.hidden_size, model.config.num_hidden_layers, model.config.num_labels) == (h, n, 5)
    # parameters by hand: word, position, token-type and task-type embeddings + their layer norm; per layer Q, K,
    # V, O (h x h + h each), two layer norms, the feed-forward (h x i + i, i x h + h); the pooler; the classifier
    emb = (c["vocab_size"] + c["max_position_embeddings"] + c["type_vocab_size"] + c["task_type_vocab_size"]) * h
    layer = 4 * (h * h + h) + 2 * 2 * h + (h * i + i) + (i * h + h)
    expected = emb + 2 * h + n * layer + (h * h + h) + (h * 5 + 5)
    assert sum(int(p.size) for p in model.parameters()) == expected
    with pytest.raises(ModelError, match=r"ernie-3\.0-mini-zh"):
        resolve_model("paddlenlp.transformers:ErnieForSequenceClassification", {"config": "ernie-3.0-mini"})
