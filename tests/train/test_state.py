"""paddlefit.train.state: trainer.json round trip, old checkpoints, and validation against the job."""

from __future__ import annotations

import json

import pytest

from paddlefit.errors import PaddlefitError
from paddlefit.train.state import TrainerState


def _state(**kw: object) -> TrainerState:
    base = {"global_batch": 64, "batch_size": 32, "devices": 1, "grad_accum_steps": 2, "seed": 0}
    return TrainerState(**{**base, **kw})  # type: ignore[arg-type]


def test_trainer_state_round_trips_and_reads_old_checkpoints() -> None:
    st = _state(
        step=12,
        epoch=1,
        batch_in_epoch=4,
        micro_batch_split=2,
        total_steps=40,
        last_loss=0.5,
        scheduler={"last_epoch": 12},
        totals={"train_s": 1.5, "wait_s": 0.1, "samples": 768.0},
    )
    doc = json.loads(json.dumps(st.to_json()))
    assert TrainerState.from_json(doc, "ck") == st
    assert set(doc) == {
        "global_batch",
        "batch_size",
        "devices",
        "grad_accum_steps",
        "seed",
        "step",
        "epoch",
        "batch_in_epoch",
        "micro_batch_split",
        "total_steps",
        "scheduler",
        "scaler",
        "totals",
        "last_loss",
    }
    old = {k: v for k, v in doc.items() if k not in ("micro_batch_split", "total_steps")} | {"extra": 1}
    read = TrainerState.from_json(old, "ck")
    assert read.micro_batch_split == 1 and read.total_steps is None and read.step == 12


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ([], "not a JSON object"),
        ({"step": 1}, "lacks global_batch"),
        (
            {"global_batch": 64, "batch_size": 32, "devices": 1, "grad_accum_steps": 2, "seed": 0, "step": "3"},
            "`step` is '3', not an integer",
        ),
        ({"global_batch": 64.0, "batch_size": 32, "devices": 1, "grad_accum_steps": 2, "seed": 0}, "`global_batch`"),
        (
            {
                "global_batch": 64,
                "batch_size": 32,
                "devices": 1,
                "grad_accum_steps": 2,
                "seed": 0,
                "totals": {"train_s": "x"},
            },
            "`totals.train_s` is 'x'",
        ),
        (
            {
                "global_batch": 64,
                "batch_size": 32,
                "devices": 1,
                "grad_accum_steps": 2,
                "seed": 0,
                "totals": {"wall_s": -1e9},
            },
            "`totals.wall_s` is -1000000000.0",
        ),
        (
            {"global_batch": 64, "batch_size": 32, "devices": 1, "grad_accum_steps": 2, "seed": 0, "last_loss": "x"},
            "`last_loss` is 'x'",
        ),
    ],
)
def test_trainer_state_refuses_malformed_json(doc: object, needle: str) -> None:
    with pytest.raises(PaddlefitError, match=needle):
        TrainerState.from_json(doc, "runs/x/checkpoints/step-00000003")


@pytest.mark.parametrize(
    ("state", "needle"),
    [
        (_state(global_batch=128), "global batch 128"),
        (_state(batch_in_epoch=23), "position"),
        (_state(step=-1), "position"),
        (_state(micro_batch_split=3), "micro_batch_split 3"),
        (_state(micro_batch_split=128), "micro_batch_split 128"),
    ],
)
def test_trainer_state_must_fit_the_job(state: TrainerState, needle: str) -> None:
    with pytest.raises(PaddlefitError, match=needle):
        state.check_fits("ck", global_batch=64, batch_size=32, steps_per_epoch=11)
    _state(step=11, batch_in_epoch=22, micro_batch_split=64).check_fits(
        "ck", global_batch=64, batch_size=32, steps_per_epoch=11
    )
    _state(step=25, epoch=2, batch_in_epoch=6).check_fits("ck", global_batch=64, batch_size=32, steps_per_epoch=11)


@pytest.mark.parametrize(("step", "epoch", "batch_in_epoch"), [(10**15, 0, 4), (4, 10**15, 0), (3, 0, 5), (0, 0, 2)])
def test_a_position_the_steps_cannot_reach_is_refused(step: int, epoch: int, batch_in_epoch: int) -> None:
    """step = epoch x steps_per_epoch + batch_in_epoch / grad_accum_steps for a checkpoint of this job's layout."""
    with pytest.raises(PaddlefitError, match="impossible for this job"):
        _state(step=step, epoch=epoch, batch_in_epoch=batch_in_epoch).check_fits(
            "ck", global_batch=64, batch_size=32, steps_per_epoch=11
        )


