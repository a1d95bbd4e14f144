"""Planner: estimates x catalog -> ranked targets and a recommendation, and the cost of a job on cloud instances.

Modules, in the order a plan is made: ``request`` (:class:`PlanRequest`, which validates itself; ``Target``,
``Plan``), ``measure`` (the model's inventory and CPU probe, or the analytic transformer model), ``rows`` (one row
per device: memory, step time and its breakdown; the recommendation), ``runs_calibration`` (rows corrected by
recorded runs), ``document`` (the plan document's sections as frozen values), ``planner`` (:func:`build_plan`, which
joins them). ``cost_request`` and ``cost`` price a plan; ``jobs`` is what the ``plan`` and ``cost`` commands call
(options -> :func:`paddlefit.job.resolve_job` -> plan -> cost). ``calibrate``/``calibration``: measured devices.
"""

from paddlefit.plan.planner import build_plan
from paddlefit.plan.request import Plan, PlanRequest

__all__ = ["Plan", "PlanRequest", "build_plan"]
