import json
import math

import pytest
from planmemo import memoised_probe

from paddlefit.catalog.gpus import get_gpu, load_gpus
from paddlefit.errors import ModelError
from paddlefit.estimate.collectives import CALL_OVERHEAD_S, RING_EFFICIENCY, train_gradient_allreduce
from paddlefit.estimate.model_states import model_state_bytes
from paddlefit.jobspec.inputs import parse_input_spec
from paddlefit.jobspec.spec import OptimizerName, Precision
from paddlefit.models.build import param_info
from paddlefit.plan import PlanRequest, build_plan
from paddlefit.units import GIB, MIB


@pytest.fixture(scope="module")
def lenet_plan():
    return build_plan(PlanRequest(model="lenet", batch_size=64, devices=4, dataset_size=60000, epochs=2))


def test_plan_document_shape(lenet_plan):
    d = json.loads(json.dumps(lenet_plan.to_dict(), default=str))
    assert set(d["model"]) >= {
        "name",
        "params",
        "trainable_params",
        "forward_flops_per_sample",
        "train_flops_per_sample",
    }
    assert set(d["memory"]) >= {
        "method",
        "weights_bytes",
        "grads_bytes",
        "optimizer_bytes",
        "activation_bytes_per_sample",
        "fixed_bytes",
    }
    names = [t["name"] for t in d["targets"]]
    assert "cpu" in names and "A100-SXM4-40GB" in names and len(names) == len(load_gpus()) + 1
    assert d["recommendation"]["target"] == d["targets"][0]["name"]
    assert d["memory"]["method"] == "cpu-probe"
    assert d["model"]["params"] == 61610


def test_targets_consistent(lenet_plan):
    p = lenet_plan
    for t in p.targets:
        if t.kind == "gpu":
            assert not t.calibrated
            assert t.samples_per_s == pytest.approx(4 * 64 / t.step_time_s)
            assert t.time_to_train_s == pytest.approx(math.ceil(60000 / 256) * 2 * t.step_time_s)
        else:
            assert t.calibrated and t.time_to_train_s == pytest.approx(math.ceil(60000 / 64) * 2 * t.step_time_s)
    a100 = next(t for t in p.targets if t.name == "A100-SXM4-40GB")
    grads = p.memory["grads_bytes"]
    # one fused bucket of 241 KiB: latency-bound, NCCL's LL protocol (base 6.6 us + 2(n-1) x 0.6 us over NVLink) at
    # Ampere's LL ceiling 87.7 GB/s bus bandwidth, + the call's overhead
    assert a100.allreduce_s == train_gradient_allreduce(get_gpu("A100-SXM4-40GB"), grads, 4).seconds
    assert a100.allreduce_s == pytest.approx(
        CALL_OVERHEAD_S + (6.6 + 6 * 0.6) * 1e-6 + 2 * 3 / 4 * grads / 87.7e9, rel=1e-12
    )
    # a 4-GPU ring of bridged PCIe cards crosses PCIe, not the 2-GPU NVLink bridge: PCIe hops (1.0 us), LL at half
    # the ring's PCIe ceiling
    a100p = next(t for t in p.targets if t.name == "A100-PCIe-40GB")
    assert a100p.allreduce_s == pytest.approx(
        CALL_OVERHEAD_S + (6.6 + 6 * 1.0) * 1e-6 + 2 * 3 / 4 * grads / (0.5 * RING_EFFICIENCY * 31.5e9), rel=1e-12
    )
    # the step is paddlefit train's (oom_backoff: true): the whole all-reduce after the backward, as `cost` prices it
    for t in (a100, a100p):
        assert t.allreduce_exposed_s == t.allreduce_s == t.time_breakdown["allreduce_exposed"]["seconds"]
        assert any("after the backward, as paddlefit train runs it" in n for n in t.notes)
    # every GPU step is at least the host floor measured on this machine
    floor = p.assumptions["host_floor_s"]
    assert floor > 0 and all(t.step_time_s >= floor for t in p.targets if t.kind == "gpu")
    fits_sorted = [t.fits for t in p.targets]
    assert fits_sorted == sorted(fits_sorted, reverse=True)


