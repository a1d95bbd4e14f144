"""`paddlefit image`: the Dockerfile parses (dockerfile-parse), fits the host and keeps the house rules."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

from paddlefit.catalog.builds import load_builds
from paddlefit.deploy.docker import choose_build
from paddlefit.diagnose.snapshot import Snapshot
from paddlefit.errors import PaddlefitError
from paddlefit.units import GIB

SNAPS = Path(__file__).resolve().parents[1] / "data" / "snapshots"


def image(*args):
    return subprocess.run(
        [sys.executable, "-m", "paddlefit.cli.main", "image", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, COLUMNS="200"),
        timeout=120,
    )


def parse(path):
    steps = DockerfileParser(fileobj=io.BytesIO(Path(path).read_bytes())).structure
    return [s for s in steps if s["instruction"] != "COMMENT"]


def test_gpu_image_for_healthy_host(tmp_path):
    r = image(
        "--from-snapshot",
        str(SNAPS / "healthy_8xa100.json"),
        "--num-workers",
        "8",
        "-b",
        "64",
        "-i",
        "float32[3,224,224]",
        "--devices",
        "8",
        "--fixed-shape-cnn",
        "-r",
        "numpy==1.26.4",
        "--out",
        str(tmp_path),
    )
    assert r.returncode == 0, r.stderr
    steps = parse(tmp_path / "Dockerfile")
    instr = [s["instruction"] for s in steps]
    assert steps[0]["value"] == "paddlepaddle/paddle:3.0.0-gpu-cuda12.6-cudnn9.5-trt10.5"
    assert instr.index("USER") > instr.index("RUN") and steps[instr.index("USER")]["value"] == "trainer"
    copies = [s["value"] for s in steps if s["instruction"] == "COPY"]
    assert copies[0].startswith("requirements.txt") and copies[1].endswith(". /workspace")  # deps layer first
    assert any(s["value"] == "FLAGS_cudnn_exhaustive_search=1" for s in steps if s["instruction"] == "ENV")
    assert (tmp_path / "requirements.txt").read_text() == "numpy==1.26.4\n"
    # 8 trainers x 8 workers x prefetch 2 x 64 x 602,112 B = 4.59 GiB; x2 headroom -> 10g
    need = 8 * 8 * 2 * 64 * 3 * 224 * 224 * 4
    assert f"--shm-size={-(-2 * need // GIB)}g" in r.stdout and "--gpus all" in r.stdout


def test_old_driver_gets_older_cuda_and_no_gpu_gets_cpu(tmp_path):
    old = Snapshot.from_dict(json.loads((SNAPS / "driver_too_old.json").read_text()))
    assert choose_build(snapshot=old).cuda == "11.8"
    # a GPU wheel on a host that shows no GPU is a container started without --gpus: keep the GPU image
    r = image("--from-snapshot", str(SNAPS / "gpu_build_no_gpu.json"), "--out", str(tmp_path / "g"))
    assert r.returncode == 0 and "--gpus all" in r.stdout
    cpu = json.loads((SNAPS / "gpu_build_no_gpu.json").read_text())
    cpu["paddle_cuda"] = cpu["paddle_cudnn"] = None
    (tmp_path / "cpu.json").write_text(json.dumps(cpu))
    r = image("--from-snapshot", str(tmp_path / "cpu.json"), "--fixed-shape-cnn", "--out", str(tmp_path / "c"))
    assert r.returncode == 0 and "--gpus" not in r.stdout
    assert parse(tmp_path / "c" / "Dockerfile")[0]["value"] == "paddlepaddle/paddle:3.0.0"
    assert not any(s["instruction"] == "ENV" and "FLAGS_" in s["value"] for s in parse(tmp_path / "c" / "Dockerfile"))
    assert "runs/" in (tmp_path / "c" / ".dockerignore").read_text()


def test_no_image_for_ancient_driver():
    s = Snapshot.from_dict(json.loads((SNAPS / "driver_too_old.json").read_text()))
    s.driver_version = "418.67"
    with pytest.raises(PaddlefitError, match="No official Paddle image"):
        choose_build(snapshot=s)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-r", "numpy"], "must be pinned"),
        (["-r", "numpy==1.0\nRUN rm -rf /"], "must be pinned"),
        (["-r", "numpy==1.0", "-r", "numpy==2.0"], "more than once"),
        (["-r", "paddlepaddle-gpu==2.4.0"], "base image provides Paddle"),
        (["--command", 'python -c "1\nRUN touch /x"'], "control characters"),
        (["--paddle", ""], "is empty"),
        (["-r", "x[/]==1"], "must be pinned"),
        (["--paddle", "9.9.9"], "No official Paddle image"),
        (["--command", "'unclosed"], "does not parse"),
        (["--cpu", "--cuda", "12.6"], "`--cuda` does not apply"),
        (["--cpu", "--fixed-shape-cnn"], "does not apply to a"),
    ],
)
def test_bad_image_input(tmp_path, args, needle):
    r = image(*args, "--out", str(tmp_path / "new" / "dir"))
    assert r.returncode == 2 and needle in " ".join(r.stderr.split()) and "Traceback" not in r.stderr
    assert not (tmp_path / "new").exists()  # nothing created on bad input


def test_cmd_is_json_and_b200_needs_cuda_12_8(tmp_path):
    r = image("--command", r'python -c "print(\"hi\")" a\\b.py', "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    cmd = next(s for s in parse(tmp_path / "Dockerfile") if s["instruction"] == "CMD")["value"]
    assert json.loads(cmd) == ["python", "-c", 'print("hi")', "a\\b.py"]
    snap = json.loads((SNAPS / "healthy_8xa100.json").read_text())
    for g in snap["gpus"]:
        g["name"], g["compute_capability"] = "NVIDIA B200", "10.0"
    (tmp_path / "b200.json").write_text(json.dumps(snap))
    r = image("--from-snapshot", str(tmp_path / "b200.json"), "--out", str(tmp_path / "b"))
    assert r.returncode == 2 and "No official Paddle image" in r.stderr  # no CUDA >= 12.8 image in the table


def test_build_table_has_sources():
    rows = load_builds()
    assert {b.docker_image for b in rows} >= {
        "paddlepaddle/paddle:3.0.0-gpu-cuda11.8-cudnn8.9-trt8.6",
        "paddlepaddle/paddle:3.0.0-gpu-cuda12.6-cudnn9.5-trt10.5",
    }
    assert all(b.source.startswith("http") for b in rows)
