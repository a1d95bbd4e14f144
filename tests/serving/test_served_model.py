"""What `plan --inference` serves: paths that do not exist, transformers planned from their shape (zoo names,
built-in LLMs, config files), the CPU row's time budget, and the measured error every row quotes."""

import json
import os
import subprocess
import sys
import time

import pytest

from paddlefit.catalog.serving_accuracy import serving_accuracy, serving_error, serving_error_text
from paddlefit.errors import InputSpecError, ModelError
from paddlefit.serving.job import InferenceRequest, budget_notes, plan_inference
from paddlefit.serving.model import resolve_served
from paddlefit.serving.plan import InferencePoint, InferenceTarget


def test_a_missing_path_says_it_does_not_exist_and_what_an_export_holds(tmp_path):
    with pytest.raises(ModelError, match=r"no such file or folder.*model\.pdiparams"):
        resolve_served(str(tmp_path / "nope" / "inference"), None, None, None)
    r = subprocess.run(
        [sys.executable, "-m", "paddlefit", "plan", "runs/nope/inference", "--inference"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ, COLUMNS="200"),
        timeout=300,
    )
    assert r.returncode == 2 and "runs/nope/inference: no such file or folder" in r.stderr
    assert "Unknown model" not in r.stderr


def test_builtin_llms_and_config_files_are_planned_from_their_shape(tmp_path):
    served = resolve_served("llama-2-7b", None, ["int64[2048]"], None)
    assert served.kind == "config" and served.trace.source == "analytic" and served.layer is None
    assert served.params == 6_738_415_616 and str(served.specs[0]) == "int64[2048]"
    raw = {
        "model_type": "bert",
        "hidden_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 1024,
        "vocab_size": 1000,
        "max_position_embeddings": 128,
        "hidden_act": "gelu",
    }
    (tmp_path / "config.json").write_text(json.dumps(raw))
    from_dir = resolve_served(str(tmp_path), None, ["int64[128]"], None)
    assert from_dir.kind == "config" and from_dir.trace.source == "analytic"
    with pytest.raises(InputSpecError, match=r"--input int64\[128\]"):
        resolve_served(str(tmp_path / "config.json"), None, None, None)
    with pytest.raises(InputSpecError, match="exceeds its max_position 128"):
        resolve_served(str(tmp_path / "config.json"), None, ["int64[256]"], None)


def test_a_zoo_transformer_is_traced_from_its_shape_and_its_cpu_row_waits_to_be_asked():
    t0 = time.perf_counter()
    plan = plan_inference(InferenceRequest(model="bert-base", inputs=["int64[128]"], gpus=["T4"], batch_sizes=[1]))
    assert time.perf_counter() - t0 < 60  # no model built: the trace is written from the config
    assert plan.model["kind"] == "zoo" and [t.kind for t in plan.targets] == ["gpu"]
    assert any("planned from its shape" in n and "--cpu-budget-s" in n for n in plan.notes)


def test_budget_notes_name_every_batch_and_thread_count_left_out():
    got = [InferencePoint(1, 0.01, 100.0, 1, None, True, 0.01, 1, 5)]
    target = InferenceTarget("this CPU", "cpu", 1, 1, 1, got, measured=True)
    (note,) = budget_notes(target, [1, 8], [1, 2], 20.0)
    assert "batch 8 (1 thread), batch 1 (2 threads), batch 8 (2 threads) not measured within the 20 s budget" in note
    assert budget_notes(target, [1], [1], 20.0) == []


def test_a_deadline_already_past_starts_no_benchmark(tmp_path):
    from paddlefit.jobspec.inputs import parse_input_specs
    from paddlefit.serving.cpu_bench import benchmark_cpu

    (tmp_path / "model.json").write_text("{}")
    (tmp_path / "model.pdiparams").write_bytes(b"")
    rows = benchmark_cpu(tmp_path / "model", parse_input_specs(["float32[4]"]), [1, 8], [1], deadline=time.time() - 1)
    assert rows == []


