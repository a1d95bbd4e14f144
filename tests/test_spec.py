"""The job spec: per-sample input specs, enums, the YAML file (validated with pydantic, errors name the key;
plan/doctor/image/train read it), the field descriptions and the YAML loader."""

import json
import os
import subprocess
import sys

import pytest

from paddlefit.errors import InputSpecError, JobSpecError, UnknownNameError
from paddlefit.jobspec.inputs import parse_input_spec
from paddlefit.jobspec.spec import OptimizerName, Precision, load_job_spec, parse_enum


def test_parse_specs():
    s = parse_input_spec("float32[3,224,224]")
    assert (s.dtype, s.shape, s.bytes_per_sample) == ("float32", (3, 224, 224), 3 * 224 * 224 * 4)
    t = parse_input_spec(" int64[128]:30522 ")
    assert (t.shape, t.high, t.bytes_per_sample, str(t)) == ((128,), 30522, 1024, "int64[128]:30522")
    u = parse_input_spec("float32[]")  # one scalar per sample (a regression target, a class id)
    assert (u.shape, u.bytes_per_sample, str(u)) == ((), 4, "float32[]")


@pytest.mark.parametrize(
    "bad", ["", "float32", "float32[3,x]", "float32[0,2]", "complex64[3]", "float32[3]:5", "[3,224]"]
)
def test_bad_specs(bad):
    with pytest.raises(InputSpecError):
        parse_input_spec(bad)


def test_enums():
    assert parse_enum(Precision, "BF16-O2", "--precision") is Precision.BF16_O2
    assert Precision.FP16_O1.level == "O1" and Precision.FP32.level == "O0"
    with pytest.raises(UnknownNameError, match="adamw"):
        parse_enum(OptimizerName, "lamb", "--optimizer")


GOOD = """model: lenet
inputs: ["float32[1,28,28]"]
batch_size: 16
optimizer: adamw
precision: bf16-o1
devices: 2
data: {num_workers: 3, prefetch_factor: 4}
"""


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "paddlefit.cli.main", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, COLUMNS="200"),
        timeout=300,
    )


def test_load_good_spec(tmp_path):
    f = tmp_path / "job.yaml"
    f.write_text(GOOD)
    s = load_job_spec(f)
    assert (s.model, s.batch_size, s.optimizer, s.precision, s.devices) == (
        "lenet",
        16,
        OptimizerName.ADAMW,
        Precision.BF16_O1,
        2,
    )
    assert (s.data.num_workers, s.data.prefetch_factor, s.data.use_shared_memory) == (3, 4, True)
    assert [str(x) for x in s.input_specs()] == ["float32[1,28,28]"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("model: lenet\nbatch_sise: 3\n", "key `batch_sise`"),
        ("model: lenet\nbatch_size: -1\n", "key `batch_size`"),
        ("model: lenet\ndata: {num_workers: many}\n", "key `data.num_workers`"),
        ("model: lenet\nprecision: fp8\n", "key `precision`"),
        ("model: [\n", "not valid YAML"),
        ("- a\n- b\n", "must be a YAML mapping"),
        ("model: lenet\ninputs: ['float32[3,']\n", "key `inputs`"),
    ],
)
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
        "lenet",
        16,
        2,
        "adamw",
        "bf16-o1",
    )
    r = cli("plan", "--config", str(f), "-b", "8", "--gpu", "T4", "--json")
    assert json.loads(r.stdout)["batch_size"] == 8  # the command line overrides the spec
    # --no-measure: the OpenMP timing (10 processes, ~9 s) is tests/diagnose/test_doctor.py's
    r = cli("doctor", "--config", str(f), "--no-measure", "--json")
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
    from paddlefit.jobspec.spec import merge_loader_options

    f = tmp_path / "job.yaml"
    f.write_text(GOOD)
    spec = load_job_spec(f)
    o = merge_loader_options(spec)
    assert (o.num_workers, o.prefetch_factor, o.batch_size, o.devices, o.inputs) == (3, 4, 16, 2, ["float32[1,28,28]"])
    o = merge_loader_options(spec, num_workers=0, devices=1, prefetch_factor=2)  # explicit defaults still win
    assert (o.num_workers, o.devices, o.prefetch_factor) == (0, 1, 2)
    o = merge_loader_options(None)
    assert (o.num_workers, o.prefetch_factor, o.batch_size, o.devices, o.use_shared_memory) == (0, 2, None, 1, True)


