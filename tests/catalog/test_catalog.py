import json
import math

import pytest

from paddlefit.catalog.gpus import COLUMNS, catalog_docs, get_gpu, load_gpus
from paddlefit.catalog.units import TRAINING_UNITS, compute_unit, unit_of_label, unit_peak
from paddlefit.errors import CatalogError, UnknownNameError
from paddlefit.jsondoc import to_json
from paddlefit.units import GIB, MIB

REQUIRED = [
    "T4",
    "A10",
    "A10G",
    "L4",
    "L40S",
    "A40",
    "V100-SXM2-16GB",
    "V100-SXM2-32GB",
    "V100-PCIe-16GB",
    "V100-PCIe-32GB",
    "A100-SXM4-40GB",
    "A100-SXM4-80GB",
    "A100-PCIe-40GB",
    "A100-PCIe-80GB",
    "H100-SXM",
    "H100-PCIe",
    "H200",
    "B200",
    "RTX-3090",
    "RTX-4090",
]


def test_catalog_has_required_gpus_with_sources_and_positive_numbers():
    gpus = load_gpus()
    names = [g.name for g in gpus]
    assert sorted(REQUIRED) == sorted(set(REQUIRED) & set(names))
    assert len(names) == len(set(n.lower() for n in names))
    for g in gpus:
        assert g.source.startswith("http"), g.name
        assert g.verified in ("datasheet", "facts-table", "third-party", "press")
        assert g.capacity_bytes > 10 * GIB
        assert g.mem_bw_gb_s > 0 and g.fp32_tflops > 0 and g.pcie_gb_s > 0


def test_datasheet_values_and_capacity():
    h100 = get_gpu("H100-SXM")
    assert (h100.fp16_tflops, h100.mem_bw_gb_s, h100.nvlink_gb_s) == (989.5, 3350, 900)
    assert get_gpu("L4").capacity_bytes == 22888 * MIB  # AWS-reported usable MiB
    assert get_gpu("A100-SXM4-40GB").capacity_bytes == 40 * GIB
    assert get_gpu("t4").peak_flops("bf16-o1") == (8.1e12, "fp32")  # no BF16/TF32 on Turing
    assert get_gpu("a100").peak_flops("fp32") == (156e12, "tf32 tensor")
    assert get_gpu("a100").interconnect_gb_s(8) == (300.0, "nvlink")
    assert get_gpu("a100-pcie").interconnect_gb_s(4) == (31.5, "pcie gen4")
    assert get_gpu("rtx-4090").interconnect_gb_s() == (31.5, "pcie gen4")


def test_unknown_gpu_lists_close_names():
    with pytest.raises(UnknownNameError) as e:
        get_gpu("A100-SXM-80")
    assert "A100-SXM4-80GB" in str(e.value) or "A100-PCIe-80GB" in str(e.value)


def _row(**over):
    base = dict(
        name="MyGPU",
        aliases="",
        architecture="ada",
        compute_capability="8.9",
        memory_gib="20",
        usable_memory_mib="",
        mem_bw_gb_s="500",
        fp32_tflops="40",
        tf32_tflops="80",
        fp16_tflops="160",
        bf16_tflops="160",
        int8_tops="",
        fp8_tflops="",
        nvlink_gb_s="",
        nvlink_gpus="",
        pcie_gen="4",
        pcie_gb_s="31.5",
        tdp_w="200",
        sm_count="",
        l2_mib="",
        process_nm="",
        paddle_device="gpu",
        verified="datasheet",
        source="https://example.com/ds.pdf",
        retrieved="2026-11-30",
        base_clock_mhz="",
        boost_clock_mhz="",
        memory_type="",
        fp32_lanes_per_sm="",
        fp16_acc16_tflops="",
    )
    base.update(over)
    return ",".join(base[c] for c in COLUMNS)


def test_user_catalog_adds_and_overrides(tmp_path):
    f = tmp_path / "mine.csv"
    f.write_text(",".join(COLUMNS) + "\n" + _row() + "\n" + _row(name="T4", memory_gib="15") + "\n")
    gpus = load_gpus([f])
    assert get_gpu("mygpu", gpus).memory_gib == 20
    assert get_gpu("T4", gpus).memory_gib == 15
    assert len(gpus) == len(load_gpus()) + 1


