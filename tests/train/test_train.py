"""paddlefit train: data-parallel equivalence, exact resume after SIGTERM/SIGKILL, NaN stop, disk errors, export.

Everything runs on the CPU with real data (scikit-learn digits) through the real CLI in subprocesses, as a user
would run it; two-process runs go through `paddle.distributed.launch` (gloo).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from trainrun import (
    DP_KILL_JOB,
    ENV,
    SLOW60_JOB,
    SharedRun,
    params_sha256,
    run,
    summary,
    train_cmd,
    wait_for_step,
    write_spec,
)

from paddlefit.errors import PaddlefitError

DATA = Path(__file__).resolve().parents[1] / "data"


def final_params(run_dir: Path) -> dict[str, np.ndarray]:
    import paddle

    ckpts = sorted((run_dir / "checkpoints").glob("step-*"))
    state = paddle.load(str(ckpts[-1] / "model.pdparams"))
    return {k: np.asarray(v.numpy() if hasattr(v, "numpy") else v) for k, v in state.items()}


@pytest.mark.slow
def test_two_processes_equal_one_process_and_accumulation(tmp_path: Path) -> None:
    """2 processes x 16 == 1 x 32 == 1 x 16 x accumulation 2 after 6 Adam steps on the same shuffled batches."""
    runs = {
        # DataParallel's own overlapped all-reduce (oom_backoff: false) ...
        "dp2x16": (write_spec(tmp_path / "a.yaml", oom_backoff=False), ["--devices", "2"]),
        "1x32": (write_spec(tmp_path / "b.yaml", batch_size=32), []),
        "1x16xacc2": (write_spec(tmp_path / "c.yaml", grad_accum_steps=2), []),
        # ... and the back-off path, where rank 1 alone runs out of memory above 8 samples (Paddle's own
        # ResourceExhausted error): both ranks redo step 1 at micro-batch 8 x 2, gradients all-reduced after backward
        "dp2x16oom": (
            write_spec(
                tmp_path / "d.yaml", model="trainhelpers:oom_digits_cnn", model_args={"max_batch": 8, "rank": 1}
            ),
            ["--devices", "2"],
        ),
    }
    params = {}
    for name, (spec, extra) in runs.items():
        r = run(train_cmd(spec, tmp_path / name, *extra, "--json"))
        assert r.returncode == 0, r.stderr[-3000:]
        s = json.loads(r.stdout)
        assert s["steps"] == 6 and s["global_batch"] == 32 and s["devices"] == (2 if name.startswith("dp") else 1)
        if name == "dp2x16oom":  # rank 0's own split, so the ranks agreed; nobody waited in a collective
            assert (s["oom_backoffs"], s["micro_batch_size"]) == (1, 8), s
            assert "out of memory (step 1, rank 1, micro-batch 16) (reported by that rank)" in r.stderr
        # the back-off model wraps the same CNN as `net`: same parameters under a prefix
        params[name] = {k.removeprefix("net."): v for k, v in final_params(tmp_path / name).items()}
    ref = params["1x32"]
    start = {k: v for k, v in ref.items()}
    for name in ("dp2x16", "1x16xacc2", "dp2x16oom"):
        assert params[name].keys() == ref.keys()
        worst = max(float(np.max(np.abs(params[name][k] - ref[k]))) for k in ref)
        # measured: 5.96e-8 for all three on MKL's SSE kernels; on its AVX2 kernels (AMD CPUs,
        # paddlefit.process.mklpath: blocking by batch size, FMA) 4.6e-6, 4.6e-6 and 3.13e-5 (the 8-sample
        # micro-batches); float32 round-off of summing in another order, which Adam's m / sqrt(v) lifts for near-zero
        # gradients. 6 Adam steps of lr 3e-3 move weights by ~1e-2, so a wrong batch or a skipped all-reduce would show
        # as >1e-3.
        print(f"{name} vs 1x32: max abs param diff {worst:.3g}")
        assert worst < 2e-4, (name, worst)
    assert any(float(np.max(np.abs(start[k]))) > 0 for k in start)
    # rank 0 wrote every step's metrics once; no rank wrote a second copy
    lines = [json.loads(x) for x in (tmp_path / "dp2x16" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines if "loss" in x] == [1, 2, 3, 4, 5, 6]


def _uninterrupted(tmp_path: Path, spec: Path, name: str, *extra: str) -> str:
    r = run(train_cmd(spec, tmp_path / name, *extra))
    assert r.returncode == 0, r.stderr[-3000:]
    return summary(tmp_path / name)["params_sha256"]


@pytest.mark.slow
def test_sigterm_mid_epoch_then_resume_is_bit_identical(tmp_path: Path, slow60_reference: SharedRun) -> None:
    # 1,348 train images / 32 = 42 steps per epoch; 60 steps cross an epoch boundary; dropout-free CNN; the job of
    # slow60_reference, its uninterrupted run, with a checkpoint every 25 steps
    spec = write_spec(tmp_path / "s.yaml", **{**SLOW60_JOB, "checkpoint": {"every_steps": 25, "every_minutes": 0}})
    want = params_sha256(slow60_reference.run_dir)
    run_dir = tmp_path / "killed"
    proc = subprocess.Popen(
        train_cmd(spec, run_dir), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    wait_for_step(run_dir, 10, proc)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr[-2000:]
    ckpts = sorted(p.name for p in (run_dir / "checkpoints").glob("step-*"))
    stopped_at = int(ckpts[-1].split("-")[1])
    assert 10 <= stopped_at < 25 and stopped_at % 42 != 0, ckpts  # mid-epoch, before the first periodic one
    trainer_state = json.loads((run_dir / "checkpoints" / ckpts[-1] / "trainer.json").read_text())
    assert trainer_state["batch_in_epoch"] == stopped_at and trainer_state["epoch"] == 0
    r = run(train_cmd(spec, run_dir))
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"resumed from {run_dir / 'checkpoints' / ckpts[-1]}" in r.stderr
    assert summary(run_dir)["params_sha256"] == want
    steps = [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert steps == list(range(1, 61))  # metrics read as one run: no step twice, none missing


@pytest.mark.slow
def test_two_process_job_killed_and_resumed(tmp_path: Path, dp_reference: SharedRun) -> None:
    spec = write_spec(tmp_path / "s.yaml", **DP_KILL_JOB)
    want = params_sha256(dp_reference.run_dir)  # the same job, uninterrupted
    run_dir = tmp_path / "killed"
    proc = subprocess.Popen(
        train_cmd(spec, run_dir, "--devices", "2"), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    wait_for_step(run_dir, 8, proc)
    proc.send_signal(signal.SIGTERM)  # what a scheduler sends: to paddlefit, forwarded to the launcher
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr[-3000:]
    stopped_at = int(sorted((run_dir / "checkpoints").glob("step-*"))[-1].name.split("-")[1])
    # the stop wrote its own checkpoint, at the step it stopped (when that is no multiple of 5, no periodic one is)
    assert 8 <= stopped_at < 30 and json.loads((run_dir / "status.json").read_text())["step"] == stopped_at
    r = run(train_cmd(spec, run_dir, "--devices", "2"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"(step {stopped_at}," in r.stderr and summary(run_dir)["params_sha256"] == want


def _sigterm_at(cmd: list[str], run_dir: Path, step: int, env: dict) -> str:
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_step(run_dir, step, proc)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr[-3000:]
    return stderr


@pytest.mark.slow
def test_resume_on_another_device_count_uses_each_sample_once_and_keeps_the_schedule(tmp_path: Path) -> None:
    """2 devices, stopped mid-epoch; resumed on 1 (accumulation 2 keeps global batch 32), stopped after the epoch
    boundary; resumed on 2 to the end. The steps used each sample of the epochs' seeded orders exactly once, the
    LR followed one schedule over all 60 steps and the model learnt."""
    from collections import Counter

    from paddlefit.jobspec.spec import load_job_spec
    from paddlefit.train.build import build_schedule
    from paddlefit.train.data import ResumableBatchSampler

    spec = write_spec(
        tmp_path / "s.yaml",
        model="trainhelpers:index_logging_cnn",
        batch_size=16,
        max_steps=60,
        schedule={"name": "cosine", "warmup_steps": 5},
        data={
            "train": "trainhelpers:indexed_digits",
            "train_args": {"split": "train", "delay": 0.002},
            "eval": "trainhelpers:indexed_digits",
            "eval_args": {"split": "test"},
        },
    )
    run_dir, log = tmp_path / "r", tmp_path / "samples"
    env = dict(ENV, SAMPLE_LOG=str(log))
    _sigterm_at(train_cmd(spec, run_dir, "--devices", "2"), run_dir, 8, env)
    stderr = _sigterm_at(train_cmd(spec, run_dir, "--devices", "1"), run_dir, 45, env)
    assert "global batch 32 kept with 1 device(s) x micro-batch 16 x gradient accumulation 2" in stderr, stderr
    assert "not bit-identical" in stderr
    r = run(train_cmd(spec, run_dir, "--devices", "2", "--json"), env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    done = json.loads(r.stdout)
    assert (done["steps"], done["global_batch"], done["devices"], done["grad_accum_steps"]) == (60, 32, 2, 1)
    assert done["eval_accuracy"] >= 0.85

    used = Counter(int(i) for f in tmp_path.glob("samples.*") for i in f.read_text().split())
    order = ResumableBatchSampler(range(1348), 16, 2, 0, True, True, 3)  # the spec's seed; 42 steps an epoch
    want = Counter([*order.order(0).tolist(), *order.order(1)[: 18 * 32].tolist()])
    assert order.steps == 42 and sum(used.values()) == 60 * 32
    assert used == want  # every sample of epoch 0 once, and epoch 1's first 18 global batches

    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if "loss" in x and "eval_loss" not in x]
    assert [x["step"] for x in train] == list(range(1, 61))
    sched = build_schedule(load_job_spec(spec), 60)
    want_lr = []
    for _ in range(60):
        sched.step()
        want_lr.append(sched())
    assert [x["lr"] for x in train] == pytest.approx(want_lr, rel=1e-12, abs=0)


@pytest.mark.slow
def test_sigterm_to_one_worker_stops_all_ranks(tmp_path: Path) -> None:
    """A signal that reaches only rank 1 still stops both ranks at the same step, with a checkpoint."""
    import psutil

    spec = write_spec(
        tmp_path / "s.yaml",
        max_steps=200,
        data={"train": "trainhelpers:slow_digits", "train_args": {"split": "train", "delay": 0.002}},
    )
    run_dir = tmp_path / "r"
    proc = subprocess.Popen(
        train_cmd(spec, run_dir, "--devices", "2"), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    wait_for_step(run_dir, 5, proc)
    workers = [p for p in psutil.Process(proc.pid).children(recursive=True) if "PADDLE_TRAINER_ID" in p.environ()]
    rank1 = [p for p in workers if p.environ().get("PADDLE_TRAINER_ID") == "1"]
    assert len(workers) == 2 and len(rank1) == 1
    rank1[0].send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr[-3000:]
    assert json.loads((run_dir / "status.json").read_text())["reason"] == "stopped by signal"
    assert len(list((run_dir / "checkpoints").glob("step-*"))) == 1


@pytest.mark.slow
def test_sigkill_during_checkpoint_write_resumes_from_previous(tmp_path: Path) -> None:
    # SGD (no optimizer state) and a 100 MB unused parameter: each checkpoint takes a while to hash and fsync
    job = {"model": "trainhelpers:big_digits_mlp", "optimizer": "sgd", "lr": 0.05, "max_steps": 6}
    spec = write_spec(tmp_path / "s.yaml", **job, checkpoint={"every_steps": 2, "every_minutes": 0, "keep_last": 2})
    # the same job uninterrupted, writing its final 100 MB checkpoint only (when checkpoints are written does not
    # change the parameters: the resumed runs of the other tests reach their uninterrupted runs' bits)
    want = _uninterrupted(tmp_path, write_spec(tmp_path / "full.yaml", **job), "full")
    run_dir = tmp_path / "killed"
    proc = subprocess.Popen(train_cmd(spec, run_dir), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ckroot = run_dir / "checkpoints"
    end = time.time() + 120
    seen_tmp = None
    while time.time() < end and proc.poll() is None:
        complete = list(ckroot.glob("step-*")) if ckroot.exists() else []
        tmps = list(ckroot.glob(".tmp-*")) if ckroot.exists() else []
        if complete and tmps:  # the second checkpoint is being written
            seen_tmp = tmps[0].name
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    proc.communicate(timeout=60)
    assert seen_tmp is not None, "never caught a checkpoint being written"
    assert proc.returncode == -signal.SIGKILL
    complete = sorted(p.name for p in ckroot.glob("step-*"))
    assert complete == ["step-00000002"], complete  # only the complete one counts
    r = run(train_cmd(spec, run_dir))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "removed an incomplete checkpoint" in r.stderr and "step-00000002" in r.stderr
    assert summary(run_dir)["params_sha256"] == want


def test_corrupt_newest_checkpoint_is_skipped(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "s.yaml", max_steps=4, checkpoint={"every_steps": 2, "every_minutes": 0})
    run_dir = tmp_path / "r"
    want = _uninterrupted(tmp_path, spec, "r")  # the run, uninterrupted, before its newest checkpoint is damaged
    newest = run_dir / "checkpoints" / "step-00000004"
    data = (newest / "model.pdparams").read_bytes()
    (newest / "model.pdparams").write_bytes(data[: len(data) // 2])  # truncated copy
    r = run(train_cmd(spec, run_dir, "--max-steps", "4"))
    assert r.returncode == 0, r.stderr
    assert "skipping checkpoint step-00000004: model.pdparams has" in r.stderr
    assert "resumed from" in r.stderr and "step-00000002" in r.stderr
    assert summary(run_dir)["params_sha256"] == want


def test_resume_at_an_epoch_end_logs_its_eval_once(tmp_path: Path) -> None:
    """The checkpoint of an epoch's last step is written before that epoch's eval and the resumed run evaluates there
    again, as does a resumed finished run: metrics.jsonl keeps one eval line per step (found by bench/kill_soak.py)."""
    # 1,348 train images / 32 = 42 steps per epoch: the periodic checkpoint at step 42 ends epoch 1
    spec = write_spec(
        tmp_path / "s.yaml",
        batch_size=32,
        max_steps=50,
        data={"eval": "digits", "eval_args": {"split": "test"}},
        checkpoint={"every_steps": 42, "every_minutes": 0},
    )
    run_dir = tmp_path / "r"

    def records() -> list[tuple[int, bool]]:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        return [(x["step"], "eval_loss" in x) for x in map(json.loads, lines) if "event" not in x]

    r = run(train_cmd(spec, run_dir))
    assert r.returncode == 0, r.stderr[-3000:]
    want, once = summary(run_dir)["params_sha256"], records()
    assert [s for s, is_eval in once if is_eval] == [42, 50] and len(once) == 52
    shutil.rmtree(run_dir / "checkpoints" / "step-00000050")  # as if killed after step 50, before its checkpoint
    r = run(train_cmd(spec, run_dir))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "step-00000042 (step 42," in r.stderr
    assert records() == once and summary(run_dir)["params_sha256"] == want
    r = run(train_cmd(spec, run_dir))  # the finished run: its final checkpoint leaves nothing to train or record
    assert r.returncode == 0, r.stderr[-3000:]
    assert "step-00000050 (step 50," in r.stderr and "finished at step 50 already" in r.stderr and records() == once
    resumes = [x for x in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "event" in x]
    assert [(x["step"], x["lost_steps"]) for x in resumes] == [(42, [43, 50])]  # the one resume that trained


def test_temporary_files_of_killed_atomic_writes_are_removed(tmp_path: Path) -> None:
    """A SIGKILL between atomic_write_text's mkstemp and its rename leaves `.NAME.XXXX.tmp` in the run dir; the next
    run removes those of its own files (bench/kill_soak.py checks that none is left)."""
    import tempfile

    run_dir = tmp_path / "r"
    run_dir.mkdir()
    names = ("metrics.jsonl", "job.yaml", "status.json", "summary.json")
    stale = [Path(tempfile.mkstemp(prefix=f".{n}.", suffix=".tmp", dir=run_dir)[1]) for n in names]
    (run_dir / ".notes.txt.keep.tmp").write_text("not ours")
    r = run(train_cmd(write_spec(tmp_path / "s.yaml", max_steps=2), run_dir))
    assert r.returncode == 0, r.stderr[-3000:]
    assert not any(p.exists() for p in stale) and (run_dir / ".notes.txt.keep.tmp").exists()
    assert r.stderr.count("removed a temporary file left by a killed writer") == 4


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path: Path) -> None:
    # shuffle off, batch 16: samples 160.. are NaN, so step 11 is the first with a non-finite loss
    spec = write_spec(
        tmp_path / "s.yaml",
        model="trainhelpers:linear_digits",
        max_steps=30,
        checkpoint={"every_steps": 4, "every_minutes": 0},
        data={"train": "trainhelpers:nan_digits", "train_args": {"bad_from": 160}, "shuffle": False},
    )
    run_dir = tmp_path / "r"
    r = run(train_cmd(spec, run_dir))
    assert r.returncode == 3, r.stderr
    assert "at step 11 (not finite)" in r.stderr and "step-00000008" in r.stderr
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("step-*"))[-1] == "step-00000008"
    assert not (run_dir / "summary.json").exists()
    assert all(np.isfinite(v).all() for v in final_params(run_dir).values())


def test_checkpoint_write_failure_is_a_clear_error_and_leaves_nothing_half_written(tmp_path: Path) -> None:
    """A write limit of 100 KB (RLIMIT_FSIZE, as a full disk would) makes the 150 KB model.pdparams fail."""
    spec = write_spec(tmp_path / "s.yaml", max_steps=3)
    run_dir = tmp_path / "r"

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() then fails with EFBIG instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    r = run(train_cmd(spec, run_dir), preexec_fn=limit)
    assert r.returncode == 2, r.stderr
    assert "checkpoint for step 3 could not be written" in r.stderr and "Traceback" not in r.stderr
    assert list((run_dir / "checkpoints").iterdir()) == []  # no partial checkpoint, no temp dir


def test_unwritable_run_dir_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    spec = write_spec(tmp_path / "s.yaml")
    r = run(train_cmd(spec, tmp_path / "afile" / "run"))
    assert r.returncode == 2 and "is not writable" in r.stderr and "Traceback" not in r.stderr


def test_resume_keeps_the_global_batch_by_accumulation_or_refuses(tmp_path: Path, finished_run: SharedRun) -> None:
    finished_run.copy(tmp_path / "r")  # 2 steps at batch 16
    before = (tmp_path / "r" / "job.yaml").read_text()
    other = write_spec(tmp_path / "o.yaml", max_steps=4, batch_size=12)  # 16 is not a multiple of 12
    r = run(train_cmd(other, tmp_path / "r", "--json"))
    assert r.returncode == 2 and "global batch 16" in r.stderr and "--resume never" in r.stderr
    assert "(`batch_size` in the job spec) that keep it on 1 device(s): 1, 2, 4, 8, 16" in r.stderr, r.stderr
    assert json.loads(r.stdout)["error"]["exit_code"] == 2  # one JSON document on stdout
    assert (tmp_path / "r" / "job.yaml").read_text() == before  # a refused run leaves the job as run alone
    half = write_spec(tmp_path / "h.yaml", max_steps=4, batch_size=8)
    r = run(train_cmd(half, tmp_path / "r", "--json"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "global batch 16 kept with 1 device(s) x micro-batch 8 x gradient accumulation 2" in r.stderr
    done = json.loads(r.stdout)
    assert (done["steps"], done["global_batch"], done["grad_accum_steps"]) == (4, 16, 2)
    assert yaml.safe_load((tmp_path / "r" / "job.yaml").read_text())["grad_accum_steps"] == 2  # the job as run


@pytest.mark.slow
def test_examples_reach_their_accuracy_and_export(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    r = run(train_cmd(root / "examples" / "digits.yaml", tmp_path / "digits", "--json"))
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads(r.stdout)
    assert s["eval_accuracy"] >= 0.95 and s["epochs"] == 15
    assert 0 <= s["data_wait_fraction"] < 1 and s["peak_memory_bytes"] > 0 and s["samples_per_s"] > 0
    r = run(train_cmd(root / "examples" / "sentiment-zh.yaml", tmp_path / "senti", "--json"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout)["eval_accuracy"] >= 0.80
    r = run([sys.executable, "-m", "paddlefit.cli.main", "export", str(tmp_path / "digits"), "--json"])
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["max_abs_diff"] <= 1e-5 and "model.pdiparams" in doc["files"]
    import paddle

    loaded = paddle.jit.load(doc["prefix"])
    from paddlefit.examples.datasets import digits

    x = digits("test").x[:4]
    assert list(loaded(paddle.to_tensor(x)).shape) == [4, 10]


def test_time_triggered_checkpoints_and_keep_last(tmp_path: Path) -> None:
    # 32 samples x 2 ms = ~64 ms per step; a checkpoint every 0.12 s of wall time, step trigger off
    spec = write_spec(
        tmp_path / "s.yaml",
        batch_size=32,
        max_steps=20,
        data={"train": "trainhelpers:slow_digits", "train_args": {"split": "train", "delay": 0.002}},
        checkpoint={"every_steps": 0, "every_minutes": 0.002, "keep_last": 3},
    )
    r = run(train_cmd(spec, tmp_path / "r"))
    assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in (tmp_path / "r" / "checkpoints").iterdir())
    assert len(names) == 3 and names[-1] == "step-00000020", names  # pruned to keep_last, final one newest
    assert all(0 < int(n.split("-")[1]) < 20 for n in names[:-1])  # the others came from the clock


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (
            {"data": {"train": "trainhelpers:raising_digits", "train_args": {}, "shuffle": False}},
            "reading `data.train` failed: sample 100: IndexError: bad index 100",
        ),
        (
            {"data": {"train": "trainhelpers:raising_digits", "train_args": {}, "shuffle": False, "num_workers": 1}},
            "the DataLoader failed: SystemError",
        ),
        ({"loss": "trainhelpers:per_sample_loss"}, "must return a scalar tensor; got [16]"),
        ({"model_args": {"nope": 1}}, "could not be built with model_args {'nope': 1}"),
    ],
)
def test_user_code_errors_are_clear_and_do_not_hang(tmp_path: Path, overrides: dict, needle: str) -> None:
    # batch 16, in order: samples 96..111 make step 7's batch; the reader runs ahead of training, so the error
    # surfaces a step or two earlier. Paddle's single-process DataLoader blocks forever without the guard.
    spec = write_spec(tmp_path / "s.yaml", max_steps=20, **overrides)
    r = run(train_cmd(spec, tmp_path / "r"), timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    assert needle in r.stderr, r.stderr[-2000:]
    if "num_workers" not in overrides.get("data", {}):  # with workers, Paddle itself prints the worker's traceback
        assert "Traceback" not in r.stderr


def test_bad_checkpoints_and_export_targets_are_refused(tmp_path: Path, finished_run: SharedRun) -> None:
    spec, run_dir = finished_run.spec, finished_run.copy(tmp_path / "r")
    other = write_spec(tmp_path / "o.yaml", model="trainhelpers:linear_digits", max_steps=2)
    assert run(train_cmd(other, tmp_path / "o")).returncode == 0
    ck_other = tmp_path / "o" / "checkpoints" / "step-00000002"
    # another model's checkpoint
    r = run(train_cmd(spec, tmp_path / "r2", "--resume", str(ck_other), "--trust-checkpoint"))
    assert r.returncode == 2 and "does not match `model: paddlefit.models.examples:digits_cnn`" in r.stderr, r.stderr
    # a manifest that verifies nothing
    (ck_other / "manifest.json").write_text('{"format": 1, "files": []}')
    r = run(train_cmd(other, tmp_path / "o", "--resume", str(ck_other)))
    assert r.returncode == 2 and "manifest does not list" in r.stderr and "Traceback" not in r.stderr
    # export: never replace a directory holding user files, never the run itself, never another model's checkpoint
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.txt").write_text("keep me")
    cli = [sys.executable, "-m", "paddlefit.cli.main", "export", str(run_dir)]
    r = run([*cli, "--out", str(tmp_path / "mine")])
    assert r.returncode == 2 and "holds other files (thesis.txt)" in r.stderr
    assert (tmp_path / "mine" / "thesis.txt").read_text() == "keep me"
    r = run([*cli, "--out", str(run_dir)])
    assert r.returncode == 2 and "would overwrite the run itself" in r.stderr
    assert (run_dir / "checkpoints" / "step-00000002" / "manifest.json").exists()
    # a user's own file named like an export's is no earlier export
    (tmp_path / "mine" / "thesis.txt").rename(tmp_path / "mine" / "model.json")
    r = run([*cli, "--out", str(tmp_path / "mine")])
    assert r.returncode == 2 and "holds model.json but no whole earlier export" in r.stderr, r.stderr
    assert (tmp_path / "mine" / "model.json").read_text() == "keep me"
    # the temporary folder of an export killed before its rename (its process gone) is removed by the next export
    stale = run_dir / ".inference.tmp-999999999"
    stale.mkdir()
    (stale / "model.pdiparams").write_bytes(b"half")
    assert run([*cli]).returncode == 0 and not stale.exists()


def test_amp_on_cpu_warns_once_and_trains_fp32(tmp_path: Path, finished_run: SharedRun) -> None:
    spec = write_spec(tmp_path / "s.yaml", precision="bf16-o1", max_steps=2)
    r = run(train_cmd(spec, tmp_path / "r", "--json"))
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("has no effect on CPU") == 1
    s = json.loads(r.stdout)
    assert s["precision"] == "bf16-o1" and s["amp_active"] is False and s["device"] == "cpu"
    # fp32 is what ran: the same parameters as an fp32 run of the same job
    assert params_sha256(finished_run.run_dir) == s["params_sha256"]


@pytest.mark.slow
def test_budget_stops_with_a_checkpoint_and_resume_is_bit_identical(
    tmp_path: Path, slow60_reference: SharedRun
) -> None:
    spec = write_spec(tmp_path / "s.yaml", **SLOW60_JOB)
    want = params_sha256(slow60_reference.run_dir)  # the same job, uninterrupted
    run_dir = tmp_path / "budget"
    limit_h = 1.5 / 3600  # 1.5 s of wall time; the 60 steps take > 4 s (2.9 s of them sleeping in the dataset)
    r = run(train_cmd(spec, run_dir, "--max-hours", f"{limit_h:.10f}", "--checkpoint-interval", "auto"))
    assert r.returncode == 4, r.stderr[-3000:]
    assert "checkpoint interval (auto): writing took" in r.stderr and "Exit 4" in r.stderr
    status = json.loads((run_dir / "status.json").read_text())
    assert status["exit_code"] == 4 and "reached max_hours" in status["reason"]
    ckpts = sorted(p.name for p in (run_dir / "checkpoints").glob("step-*"))
    assert ckpts[0] == "step-00000001"  # auto interval: the first step's checkpoint measures the write time
    stopped_at = int(ckpts[-1].split("-")[1])
    assert 1 <= stopped_at < 60 and not (run_dir / "summary.json").exists()
    state = json.loads((run_dir / "checkpoints" / ckpts[-1] / "trainer.json").read_text())
    assert 1.5 <= state["totals"]["wall_s"] < 30
    # the same limit again: the wall time carried in the checkpoint is already over it -> one step, stop
    r = run(train_cmd(spec, run_dir, "--max-hours", f"{limit_h:.10f}"))
    assert r.returncode == 4, r.stderr[-3000:]
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("step-*"))[-1] == f"step-{stopped_at + 1:08d}"
    r = run(train_cmd(spec, run_dir, "--max-cost", "5", "--price-per-hour", "1.2"))
    assert r.returncode == 0, r.stderr[-3000:]
    s = summary(run_dir)
    assert s["params_sha256"] == want and s["steps"] == 60
    assert s["cost_usd"] == pytest.approx(s["wall_seconds"] / 3600 * 1.2) and s["wall_seconds"] > 1.5


@pytest.mark.slow
def test_budget_stops_every_rank_of_a_two_process_job(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path / "s.yaml",
        max_steps=200,
        data={"train": "trainhelpers:slow_digits", "train_args": {"split": "train", "delay": 0.002}},
    )
    run_dir = tmp_path / "dp2"
    r = run(train_cmd(spec, run_dir, "--devices", "2", "--max-cost", f"{3 / 3600 * 2:.8f}", "--price-per-hour", "2"))
    assert r.returncode == 4, r.stderr[-3000:]
    ckpts = sorted((run_dir / "checkpoints").glob("step-*"))
    assert len(ckpts) == 1 and 1 <= int(ckpts[0].name.split("-")[1]) < 200
    # rank 0 writes the status; when rank 1's clock crossed the limit first, it says so and names the limit
    reason = json.loads((run_dir / "status.json").read_text())["reason"]
    assert "reached max_cost_usd" in reason or "budget reached on another rank (max_cost_usd 0.00166667)" in reason


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--max-cost", "3"], "needs the price"),
        (["--max-hours", "-1"], "--max-hours"),
        (["--max-cost", "3", "--instance", "g5.xlargee"], "Did you mean: g5.xlarge"),
        (["--max-cost", "3", "--instance", "n1-standard-8"], "several prices"),
        (["--max-cost", "3", "--instance", "gpu_1x_a10", "--spot"], "no spot price"),
        (["--max-cost", "3", "--price-per-hour", "1", "--instance", "g5.xlarge"], "not both"),
        (["--checkpoint-interval", "soon"], "`auto` or minutes"),
        (["--spot-bucket", "<5%"], "go with `--checkpoint-interval auto`"),
        (["--spot"], "go with `--instance`"),
    ],
)
def test_budget_and_interval_options_are_checked(tmp_path: Path, extra: list, needle: str) -> None:
    r = run(train_cmd(write_spec(tmp_path / "s.yaml"), tmp_path / "r", *extra), timeout=120)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "r" / "checkpoints").exists()


def test_instance_price_comes_from_the_catalog(tmp_path: Path) -> None:
    env = dict(ENV, HOME=str(tmp_path))  # no SkyPilot cache: the shipped snapshot
    spec = write_spec(tmp_path / "s.yaml", max_steps=2)
    r = subprocess.run(
        train_cmd(spec, tmp_path / "r", "--max-cost", "100", "--instance", "g5.xlarge", "--spot", "--json"),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "g5.xlarge spot 0.4591 USD/hour" in r.stderr
    s = json.loads(r.stdout)
    assert s["cost_usd"] == pytest.approx(s["wall_seconds"] / 3600 * 0.4591)


def test_refused_devices_leave_the_run_dir_alone_and_json_reports_early_stops(
    tmp_path: Path, finished_run: SharedRun
) -> None:
    spec, run_dir = finished_run.spec, finished_run.copy(tmp_path / "r")
    before = (run_dir / "job.yaml").read_text()
    r = run(train_cmd(spec, run_dir, "--max-steps", "999", "--devices", "64"), timeout=120)
    assert r.returncode == 2 and "CPU processes" in r.stderr
    assert (run_dir / "job.yaml").read_text() == before  # checked before anything is written
    r = run(train_cmd(spec, tmp_path / "b", "--max-steps", "50", "--max-hours", "1e-9", "--json"))
    assert r.returncode == 4 and json.loads(r.stdout)["exit_code"] == 4
    over = write_spec(tmp_path / "o.yaml", max_steps=2, budget={"max_cost_usd": 1})
    r = run(train_cmd(over, tmp_path / "c"), timeout=120)
    assert r.returncode == 2 and "needs the price" in r.stderr
    assert run(train_cmd(over, tmp_path / "c", "--price-per-hour", "2")).returncode == 0  # the option supplies it


@pytest.mark.parametrize(("when", "how"), [("eval", "raise"), ("train", "exit")])
def test_a_model_failing_mid_run_is_a_job_failure_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str, how: str
) -> None:
    """A model that raises (here: in its eval pass) or calls sys.exit() during a training step is a failed job
    (JobFailedError, exit 1), not bad input and not a clean exit."""
    from paddlefit.errors import JobFailedError

    monkeypatch.syspath_prepend(str(DATA))
    spec = write_spec(
        tmp_path / "s.yaml",
        model="trainhelpers:failing_digits_cnn",
        model_args={"when": when, "how": how},
        data={"eval": "digits", "eval_args": {"split": "test"}},
        max_steps=4,
    )
    with pytest.raises(
        JobFailedError,
        match="eval at step 4: the model or loss raised RuntimeError"
        if when == "eval"
        else "step 3: the model or loss raised SystemExit",
    ) as e:
        _train_here(spec, tmp_path / "r")
    assert e.value.exit_code == 1


def _oom_spec(path: Path, max_batch: int, where: str = "forward", **overrides) -> Path:
    return write_spec(
        path, model="trainhelpers:oom_digits_cnn", model_args={"max_batch": max_batch, "where": where}, **overrides
    )


def _train_here(spec_path: Path, run_dir: Path) -> tuple[object, list[str]]:
    """Run the trainer in this process (as `train` does for one device); returns (RunResult, log lines)."""
    from paddlefit.jobspec.spec import load_job_spec
    from paddlefit.train.loop import Trainer, TrainOptions

    lines: list[str] = []
    result = Trainer(
        load_job_spec(spec_path), TrainOptions(run_dir=run_dir, resume="never", progress=False, log=lines.append)
    ).run()
    return result, lines


def test_oom_backoff_halves_the_micro_batch_and_keeps_the_global_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of 32 that runs out of memory (Paddle's own ResourceExhausted MemoryError, in forward or in backward
    after later layers have gradients) trains exactly as batch 16 x accumulation 2: the same bits."""
    monkeypatch.syspath_prepend(str(DATA))
    plain, _ = _train_here(
        _oom_spec(tmp_path / "p.yaml", 1000, "backward", batch_size=16, grad_accum_steps=2), tmp_path / "plain"
    )
    want = plain.summary
    assert plain.exit_code == 0 and want["oom_backoffs"] == 0 and want["micro_batch_size"] == 16
    for where in ("forward", "backward"):
        res, log = _train_here(_oom_spec(tmp_path / f"{where}.yaml", 16, where, batch_size=32), tmp_path / where)
        s = res.summary
        assert res.exit_code == 0 and s["params_sha256"] == want["params_sha256"], where
        assert (s["oom_backoffs"], s["micro_batch_size"], s["grad_accum_steps"], s["global_batch"]) == (1, 16, 2, 32)
        text = "\n".join(log)
        assert "out of memory (step 1, rank 0, micro-batch 32)" in text
        assert "(ResourceExhausted) Fail to alloc memory" in text and "micro-batch 16 x 2 accumulation" in text
        lines = [json.loads(x) for x in (tmp_path / where / "metrics.jsonl").read_text().splitlines()]
        assert [x["micro_batch_size"] for x in lines if "loss" in x] == [16] * 6
        ck = sorted((tmp_path / where / "checkpoints").glob("step-*"))[-1]
        assert json.loads((ck / "trainer.json").read_text())["micro_batch_split"] == 2
    # 32 -> 16 -> 8 -> 4 -> 2 -> 1 -> still out of memory: give up, naming the fixes (through the CLI: exit 1, the
    # job failed; not bad input)
    r = run(train_cmd(_oom_spec(tmp_path / "never.yaml", 0, batch_size=32), tmp_path / "never"))
    assert r.returncode == 1 and "out of memory at micro-batch 1 (step 1, rank 0" in r.stderr, r.stderr[-3000:]
    assert r.stderr.count("Redoing the step") == 5 and "Traceback" not in r.stderr
    with pytest.raises(PaddlefitError, match="set `oom_backoff: true`"):
        _train_here(_oom_spec(tmp_path / "off.yaml", 16, batch_size=32, oom_backoff=False), tmp_path / "off")