def test_training_keys_parse_and_examples_load():
    from pathlib import Path

    root = Path(__file__).parent.parent / "examples"
    digits = load_job_spec(root / "digits.yaml")
    assert (digits.data.train, digits.data.eval_args, digits.epochs, digits.schedule.name) == (
        "digits",
        {"split": "test"},
        15,
        "cosine",
    )
    assert (digits.checkpoint.every_steps, digits.checkpoint.keep_last, digits.grad_accum_steps) == (200, 3, 1)
    senti = load_job_spec(root / "sentiment-zh.yaml")
    assert senti.data.train_args["ngrams"] == 2 and senti.model_args == {"vocab_size": 30000}


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("model: m\ncheckpoint: {every_step: 5}\n", "key `checkpoint.every_step`"),
        ("model: m\nschedule: {name: linear}\n", "key `schedule.name`"),
        ("model: m\ngrad_accum_steps: 0\n", "key `grad_accum_steps`"),
        ("model: m\nepochs: -1\n", "key `epochs`"),
        ("model: m\ncheckpoint: {keep_last: 0}\n", "key `checkpoint.keep_last`"),
        ("model: m\ndata: {train_args: [1, 2]}\n", "key `data.train_args`"),
        ("model: m\nepochs: .inf\n", "key `epochs`"),
        ("model: m\nepochs: 1e308\n", "key `epochs`"),
        ("model: m\nschedule: {name: step, gamma: 1.0}\n", "key `schedule.gamma`"),
        ("model: m\nlr: 0.01\nschedule: {min_lr: 0.1}\n", "min_lr 0.1 is above lr 0.01"),
        ("model: m\nbatch_size: 3\nmodel: n\n", "line 3, column 1: key `model` is given twice"),
        ("model: m\ndata: {num_workers: 1, num_workers: 2}\n", "key `num_workers` is given twice"),
        ("model: m\nrun_dir: ''\n", "run_dir is empty"),
        ("model: m\nrun_dir: '   '\n", "run_dir is empty"),
    ],
)
def test_bad_training_keys_name_the_key(tmp_path, text, needle):
    f = tmp_path / "job.yaml"
    f.write_text(text)
    with pytest.raises(JobSpecError, match=needle.replace(".", r"\.").replace("`", "`")):
        load_job_spec(f)