def test_the_global_batch_is_kept_by_accumulation_on_another_device_count() -> None:
    from paddlefit.train.state import kept_accumulation

    two = _state(global_batch=64, batch_size=32, devices=2, grad_accum_steps=1, step=14, epoch=1, batch_in_epoch=3)
    assert kept_accumulation(two, "ck", devices=1, batch_size=32) == 2
    assert kept_accumulation(two, "ck", devices=4, batch_size=8) == 2
    assert kept_accumulation(two, "ck", devices=2, batch_size=32) == 1
    with pytest.raises(PaddlefitError) as err:
        kept_accumulation(two, "ck", devices=3, batch_size=32)
    msg = str(err.value)
    assert "global batch 64 (32 x 2 devices x 1 accumulation)" in msg and "not a multiple of 96" in msg
    assert "on 3 device(s): none (64 is not divisible by 3)" in msg and "micro-batch 32: 1, 2." in msg
    with pytest.raises(PaddlefitError, match=r"on 2 device\(s\): 1, 2, 4, 8, 16, 32; device counts .* none"):
        kept_accumulation(two, "ck", devices=2, batch_size=48)
    moved = two.in_layout(batch_size=32, devices=1, grad_accum_steps=2)
    assert (moved.step, moved.epoch, moved.batch_in_epoch, moved.devices, moved.grad_accum_steps) == (14, 1, 6, 1, 2)
    moved.check_fits("ck", global_batch=64, batch_size=32, steps_per_epoch=11)
    eight = two.in_layout(batch_size=8, devices=4, grad_accum_steps=2)
    assert eight.batch_in_epoch == 6 and eight.micro_batch_split == 1
    with pytest.raises(PaddlefitError, match="not the checkpoint's global batch 64"):
        two.in_layout(batch_size=32, devices=1, grad_accum_steps=1)


def test_a_layout_that_does_not_make_the_global_batch_is_refused() -> None:
    with pytest.raises(PaddlefitError, match=r"global_batch 64 is not batch_size x devices x grad_accum_steps"):
        _state(grad_accum_steps=0).check_fits("ck", global_batch=64, batch_size=32, steps_per_epoch=11)
    with pytest.raises(PaddlefitError, match=r"\(32, 1, 3\)"):
        _state(grad_accum_steps=3).check_fits("ck", global_batch=64, batch_size=32, steps_per_epoch=11)


def test_trainer_json_with_a_layout_that_is_not_its_global_batch_is_refused_on_read() -> None:
    doc = {"global_batch": 0, "batch_size": 0, "devices": 1, "grad_accum_steps": 2, "seed": 0}
    with pytest.raises(PaddlefitError, match=r"global_batch 0 is not batch_size x devices x grad_accum_steps"):
        TrainerState.from_json(doc, "ck")


def test_ranks_agree_on_a_resume_path_of_any_name(tmp_path, monkeypatch) -> None:
    """`--resume best/` (a checkpoint copied under another name) on several devices: rank 0 parsed the step out
    of the directory name to broadcast it (IndexError traceback); now it broadcasts only that it resumes, and
    every rank reads the path."""
    from pathlib import Path

    import paddle

    from paddlefit.train.checkpoint import REQUIRED_FILES, CheckpointStore
    from paddlefit.train.resume import agree_on_resume

    store = CheckpointStore(tmp_path / "run" / "checkpoints")
    files = [*REQUIRED_FILES, "rng.json"]
    state = json.dumps(TrainerState(global_batch=8, batch_size=4, devices=2, grad_accum_steps=1, seed=0).to_json())

    def write(d: Path) -> None:  # a readable trainer.json and rng.json: `--resume auto` skips unreadable ones
        for name in files:
            (d / name).write_text(state if name == "trainer.json" else "{}" if name == "rng.json" else name)

    saved = store.save(5, write)
    best = saved.rename(tmp_path / "best")
    sent: list[int] = []

    def broadcast(t, src: int) -> None:  # rank 0 sends; another rank receives what rank 0 sent last
        if int(t.item()) == -1 and sent:
            t.set_value(paddle.to_tensor([sent[-1]], dtype="int64"))
        sent.append(int(t.item()))

    monkeypatch.setattr(paddle.distributed, "broadcast", broadcast)
    assert agree_on_resume(str(best), store, world=2, is_writer=True, log=print, trust=True) == best
    assert agree_on_resume(str(best), store, world=2, is_writer=False, log=print, trust=True) == Path(str(best))
    sent.clear()
    assert agree_on_resume("auto", store, world=2, is_writer=True, log=print) is None and sent[-1] == -1
    again = store.save(7, write)
    assert agree_on_resume("auto", store, world=2, is_writer=True, log=print) == again and sent[-1] == 7
