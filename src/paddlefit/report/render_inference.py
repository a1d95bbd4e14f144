"""Tables of ``plan --inference`` and ``cost --inference`` (:class:`~paddlefit.plan.inference.InferencePlan`)."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from paddlefit.plan.inference import MAX_SEARCH_BATCH

MIB = 1024**2


def _ms(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1e3:,.2f}" if s < 0.1 else f"{s * 1e3:,.0f}"


def _gib(b: float | None) -> str:
    return "-" if b is None else f"{b / 1024**3:,.2f}"


def render_inference(plan: Any, console: Console) -> None:
    """The GPU table (predicted latency per batch, memory, the serving point, the cheapest USD per million requests),
    the CPU table (measured), the cheapest instance types, and the legend."""
    p = plan
    target = f", latency target {p.latency_ms:g} ms" if p.latency_ms else ""
    console.print(f"[bold]{escape(p.model['name'])}[/] ({p.model['kind']}, {p.model['params']:,} parameters, inputs "
                  f"{', '.join(p.model['inputs'])}) served by {p.engine} in {p.precision}{target}", soft_wrap=True)
    cheapest: dict[str, float] = {}
    for r in p.cost:
        cheapest.setdefault(r["gpu"], r["usd_per_million"])
    gpus = [t for t in p.targets if t.kind == "gpu"]
    title = "GPUs (predicted): latency ms per batch; peak GiB at the last batch"
    table = Table(header_style="bold", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False, title=title,
                  title_justify="left")  # fmt: skip
    table.add_column("GPU", no_wrap=True)
    table.add_column("GiB", justify="right")
    for b in p.batch_sizes:
        table.add_column(f"b={b}", justify="right")
    table.add_column("peak", justify="right")
    if p.engine == "tensorrt":
        table.add_column("build", justify="right")
    table.add_column("serve b", justify="right")
    table.add_column("samp/s", justify="right")
    table.add_column("$/1M", justify="right")
    for t in gpus:
        if not t.inference:
            table.add_row(t.name, _gib(t.capacity_bytes), *["-"] * (len(table.columns) - 2))
            continue
        cells = [_ms(q.latency_s) if q.fits else "OOM" for q in t.inference]
        last = t.inference[-1]
        row = [t.name, _gib(t.capacity_bytes), *cells, _gib(last.peak_bytes)]
        if p.engine == "tensorrt":
            row.append(_gib(last.build_peak_bytes))
        s = t.serving
        capped = s is not None and s.batch_size >= MAX_SEARCH_BATCH and p.latency_ms
        serve_b = (f"{s.batch_size}+" if capped else str(s.batch_size)) if s else "none"
        row += [serve_b, f"{s.samples_per_s:,.0f}" if s else "-",
                f"{cheapest[t.name]:,.3f}" if t.name in cheapest else "-"]  # fmt: skip
        table.add_row(*row)
    console.print(table)
    for t in p.targets:
        if t.kind == "cpu":
            render_cpu(t, console)
    render_inference_cost(p, console, top=8)
    _legend(p, gpus, console)


def render_cpu(t: Any, console: Console) -> None:
    """The measured CPU rows: batch, threads, median and p95 latency, samples/s, peak RSS."""
    table = Table(header_style="bold", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False,
                  title="this CPU (measured)", title_justify="left")  # fmt: skip
    for c in ("batch", "threads", "median ms", "p95 ms", "samples/s", "peak RSS MiB"):
        table.add_column(c, justify="right")
    for q in t.inference:
        table.add_row(str(q.batch_size), str(q.threads), _ms(q.latency_s), _ms(q.p95_s), f"{q.samples_per_s:,.1f}",
                      f"{q.peak_bytes / MIB:,.0f}")  # fmt: skip
    console.print(table)
    for n in t.notes:
        console.print(f"[dim]{escape(n)}[/]", soft_wrap=True)


def render_inference_cost(plan: Any, console: Console, top: int = 8) -> None:
    """The ``top`` cheapest instance types per million requests (on-demand; spot beside it)."""
    if not plan.cost:
        console.print("[yellow]no priced instance has a GPU that serves this model within the target[/]")
        return
    table = Table(header_style="bold", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False,
                  title=f"cheapest per million requests ({len(plan.cost)} priced instance types)",
                  title_justify="left")  # fmt: skip
    for c in ("instance", "GPUs", "b", "req/s", "$/1M", "spot $/1M"):
        table.add_column(c, justify="left" if c in ("instance", "GPUs") else "right", no_wrap=True)
    for r in plan.cost[:top]:
        spot = r["spot_usd_per_million"]
        b = f"{r['batch_size']}+" if r["batch_size"] >= MAX_SEARCH_BATCH and plan.latency_ms else str(r["batch_size"])
        table.add_row(f"{r['cloud']}:{r['instance_type']}", f"{r['gpus']}x{r['gpu']}", b,
                      f"{r['requests_per_s']:,.0f}", f"{r['usd_per_million']:,.3f}",
                      "-" if spot is None else f"{spot:,.3f}")  # fmt: skip
    console.print(table)


def _legend(plan: Any, gpus: list[Any], console: Console) -> None:
    a = plan.assumptions
    fusions = next((t.fusions for t in gpus if t.fusions), {})
    fused = ", ".join(f"{k} x{v}" for k, v in fusions.items()) or "none"
    console.print(f"[dim]Latency: the forward's kernels on the per-kernel GPU model ({a['calibration']}); host: "
                  f"{a['host']}. Peak = weights + live activations of one forward + conv workspace "
                  f"{a['conv_workspace_bytes'] / MIB:,.0f} MiB; fits if peak <= {a['safety_margin']:.0%} of (capacity "
                  f"- {a['cuda_context_bytes'] / 1024**3:.1f} GiB CUDA context). Fusions: {escape(fused)}. "
                  "Serve b: the largest batch within the latency target (else the fastest listed batch that fits); "
                  "$/1M: USD per million requests, one replica per GPU at that batch, on-demand, cheapest "
                  "instance.[/]", soft_wrap=True)  # fmt: skip
    by_note: dict[str, list[str]] = {}
    for t in gpus:
        for n in t.notes:
            by_note.setdefault(n, []).append(t.name)
    for n, names in by_note.items():
        who = "all GPUs" if len(names) == len(gpus) > 1 else ", ".join(names)
        console.print(f"[dim]{escape(who)}: {escape(n)}[/]", soft_wrap=True)
    for n in plan.notes:
        console.print(f"[yellow]{escape(n)}[/]", soft_wrap=True)
