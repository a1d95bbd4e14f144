"""Serving plans: each engine's fusion rules, the precision rules and the memory arithmetic on hand-built traces, and
the planner's latency-target search and per-million-request price."""

import json
import math
from dataclasses import replace

import pytest

from paddlefit.catalog.gpus import get_gpu
from paddlefit.estimate.gpu_model import compile_step
from paddlefit.estimate.inference import (
    eval_ops,
    forward_kernels,
    fuse,
    peak_activation_bytes,
    weight_bytes,
)
from paddlefit.estimate.optrace import OpTrace, TensorRef, TracedOp
from paddlefit.estimate.perf_params import load_perf_params
from paddlefit.plan.rows import CUDA_CONTEXT_BYTES
from paddlefit.serving.plan import (
    TRT_WORKSPACE_BYTES,
    InferencePoint,
    InferenceTarget,
    ServingSetup,
    cost_per_million,
    forward_point,
    largest_batch_within,
)
from paddlefit.units import MIB

A100 = get_gpu("A100-SXM4-40GB")
V100 = get_gpu("V100-PCIe-32GB")


def act(tid, n, grad=True):
    return TensorRef(tid, n, "float32", False, grad)


def par(tid, n):
    return TensorRef(tid, n, "float32", True, True)


def conv_block(act_op="relu", cls="conv", residual=False):
    """x(1x3x8x8) -> conv 3x3 16 -> batch_norm -> [add residual] -> act: the ops as the recorder writes them."""
    x, w, y = act(0, 192), par(1, 16 * 3 * 9), act(2, 1024)
    ops = [
        TracedOp("conv2d", cls, 2 * 1024 * 27, (x, w), (y,), (1, 64, 16, 27), "NCHW", (3, 3, 1, 1, 1, 1, 8, 8)),
        TracedOp("batch_norm", "norm", 4 * 1024, (y, par(3, 16), par(4, 16)), (act(5, 1024),)),
    ]
    last = ops[-1].outputs[0]
    if residual:
        ops.append(TracedOp("add", "elementwise", 1024, (last, act(9, 1024)), (act(6, 1024),)))
        last = ops[-1].outputs[0]
    ops.append(TracedOp(act_op, "elementwise", 1024, (last,), (act(7, 1024),)))
    return ops


def fused_names(ops, engine, precision="fp32", gpu=A100):
    out, count = fuse(eval_ops(ops), engine, precision, gpu)
    return [o.op for o in out], count


def test_eval_mode_drops_dropout_and_makes_batch_norm_one_affine_pass():
    x, y, z = act(0, 10), act(1, 10), act(2, 10)
    ops = [
        TracedOp("dropout", "elementwise", 0, (x,), (y,)),
        TracedOp("batch_norm", "norm", 40, (y, par(5, 2), par(6, 2)), (z,)),
    ]
    out = eval_ops(ops)
    assert [o.op for o in out] == ["batch_norm"]
    assert out[0].cls == "elementwise" and out[0].flops == 2 * 10  # y = x * scale + shift
    assert out[0].inputs[0].tid == 0  # reads dropout's input
    assert not any(t.grad for o in out for t in (*o.inputs, *o.outputs))


def test_conv_bn_relu_is_one_kernel_on_paddle_inference_and_tensorrt_three_eager():
    assert fused_names(conv_block(), "eager")[0] == ["conv2d", "batch_norm", "relu"]
    names, count = fused_names(conv_block(), "paddle-inference")
    assert names == ["conv2d"] and count == {"conv2d_bn_fuse_pass": 1, "conv2d_add_act_fuse_pass": 1}
    out, _ = fuse(eval_ops(conv_block()), "paddle-inference", "fp32", A100)
    assert [t.tid for t in out[0].inputs] == [0, 1] and [t.tid for t in out[0].outputs] == [7]  # BN params folded
    assert out[0].flops == 2 * 1024 * 27  # the epilogue adds no GEMM FLOPs
    assert fused_names(conv_block(), "tensorrt")[0] == ["conv2d"]


