"""GPUs Chinese clouds rent (A800, H800, H20, L20, L40, RTX 4080/4090D, RTX A6000, RTX 6000 Ada) and Kunlunxin XPU
rows: exact catalog values from their sources, every row sourced and dated, and nothing CUDA-only (compute
capability, AMP rules, TF32, flash attention, NCCL) crashing or claiming a grounded speed on an XPU row."""

from __future__ import annotations

import io
import json
import re
from datetime import date

import pytest
from rich.console import Console
from typer.testing import CliRunner

from paddlefit.catalog.gpus import COLUMNS, XPU_UNCALIBRATED, catalog_csv, get_gpu, load_gpus
from paddlefit.cli.main import app
from paddlefit.cli.render.tables import render_gpus
from paddlefit.errors import CatalogError
from paddlefit.jobspec.spec import Precision
from paddlefit.llm.perf import default_mfu
from paddlefit.llm.search import gpu_setup
from paddlefit.plan.request import Target
from paddlefit.plan.rows import effective_precision, flash_runs, gpu_notes, recommend
from paddlefit.units import GIB, MIB

NEW = [
    "A800-SXM4-80GB",
    "A800-PCIe-80GB",
    "A800-PCIe-40GB",
    "H800-SXM",
    "H800-PCIe",
    "H20",
    "L20",
    "L40",
    "RTX-4090D",
    "RTX-4080",
    "RTX-4080-SUPER",
    "RTX-A6000",
    "RTX-6000-Ada",
    "Kunlunxin-K200",
]


@pytest.mark.parametrize("name", NEW)
def test_every_new_row_has_a_source_url_and_a_retrieved_date(name: str) -> None:
    g = get_gpu(name)
    assert re.match(r"https?://\S+\.\S+", g.source), g.source
    assert g.verified in ("datasheet", "third-party", "press")
    assert date.fromisoformat(g.retrieved) <= date.today()


def test_new_rows_hold_their_sources_figures() -> None:
    """Figures as the cited pages print them (dense tensor peaks)."""
    h20 = get_gpu("h20")  # zangshuxian.com / willitrunai.com / 1cnz.cn
    assert (
        h20.memory_gib,
        h20.mem_bw_gb_s,
        h20.fp32_tflops,
        h20.tf32_tflops,
        h20.fp16_tflops,
        h20.int8_tops,
        h20.fp8_tflops,
        h20.nvlink_gb_s,
        h20.tdp_w,
        h20.sm_count,
    ) == (96, 4000, 44, 74, 148, 296, 296, 900, 400, 78)
    a800 = get_gpu("a800")  # tweakers.net: the A100 with NVLink cut to 400 GB/s
    a100 = get_gpu("A100-SXM4-80GB")
    assert a800.nvlink_gb_s == 400 and a100.nvlink_gb_s == 600
    assert (a800.mem_bw_gb_s, a800.fp16_tflops, a800.tdp_w) == (a100.mem_bw_gb_s, a100.fp16_tflops, a100.tdp_w)
    assert get_gpu("h800").nvlink_gb_s == 400 and get_gpu("h800").fp16_tflops == get_gpu("h100").fp16_tflops
    assert get_gpu("h800-pcie").nvlink_gb_s is None  # the bridge figure was not found: left empty
    l40 = get_gpu("L40")  # NVIDIA's L40 datasheet table as the reseller copies it
    assert (l40.fp32_tflops, l40.tf32_tflops, l40.bf16_tflops, l40.fp8_tflops, l40.tdp_w) == (
        90.5,
        90.5,
        181.05,
        362,
        300,
    )
    d = get_gpu("4090d")  # hmc-tech.com, hardwaredb.net
    assert (d.sm_count, d.fp32_tflops, d.fp16_tflops, d.l2_mib, d.tdp_w) == (114, 73.54, 147.09, 72, 425)
    a6000 = get_gpu("a6000")  # servethehome (NVIDIA's table), llmperf.net (Microway)
    assert (a6000.mem_bw_gb_s, a6000.fp16_tflops, a6000.nvlink_gb_s) == (768, 154.8, 112.5)
    # The tensor peaks, sourced or derived (tests/catalog/test_gpu_columns.py)
    assert (a6000.tf32_tflops, get_gpu("L20").fp16_tflops, get_gpu("RTX-6000-Ada").fp16_tflops) == (
        77.41,
        119.5,
        364.25,
    )
    k = get_gpu("k200")  # Linley Group (Hot Chips 2020) + tomshw.it: press figures
    assert (
        k.memory_gib,
        k.mem_bw_gb_s,
        k.fp32_tflops,
        k.fp16_tflops,
        k.int8_tops,
        k.tdp_w,
        k.pcie_gb_s,
        k.verified,
    ) == (16, 512, 16, 64, 256, 150, 15.75, "press")


