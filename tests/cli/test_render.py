"""Rendering at a real terminal width: an 80-column table keeps every target name and value readable."""

import io
import re

import pytest
from rich.console import Console

from paddlefit.catalog.gpus import load_gpus
from paddlefit.cli.render.tables import flops, render_gpus, render_plan
from paddlefit.estimate.timing import HostOverhead
from paddlefit.plan import PlanRequest, build_plan
from paddlefit.units import GIB, duration


def _render(fn, obj, width):
    buf = io.StringIO()
    fn(obj, Console(file=buf, width=width, color_system=None))
    return buf.getvalue()


def test_plan_table_at_80_columns_keeps_names_and_units():
    plan = build_plan(
        PlanRequest(model="lenet", batch_size=8, gpus=["A100-SXM4-40GB", "T4"], devices=2, dataset_size=1000, epochs=1)
    )
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
    assert (duration(0.00123), duration(0.5), duration(12.0), duration(7200)) == (
        "1.23 ms",
        "500 ms",
        "12.0 s",
        "2.0 h",
    )
    assert (flops(8.24e9), flops(2.0e6)) == ("8.24 GFLOPs", "2.00 MFLOPs")
    assert HostOverhead(op_s=1e-5, optimizer_s_per_tensor=1e-4).step_s(100, 10) == 3 * 100 * 1e-5 + 10 * 1e-4


def _cells(text, header):
    """The cells (number and unit) of the right-justified column ``header`` of a rich table rendered as text."""
    lines = text.splitlines()
    word = re.compile(rf"(^|[\s│┃]){re.escape(header)}([\s│┃]|$)")
    head = next(
        i
        for i, line in enumerate(lines)  # the table's header row (a note above may say "step" too)
        if ("target" in line or "instance" in line) and word.search(line)
    )
    end = lines[head].index(header) + len(header)
    out = []
    for line in lines[head + 2 :]:
        if not line.strip() or line.lstrip()[0] in "└─━":
            break
        cell = " ".join(line[:end].replace("│", " ").split()[-2:])
        if re.fullmatch(r"<?[\d,.]+ (ms|s|h)", cell):  # a wrapped row's second line has none
            out.append(cell)
    return out


def test_cost_time_column_has_one_unit_and_the_footer_restates_the_row():
    """`790.4 s` above `8.3 h` in one column, and `cheapest ... in 8.4 h` beside a row saying 8.3 h."""
    from paddlefit.catalog.price_csv import parse_price_csv
    from paddlefit.cli.render.cost import render_cost
    from paddlefit.cost.instances import InterruptionRate, build_cost
    from paddlefit.plan.request import Plan, Target

    def target(name, step):
        return Target(
            name=name,
            kind="gpu",
            fits=True,
            peak_bytes=1e9,
            capacity_bytes=16 * GIB,
            max_batch_size=64,
            step_time_s=step,
            samples_per_s=32 / step,
            calibrated=False,
            grads_bytes=4e8,
            checkpoint_bytes=1.2e9,
        )

    plan = Plan(
        model={"name": "m"},
        batch_size=32,
        precision="fp32",
        optimizer="adam",
        devices=1,
        inputs=[],
        memory={},
        targets=[target("T4", 1.0), target("A100-SXM4-40GB", 0.03)],
        recommendation={},
        assumptions={},
    )
    header = (
        "cloud,instance_type,accelerator,accelerator_count,vcpus,memory_gib,price_usd_per_hour,"
        "spot_usd_per_hour,region,gpu\n"
    )
    prices = parse_price_csv(
        header + "c,t4x1,T4,1,4,16,0.05,0.02,r,\nc,a100x1,A100,1,12,85,3.0,1.2,r,A100-SXM4-40GB\n", "test.csv"
    )
    rep = build_cost(
        plan, prices, load_gpus(), dataset_size=32 * 30_000, epochs=1, rate=InterruptionRate(0.2, "test"), use_spot=True
    )
    rep.assumptions.update(
        {
            "job": "m",
            "ranking": "spot",
            "step_time": "",
            "memory": "",
            "global_batch": "",
            "prices": "",
            "interruption_rate_basis": "",
            "interruptions_per_hour": 0.2,
            "mean_time_between_interruptions_h": 5.0,
            "disk_bytes_per_s": 1e8,
            "disk_basis": "",
            "restart_s": 600,
            "restart_basis": "",
            "checkpoint_interval": "",
            "spot_model": "",
            "not_included": "",
        }
    )
    text = _render(render_cost, rep, 160)
    times = _cells(text, "time")
    assert len(times) == 2 and len({t.split()[-1] for t in times}) == 1, times  # 15 min and 8.3 h: one unit
    times += _cells(text, "spot time")  # the ranking's (spot) hours: the footer's figure, in the same unit
    assert len(times) == 4 and len({t.split()[-1] for t in times}) == 1, times  # 15 min and 8.3 h: one unit
    cheap = next(r for r in rep.rows if r.cheapest)
    said = re.search(r"cheapest: \S+ \S+ in (\S+ \S+)", text).group(1)
    row = next(line for line in text.splitlines() if "t4x1" in line)
    assert said in row and float(said.split()[0]) == pytest.approx(cheap.cost_hours, rel=0.01)


def test_plan_step_and_time_to_train_columns_have_one_unit_each():
    plan = build_plan(
        PlanRequest(
            model="lenet", batch_size=8, gpus=["A100-SXM4-40GB", "T4"], devices=1, dataset_size=60_000_000, epochs=1
        )
    )
    assert max(t.time_to_train_s for t in plan.targets) > 3600 > min(t.time_to_train_s for t in plan.targets)
    text = _render(render_plan, plan, 200)
    for col in ("step", "to train"):
        cells = _cells(text, col)
        assert len(cells) == 3 and len({c.split()[-1] for c in cells}) == 1, (col, cells)
    # the CPU row's capacity is this machine's RAM as its note says it (23.5 GiB here, which `:.0f` printed as 24)
    cpu = next(t for t in plan.targets if t.kind == "cpu")
    ram = re.search(r"([\d.]+) GiB RAM", " ".join(cpu.notes)).group(1)
    assert re.search(rf"\b[\d.]+/{re.escape(ram)}\s", text), (ram, text)


def test_a_capacity_is_never_printed_above_what_the_device_has():
    from paddlefit.units import GIB, MIB, capacity_gib

    assert [capacity_gib(b) for b in (23.5 * GIB, 23.99 * GIB, 16 * GIB, 22888 * MIB, 0.95 * GIB)] == [
        "23.5",
        "23.9",
        "16",
        "22.3",
        "0.9",
    ]


def test_a_duration_column_takes_its_unit_from_its_largest_value():
    from paddlefit.units import duration_column

    assert duration_column([790.4, 1425.1, 8.3 * 3600, 1.5 * 3600]) == ["0.22 h", "0.40 h", "8.3 h", "1.5 h"]
    assert duration_column([0.026, 0.222, None, 0.00039]) == ["26 ms", "222 ms", "-", "0.39 ms"]
    assert duration_column([0.5, 12.0]) == ["0.50 s", "12 s"]
    assert duration_column([0.001, 36000.0, float("inf")]) == ["<0.0001 h", "10 h", "inf h"]
    # two significant digits in any unit: GPU steps in a column of seconds (a CPU row's 72 s) stay apart
    assert duration_column([0.0056, 0.0151, 0.13, 72.0]) == ["0.0056 s", "0.015 s", "0.13 s", "72 s"]
