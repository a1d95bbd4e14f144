"""Rendering at a real terminal width: an 80-column table keeps every target name and value readable."""

import io

from rich.console import Console

from paddlefit.catalog.gpus import load_gpus
from paddlefit.estimate.timing import HostOverhead
from paddlefit.plan import PlanRequest, build_plan
from paddlefit.report.render import duration, flops, render_gpus, render_plan


def _render(fn, obj, width):
    buf = io.StringIO()
    fn(obj, Console(file=buf, width=width, color_system=None))
    return buf.getvalue()


def test_plan_table_at_80_columns_keeps_names_and_units():
    plan = build_plan(PlanRequest(model="lenet", batch_size=8, gpus=["A100-SXM4-40GB", "T4"], devices=2,
                                  dataset_size=1000, epochs=1))  # fmt: skip
    text = _render(render_plan, plan, 80)
    assert all(len(line) <= 80 for line in text.splitlines())
    for name in ("A100-SXM4-40GB", "T4", "cpu", "to train", "ms"):
        assert name in text
    assert "T4: specs facts-table" in text  # notes move below the table when narrow
    wide = _render(render_plan, plan, 200)
    assert "notes" in wide and "all-reduce" in wide


def test_gpu_table_at_80_columns():
    text = _render(render_gpus, load_gpus(), 80)
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "A100-SXM4-80GB" in text and "989.5" in text


def test_formatters_and_host_floor():
    assert (duration(0.00123), duration(0.5), duration(12.0), duration(7200)) == ("1.23 ms", "500 ms", "12.0 s",
                                                                                  "2.0 h")  # fmt: skip
    assert (flops(8.24e9), flops(2.0e6)) == ("8.24 GFLOPs", "2.00 MFLOPs")
    assert HostOverhead(op_s=1e-5, optimizer_s_per_tensor=1e-4).step_s(100, 10) == 3 * 100 * 1e-5 + 10 * 1e-4
