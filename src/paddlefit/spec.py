"""Job-spec pieces shared by every command: per-sample input specs, precision and optimizer names.

An input spec describes ONE sample (no batch dimension): ``float32[3,224,224]`` for an image,
``int64[128]`` for 128 token ids (ids drawn from ``[0, high)``; ``int64[128]:30522`` sets ``high``).
"""

from __future__ import annotations

import re
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

from paddlefit.errors import InputSpecError, UnknownNameError

#: Bytes per element of each dtype an input spec may use.
DTYPE_BYTES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4}

_SPEC_RE = re.compile(r"^\s*(?P<dtype>[a-z0-9]+)\s*\[(?P<dims>[^\]]*)\]\s*(?::\s*(?P<high>\d+))?\s*$")


class Precision(str, Enum):
    """Training precision: fp32, or AMP level O1/O2 with fp16 or bf16 (``paddle.amp.auto_cast``)."""

    FP32 = "fp32"
    FP16_O1 = "fp16-o1"
    BF16_O1 = "bf16-o1"
    FP16_O2 = "fp16-o2"
    BF16_O2 = "bf16-o2"

    @property
    def is_amp(self) -> bool:
        """True for the AMP precisions (O1/O2), False for fp32."""
        return self is not Precision.FP32

    @property
    def level(self) -> str:
        """AMP level for ``paddle.amp.auto_cast(level=...)``: ``O0`` for fp32."""
        return "O0" if self is Precision.FP32 else self.value.split("-")[1].upper()


class OptimizerName(str, Enum):
    """Optimizers whose state size paddlefit knows (Paddle ``python/paddle/optimizer/*.py``)."""

    SGD = "sgd"
    MOMENTUM = "momentum"
    ADAM = "adam"
    ADAMW = "adamw"


class InputSpec(BaseModel):
    """One model input, per sample: dtype and shape without the batch dimension.

    Attributes:
        dtype: one of ``DTYPE_BYTES``.
        shape: per-sample shape, e.g. ``(3, 224, 224)``; every dim >= 1.
        high: for integer inputs, ids are drawn from ``[0, high)`` (vocabulary size for token ids).
    """

    model_config = ConfigDict(frozen=True)

    dtype: str
    shape: tuple[int, ...]
    high: int | None = Field(default=None, ge=1)

    @property
    def bytes_per_sample(self) -> int:
        """Bytes of one sample of this input."""
        n = 1
        for d in self.shape:
            n *= d
        return n * DTYPE_BYTES[self.dtype]

    def __str__(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        return f"{self.dtype}[{dims}]" + (f":{self.high}" if self.high and self.dtype.startswith("int") else "")


def parse_input_spec(text: str) -> InputSpec:
    """Parse ``dtype[d1,d2,...]`` (optionally ``:high`` for integer ids) into an InputSpec.

    Raises:
        InputSpecError: the text does not parse, names an unknown dtype, or has a dim < 1.
    """
    m = _SPEC_RE.match(text or "")
    if not m:
        raise InputSpecError(
            f"Input spec {text!r} does not parse. Write one sample's dtype and shape without the batch "
            "dimension, e.g. `--input float32[3,224,224]` or `--input int64[128]` (token ids; "
            "`int64[128]:30522` sets the id range)."
        )
    dtype = m.group("dtype")
    if dtype not in DTYPE_BYTES:
        raise InputSpecError(
            f"Input spec {text!r}: unknown dtype {dtype!r}; use one of {', '.join(DTYPE_BYTES)}."
        )
    try:
        dims = tuple(int(d) for d in m.group("dims").split(","))
    except ValueError:
        raise InputSpecError(
            f"Input spec {text!r}: dimensions must be integers, e.g. `float32[3,224,224]`."
        ) from None
    if not dims or any(d < 1 for d in dims):
        raise InputSpecError(
            f"Input spec {text!r}: every dimension must be >= 1 and at least one is needed "
            "(the batch dimension is added by `--batch-size`)."
        )
    high = int(m.group("high")) if m.group("high") else None
    if high is not None and not dtype.startswith("int"):
        raise InputSpecError(f"Input spec {text!r}: `:high` is only for integer (token id) inputs.")
    if high is not None and not 1 <= high <= 2**31 - 1:
        raise InputSpecError(f"Input spec {text!r}: the id range `:high` must be between 1 and 2147483647.")
    return InputSpec(dtype=dtype, shape=dims, high=high)


def parse_enum(enum_cls: type[Enum], value: str, field: str) -> Enum:
    """Turn a string into ``enum_cls`` or raise UnknownNameError naming ``field`` and the choices."""
    try:
        return enum_cls(value.strip().lower())
    except ValueError:
        choices = ", ".join(e.value for e in enum_cls)  # type: ignore[attr-defined]
        raise UnknownNameError(f"`{field}` {value!r} is not valid; choose one of: {choices}.") from None