def test_train_cli_bad_input_exit_2(tmp_path):
    f = tmp_path / "job.yaml"
    f.write_text("model: paddlefit.models.examples:digits_cnn\ndata: {train: nosuch}\nmax_steps: 2\n")
    r = cli("train", str(f), "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2 and "`data.train: nosuch` cannot be imported" in r.stderr and "Traceback" not in r.stderr
    f.write_text("model: paddlefit.models.examples:digits_cnn\ndata: {train: digits}\n")
    r = cli("train", str(f), "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2 and "neither `epochs` nor `max_steps`" in r.stderr
    f.write_text("model: paddlefit.models.examples:digits_cnn\ndata: {train: digits}\nmax_steps: 2\n")
    for args, needle in (
        (["--devices", "0,0"], "must be a count"),
        (["--devices", "0,1"], "no GPU"),
        (["--resume", "nowhere"], "not `auto`, `never`"),
        (["--max-steps", "0"], ">= 1"),
        (["--devices", "99"], "CPU processes on"),
        (["--run-dir", ""], "`--run-dir` is empty"),
    ):
        r = cli("train", str(f), *(["--run-dir", str(tmp_path / "r")] if "--run-dir" not in args else []), *args)
        assert r.returncode == 2 and needle in r.stderr, (args, r.stderr)
    f.write_text(
        "model: paddlefit.models.examples:digits_cnn\ndata: {train: digits, train_args: {split: dev}}\nmax_steps: 2\n"
    )
    r = cli("train", str(f), "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2 and "`split` must be `train` or `test`" in r.stderr


def test_visualdl_logging_or_clear_error(tmp_path):
    import importlib.util

    f = tmp_path / "job.yaml"
    f.write_text("model: paddlefit.models.examples:digits_cnn\ndata: {train: digits}\nmax_steps: 3\nvisualdl: true\n")
    r = cli("train", str(f), "--run-dir", str(tmp_path / "r"))
    if importlib.util.find_spec("visualdl") is None:
        assert r.returncode == 2 and "pip install 'paddlefit[visualdl]'" in r.stderr
    else:
        assert r.returncode == 0, r.stderr
        assert list((tmp_path / "r" / "visualdl").glob("vdlrecords.*.log"))


def test_plan_config_infers_inputs_from_data(tmp_path):
    f = tmp_path / "job.yaml"
    f.write_text("model: paddlefit.models.examples:digits_cnn\ndata: {train: digits}\nbatch_size: 8\nmax_steps: 2\n")
    r = cli("plan", "--config", str(f), "--gpu", "T4", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["inputs"] == ["float32[1,8,8]"]


def test_budget_refuses_booleans_but_takes_integers(tmp_path):
    f = tmp_path / "b.yaml"
    f.write_text("model: resnet18\nbudget: {max_hours: true}\n")
    with pytest.raises(JobSpecError, match=r"budget\.max_hours"):
        load_job_spec(f)
    f.write_text("model: resnet18\nbudget: {max_hours: 12, max_cost_usd: 40, price_usd_per_hour: 3}\n")
    assert load_job_spec(f).budget.max_hours == 12.0


@pytest.mark.parametrize(
    ("yaml_text", "field"),
    [
        ("batch_size: true", "batch_size"),
        ("checkpoint: {keep_last: false}", "checkpoint.keep_last"),
        ("data: {num_workers: true}", "data.num_workers"),
    ],
)
def test_integer_fields_refuse_booleans(tmp_path, yaml_text, field):
    f = tmp_path / "b.yaml"
    f.write_text(f"model: resnet18\n{yaml_text}\n")
    with pytest.raises(JobSpecError, match=rf"{field.replace('.', '[.]')}.*is a boolean; give an integer"):
        load_job_spec(f)
    f.write_text("model: resnet18\nbatch_size: 16\ncheckpoint: {keep_last: 2}\n")
    assert load_job_spec(f).batch_size == 16 and load_job_spec(f).checkpoint.keep_last == 2


def test_every_field_has_a_description_and_field_help_finds_it():
    from pydantic import BaseModel

    from paddlefit.jobspec.inputs import InputSpec
    from paddlefit.jobspec.spec import BudgetSpec, CheckpointSpec, DataSpec, JobSpec, ScheduleSpec, field_help

    for model in (JobSpec, DataSpec, ScheduleSpec, CheckpointSpec, BudgetSpec, InputSpec):
        missing = [name for name, f in model.model_fields.items() if not (f.description or "").strip()]
        assert not missing, (model.__name__, missing)
    assert field_help("data.eval_batch_size") == DataSpec.model_fields["eval_batch_size"].description
    assert "micro-batch" in field_help("batch_size") and issubclass(ScheduleSpec, BaseModel)
    for bad in ("data.nosuch", "nosuch", "batch_size.x"):
        with pytest.raises(KeyError):
            field_help(bad)


def test_unique_key_loader_is_public_and_refuses_repeated_keys():
    import yaml

    from paddlefit.jobspec.spec import unique_key_loader

    assert yaml.load("a: 1\nb: 2\n", Loader=unique_key_loader()) == {"a": 1, "b": 2}
    with pytest.raises(yaml.constructor.ConstructorError, match="given twice"):
        yaml.load("a: 1\na: 2\n", Loader=unique_key_loader())
