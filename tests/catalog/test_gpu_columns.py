"""The catalog's clocks, memory type and FP32 lanes per SM, held against the FP32 peak they imply; a tensor
peak on every CUDA row the architecture has one for; GeForce rows' FP16-accumulate figure kept apart from the
FP32-accumulate one Paddle's AMP runs at; and the new columns optional for user files written before them."""

from __future__ import annotations

import re

import pytest

from paddlefit.catalog.gpus import COLUMNS, GPU, MEMORY_TYPES, OPTIONAL_COLUMNS, get_gpu, load_gpus
from paddlefit.errors import CatalogError

NEW_COLUMNS = ("base_clock_mhz", "boost_clock_mhz", "memory_type", "fp32_lanes_per_sm", "fp16_acc16_tflops")

#: CUDA rows whose FP32 peak cannot be checked against SMs x lanes x boost clock, and why (the row's ``source``
#: says the same). Adding a row here is a decision: the figure is wrong or a clock is missing.
FLAGGED = {
    "H20": "no published clock; FP32 44 with 78 SMs x 128 lanes implies 2203 MHz, above any GH100 boost (1980 MHz)",
}
#: How far a row's FP32 peak may sit from 2 x SMs x lanes x boost clock: the datasheets round to 3 digits (V100
#: PCIe: 14 vs 14.13).
FP32_TOLERANCE = 0.03
#: FP32 lanes per SM by architecture (whitepapers: Volta GV100 64, Turing 64, Ampere GA100 64 / GA10x 128, Ada 128,
#: Hopper 128, Blackwell 128).
LANES = {"volta": 64, "turing": 64, "ada": 128, "hopper": 128, "blackwell": 128}
#: NVIDIA's GeForce cards: FP16 tensor with FP32 accumulate at half the FP16-accumulate rate.
GEFORCE = {"RTX-3090", "RTX-4090", "RTX-4090D", "RTX-4080", "RTX-4080-SUPER"}


def _cuda() -> list[GPU]:
    return [g for g in load_gpus() if not g.is_xpu]


def test_every_fp32_peak_is_sms_times_lanes_times_boost_clock() -> None:
    """fp32_tflops ~= 2 x sm_count x fp32_lanes_per_sm x boost_clock_mhz / 1e6 on every CUDA row but the flagged."""
    off = {}
    for g in _cuda():
        derived = g.fp32_tflops_at_boost()
        if g.name in FLAGGED:
            assert derived is None or abs(g.fp32_tflops / derived - 1) > FP32_TOLERANCE, f"{g.name} now checks: unflag"
            continue
        assert derived is not None, f"{g.name}: sm_count, fp32_lanes_per_sm or boost_clock_mhz missing"
        if abs(g.fp32_tflops / derived - 1) > FP32_TOLERANCE:
            off[g.name] = (g.fp32_tflops, round(derived, 2))
    assert off == {}, f"FP32 peak not at SMs x lanes x boost clock: {off}"
    assert set(FLAGGED) <= {g.name for g in _cuda()}


def test_the_check_catches_a_figure_not_at_the_boost_clock() -> None:
    """The A10G row said 31.2 (the A10's FP32): 80 SMs x 128 lanes x 1.695 GHz give 34.7, so the check fails it."""
    a10g = get_gpu("A10G")
    assert a10g.fp32_tflops == 35 and a10g.fp32_tflops_at_boost() == pytest.approx(34.71, abs=0.01)
    wrong = a10g.model_copy(update={"fp32_tflops": 31.2})
    assert abs(wrong.fp32_tflops / wrong.fp32_tflops_at_boost() - 1) > FP32_TOLERANCE
    assert get_gpu("T4").model_copy(update={"boost_clock_mhz": None}).fp32_tflops_at_boost() is None


