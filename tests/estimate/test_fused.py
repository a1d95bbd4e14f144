"""Fused kernels as the user runs them: flash attention and Paddle's incubate fused ops traced as one kernel each
(FLOPs and bytes by hand), the eager -> flash rewrite of `attention: flash`, and the option through spec, request
and CLI."""

import os
import subprocess
import sys

import paddle
import pytest
import tinymodels

from paddlefit.catalog.gpus import get_gpu, load_gpus
from paddlefit.estimate.fused import attention_note, flash_trace, fused_amp_note
from paddlefit.estimate.kernels import step_kernels
from paddlefit.job.resolve import JobOptions, resolve_job
from paddlefit.jobspec.inputs import parse_input_spec
from paddlefit.jobspec.spec import Precision, load_job_spec
from paddlefit.plan import PlanRequest, build_plan
from paddlefit.plan.jobs import plan_request
from paddlefit.probe.flops import count_flops
from paddlefit.probe.fused_ref import cpu_reference_kernels
from paddlefit.probe.recorder import record_trace

A100 = get_gpu("A100-SXM4-40GB", load_gpus([]))


def _kernels(ops, precision="bf16-o1"):
    return step_kernels(ops, precision, A100, "adam", 1000, 4)


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_is_one_flash_kernel_with_its_own_flops_and_bytes(causal):
    paddle.seed(0)
    m = tinymodels.FusedAttention(causal=causal)
    b, s, h, d = 2, 32, 4, 16
    ops = record_trace(m, [paddle.randn([b, s, 64])]).ops1
    assert [o.op for o in ops if o.cls not in ("view",)] == ["linear", "flash_attn", "reduce_mean", "linear"]
    att = next(o for o in ops if o.cls == "attention")
    fwd = 4 * b * h * s * s * d // (2 if causal else 1)  # 4·B·H·Sq·Sk·D, halved when causal
    assert att.flops == fwd and att.gemm == (b * h, s, d, s)
    count = count_flops(m, [paddle.randn([b, s, 64])])
    assert count.forward_by_op["attention"] == fwd
    fk, bk = [k for k in _kernels(ops) if k.cls == "attention"]
    qkv_o = 4 * b * s * h * d * 2  # Q, K, V, O once each in bf16 (AMP white list: flash_attn)
    lse = 4 * b * h * s  # fp32 log-sum-exp per query row; no S x S matrix
    assert (fk.flops, fk.bytes, fk.unit) == (fwd, qkv_o + lse, "half")
    # backward: 2.5x the forward FLOPs (S recomputed); reads Q, K, V, O, dO, lse, writes dQ, dK, dV
    assert (bk.flops, bk.bytes, bk.gemm) == (2.5 * fwd, qkv_o // 4 * 8 + lse, (b * h, s, d, s))
    assert not [k for k in _kernels(ops) if k.cls == "softmax" or k.op == "matmul"]


def test_flash_attention_api_is_traced_too():
    from paddle.nn.functional.flash_attention import flash_attention

    class M(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc = paddle.nn.Linear(32, 96)

        def forward(self, x):
            q, k, v = self.fc(x).reshape([x.shape[0], x.shape[1], 3, 2, 16]).unbind(2)
            return flash_attention(q, k, v, causal=True)[0].mean()

    ops = record_trace(M(), [paddle.randn([3, 8, 32])]).ops1
    att = [o for o in ops if o.cls == "attention"]
    assert len(att) == 1 and att[0].flops == 4 * 3 * 2 * 8 * 8 * 16 // 2
    assert not [o for o in ops if o.op in ("matmul", "softmax")]


class IncubateBlock(paddle.nn.Layer):
    """RMSNorm, rotary embedding, fused linear and bias + swiglu from paddle.incubate.nn.functional."""

    def __init__(self):
        super().__init__()
        self.w = self.create_parameter([32], default_initializer=paddle.nn.initializer.Constant(1.0))
        self.lin = self.create_parameter([32, 64])
        self.b = self.create_parameter([64])

    def forward(self, x):
        import paddle.incubate.nn.functional as IF

        h = IF.fused_rms_norm(x, self.w, None, 1e-6, 2)[0]
        q = IF.fused_rotary_position_embedding(h.reshape([x.shape[0], x.shape[1], 4, 8]))[0]
        y = IF.fused_linear(q.reshape(x.shape), self.lin, self.b)
        return IF.fused_bias_act(y, None, act_method="swiglu")


def test_incubate_fused_ops_run_their_cpu_reference_and_trace_one_kernel_each():
    m = IncubateBlock()
    x = paddle.randn([2, 16, 32])
    x.stop_gradient = False
    with cpu_reference_kernels():  # no CPU kernel (rope, fused_gemm_epilogue, bias_act) or CPU backward (rms_norm)
        m(x).sum().backward()
    assert x.grad.shape == [2, 16, 32]
    ops = [o for o in record_trace(m, [paddle.randn([2, 16, 32])]).ops1 if o.cls != "view"]
    n = 2 * 16 * 32
    assert [(o.op, o.cls, o.flops) for o in ops] == [
        ("rms_norm", "norm", 4 * n),
        ("fused_rotary_position_embedding", "elementwise", 3 * n),
        ("fused_gemm_epilogue", "gemm", 2 * 32 * 64 * 32 + 32 * 64),  # 2·M·N·K + the bias in the epilogue
        ("fused_bias_act", "elementwise", (3 + 1) * n),  # swiglu (3) + bias add (1) per output element
    ]
    assert ops[2].gemm == (1, 32, 64, 32)


def test_paddlenlp_fused_transformer_layer_runs_on_cpu_and_traces_the_gpu_ops_kernels():
    """paddle.incubate.nn.FusedTransformerEncoderLayer (PaddleNLP's BERT/ERNIE with ``fuse=True``) has no CPU kernel;
    its reference runs forward and backward here, and the trace holds the kernels fused_attention_op.cu and
    fused_feedforward_op.cu run: four attention GEMMs and two FFN GEMMs, bias + dropout + residual + LayerNorm as
    one kernel after each, bias + GELU as one."""
    from paddle.incubate.nn import FusedTransformerEncoderLayer

    paddle.seed(0)
    b, s, e, h, f = 2, 8, 64, 4, 256
    layer = FusedTransformerEncoderLayer(e, h, f, activation="gelu")
    x = paddle.randn([b, s, e])
    x.stop_gradient = False
    with cpu_reference_kernels():
        layer(x).sum().backward()
    assert x.grad.shape == [b, s, e] and layer.fused_attn.qkv_weight.grad.shape == [3, h, e // h, e]
    ops = [o for o in record_trace(layer, [paddle.randn([b, s, e])]).ops1 if o.cls not in ("view", "move")]
    t, d = b * s, e // h
    assert [(o.op, o.gemm) for o in ops if o.cls == "gemm"] == [
        ("matmul", (1, t, 3 * e, e)),
        ("matmul", (b * h, s, s, d)),
        ("matmul", (b * h, s, d, s)),
        ("matmul", (1, t, e, e)),
        ("matmul", (1, t, f, e)),
        ("matmul", (1, t, e, f)),
    ]
    rest = [(o.op, o.cls, o.flops) for o in ops if o.cls != "gemm"]
    assert rest == [
        ("add", "elementwise", t * 3 * e),
        ("multiply", "elementwise", t * e),
        ("softmax", "softmax", 3 * b * h * s * s),
        ("dropout", "elementwise", 0),
        ("fused_bias_residual_layernorm", "norm", 8 * t * e),
        ("fused_bias_act", "elementwise", (5 + 1) * t * f),  # gelu (5) + bias add (1) per element
        ("fused_bias_residual_layernorm", "norm", 8 * t * e),
    ]
    # fused_attention and fused_feedforward are on Paddle's FP16 white list: under AMP every kernel inside runs in
    # half, the LayerNorm and softmax too (the unfused layer keeps those in fp32, black list)
    from paddlefit.estimate.amp import assign_dtypes

    traced = record_trace(layer, [paddle.randn([b, s, e])]).ops1
    assert {a.compute for a in assign_dtypes(traced, "fp16-o1") if a.op.cls != "view"} == {"float16"}
    assert {a.op.scope for a in assign_dtypes(traced, "fp16-o1")} == {"fused_attention", "fused_feedforward"}
    # under bf16 neither op is on a list: Paddle promotes the whole op, fp32 at O1 (its parameters are fp32)
    assert {a.compute for a in assign_dtypes(traced, "bf16-o1") if a.op.cls != "view"} == {"float32"}
    assert "fp16 AMP white list only" in fused_amp_note(record_trace(layer, [x]), "bf16-o1")
    assert fused_amp_note(record_trace(layer, [x]), "fp16-o1") == ""
    # the host dispatches each fused op once: two per layer
    with cpu_reference_kernels():  # as the probe counts (plan/measure.py)
        assert count_flops(layer, [paddle.randn([b, s, e])]).forward_ops == 2
    # its attention core is the fused op's: `attention: flash` leaves it (its GPU kernel has no flash path)
    flash, blocks = flash_trace(record_trace(layer, [paddle.randn([1, s, e])], [paddle.randn([2, s, e])]))
    assert blocks == 0 and "no flash path" in attention_note(blocks, flash)
    # the unfused layer runs each of those epilogues as separate kernels
    plain = paddle.nn.TransformerEncoderLayer(e, h, f, activation="gelu")
    eager = [o for o in record_trace(plain, [paddle.randn([b, s, e])]).ops1 if o.cls not in ("view", "move", "gemm")]
    assert len(eager) > len(rest)


class ByName(paddle.nn.Layer):
    """Calls the fused functions imported by name (module top), with Paddle's own argument checks in the way."""

    def __init__(self, qkv_rows=3, act="gelu"):
        super().__init__()
        self.qkv = self.create_parameter([qkv_rows, 2, 8, 16])
        self.out = self.create_parameter([16, 16])
        self.w1, self.w2 = self.create_parameter([16, 32]), self.create_parameter([32, 16])
        self.act = act

    def forward(self, x):
        from paddle.incubate.nn.functional import fused_feedforward, fused_multi_head_attention

        h = fused_multi_head_attention(x, self.qkv, self.out, dropout_rate=0.0, attn_dropout_rate=0.0)
        return fused_feedforward(h, self.w1, self.w2, activation=self.act)


def test_fused_functions_imported_by_name_keep_paddles_checks_and_kernel_limits():
    x = paddle.randn([2, 8, 16])
    with cpu_reference_kernels():
        ops = [o for o in record_trace(ByName(), [x]).ops1 if o.cls == "gemm"]
        assert {o.scope for o in ops} == {"fused_attention", "fused_feedforward"} and len(ops) == 6
        with pytest.raises(AssertionError, match="qkv_weight should be"):  # Paddle's own check, before the op
            ByName(qkv_rows=6)(x)
        with pytest.raises(ValueError, match="only supports gelu or relu"):  # the GPU kernel's limit
            ByName(act="silu")(x)
    # a call the stand-in does not cover (a KV cache) reaches Paddle's CPU build, and the error names the op
    from paddlefit.models.build import failure_message

    err = AttributeError("module 'paddle.base.libpaddle.eager.ops.legacy' has no attribute 'fused_attention'")
    assert "Paddle has no CPU kernel for `fused_attention`" in failure_message("m:f", err, "train")
    # a kernel the CPU has in other dtypes: the model was cast to half precision, not a fused op
    half = RuntimeError(
        "(NotFound) The kernel with key (CPU, Undefined(AnyLayout), float16) of kernel `matmul` is "
        "not registered. Selected wrong DataType `float16`."
    )  # Paddle 3.3.1's text
    said = failure_message("m:f", half, "train")
    assert "no CPU kernel for `matmul` in float16" in said and "--precision" in said and "fused" not in said


def test_paddlenlp_bert_with_fuse_true_is_planned_and_its_fused_epilogues_are_faster_on_the_gpu():
    """PaddleNLP's BertForSequenceClassification with fuse=True could not be planned (its probe hit 'no attribute
    fused_attention'); now it is, with the GEMMs of the unfused model and fewer memory-bound kernels."""
    pytest.importorskip("paddlenlp", reason="the `real` extra (PaddleNLP 2.8.1) is not installed")

    def plan(model):
        return build_plan(
            PlanRequest(
                model=f"tinymodels:{model}",
                batch_size=8,
                inputs=[parse_input_spec("int64[64]:1000")],
                precision=Precision.FP16_O1,
                gpus=["A100-SXM4-40GB"],
                probe_budget_s=1.0,
                use_runs=False,
                time_threads=False,
            )
        )

    plans = {m: plan(m) for m in ("paddlenlp_fused_bert", "paddlenlp_bert")}
    fused, plain = (next(t for t in p.targets if t.name == "A100-SXM4-40GB") for p in plans.values())
    cpu = [next(t for t in p.targets if t.name == "cpu") for p in plans.values()]
    said = "Paddle cannot run fused_attention, fused_feedforward on a CPU"  # the stand-ins' row says so
    assert any(said in n for n in cpu[0].notes) and not any("cannot run" in n for n in cpu[1].notes)
    assert [p.model["gpu_only_ops"] for p in plans.values()] == [["fused_attention", "fused_feedforward"], []]
    tb = fused.time_breakdown, plain.time_breakdown
    # per layer the fused op runs Q, K and V as one GEMM (2 GEMMs fewer in forward, data and weight gradient)
    assert tb[0]["gemm"]["kernels"] == tb[1]["gemm"]["kernels"] - 2 * 2 * 3 == 42
    # its epilogues are fused and every kernel inside runs in half: fewer element-wise kernels and casts
    for cls in ("elementwise", "amp_cast"):
        assert tb[0][cls]["kernels"] < tb[1][cls]["kernels"] and tb[0][cls]["seconds"] < tb[1][cls]["seconds"]
    assert sum(v["seconds"] for v in tb[0].values()) < 0.8 * sum(v["seconds"] for v in tb[1].values())


def test_eager_attention_rewritten_to_one_flash_kernel():
    paddle.seed(0)
    b, s, h, d = 2, 64, 4, 16
    tr = record_trace(tinymodels.EagerAttention(), [paddle.randn([1, s, 64])], [paddle.randn([2, s, 64])])
    eager = tr.at(b)
    assert [o.op for o in eager if o.op in ("matmul", "softmax")] == ["matmul", "softmax", "matmul"]
    flash, blocks = flash_trace(tr)
    ops = flash.at(b)
    assert blocks == 1 and flash.aligned
    assert not [o for o in ops if o.op in ("matmul", "softmax")]
    # the Q scale of nn.MultiHeadAttention and the probabilities' dropout went into the kernel
    assert sum(o.op == "multiply" for o in eager) == sum(o.op == "multiply" for o in ops) + 1
    assert sum(o.op == "dropout" for o in eager) == sum(o.op == "dropout" for o in ops) + 1
    att = next(o for o in ops if o.cls == "attention")
    assert att.flops == 4 * b * h * s * s * d and att.gemm == (b * h, s, d, s)
    ks = _kernels(ops)
    assert not [k for k in ks if k.cls == "softmax" or k.op.startswith("matmul")]
    assert [k.flops for k in ks if k.cls == "attention"] == [att.flops, 2.5 * att.flops]


@pytest.mark.slow
def test_flash_attention_plan_is_faster_and_smaller_on_a100_only():
    def plan(attention):
        return build_plan(
            PlanRequest(
                model="tinymodels:EagerAttention",
                batch_size=4,
                inputs=[parse_input_spec("float32[1024,64]")],
                precision=Precision.BF16_O1,
                gpus=["A100-SXM4-40GB", "T4"],
                attention=attention,
                explain=["A100-SXM4-40GB"],
                probe_budget_s=1.0,
                use_runs=False,
                time_threads=False,
            )
        )

    eager, flash = plan("eager"), plan("flash")
    rows = {(p.assumptions["attention"], t.name): t for p in (eager, flash) for t in p.targets}
    e, f = rows["eager", "A100-SXM4-40GB"], rows["flash", "A100-SXM4-40GB"]

    def device_s(t):  # the kernels' sum (the step is never below the host floor measured here, which is noisy)
        return sum(v["seconds"] for v in t.time_breakdown.values())

    assert device_s(f) < 0.7 * device_s(e)  # measured 1.20 vs 2.13 ms at batch 4
    assert f.peak_bytes < 0.1 * e.peak_bytes  # 11 vs 174 MB: no S x S probabilities, dropout mask, P kept
    assert "attention" in f.time_breakdown and "attention" not in e.time_breakdown
    assert "flash attention (1 block)" in f.notes
    assert rows["flash", "T4"].step_time_s == rows["eager", "T4"].step_time_s  # CC 7.5: no FlashAttention-2
    assert any("CC 8.0+" in n for n in rows["flash", "T4"].notes)
    assert rows["flash", "cpu"].peak_bytes == rows["eager", "cpu"].peak_bytes  # the CPU row is what runs here
    top = {p.assumptions["attention"]: {r["op"] for r in p.explain["A100-SXM4-40GB"]} for p in (eager, flash)}
    assert {"matmul", "softmax", "matmul.dgrad"} <= top["eager"]  # the S x S kernels are the eager step's slowest
    assert "flash_attn.grad" in top["flash"] and not {"matmul", "softmax", "matmul.dgrad"} & top["flash"]
    assert flash.assumptions["flash_attention_blocks"] == 1 and eager.assumptions["flash_attention_blocks"] == 0


def test_attention_round_trips_through_the_spec_and_the_option_wins(tmp_path):
    f = tmp_path / "job.yaml"
    f.write_text("model: lenet\nattention: flash\n")
    assert load_job_spec(f).attention == "flash"
    job = resolve_job(JobOptions(config=f))
    assert job.attention == "flash" and plan_request(job).attention == "flash"
    assert resolve_job(JobOptions(config=f, attention="eager")).attention == "eager"
    assert resolve_job(JobOptions(model="lenet")).attention == "eager"
    with pytest.raises(Exception, match="`attention` must be eager or flash"):
        PlanRequest(model="lenet", attention="fast")


def test_bad_attention_value_exits_2_naming_the_key(tmp_path):
    f = tmp_path / "job.yaml"
    f.write_text("model: lenet\nattention: fast\n")
    r = subprocess.run(
        [sys.executable, "-m", "paddlefit.cli.main", "plan", "--config", str(f)],
        capture_output=True,
        text=True,
        env=dict(os.environ, COLUMNS="200"),
        timeout=120,
    )
    assert r.returncode == 2 and "key `attention`" in r.stderr and "'eager' or 'flash'" in r.stderr, r.stderr


def test_training_a_fused_model_on_a_cpu_is_refused_naming_the_op_and_the_way_out(tmp_path, data_dir):
    """A new user's finding: `train` of a model with Paddle's fused layers on a CPU predicted a CPU step (from the
    probe's stand-ins) and then failed at step 1 with Paddle's AttributeError. The prediction now says why there is
    none, and the step names the op, that it is GPU-only, and the way out (exit 2: the model cannot run here)."""
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"model: tinymodels:fused_ffn_digits\ninputs: ['float32[1,8,8]']\ndata: {{train: digits}}\n"
        f"batch_size: 16\nmax_steps: 2\nrun_dir: {tmp_path / 'run'}\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PADDLEFIT_NO_PREDICT"}
    env.update(PYTHONPATH=str(data_dir), COLUMNS="300")
    r = subprocess.run(
        [sys.executable, "-m", "paddlefit.cli.main", "train", str(spec), "--resume", "never"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    said = " ".join(r.stderr.split())
    assert "not predicted: Paddle has no CPU kernel for fused_feedforward: this model trains on a GPU only" in said
    assert "calls `fused_feedforward` in FusedFeedForward.forward" in said and "train it on a CUDA GPU" in said
    assert "BertConfig(fuse=False)" in said and "AttributeError" not in said