def test_max_batch_is_the_boundary():
    """With the memory limit set halfway between the T4 peaks at batch 20 and 21, the largest batch is 20: it fits,
    and 21 does not (the limit was 15 MB here before, max batch 0, and the check compared False with False)."""

    def t4_row(batch: int, margin: float = 0.9):
        p = build_plan(
            PlanRequest(
                model="mobilenet_v3_small",
                batch_size=batch,
                safety_margin=margin,
                inputs=[parse_input_spec("float32[3,64,64]")],
                gpus=["T4"],
            )
        )
        return next(t for t in p.targets if t.name == "T4"), p.assumptions["cuda_context_bytes"]

    with memoised_probe():  # one probe per batch: the margin only changes what comes after it
        (at20, ctx), (at21, _) = t4_row(20), t4_row(21)
        assert at21.peak_bytes > at20.peak_bytes
        margin = (at20.peak_bytes + at21.peak_bytes) / 2 / (get_gpu("T4").capacity_bytes - ctx)
        row, _ = t4_row(20, margin)
        assert row.max_batch_size == 20 and row.fits and row.peak_bytes == at20.peak_bytes
        assert not t4_row(21, margin)[0].fits


def test_amp_o2_halves_weights_and_activations():
    fp32 = build_plan(PlanRequest(model="lenet", batch_size=32, gpus=["A100-SXM4-40GB"]))
    o2 = build_plan(PlanRequest(model="lenet", batch_size=32, gpus=["A100-SXM4-40GB"], precision=Precision.BF16_O2))
    assert o2.memory["weights_bytes"] * 2 == fp32.memory["weights_bytes"]
    assert o2.memory["activation_bytes_per_sample"] * 2 == pytest.approx(fp32.memory["activation_bytes_per_sample"])
    # Paddle disables bf16 AMP below CC 8.0: a T4 row is planned exactly as fp32
    bf = build_plan(PlanRequest(model="lenet", batch_size=8, gpus=["T4"], precision=Precision.BF16_O1))
    f32 = build_plan(PlanRequest(model="lenet", batch_size=8, gpus=["T4"]))
    t4_bf, t4_32 = (next(t for t in p.targets if t.name == "T4") for p in (bf, f32))
    assert any("Paddle runs fp32" in n for n in t4_bf.notes)
    assert t4_bf.peak_bytes == pytest.approx(t4_32.peak_bytes, rel=0.02)
    assert t4_bf.max_batch_size == pytest.approx(t4_32.max_batch_size, rel=0.05)


def test_model_states_on_gpu_row_use_zero_16_bytes(lenet_plan):
    import paddle

    from paddlefit.models import resolve_model

    with paddle.LazyGuard():
        info = param_info(resolve_model("lenet").factory())
    st = model_state_bytes(info, OptimizerName.ADAM, Precision.FP16_O2)
    assert st.total_bytes - 4 - 8 * info.trainable_tensors == 16 * info.params


@pytest.mark.slow
def test_huge_model_uses_lazyguard_analytic_path():
    p = build_plan(PlanRequest(model="gpt2-xl", batch_size=4, gpus=["H100-SXM"]))
    assert p.memory["method"] == "analytic-transformer"
    assert p.model["params"] > 1.5e9
    assert any("too large to probe" in n for n in p.memory["notes"])
    cpu = next(t for t in p.targets if t.name == "cpu")
    assert math.isnan(cpu.step_time_s) and not cpu.calibrated


def test_model_rejecting_inputs_is_a_model_error():
    with pytest.raises(ModelError, match=r"float32\[5,5\]"):
        build_plan(PlanRequest(model="resnet18", batch_size=2, inputs=[parse_input_spec("float32[5,5]")]))


def test_fp32_gpu_peak_is_cpu_peak_plus_conv_workspace(lenet_plan):
    cpu = next(t for t in lenet_plan.targets if t.name == "cpu")
    for t in lenet_plan.targets:
        if t.kind == "gpu":
            assert t.peak_bytes == pytest.approx(cpu.peak_bytes + 512 * MIB, abs=2)
    m = lenet_plan.memory  # the breakdown adds up to the peak
    total = m["weights_bytes"] + m["grads_bytes"] + m["optimizer_bytes"] + m["activation_bytes_per_sample"] * 64
    assert total + m["fixed_bytes"] == pytest.approx(cpu.peak_bytes + 512 * MIB, abs=2)


def test_duplicate_gpu_names_give_one_row():
    p = build_plan(PlanRequest(model="lenet", batch_size=4, gpus=["T4", "t4", "tesla-t4"]))
    assert [t.name for t in p.targets].count("T4") == 1


