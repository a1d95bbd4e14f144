"""A model as ``paddle.jit.save`` can trace it: its outputs flattened to tensors, its inputs positional. Used by
``paddlefit export`` (:mod:`paddlefit.train.export`) and the CPU serving benchmark
(:mod:`paddlefit.serving.cpu_bench`)."""

from __future__ import annotations

from typing import Any


def flatten_outputs(out: Any) -> list[Any]:
    """The tensors of a model output in a fixed order: a tensor; a list/tuple (recursively); a dict or PaddleNLP
    ``ModelOutput`` by key order (None values skipped)."""
    if hasattr(out, "shape") and hasattr(out, "numpy"):
        return [out]
    if isinstance(out, dict):
        out = [v for v in out.values() if v is not None]
    elif not isinstance(out, list | tuple) and hasattr(out, "to_tuple"):
        out = list(out.to_tuple())
    if isinstance(out, list | tuple):
        return [t for o in out for t in flatten_outputs(o)]
    return []


def positional_layer(model: Any, names: list[str | None]) -> Any:
    """``model`` behind a Layer whose forward takes every input positionally (``names``: None = positional, else
    the keyword it goes to) and returns the flat tuple of output tensors, so ``paddle.jit.save`` can trace it.

    ``paddle.jit.to_static`` reads the number of inputs off ``forward``'s signature (a ``*args`` forward "requires 0
    arguments"), so the forward is written with one named parameter per input.
    """
    import paddle

    params = [n or f"input_{i}" for i, n in enumerate(names)]
    call_args = ", ".join(
        [p for p, n in zip(params, names, strict=True) if n is None] + [f"{n}={n}" for n in names if n is not None]
    )
    src = f"def forward(self, {', '.join(params)}):\n    return tuple(flatten(self.model({call_args})))\n"
    import linecache

    fname = f"<paddlefit-export-{len(names)}-{abs(hash(src))}>"
    linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)  # to_static reads forward's source
    scope: dict[str, Any] = {"flatten": flatten_outputs}
    exec(compile(src, fname, "exec"), scope)  # a signature of the job's input names (identifiers), no user code

    class Exported(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

    Exported.forward = scope["forward"]
    return Exported()


def jit_target(model: Any, out: Any, names: list[str | None]) -> Any:
    """What ``paddle.jit.save`` traces for ``model``, whose eval output on inputs named ``names`` was ``out``:
    the model itself when every input is positional and it returns one tensor, else :func:`positional_layer`."""
    plain = all(n is None for n in names) and hasattr(out, "shape")
    return model if plain else positional_layer(model, names)
