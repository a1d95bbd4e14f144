"""The measured GEMM ceilings (MAMF) per architecture, and the bound they put on tensor-core efficiencies."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from paddlefit.catalog.ceilings import gemm_ceiling, gemm_ceilings
from paddlefit.catalog.gpus import get_gpu
from paddlefit.estimate.gpu_model import kernel_time_s
from paddlefit.estimate.kernels import Kernel
from paddlefit.estimate.perf_params import load_perf_params

MAMF = Path(__file__).resolve().parents[2] / "bench" / "data" / "gpu-ceilings" / "mamf.csv"
ARCH = {
    "A100": "ampere",
    "H100": "hopper",
    "H200": "hopper",
    "GH200": "hopper",
    "B200": "blackwell",
    "B300": "blackwell",
    "GB200": "blackwell",
}


def test_each_ceiling_is_the_best_measured_row_of_its_architecture() -> None:
    best: dict[tuple[str, str], float] = {}
    with MAMF.open(encoding="utf-8") as f:
        for r in csv.DictReader(f):
            name = r["accelerator"].split()
            if name[0] != "NVIDIA":
                continue
            dtype = "half" if r["dtype"] == "bf16" else "fp8"
            key = (ARCH[name[1]], dtype)
            best[key] = max(best.get(key, 0.0), float(r["mamf_tflops"]) / float(r["theory_tflops"]))
    assert set(best) == set(gemm_ceilings())
    for key, eff in best.items():
        assert gemm_ceilings()[key] == pytest.approx(eff, abs=1e-3)
    assert gemm_ceiling("volta") is None and gemm_ceiling(None) is None
    assert gemm_ceiling("HOPPER") == gemm_ceilings()[("hopper", "half")] == 0.838


def test_half_precision_gemms_never_beat_their_architectures_ceiling() -> None:
    params = load_perf_params()
    fast = type(params)(dict(params.values, gemm_half=0.99, gemm_k0=0.0))
    big = Kernel("gemm", "matmul", "forward", 2 * 16384**3, 3 * 2 * 16384**2, "half", (1, 16384, 16384, 16384))
    h100 = get_gpu("H100-SXM")
    t, bound = kernel_time_s(big, h100, fast, "bf16-o1")
    kernel_s = fast.values["kernel_s"]
    assert bound == "compute" and 2 * 16384**3 / (t - kernel_s) == pytest.approx(989.5e12 * 0.838, rel=0.02)
    # an architecture with no measured ceiling keeps the fitted efficiency
    t4 = get_gpu("T4")
    t, _ = kernel_time_s(big, t4, fast, "fp16-o1")
    assert 2 * 16384**3 / (t - kernel_s) == pytest.approx(65e12 * 0.99, rel=0.02)


def test_explain_names_the_ceiling_where_it_binds() -> None:
    from paddlefit.plan.explain import efficiency_source

    params = load_perf_params()
    assert efficiency_source("gemm_half", params, "hopper") == "published-fit"  # 0.75 < 0.838: not bound
    fast = type(params)(dict(params.values, gemm_half=0.95), provenance=params.provenance)
    assert efficiency_source("gemm_half", fast, "hopper") == "mamf"
    assert efficiency_source("gemm_half", fast, "volta") == "published-fit"  # no ceiling measured on Volta
