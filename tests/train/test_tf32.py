"""TF32 as a setting: the job spec's ``tf32``, ``plan``/``cost --no-tf32`` (fp32 GEMMs/convs on the FP32 CUDA cores),
``train`` setting Paddle's switches, and ``doctor`` reporting ``NVIDIA_TF32_OVERRIDE``."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import paddle
import pytest
import yaml
from paddle import nn

from paddlefit.catalog.gpus import get_gpu
from paddlefit.errors import JobSpecError
from paddlefit.estimate.gpu_model import compile_step, estimate_step
from paddlefit.estimate.kernel_model import gemm_compute_s
from paddlefit.estimate.kernels import step_kernels
from paddlefit.estimate.perf_params import load_perf_params
from paddlefit.jobspec.spec import load_job_spec
from paddlefit.probe.recorder import record_trace

DATA = Path(__file__).resolve().parents[1] / "data"
A100 = get_gpu("A100-SXM4-40GB")
V100 = get_gpu("V100-SXM2-16GB")


def _fp32_over_tf32(p, gpu, gemm=None) -> float:
    """How much longer a compute-bound GEMM takes on the FP32 CUDA cores than on TF32 tensor cores
    (:mod:`paddlefit.estimate.kernel_model`): the same tiles at the peaks' ratio (156 / 19.5 = 8 on an A100) x the
    efficiencies' ratio, unless FP32 is held to what the CUDA cores sustain (the clock under the board power and the
    FFMA issue share, :meth:`~paddlefit.estimate.gpu_model.CompiledStep.sustained_fp32_flops`) for ``gemm``
    (g, m, n, k); without a shape, the largest ratio that ceiling allows."""
    a = gpu.architecture
    tile = gpu.tf32_tflops * p.get("gemm_tf32", a) / (gpu.fp32_tflops * p.get("gemm_fp32", a))
    cap = compile_step([], gpu, "fp32").sustained_fp32_flops(p)
    if gemm is None:
        return tile * max(1.0, gpu.fp32_tflops * 1e12 * p.get("gemm_fp32", a) / cap)
    t32 = gemm_compute_s(
        *gemm, gpu.tf32_tflops * 1e12, gpu.sm_count, p.get("gemm_tf32", a), p.get("gemm_k0", a), p.get("tile_h0", a)
    )
    return float(max(tile * t32, 2 * math.prod(gemm) / cap) / t32)


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(DATA), os.environ.get("PYTHONPATH", "")]),
        COLUMNS="200",
        GLOG_minloglevel="2",
        **(env or {}),
    )
    return subprocess.run(
        [sys.executable, "-m", "paddlefit.cli.main", *args], capture_output=True, text=True, env=full, timeout=600
    )


def _linear_step(batch: int) -> tuple[list, int, int]:
    layer = nn.Linear(1024, 1024)
    layer.train()
    t = record_trace(layer, [paddle.randn([1, 1024])], [paddle.randn([2, 1024])])
    return t.at(batch), 1024 * 1024 + 1024, 2


def test_no_tf32_puts_fp32_gemms_on_the_cuda_cores_at_the_datasheet_ratio():
    """A100 dense peaks (catalog, datasheet): TF32 156, FP32 19.5 TFLOPS. With TF32 off every fp32 GEMM kernel runs
    on the unit ``fp32``; a compute-bound one takes 156/19.5 = 8x the time times the ratio of the two units' fitted
    efficiencies (same FLOPs, same tiles, so the same wave efficiency); memory-bound kernels do not change."""
    assert (A100.tf32_tflops, A100.fp32_tflops) == (156, 19.5)
    ops, n, k = _linear_step(4096)  # (4096 x 1024) . (1024 x 1024): compute-bound on either unit
    on = step_kernels(ops, "fp32", A100, "sgd", n, k)
    off = step_kernels(ops, "fp32", A100, "sgd", n, k, tf32=False)
    gemm_on = {x.op: x.unit for x in on if x.cls == "gemm"}
    assert gemm_on == {"linear": "tf32", "linear.wgrad": "tf32"}
    assert {x.op: x.unit for x in off if x.cls == "gemm"} == {"linear": "fp32", "linear.wgrad": "fp32"}
    assert [(x.op, x.flops, x.bytes) for x in on] == [(x.op, x.flops, x.bytes) for x in off]

    p = load_perf_params()
    e_on = estimate_step(ops, "fp32", A100, "sgd", n, k, p)
    e_off = estimate_step(ops, "fp32", A100, "sgd", n, k, p, tf32=False)
    fixed = p.get("kernel_s", A100.architecture)
    for (kon, t_on, b_on), (_, t_off, b_off) in zip(e_on.kernels, e_off.kernels, strict=True):
        if kon.cls == "gemm":
            assert b_on == b_off == "compute", kon.op
            expect = _fp32_over_tf32(p, A100, kon.gemm)
            assert (t_off - fixed * kon.count) / (t_on - fixed * kon.count) == pytest.approx(expect, rel=1e-9)
        else:
            assert t_off == t_on, kon.op
    assert e_off.device_s > e_on.device_s
    assert A100.peak_flops("fp32") == (156e12, "tf32 tensor")
    assert A100.peak_flops("fp32", tf32=False) == (19.5e12, "fp32")
    assert A100.peak_flops("bf16-o1", tf32=False) == (A100.bf16_tflops * 1e12, "bf16 tensor")  # AMP: no change


def test_no_tf32_changes_nothing_before_ampere_or_under_amp():
    ops, n, k = _linear_step(512)
    p = load_perf_params()
    assert (
        estimate_step(ops, "fp32", V100, "sgd", n, k, p, tf32=False).device_s
        == estimate_step(ops, "fp32", V100, "sgd", n, k, p).device_s
    )
    half = step_kernels(ops, "fp16-o1", A100, "sgd", n, k, tf32=False)
    assert {x.unit for x in half if x.cls == "gemm"} == {"half"}
    assert (
        estimate_step(ops, "fp16-o1", A100, "sgd", n, k, p, tf32=False).device_s
        == estimate_step(ops, "fp16-o1", A100, "sgd", n, k, p).device_s
    )


def _write(path: Path, **keys: object) -> Path:
    path.write_text(yaml.safe_dump({"model": "bert-base", "model_args": {"num_layers": 1}, "batch_size": 16, **keys}))
    return path


def test_spec_key_round_trips_and_a_bad_value_names_the_key(tmp_path):
    assert load_job_spec(_write(tmp_path / "a.yaml")).tf32 is None  # Paddle's default
    spec = load_job_spec(_write(tmp_path / "b.yaml", tf32=False))
    assert spec.tf32 is False
    from paddlefit.rundir.files import spec_yaml

    (tmp_path / "c.yaml").write_text(spec_yaml(spec))  # RUN_DIR/job.yaml as train writes it
    assert load_job_spec(tmp_path / "c.yaml") == spec and "tf32: false" in spec_yaml(spec)
    for bad in ("maybe", 1, "false"):
        with pytest.raises(JobSpecError, match=r"key `tf32`: Input should be a valid boolean"):
            load_job_spec(_write(tmp_path / "d.yaml", tf32=bad))
    r = run("plan", "--config", str(_write(tmp_path / "e.yaml", tf32="maybe")), "--gpu", "A100-SXM4-40GB")
    assert r.returncode == 2 and "key `tf32`" in r.stderr and "Traceback" not in r.stderr


def _gpu_row(doc: dict) -> dict:
    return next(t for t in doc["targets"] if t["kind"] == "gpu")


def test_plan_from_the_spec_and_the_option_on_a100(tmp_path):
    """A BERT-base layer (GEMM-bound) on an A100: the spec's `tf32: false` plans fp32 on the CUDA cores, `--tf32`
    overrides the spec back to Paddle's default; the GEMM groups change unit, compute-bound ones take 8x x the
    efficiency ratio longer, the step grows, the row's note and MFU peak follow. (`--max-probe-gib 0.01` skips the
    CPU probe for the analytic transformer trace, ~3 s a plan: the GPU rows time it with the same kernel model.)"""
    spec = _write(tmp_path / "job.yaml", tf32=False)
    args = (
        "plan",
        "--config",
        str(spec),
        "--gpu",
        "A100-SXM4-40GB",
        "--explain",
        "A100-SXM4-40GB",
        "--json",
        "--max-probe-gib",
        "0.01",
    )
    r_off, r_on = run(*args), run(*args, "--tf32")
    assert r_off.returncode == 0, r_off.stderr
    assert r_on.returncode == 0, r_on.stderr
    off, on = json.loads(r_off.stdout), json.loads(r_on.stdout)
    assert (off["assumptions"]["tf32"], on["assumptions"]["tf32"]) == (False, True)
    assert off["memory"]["method"] == on["memory"]["method"] == "analytic-transformer"
    row_off, row_on = _gpu_row(off), _gpu_row(on)
    assert "fp32 runs as TF32" in row_on["notes"] and "fp32 runs as TF32" not in row_off["notes"]
    assert "TF32 off: fp32 on CUDA cores" in row_off["notes"]
    ex_on = {(g["op"], g["phase"]): g for g in on["explain"]["A100-SXM4-40GB"]}
    ex_off = {(g["op"], g["phase"]): g for g in off["explain"]["A100-SXM4-40GB"]}
    gemms = [key for key, g in ex_on.items() if g["cls"] == "gemm"]
    assert gemms and all(ex_on[key]["unit"] == "tf32" and ex_off[key]["unit"] == "fp32" for key in gemms)
    p = load_perf_params()
    fixed = p.get("kernel_s", "ampere")
    expect = _fp32_over_tf32(p, get_gpu("A100-SXM4-40GB"))
    ratio = {
        key: (ex_off[key]["seconds"] - fixed * ex_off[key]["kernels"])
        / (ex_on[key]["seconds"] - fixed * ex_on[key]["kernels"])
        for key in gemms
    }
    # a group's kernels that are memory-bound (attention's small matmuls at seq 128) grow less than 8x x efficiency;
    # the dense layers (2048 tokens x 768) are compute-bound on both units: exactly that. The weight gradient
    # (768 x 768 outputs over 2048 tokens: 144 tiles of 64 x 64 on 108 SMs) is quantized differently: the tensor
    # cores run 2 waves of one tile, the CUDA cores hold 4 such tiles per SM, so an SM's pair takes 4 tile times
    wgrad = ratio.pop(("linear.wgrad", "backward"))
    assert 1 < wgrad <= 2 * expect * (1 + 1e-9)
    assert all(1 < r <= expect * (1 + 1e-9) for r in ratio.values()), ratio
    dense = [r for (op, _), r in ratio.items() if op.startswith("linear")]
    a = "ampere"  # compute-bound on both units: at least the tiles' ratio, at most what the power cap adds
    tiles_ratio = 8.0 * p.get("gemm_tf32", a) / p.get("gemm_fp32", a)
    assert len(dense) == 2 and all(tiles_ratio * (1 - 1e-6) <= r <= expect * (1 + 1e-9) for r in dense), ratio
    g_on, g_off = row_on["time_breakdown"]["gemm"]["seconds"], row_off["time_breakdown"]["gemm"]["seconds"]
    assert 1 < g_off / g_on <= expect * (1 + 1e-9)  # memory-bound or small GEMMs grow less
    assert row_off["step_time_s"] > 2 * row_on["step_time_s"]
    b, flops = off["batch_size"], off["model"]["train_flops_per_sample"]
    assert row_off["predicted_mfu"] == pytest.approx(flops * b / row_off["step_time_s"] / 19.5e12, rel=1e-9)
    assert row_on["predicted_mfu"] == pytest.approx(flops * b / row_on["step_time_s"] / 156e12, rel=1e-9)


def test_train_on_cpu_with_tf32_false_sets_paddles_switches_and_records_it(tmp_path):
    """On a CPU build the switches exist (Paddle 3.3) and change no kernel: the run trains as without the key."""
    from paddle.base import core

    from paddlefit.train.loop import Trainer, TrainOptions

    base = {
        "model": "paddlefit.models.examples:digits_cnn",
        "data": {"train": "digits", "train_args": {"split": "train"}},
        "batch_size": 16,
        "max_steps": 3,
        "seed": 3,
        "checkpoint": {"every_steps": 0, "every_minutes": 0},
    }
    before = core.get_cublas_switch(), core.get_cudnn_switch()
    summaries = {}
    try:
        for tf32 in (False, None):
            (tmp_path / f"{tf32}.yaml").write_text(yaml.safe_dump({**base, "tf32": tf32}))
            spec = load_job_spec(tmp_path / f"{tf32}.yaml")
            opts = TrainOptions(run_dir=tmp_path / f"run-{tf32}", resume="never", progress=False, log=lambda m: None)
            result = Trainer(spec, opts).run()
            assert result.exit_code == 0, result.reason
            summaries[tf32] = result.summary
            if tf32 is False:
                assert (core.get_cublas_switch(), core.get_cudnn_switch()) == (False, False)
                job_yaml = yaml.safe_load((tmp_path / f"run-{tf32}" / "job.yaml").read_text())
                assert job_yaml["tf32"] is False
    finally:
        core.set_cublas_switch(before[0])
        core.set_cudnn_switch(before[1])
    assert summaries[False]["tf32"] is False and summaries[None]["tf32"] is None
    assert summaries[False]["params_sha256"] == summaries[None]["params_sha256"]
    assert math.isfinite(summaries[False]["final_loss"])


@pytest.mark.parametrize(
    ("value", "needle"),
    [("0", "NVIDIA_TF32_OVERRIDE=0: TF32 is off"), ("1", "NVIDIA_TF32_OVERRIDE=1 is not a documented value")],
)
def test_doctor_reports_nvidia_tf32_override(tmp_path, value, needle):
    snap = tmp_path / "s.json"
    r = run("doctor", "--no-measure", "--json", "--snapshot", str(snap), env={"NVIDIA_TF32_OVERRIDE": value})
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["snapshot"]["env"]["NVIDIA_TF32_OVERRIDE"] == value
    (f,) = [f for f in doc["findings"] if f["check_id"] == "PF122"]
    assert (f["slug"], f["severity"]) == ("tf32-override", "warn") and needle in f["title"]
    assert f["unset"] == []  # a deliberate reproducibility setting: --fix-script does not remove it
    again = run("doctor", "--from", str(snap), "--json")
    assert [g["title"] for g in json.loads(again.stdout)["findings"] if g["check_id"] == "PF122"] == [f["title"]]


def test_cost_prices_fp32_on_the_cuda_cores_with_no_tf32():
    """The same job on A100 instances: --no-tf32 takes longer and costs more; the assumptions say which. (GPT-2
    large is beyond the CPU probe's default limit, so the plan under the cost is analytic: ~4 s a run.)"""
    args = (
        "cost",
        "gpt2-large",
        "-b",
        "4",
        "--input",
        "int64[256]:50257",
        "--gpu",
        "A100-SXM4-80GB",
        "--dataset-size",
        "100000",
        "--epochs",
        "1",
        "--shipped-prices",
        "--json",
    )
    docs = {}
    for flag in ("--tf32", "--no-tf32"):
        r = run(*args, flag)
        assert r.returncode == 0, r.stderr
        docs[flag] = json.loads(r.stdout)
    on, off = docs["--tf32"], docs["--no-tf32"]
    assert (on["assumptions"]["tf32"], off["assumptions"]["tf32"]) == (True, False)
    row_on, row_off = ({r["instance_type"]: r for r in d["rows"]} for d in (on, off))
    assert row_on.keys() == row_off.keys() and row_on
    for name, r in row_on.items():
        assert row_off[name]["step_time_s"] > 2 * r["step_time_s"] and row_off[name]["hours"] > 2 * r["hours"]
