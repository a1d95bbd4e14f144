"""CLI behaviour through the installed console script: JSON on stdout, exit code 2 on bad input, no traceback."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from paddlefit.catalog.gpus import COLUMNS
from paddlefit.units import MIB

DATA = Path(__file__).parent / "data"


def run(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(DATA), os.environ.get("PYTHONPATH", "")]), COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "paddlefit.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
    )


def test_gpus_json():
    r = run("gpus", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert {"T4", "H100-SXM", "B200"} <= {g["name"] for g in rows}
    assert all(g["source"] for g in rows)


def test_plan_json_for_user_multi_input_model():
    r = run(
        "plan",
        "tinymodels:TwoInput",
        "--input",
        "float32[3,16,16]",
        "--input",
        "int64[12]:100",
        "--batch-size",
        "8",
        "--gpu",
        "L4",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["inputs"] == ["float32[3,16,16]", "int64[12]:100"]
    assert [t["name"] for t in d["targets"]] == ["L4", "cpu"] or [t["name"] for t in d["targets"]] == ["cpu", "L4"]


def test_plan_model_returning_its_loss_and_model_args():
    r = run("plan", "tinymodels:ReturnsLoss", "--input", "float32[8]", "--gpu", "T4", "--json")
    assert r.returncode == 0, r.stderr
    r = run("plan", "tinymodels:mlp", "--input", "float32[30]", "--model-arg", "hidden=7", "--gpu", "T4", "--json")
    assert json.loads(r.stdout)["model"]["params"] == 30 * 7 + 7 + 7 * 5 + 5


def _bad_catalog(tmp_path):
    f = tmp_path / "bad.csv"
    f.write_text(",".join(COLUMNS) + "\n" + "X,,ada,8.9,lots" + ",1" * (len(COLUMNS) - 5) + "\n")
    return str(f)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["plan", "resnet5O"], "Did you mean"),
        (["plan", "nosuchpkg.mod:factory"], "No module named 'nosuchpkg'"),
        (["plan", "tinymodels:nothing"], "has no attribute"),
        (["plan", "tinymodels:not_a_layer_factory", "--input", "float32[3]"], "could not be built"),
        (["plan", "resnet18", "--input", "float32[3,224"], "does not parse"),
        (["plan", "resnet18", "--input", "float32[5,5]", "-b", "2"], "could not train with inputs"),
        (["plan", "resnet18", "--batch-size", "0"], "`--batch-size` must be 1..10000000"),
        (["plan", "lenet", "--gpu", "A100-XYZ"], "Unknown GPU"),
        (["plan", "lenet", "--precision", "fp8"], "`--precision`"),
        (["plan", "lenet", "--dataset-size", "10"], "go together"),
        (["plan", "tinymodels:mlp"], "has no default input"),
        (["gpus", "--catalog", "CATALOG"], "field `memory_gib`"),
        (["plan", "lenet", "--calibration", "NOFILE.json"], "cannot be read"),
    ],
)
def test_bad_input_exits_2_without_traceback(tmp_path, args, needle):
    args = [_bad_catalog(tmp_path) if a == "CATALOG" else a for a in args]
    r = run(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = " ".join(r.stderr.split())
    assert needle in err, err
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_calibrate_on_cpu_then_plan_with_gpu_calibration(tmp_path):
    out = tmp_path / "cal.json"
    r = run("calibrate", "-m", "lenet", "-b", "8", "--out", str(out))
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["device"] == "cpu" and doc["rows"][0]["batch_size"] == 8
    row = doc["rows"][0]
    assert abs(row["predicted_peak_bytes"] / row["peak_bytes"] - 1) < 0.05
    # a calibration measured on a T4 (rows written by hand here) marks that row calibrated and scales memory
    t4 = {
        "device": "T4",
        "cuda_context_bytes": 400 * MIB,
        "rows": [
            {
                "model": "lenet",
                "batch_size": 8,
                "precision": "fp32",
                "peak_bytes": 2_000_000,
                "predicted_peak_bytes": 1_000_000,
                "step_time_s": 0.01,
                "train_flops_per_sample": 2.0e6,
                "peak_flops": 8.1e12,
                "efficiency_class": "fp32",
            }
        ],
    }
    cal = tmp_path / "t4.json"
    cal.write_text(json.dumps(t4))
    base = json.loads(run("plan", "lenet", "-b", "8", "--gpu", "T4", "--json").stdout)
    r = run("plan", "lenet", "-b", "8", "--gpu", "T4", "--calibration", str(cal), "--json")
    d = json.loads(r.stdout)
    row_b = next(t for t in base["targets"] if t["name"] == "T4")
    row_c = next(t for t in d["targets"] if t["name"] == "T4")
    assert row_c["peak_bytes"] == pytest.approx(2 * row_b["peak_bytes"], rel=1e-6)
    # whole-step rows without kernel timings calibrate memory, not time: the row says so and stays `published-fit`
    assert row_c["calibration"] == row_b["calibration"] == "published-fit" and row_c["calibrated"] is False

    def device_s(row):
        return sum(v["seconds"] for k, v in row["time_breakdown"].items() if k != "allreduce_exposed")

    assert device_s(row_c) == pytest.approx(device_s(row_b), rel=1e-9)
    assert any("no kernel timings" in n for n in row_c["notes"])
    # with kernel timings (what `calibrate` writes on a GPU) the device's parameters replace the fit
    fitted = d["assumptions"]["gpu_model_params"]
    # efficiencies (fractions of a datasheet peak or bandwidth) / 4; shapes, L2, power and seconds as fitted
    slow = {
        k: v / 4
        if k.startswith(("gemm_half", "gemm_tf32", "gemm_fp32", "conv_", "dwconv")) or k.endswith("bw_eff")
        else v
        for k, v in fitted.items()
    }
    cal.write_text(json.dumps(dict(t4, perf_params={"values": slow})))
    d2 = json.loads(run("plan", "lenet", "-b", "8", "--gpu", "T4", "--calibration", str(cal), "--json").stdout)
    row_d = next(t for t in d2["targets"] if t["name"] == "T4")
    assert row_d["calibration"] == "device" and row_d["calibrated"] is True
    assert not any("no kernel timings" in n for n in row_d["notes"])
    assert device_s(row_d) > 1.2 * device_s(row_b)  # efficiencies / 4 (lenet is mostly per-kernel cost)
    bad = dict(t4, perf_params={"values": dict(slow, bw_eff=3.0)})
    cal.write_text(json.dumps(bad))
    r = run("plan", "lenet", "-b", "8", "--gpu", "T4", "--calibration", str(cal))
    assert r.returncode == 2 and "`bw_eff`" in r.stderr and "perf_params" in r.stderr and "Traceback" not in r.stderr


def test_help_has_examples():
    r = run("plan", "--help")
    assert r.returncode == 0 and "Examples" in r.stdout and "--precision" in r.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["plan", "bert-base", "--input", "int64[16]:0"], "`:high` must be between"),
        (["plan", "bert-base", "--model-arg", "num_layers=-1"], "must be an integer >= 1"),
        (["plan", "gpt2-xl", "--input", "int64[5000]"], "exceeds its max_position 1024"),
        (["plan", "gpt2-xl", "--input", "float32[16]"], "takes one input of token ids"),
        (["plan", "lenet", "--max-probe-gib", "nan"], "`--max-probe-gib` must be a finite number"),
        (["plan", "lenet", "--dataset-size", "10", "--epochs", "inf"], "a finite number > 0"),
        (["plan", "lenet", "--input", "float32[1,,28,28]"], "dimensions must be integers"),
        (["plan", "sys:exit", "--input", "float32[4]"], "could not be built"),
        (["plan", "tinymodels:frozen", "--input", "float32[8]"], "no trainable parameters"),
        (["plan", "lenet", "--input", "float32[1,100000,100000]", "-b", "1"], "too large to probe on this machine"),
        (["plan", "tinymodels:huge_activation", "--input", "float32[8]", "-b", "1"], "out of host memory"),
    ],
)
def test_more_bad_input_exits_2(args, needle):
    r = run(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert needle in " ".join(r.stderr.split()) and "Traceback" not in r.stderr and r.stdout == ""


def test_bad_calibration_values_and_special_out_paths(tmp_path):
    import os

    row = {
        "model": "lenet",
        "batch_size": 8,
        "precision": "fp32",
        "peak_bytes": 2e6,
        "predicted_peak_bytes": 1e6,
        "step_time_s": 0.01,
        "train_flops_per_sample": 2e6,
        "peak_flops": 8.1e12,
        "efficiency_class": "fp32",
    }
    for bad, needle in (
        (dict(row, step_time_s=0), "`step_time_s`"),
        (dict(row, efficiency_class="x"), "one of"),
        (dict(row, predicted_peak_bytes=1e-3), "outside [0.01, 100]"),
    ):
        f = tmp_path / "c.json"
        f.write_text(json.dumps({"device": "T4", "rows": [bad]}))
        r = run("plan", "lenet", "-b", "2", "--gpu", "T4", "--calibration", str(f))
        assert r.returncode == 2 and needle in r.stderr, r.stderr
    f.write_text('{"device": "T4", "rows": [{"peak_bytes": NaN}]}')
    assert "not valid JSON" in run("plan", "lenet", "--calibration", str(f)).stderr
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "target.json")
    for out, needle in ((fifo, "not a regular file"), (link, "symlink"), (tmp_path / "no/dir.json", "does not exist")):
        r = run("calibrate", "-m", "lenet", "-b", "4", "--out", str(out))
        assert r.returncode == 2 and needle in r.stderr, r.stderr
    assert fifo.is_fifo() and link.is_symlink() and not (tmp_path / "target.json").exists()
    # a GPU name to file measurements under, on a machine without a GPU: refused, not silently dropped
    r = run("calibrate", "-m", "lenet", "-b", "4", "--device-name", "A100", "--out", str(tmp_path / "cpu.json"))
    assert r.returncode == 2 and "sees no GPU" in r.stderr and not (tmp_path / "cpu.json").exists(), r.stderr


def test_user_code_printing_does_not_break_json():
    r = run("plan", "tinymodels:noisy", "--input", "float32[8]", "--gpu", "T4", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["model"]["params"] == 9
    assert "hello from the factory" in r.stderr


def test_json_stdout_survives_fd_writes_and_batch_dependent_forwards():
    r = run("plan", "tinymodels:fdwrite", "--input", "float32[8]", "-b", "16", "--gpu", "A100", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)  # one document: the model's writes to fd 1 went to stderr
    assert "FD1 WRITE" in r.stderr
    # the forward runs 4 linears beyond batch 1: the GPU trace is the batch-2 one, and the plan says so
    assert d["assumptions"]["trace_ops"] == 5  # the forward's 4 ops at batch 4 and the job's cross_entropy
    assert any("differ between batch 1 and 2" in n for n in d["memory"]["notes"])


def test_an_mfu_above_100_percent_says_why():
    """FP32 3x3 convolutions on CUDA cores run as Winograd (fewer multiplies than the model's FLOPs): the model
    can then reach more than 100% MFU as MFU counts, and the row says so instead of looking like a bug."""
    # 8x8 maps (two 4x4 Winograd output tiles a side): MFU 1.09 here, and the CPU probe 3x faster than at 28x28
    r = run(
        "plan",
        "trainhelpers:conv3x3_stack",
        "-i",
        "float32[256,8,8]",
        "-b",
        "64",
        "--gpu",
        "A100-SXM4-40GB",
        "--no-tf32",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    (gpu,) = [t for t in json.loads(r.stdout)["targets"] if t["kind"] == "gpu"]
    assert gpu["predicted_mfu"] > 1.0
    assert any(n.startswith("MFU above 100%: its FP32 3x3 convolutions run as Winograd") for n in gpu["notes"])


def test_plan_on_a_pipe_says_what_the_probe_is_doing():
    """A new user's finding: `plan` of a large model ran 10 minutes on a pipe with nothing on stderr (rich's
    spinner shows only on a terminal). Off a terminal each step of the probe is a line with the seconds so far."""
    r = run("plan", "lenet", "--gpu", "T4", "--json")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert lines[0] == "planning... (0 s)"
    steps = [ln for ln in lines if ln.startswith("CPU probe: training step ")]
    assert steps[0].startswith("CPU probe: training step 1 of ") and len(steps) >= 4
    assert all(ln.endswith(" s)") for ln in steps) and json.loads(r.stdout)["model"]["name"] == "lenet"


def test_a_per_sample_input_of_gigabytes_is_refused_before_the_probe_allocates_it():
    """Hostile trial: `plan lenet -i float32[2147483648]` (8 GiB a sample) grew to 24 GB and was killed by the
    kernel's OOM killer (exit 137). The inputs alone at the probe's largest batch (3) must leave half the free RAM."""
    r = run("plan", "lenet", "-i", "float32[2147483648]", "--gpu", "T4")
    assert r.returncode == 2 and "is too large to probe on this machine" in r.stderr, (r.returncode, r.stderr[-500:])
    assert "at batch 3" in r.stderr and "Traceback" not in r.stderr


def test_the_stop_message_names_the_command_that_resumes():
    # `--resume never` is not "the same command": run again, it would delete the checkpoint just saved
    from paddlefit.cli.train import resume_hint

    assert resume_hint("auto") == "run the same command to resume"
    assert resume_hint("never") == (
        "resume with `--resume auto` (not `--resume never`, which deletes the checkpoints and starts over)"
    )
    assert resume_hint("runs/a/checkpoints/step-00000010").endswith("which goes back to that checkpoint)")


def test_the_command_line_imports_only_the_command_it_runs():
    """Every `paddlefit` process imports the command table; what a command needs (the planner, the catalog, numpy,
    the trainer) is imported when that command runs, so `paddlefit runs` or `report` does not pay for the planner."""
    code = (
        "import sys, paddlefit.cli.main; print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('numpy', 'paddle', 'paddlefit'))))"
    )
    loaded = set(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
        ).stdout.split()
    )
    assert "paddlefit.cli.plan" in loaded and "paddlefit.cli.train" in loaded  # the command table is complete
    heavy = {
        m
        for m in loaded
        if m.split(".")[0] in ("numpy", "paddle")
        or m.startswith(
            (
                "paddlefit.plan",
                "paddlefit.catalog",
                "paddlefit.estimate",
                "paddlefit.train",
                "paddlefit.diagnose",
                "paddlefit.deploy",
                "paddlefit.report",
                "paddlefit.cli.render",
                "paddlefit.models",
                "paddlefit.tune",
            )
        )
    }
    assert heavy == set()


def test_an_option_that_does_not_parse_under_json_is_one_json_error_naming_it():
    r = run("cost", "lenet", "-b", "abc", "--json")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    err = json.loads(r.stdout)["error"]
    assert err["type"] == "UsageError" and err["exit_code"] == 2
    assert "Invalid value for '--batch-size' / '-b'" in err["message"], err
    r = run("plan", "--bogus", "--json")
    assert r.returncode == 2 and "No such option: --bogus" in json.loads(r.stdout)["error"]["message"]


def test_models_lists_the_zoo_and_the_built_in_large_transformers():
    r = run("models", "--json")
    assert r.returncode == 0, r.stderr
    rows = {row["name"]: row for row in json.loads(r.stdout)}
    assert rows["resnet50"]["kind"] == "zoo" and rows["resnet50"]["default_inputs"] == ["float32[3,224,224]"]
    assert rows["llama-2-7b"] == {"name": "llama-2-7b", "default_inputs": [], "kind": "llm"}
    assert "llama-2-7b" in run("models").stdout