def test_xpu_row_is_not_a_cuda_gpu() -> None:
    k = get_gpu("Kunlunxin-K200")
    assert k.is_xpu and k.compute_capability is None and k.xpu_generation == 1 and k.device_label == "XPU1"
    assert k.tf32_tflops is None and k.peak_flops("fp32") == (16e12, "fp32")
    assert k.amp_blocked("fp16-o1") and "XPU2" in k.amp_blocked("fp16-o1")
    assert k.amp_blocked("fp32") is None
    assert effective_precision(k, Precision.BF16_O2) is Precision.FP32
    assert "CUDA kernel" in (k.flash_blocked() or "")
    assert k.interconnect_gb_s(8) == (15.75, "pcie gen4")
    assert not get_gpu("a100").is_xpu and get_gpu("a100").device_label == "8.0"


def test_xpu_generation_rules_follow_paddle_auto_cast(tmp_path) -> None:
    """fp16 AMP on XPU2+, bf16 on XPU3 (Paddle ``_is_xpu_float16_supported``/``_is_xpu_bfloat16_supported``)."""
    row = dict.fromkeys(COLUMNS, "")
    row.update(
        name="MyXPU",
        architecture="xpu2",
        memory_gib="32",
        mem_bw_gb_s="512",
        fp32_tflops="32",
        fp16_tflops="128",
        pcie_gen="4",
        pcie_gb_s="31.5",
        paddle_device="xpu",
        verified="press",
        source="https://example.com/x",
        retrieved="2026-12-01",
    )
    f = tmp_path / "x.csv"
    f.write_text(",".join(COLUMNS) + "\n" + ",".join(row[c] for c in COLUMNS) + "\n")
    x2 = get_gpu("myxpu", load_gpus([f]))
    assert x2.amp_blocked("fp16-o2") is None and "XPU3" in x2.amp_blocked("bf16-o1")
    assert effective_precision(x2, Precision.FP16_O1) is Precision.FP16_O1
    assert effective_precision(x2, Precision.BF16_O1) is Precision.FP32


@pytest.mark.parametrize(
    ("over", "msg"),
    [
        ({"compute_capability": "8.0"}, "leave it empty on a `paddle_device: xpu` row"),
        ({"architecture": "kunlun"}, "xpu1, xpu2 or xpu3"),
        ({"paddle_device": "npu"}, "must be one of gpu, xpu"),
        ({"paddle_device": "gpu"}, "compute_capability is required"),
    ],
)
def test_bad_xpu_rows_stop_with_the_field(tmp_path, over, msg) -> None:
    row = dict.fromkeys(COLUMNS, "")
    row.update(
        name="Bad",
        architecture="xpu2",
        memory_gib="32",
        mem_bw_gb_s="512",
        fp32_tflops="32",
        pcie_gen="4",
        pcie_gb_s="31.5",
        paddle_device="xpu",
        verified="press",
        source="https://e.com/x",
    )
    row.update(over)
    f = tmp_path / "bad.csv"
    f.write_text(",".join(COLUMNS) + "\n" + ",".join(row[c] for c in COLUMNS) + "\n")
    with pytest.raises(CatalogError, match=re.escape(msg)):
        load_gpus([f])


def test_catalog_csv_round_trips_xpu_rows(tmp_path) -> None:
    f = tmp_path / "all.csv"
    f.write_text(catalog_csv(load_gpus()))
    again = load_gpus([f])
    assert again == load_gpus() and get_gpu("k200", again).paddle_device == "xpu"


