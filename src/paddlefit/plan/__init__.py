"""Planner: estimates x catalog -> ranked targets and a recommendation."""

from paddlefit.plan.planner import Plan, PlanRequest, build_plan

__all__ = ["Plan", "PlanRequest", "build_plan"]