def test_probe_refuses_inputs_that_would_exhaust_ram(monkeypatch):
    import collections

    import psutil

    real = psutil.virtual_memory()
    fake = collections.namedtuple("svmem", ["total", "available"])(real.total, 1024)  # 1 KiB free
    monkeypatch.setattr(psutil, "virtual_memory", lambda: fake)
    with pytest.raises(ModelError, match="too large to probe on this machine"):
        build_plan(PlanRequest(model="lenet", batch_size=4, gpus=["T4"]))


def test_calibration_device_alias_applies_and_unknown_device_is_an_error(tmp_path):
    from paddlefit.errors import CatalogError

    row = {
        "model": "lenet",
        "batch_size": 4,
        "precision": "fp32",
        "peak_bytes": 2e6,
        "predicted_peak_bytes": 1e6,
        "step_time_s": 0.01,
        "train_flops_per_sample": 2e6,
    }
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"device": "a100", "rows": [row]}))
    base = build_plan(PlanRequest(model="lenet", batch_size=4, gpus=["A100-SXM4-40GB"]))
    cal = build_plan(PlanRequest(model="lenet", batch_size=4, gpus=["A100-SXM4-40GB"], calibration_files=[str(f)]))
    b, c = (next(t for t in p.targets if t.kind == "gpu") for p in (base, cal))
    assert c.peak_bytes == pytest.approx(2 * b.peak_bytes, rel=1e-6)  # the alias found its catalog row
    f.write_text(json.dumps({"device": "NotAGPU", "rows": [row]}))
    with pytest.raises(CatalogError, match="'NotAGPU' is not a GPU of the catalog"):
        build_plan(PlanRequest(model="lenet", batch_size=4, calibration_files=[str(f)]))


@pytest.mark.parametrize(
    "kw,needle",
    [
        ({"batch_size": 0}, "`--batch-size` must be 1..10000000 (got 0)"),
        ({"devices": 0}, "`--devices` must be >= 1 (got 0)"),
        ({"safety_margin": 1.5}, "`--safety-margin` must be in (0, 1]"),
        ({"dataset_size": 10}, "go together"),
        ({"dataset_size": 10, "epochs": float("inf")}, "a finite number > 0"),
        ({"max_probe_bytes": 0}, "`--max-probe-gib` must be a finite number > 0"),
        ({"probe_memory_bytes": 0}, "`--probe-memory-gib` must be a finite number > 0 and at most 1,048,576 (got 0)"),
        ({"probe_memory_bytes": 10**30}, "`--probe-memory-gib` must be a finite number > 0 and at most 1,048,576"),
        ({"explain": [" "]}, "`--explain` is empty"),
        ({"explain": ["H900"]}, "`--explain H900`: Unknown GPU"),
        ({"explain": ["L4"], "gpus": ["T4"]}, "is not among the planned GPUs (`--gpu T4`); add `--gpu L4`"),
    ],
)
def test_plan_request_checks_itself_with_the_cli_messages(kw, needle):
    from paddlefit.errors import PaddlefitError

    with pytest.raises(PaddlefitError) as exc:
        PlanRequest(model="lenet", **kw)
    assert needle in str(exc.value)
    assert PlanRequest(model="lenet", explain=["t4"], gpus=["T4"]).explain == ["t4"]  # an alias of a planned GPU


def test_the_plan_package_exports_the_planner_and_the_rows_helpers_behave():
    """Callers import each name from the module that defines it (the split's re-exports are gone); the package
    keeps its small public API."""
    import paddlefit.plan as plan_pkg
    from paddlefit.plan import planner, request, rows

    assert plan_pkg.PlanRequest is request.PlanRequest and plan_pkg.build_plan is planner.build_plan
    assert plan_pkg.Plan is request.Plan and planner.__all__ == ["build_plan"]
    assert rows.CUDA_CONTEXT_BYTES > 0 and request.DEFAULT_SAFETY_MARGIN == 0.9
    assert rows.effective_precision(get_gpu("T4"), Precision.BF16_O1) is Precision.FP32
    assert rows.max_batch([(1.0, 2.0), (5.0, 0.0)], 11.0) == 5 and rows.max_batch([(12.0, 0.0)], 11.0) == 0


