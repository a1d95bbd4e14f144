"""The one optimizer factory: the optimizer ``plan``'s CPU probe steps with is the one ``train`` steps with.

Why one factory: an optimizer built twice drifts (another learning rate, weight decay or ``lazy_mode``), and then
the plan measures a job the user does not run. The probe (``probe/job_call.py``) and ``train`` (``train/build.py``)
both take an :class:`OptimizerSettings` (from the job spec: :func:`optimizer_settings`; from a plan request:
:meth:`paddlefit.plan.request.PlanRequest.optimizer_settings`) and build through :func:`make_optimizer`.
``tests/test_optimizers.py`` checks that the planned and the trained optimizer hold the same state bytes per
parameter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from paddlefit.jobspec.spec import JobSpec, OptimizerName

__all__ = ["ADAMW_WEIGHT_DECAY", "MOMENTUM", "OptimizerSettings", "as_settings", "make_optimizer", "optimizer_settings"]

#: Momentum's momentum factor: Paddle's own default (``python/paddle/optimizer/momentum.py``, ``momentum=0.9``).
MOMENTUM = 0.9
#: AdamW's decay when the job leaves ``weight_decay`` unset: Paddle's default (``python/paddle/optimizer/adamw.py``,
#: ``weight_decay=0.01``); the other optimizers' default is none.
ADAMW_WEIGHT_DECAY = 0.01


@dataclass(frozen=True)
class OptimizerSettings:
    """What :func:`make_optimizer` builds; the defaults are a job spec's defaults
    (:class:`~paddlefit.jobspec.spec.JobSpec`).

    Attributes:
        name: the optimizer class (``paddle.optimizer.SGD``, ``Momentum``, ``Adam``, ``AdamW``).
        learning_rate: the peak learning rate (the job's ``lr``).
        weight_decay: the job's ``weight_decay``; None = the optimizer's default (AdamW :data:`ADAMW_WEIGHT_DECAY`,
            the others none).
        lazy_mode: Adam/AdamW update only the rows with a gradient (Paddle's ``lazy_mode``; ignored for the others).
        multi_precision: fp32 master weights for fp16/bf16 parameters (AMP O2; Paddle keeps none for fp32 ones).
    """

    name: OptimizerName = OptimizerName.ADAM
    learning_rate: float = 1e-3
    weight_decay: float | None = None
    lazy_mode: bool = False
    multi_precision: bool = False


def optimizer_settings(spec: JobSpec) -> OptimizerSettings:
    """The job spec's optimizer: ``optimizer``, ``lr``, ``weight_decay``, ``lazy_mode``, and master weights under an
    O2 precision."""
    return OptimizerSettings(spec.optimizer, spec.lr, spec.weight_decay, spec.lazy_mode, spec.precision.level == "O2")


def as_settings(optimizer: OptimizerName | OptimizerSettings) -> OptimizerSettings:
    """``optimizer`` as settings: a bare name gets the job spec's defaults for the rest."""
    return optimizer if isinstance(optimizer, OptimizerSettings) else OptimizerSettings(OptimizerName(optimizer))


def make_optimizer(settings: OptimizerName | OptimizerSettings, parameters: Any, learning_rate: Any = None) -> Any:
    """The Paddle optimizer of ``settings`` over ``parameters``; ``learning_rate`` (a ``paddle.optimizer.lr``
    scheduler, as ``train`` passes) replaces ``settings.learning_rate`` when given."""
    import paddle

    s = as_settings(settings)
    lr = s.learning_rate if learning_rate is None else learning_rate
    common = {"learning_rate": lr, "parameters": parameters, "multi_precision": s.multi_precision}
    if s.name is OptimizerName.SGD:
        return paddle.optimizer.SGD(weight_decay=s.weight_decay, **common)
    if s.name is OptimizerName.MOMENTUM:
        return paddle.optimizer.Momentum(momentum=MOMENTUM, weight_decay=s.weight_decay, **common)
    if s.name is OptimizerName.ADAMW:
        decay = ADAMW_WEIGHT_DECAY if s.weight_decay is None else s.weight_decay
        return paddle.optimizer.AdamW(weight_decay=decay, lazy_mode=s.lazy_mode, **common)
    return paddle.optimizer.Adam(weight_decay=s.weight_decay, lazy_mode=s.lazy_mode, **common)
