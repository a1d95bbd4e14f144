"""Strict JSON documents, what every ``--json`` option prints and every JSON file paddlefit writes.

Kept apart from the renderers so a command prints JSON without importing rich's tables or the GPU catalog.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["to_json"]


def _strict(obj: Any) -> Any:
    """``obj`` with NaN and infinities as None and dict keys as strings (RFC 8259 has no NaN)."""
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if isinstance(obj, dict):
        return {str(k): _strict(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_strict(v) for v in obj]
    return obj


def to_json(doc: Any) -> str:
    """One JSON document, indented by 2; NaN/inf become null so the output is strict JSON."""
    return json.dumps(_strict(doc), indent=2, sort_keys=False)