def test_new_columns_are_filled_on_every_cuda_row() -> None:
    """Boost clock (but the flagged), memory type and FP32 lanes on every CUDA row; lanes as the architecture's
    whitepaper gives them; a base clock, where given, below the boost clock."""
    for g in _cuda():
        assert g.memory_type in MEMORY_TYPES, g.name
        want = LANES.get(g.architecture, 64 if g.compute_capability == 8.0 else 128)  # ampere: GA100 64, GA10x 128
        assert g.fp32_lanes_per_sm == want, g.name
        assert g.sm_count, g.name
        if g.name not in FLAGGED:
            assert g.boost_clock_mhz, g.name
        if g.base_clock_mhz is not None:
            assert g.base_clock_mhz < g.boost_clock_mhz, g.name
        assert f"{g.boost_clock_mhz:g} MHz" in g.source if g.boost_clock_mhz else "no source found" in g.source
        if g.base_clock_mhz is None:  # a missing figure is said, not left to guess
            assert re.search(r"(base clock|clocks)[^|;]*(no source found|unknown)", g.source), g.name
    k200 = get_gpu("k200")
    assert k200.memory_type == "HBM2" and k200.fp32_lanes_per_sm is None  # XPU: lanes and clocks unknown


def test_every_cuda_row_has_the_tensor_peaks_its_architecture_runs() -> None:
    """FP16 from Volta (CC 7.0), INT8 from Turing (7.5), BF16 and TF32 from Ampere (8.0), FP8 from Ada (8.9): no
    CUDA row is timed on its CUDA cores for want of a figure (the L20's fp16 was)."""
    for g in _cuda():
        cc = g.compute_capability
        want = {"fp16_tflops": 7.0, "int8_tops": 7.5, "bf16_tflops": 8.0, "tf32_tflops": 8.0, "fp8_tflops": 8.9}
        for col, since in want.items():
            assert (getattr(g, col) is not None) == (cc >= since), (g.name, col)
        for p in ("fp32", "fp16-o1", "bf16-o2"):
            assert g.missing_peak(p) is None, (g.name, p)


def test_geforce_rows_keep_fp16_accumulate_apart() -> None:
    """GeForce: fp16/bf16 are the FP32-accumulate figures Paddle's AMP runs at; the FP16-accumulate figure (twice
    that) is held in fp16_acc16_tflops. Other cards run both at one rate: the column stays empty."""
    for g in _cuda():
        if g.name in GEFORCE:
            assert g.fp16_acc16_tflops == pytest.approx(2 * g.fp16_tflops, rel=0.01), g.name
            assert g.bf16_tflops == g.fp16_tflops and g.tf32_tflops == pytest.approx(g.fp16_tflops / 2, rel=0.01)
            assert "FP16 accumulate" in g.source and "FP32 accumulate" in g.source, g.name
        else:
            assert g.fp16_acc16_tflops is None, g.name
    assert get_gpu("RTX-3090").fp16_acc16_tflops == 142 and get_gpu("RTX-4090").fp16_acc16_tflops == 330.3


def test_derived_and_newly_sourced_peaks() -> None:
    """Figures sourced for the catalog (dense TFLOPS), each with its arithmetic in the row's source."""
    l20 = get_gpu("L20")  # verl / LLM-Prof: 119.5 FP16, 239 INT8; TF32 = FP16 / 2, FP8 = INT8 (derived)
    assert (l20.fp16_tflops, l20.bf16_tflops, l20.tf32_tflops, l20.int8_tops, l20.fp8_tflops) == (
        119.5,
        119.5,
        59.75,
        239,
        239,
    )
    assert l20.peak_flops("fp16-o1") == (119.5e12, "fp16 tensor") and "derived: TF32 = FP16 / 2" in l20.source
    s = get_gpu("RTX-4080-SUPER")  # 80 SMs x Ada GeForce rates x 2.55 GHz
    assert (s.fp16_tflops, s.fp16_acc16_tflops, s.tf32_tflops, s.int8_tops, s.fp8_tflops) == (
        104.46,
        208.9,
        52.22,
        417.79,
        208.9,
    )
    assert "80 x 512 x 2.55 GHz = 104.46" in s.source
    r = get_gpu("RTX-4080")
    assert (r.tf32_tflops, r.int8_tops, r.fp8_tflops, r.fp16_acc16_tflops) == (48.74, 389.9, 194.95, 194.95)
    assert (
        get_gpu("RTX-A6000").tf32_tflops == 77.41
        and "84 SMs x 512 TF32 FLOPs/clk/SM x 1.8 GHz" in get_gpu("RTX-A6000").source
    )
    ada6000 = get_gpu("RTX-6000-Ada")
    assert (ada6000.fp16_tflops, ada6000.tf32_tflops, ada6000.int8_tops, ada6000.fp8_tflops) == (
        364.25,
        182.12,
        728.5,
        728.5,
    )
    assert (get_gpu("B200").sm_count, get_gpu("L40").l2_mib) == (148, 96)