def test_paddle_inference_fuses_only_relu_into_a_conv_and_no_bn_into_a_depthwise_conv():
    assert fused_names(conv_block("hardswish"), "paddle-inference")[0] == ["conv2d", "hardswish"]
    # TensorRT fuses ReLU and clips into a convolution, GELU only in fp16/int8, nothing else (Layer Fusion Catalog)
    assert fused_names(conv_block("hardswish"), "tensorrt")[0] == ["conv2d", "hardswish"]
    assert fused_names(conv_block("relu6"), "tensorrt")[0] == ["conv2d"]
    assert fused_names(conv_block(cls="dwconv"), "paddle-inference")[0] == ["conv2d", "batch_norm", "relu"]
    assert fused_names(conv_block(cls="dwconv"), "tensorrt")[0] == ["conv2d"]


def test_residual_add_joins_the_conv_only_when_relu_follows_on_paddle_inference():
    names, count = fused_names(conv_block(residual=True), "paddle-inference")
    assert names == ["conv2d"] and count["conv2d_add_act_fuse_pass"] == 2
    out, _ = fuse(eval_ops(conv_block(residual=True)), "paddle-inference", "fp32", A100)
    assert 9 in [t.tid for t in out[0].inputs]  # the residual is read by the fused kernel
    assert fused_names(conv_block("sigmoid", residual=True), "paddle-inference")[0] == ["conv2d", "add", "sigmoid"]


def linear_act(act_op, base=0):
    x, w, b, y = act(base, 64), par(base + 1, 64 * 32), par(base + 2, 32), act(base + 3, 32)
    return [
        TracedOp("linear", "gemm", 2 * 64 * 32, (x, w, b), (y,), (1, 1, 32, 64)),
        TracedOp(act_op, "elementwise", 32, (y,), (act(base + 4, 32),)),
    ]


def test_matmul_add_act_fuses_relu_not_gelu_tensorrt_fuses_gelu_in_half_precision_only():
    assert fused_names(linear_act("relu"), "paddle-inference") == (["linear"], {"matmul_add_act_fuse_pass": 1})
    assert fused_names(linear_act("gelu"), "paddle-inference")[0] == ["linear", "gelu"]
    assert fused_names(linear_act("gelu"), "tensorrt")[0] == ["linear", "gelu"]
    assert fused_names(linear_act("gelu"), "tensorrt", "fp16")[0] == ["linear"]
    assert fused_names(linear_act("sigmoid"), "tensorrt", "fp16")[0] == ["linear", "sigmoid"]


def test_tensorrt_times_a_batch_one_fully_connected_layer_by_its_fastest_tactic():
    # VGG's fc6 at batch 1: [1, 25088] x [25088, 4096], a GEMV; cuBLAS's rule runs 128 32x32 tiles over the whole
    # k, TensorRT's builder keeps the fastest tile/split-K, which the weights' read (411 MB) bounds
    w = 25088 * 4096
    ops = [
        TracedOp(
            "linear", "gemm", 2 * w, (act(0, 25088), par(1, w), par(2, 4096)), (act(3, 4096),), (1, 1, 4096, 25088)
        )
    ]
    tr = OpTrace(ops, [], 1, 2)
    rule = forward_point(tr, 1, V100, setup("paddle-inference"))[0].device_s
    tuned = forward_point(tr, 1, V100, setup("tensorrt"))[0].device_s
    weights_s = 4 * w / (V100.mem_bw_gb_s * 1e9)
    assert tuned < rule / 2 and weights_s < tuned < 2 * weights_s


def test_an_intermediate_read_twice_is_never_fused_away():
    ops = [*linear_act("relu"), TracedOp("add", "elementwise", 32, (act(3, 32), act(4, 32)), (act(5, 32),))]
    assert fused_names(ops, "paddle-inference")[0] == ["linear", "relu", "add"]


