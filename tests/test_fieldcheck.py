"""paddlefit.fieldcheck and the requests that use it: a library caller passing the wrong type gets a PaddlefitError
naming the field (or its CLI option), never a bare TypeError later, and never a value that works wrongly."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from paddlefit.errors import PaddlefitError
from paddlefit.fieldcheck import check_field_types
from paddlefit.spec import Precision


@dataclass
class Req:
    n: int = 1
    x: float = 0.5
    names: list[str] = field(default_factory=list)
    where: Path | None = None
    prec: Precision = Precision.FP32
    shape: tuple[int, ...] = (1, 2)
    args: dict[str, int] = field(default_factory=dict)
    flag: bool = False


@pytest.mark.parametrize(("kw", "needle"), [
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
])  # fmt: skip
def test_wrong_types_name_the_field(kw: dict, needle: str) -> None:
    with pytest.raises(PaddlefitError, match=needle.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")
                       .replace(")", r"\)").replace("|", r"\|").replace(".", r"\.")):  # fmt: skip
        check_field_types(Req(**kw), {"n": "--n"})


def test_right_types_pass_and_ints_are_floats() -> None:
    check_field_types(Req(n=3, x=2, names=["a"], where=Path("p"), prec=Precision.BF16_O1, shape=(), args={"a": 1}))
    check_field_types(Req(x=math.inf))  # ranges and finiteness are the request's own checks


def test_the_core_requests_check_their_types() -> None:
    from paddlefit.job import JobOptions
    from paddlefit.plan.cost_request import CostRequest
    from paddlefit.plan.request import PlanRequest
    from paddlefit.train.request import TrainRequest

    cases = [(lambda: PlanRequest(model="lenet", batch_size="8"), "`--batch-size` must be int"),
             (lambda: PlanRequest(model="lenet", gpus="T4"), "`--gpu` must be list[str]"),
             (lambda: PlanRequest(model="lenet", optimizer="bogus"), "`PlanRequest.optimizer` must be"),
             (lambda: CostRequest(clouds="aws"), "`--cloud` must be list[str]"),
             (lambda: CostRequest(dataset_size=100.5, epochs=1.0), "`--dataset-size` must be int | None"),
             (lambda: JobOptions(model="lenet", batch_size=1.5), "`--batch-size` must be int | None"),
             (lambda: TrainRequest(config=123), "`CONFIG` must be Path | str"),
             (lambda: TrainRequest(config="j.yaml", devices=2), "`--devices` must be str | None")]
    for make, needle in cases:
        with pytest.raises(PaddlefitError, match=needle.replace("[", r"\[").replace("]", r"\]").replace("|", r"\|")):
            make()
