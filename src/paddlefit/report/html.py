"""``paddlefit report``: one self-contained HTML page for a run directory (no network: inline CSS, inline SVG
plots drawn by matplotlib, no scripts or fonts fetched).

:func:`build_report` (:mod:`paddlefit.report.reading`) reads the run; :func:`render_html` writes the page. Every
text is HTML-escaped. Every number is printed by :func:`fmt_num` (the page's one rule: integers with all digits
and thousands commas, floats with 4 significant digits, ``-`` for none), except the figures the terminal also
prints (predicted vs measured, samples/s): those read as ``train`` and ``paddlefit runs`` print them
(:func:`paddlefit.runs.view.fmt`); in tables each carries its exact JSON value in ``data-value`` so the page can be
checked against summary.json.
"""

from __future__ import annotations

import html
import json
import math
from typing import Any

from paddlefit import units
from paddlefit.report import plots
from paddlefit.report.reading import ReportData, build_report
from paddlefit.report.resumes import lost_text
from paddlefit.rundir.layout import COMPARISON_FILE, PROFILE_FILE
from paddlefit.runs.labels import paddle_threads, summary_label
from paddlefit.runs.view import comparison_unit, fmt, fmt_ratio, readable
from paddlefit.textsafe import terminal_safe
from paddlefit.units import MIB