def test_catalog_files_with_the_old_gbps_column_names_still_load(tmp_path):
    """`mem_bw_gbps`/`nvlink_gbps`/`pcie_gbps` (GB/s, easy to read as Gbit/s) were renamed `_gb_s`; a file written
    with the old header reads the same, for one release."""
    old = [
        {"mem_bw_gb_s": "mem_bw_gbps", "nvlink_gb_s": "nvlink_gbps", "pcie_gb_s": "pcie_gbps"}.get(c, c)
        for c in COLUMNS
    ]
    f = tmp_path / "old.csv"
    f.write_text(",".join(old) + "\n" + _row(mem_bw_gb_s="1234") + "\n" + _row(mem_bw_gb_s="x", name="Bad") + "\n")
    with pytest.raises(CatalogError, match="line 3 \\(Bad\\), field `mem_bw_gb_s`"):
        load_gpus([f])
    f.write_text(",".join(old) + "\n" + _row(mem_bw_gb_s="1234") + "\n")
    assert get_gpu("mygpu", load_gpus([f])).mem_bw_gb_s == 1234
    f.write_text(",".join(COLUMNS) + ",mem_bw_gbps\n" + _row() + ",99999\n")  # old and new name: which wins?
    with pytest.raises(CatalogError, match="mem_bw_gb_s given twice"):
        load_gpus([f])


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        (_row(mem_bw_gb_s="fast"), "line 2 (MyGPU), field `mem_bw_gb_s`"),
        (_row(memory_gib="-4"), "field `memory_gib`"),
        (_row(name=""), "field `name`"),
        (_row() + ",extra", "line 2: expected"),
    ],
)
def test_malformed_catalog_row_names_file_line_field(tmp_path, row, needle):
    f = tmp_path / "bad.csv"
    f.write_text(",".join(COLUMNS) + "\n" + row + "\n")
    with pytest.raises(CatalogError) as e:
        load_gpus([f])
    assert str(f) in str(e.value) and needle in str(e.value)


def test_catalog_bad_header_and_missing_file(tmp_path):
    f = tmp_path / "h.csv"
    f.write_text("name,memory\nX,1\n")
    with pytest.raises(CatalogError, match="header is wrong"):
        load_gpus([f])
    with pytest.raises(CatalogError, match="cannot be read"):
        load_gpus([tmp_path / "nope.csv"])
    assert math.isclose(get_gpu("A40").nvlink_gb_s, 112.5)


def test_user_alias_colliding_with_shipped_gpu_is_an_error(tmp_path):
    f = tmp_path / "alias.csv"
    f.write_text(",".join(COLUMNS) + "\n" + _row(name="MyA100", aliases="a100") + "\n")
    with pytest.raises(CatalogError, match="'a100' of 'MyA100' is already used by 'A100-SXM4-40GB'"):
        load_gpus([f])


def test_catalog_csv_reads_back_and_json_docs_carry_capacity(tmp_path):
    from paddlefit.catalog.gpus import catalog_csv, catalog_docs

    shipped = load_gpus()
    f = tmp_path / "all.csv"
    f.write_text(catalog_csv(shipped))
    assert load_gpus([f]) == shipped  # every row overrides itself: the CSV is a faithful template
    docs = catalog_docs(shipped)
    assert len(docs) == len(shipped) and docs[0]["capacity_bytes"] == shipped[0].capacity_bytes


def test_resolve_gpus_matches_names_and_aliases_once_each():
    from paddlefit.catalog.gpus import resolve_gpus

    assert [g.name for g in resolve_gpus(["t4", "Tesla-T4", "a100", "T4"])] == ["T4", "A100-SXM4-40GB"]
    with pytest.raises(UnknownNameError, match="Unknown GPU 'H900'"):
        resolve_gpus(["H900"])


def no_tensor_peaks(name: str = "L20"):
    """A shipped row with its tensor-core peaks removed, as a user catalog that lacks them (every shipped CUDA row has
    them now; a user's row may have none)."""
    return get_gpu(name).model_copy(
        update={"tf32_tflops": None, "fp16_tflops": None, "bf16_tflops": None, "int8_tops": None, "fp8_tflops": None}
    )