def test_old_user_catalog_without_paddle_device_is_a_cuda_row(tmp_path) -> None:
    cols = [c for c in COLUMNS if c != "paddle_device"]
    row = {c: "" for c in cols}
    row.update(
        name="Old",
        architecture="ampere",
        compute_capability="8.6",
        memory_gib="24",
        mem_bw_gb_s="900",
        fp32_tflops="30",
        pcie_gen="4",
        pcie_gb_s="31.5",
        verified="datasheet",
        source="https://e.com/o",
    )
    f = tmp_path / "old.csv"
    f.write_text(",".join(cols) + "\n" + ",".join(row[c] for c in cols) + "\n")
    assert get_gpu("old", load_gpus([f])).paddle_device == "gpu"


def test_xpu_row_notes_say_uncalibrated_and_why_amp_is_off() -> None:
    k = get_gpu("k200")
    prec = effective_precision(k, Precision.FP16_O1)
    _, unit = k.peak_flops(prec.value)
    notes = gpu_notes(k, Precision.FP16_O1, prec, unit)
    assert XPU_UNCALIBRATED in notes and "fp16 AMP needs XPU2+ (Paddle auto_cast): Paddle runs fp32" in notes
    assert "specs press" in notes and not any("CUDA 13" in n or "TF32" in n for n in notes)
    assert flash_runs(k, Precision.FP16_O1) and flash_runs(get_gpu("a100"), Precision.FP16_O1) is None


def test_missing_tensor_peak_is_said_not_hidden() -> None:
    """A row without tensor peaks (a user catalog's; the shipped L20 and RTX A6000 lacked them once)."""
    bare = {"tf32_tflops": None, "fp16_tflops": None, "bf16_tflops": None, "int8_tops": None, "fp8_tflops": None}
    l20 = get_gpu("L20").model_copy(update=bare)
    _, unit = l20.peak_flops("fp16-o1")
    assert unit == "fp32"
    assert any("no fp16 peak in the catalog" in n for n in gpu_notes(l20, Precision.FP16_O1, Precision.FP16_O1, unit))
    a6000 = get_gpu("RTX-A6000").model_copy(update={"tf32_tflops": None})
    _, unit = a6000.peak_flops("fp32")
    assert a6000.missing_peak("fp32") is not None
    assert a6000.missing_peak("fp32") in gpu_notes(a6000, Precision.FP32, Precision.FP32, unit)


def _target(name: str, cap_gib: int, sps: float, calibration: str) -> Target:
    return Target(
        name=name,
        kind="gpu",
        fits=True,
        peak_bytes=1,
        capacity_bytes=cap_gib * GIB,
        max_batch_size=8,
        step_time_s=1.0,
        samples_per_s=sps,
        calibrated=False,
        notes=[],
        bound=None,
        calibration=calibration,
    )


def test_recommendation_prefers_rows_a_measurement_grounds() -> None:
    xpu = _target("Kunlunxin-K200", 16, 1e6, "uncalibrated")
    t4 = _target("T4", 16, 10.0, "published-fit")
    rec = recommend([xpu, t4], 8)
    assert rec["target"] == "T4" and rec["smallest_fit"] == "T4"
    assert recommend([xpu], 8)["target"] == "Kunlunxin-K200"  # the only card that fits is still named


def test_parallel_planner_on_an_xpu_row() -> None:
    from paddlefit.llm.memory import TrainSetup

    k = get_gpu("k200")
    own, notes = gpu_setup(TrainSetup(2048, Precision.BF16_O2, "adamw", True), k)  # type: ignore[arg-type]
    assert own.precision is Precision.FP32 and own.flash_attention is False
    assert XPU_UNCALIBRATED in notes
    assert default_mfu(k)[1].startswith(XPU_UNCALIBRATED)
    own, notes = gpu_setup(TrainSetup(2048, Precision.BF16_O2, "adamw", True), get_gpu("h20"))  # type: ignore
    assert own.precision is Precision.BF16_O2 and own.flash_attention and notes == []


