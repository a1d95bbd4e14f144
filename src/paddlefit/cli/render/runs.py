"""Rich tables of the run registry (``paddlefit runs``, ``runs show``, ``runs compare``). Pure formatting: the rows
come from :class:`paddlefit.runs.Registry`, the comparison and the units from :mod:`paddlefit.runs.view`."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape as markup_escape
from rich.measure import Measurement
from rich.table import Table

from paddlefit.cli.render.tables import print_min_width
from paddlefit.jsondoc import to_json
from paddlefit.runs.labels import AFTER_WARMUP, run_label
from paddlefit.runs.view import comparison_problem, comparison_unit, fmt, fmt_ratio, ratio, step_time_ratio
from paddlefit.textsafe import terminal_safe

STATUS_STYLE = {
    "running": "cyan",
    "finished": "green",
    "stopped": "yellow",
    "budget": "yellow",
    "nonfinite": "red",
    "failed": "red",
    "lost": "magenta",
}


def escape(text: str) -> str:
    """A registry value for a table cell: control characters escaped (:func:`~paddlefit.textsafe.terminal_safe`),
    then rich markup."""
    return markup_escape(terminal_safe(text, keep_newlines=False))


def started(value: Any) -> str:
    """An ISO-8601 time as ``2025-05-01 12:03`` (UTC), for a table cell."""
    return "-" if not value else escape(str(value).replace("T", " ")[:16])


def status_cell(status: Any) -> str:
    """The status in its colour (markup)."""
    return f"[{STATUS_STYLE.get(str(status), 'white')}]{escape(str(status))}[/]"


def device_cell(run: dict[str, Any]) -> str:
    """``L4 x2``, ``cpu x1`` (``-`` when no device was recorded)."""
    name = run.get("device_name") or run.get("device_kind")
    if not name:
        return "-"
    return f"{name} x{run['device_count']}" if run.get("device_count") else str(name)


#: the list's measured samples/s: the registry's, over the steps after warm-up (two header lines keep it narrow)
SAMPLES_COLUMN = f"samples/s\n({AFTER_WARMUP})"

#: The list's columns (header, justify), widest last; without ``--wide`` the first of :data:`DROPPABLE` still in the
#: table goes while it is wider than the terminal.
RUN_COLUMNS = (
    ("id", "right"),
    ("started (UTC)", "left"),
    ("status", "left"),
    ("device", "left"),
    ("precision", "left"),
    ("global batch", "right"),
    ("steps", "right"),
    (SAMPLES_COLUMN, "right"),
    ("pred/meas step", "right"),
    ("final loss", "right"),
    ("eval acc", "right"),
    ("model", "left"),
    ("run dir", "left"),
)
DROPPABLE = ("precision", "global batch", "pred/meas step", "started (UTC)", "final loss", "steps", "model")


def _runs_table(rows: list[dict[str, Any]], columns: list[str], fold: bool) -> Table:
    table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False)
    for name, justify in RUN_COLUMNS:
        if name in columns:
            table.add_column(
                name,
                justify=justify,
                no_wrap=not (fold and name in ("model", "run dir")),  # type: ignore[arg-type]
                overflow="fold",
            )
    for run in rows:
        cells = {
            "id": str(run["id"]),
            "started (UTC)": started(run.get("started_at")),
            "status": status_cell(run.get("status")),
            "model": escape(fmt(run.get("model"))),
            "device": escape(device_cell(run)),
            "precision": escape(fmt(run.get("precision"))),
            "global batch": fmt(run.get("global_batch")),
            "steps": fmt(run.get("steps")),
            SAMPLES_COLUMN: fmt(run.get("measured_samples_per_s"), "1/s"),
            "pred/meas step": fmt_ratio(step_time_ratio(run)),
            "final loss": fmt(run.get("final_loss")),
            "eval acc": fmt(run.get("eval_accuracy"), "%"),
            "run dir": escape(fmt(run.get("run_dir"))),
        }
        table.add_row(*(cells[c] for c in columns))
    return table


def render_runs(rows: list[dict[str, Any]], console: Console, wide: bool = False) -> None:
    """The runs table, newest first: id, start, status, device x count, precision, global batch, steps, measured
    samples/s, predicted/measured step time, final loss, eval accuracy, model, run directory (widest last).
    ``wide``: every column at its natural width (a pipe gets whole rows); else the columns of :data:`DROPPABLE`
    go, first first, while the table is wider than the terminal, the model and run directory then fold, and a
    line names what was left out."""
    columns = [name for name, _ in RUN_COLUMNS]

    def width(cols: list[str]) -> int:
        table = _runs_table(rows, cols, fold=False)
        return Measurement.get(console, console.options.update(width=10_000), table).maximum

    if wide:
        print_min_width(console, _runs_table(rows, columns, fold=False), width(columns))
        return
    dropped = []
    for name in DROPPABLE:
        if width(columns) <= console.width:
            break
        columns.remove(name)
        dropped.append(name)
    console.print(_runs_table(rows, columns, fold=True))
    if dropped:
        console.print(f"[dim]not shown at {console.width} columns: {', '.join(dropped)} (--wide shows every column)[/]")


def render_run(run: dict[str, Any], console: Console) -> None:
    """Every field of one run, then its predicted-vs-measured document as a table (when recorded), then the job
    spec as JSON (when recorded)."""
    table = Table(box=box.SIMPLE_HEAD, header_style="bold", title=f"run {run['id']}", title_justify="left")
    table.add_column("field")
    table.add_column("value")
    for name, value in run.items():
        if name in ("spec_json", "comparison_json"):
            continue
        label, unit = run_label(name)
        cell = status_cell(value) if name == "status" else escape(fmt(value, unit))
        table.add_row(escape(label), cell)
    table.add_row("predicted/measured step", fmt_ratio(step_time_ratio(run)))
    print_min_width(console, table, 100)
    _print_resumes(run, console)
    doc = run.get("comparison_json")
    if doc and (problem := comparison_problem(doc)):
        console.print(f"predicted vs measured ({problem}): {markup_escape(terminal_safe(str(doc)[:2000]))}")
    elif doc:
        render_comparison_document(doc, console)
    if run.get("spec_json") is not None:
        console.print("[bold]job spec[/]")
        console.print(markup_escape(terminal_safe(to_json(run["spec_json"]))), highlight=False)


def _print_resumes(run: dict[str, Any], console: Console) -> None:
    """A line per resume recorded in the run directory's metrics.jsonl (:mod:`paddlefit.report.resumes`), when
    the directory is still there."""
    from pathlib import Path

    from paddlefit.report.resumes import read_resume_records, record_resumes, resume_line

    if not run.get("run_dir"):
        return
    for r in record_resumes(read_resume_records(Path(run["run_dir"])), []):
        console.print(escape(resume_line(r)), highlight=False)


def render_comparison_document(doc: dict[str, Any], console: Console) -> None:
    """The trainer's predicted-vs-measured document: a line of context (status, calibration, device, steps), then
    one row per figure: predicted, measured, predicted/measured."""
    device = doc.get("device") or {}
    head = [f"status: {doc.get('status', '-')}"]
    if doc.get("reason"):
        head.append(f"reason: {str(doc['reason']).rstrip('.')}")  # the caption joins its parts with '; '
    if doc.get("calibration"):
        head.append(f"calibration: {doc['calibration']}")
    if device:
        head.append(f"device: {device.get('name', '-')} x{device.get('count', '-')} ({device.get('kind', '-')})")
    if doc.get("measured_steps") is not None:
        head.append(f"{doc['measured_steps']} measured steps after {doc.get('warmup_steps', 0)} warm-up")
    head.append(
        "predicted/measured above 1: the plan said more time or memory than the run took, or more "
        "samples/s or MFU than it reached"
    )
    if device.get("kind") == "cpu":
        head.append("MFU: GPUs only (a catalog peak)")
    table = Table(
        box=box.SIMPLE_HEAD,
        header_style="bold",
        title="predicted vs measured",
        title_justify="left",
        caption=escape("; ".join(head)),
        caption_justify="left",
    )
    for name, justify in (
        ("figure", "left"),
        ("predicted", "right"),
        ("measured", "right"),
        ("predicted/measured", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for figure in doc.get("figures") or []:
        if not isinstance(figure, dict):
            continue
        unit = comparison_unit(figure)
        value = figure.get("ratio")
        if value is None:
            value = ratio(figure.get("predicted"), figure.get("measured"))
        table.add_row(
            escape(str(figure.get("label") or figure.get("name") or "-")),
            fmt(figure.get("predicted"), unit),
            fmt(figure.get("measured"), unit),
            fmt_ratio(value),
        )
    print_min_width(console, table, 100)


def render_compare(doc: dict[str, Any], console: Console) -> None:
    """Two runs side by side (:func:`paddlefit.runs.view.compare_runs`): configuration, then figures with b/a;
    ``*`` marks a row whose values differ."""
    a, b = doc["runs"]
    table = Table(box=box.SIMPLE_HEAD, header_style="bold")
    for name, justify in (
        ("", "left"),
        (f"run {a}", "right"),
        (f"run {b}", "right"),
        (f"{b}/{a}", "right"),
        ("differs", "center"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for section in ("config", "figures"):
        table.add_row(f"[bold]{section}[/]", "", "", "", "")
        for item in doc[section]:
            unit = "" if item["unit"] == "text" else item["unit"]
            table.add_row(
                escape(item["label"]),
                escape(fmt(item["a"], unit)),
                escape(fmt(item["b"], unit)),
                fmt_ratio(item.get("ratio")) if section == "figures" else "",
                "[yellow]*[/]" if item["differs"] else "",
            )
    print_min_width(console, table, 100)