def test_residual_add_into_layer_norm_and_mask_add_into_softmax():
    x, r, s, ln = act(0, 8), act(1, 8), act(2, 8), act(3, 8)
    ops = [
        TracedOp("add", "elementwise", 8, (x, r), (s,)),
        TracedOp("layer_norm", "norm", 64, (s, par(4, 8), par(5, 8)), (ln,)),
        TracedOp("add", "elementwise", 8, (ln, act(6, 8)), (act(7, 8),)),
        TracedOp("softmax", "softmax", 24, (act(7, 8),), (act(8, 8),)),
    ]
    assert fused_names(ops, "eager")[0] == ["add", "layer_norm", "add", "softmax"]
    names, count = fused_names(ops, "paddle-inference")
    assert names == ["layer_norm", "softmax"]
    assert count == {"add_norm_fuse_pass": 1, "multihead_matmul_fuse_pass (masked softmax)": 1}
    assert fused_names(ops, "tensorrt")[0] == ["layer_norm", "softmax"]


def test_tensorrt_fuses_a_pointwise_chain_into_one_kernel():
    x, a, b, c = act(0, 8), act(1, 8), act(2, 8), act(3, 8)
    ops = [
        TracedOp("sigmoid", "elementwise", 4 * 8, (x,), (a,)),
        TracedOp("multiply", "elementwise", 8, (a, x), (b,)),
        TracedOp("tanh", "elementwise", 8, (b,), (c,)),
    ]
    assert fused_names(ops, "tensorrt")[0] == ["sigmoid"]
    assert fused_names(ops, "paddle-inference") == (["sigmoid", "tanh"], {"silu_fuse_pass": 1})


def test_peak_activation_bytes_by_liveness():
    # x(100) -> a(200); x, a -> b(50) ; b -> c(10): live sets while each op runs
    x, a, b, c = act(0, 100), act(1, 200), act(2, 50), act(3, 10)
    ops = [
        TracedOp("relu", "elementwise", 0, (x,), (a,)),
        TracedOp("add", "elementwise", 0, (x, a), (b,)),
        TracedOp("relu", "elementwise", 0, (b,), (c,)),
    ]
    # op0: x + a = 300; op1: x + a + b = 350; op2: b + c = 60 elements
    assert peak_activation_bytes(ops, "fp32") == 350 * 4
    assert peak_activation_bytes(ops, "fp16") == 350 * 2
    ids = TensorRef(9, 100, "int64")
    assert (
        peak_activation_bytes([TracedOp("embedding", "embedding", 0, (ids, par(8, 1000)), (act(10, 400),))], "fp16")
        == 100 * 8 + 400 * 2
    )


def test_weight_bytes_per_precision():
    ops = eval_ops(conv_block()) + linear_act("relu", base=100)  # conv w 432, bn 2 x 16, linear w 2048 + b 32
    assert weight_bytes(ops, "fp32") == 4 * (432 + 32 + 2048 + 32)
    assert weight_bytes(ops, "fp16") == 2 * (432 + 32 + 2048 + 32)
    assert weight_bytes(ops, "int8") == 432 + 2 * 32 + 2048 + 2 * 32  # GEMM/conv weights 1 byte, the rest fp16


def test_int8_moves_gemms_to_the_int8_unit_with_int8_bytes():
    ops, _ = fuse(eval_ops(linear_act("relu")), "tensorrt", "int8", A100)
    half = forward_kernels(ops, "fp16", A100)
    int8 = forward_kernels(ops, "int8", A100)
    (g16,), (g8,) = [[k for k in ks if k.cls == "gemm"] for ks in (half, int8)]
    assert g16.unit == "half" and g8.unit == "int8" and g8.bytes == g16.bytes / 2
    t16 = compile_step([g16], A100, "fp16-o2").peak[0]
    t8 = compile_step([g8], A100, "fp16-o2").peak[0]
    assert t8 == A100.int8_tops * 1e12 and t16 == A100.fp16_tflops * 1e12


def one_gemm_trace(m=4096, k=4096, n=4096):
    def build(b):
        x, w, y = act(0, b * m * k), par(1, k * n), act(2, b * m * n)
        return [TracedOp("linear", "gemm", 2 * b * m * k * n, (x, w), (y,), (1, b * m, n, k))]

    return OpTrace(build(1), build(2), 1, 2)