def test_gpus_command_lists_new_rows_with_sources() -> None:
    res = CliRunner().invoke(app, ["gpus", "--json"])
    assert res.exit_code == 0, res.output
    docs = {d["name"]: d for d in json.loads(res.stdout)}
    for name in NEW:
        assert docs[name]["source"].startswith("http") and docs[name]["retrieved"]
    assert docs["Kunlunxin-K200"]["paddle_device"] == "xpu" and docs["Kunlunxin-K200"]["compute_capability"] is None
    buf = io.StringIO()
    render_gpus(load_gpus(), Console(file=buf, width=200, color_system=None))
    line = next(x for x in buf.getvalue().splitlines() if "Kunlunxin-K200" in x)
    assert "XPU1" in line and "press" in line


def test_plan_labels_an_xpu_row_uncalibrated() -> None:
    from paddlefit.plan import PlanRequest, build_plan

    plan = build_plan(PlanRequest(model="lenet", batch_size=8, gpus=["k200", "T4"], precision=Precision.FP16_O1))
    rows = {t.name: t for t in plan.targets}
    k, t4 = rows["Kunlunxin-K200"], rows["T4"]
    assert k.calibration == "uncalibrated" and t4.calibration == "published-fit"
    assert XPU_UNCALIBRATED in k.notes and k.peak_bytes > 0 and k.max_batch_size
    assert plan.recommendation["target"] == "T4"


# ---- doctor: recorded xpu-smi output (Paddle's XPU install guide), Snapshot literals; the machine has no XPU

XPU_DATA = __import__("pathlib").Path(__file__).resolve().parents[1] / "data"


def _xpu_snapshot(**over):
    from paddlefit.diagnose.snapshot import Snapshot
    from paddlefit.diagnose.xpu import parse_xpu_smi

    drv, rt, xpus = parse_xpu_smi((XPU_DATA / "xpu" / "xpu_smi_2xr300.txt").read_text())
    base = dict(
        os="Linux",
        python="3.10.12",
        paddle_version="2.6.1",
        paddle_cuda=None,
        paddle_xpu=True,
        xpu_smi="/usr/local/bin/xpu-smi",
        xpu_driver_version=drv,
        xpu_runtime_version=rt,
        xpus=xpus,
        device_runs={"cpu": "ok", "xpu:0": "ok", "xpu:1": "ok"},
        env={},
    )
    base.update(over)
    return Snapshot(**base)


def _problems(s):
    from paddlefit.diagnose.checks import run_checks

    return sorted((f.check_id, f.severity) for f in run_checks(s) if f.severity != "ok")


def test_parse_xpu_smi_reads_the_devices_table_only() -> None:
    from paddlefit.diagnose.xpu import parse_xpu_smi

    drv, rt, xpus = parse_xpu_smi((XPU_DATA / "xpu" / "xpu_smi_2xr300.txt").read_text())
    assert (drv, rt) == ("4.0", "4.31")
    assert [(x.index, x.model, x.memory_total_bytes, x.memory_used_bytes) for x in xpus] == [
        (0, "R300", 32768 * MIB, 0),
        (1, "R300", 32768 * MIB, 0),
    ]  # VIDEO/PROCESSES rows are not XPUs
    assert parse_xpu_smi("") == (None, None, [])


def test_xpu_build_is_not_flagged_for_having_no_cuda() -> None:
    from paddlefit.diagnose.checks import run_checks

    s = _xpu_snapshot()
    assert _problems(s) == []
    titles = {f.check_id: f.title for f in run_checks(s)}
    assert titles["PF101"] == "Paddle 2.6.1 (Kunlunxin XPU build) imports"
    assert "XPU build with 2 Kunlunxin XPU(s)" in titles["PF104"]
    assert titles["PF123"] == "2 Kunlunxin XPU(s): R300 x2"


@pytest.mark.parametrize(
    ("over", "expected"),
    [
        ({"xpus": []}, [("PF104", "error")]),  # xpu-smi ran and lists nothing
        ({"xpus": [], "xpu_smi": None, "device_runs": {"cpu": "ok"}}, [("PF104", "warn")]),  # nothing to ask
        ({"xpus": [], "xpu_smi": None}, []),  # no xpu-smi, but Paddle ran on both XPUs
        ({"paddle_xpu": False}, [("PF104", "warn"), ("PF123", "warn")]),  # CPU wheel on an XPU host
        ({"device_runs": {"cpu": "ok", "xpu:0": "XPUError: no device"}}, [("PF100", "error")]),
    ],
)
def test_xpu_build_problems(over, expected) -> None:
    assert _problems(_xpu_snapshot(**over)) == expected


