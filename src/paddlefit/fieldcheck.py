"""Type checks for the core's request dataclasses, so a library caller gets the error a CLI user gets.

The CLI parses options into the right types before building a request; a library caller may pass anything.
:func:`check_field_types` checks every field of a dataclass instance against its annotation and raises a
:class:`~paddlefit.errors.PaddlefitError` naming the field (or the CLI option it stands for) instead of letting
a wrong type fail later as a bare ``TypeError`` deep inside, or, worse, work wrongly (a string where a list is
expected iterates by character; ``2.5`` samples; ``True`` as a count).
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from pathlib import Path
from typing import Any, ClassVar

from paddlefit.errors import PaddlefitError

__all__ = ["FieldChecked", "check_field_types"]


def _matches(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of type ``hint`` (the subset of typing the request classes use)."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, h) for h in typing.get_args(hint))
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if origin in (list, tuple, set, frozenset):
        if not isinstance(value, origin):
            return False
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return not args or all(_matches(v, args[0]) for v in value)
    if origin is dict:
        if not isinstance(value, dict):
            return False
        args = typing.get_args(hint)
        return not args or all(_matches(k, args[0]) and _matches(v, args[1]) for k, v in value.items())
    if origin is not None:  # Callable and other generics: trust the caller
        return True
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is Path:
        return isinstance(value, Path)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return isinstance(value, hint)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def _describe(hint: Any) -> str:
    text = str(hint).replace("typing.", "").replace("pathlib.", "").replace("NoneType", "None")
    return text.removeprefix("<class '").removesuffix("'>")


def check_field_types(obj: Any, options: dict[str, str] | None = None) -> None:
    """Check every field of the dataclass instance ``obj`` against its annotation.

    Args:
        options: field name -> the CLI option it stands for (``{"batch_size": "--batch-size"}``), used in the
            message; other fields are named by the field name.

    Raises:
        PaddlefitError: the first field whose value has the wrong type; the message names the field, the type
            expected and the value given. (Ranges and finiteness are the request's own checks.)
    """
    hints = typing.get_type_hints(type(obj))
    names = options or {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        hint = hints.get(f.name, Any)
        where = names.get(f.name) or f"{type(obj).__name__}.{f.name}"
        if not _matches(value, hint):
            raise PaddlefitError(f"`{where}` must be {_describe(hint)} (got {type(value).__name__} {value!r}).")


class FieldChecked:
    """Mixin for a request dataclass whose only ``__post_init__`` work is the type check: every field is checked
    against its annotation when the request is built (:func:`check_field_types`), each named in messages by
    ``OPTIONS`` (field -> the CLI option it stands for).

    Raises (when built):
        PaddlefitError: a field of the wrong type, named by its option.
    """

    OPTIONS: ClassVar[dict[str, str]] = {}

    def __post_init__(self) -> None:
        check_field_types(self, self.OPTIONS)
