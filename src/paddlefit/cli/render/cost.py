"""Render ``paddlefit cost``: the ranked instance table, the lines under it, and the assumptions. Pure
formatting: the figures come from :func:`paddlefit.cost.instances.build_cost`."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from paddlefit import options
from paddlefit.catalog.currency import USD, Currency
from paddlefit.cli.render.tables import print_min_width, table_width
from paddlefit.cost.instances import SPEC_CADENCE
from paddlefit.units import MIB, SECONDS_PER_HOUR, column_unit

#: Columns of the cost table without ``--wide``, dropped in this order while the table is wider than the console:
#: the checkpoint interval, on-demand hours, spot hours (the ``cheapest:``/``fastest:`` lines restate their row's
#: time; ``--json`` has every figure).
COST_DROPPABLE = ("ckpt", "time", "spot time")


def _cost_table(title: str, rows: list[dict[str, str]], columns: list[str]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, title=title, padding=(0, 1), pad_edge=False)
    for c in columns:
        text = c in ("instance", "GPUs")  # wrap at the space, then fold; numbers are never cut
        table.add_column(c, justify="left" if text or c in ("", "note") else "right", no_wrap=not text, overflow="fold")
    for r in rows:
        table.add_row(*(r[c] for c in columns))
    return table


def _cost_rows(
    fit: list[Any], unit: Any, ckpt_unit: Any, footnotes: list[str], money: Currency = USD
) -> list[dict[str, str]]:
    """The cost table's cells per row, by column name; each row's notes are numbered into ``footnotes``."""
    rows = []
    for r in fit:
        refs = []
        for n in r.notes:
            if n not in footnotes:
                footnotes.append(n)
            refs.append(str(footnotes.index(n) + 1))
        rows.append(
            {
                "": ("*" if r.cheapest else "") + ("^" if r.fastest else "") + ("P" if r.pareto else ""),
                "instance": escape(f"{r.cloud} {r.instance_type}"),
                "GPUs": escape(f"{r.gpu_count}x {r.gpu}"),
                "time": unit.fmt(r.hours * SECONDS_PER_HOUR),
                "on-demand": money.fmt(r.on_demand_usd),
                "spot": money.fmt(r.spot_expected_usd),
                "ckpt": ckpt_unit.fmt(r.checkpoint_interval_s),
                "spot time": unit.fmt(None if r.spot_hours is None else r.spot_hours * SECONDS_PER_HOUR),
                "note": ",".join(refs),
            }
        )
    return rows


def _cost_assumption_lines(a: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, text) of each assumption printed under the cost table, from ``CostReport.assumptions``."""
    gm = a.get("gpu_model_params") or {}
    gens = "".join(
        f"; {g}: " + ", ".join(f"{k} {v:.3g}" for k, v in o.items())
        for g, o in (a.get("gpu_model_params_by_generation") or {}).items()
    )
    lines = [
        ("step time", a["step_time"]),
        (
            "GPU model",
            ", ".join(f"{k} {v:.3g}" for k, v in gm.items()) + gens + " (efficiencies as fractions of "
            "peak, fitted on published runs: bench/gpu_fit.py; `paddlefit calibrate` on a GPU replaces "
            "them)",
        ),
        ("memory", a["memory"]),
        ("global batch", a["global_batch"]),
        ("prices", a["prices"]),
        (
            "interruptions",
            f"{a['interruption_rate_basis']} (default {a['interruptions_per_hour']:.3g}/h, mean time "
            f"between interruptions {a['mean_time_between_interruptions_h']:,.1f} h)"
            if a.get("interruption_rate_source") == "per instance"
            else f"{a['interruptions_per_hour']:.3g}/h per instance (mean time between interruptions "
            f"{a['mean_time_between_interruptions_h']:,.1f} h): {a['interruption_rate_basis']}",
        ),
        ("checkpoint write", f"{a['disk_bytes_per_s'] / MIB:,.0f} MiB/s ({a['disk_basis']})"),
        ("restart", f"{a['restart_s'] / 60:g} min per interruption ({a['restart_basis']})"),
        ("checkpoint interval", a["checkpoint_interval"]),
        ("checkpoint writes", a["checkpoint_writes"]),
        ("spot model", a["spot_model"]),
        ("not included", a["not_included"]),
    ]
    return lines


