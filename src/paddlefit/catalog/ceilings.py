"""Measured tensor-core GEMM ceilings per GPU architecture: the best rate a single large GEMM reaches, as a share of
the datasheet's dense peak.

``catalog/data/gemm_ceilings.csv`` holds, per architecture and data type, the best Maximum Achievable Matmul FLOPS
(MAMF: the fastest ``torch.matmul`` over a brute-force search of shapes, mean of 100 iterations after 50 warm-up,
cuBLAS through PyTorch, the libraries Paddle calls too) of the architecture's cards, copied figure for figure from
stas00/ml-engineering@744d01e ``compute/accelerator/README.md`` (CC-BY-SA-4.0; read 2026-12-06; the source warns
that the search is not exhaustive and that the figures move with the software). ``half`` is BF16 (the FP16 tensor
rate is the same on these architectures); ``fp8`` is FP8 E4M3. No kernel the project holds measures Hopper or
Blackwell: these are the only grounding of their tensor-core efficiency
(:func:`paddlefit.estimate.gpu_model.compile_step` bounds ``gemm_half``/``conv_half`` with them).
"""

from __future__ import annotations

import csv
import io
from functools import lru_cache
from importlib import resources

from paddlefit.errors import CatalogError

#: Data types a ceiling is given for.
CEILING_DTYPES = ("half", "fp8")


@lru_cache(maxsize=1)
def gemm_ceilings() -> dict[tuple[str, str], float]:
    """(architecture, dtype) -> the best measured share (0-1] of the dense peak a GEMM reaches.

    Raises:
        CatalogError: the shipped file is malformed (names the row and column).
    """
    text = resources.files("paddlefit.catalog").joinpath("data/gemm_ceilings.csv").read_text(encoding="utf-8")
    out: dict[tuple[str, str], float] = {}
    for i, row in enumerate(csv.DictReader(io.StringIO(text)), start=2):
        try:
            eff = float(row["efficiency"])
        except (KeyError, TypeError, ValueError):
            raise CatalogError(f"gemm_ceilings.csv line {i}, column `efficiency`: not a number.") from None
        if not 0 < eff <= 1 or row.get("dtype") not in CEILING_DTYPES or not row.get("source"):
            raise CatalogError(
                f"gemm_ceilings.csv line {i}: needs an efficiency in (0, 1], a dtype in "
                f"{', '.join(CEILING_DTYPES)} and a source."
            )
        out[(row["architecture"].lower(), row["dtype"])] = eff
    return out


def gemm_ceiling(architecture: str | None, dtype: str = "half") -> float | None:
    """The measured GEMM ceiling (share of the dense peak) of ``architecture``'s tensor cores for ``dtype``, or None
    where no card of the architecture was measured (Volta, Turing, Ada: their efficiency rests on the kernels and
    published runs, ``bench/gpu_kernels.py`` and ``bench/gpu_fit.py``)."""
    return gemm_ceilings().get(((architecture or "").lower(), dtype))
