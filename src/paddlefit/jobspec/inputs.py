"""Per-sample input specs: ``[name=]dtype[d1,d2,...][:high]``, parsed into :class:`InputSpec`.

An input spec describes ONE sample (no batch dimension): ``float32[3,224,224]`` for an image,
``int64[128]`` for 128 token ids (ids drawn from ``[0, high)``; ``int64[128]:30522`` sets ``high``), ``int64[]``
for one scalar per sample (a class id). ``name=SPEC`` (``token_type_ids=int64[128]:2``) passes the input to
``forward`` as that keyword argument; unnamed inputs are positional and come first. :mod:`paddlefit.jobspec.spec`
re-exports these names.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from paddlefit.errors import InputSpecError

#: Bytes per element of each dtype an input spec may use.
DTYPE_BYTES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4}

_SPEC_RE = re.compile(
    r"^\s*(?:(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*)?(?P<dtype>[a-z0-9]+)\s*"
    r"\[(?P<dims>[^\]]{0,200})\]\s*(?::\s*(?P<high>\d{1,12}))?\s*$"
)


class InputSpec(BaseModel):
    """One model input, per sample: dtype and shape without the batch dimension."""

    model_config = ConfigDict(frozen=True)

    dtype: str = Field(description="One of ``DTYPE_BYTES``.")
    shape: tuple[int, ...] = Field(
        description="Per-sample shape, e.g. ``(3, 224, 224)``; every dim >= 1; ``()`` is one scalar per sample."
    )
    high: int | None = Field(
        default=None,
        ge=1,
        description="For integer inputs, ids are drawn from ``[0, high)`` (the vocabulary size for token ids).",
    )
    name: str | None = Field(
        default=None, description="The ``forward`` keyword argument that receives it; None = positional."
    )

    @property
    def bytes_per_sample(self) -> int:
        """Bytes of one sample of this input."""
        n = 1
        for d in self.shape:
            n *= d
        return n * DTYPE_BYTES[self.dtype]

    def __str__(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        text = f"{self.dtype}[{dims}]" + (f":{self.high}" if self.high and self.dtype.startswith("int") else "")
        return f"{self.name}={text}" if self.name else text


def parse_input_spec(text: str) -> InputSpec:
    """Parse ``[name=]dtype[d1,d2,...]`` (optionally ``:high`` for integer ids; ``dtype[]`` is a scalar per
    sample) into an InputSpec.

    Raises:
        InputSpecError: the text does not parse, names an unknown dtype, or has a dim < 1.
    """
    m = _SPEC_RE.match(text or "")
    if not m:
        raise InputSpecError(
            f"Input spec {text!r} does not parse. Write one sample's dtype and shape without the batch "
            "dimension, e.g. `--input float32[3,224,224]` or `--input int64[128]` (token ids; "
            "`int64[128]:30522` sets the id range; `int64[]` is one scalar per sample); `name=SPEC` passes it "
            "as the keyword argument `name`, e.g. `--input token_type_ids=int64[128]:2`."
        )
    dtype = m.group("dtype")
    if dtype not in DTYPE_BYTES:
        raise InputSpecError(f"Input spec {text!r}: unknown dtype {dtype!r}; use one of {', '.join(DTYPE_BYTES)}.")
    try:
        if any(len(d.strip()) > 12 for d in m.group("dims").split(",")):
            raise InputSpecError(f"Input spec {text!r}: a dimension has more than 12 digits.")
        dims = tuple(int(d) for d in m.group("dims").split(",")) if m.group("dims").strip() else ()
    except ValueError:
        raise InputSpecError(f"Input spec {text!r}: dimensions must be integers, e.g. `float32[3,224,224]`.") from None
    if any(d < 1 for d in dims):
        raise InputSpecError(
            f"Input spec {text!r}: every dimension must be >= 1 (the batch dimension is added by "
            "`--batch-size`; `int64[]` is one scalar per sample)."
        )
    high = int(m.group("high")) if m.group("high") else None
    if high is not None and not dtype.startswith("int"):
        raise InputSpecError(f"Input spec {text!r}: `:high` is only for integer (token id) inputs.")
    if high is not None and not 1 <= high <= 2**31 - 1:
        raise InputSpecError(f"Input spec {text!r}: the id range `:high` must be between 1 and 2147483647.")
    return InputSpec(dtype=dtype, shape=dims, high=high, name=m.group("name"))


def parse_input_specs(texts: list[str], option: str = "--input") -> list[InputSpec]:
    """Parse several input specs: positional ones first, then named ones, each name once.

    Raises:
        InputSpecError: a spec does not parse, a positional spec follows a named one, or a name repeats.
    """
    specs = [parse_input_spec(t) for t in texts]
    seen: set[str] = set()
    for i, s in enumerate(specs):
        if s.name is None and any(p.name for p in specs[:i]):
            raise InputSpecError(
                f"`{option} {s}` is positional but follows the named `{option} "
                f"{next(p for p in specs[:i] if p.name)}`; give positional inputs first, in "
                "forward()'s order, then `name=SPEC` ones."
            )
        if s.name is not None:
            if s.name in seen:
                raise InputSpecError(f"`{option}` names `{s.name}` twice; give each keyword input once.")
            seen.add(s.name)
    return specs
