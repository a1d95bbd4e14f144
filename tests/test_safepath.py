"""No child process paddlefit starts imports a module from the current directory (paddlefit.process.safepath): a
`paddle.py`, `json.py` or `platform.py` beside the job that re-exports the real module would otherwise run unseen in
the prediction child, the launcher, the workers, the probe and doctor's benchmark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from trainrun import ENV, write_spec

from paddlefit.process.safepath import _BOOT_310, SAFE_PATH_ENV, python_command, safe_env

#: A stand-in that notes its import in SHADOWED beside it, then hands over to the real module (so nothing fails).
SHADOW = """import importlib, os, sys
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "SHADOWED"), "a") as f:
    f.write(__name__ + " " + str(os.getpid()) + "\\n")
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
del sys.modules[__name__]
sys.modules[__name__] = importlib.import_module(__name__)
"""


def _shadowing_dir(tmp_path: Path, *names: str) -> Path:
    d = tmp_path / "cwd"
    d.mkdir()
    for name in names:
        (d / f"{name}.py").write_text(SHADOW)
    return d


def _shadowed(d: Path) -> str:
    marker = d / "SHADOWED"
    return marker.read_text() if marker.exists() else ""


def test_the_shadow_works_where_the_current_directory_is_on_the_path(tmp_path: Path) -> None:
    """The check below can fail: plain `python -c` from that folder imports the stand-in."""
    d = _shadowing_dir(tmp_path, "json")
    subprocess.run([sys.executable, "-c", "import json"], cwd=d, check=True, env=ENV)
    assert _shadowed(d).startswith("json ")


@pytest.mark.parametrize("boot", ["this python", "python 3.10 bootstrap"])
def test_python_command_leaves_the_current_directory_off_the_path(tmp_path: Path, boot: str) -> None:
    """`-m json.tool` imports the package `json` first: from the folder, were it on the path."""
    d = _shadowing_dir(tmp_path, "json")
    if boot == "this python":
        code = "import sys; print(sys.argv[1:])"
        out = subprocess.run(
            [*python_command(code=code), "a"], cwd=d, capture_output=True, text=True, check=True, env=ENV
        ).stdout
        assert out.strip() == "['a']"
        cmd = python_command(module="json.tool")
    else:
        cmd = [sys.executable, "-c", _BOOT_310, "json.tool"]
    out = subprocess.run(cmd, cwd=d, input='{"b": 1}', capture_output=True, text=True, check=True, env=ENV).stdout
    assert out.split() == ["{", '"b":', "1", "}"]  # json.tool ran as -m runs it
    assert _shadowed(d) == ""


def test_safe_env_sets_the_variable_and_drops_empty_pythonpath_entries(tmp_path: Path) -> None:
    assert safe_env({"A": "1"}) == {"A": "1", SAFE_PATH_ENV: "1"}
    assert safe_env({"PYTHONPATH": ":/x::/y:"})["PYTHONPATH"] == "/x:/y"
    assert "PYTHONPATH" not in safe_env({"PYTHONPATH": ":"})
    d = _shadowing_dir(tmp_path, "json")  # `PYTHONPATH=:...` is the current directory even under -P
    subprocess.run(python_command(code="import json"), cwd=d, check=True, env=dict(ENV, PYTHONPATH=":"))
    assert _shadowed(d).startswith("json ")
    (d / "SHADOWED").unlink()
    subprocess.run(python_command(code="import json"), cwd=d, check=True, env=safe_env(dict(ENV, PYTHONPATH=":")))
    assert _shadowed(d) == ""


@pytest.mark.slow
def test_train_and_its_prediction_child_launcher_and_workers_import_nothing_from_the_current_directory(
    tmp_path: Path,
) -> None:
    """`train` with the prediction on (a planner child; one device: 2 CPU processes are not predicted), then `train
    --devices 2` (Paddle's launcher and both workers), from a folder holding `paddle.py`, `json.py` and
    `argparse.py` stand-ins."""
    d = _shadowing_dir(tmp_path, "paddle", "json", "argparse")
    spec = write_spec(tmp_path / "s.yaml", max_steps=2)
    env = {k: v for k, v in ENV.items() if k != "PADDLEFIT_NO_PREDICT"}
    train = [*python_command(module="paddlefit.cli.main"), "train", str(spec)]
    r = subprocess.run(
        [*train, "--run-dir", str(tmp_path / "r1")], cwd=d, capture_output=True, text=True, timeout=300, env=env
    )
    assert r.returncode == 0 and "predicting this run" in r.stderr, r.stderr[-3000:]
    r = subprocess.run(
        [*train, "--run-dir", str(tmp_path / "r2"), "--devices", "2"],
        cwd=d,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0 and "launching 2 workers" in r.stderr, r.stderr[-3000:]
    assert _shadowed(d) == ""


def test_doctors_openmp_benchmark_imports_nothing_from_the_current_directory(tmp_path: Path) -> None:
    d = _shadowing_dir(tmp_path, "platform", "json", "paddle")
    code = "from paddlefit.diagnose.snapshot import _omp_step; print(_omp_step(''))"
    r = subprocess.run(python_command(code=code), cwd=d, capture_output=True, text=True, timeout=300, env=ENV)
    assert r.returncode == 0 and float(r.stdout.strip().splitlines()[-1]) > 0, r.stderr[-2000:]
    assert _shadowed(d) == ""