def bare_l20_catalog(tmp_path):
    """A user catalog with `MyL20`: the shipped L20 without its tensor-core peaks (a user
    catalog's row)."""
    from paddlefit.catalog.gpus import catalog_csv

    bare = get_gpu("L20").model_copy(
        update={
            "name": "MyL20",
            "aliases": (),
            "tf32_tflops": None,
            "fp16_tflops": None,
            "bf16_tflops": None,
            "int8_tops": None,
            "fp8_tflops": None,
        }
    )
    f = tmp_path / "mine.csv"
    f.write_text(catalog_csv([bare]))
    return f


def test_a_row_timed_below_its_cards_peak_is_a_lower_bound_and_not_ranked(tmp_path):
    """A new user: the L20 row (no fp16 peak in the catalog then, timed at the FP32 peak) ranked below the RTX 4090
    with an MFU against the FP32 peak. Such a row has no MFU, says `speed_lower_bound`, and is not recommended while
    another GPU fits; alone, it still is. (The shipped L20 has its peaks now: a user row without them stands in.)"""
    from paddlefit.plan.rows import recommend

    req = PlanRequest(
        model="lenet",
        batch_size=8,
        precision=Precision.FP16_O1,
        gpus=["MyL20", "RTX-4090"],
        catalog_files=[str(bare_l20_catalog(tmp_path))],
    )
    d = build_plan(req).to_dict()
    rows = {t["name"]: t for t in d["targets"] if t["kind"] == "gpu"}
    assert rows["MyL20"]["speed_lower_bound"] is True and rows["MyL20"]["predicted_mfu"] is None
    assert rows["RTX-4090"]["speed_lower_bound"] is False and rows["RTX-4090"]["predicted_mfu"] > 0
    assert d["recommendation"]["target"] == "RTX-4090"
    assert "not ranked: MyL20 (the catalog lacks the peak" in d["recommendation"]["reason"]
    from paddlefit.plan.request import Target

    l20 = Target(**{**rows["MyL20"], "samples_per_s": 1e9})  # even "faster" on paper, it is not ranked
    rtx = Target(**rows["RTX-4090"])
    rec = recommend([l20, rtx], 8)
    assert rec["target"] == "RTX-4090" and "not ranked: MyL20" in rec["reason"]
    assert recommend([l20], 8)["target"] == "MyL20"


def _gpu_row(name: str, cap_gib: float, sps: float):
    from paddlefit.plan.request import Target

    return Target(
        name=name,
        kind="gpu",
        fits=True,
        peak_bytes=GIB,
        capacity_bytes=int(cap_gib * GIB),
        max_batch_size=64,
        step_time_s=64 / sps,
        samples_per_s=sps,
        calibrated=False,
        notes=[],
        bound="host",
        calibration="published-fit",
    )


def test_gpus_within_one_percent_of_the_fastest_tie_and_the_tie_goes_to_the_smallest_card():
    """Host-bound rows (the A100 and the T4 both at the host floor) differ by less than the model resolves,
    and `plan` recommended the fastest by a hair with no word why. Within 1% the tie goes to the smallest card that
    fits, then the faster, and the recommendation says so in the planners' words."""
    from paddlefit.plan.rows import recommend

    a100, t4, l4 = _gpu_row("A100-SXM4-80GB", 80, 1000.0), _gpu_row("T4", 16, 995.0), _gpu_row("L4", 24, 999.0)
    rec = recommend([a100, l4, t4], 64)
    assert rec["target"] == "T4" and rec["smallest_fit"] == "T4"
    assert rec["tie_break"] == (
        "3 GPUs within 1% of the fastest samples/s tie (below the model's resolution); the "
        "tie goes to the smallest card that fits (the least memory), then the faster: T4 "
        "(16 GiB) over A100-SXM4-80GB (80 GiB, 0.5% faster)"
    )
    assert rec["reason"].startswith("fastest GPU that fits, within 1% (tie-break below): 995 samples/s")
    # a usable capacity is said as the table prints it, never rounded up (the L40S's 44.7 GiB read 45 here)
    l40s = _gpu_row("L40S", 45776 / 1024, 999.0)
    tie = recommend([a100, l40s], 64)["tie_break"]
    assert tie.endswith("L40S (44.7 GiB) over A100-SXM4-80GB (80 GiB, 0.1% faster)"), tie
    slow_t4 = _gpu_row("T4", 16, 980.0)  # 2% slower: no tie, the fastest
    rec = recommend([a100, slow_t4], 64)
    assert rec["target"] == "A100-SXM4-80GB" and rec["tie_break"] == "" and rec["smallest_fit"] == "T4"
    assert rec["reason"].startswith("fastest GPU that fits: 1,000 samples/s")


