"""The catalog row of the GPU a driver names (``NVIDIA A100-SXM4-80GB`` as CUDA reports it): used by
``calibrate``, ``profile`` and a run's prediction record."""

from __future__ import annotations

from paddlefit.catalog.gpus import GPU, get_gpu
from paddlefit.errors import UnknownNameError


def match_gpu(raw_name: str, gpus: list[GPU], family: bool = False) -> GPU:
    """Map a CUDA device name (``NVIDIA A100-SXM4-80GB``) to a catalog row: a catalog name or alias first, else the
    longest catalog name the device name contains (spaces and dashes ignored: "A100-SXM4-80GB", not "A10"), and,
    with ``family``, the first row of the same family ("H100" in "NVIDIA H100 80GB HBM3"; enough for peak FLOP/s,
    not for memory: ``profile`` uses it, ``calibrate`` does not).

    Raises:
        UnknownNameError: no row matches (pass ``--device-name`` with a catalog name).
    """
    key = raw_name.replace("NVIDIA", "").replace("Tesla", "").replace("GeForce", "").strip()
    try:
        return get_gpu(key.replace(" ", "-"), gpus)
    except UnknownNameError:

        def norm(x: str) -> str:
            return x.lower().replace(" ", "").replace("-", "")

        name = norm(raw_name)
        full = [g for g in gpus if norm(g.name) in name]
        if full:
            return max(full, key=lambda g: len(g.name))
        fam = next((g for g in gpus if g.name.lower().split("-")[0] in name), None) if family else None
        if fam is None:
            raise
        return fam