def test_memory_type_is_checked_and_names_the_field(tmp_path) -> None:
    header = ",".join(COLUMNS)
    base = {c: "" for c in COLUMNS}
    base.update(
        name="MyGPU",
        architecture="ada",
        compute_capability="8.9",
        memory_gib="20",
        mem_bw_gb_s="500",
        fp32_tflops="40",
        pcie_gen="4",
        pcie_gb_s="31.5",
        verified="datasheet",
        source="https://example.com/ds.pdf",
    )
    f = tmp_path / "m.csv"
    f.write_text(header + "\n" + ",".join({**base, "memory_type": "hbm3E"}[c] for c in COLUMNS) + "\n")
    assert get_gpu("mygpu", load_gpus([f])).memory_type == "HBM3e"  # case-insensitive, NVIDIA's spelling kept
    f.write_text(header + "\n" + ",".join({**base, "memory_type": "DDR4"}[c] for c in COLUMNS) + "\n")
    with pytest.raises(
        CatalogError,
        match=r"line 2 \(MyGPU\), field `memory_type`: Value error, must be one of "
        r"HBM2, HBM2e, HBM3, HBM3e, GDDR5, GDDR6, GDDR6X, GDDR7",
    ):
        load_gpus([f])
    for col, bad in (("boost_clock_mhz", "-1"), ("fp32_lanes_per_sm", "1.5"), ("fp16_acc16_tflops", "fast")):
        f.write_text(header + "\n" + ",".join({**base, col: bad}[c] for c in COLUMNS) + "\n")
        with pytest.raises(CatalogError, match=f"field `{col}`"):
            load_gpus([f])


def test_a_user_file_written_before_the_new_columns_still_loads(tmp_path) -> None:
    """The five issue-39 columns are optional: a file with the previous header loads, the new figures empty."""
    assert set(NEW_COLUMNS) <= set(OPTIONAL_COLUMNS) and COLUMNS[-len(NEW_COLUMNS) :] == NEW_COLUMNS
    cols = [c for c in COLUMNS if c not in NEW_COLUMNS]
    row = {c: "" for c in cols}
    row.update(
        name="Older",
        architecture="ampere",
        compute_capability="8.6",
        memory_gib="24",
        mem_bw_gb_s="900",
        fp32_tflops="30",
        pcie_gen="4",
        pcie_gb_s="31.5",
        verified="datasheet",
        source="https://e.com/o",
        paddle_device="gpu",
    )
    f = tmp_path / "older.csv"
    f.write_text(",".join(cols) + "\n" + ",".join(row[c] for c in cols) + "\n")
    g = get_gpu("older", load_gpus([f]))
    assert (g.boost_clock_mhz, g.memory_type, g.fp32_lanes_per_sm, g.fp16_acc16_tflops) == (None, None, None, None)
    assert g.fp32_tflops_at_boost() is None


def test_a_base_clock_above_the_boost_clock_is_refused(tmp_path) -> None:
    header = ",".join(COLUMNS)
    base = {c: "" for c in COLUMNS}
    base.update(
        name="MyGPU",
        architecture="ampere",
        compute_capability="8.6",
        memory_gib="24",
        mem_bw_gb_s="600",
        fp32_tflops="31.2",
        pcie_gen="4",
        pcie_gb_s="31.5",
        verified="datasheet",
        source="https://example.com/ds.pdf",
        base_clock_mhz="1900",
        boost_clock_mhz="1695",
    )
    f = tmp_path / "c.csv"
    f.write_text(header + "\n" + ",".join(base[c] for c in COLUMNS) + "\n")
    with pytest.raises(CatalogError, match=r"base_clock_mhz 1900 is above boost_clock_mhz 1695"):
        load_gpus([f])
