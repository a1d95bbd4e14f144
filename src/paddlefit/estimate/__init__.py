"""Estimators: FLOPs (hook-based counter), memory (CPU probe + analytic model states), timing (roofline)."""