def setup(engine="paddle-inference", precision="fp32", latency_s=None):
    return ServingSetup(engine, precision, latency_s, load_perf_params(), 0.9, CUDA_CONTEXT_BYTES)


def test_point_latency_is_copy_plus_the_slower_of_kernels_and_host_per_engine():
    tr = one_gemm_trace(64, 64, 64)  # one linear: x [b*64, 64] float32 in, y [b*64, 64] float32 out
    s = replace(setup(), request_bytes=64 * 64 * 4)
    p, _, w = forward_point(tr, 3, A100, s)
    ks = forward_kernels(eval_ops(tr.at(3)), "fp32", A100)
    t, _ = compile_step(ks, A100, "fp32").times(s.params)
    copy = (3 * 64 * 64 * 4 + 3 * 64 * 64 * 4) / (A100.pcie_gb_s * 1e9)  # request in, the result back
    host = s.params.get("predictor_call_s") + 1 * s.params.get("predictor_op_s")
    assert (p.device_s, p.copy_s, p.host_s) == (
        pytest.approx(float(t.sum()), rel=1e-12),
        pytest.approx(copy),
        pytest.approx(host),
    )
    assert p.latency_s == pytest.approx(copy + max(float(t.sum()), host), rel=1e-12)
    assert p.bound == ("host" if host > t.sum() else "device")
    assert w == 64 * 64 * 4 and p.build_peak_bytes is None
    e, _, _ = forward_point(tr, 3, A100, replace(setup("eager"), request_bytes=64 * 64 * 4))
    assert e.host_s == pytest.approx((1 + 2) * s.params.get("host_op_s"))  # the op, to_tensor and numpy()
    assert e.latency_s == pytest.approx(copy + max(float(t.sum()), e.host_s), rel=1e-12)


def test_a_tiny_model_is_host_bound_and_its_rate_is_capped_by_the_predictor_call():
    tr = one_gemm_trace(1, 8, 8)  # 128 FLOPs: nothing for a GPU
    p, _, _ = forward_point(tr, 1, A100, setup())
    call = load_perf_params().get("predictor_call_s")
    assert p.bound == "host" and p.host_s >= call
    assert p.samples_per_s <= 1 / call  # never faster than one predictor call per request


def test_tensorrt_build_peak_arithmetic():
    tr = one_gemm_trace(64, 64, 64)
    p, _, w = forward_point(tr, 2, A100, setup("tensorrt", "fp16"))
    acts = (2 * 64 * 64 + 2 * 64 * 64) * 2  # x and y at batch 2, fp16
    assert w == 64 * 64 * 2
    assert p.peak_bytes == w + acts
    assert p.build_peak_bytes == 64 * 64 * 4 + w + TRT_WORKSPACE_BYTES + acts


def test_largest_batch_within_the_latency_target():
    tr = one_gemm_trace(256, 1024, 1024)
    target = forward_point(tr, 10, V100, setup())[0].latency_s
    best = largest_batch_within(tr, V100, setup(latency_s=target))
    assert best is not None and best >= 10
    assert forward_point(tr, best, V100, setup())[0].latency_s <= target
    assert forward_point(tr, best + 1, V100, setup())[0].latency_s > target
    assert largest_batch_within(tr, V100, setup(latency_s=1e-9)) is None


def test_cost_per_million_requests_arithmetic():
    from paddlefit.catalog.price_csv import InstancePrice

    point = InferencePoint(8, 0.008, 1000.0, 1, None, True)
    t = InferenceTarget("T4", "gpu", 1, 1, 1, [point], serving=point)
    rows = [
        InstancePrice("aws", "g4dn.xlarge", "T4", 1, 4, 16, 3.6, 1.8, "us-east-1", "test"),
        InstancePrice("gcp", "four", "T4", 4, 8, 32, 7.2, None, "us", "test"),
    ]
    out = cost_per_million([t], rows, [get_gpu("T4")])
    assert [r["instance_type"] for r in out] == ["four", "g4dn.xlarge"]
    # 7.2 USD/h / (4 x 1000 req/s x 3600 s) x 1e6 = 0.5 USD; 3.6 / (1000 x 3600) x 1e6 = 1.0
    assert math.isclose(out[0]["usd_per_million"], 0.5) and out[0]["spot_usd_per_million"] is None
    assert math.isclose(out[1]["usd_per_million"], 1.0) and math.isclose(out[1]["spot_usd_per_million"], 0.5)