def test_resuming_an_older_checkpoint_in_one_process_drops_the_abandoned_later_ones(tmp_path: Path) -> None:
    """`--resume PATH` to an older checkpoint: the later checkpoints were of the run abandoned there; kept, the
    new run's saves at their steps were skipped ("same step, same state"), so its last checkpoint held the old
    weights while summary.json named the new ones, and `--resume auto` would go back to the old run. Also: a
    second run_job in one process resumes (the optimizer's accumulator names used to differ: AssertionError)."""
    from paddlefit.jobspec.spec import load_job_spec
    from paddlefit.train.metrics import params_sha256
    from paddlefit.train.run import run_job

    run_dir = tmp_path / "r"
    spec = load_job_spec(write_spec(tmp_path / "s.yaml", max_steps=6, checkpoint={"every_steps": 2})).model_copy(
        update={"run_dir": str(run_dir)}
    )
    assert run_job(spec, resume="never", log=lambda m: None).exit_code == 0
    old = {p.name: (p / "manifest.json").read_text() for p in (run_dir / "checkpoints").iterdir()}
    assert sorted(old) == ["step-00000002", "step-00000004", "step-00000006"]
    lines: list[str] = []
    other = spec.model_copy(update={"lr": 0.01})  # another course from step 2 on
    out = run_job(other, resume=str(run_dir / "checkpoints" / "step-00000002"), log=lines.append)
    assert out.exit_code == 0 and out.summary is not None
    assert any("removed 2 later checkpoint(s)" in line for line in lines), lines
    ckpts = {p.name: (p / "manifest.json").read_text() for p in (run_dir / "checkpoints").iterdir()}
    assert sorted(ckpts) == sorted(old) and ckpts["step-00000002"] == old["step-00000002"]
    assert ckpts["step-00000004"] != old["step-00000004"] and ckpts["step-00000006"] != old["step-00000006"]
    import paddle

    from paddlefit.models.examples import digits_cnn

    model = digits_cnn()
    model.set_state_dict(paddle.load(str(run_dir / "checkpoints" / "step-00000006" / "model.pdparams")))
    assert params_sha256(model) == out.summary["params_sha256"]  # the last checkpoint is the run summarised