def test_xpu_memory_held_by_another_process_is_reported() -> None:
    from paddlefit.diagnose.xpu import XPUInfo

    busy = [XPUInfo(index=0, model="R300", memory_total_bytes=32 * GIB, memory_used_bytes=30 * GIB)]
    assert _problems(_xpu_snapshot(xpus=busy)) == [("PF123", "warn")]


def test_gpu_build_on_an_xpu_host_names_the_xpu_wheel() -> None:
    from paddlefit.diagnose.checks import run_checks

    s = _xpu_snapshot(paddle_xpu=False, paddle_cuda="12.6")
    (f,) = [f for f in run_checks(s) if f.check_id == "PF104"]
    assert f.severity == "error" and "paddlepaddle-xpu" in f.detail


def test_recorded_xpu_snapshot_round_trips_through_doctor() -> None:
    res = CliRunner().invoke(app, ["doctor", "--from", str(XPU_DATA / "snapshots" / "xpu_build_2xr300.json"), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["snapshot"]["paddle_xpu"] is True and len(doc["snapshot"]["xpus"]) == 2
    assert [f for f in doc["findings"] if f["severity"] != "ok"] == []


# ---- image: Paddle's published XPU images, never a CUDA image for an XPU host


def test_image_for_an_xpu_host_uses_paddles_published_xpu_image(tmp_path) -> None:
    from dockerfile_parse import DockerfileParser

    res = CliRunner().invoke(
        app, ["image", "--from-snapshot", str(XPU_DATA / "snapshots" / "xpu_build_2xr300.json"), "--out", str(tmp_path)]
    )
    assert res.exit_code == 0, res.output
    df = DockerfileParser(path=str(tmp_path / "Dockerfile"))
    assert df.baseimage == "registry.baidubce.com/device/paddle-xpu:ubuntu20-x86_64-gcc84-py310"
    runs = [i["value"] for i in df.structure if i["instruction"] == "RUN"]
    assert any("paddlepaddle_xpu-2.6.1" in r for r in runs)
    assert "--privileged" in res.stdout and "--gpus" not in res.stdout
    assert "cuda" not in (tmp_path / "Dockerfile").read_text().lower()


def test_image_xpu_picks_the_p800_image_for_p800_hosts(tmp_path) -> None:
    from paddlefit.deploy.docker import choose_xpu_build
    from paddlefit.diagnose.xpu import XPUInfo

    p800 = _xpu_snapshot(xpus=[XPUInfo(index=0, model="P800")])
    b = choose_xpu_build(None, p800)
    assert (b.paddle, b.chip_list) == ("3.2.0", ["P800"]) and "xpu-p800" in (b.install or "")
    assert choose_xpu_build(None, None).paddle == "3.2.0"  # newest without a host to match


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        (["--xpu", "--paddle", "3.0.0"], "No published Paddle XPU image"),
        (["--xpu", "--cuda", "12.6"], "does not apply to a `--xpu` image"),
        (["--xpu", "--cpu"], "give one"),
        (["--xpu", "--fixed-shape-cnn"], "does not apply to a `--xpu` image"),
    ],
)
def test_image_xpu_bad_input_exits_2(tmp_path, args, msg) -> None:
    res = CliRunner().invoke(app, ["image", *args, "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and msg in res.output
    assert not (tmp_path / "o" / "Dockerfile").exists()


def test_image_for_an_unsupported_xpu_chip_says_so(tmp_path) -> None:
    from paddlefit.diagnose.xpu import XPUInfo

    snap = tmp_path / "k200.json"
    snap.write_text(json.dumps(_xpu_snapshot(xpus=[XPUInfo(index=0, model="K200")]).to_dict()))
    res = CliRunner().invoke(app, ["image", "--from-snapshot", str(snap), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "No published Paddle XPU image on K200" in res.output
    assert "not write a CUDA image" in res.output
