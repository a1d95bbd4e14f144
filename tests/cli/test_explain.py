"""``plan --explain GPU`` on every catalog row: `plan resnet18 ... --gpu L20 --explain L20` exited 1 with
``TypeError: unsupported format string passed to NoneType.__format__`` after the whole probe, because the title
formatted the MFU of a row timed at a slower unit's peak (None). One cheap plan (LeNet, every catalog GPU plus a user
row without tensor peaks) and each row's explain block rendered by the function the CLI calls."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from paddlefit.catalog.gpus import catalog_csv, get_gpu, load_gpus
from paddlefit.catalog.units import unit_label
from paddlefit.cli.render.tables import pct, peak_text, render_explain
from paddlefit.jobspec.spec import Precision
from paddlefit.plan import PlanRequest, build_plan
from paddlefit.plan.rows import effective_precision

BARE = {"tf32_tflops": None, "fp16_tflops": None, "bf16_tflops": None, "int8_tops": None, "fp8_tflops": None}


@pytest.fixture(scope="module")
def bare_catalog(tmp_path_factory):
    """A user catalog with `MyL20`: the L20 without tensor peaks (a user catalog's row), so its
    fp16 row is a lower bound with no MFU: the None that crashed the explain title."""
    f = tmp_path_factory.mktemp("catalog") / "mine.csv"
    f.write_text(catalog_csv([get_gpu("L20").model_copy(update={"name": "MyL20", "aliases": (), **BARE})]))
    return f


@pytest.mark.parametrize("precision", [Precision.FP32, Precision.FP16_O1])
def test_explain_renders_for_every_catalog_row(bare_catalog, precision):
    pool = load_gpus([bare_catalog])
    names = [g.name for g in pool]
    plan = build_plan(
        PlanRequest(model="lenet", batch_size=8, precision=precision, explain=names, catalog_files=[str(bare_catalog)])
    )
    assert sorted(plan.explain) == sorted(names)
    for g in pool:
        t = next(x for x in plan.targets if x.name == g.name)
        buf = io.StringIO()
        render_explain(plan, g.name, plan.explain[g.name], Console(file=buf, width=200, color_system=None))
        text = buf.getvalue()
        # the title names the unit the precision runs on there and its (non-empty) dense peak, the catalog's
        assert (t.peak_flops, t.peak_unit) == g.peak_flops(effective_precision(g, precision).value), g.name
        assert t.peak_unit and t.peak_flops > 0, g.name
        assert f"{t.peak_unit} {t.peak_flops / 1e12:,.4g} TFLOPS peak" in text, (g.name, text[:300])
        assert f"predicted top operators on {g.name}: step " in text and "None" not in text, g.name
        assert f"MFU {pct(t.predicted_mfu)}" in text
    bare = next(x for x in plan.targets if x.name == "MyL20")
    if precision is Precision.FP16_O1:  # the crash: a lower-bound row has no MFU
        assert bare.speed_lower_bound and bare.predicted_mfu is None
        assert (bare.peak_unit, bare.peak_flops) == ("fp32", 59.35e12)
    shipped = next(x for x in plan.targets if x.name == "L20")
    assert not shipped.speed_lower_bound and shipped.predicted_mfu is not None


def test_the_targets_peak_is_the_catalogs_and_says_its_unit():
    """``Target.peak_unit``/``peak_flops`` are the catalog's (``GPU.peak_flops``) for the precision Paddle runs; the
    CPU row has none; the formatters print ``-`` for what is unknown."""
    plan = build_plan(PlanRequest(model="lenet", batch_size=8, precision=Precision.BF16_O1, gpus=["T4", "L20"]))
    rows = {t.name: t for t in plan.targets}
    assert (rows["L20"].peak_unit, rows["L20"].peak_flops) == ("bf16 tensor", 119.5e12)
    assert (rows["T4"].peak_unit, rows["T4"].peak_flops) == ("fp32", 8.1e12)  # bf16 AMP blocked on CC 7.5: fp32
    assert rows["cpu"].peak_unit is None and rows["cpu"].peak_flops is None
    assert unit_label("half", "bf16-o1") == "bf16 tensor"
    assert (pct(None), pct(float("nan")), pct(0.354)) == ("-", "-", "35%")
    assert (peak_text(None, 1e12), peak_text("fp32", None), peak_text("fp16 tensor", 119.5e12)) == (
        "-",
        "-",
        "fp16 tensor 119.5 TFLOPS",
    )


def test_the_explain_table_names_units_as_plans_do():
    from paddlefit.cli.render.tables import shown_unit

    assert shown_unit("half", "fp16-o1") == "fp16 tensor" and shown_unit("tf32", "fp32") == "tf32 tensor"
    assert shown_unit("fp32", "fp32") == "fp32" and shown_unit("memory", "fp16-o1") == "memory"
    assert shown_unit("dwconv", "bf16-o2") == "dwconv"
