"""A planner whose CPU probe runs once per distinct job (importable because conftest puts tests/data on sys.path).

For tests of what the planner does *after* the probe (catalog and price parsing, rows, margins): they vary the
files or the margin, not the model, so each distinct measurement is taken once (really) and reused. Every file
parser, and everything after the probe, still runs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest


@contextmanager
def memoised_probe() -> Iterator[None]:
    """Within the block, ``planner.measure_model`` is memoised, keyed by what can change its result here: model,
    batch, inputs, optimizer, precision, model args, label, loss."""
    from paddlefit.plan import planner

    real_measure = planner.measure_model
    seen: dict[tuple, Any] = {}

    def measure(req: Any, say: Any) -> Any:
        key = (
            req.model,
            req.batch_size,
            tuple(map(str, req.inputs or ())),
            req.optimizer,
            req.precision,
            repr(req.model_args),
            req.label,
            req.loss,
        )
        if key not in seen:
            seen[key] = real_measure(req, say)
        return seen[key]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(planner, "measure_model", measure)
        yield
