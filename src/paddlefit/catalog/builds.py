"""Paddle builds with official Docker images: version -> CUDA / cuDNN / TensorRT tag and minimum driver.

Data: ``catalog/data/paddle_builds.csv``, one row per image, each with its source (Paddle/PaddleX install
docs; the minimum driver is the one those docs print next to the image). Kunlunxin XPU rows (``device`` xpu) name
Paddle's published XPU development image, which ships the XPU runtime (XRE) but no Paddle: ``install`` is the pip
command the same docs give for the ``paddlepaddle-xpu`` wheel, ``chips`` the XPU models the build is for.
"""

from __future__ import annotations

import csv
from functools import lru_cache
from importlib import resources

from pydantic import BaseModel, ConfigDict


class PaddleBuild(BaseModel):
    """One official image: ``docker_image`` runs Paddle ``paddle`` on ``device`` (cpu|gpu|xpu) with that CUDA;
    ``install``: the command that installs Paddle into an image that lacks it (XPU images), ``chips``:
    ``;``-separated Kunlunxin models an XPU build supports."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    paddle: str
    device: str
    cuda: str | None = None
    cudnn: str | None = None
    trt: str | None = None
    docker_image: str
    min_driver: str | None = None
    source: str
    install: str | None = None
    chips: str | None = None

    @property
    def chip_list(self) -> list[str]:
        """``chips`` as a list (empty for CUDA/CPU images)."""
        return [c.strip() for c in (self.chips or "").split(";") if c.strip()]


@lru_cache(maxsize=1)
def load_builds() -> tuple[PaddleBuild, ...]:
    """The shipped build table (validated)."""
    text = resources.files("paddlefit.catalog").joinpath("data/paddle_builds.csv").read_text(encoding="utf-8")
    rows = csv.DictReader(text.splitlines())
    return tuple(PaddleBuild(**{k: (v or None) for k, v in r.items()}) for r in rows)