def cli(*args):
    import os
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "paddlefit.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, COLUMNS="200"),
    )


def test_plan_inference_json_and_cost_inference_give_one_answer():
    common = [
        "lenet",
        "--inference",
        "--gpu",
        "T4",
        "--gpu",
        "V100-PCIe-32GB",
        "--engine",
        "tensorrt",
        "--precision",
        "int8",
        "-b",
        "1",
        "-b",
        "4",
        "--latency-ms",
        "1",
        "--json",
    ]
    r = cli("plan", *common, "--no-cpu")
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout)
    assert d["kind"] == "inference" and d["model"]["kind"] == "zoo" and d["batch_sizes"] == [1, 4]
    t4, v100 = d["targets"]
    assert [set(p) for p in t4["inference"]] == [
        {
            "batch_size",
            "latency_s",
            "samples_per_s",
            "peak_bytes",
            "build_peak_bytes",
            "fits",
            "device_s",
            "host_s",
            "copy_s",
            "bound",
        }
    ] * 2
    assert all(p["latency_s"] == pytest.approx(p["copy_s"] + max(p["device_s"], p["host_s"])) for p in t4["inference"])
    assert t4["measured_error"] is None and "not checked against any measurement" in d["assumptions"]["measured_error"]
    assert all(p["build_peak_bytes"] > p["peak_bytes"] for p in t4["inference"])
    assert t4["max_batch_within_latency"] >= 1 and t4["serving"]["latency_s"] <= 1e-3
    assert v100["inference"] == [] and "INT8" in v100["notes"][0]  # Volta has no INT8 tensor cores
    rows = d["cost_per_million_requests"]
    assert rows and {row["gpu"] for row in rows} == {"T4"}
    for row in rows:
        rps = row["gpus"] * t4["serving"]["samples_per_s"]
        assert row["usd_per_million"] == pytest.approx(row["on_demand_usd_per_hour"] / (rps * 3600) * 1e6)
    c = cli("cost", *common)
    assert c.returncode == 0, c.stderr[-2000:]
    assert json.loads(c.stdout)["cost_per_million_requests"] == rows


