"""One way to validate: pydantic models, and the one place their errors become user messages.

A job spec (:class:`~paddlefit.jobspec.spec.JobSpec`) and every command's request (:class:`RequestModel` subclasses such
as :class:`~paddlefit.plan.request.PlanRequest`) are pydantic models whose fields carry their constraints
(``Field(ge=..., le=...)``, ``Literal``, validators) and ``description``. A :class:`pydantic.ValidationError` is
turned into a one-paragraph :class:`~paddlefit.errors.PaddlefitError` here, naming what the user typed:

- :func:`first_problem`: a job-spec key (or any document key) and pydantic's message, for YAML/JSON documents;
- :class:`RequestModel`: a request field by the CLI option it stands for (``--batch-size``), with the rule its
  constraints give (``must be >= 1 (got 0)``), so a library caller reads what a CLI user reads.
"""

from __future__ import annotations

import enum
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, ClassVar

import annotated_types
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from paddlefit.errors import PaddlefitError

__all__ = ["RequestModel", "first_problem", "plausible"]


def first_problem(exc: ValidationError, names: dict[str, str] | None = None) -> tuple[str, str]:
    """The first error of ``exc`` as ``(key, problem)``: ``key`` the dotted location (``data.num_workers``; ``?``
    for the document itself), replaced by ``names[key]`` when given; ``problem`` pydantic's message, a hint for an
    unknown key, and the value given (its repr cut at 80 characters).

    Example: ``("batch_size", "Input should be greater than or equal to 1 (got 0)")``.
    """
    e = exc.errors()[0]
    key = ".".join(str(x) for x in e["loc"]) or "?"
    hint = " (unknown key: remove it or check its spelling)" if e["type"] == "extra_forbidden" else ""
    got = repr(e.get("input"))
    got = got if len(got) <= 80 else got[:77] + "..."
    return (names or {}).get(key, key), f"{e['msg']}{hint} (got {got})"


def plausible(lo: float, hi: float) -> Any:
    """An ``AfterValidator`` for a number that is valid but means nothing outside ``lo..hi`` (a rate of 10,000
    interruptions an hour); the message is ``--option VALUE is outside LO..HI``."""
    from pydantic import AfterValidator

    def check(value: float | None) -> float | None:
        if value is not None and not lo <= value <= hi:
            raise PydanticCustomError("outside", "is outside {lo}..{hi}", {"lo": lo, "hi": hi})
        return value

    return AfterValidator(check)


