"""A user's own module (model, dataset, loss) found where they stand: the current directory, then the job spec's
folder, as ``python -m`` finds it; a module found nowhere names the folders searched. Real CLI runs, real training."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

MODULE = textwrap.dedent("""
    import numpy as np
    import paddle
    from paddle import nn


    class Lines(paddle.io.Dataset):
        def __init__(self, n):
            rng = np.random.default_rng(0)
            self.x = rng.standard_normal((n, 16)).astype("float32")
            self.y = (self.x.sum(1) > 0).astype("int64")

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return self.x[i], self.y[i]


    def lines(split="train"):
        return Lines(64 if split == "train" else 32)


    def model():
        return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))


    def loss(logits, label):
        return nn.functional.cross_entropy(logits, label)
""")
SPEC = textwrap.dedent("""
    model: ocrpkg.rec:model
    inputs: ["float32[16]"]
    data: {train: "ocrpkg.rec:lines", train_args: {split: train}}
    loss: ocrpkg.rec:loss
    batch_size: 16
    max_steps: 4
    seed: 0
""")


def _project(root: Path, module_in: str) -> Path:
    """``root/jobs/job.yaml`` naming ``ocrpkg.rec``, with the package in ``root`` or in ``root/jobs``."""
    (root / "jobs").mkdir()
    pkg = root / module_in / "ocrpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "rec.py").write_text(MODULE)
    spec = root / "jobs" / "job.yaml"
    spec.write_text(SPEC)
    return spec


def _paddlefit(*args, cwd: Path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-m", "paddlefit", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=dict(env, COLUMNS="200"),
        timeout=600,
    )


def test_a_module_in_the_current_directory_plans_and_trains(tmp_path):
    spec = _project(tmp_path, ".")
    plan = _paddlefit("plan", "--config", "jobs/job.yaml", "--json", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["model"]["name"] == "ocrpkg.rec:model"
    run = _paddlefit("train", str(spec), "--run-dir", "runs/a", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    summary = json.loads((tmp_path / "runs" / "a" / "summary.json").read_text())
    assert summary["steps"] == 4


def test_a_module_beside_the_job_spec_is_found_from_anywhere(tmp_path):
    spec = _project(tmp_path, "jobs")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    plan = _paddlefit("plan", "--config", str(spec), "--json", cwd=elsewhere)
    assert plan.returncode == 0, plan.stderr
    # the training processes find it too: two workers started by paddle.distributed.launch, each reading the run
    # directory's copy of the spec
    run = _paddlefit("train", str(spec), "--devices", "2", "--run-dir", str(tmp_path / "runs" / "b"), cwd=elsewhere)
    assert run.returncode == 0, run.stderr
    assert json.loads((tmp_path / "runs" / "b" / "summary.json").read_text())["steps"] == 4
    # export from a third folder finds the modules the run was trained with (RUN_DIR/import_dirs.json)
    assert str((tmp_path / "jobs").resolve()) in json.loads((tmp_path / "runs" / "b" / "import_dirs.json").read_text())
    third = tmp_path / "third"
    third.mkdir()
    exp = _paddlefit("export", str(tmp_path / "runs" / "b"), cwd=third)
    assert exp.returncode == 0, exp.stderr


def test_a_module_found_nowhere_names_the_folders_searched(tmp_path):
    spec = _project(tmp_path, "lib")  # neither the current directory nor the spec's folder holds it
    r = _paddlefit("plan", "--config", str(spec), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    msg = " ".join(r.stderr.split())
    assert "No module named 'ocrpkg'" in msg
    assert f"`{tmp_path.resolve()}` (the current directory)" in msg
    assert f"`{(tmp_path / 'jobs').resolve()}` (the job spec's folder)" in msg
    assert "put the folder that holds `ocrpkg/`" in msg


def _console(*args, cwd: Path):
    """The installed console script (no current directory on sys.path, unlike `python -m`)."""
    script = Path(sys.executable).parent / "paddlefit"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PADDLEFIT_IMPORT_DIRS")}
    return subprocess.run(
        [str(script), *args], capture_output=True, text=True, cwd=cwd, env=dict(env, COLUMNS="200"), timeout=600
    )


def test_a_user_file_named_like_an_installed_module_neither_breaks_paddlefit_nor_is_imported_silently(tmp_path):
    spec = _project(tmp_path, ".")
    (tmp_path / "paddle.py").write_text("raise SystemExit('not the real paddle')\n")  # a beginner's file name
    plan = _console("plan", "--config", str(spec), "--json", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr  # the user's folders come after the installed packages
    # a job naming the user's `yaml.py`, which the installed PyYAML hides: said, with the fix, exit 2
    (tmp_path / "yaml.py").write_text("def lines(split='train'):\n    return None\n")
    spec.write_text(SPEC.replace("ocrpkg.rec:lines", "yaml:lines"))
    r = _console("plan", "--config", str(spec), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    msg = " ".join(r.stderr.split())
    assert f"not your `{tmp_path.resolve() / 'yaml.py'}`, which it hides: rename yours" in msg


def test_a_deleted_current_directory_is_said_not_a_traceback(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    proc = subprocess.run(
        f"cd {gone} && rmdir {gone} && {Path(sys.executable).parent / 'paddlefit'} gpus",
        shell=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "the current directory no longer exists" in proc.stderr


def test_a_misspelt_paddlenlp_config_field_is_refused_with_the_close_name(tmp_path):
    import pytest

    pytest.importorskip("paddlenlp", reason="the `real` extra (PaddleNLP 2.8.1) is not installed")
    r = _console(
        "plan",
        "paddlenlp.transformers:ErnieForSequenceClassification",
        "--model-arg",
        "config=ernie-3.0-nano-zh",
        "--model-arg",
        "num_hidden_layer=1",
        "-i",
        "int64[16]:100",
        "-b",
        "2",
        "--gpu",
        "T4",
        cwd=tmp_path,
    )
    assert r.returncode == 2
    assert "ErnieConfig has no field `num_hidden_layer`; did you mean `num_hidden_layers`?" in r.stderr


def test_a_recorded_folders_file_that_is_a_fifo_or_garbage_adds_nothing_and_does_not_block(tmp_path):
    from paddlefit.process.userimport import add_recorded_dirs, user_dirs

    before = user_dirs()
    fifo = tmp_path / "import_dirs.json"
    os.mkfifo(fifo)  # reading it would block forever
    add_recorded_dirs(fifo)
    (tmp_path / "bad.json").write_text("[" * 100_000)  # nested past Python's recursion limit
    add_recorded_dirs(tmp_path / "bad.json")
    add_recorded_dirs(tmp_path / "missing.json")
    assert user_dirs() == before