def test_the_plan_recommends_and_lists_first_the_card_its_tie_break_chose(lenet_plan):
    """LeNet at batch 64 is host-bound on every GPU: the recommended row is the smallest of those within 1% of the
    fastest, listed first, and `plan` prints the tie-break."""
    import io

    from rich.console import Console

    from paddlefit.cli.render.tables import render_plan

    gpus = [t for t in lenet_plan.targets if t.kind == "gpu" and t.fits]
    fastest = max(t.samples_per_s for t in gpus)
    ties = [t for t in gpus if t.samples_per_s * 1.01 >= fastest]
    assert len(ties) >= 2
    want = min(ties, key=lambda t: (t.capacity_bytes, -t.samples_per_s))
    assert lenet_plan.recommendation["target"] == want.name == lenet_plan.targets[0].name
    buf = io.StringIO()
    render_plan(lenet_plan, Console(file=buf, width=200, color_system=None))
    text = buf.getvalue()
    assert f"tie-break: {len(ties)} GPUs within 1% of the fastest samples/s tie" in text, text[-2000:]


def test_a_cpu_time_fit_that_falls_with_the_batch_is_not_extrapolated():
    """Under load the probe timed batch 3 faster than batch 2; the fit's last segment fell with the batch
    and reached zero at the run's batch: the planner floored the CPU step at 1e-9 s (`plan`'s CPU row said
    64,000,000,000 samples/s, `train` printed `step 0.0 ms`). Such a fit is replaced by the largest probed batch's
    time in proportion to the batch (an upper bound), with a note; a fit that rises is used as it is."""
    from paddlefit.estimate.probe_result import ProbeResult, StepMeasurement, StepTimeFit
    from paddlefit.plan.measure import cpu_time_line
    from paddlefit.plan.rows import cpu_step_s

    def probe(times: list[float], fixed: float, slope: float) -> ProbeResult:
        ms = [StepMeasurement(b, {"forward": 1}, 0, t) for b, t in zip((1, 2, 3), times, strict=True)]
        return ProbeResult(measurements=ms, fits={}, time_fit=StepTimeFit(fixed, slope))

    loaded = probe([0.20, 0.50, 0.30], 0.9, -0.2)  # the last segment: 0.5 s at 2, 0.3 s at 3
    line, why = cpu_time_line(loaded)
    assert line == pytest.approx((0.0, 0.1)) and "fell with the batch" in why and "batch 3's 300 ms" in why
    assert cpu_step_s(line, 64) == pytest.approx(6.4) and 64 / cpu_step_s(line, 64) == pytest.approx(10.0)
    assert cpu_step_s((0.9, -0.2), 64) != cpu_step_s((0.9, -0.2), 64)  # NaN, not 1e-9 s
    idle = probe([0.2, 0.3, 0.4], 0.1, 0.1)
    assert cpu_time_line(idle) == ((0.1, 0.1), None) and cpu_step_s((0.1, 0.1), 64) == pytest.approx(6.5)