@pytest.mark.parametrize(
    "args, says",
    [
        (["--inference", "--precision", "int8"], "--engine tensorrt"),
        (["--inference", "--engine", "onnx"], "--engine onnx"),
        (["--inference", "-b", "0"], "--batch-size"),
        (["--inference", "--precision", "fp16-o1"], "serving takes one of"),
        (["--inference", "--optimizer", "adam"], "--optimizer"),
        (["--latency-ms", "5"], "add `--inference`"),
        (["-b", "1", "-b", "2"], "a training plan takes one micro-batch"),
    ],
)
def test_plan_inference_bad_options_exit_2_naming_the_option(args, says):
    r = cli("plan", "lenet", "--no-cpu" if "--inference" in args else "--gpu=T4", *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert says in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "args, says",
    [
        (["--epochs", "3", "--loss", "mse"], "`--loss`, `--epochs` do not apply to `--inference`"),
        (["--spot"], "`--spot` does not apply to `--inference`"),
        (["--engine", " "], "`--engine` is empty"),
    ],
)
def test_cost_inference_refuses_training_options_like_plan(args, says):
    r = cli("cost", "lenet", "--inference", *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert says in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_plan_inference_cpu_row_is_measured():
    r = cli("plan", "lenet", "--inference", "--gpu", "T4", "-b", "1", "-b", "4", "--threads", "1", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    cpu = json.loads(r.stdout)["targets"][0]
    assert cpu["kind"] == "cpu" and cpu["measured"] is True
    assert [(p["batch_size"], p["threads"]) for p in cpu["inference"]] == [(1, 1), (4, 1)]
    for p in cpu["inference"]:
        assert 0 < p["latency_s"] <= p["p95_s"] and p["peak_bytes"] > 100 * MIB  # Paddle's own RSS


@pytest.mark.slow
def test_sigterm_during_the_cpu_measurement_leaves_no_child_and_no_model_copy(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    env = dict(os.environ, TMPDIR=str(tmp_path))
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "paddlefit.cli.main",
            "plan",
            "resnet18",
            "--inference",
            "--gpu",
            "T4",
            "-b",
            "16",
            "--threads",
            "1",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    child, deadline = None, time.monotonic() + 300
    while child is None and time.monotonic() < deadline and p.poll() is None:
        for c in psutil.Process(p.pid).children(recursive=True):
            try:
                if "paddlefit.serving.cpu_bench" in " ".join(c.cmdline()):
                    child = c
            except psutil.Error:  # a short-lived child (Paddle's `ldd --version` shell) gone or a zombie meanwhile
                continue
        time.sleep(0.2)
    assert child is not None, p.stderr.read().decode()[-2000:]
    time.sleep(1.0)  # the child is measuring
    p.send_signal(signal.SIGTERM)  # the parent only, as `timeout` and schedulers send it
    assert p.wait(timeout=60) == 143
    child.wait(timeout=15)  # gone: psutil raises TimeoutExpired if it still runs
    assert list(tmp_path.glob("paddlefit-serve-*")) == []  # the exported copy of the model is removed


def test_exported_program_references_dynamic_dims_and_ambiguous_folders(tmp_path):
    import paddle
    from paddle.static import InputSpec

    from paddlefit.errors import ModelError
    from paddlefit.serving.model import program_prefix, resolve_served

    class Enc(paddle.nn.Layer):
        def __init__(self, width):
            super().__init__()
            self.e, self.lin = paddle.nn.Embedding(1000, width), paddle.nn.Linear(width, 4)

        def forward(self, ids):
            return self.lin(self.e(ids)).mean(axis=1)

    paddle.jit.save(Enc(32), str(tmp_path / "dyn" / "model"), input_spec=[InputSpec([None, None], "int64", "ids")])
    with pytest.raises(ModelError, match=r"--input ids=int64\[128\]"):
        resolve_served(str(tmp_path / "dyn"), None, None, None)
    served = resolve_served(str(tmp_path / "dyn" / "model"), None, ["ids=int64[128]:1000"], None)  # the prefix
    assert served.kind == "exported" and [str(s) for s in served.specs] == ["ids=int64[128]:1000"]
    assert served.params == 1000 * 32 + 32 * 4 + 4
    gemm = [o.gemm for o in served.trace.at(8) if o.cls == "gemm"]
    assert gemm == [(1, 8 * 128, 4, 32)]  # the linear at batch 8 x 128 tokens
    paddle.jit.save(Enc(16), str(tmp_path / "dyn" / "other"), input_spec=[InputSpec([None, 128], "int64", "ids")])
    with pytest.raises(ModelError, match="2 exported programs"):
        program_prefix(str(tmp_path / "dyn"))
    (tmp_path / "dyn" / "model.pdiparams").write_bytes((tmp_path / "dyn" / "other.pdiparams").read_bytes())
    with pytest.raises(ModelError, match="belongs to another model"):
        resolve_served(str(tmp_path / "dyn" / "model.json"), None, ["ids=int64[128]"], None)
    assert resolve_served("lenet", None, None, None).kind == "zoo"  # a zoo name is never taken for a path


def test_the_cpu_rows_thread_counts_are_refused_when_asked_not_after_the_gpu_rows():
    # `plan --inference --threads 0` used to exit 0 with the refusal as a footnote under the tables
    import os

    from paddlefit.errors import PaddlefitError
    from paddlefit.serving.job import InferenceRequest

    for bad in (0, -2, (os.cpu_count() or 1) + 1):
        with pytest.raises(PaddlefitError, match=f"`--threads {bad}`: give thread counts from 1 to"):
            InferenceRequest(model="lenet", threads=[bad])
    assert InferenceRequest(model="lenet", threads=[1]).threads == [1]