def _num(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _is_float(annotation: Any) -> bool:
    return annotation is float or float in typing.get_args(annotation)


def _rule(info: FieldInfo) -> str:
    """What a field's constraints ask, in the messages' words: ``>= 1``, ``1..1024`` (ints), ``in (0, 1]``,
    ``a finite number > 0`` (floats: every request refuses inf and nan)."""
    lo = hi = None
    for m in info.metadata:
        if isinstance(m, annotated_types.Ge):
            lo = ("[", ">=", m.ge)
        elif isinstance(m, annotated_types.Gt):
            lo = ("(", ">", m.gt)
        elif isinstance(m, annotated_types.Le):
            hi = ("]", "<=", m.le)
        elif isinstance(m, annotated_types.Lt):
            hi = (")", "<", m.lt)
    floats = _is_float(info.annotation)
    if lo and hi:
        if not floats and lo[1] == ">=" and hi[1] == "<=":
            return f"{_num(lo[2])}..{_num(hi[2])}"
        return f"in {lo[0]}{_num(lo[2])}, {_num(hi[2])}{hi[0]}"
    bound = lo or hi
    if bound is None:
        return "a finite number" if floats else "valid"
    return f"{'a finite number ' if floats else ''}{bound[1]} {_num(bound[2])}"


def _describe(annotation: Any) -> str:
    """A type annotation as the messages write it: ``int | None``, ``list[str]``, ``Path | str`` (constraints
    left out); an enum as ``Precision (fp32, fp16-o1, ...)``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _describe(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_describe(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", None) or str(origin).replace("typing.", "")
        return f"{name}[{', '.join('...' if a is Ellipsis else _describe(a) for a in args)}]"
    if annotation is type(None):
        return "None"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return f"{annotation.__name__} ({', '.join(str(e.value) for e in annotation)})"
    return annotation.__name__ if isinstance(annotation, type) else str(annotation)


def _optional_of(annotation: Any) -> Any:
    """``X`` of ``X | None`` (else ``annotation``)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return annotation


def _choices(annotation: Any) -> str | None:
    """``eager or flash`` / ``one of a, b, c`` for a ``Literal`` (or an optional one); None for other types."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        lits = [a for a in args if typing.get_origin(a) is typing.Literal]
        args = typing.get_args(lits[0]) if lits else ()
    elif typing.get_origin(annotation) is not typing.Literal:
        return None
    if not args:
        return None
    values = [str(a) for a in args]
    return " or ".join(values) if len(values) == 2 else f"one of {', '.join(values)}"


def check_range(name: str, value: float, bounds: Mapping[str, float], kind: type = int) -> None:
    """Refuse ``value`` outside ``bounds`` (pydantic's ``ge``/``gt``/``le``/``lt``), with a request message's words
    (``--steps` must be 3..100000 (got 1).``).

    Raises:
        PaddlefitError: ``value`` out of range (or not finite), naming ``name``.
    """
    ok = isinstance(value, int | float) and math.isfinite(value)
    for key, limit in bounds.items():
        ok = ok and {"ge": value >= limit, "gt": value > limit, "le": value <= limit, "lt": value < limit}[key]
    if not ok:
        info = Field(**bounds)
        info.annotation = kind
        raise PaddlefitError(f"`{name}` must be {_rule(info)} (got {_num(value)}).")


def request_message(cls: type[BaseModel], exc: ValidationError, data: Any, options: dict[str, str]) -> str:
    """The user message for the first error of ``exc`` raised building request class ``cls`` from ``data``: the
    field named by its CLI option (``options``; else ``Class.field``), what it must be and the value given."""
    e = exc.errors()[0]
    name = str(e["loc"][0]) if e["loc"] else ""
    info = cls.model_fields.get(name)
    where = options.get(name) or f"{cls.__name__}.{name}"
    value = data.get(name, e.get("input")) if isinstance(data, dict) else e.get("input")
    kind = e["type"]
    if info is None:
        return f"`{name}` is not a field of {cls.__name__}; check its spelling (fields: {', '.join(cls.model_fields)})."
    if kind == "missing":
        return f"`{where}` is required."
    if kind == "outside":
        ctx = e.get("ctx") or {}
        return f"`{where} {_num(value)}` is outside {_num(ctx['lo'])}..{_num(ctx['hi'])}."
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number"):
        if len(e["loc"]) > 1 and isinstance(e["loc"][1], int):  # an item of a list: its own constraints
            item = typing.get_args(_optional_of(info.annotation))[0]
            return f"`{where}` must be {_rule(FieldInfo.from_annotation(item))} (got {value})."
        return f"`{where}` must be {_rule(info)} (got {value})."
    if kind == "too_short":
        return f"`{where}` is empty; give at least one value or leave it out."
    choices = _choices(info.annotation)
    if kind == "literal_error" and choices:
        return f"`{where}` must be {choices} (got {value!r})."
    return f"`{where}` must be {_describe(info.annotation)} (got {type(value).__name__} {value!r})."


class RequestModel(BaseModel):
    """Base of the commands' request objects: strict types (``"8"`` is not an int, ``True`` not a count, a string
    not a list), no unknown fields, finite floats; each field's constraints and ``description`` on the field.

    Building one with a bad value raises :class:`~paddlefit.errors.PaddlefitError` (never a
    ``ValidationError``), naming the field by the CLI option it stands for and what it must be. A field names its
    option in its metadata (``json_schema_extra=options.X.field()``, :mod:`paddlefit.options`); ``OPTIONS``
    names the fields that stand for something else (a job-spec key); other fields appear as ``Class.field``. A
    subclass's own checks (``model_validator``) raise ``PaddlefitError`` with their message.
    """

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)

    #: field -> the name it appears by in messages, for fields that stand for no CLI option (a job-spec key)
    OPTIONS: ClassVar[dict[str, str]] = {}
    #: field -> how messages name it: ``OPTIONS`` and each field's option flag (set per class)
    NAMES: ClassVar[dict[str, str]] = {}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """Collect :attr:`NAMES` once the fields are built: each field's option flag, then ``OPTIONS``."""
        super().__pydantic_init_subclass__(**kwargs)
        flags = {
            name: info.json_schema_extra["flag"]
            for name, info in cls.model_fields.items()
            if isinstance(info.json_schema_extra, dict) and "flag" in info.json_schema_extra
        }
        cls.NAMES = {**flags, **cls.OPTIONS}

    @model_validator(mode="wrap")
    @classmethod
    def _user_error(cls, data: Any, handler: Any) -> Any:
        """Turn the first validation error into the user message (:func:`request_message`)."""
        try:
            return handler(data)
        except ValidationError as exc:
            raise PaddlefitError(request_message(cls, exc, data, cls.NAMES)) from None