def test_a_kept_global_batch_larger_than_the_data_names_the_checkpoint(tmp_path: Path) -> None:
    """The accumulation that keeps a checkpoint's global batch comes from the checkpoint, not the spec: when the
    data is now smaller than that batch, the refusal says so instead of "lower grad_accum_steps" alone."""
    from paddlefit.jobspec.spec import load_job_spec
    from paddlefit.train.run import run_job

    run_dir = tmp_path / "r"
    spec = load_job_spec(write_spec(tmp_path / "s.yaml", batch_size=8, max_steps=2)).model_copy(
        update={"run_dir": str(run_dir)}
    )
    assert run_job(spec, resume="never", log=lambda m: None).exit_code == 0
    small = spec.model_copy(
        update={
            "batch_size": 4,
            "data": spec.data.model_copy(update={"train_args": {"split": "train", "test_fraction": 0.9965}}),
        }
    )  # 6 samples: < 8, > 4
    with pytest.raises(PaddlefitError) as err:
        run_job(small, log=lambda m: None)
    msg = str(err.value)
    assert "fewer than one global batch (4 x 1 devices x 2 accumulation)" in msg, msg
    assert "Gradient accumulation 2 comes from" in msg and "step-00000002" in msg and "--resume never" in msg


def test_sigterm_while_the_workers_start_is_exit_143_not_the_launchers_15(tmp_path: Path) -> None:
    """SIGTERM to `train --devices N` before any worker recorded a status (Paddle's launcher then exits 15, its
    workers killed mid-import): 143 like any stop, so a scheduler's ExitCode policy retries it (1-127: never)."""
    import threading

    from paddlefit.train.launcher import run_launched

    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    code, reason = run_launched([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path, relay=lambda m: None)
    timer.join()
    assert code == 143 and "stopped by SIGTERM during start-up" in reason, (code, reason)
