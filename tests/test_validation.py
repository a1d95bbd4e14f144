"""paddlefit.validation and the request models built on it (they replace paddlefit.fieldcheck): a library caller
passing the wrong type or a value out of range gets a PaddlefitError naming the field (or its CLI option), never a
ValidationError or a bare TypeError later, and never a value that works wrongly."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from pydantic import Field

from paddlefit.errors import PaddlefitError
from paddlefit.jobspec.spec import Precision
from paddlefit.validation import RequestModel


class Req(RequestModel):
    n: int = Field(1, json_schema_extra={"flag": "--n"})
    x: float = 0.5
    names: list[str] = Field(default_factory=list)
    where: Path | None = None
    prec: Precision = Precision.FP32
    shape: tuple[int, ...] = (1, 2)
    args: dict[str, int] = Field(default_factory=dict)
    flag: bool = False
    count: int | None = Field(None, ge=1, le=10)


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"n": True}, "`--n` must be int (got bool True)"),
        ({"n": 2.5}, "`--n` must be int (got float 2.5)"),
        ({"x": "0.5"}, "`Req.x` must be float (got str '0.5')"),
        ({"names": "T4"}, "`Req.names` must be list[str] (got str 'T4')"),
        ({"names": ["T4", 4]}, "`Req.names` must be list[str]"),
        ({"where": "out"}, "`Req.where` must be Path | None"),
        ({"prec": "fp32"}, "`Req.prec` must be"),
        ({"shape": (1, "2")}, "`Req.shape` must be tuple[int, ...]"),
        ({"args": {"a": "1"}}, "`Req.args` must be dict[str, int]"),
        ({"flag": 1}, "`Req.flag` must be bool (got int 1)"),
    ],
)
def test_wrong_types_name_the_field(kw: dict, needle: str) -> None:
    with pytest.raises(PaddlefitError, match=re.escape(needle)):
        Req(**kw)


def test_right_types_pass_and_ints_are_floats() -> None:
    r = Req(n=3, x=2, names=["a"], where=Path("p"), prec=Precision.BF16_O1, shape=(), args={"a": 1})
    assert r.x == 2.0 and r.where == Path("p")
    # finiteness is every request's rule now (fieldcheck left it to each request's own checks)
    with pytest.raises(PaddlefitError, match=re.escape("`Req.x` must be a finite number (got inf)")):
        Req(x=math.inf)


def test_constraints_and_unknown_fields_are_user_errors() -> None:
    with pytest.raises(PaddlefitError, match=re.escape("`Req.count` must be 1..10 (got 0).")):
        Req(count=0)
    with pytest.raises(PaddlefitError, match="`bogus` is not a field of Req"):
        Req(bogus=1)


def test_the_core_requests_check_their_types() -> None:
    from paddlefit.cost.request import CostRequest
    from paddlefit.deploy.image import ImageRequest
    from paddlefit.deploy.targets import LaunchRequest
    from paddlefit.diagnose.doctor import DoctorRequest
    from paddlefit.job.resolve import JobOptions
    from paddlefit.plan.request import PlanRequest
    from paddlefit.train.request import TrainRequest

    cases = [
        (lambda: PlanRequest(model="lenet", batch_size="8"), "`--batch-size` must be int"),
        (lambda: PlanRequest(model="lenet", gpus="T4"), "`--gpu` must be list[str]"),
        (lambda: PlanRequest(model="lenet", optimizer="bogus"), "`--optimizer` must be"),
        (lambda: CostRequest(clouds="aws"), "`--cloud` must be list[str]"),
        (lambda: CostRequest(dataset_size=100.5, epochs=1.0), "`--dataset-size` must be int | None"),
        (lambda: JobOptions(model="lenet", batch_size=1.5), "`--batch-size` must be int | None"),
        (lambda: TrainRequest(config=123), "`CONFIG` must be Path | str"),
        (lambda: TrainRequest(config="j.yaml", devices=2), "`--devices` must be str | None"),
        (lambda: DoctorRequest(config="j.yaml"), "`--config` must be Path | None"),
        (lambda: ImageRequest(requirements="paddleocr==3.0.0"), "`--requirement` must be list[str]"),
        (lambda: LaunchRequest(config=Path("j.yaml"), target="local", nodes="2"), "`--nodes` must be int"),
    ]
    for make, needle in cases:
        with pytest.raises(PaddlefitError, match=re.escape(needle)):
            make()


@pytest.mark.parametrize(
    ("cls", "kw", "needle"),
    [
        ("train", {"config": "j.yaml", "max_steps": 0}, "`--max-steps` must be >= 1 (got 0)."),
        ("train", {"config": "j.yaml", "max_hours": math.nan}, "`--max-hours` must be a finite number > 0 (got nan)."),
        ("doctor", {"prefetch_factor": 0}, "`--prefetch-factor` must be >= 1 (got 0)."),
        ("image", {"devices": 0}, "`--devices` must be >= 1 (got 0)."),
        ("launch", {"config": Path("j"), "target": "local", "port": 70000}, "`--port` must be 1..65535 (got 70000)."),
        ("inference", {"model": "lenet", "batch_sizes": [8, 0]}, "`--batch-size` must be 1..65536 (got [8, 0])."),
        ("inference", {"model": "lenet", "batch_sizes": []}, "`--batch-size` is empty"),
        ("inference", {"model": "lenet", "latency_ms": 0.0}, "`--latency-ms` must be in (0, 3600000] (got 0.0)."),
        ("inference", {"model": "lenet", "safety_margin": math.inf}, "`--safety-margin` must be in (0, 1] (got inf)."),
    ],
)
def test_ranges_are_field_constraints_named_by_option(cls: str, kw: dict, needle: str) -> None:
    from paddlefit.deploy.image import ImageRequest
    from paddlefit.deploy.targets import LaunchRequest
    from paddlefit.diagnose.doctor import DoctorRequest
    from paddlefit.serving.job import InferenceRequest
    from paddlefit.train.request import TrainRequest

    make = {
        "train": TrainRequest,
        "doctor": DoctorRequest,
        "image": ImageRequest,
        "launch": LaunchRequest,
        "inference": InferenceRequest,
    }[cls]
    with pytest.raises(PaddlefitError, match=re.escape(needle)):
        make(**kw)
