"""What only a GPU can exercise (`@pytest.mark.gpu`, skipped without one): AMP O1 with fp16's GradScaler, AMP O2 with
master weights, and data parallel over NCCL. Each runs the trainer the way `paddlefit train` does."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from paddlefit.jobspec.spec import JobSpec
from paddlefit.train.loop import Trainer, TrainOptions

pytestmark = pytest.mark.gpu

JOB = {
    "model": "paddlefit.models.examples:digits_cnn",
    "data": {"train": "digits", "train_args": {"split": "train"}, "eval": "digits", "eval_args": {"split": "test"}},
    "batch_size": 32,
    "max_steps": 40,
    "optimizer": "adam",
    "lr": 0.003,
    "seed": 3,
    "checkpoint": {"every_steps": 20, "every_minutes": 0, "keep_last": 3},
}


def _train(tmp_path: Path, name: str, **overrides: object) -> dict:
    spec = JobSpec.model_validate({**JOB, **overrides})
    res = Trainer(spec, TrainOptions(run_dir=tmp_path / name, resume="never", progress=False, log=lambda m: None)).run()
    assert res.exit_code == 0, res.reason
    return res.summary or {}


@pytest.mark.parametrize("precision", ["fp16-o1", "bf16-o1", "fp16-o2", "bf16-o2"])
def test_amp_trains_on_the_gpu_and_checkpoints_the_grad_scaler(tmp_path: Path, precision: str) -> None:
    s = _train(tmp_path, precision, precision=precision)
    assert s["device"] == "gpu" and s["amp_active"] and s["precision"] == precision
    # the same job in fp32 on CPU: 91.98% (measured); AMP rounds, it must not break training
    assert np.isfinite(s["final_loss"]) and s["eval_accuracy"] > 0.8
    state = json.loads(
        next(iter(sorted((tmp_path / precision / "checkpoints").glob("step-*")))).joinpath("trainer.json").read_text()
    )
    # fp16 trains through paddle.amp.GradScaler, whose loss scale is part of the resumable state; bf16 has none
    assert (state["scaler"] is not None) == precision.startswith("fp16")
    if precision.startswith("fp16"):
        assert state["scaler"]["scale"][0] > 0


def test_amp_o2_keeps_fp32_master_weights_in_the_checkpoint(tmp_path: Path) -> None:
    import paddle

    _train(tmp_path, "o2", precision="bf16-o2", max_steps=5)
    ck = sorted((tmp_path / "o2" / "checkpoints").glob("step-*"))[-1]
    opt = paddle.load(str(ck / "optimizer.pdopt"))
    masters = opt.get("master_weights", {})
    assert masters and all(str(v.dtype).endswith("float32") for v in masters.values())


def test_two_gpus_over_nccl_equal_one_gpu_with_the_global_batch(tmp_path: Path) -> None:
    import subprocess
    import sys

    import paddle
    import yaml

    if paddle.device.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    spec_dp = tmp_path / "dp.yaml"
    spec_dp.write_text(yaml.safe_dump({**JOB, "batch_size": 16, "max_steps": 6, "oom_backoff": False}))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "paddlefit.cli.main",
            "train",
            str(spec_dp),
            "--devices",
            "0,1",
            "--run-dir",
            str(tmp_path / "dp"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    dp = json.loads(r.stdout)
    one = _train(tmp_path, "one", max_steps=6)
    assert dp["devices"] == 2 and dp["global_batch"] == one["global_batch"] == 32
    # cuDNN picks kernels per run, so equality is to round-off, not bits: compare the final weights
    a = paddle.load(str(sorted((tmp_path / "dp" / "checkpoints").glob("step-*"))[-1] / "model.pdparams"))
    b = paddle.load(str(sorted((tmp_path / "one" / "checkpoints").glob("step-*"))[-1] / "model.pdparams"))
    worst = max(float(np.max(np.abs(a[k].numpy() - b[k].numpy()))) for k in b)
    assert worst < 1e-4, worst
