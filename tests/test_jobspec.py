"""The job spec YAML: validated with pydantic, errors name the key; plan/doctor/image read it."""

import json
import os
import subprocess
import sys

import pytest

from paddlefit.errors import JobSpecError
from paddlefit.spec import OptimizerName, Precision, load_job_spec

GOOD = """model: lenet
inputs: ["float32[1,28,28]"]
batch_size: 16
optimizer: adamw
precision: bf16-o1
devices: 2
data: {num_workers: 3, prefetch_factor: 4}
"""


def cli(*args):
    return subprocess.run([sys.executable, "-m", "paddlefit.cli.main", *args], capture_output=True, text=True,
                          env=dict(os.environ, COLUMNS="200"), timeout=300)  # fmt: skip


def test_load_good_spec(tmp_path):
    f = tmp_path / "job.yaml"
    f.write_text(GOOD)
    s = load_job_spec(f)
    assert (s.model, s.batch_size, s.optimizer, s.precision, s.devices) == (
        "lenet", 16, OptimizerName.ADAMW, Precision.BF16_O1, 2)
    assert (s.data.num_workers, s.data.prefetch_factor, s.data.use_shared_memory) == (3, 4, True)
    assert [str(x) for x in s.input_specs()] == ["float32[1,28,28]"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [("model: lenet\nbatch_sise: 3\n", "key `batch_sise`"), ("model: lenet\nbatch_size: -1\n", "key `batch_size`"),
     ("model: lenet\ndata: {num_workers: many}\n", "key `data.num_workers`"),
     ("model: lenet\nprecision: fp8\n", "key `precision`"), ("model: [\n", "not valid YAML"),
     ("- a\n- b\n", "must be a YAML mapping"), ("model: lenet\ninputs: ['float32[3,']\n", "key `inputs`")],
)  # fmt: skip
def test_bad_specs_name_the_key(tmp_path, text, needle):
    f = tmp_path / "job.yaml"
    f.write_text(text)
    with pytest.raises(JobSpecError, match=needle.replace("[", r"\[")):
        load_job_spec(f)


def test_plan_doctor_image_read_the_spec(tmp_path):
    f = tmp_path / "job.yaml"
    f.write_text(GOOD)
    r = cli("plan", "--config", str(f), "--gpu", "A100-SXM4-40GB", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["model"]["name"], d["batch_size"], d["devices"], d["optimizer"], d["precision"]) == (
        "lenet", 16, 2, "adamw", "bf16-o1")
    r = cli("plan", "--config", str(f), "-b", "8", "--gpu", "T4", "--json")
    assert json.loads(r.stdout)["batch_size"] == 8  # the command line overrides the spec
    r = cli("doctor", "--config", str(f), "--json")
    assert r.returncode in (0, 1) and "PF106" in r.stdout  # the spec's DataLoader reached the shm check
    r = cli("image", str(f), "--out", str(tmp_path / "img"))
    assert r.returncode == 0 and (tmp_path / "img" / "Dockerfile").exists()
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: lenet\nepochs_typo: 1\n")
    r = cli("plan", "--config", str(bad))
    assert r.returncode == 2 and "key `epochs_typo`" in r.stderr and "Traceback" not in r.stderr
    r = cli("plan")
    assert r.returncode == 2 and "--config" in r.stderr


def test_merge_loader_options(tmp_path):
    from paddlefit.spec import merge_loader_options

    f = tmp_path / "job.yaml"
    f.write_text(GOOD)
    spec = load_job_spec(f)
    o = merge_loader_options(spec)
    assert (o.num_workers, o.prefetch_factor, o.batch_size, o.devices, o.inputs) == (3, 4, 16, 2, ["float32[1,28,28]"])
    o = merge_loader_options(spec, num_workers=0, devices=1, prefetch_factor=2)  # explicit defaults still win
    assert (o.num_workers, o.devices, o.prefetch_factor) == (0, 1, 2)
    o = merge_loader_options(None)
    assert (o.num_workers, o.prefetch_factor, o.batch_size, o.devices, o.use_shared_memory) == (0, 2, None, 1, True)
