"""paddlefit.job.resolve: the loader queue, the option checks, the job resolved from options and a spec."""

import re

import pytest

from paddlefit.errors import PaddlefitError
from paddlefit.job.resolve import JobOptions, check_inputs_match_data, check_not_empty, loader_queue, resolve_job
from paddlefit.jobspec.spec import JobSpec


def _spec(**kw):
    return JobSpec(model="lenet", **kw)


def test_loader_queue_counts_prefetch_and_the_mid_epoch_eval():
    spec = _spec(batch_size=32, epochs=1)
    assert loader_queue(spec, 1348, None, 32, 1, None) == (4, 0, 0)  # prefetch_factor 2 + the BufferedReader's 2
    assert loader_queue(spec, 64, None, 32, 1, None) == (1, 0, 0)  # never more than the loader has left
    stopped = _spec(batch_size=32, max_steps=10)  # stops mid-epoch (42 steps an epoch): the train queue is full
    assert loader_queue(stopped, 1348, 360, 32, 1, 64) == (4, 4, 5)
    assert loader_queue(stopped, None, 100, 32, 1, 100) == (0, 0, 0)


def test_job_options_check_themselves():
    for kw, needle in [
        ({"batch_size": 0}, "`--batch-size` must be 1..10000000 (got 0)"),
        ({"devices": 0}, "`--devices` must be"),
        ({"label_arg": "1x"}, "forward() argument name"),
        ({"eval_batch_size": 0}, "1..10000000"),
        ({"loss": " "}, "`--loss` is empty"),
        ({"label": "y=int64[]:10"}, "takes no name"),
        ({"precision": ""}, "`--precision` is empty"),
    ]:
        with pytest.raises(PaddlefitError, match=re.escape(needle)):
            JobOptions(model="lenet", **kw)
    check_not_empty({"--optimizer": None, "--precision": "fp32"})


def test_resolve_job_without_data_and_with_a_foreign_model(tmp_path):
    with pytest.raises(PaddlefitError, match="Give a MODEL"):
        resolve_job(JobOptions(command="cost"))
    job = resolve_job(JobOptions(model="lenet", batch_size=4))
    assert (job.model, job.batch_size, job.optimizer, job.precision, job.devices, job.notes) == (
        "lenet",
        4,
        "adam",
        "fp32",
        1,
        [],
    )
    cfg = tmp_path / "job.yaml"
    cfg.write_text("model: resnet18\nbatch_size: 8\ndevices: 2\nepochs: 1\n")
    other = resolve_job(JobOptions(model="lenet", config=cfg))
    assert not other.own_job and other.batch_size == 8 and other.devices == 2 and other.length() == (None, None)


def test_inputs_must_describe_the_data():
    check_inputs_match_data(["float32[1,8,8]"], ["float32[1,8,8]"], "digits")
    check_inputs_match_data(["b=int64[4]", "a=float32[2]"], ["a=float32[2]", "b=int64[4]:9"], "d")  # dict: any order
    with pytest.raises(PaddlefitError, match=r"does not describe data\.train"):
        check_inputs_match_data(["float32[3,8,8]"], ["float32[1,8,8]"], "digits")


def test_a_dataset_module_not_on_this_machine_is_planned_from_inputs(tmp_path, monkeypatch):
    """docs/guides/plan-cost-launch.md: a spec names the user's own dataset factory, which the planning machine
    does not have; with `inputs:` given, plan and cost go on without it (and say so); without them, exit 2."""
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "job.yaml"
    cfg.write_text(
        "model: lenet\ninputs: ['float32[1,28,28]']\nbatch_size: 8\nepochs: 1\n"
        "data: {train: nopkg_here.data:train_set, eval: nopkg_here.data:eval_set}\n"
    )
    job = resolve_job(JobOptions(config=cfg))
    assert job.inputs == ["float32[1,28,28]"] and job.train_size is None and job.length() == (None, None)
    assert [n.split(":")[0] for n in job.notes] == ["data.train", "data.eval"]
    assert "`nopkg_here.data:train_set` is not importable here: planned from `inputs:`" in job.notes[0]
    cfg.write_text("model: lenet\nbatch_size: 8\ndata: {train: nopkg_here.data:train_set}\n")
    with pytest.raises(PaddlefitError, match=r"`data.train: nopkg_here.data:train_set` cannot be imported"):
        resolve_job(JobOptions(config=cfg))
    # a module that is there but fails (its own missing import) is not skipped: that is a bug to show
    (tmp_path / "brokenpkg.py").write_text("import nopkg_dependency\n\ndef train_set():\n    return [0]\n")
    cfg.write_text("model: lenet\ninputs: ['float32[1,28,28]']\nbatch_size: 8\ndata: {train: brokenpkg:train_set}\n")
    with pytest.raises(PaddlefitError, match=r"install `nopkg_dependency`"):
        resolve_job(JobOptions(config=cfg))