__all__ = ["ReportData", "build_report", "fmt_num", "plot_ids", "render_html"]

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 62em;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ddd; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.5em 0; } td, th { padding: 0.2em 0.8em; border-bottom: 1px solid #eee;
  text-align: left; vertical-align: top; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f6f8fa; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
figure.plot { margin: 1em 0; } figure.plot svg { width: 100%; height: auto; }
.status { padding: 0.1em 0.5em; border-radius: 0.3em; color: #fff; background: #7f8c8d; }
.status-finished { background: #27ae60; } .status-running { background: #2980b9; }
.status-lost, .status-failed, .status-nonfinite { background: #c0392b; }
.status-stopped, .status-budget { background: #d68910; }
.absent { color: #666; font-style: italic; } .note { color: #8a6d3b; }
"""


def fmt_num(value: Any) -> str:
    """The page's number rule: None/NaN/inf ``-``; bools ``true``/``false``; ints all digits with thousands commas
    (``20,160``); floats 4 significant digits (``2474``, ``0.008806``, ``1.5e+06``); anything else as text."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value:,d}"
    if isinstance(value, float):
        return "-" if math.isnan(value) or math.isinf(value) else f"{value:.4g}"
    return str(value)


def esc(value: Any) -> str:
    """``value`` as escaped HTML text (quotes too), its control characters, bidi overrides (U+202E...) and
    undecodable file-name bytes written as escapes first (:func:`paddlefit.textsafe.terminal_safe`), so a run
    directory's name cannot reorder or hide what the page shows."""
    return html.escape(terminal_safe(value), quote=True)


def num_cell(value: Any, key: str | None = None, text: str | None = None) -> str:
    """A ``<td class="num">`` with :func:`fmt_num`'s text (or ``text``) and the exact JSON value in
    ``data-value``."""
    attrs = f' data-key="{esc(key)}"' if key else ""
    if isinstance(value, int | float) and not isinstance(value, bool):
        attrs += f' data-value="{esc(json.dumps(value))}"'
    return f'<td class="num"{attrs}>{esc(fmt_num(value) if text is None else text)}</td>'


def value_cell(value: Any, key: str | None = None) -> str:
    """A number cell for numbers, a text cell for anything else (dicts and lists as JSON)."""
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
        return num_cell(value, key)
    text = json.dumps(value) if isinstance(value, dict | list) else fmt_num(value)
    return f'<td data-key="{esc(key)}">{esc(text)}</td>' if key else f"<td>{esc(text)}</td>"


def mib(nbytes: Any) -> str:
    """`` (1.51 MiB)`` for a byte count, else empty."""
    if isinstance(nbytes, int | float) and not isinstance(nbytes, bool):
        return f" ({fmt_num(nbytes / MIB)} MiB)"
    return ""


def gib(nbytes: Any) -> str:
    """`` (23.5 GiB)`` for a byte count, else empty."""
    if isinstance(nbytes, int | float) and not isinstance(nbytes, bool):
        return f" ({units.gib(nbytes)})"
    return ""


def kv_table(rows: dict[str, Any], table_id: str, prefix: str = "") -> str:
    """A two-column key/value table; each value cell is keyed ``prefix + key``."""
    body = "".join(f"<tr><th>{esc(k)}</th>{value_cell(v, prefix + k)}</tr>" for k, v in rows.items())
    return f'<table id="{esc(table_id)}">{body}</table>'


def plot_figure(plot_id: str, caption: str, svg: str) -> str:
    """One ``<figure class="plot" id="plot-...">`` around an inline SVG (matplotlib's output, trusted)."""
    return f'<figure class="plot" id="plot-{plot_id}">{svg}<figcaption>{esc(caption)}</figcaption></figure>'


def absent(elem_id: str, text: str) -> str:
    """A paragraph saying why something is not shown."""
    return f'<p class="absent" id="{esc(elem_id)}">{esc(text)}</p>'


def header(data: ReportData) -> str:
    """Run dir, model, status, steps and device."""
    steps = fmt_num(data.steps) + (f" of {fmt_num(data.total_steps)}" if data.total_steps else "")
    rows = [
        ("run dir", esc(data.run_dir)),
        ("model", esc(data.model or "- (no job.yaml)")),
        (
            "status",
            f'<span class="status status-{esc(data.status)}" id="run-status">{esc(data.status)}</span> '
            f"{esc(data.status_detail)}",
        ),
        ("steps", f'<span id="run-steps" data-value="{esc(json.dumps(data.steps))}">{esc(steps)}</span>'),
        ("device", esc(data.device)),
    ]
    body = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    notes = "".join(f'<p class="note">{esc(n)}</p>' for n in data.notes)
    return f'<h1>paddlefit report</h1><table id="header">{body}</table>{notes}'


def plots_section(data: ReportData) -> str:
    """The plots, or a sentence for each one the run has no data for."""
    steps = [r.step for r in data.resumes]
    mark = f" Dashed red lines: resumes (steps {', '.join(fmt_num(s) for s in steps)})." if steps else ""
    parts = ["<h2>Plots</h2>"]
    if data.train:
        parts.append(
            plot_figure(
                "loss",
                "Train loss by optimizer step; eval loss and accuracy at each evaluation." + mark,
                plots.loss_plot(data.train, data.evals, steps),
            )
        )
        parts.append(
            plot_figure(
                "throughput",
                "Samples/s and DataLoader wait of every optimizer step." + mark,
                plots.throughput_plot(data.train, steps),
            )
        )
        gaps = [(*r.gap_unix, r.downtime_s) for r in data.resumes if r.gap_unix is not None]
        svg = plots.time_plot(data.train, gaps)
        downs = ", ".join(f"{fmt_num(g[2])} s" for g in gaps)
        parts.append(
            plot_figure(
                "time",
                "Samples/s over wall-clock time (metrics.jsonl's `time`); a stop/kill and "
                "resume is a shaded gap" + (f" (down {downs})." if gaps else ": none in this run."),
                svg,
            )
            if svg
            else absent(
                "plot-time-absent",
                "No wall-clock times in metrics.jsonl (written by an older paddlefit): no plot over time.",
            )
        )
        svg = plots.memory_plot(data.train, steps)
        peak = data.summary.get("peak_memory_bytes") if data.summary else None
        parts.append(
            plot_figure("memory", "Peak allocated memory by step (GPU).", svg)
            if svg
            else absent(
                "plot-memory-absent",
                "No per-step peak memory in metrics.jsonl (recorded on GPU only); "
                f"the run's peak: {fmt_num(peak)} B{mib(peak)} (summary.json).",
            )
        )
    else:
        parts.append(absent("plots-absent", "No train steps in metrics.jsonl yet: nothing to plot."))
    svg = plots.profile_plot(data.profile) if data.profile else None
    if svg:
        verdict = data.profile.get("verdict") if data.profile else None
        parts.append(
            plot_figure(
                "profile",
                f"Step-time breakdown from {PROFILE_FILE} (paddlefit profile; verdict: {verdict or '-'}).",
                svg,
            )
        )
    else:
        parts.append(
            absent(
                "profile-absent",
                f"Not profiled: no {PROFILE_FILE} in the run directory (`paddlefit "
                f"profile JOB.yaml --json > RUN_DIR/{PROFILE_FILE}` adds the step-time breakdown).",
            )
        )
    return "".join(parts)


#: what a comparison's ``calibration`` says, in words
CALIBRATIONS = {
    "device": "device (the planner's probe measured on this machine)",
    "published-fit": "published-fit (the per-operator model fitted on published GPU runs)",
    "uncalibrated": "uncalibrated (no measured kernels or published runs for this device: Kunlunxin XPUs)",
}


def comparison_section(data: ReportData) -> str:
    """Predicted vs measured figures (comparison.json or summary.json["comparison"])."""
    c = data.comparison
    if c is None:
        return "<h2>Predicted vs measured</h2>" + absent(
            "comparison-absent", "No prediction recorded (run with a paddlefit that records it)."
        )
    dev = c.get("device") if isinstance(c.get("device"), dict) else {}
    status = str(c.get("status", "-"))
    kind, name = dev.get("kind") or "-", dev.get("name") or ""
    dev_name = kind if name in ("", kind) else f"{name} ({kind})"
    head = (
        f'<p id="comparison-status">{esc(status)}'
        + (f": {esc(c['reason'])}" if c.get("reason") else "")
        + f" (calibration: {esc(CALIBRATIONS.get(c.get('calibration'), c.get('calibration') or '-'))}; device "
        f"{esc(dev_name)} x{esc(fmt_num(dev.get('count')))}; {esc(fmt_num(c.get('warmup_steps')))} "
        f"warm-up steps left out, {esc(fmt_num(c.get('measured_steps')))} measured; from "
        f"{esc(data.comparison_source or COMPARISON_FILE)})</p>"
    )
    rows = []
    for f in c.get("figures") or []:
        if not isinstance(f, dict):
            continue
        name = str(f.get("name", ""))
        unit = comparison_unit(f)  # as `train` and `runs show` print them: ms, MiB, %
        cells = "".join(num_cell(f.get(k), text=fmt(f.get(k), unit)) for k in ("predicted", "measured"))
        rows.append(
            f'<tr data-figure="{esc(name)}"><td>{esc(f.get("label") or name)}</td>{cells}'
            f"{num_cell(f.get('ratio'), text=fmt_ratio(f.get('ratio')))}</tr>"
        )
    table = (
        '<table id="comparison"><tr><th>figure</th><th>predicted</th><th>measured</th>'
        f"<th>ratio (predicted / measured)</th></tr>{''.join(rows)}</table><p>Ratio above 1: the plan said "
        "more time or memory than the run took, or more samples/s or MFU than it reached.</p>"
    )
    return "<h2>Predicted vs measured</h2>" + head + table + breakdown_table(c.get("time_breakdown"))


def breakdown_table(breakdown: Any) -> str:
    """The prediction's per-op-class device seconds of one micro-step (GPU rows of the plan; ``time_breakdown``
    of the comparison), slowest first; empty for a CPU run (the CPU probe times whole steps)."""
    if not isinstance(breakdown, dict) or not breakdown:
        return ""
    items = [
        (str(k), v) for k, v in breakdown.items() if isinstance(v, dict) and isinstance(v.get("seconds"), int | float)
    ]
    rows = "".join(
        f'<tr data-op-class="{esc(k)}"><td>{esc(k)}</td>{num_cell(v["seconds"])}'
        f"<td>{esc(v.get('bound') or '')}</td>{num_cell(v.get('kernels'))}</tr>"
        for k, v in sorted(items, key=lambda kv: -kv[1]["seconds"])
    )
    return (
        "<p>Predicted device time of one micro-step by op class (the per-operator model over the traced "
        'operators):</p><table id="breakdown"><tr><th>op class</th><th>seconds</th><th>bound</th><th>kernels</th>'
        f"</tr>{rows}</table>"
    )


def text_cell(value: Any, key: str) -> str:
    """A text cell keyed ``key`` (``-`` for None)."""
    return f'<td data-key="{esc(key)}">{esc("-" if value is None else fmt_num(value))}</td>'


def environment_tables(snap: dict[str, Any], source: str, threads: str = "") -> str:
    """doctor's snapshot (``Snapshot.to_dict()``) as readable tables: the machine and Paddle build, the GPUs, the
    environment variables (redacted by the snapshot itself) and the device test runs. Cells are keyed
    ``snapshot.KEY``; the Paddle flags (thousands of names) are counted, not listed. ``threads``: the row of the Paddle
    CPU threads the run used (:func:`threads_row`), after the machine's rows."""

    def n(key: str) -> Any:
        v = snap.get(key)
        return v if isinstance(v, int | float) and not isinstance(v, bool) else None

    cont = snap.get("in_container")
    rows = [
        ("OS", text_cell(snap.get("os"), "snapshot.os")),
        ("Python", text_cell(snap.get("python"), "snapshot.python")),
        ("Paddle", text_cell(snap.get("paddle_version") or "- (does not import)", "snapshot.paddle_version")),
        ("Paddle built with CUDA", text_cell(snap.get("paddle_cuda") or "- (CPU build)", "snapshot.paddle_cuda")),
        ("Paddle built with cuDNN", text_cell(snap.get("paddle_cudnn") or "-", "snapshot.paddle_cudnn")),
        ("CPU cores (usable)", num_cell(n("cpu_cores"), "snapshot.cpu_cores")),
        (
            "memory (B)",
            num_cell(n("memory_total_bytes"), "snapshot.memory_total_bytes")
            + f"<td>{esc(gib(n('memory_total_bytes')))}</td>",
        ),
        (
            "/dev/shm free of total (B)",
            num_cell(n("shm_free_bytes"), "snapshot.shm_free_bytes")
            + f"<td>of {esc(fmt_num(n('shm_total_bytes')))}{esc(gib(n('shm_total_bytes')))}</td>",
        ),
        (
            "disk free at the run dir (B)",
            num_cell(n("disk_free_bytes"), "snapshot.disk_free_bytes") + f"<td>{esc(gib(n('disk_free_bytes')))}</td>",
        ),
        ("container", text_cell("yes" if cont else "no" if cont is False else None, "snapshot.in_container")),
        ("NVIDIA driver", text_cell(snap.get("driver_version"), "snapshot.driver_version")),
        ("CUDA driver", text_cell(snap.get("cuda_driver_version"), "snapshot.cuda_driver_version")),
        ("GPUs", num_cell(len(snap.get("gpus") or []), "snapshot.gpus")),
        ("Paddle FLAGS_* known", num_cell(len(snap.get("paddle_flags") or []), "snapshot.paddle_flags")),
        (
            "network",
            text_cell(
                ", ".join(
                    f"{i.get('name')} {i.get('state') or '?'}" for i in snap.get("net") or [] if isinstance(i, dict)
                )
                or None,
                "snapshot.net",
            ),
        ),
        ("InfiniBand", text_cell(", ".join(map(str, snap.get("infiniband") or [])) or "none", "snapshot.infiniband")),
    ]
    body = "".join(f"<tr><th>{esc(k)}</th>{v}</tr>" for k, v in rows) + threads
    out = [
        f"<p>From {esc(source)} (doctor's snapshot, taken by `train` at the start of the run):</p>",
        f'<table id="environment">{body}</table>',
    ]
    gpus = [g for g in snap.get("gpus") or [] if isinstance(g, dict)]
    if gpus:
        grows = "".join(
            f"<tr>{num_cell(g.get('index'))}<td>{esc(g.get('name', '-'))}</td>"
            f"{num_cell(g.get('memory_total_bytes'))}<td>{esc(gib(g.get('memory_total_bytes')))}</td>"
            f"<td>{esc(g.get('compute_capability') or '-')}</td>"
            f"<td>{esc(snap.get('driver_version') or '-')}</td></tr>"
            for g in gpus
        )
        out.append(
            '<table id="environment-gpus"><tr><th>GPU</th><th>name</th><th>memory (B)</th><th></th>'
            f"<th>compute capability</th><th>driver</th></tr>{grows}</table>"
        )
    env = snap.get("env") if isinstance(snap.get("env"), dict) else {}
    if env:
        erows = "".join(
            f"<tr><th>{esc(k)}</th>{text_cell(v, 'snapshot.env.' + str(k))}</tr>" for k, v in sorted(env.items())
        )
        out.append(
            f"<p>Environment variables (Paddle, NCCL, CUDA, OpenMP; secrets redacted by the snapshot):</p>"
            f'<table id="environment-env">{erows}</table>'
        )
    else:
        out.append(absent("environment-env-absent", "No relevant environment variables set."))
    runs = snap.get("device_runs") if isinstance(snap.get("device_runs"), dict) else {}
    if runs:
        rrows = "".join(
            f"<tr><th>{esc(k)}</th>{text_cell(v, 'snapshot.device_runs.' + str(k))}</tr>" for k, v in runs.items()
        )
        out.append(f'<p>Device test runs:</p><table id="environment-device-runs">{rrows}</table>')
    return "".join(out)


def summary_table(summary: dict[str, Any]) -> str:
    """summary.json as a table: each key's label with its unit (:mod:`paddlefit.runs.labels`), the value by the
    number rule (keyed by the summary key, exact value in ``data-value``; a rate as the terminal prints it), then
    bytes and fractions readable."""
    body = ""
    for k, v in summary.items():
        if k == "comparison":
            continue
        label, kind = summary_label(k)
        value = num_cell(v, k, text=fmt(v, kind)) if kind == "1/s" else value_cell(v, k)  # as the terminal says it
        body += f"<tr><th>{esc(label)}</th>{value}<td>{esc(readable(v, kind))}</td></tr>"
    return f'<table id="summary">{body}</table>'


def threads_row(data: ReportData, env: dict[str, Any]) -> str:
    """The environment row of the Paddle CPU threads the run used (:func:`paddle_threads`), keyed ``threads.paddle``."""
    import yaml

    try:
        spec = yaml.safe_load(data.job_yaml or "") or {}
    except yaml.YAMLError:
        spec = {}
    said = paddle_threads(
        spec.get("cpu_threads") if isinstance(spec, dict) else None,
        (data.snapshot or {}).get("cpu_cores"),
        (data.summary or {}).get("devices"),
        env.get("OMP_NUM_THREADS"),
    )
    return f'<tr><th>Paddle CPU threads</th><td data-key="threads.paddle">{esc(said)}</td></tr>'


def run_records_section(data: ReportData) -> str:
    """Summary, checkpoints, resumes, environment and the job spec."""
    parts = ["<h2>Summary</h2>"]
    if data.summary is not None:
        parts.append(summary_table(data.summary))
    else:
        parts.append(
            absent("summary-absent", "No summary.json: the run has not finished (running, killed or stopped early).")
        )
    parts.append("<h2>Checkpoints</h2>")
    if data.checkpoints:
        rows = "".join(
            f"<tr><td>{esc(c.name)}</td>{num_cell(c.step)}{num_cell(c.size_bytes)}"
            f"<td>{esc(mib(c.size_bytes))}</td>{num_cell(c.wall_s)}"
            f"<td>{'yes' if c.complete else 'no (manifest unreadable)'}</td></tr>"
            for c in data.checkpoints
        )
        parts.append(
            '<table id="checkpoints"><tr><th>checkpoint</th><th>step</th><th>bytes</th><th></th>'
            f"<th>run wall time (s)</th><th>complete</th></tr>{rows}</table>"
        )
    else:
        parts.append(absent("checkpoints-absent", "No checkpoints in RUN_DIR/checkpoints."))
    parts.append("<h2>Resumes</h2>")
    if data.resumes:
        rows = "".join(
            f"<tr>{num_cell(r.step)}<td>{esc(r.from_checkpoint)}</td>{num_cell(r.downtime_s)}"
            f"<td>{esc(lost_text(r))}</td>{num_cell(r.lost_compute_s)}"
            f"<td>{esc(r.evidence)}</td></tr>"
            for r in data.resumes
        )
        parts.append(
            '<table id="resumes"><tr><th>resumed at step</th><th>from</th><th>down (s)</th>'
            "<th>steps lost and run again</th><th>compute lost (s)</th>"
            f"<th>evidence</th></tr>{rows}</table>"
        )
    oldest = fmt_num(data.checkpoints[0].step) if data.checkpoints else "-"
    parts.append(
        f'<p class="absent" id="resumes-note">{"" if data.resumes else "No resume seen. "}Each resume '
        "writes a record in metrics.jsonl (down: from the last line before the stop or kill to the resume; "
        "steps lost: after the checkpoint, up to the last one logged, with their measured step times). For "
        "runs without records, resumes are found from metrics.jsonl's wall-clock times (a gap longer than "
        "max(10 x the median step time, 5 s)) and, "
        "for metrics without times, from the kept checkpoints' times, where a resume before the oldest kept "
        f"checkpoint ({esc(oldest)}) does not show.</p>"
    )
    parts.append("<h2>Environment</h2>")
    if data.snapshot is not None:
        env = data.snapshot.get("env") if isinstance(data.snapshot.get("env"), dict) else {}
        parts.append(environment_tables(data.snapshot, data.snapshot_source or "snapshot.json", threads_row(data, env)))
    else:
        s = data.summary or {}
        known = {k: s[k] for k in ("device", "devices", "precision", "amp_active", "peak_memory_kind") if k in s}
        parts.append(
            absent(
                "environment-absent",
                "No snapshot.json in the run directory (`train` writes one at the "
                "start of every run; this run is from an older paddlefit, or `paddlefit doctor --snapshot "
                "RUN_DIR/snapshot.json` adds one); what summary.json says:",
            )
        )
        parts.append(kv_table(known, "environment", "environment.") if known else "")
    parts.append("<h2>Job spec (job.yaml)</h2>")
    parts.append(
        f'<pre id="job-yaml">{esc(data.job_yaml)}</pre>'
        if data.job_yaml is not None
        else absent("job-absent", "No job.yaml in the run directory.")
    )
    return "".join(parts)


def plot_ids(page: str) -> list[str]:
    """The ``plot-...`` ids of the figures in a rendered page, in order."""
    import re

    return re.findall(r'<figure class="plot" id="(plot-[\w-]+)"', page)


def render_html(data: ReportData) -> str:
    """The report as one self-contained HTML document (no external resource of any kind)."""
    title = f"paddlefit report: {data.run_dir.name or data.run_dir}"
    body = header(data) + plots_section(data) + comparison_section(data) + run_records_section(data)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>{body}</body></html>\n"
    )
