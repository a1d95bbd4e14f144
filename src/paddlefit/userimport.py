"""Import a user callable named ``package.module:function`` from a job spec (dataset factory, loss)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from paddlefit.errors import PaddlefitError


def import_callable(path: str, label: str, hint: str) -> Callable[..., Any]:
    """The callable at ``path`` (``package.module:function``).

    Args:
        path: the import path.
        label: how the job spec names it, e.g. ``data.train: mypkg.data:train_set``; starts every message.
        hint: what to use instead, appended to the message for a malformed path.

    Raises:
        PaddlefitError: ``path`` is not ``module:function``, the module fails to import (its own error, even
            ``sys.exit``, included), it has no such attribute, or the attribute is not callable.
    """
    mod, sep, fn = path.partition(":")
    if not sep or not mod.strip() or not fn.strip():
        raise PaddlefitError(f"`{label}` cannot be imported (not of the form `package.module:function`); {hint}.")
    try:
        obj = getattr(importlib.import_module(mod), fn)
    except (Exception, SystemExit) as exc:  # ImportError, AttributeError, or the module's own error at import
        raise PaddlefitError(f"`{label}` cannot be imported ({type(exc).__name__}: {exc}); {hint}.") from None
    if not callable(obj):
        raise PaddlefitError(f"`{label}` is a {type(obj).__name__}, not a function.")
    return obj
