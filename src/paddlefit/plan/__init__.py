"""The training plan: estimates x catalog -> ranked targets and a recommendation.

Modules, in the order a plan is made: ``request`` (:class:`PlanRequest`, which validates itself; ``Target``,
``Plan``), ``measure`` (the model's inventory and CPU probe, or the analytic transformer model), ``rows`` (one row
per device: memory, step time and its breakdown; the recommendation), ``calibration`` (calibration files) and
``runs_calibration`` (rows corrected by recorded runs), ``document`` (the plan document's sections as frozen
values), ``planner`` (:func:`build_plan`, which joins them), ``explain`` (``plan --explain``). ``jobs`` is what the
``plan`` command calls (options -> :func:`paddlefit.job.resolve.resolve_job` -> plan). The cost of a plan is
:mod:`paddlefit.cost`, serving :mod:`paddlefit.serving`.
"""

from paddlefit.plan.planner import build_plan
from paddlefit.plan.request import Plan, PlanRequest

__all__ = ["Plan", "PlanRequest", "build_plan"]
