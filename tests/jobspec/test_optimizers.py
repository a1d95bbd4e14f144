"""Paddlefit.optimizers: the optimizer `plan`'s probe steps with is the one `train` steps with.

The probe builds ``make_optimizer(PlanRequest.optimizer_settings())`` from the plan request of a job spec
(``plan --config``); train builds ``build_optimizer(spec, ...)`` (``build_job``) from the same spec. After one
step on the same model both hold the same optimizer states, byte for byte per parameter, and the same class,
learning rate, weight decay, lazy_mode and multi-precision.
"""

from pathlib import Path

import numpy as np
import paddle
import pytest

from paddlefit.estimate.model_states import model_state_bytes
from paddlefit.job.resolve import JobOptions, resolve_job
from paddlefit.jobspec.optimizers import make_optimizer
from paddlefit.jobspec.spec import Precision, load_job_spec
from paddlefit.models.build import param_inventory
from paddlefit.models.zoo import resolve_model
from paddlefit.plan.jobs import plan_request
from paddlefit.train.build import build_optimizer, build_schedule

JOBS = [
    "optimizer: sgd\nweight_decay: 0.0001",
    "optimizer: momentum\nlr: 0.05",
    "optimizer: adam\nlazy_mode: true\nlr: 0.0003",
    "optimizer: adamw",
    "optimizer: adamw\nweight_decay: 0.05\nlazy_mode: true\nprecision: fp16-o2",
]


def _stepped(opt, model) -> dict[str, int]:
    """One step on a fixed batch; the optimizer's state bytes by state (``moment1``, ``velocity``, ``beta1_pow_acc``),
    from its state dict's keys ``<parameter name>_<state>_0``."""
    x = paddle.to_tensor(np.linspace(-1, 1, 4 * 30, dtype="float32").reshape(4, 30))
    model(x).mean().backward()
    opt.step()
    opt.clear_grad()
    names = [p.name for p in model.parameters()]
    out: dict[str, int] = {}
    for key, value in opt.state_dict().items():
        if isinstance(value, paddle.Tensor):
            param = next(n for n in names if key.startswith(n + "_"))
            state = key[len(param) + 1 :].rsplit("_", 1)[0]
            out[state] = out.get(state, 0) + value.numel().item() * value.element_size()
    return out


def _settings(opt) -> tuple:
    """(class, learning rate, weight decay, lazy_mode, multi_precision) as Paddle holds them: AdamW its decay as
    ``_weight_decay``, Momentum as ``_regularization_coeff``, SGD and Adam as an ``L2Decay`` regularizer."""
    if isinstance(opt, paddle.optimizer.AdamW):
        decay = opt._weight_decay
    elif isinstance(opt, paddle.optimizer.Momentum):
        decay = opt._regularization_coeff or None
    else:
        decay = getattr(opt.regularization, "_coeff", None)
    return (type(opt), opt.get_lr(), decay, getattr(opt, "_lazy_mode", None), opt._multi_precision)


@pytest.mark.parametrize("job", JOBS)
def test_the_planned_and_the_trained_optimizer_are_the_same(tmp_path: Path, job: str):
    path = tmp_path / "job.yaml"
    path.write_text(f"model: tinymodels:mlp\ninputs: ['float32[30]']\nmax_steps: 10\n{job}\n", encoding="utf-8")
    spec = load_job_spec(path)
    settings = plan_request(resolve_job(JobOptions(config=path))).optimizer_settings()
    ref = resolve_model(spec.model)
    paddle.seed(0)
    planned_model = ref.factory()
    planned = make_optimizer(settings, planned_model.parameters())  # as the probe builds it (probe/memory.py)
    paddle.seed(0)
    trained_model = ref.factory()
    trained = build_optimizer(spec, trained_model.parameters(), build_schedule(spec, 10))  # as build_job does
    assert _settings(planned) == _settings(trained)
    assert _settings(trained)[1:4] == (
        spec.lr,
        spec.weight_decay if spec.weight_decay is not None else (0.01 if spec.optimizer.value == "adamw" else None),
        spec.lazy_mode if spec.optimizer.value.startswith("adam") else None,
    )
    assert _settings(trained)[4] is (spec.precision is Precision.FP16_O2)
    planned_bytes, trained_bytes = _stepped(planned, planned_model), _stepped(trained, trained_model)
    assert planned_bytes == trained_bytes
    info = param_inventory(ref)[0]
    per_param = {k: v / info.trainable_params for k, v in trained_bytes.items() if not k.endswith("pow_acc")}
    per_tensor = {k: v / info.trainable_tensors for k, v in trained_bytes.items() if k.endswith("pow_acc")}
    adam = spec.optimizer.value.startswith("adam")
    assert per_param == (
        {"moment1": 4.0, "moment2": 4.0} if adam else {"velocity": 4.0} if spec.optimizer.value == "momentum" else {}
    )
    assert per_tensor == ({"beta1_pow_acc": 4.0, "beta2_pow_acc": 4.0} if adam else {})
    # what the plan counts for them (fp32 on this CPU), with the optimizer's fp32 [1] learning-rate tensor
    assert sum(trained_bytes.values()) + 4 == model_state_bytes(info, spec.optimizer, Precision.FP32).optimizer_bytes