def test_every_measured_engine_has_its_error_and_the_others_say_they_have_none():
    assert set(serving_accuracy()) == {"tensorrt/fp32", "eager/fp32"}
    trt = serving_error("tensorrt", "fp32")
    assert 0 < trt["median_abs_error"] < 1 and trt["rows"] > 400 and "PaddleClas" in trt["data"]
    assert f"median {trt['median_abs_error']:.0%} off" in serving_error_text("tensorrt", "fp32")
    assert serving_error("paddle-inference", "fp32") is None
    assert "not checked against any measurement" in serving_error_text("paddle-inference", "fp32")
    # TensorRT's rows were measured on a V100 only: a T4 row says it is unchecked on its architecture
    assert trt["architectures"] == ["volta"] and "measured on volta GPUs only" in serving_error_text("tensorrt", "fp32")
    assert serving_error("tensorrt", "fp32", "volta")["measured_on_this_architecture"] is True
    assert serving_error("tensorrt", "fp32", "turing")["measured_on_this_architecture"] is False
    assert serving_error("eager", "fp32", "turing")["measured_on_this_architecture"] is True


def test_what_a_request_returns_is_what_the_forward_returned(tmp_path):
    import paddle

    from paddlefit.probe.recorder import record_trace
    from paddlefit.serving.plan import forward_point

    class TwoOut(paddle.nn.Layer):  # returns its 4096-wide features and their 10 logits
        def __init__(self):
            super().__init__()
            self.a, self.b = paddle.nn.Linear(64, 4096), paddle.nn.Linear(4096, 10)

        def forward(self, x):
            f = self.a(x)
            return f, self.b(f)

    tr = record_trace(TwoOut(), [paddle.ones([1, 64])], [paddle.ones([2, 64])])
    assert tr.returned == (4 * (4096 + 10), 2 * 4 * (4096 + 10)) and tr.returned_bytes(8) == 8 * 4 * 4106
    from paddlefit.catalog.gpus import get_gpu
    from paddlefit.estimate.perf_params import load_perf_params
    from paddlefit.plan.rows import CUDA_CONTEXT_BYTES
    from paddlefit.serving.plan import ServingSetup

    t4 = get_gpu("T4")
    setup = ServingSetup("paddle-inference", "fp32", None, load_perf_params(), 0.9, CUDA_CONTEXT_BYTES, True, 4 * 64)
    p = forward_point(tr, 4, t4, setup)[0]
    assert p.copy_s == pytest.approx(4 * (4 * 64 + 4 * 4106) / (t4.pcie_gb_s * 1e9))


def test_inputs_a_transformer_cannot_take_and_paths_that_are_not_there(tmp_path):
    with pytest.raises(InputSpecError, match="takes one input of token ids"):
        resolve_served("bert-base", None, ["token_type_ids=int64[16]:2"], None)
    with pytest.raises(InputSpecError, match="exceed bert-base's vocabulary of 30522"):
        resolve_served("bert-base", None, ["int64[16]:99999999"], None)
    with pytest.raises(ModelError, match="MODEL is empty"):
        resolve_served(" ", None, None, None)
    with pytest.raises(ModelError, match="no such file or folder"):
        resolve_served(str(tmp_path / "nothing.yaml"), None, None, None)
    (tmp_path / "model.pdiparams").write_bytes(b"")
    with pytest.raises(ModelError, match=r"no `model.json` or `model.pdmodel` beside it"):
        resolve_served(str(tmp_path / "model.pdiparams"), None, None, None)


def test_a_config_says_why_it_has_no_cpu_row():
    plan = plan_inference(
        InferenceRequest(
            model="llama-2-7b", inputs=["int64[128]"], gpus=["A100-SXM4-80GB"], batch_sizes=[1], cpu_budget_s=30.0
        )
    )
    assert [t.kind for t in plan.targets] == ["gpu"]
    assert any("planned from its shape, with no code here to build it" in n for n in plan.notes)