def test_a_cpu_row_measured_on_a_busy_machine_says_so_and_gives_no_thread_advice(monkeypatch):
    """A new user: the same digits job's CPU prediction moved 4x between two plans minutes apart on a loaded
    machine, and the `cpu_threads` advice with it, with nothing saying so. Under a load average above the core count
    the CPU row says it was measured while busy and gives no `cpu_threads` advice."""
    from paddlefit.plan import rows

    monkeypatch.setattr(rows.os, "getloadavg", lambda: (9.0, 8.0, 7.0))
    assert rows.machine_busy() == f"load average 9.0 on {rows.os.cpu_count()} cores"
    cpu = next(t for t in build_plan(PlanRequest(model="lenet", batch_size=8, gpus=["T4"])).targets if t.kind == "cpu")
    assert any(n.startswith("measured while the machine was busy (load average 9.0") for n in cpu.notes), cpu.notes
    assert not any("set `cpu_threads:" in n for n in cpu.notes)
    monkeypatch.setattr(rows.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert rows.machine_busy() == ""


def test_the_depthwise_prior_note_appears_where_explain_says_the_prior_times_the_kernels():
    """A new user's finding: every plan with depthwise convolutions said "depthwise conv efficiency not fitted" while
    `--explain` gave their kernels the source `kernels` (memory-bound: timed by the kernel-fitted bandwidth). The note
    now appears exactly when the depthwise kernels are compute-bound, where `--explain` names the prior."""
    from paddlefit.jobspec.inputs import parse_input_spec

    said = "depthwise conv compute-bound at an efficiency no published run constrains (a prior)"
    for k, compute in ((3, False), (7, True)):
        p = build_plan(
            PlanRequest(
                model="tinymodels:depthwise",
                model_args={"kernel": k, "frozen": compute},
                batch_size=64,
                inputs=[parse_input_spec("float32[64,56,56]")],
                gpus=["T4"],
                explain=["T4"],
                probe_budget_s=1.0,
                use_runs=False,
                time_threads=False,
            )
        )
        (t4,) = [t for t in p.targets if t.name == "T4"]
        assert (t4.time_breakdown["dwconv"]["bound"] == "compute") is compute and (said in t4.notes) is compute
        dw = [g for g in p.explain["T4"] if g["cls"] == "dwconv"]
        assert dw and all(g["source"] == ("prior" if g["bound"] == "compute" else "kernels") for g in dw)
        assert any(g["source"] == "prior" for g in dw) is compute


def test_runs_passed_to_build_plan_correct_its_gpu_rows_without_the_registry(monkeypatch) -> None:
    """Runs calibration takes the runs as an argument (the planner reads no registry when given them): a T4 row
    corrected by two runs of the model, the CPU row not; ``use_runs`` off ignores them."""
    from paddlefit.plan import runs_calibration
    from paddlefit.plan.runs_calibration import DeviceRuns

    monkeypatch.setattr(runs_calibration, "load_device_runs", lambda device: pytest.fail("registry read"))
    runs = {"T4": DeviceRuns(({"id": 7, "model": "lenet", "predicted_step_s": 0.01, "measured_step_s": 0.02},))}
    p = build_plan(PlanRequest(model="lenet", batch_size=8, gpus=["T4"]), runs=runs)
    t4 = next(t for t in p.targets if t.name == "T4")
    cpu = next(t for t in p.targets if t.kind == "cpu")
    assert t4.calibration == "runs (n=1)" and t4.runs_calibration["factor"] == pytest.approx(2.0)
    assert t4.step_time_s == pytest.approx(2 * t4.runs_calibration["uncalibrated_step_s"])
    assert cpu.runs_calibration is None
    off = build_plan(PlanRequest(model="lenet", batch_size=8, gpus=["T4"], use_runs=False), runs=runs)
    assert next(t for t in off.targets if t.name == "T4").runs_calibration is None


def test_an_l20_plans_fp16_on_its_tensor_peak_and_outruns_an_a10(tmp_path):
    """The L20 had no tensor peaks, so its fp16 rows were timed on its FP32 units and an L20 ranked below an
    A10 for ERNIE in fp16. With its FP16 peak (119.5 dense, verl/LLM-Prof) it plans on the FP16 tensor cores and,
    with 864 vs 600 GB/s and a near-equal peak (119.5 vs 125), outruns the A10 (analytic transformer trace: no
    probe)."""
    req = PlanRequest(
        model="ernie-3.0-medium-zh",
        batch_size=32,
        precision=Precision.FP16_O1,
        gpus=["L20", "A10", "MyL20"],
        max_probe_bytes=1,
        catalog_files=[str(bare_l20_catalog(tmp_path))],
    )
    plan = build_plan(req)
    assert plan.memory["method"] == "analytic-transformer"
    rows = {t.name: t for t in plan.targets}
    l20, a10, bare = rows["L20"], rows["A10"], rows["MyL20"]
    assert (l20.peak_unit, l20.peak_flops) == ("fp16 tensor", 119.5e12)
    assert not l20.speed_lower_bound and l20.predicted_mfu is not None and l20.bound == "compute"
    assert l20.samples_per_s > a10.samples_per_s > bare.samples_per_s  # the peak-less row: below the A10
    assert bare.speed_lower_bound and (bare.peak_unit, bare.peak_flops) == ("fp32", 59.35e12)
    ranked = [t.name for t in plan.targets if t.kind == "gpu"]
    assert ranked.index("L20") < ranked.index("A10")