def test_a_peak_the_catalog_lacks_is_said_by_both_planners():
    """A catalog row without tensor-core peaks (a user catalog's): fp16/bf16 are timed at its FP32 peak, and
    the probe planner's row notes and the parallel planner's notes say so in the same words; bf16 stays bf16 (the
    card has it)."""
    from paddlefit.jobspec.spec import Precision
    from paddlefit.llm.memory import TrainSetup
    from paddlefit.llm.search import gpu_setup

    l20, a100 = no_tensor_peaks(), get_gpu("A100-SXM4-80GB")
    assert l20.peak_flops("bf16-o1") == (59.35e12, "fp32")
    assert (
        get_gpu("L20").peak_flops("bf16-o1") == (119.5e12, "bf16 tensor")
        and get_gpu("L20").missing_peak("bf16-o1") is None
    )  # the shipped row has it now
    note = "no bf16 peak in the catalog: timed at the FP32 peak, a lower bound (the card is faster)"
    assert l20.missing_peak("bf16-o1") == note
    tf32_note = "no TF32 peak in the catalog: fp32 timed on CUDA cores, a lower bound (the card is faster)"
    assert l20.missing_peak("fp32") == tf32_note
    assert l20.missing_peak("fp32", tf32=False) is None and a100.missing_peak("bf16-o1") is None
    assert get_gpu("T4").missing_peak("bf16-o1") is None  # blocked (CC 7.5): Paddle runs fp32, said elsewhere
    setup, notes = gpu_setup(TrainSetup(seq_len=256, precision=Precision.BF16_O1), l20)
    assert setup.precision is Precision.BF16_O1 and notes == [f"L20: {note}"]


def test_gpus_json_fills_usable_memory_on_every_row_by_one_rule():
    """A10G and L4 had `usable_memory_mib`, the A10 none. One rule for all rows: the MiB a process can
    use (the planner's capacity), measured where a cloud publishes it, else the label, and which of the two."""
    rows = {g["name"]: g for g in json.loads(to_json(catalog_docs(load_gpus())))}
    for g in rows.values():
        assert g["usable_memory_mib"] * MIB == g["capacity_bytes"], g["name"]
        assert g["usable_memory_basis"] in ("measured", "label"), g["name"]
    assert (rows["A10"]["usable_memory_mib"], rows["A10"]["usable_memory_basis"]) == (24 * 1024, "label")
    assert (rows["A10G"]["usable_memory_mib"], rows["A10G"]["usable_memory_basis"]) == (22888, "measured")


def test_paddles_amp_capability_rule_on_cuda():
    """Paddle's auto_cast runs fp16 from CC 7.0 and bf16 from CC 8.0 (python/paddle/amp/auto_cast.py); below,
    fp32. One rule: the catalog's rows and tune's AMP trial both use it."""
    from paddlefit.catalog.units import cuda_amp_blocked

    assert cuda_amp_blocked(7.5, "bf16-o1") == "bf16 AMP needs CC 8.0+: Paddle runs fp32"
    assert cuda_amp_blocked(6.1, "fp16-o2") == "fp16 AMP needs CC 7.0+: Paddle runs fp32"
    assert cuda_amp_blocked(None, "fp16-o1") is not None  # unknown: taken as too old
    assert [cuda_amp_blocked(cc, p) for cc, p in ((7.0, "fp16-o1"), (8.0, "bf16-o2"), (3.5, "fp32"))] == [None] * 3
    assert get_gpu("T4").amp_blocked("bf16-o1") == cuda_amp_blocked(7.5, "bf16-o1")


def test_efficiency_class_of_every_unit_the_catalog_reports():
    """(Moved from tests/estimate/test_timing.py with estimate.timing.efficiency_class, now
    catalog.units.unit_of_label.)"""
    units = {g.peak_flops(p)[1] for g in load_gpus() for p in ("fp32", "fp16-o1", "bf16-o2")}
    assert units == {"fp32", "tf32 tensor", "fp16 tensor", "bf16 tensor"}
    assert {u: unit_of_label(u) for u in units} == {
        "fp32": "fp32",
        "tf32 tensor": "tf32",
        "fp16 tensor": "half",
        "bf16 tensor": "half",
    }
    assert unit_of_label("something else") == "fp32"


def test_one_unit_vocabulary_for_peaks_labels_and_calibration():
    for g in load_gpus():
        for p in ("fp32", "fp16-o1", "bf16-o2"):
            for tf32 in (True, False):
                peak, label = g.peak_flops(p, tf32)
                unit = compute_unit(g, p, tf32)
                assert unit in TRAINING_UNITS and unit_of_label(label) == unit
                assert peak == unit_peak(g, unit, p)