def render_cost(
    report: Any, console: Console, top: int = options.TOP_COST.default, wide: bool = False, money: Currency = USD
) -> None:
    """Print ``paddlefit cost``: the fitting instances sorted by the ranking cost, marks, then the assumptions;
    amounts in ``money`` (:mod:`paddlefit.catalog.currency`; the report holds USD).
    ``wide``: every column; else the columns of :data:`COST_DROPPABLE` go, first first, while the table is wider
    than the console, instance and GPU names then fold, and a line says what was left out."""
    a = report.assumptions
    console.print(f"[bold]{escape(a['job'])}[/]")
    fit = [r for r in report.rows if r.fits]
    spot_time = any(r.cost_basis.startswith("spot") for r in fit)  # ranked by spot hours: show them
    columns = [
        "",
        "instance",
        "GPUs",
        "time",
        "on-demand",
        "spot",
        *(["spot time"] if spot_time else []),
        "ckpt",
        "note",
    ]
    footnotes: list[str] = []
    named = fit[:top] + [r for r in fit if r.cheapest or r.fastest]  # the footer restates these rows
    unit = column_unit(
        [r.hours * SECONDS_PER_HOUR for r in named] + [(r.spot_hours or 0) * SECONDS_PER_HOUR for r in named]
    )
    ckpt_unit = column_unit(r.checkpoint_interval_s for r in fit[:top])
    rows = _cost_rows(fit[:top], unit, ckpt_unit, footnotes, money)
    title = f"ranked by {a['ranking']} (* cheapest, ^ fastest, P Pareto front)"
    dropped = [] if wide else [c for c in COST_DROPPABLE if c in columns]
    for k, c in enumerate(dropped):  # drop while too wide: keep what fits
        if table_width(console, _cost_table(title, rows, columns)) <= console.width:
            dropped = dropped[:k]
            break
        columns.remove(c)
    table = _cost_table(title, rows, columns)
    print_min_width(console, table, table_width(console, table) if wide else 0)
    if dropped:
        console.print(f"[dim]  left out to fit {console.width} columns: {', '.join(dropped)} (--wide for all)[/]")
    for i, n in enumerate(footnotes, 1):
        console.print(f"[dim]  note {i}: {escape(n)}[/]")
    console.print(
        "[dim]  time = on-demand wall time (with checkpoint writes); spot = expected spot cost (the same "
        "writes + lost work and restarts)"
        + ("; spot time = expected spot wall time (the ranking's)" if spot_time else "")
        + "; ckpt = "
        + (
            "the spec's checkpoint interval"
            if a["checkpoint_interval"].startswith(SPEC_CADENCE)
            else "Daly checkpoint interval"
        )
        + ". --json adds Young's interval, spot hours, step time, all-reduce, interconnect, "
        "peak per GPU[/]"
    )
    if hidden := len(fit) - min(top, len(fit)):
        console.print(f"[dim]{hidden} more fitting instance type(s): --top {len(fit)} or --json[/]")
    _cost_outcome(report, fit, unit, console, money)
    lines = _cost_assumption_lines(a)
    console.print("[dim]assumptions:[/]")
    for k, v in lines:
        console.print(f"[dim]  {k}: {escape(str(v))}[/]", highlight=False)


def _cost_outcome(report: Any, fit: list[Any], unit: Any, console: Console, money: Currency = USD) -> None:
    """The lines under ``cost``'s table: what does not fit or was not priced (and why), the cheapest and fastest
    rows, the tie-breaks, and a bold line when nothing could be priced or nothing fits."""
    nofit = [r for r in report.rows if not r.fits]
    if nofit:
        names = escape(", ".join(sorted({f"{r.gpu}" for r in nofit})))
        console.print(
            f"does not fit: {len(nofit)} instance type(s) with {names} (peak per GPU above the usable "
            "memory): lower the micro-batch with accumulation, or use AMP"
        )
    by_reason: dict[str, list[str]] = {}
    for sk in report.skipped:
        if "gpu" in sk:  # a requested --gpu no priced instance has
            console.print(f"[dim]{escape(sk['gpu'])}: {escape(sk['reason'])}[/]")
            continue
        reason = sk["reason"].split(";")[0]
        by_reason.setdefault(reason, []).append(f"{sk['cloud']} {sk['instance_type']}")
    for reason, names in by_reason.items():
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        console.print(f"[dim]not priced: {escape(shown)}: {escape(reason)}[/]")
    if report.cheapest:
        c = next(r for r in fit if r.cheapest)
        took = unit.fmt(c.cost_hours * SECONDS_PER_HOUR)
        console.print(
            f"cheapest: [bold]{escape(report.cheapest)}[/] {money.fmt(c.cost_usd)} in {took} ({c.cost_basis})"
        )
    if report.fastest:
        f = next(r for r in fit if r.fastest)
        took = unit.fmt(f.cost_hours * SECONDS_PER_HOUR)
        console.print(
            f"fastest:  [bold]{escape(report.fastest)}[/] {took} for {money.fmt(f.cost_usd)} ({f.cost_basis})"
        )
    for tie in report.tie_breaks:
        console.print(f"[dim]tie-break: {escape(tie)}[/]")
    if money.rate_note():
        console.print(f"[dim]amounts in {money.code} {money.rate_note()}[/]")
    if not report.rows:
        console.print("[bold red]no instance could be priced: see the reasons above[/]")
    elif not fit:
        console.print("[bold red]no priced instance fits this job[/]")
