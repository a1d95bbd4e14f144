"""Tables of ``plan --inference`` and ``cost --inference`` (:class:`~paddlefit.serving.plan.InferencePlan`)."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from paddlefit.catalog.currency import USD, Currency
from paddlefit.catalog.prices import price_template
from paddlefit.serving.plan import MAX_SEARCH_BATCH
from paddlefit.units import GIB, MIB


def _ms(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1e3:,.2f}" if s < 0.1 else f"{s * 1e3:,.0f}"


def _gib(b: float | None) -> str:
    return "-" if b is None else f"{b / GIB:,.2f}"


def _usd(v: float | None, money: Currency = USD) -> str:
    """``v`` USD in ``money``, 3 decimals, or 3 significant digits below 0.01 (a tiny model's cost per million
    requests); the column header carries the symbol."""
    if v is None:
        return "-"
    v *= money.per_usd
    return f"{v:,.3f}" if v >= 0.01 else f"{v:.3g}"


def _rate(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:,.1f}"


def render_inference(plan: Any, console: Console, money: Currency = USD) -> None:
    """The GPU table (predicted latency per batch, memory, the serving point, the cheapest cost per million requests
    in ``money``), the CPU table (measured), the cheapest instance types, and the legend."""
    p = plan
    target = f", latency target {p.latency_ms:g} ms" if p.latency_ms else ""
    console.print(
        f"[bold]{escape(p.model['name'])}[/] ({p.model['kind']}, {p.model['params']:,} parameters, inputs "
        f"{', '.join(p.model['inputs'])}) served by {p.engine} in {p.precision}{target}",
        soft_wrap=True,
    )
    cheapest: dict[str, float] = {}
    for r in p.cost:
        cheapest.setdefault(r["gpu"], r["usd_per_million"])
    gpus = [t for t in p.targets if t.kind == "gpu"]
    title = "GPUs (predicted): latency ms per batch; peak GiB at the last batch"
    table = Table(
        header_style="bold", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False, title=title, title_justify="left"
    )
    table.add_column("GPU", overflow="fold", min_width=14)
    numbers = [
        "GiB",
        *(f"b={b}" for b in p.batch_sizes),
        "peak",
        *(["build"] if p.engine == "tensorrt" else []),
        "serve",
        "samp/s",
        f"{money.symbol.strip()}/1M",
    ]
    for c in numbers:
        table.add_column(c, justify="right", no_wrap=True)
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
        serve_b = (
            (f"{s.batch_size}+" if capped else str(s.batch_size)) + (f" {s.bound}" if s.bound else "") if s else "none"
        )
        row += [serve_b, _rate(s.samples_per_s) if s else "-", _usd(cheapest.get(t.name), money)]
        table.add_row(*row)
    console.print(table)
    for t in p.targets:
        if t.kind == "cpu":
            render_cpu(t.inference, t.notes, console)
    render_inference_cost(p, console, top=8, money=money)
    _legend(p, gpus, console, money)


def render_cpu(points: list[Any], notes: list[str], console: Console, title: str = "this CPU (measured)") -> None:
    """Measured CPU points (``plan --inference``'s CPU row, ``export --benchmark``): batch, threads, median and p95
    latency, samples/s, peak RSS; then ``notes``."""
    table = Table(
        header_style="bold", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False, title=title, title_justify="left"
    )
    for c in ("batch", "threads", "median ms", "p95 ms", "samples/s", "peak RSS MiB"):
        table.add_column(c, justify="right", no_wrap=True)
    for q in points:
        table.add_row(
            str(q.batch_size),
            str(q.threads),
            _ms(q.latency_s),
            _ms(q.p95_s),
            _rate(q.samples_per_s),
            f"{q.peak_bytes / MIB:,.0f}",
        )
    console.print(table)
    for n in notes:
        console.print(f"[dim]{escape(n)}[/]", soft_wrap=True)


def render_inference_cost(plan: Any, console: Console, top: int = 8, money: Currency = USD) -> None:
    """The ``top`` cheapest instance types per million requests (on-demand; spot beside it)."""
    if not plan.cost:
        served = [t.name for t in plan.targets if t.kind == "gpu" and t.serving is not None]
        why = (
            (
                f"{', '.join(served[:6])}{' and more' if len(served) > 6 else ''} serve(s) it but no price row has "
                "them: add your provider's with `cost --inference --prices FILE` (a template in CNY: "
                f"{price_template()})"
            )
            if served
            else ("no GPU serves it within the latency target" if plan.latency_ms else "no GPU fits it")
        )
        console.print(f"[yellow]nothing priced: {escape(why)}[/]", soft_wrap=True)
        return
    table = Table(
        header_style="bold",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        pad_edge=False,
        title=f"cheapest per million requests ({len(plan.cost)} priced instance types)",
        title_justify="left",
    )
    sym = money.symbol.strip()
    for c in ("instance", "GPUs", "b", "req/s", f"{sym}/1M", f"spot {sym}/1M"):
        table.add_column(c, justify="left" if c in ("instance", "GPUs") else "right", no_wrap=True)
    for r in plan.cost[:top]:
        spot = r["spot_usd_per_million"]
        b = f"{r['batch_size']}+" if r["batch_size"] >= MAX_SEARCH_BATCH and plan.latency_ms else str(r["batch_size"])
        table.add_row(
            f"{r['cloud']}:{r['instance_type']}",
            f"{r['gpus']}x{r['gpu']}",
            b,
            _rate(r["requests_per_s"]),
            _usd(r["usd_per_million"], money),
            _usd(spot, money),
        )
    console.print(table)
    if money.rate_note():
        console.print(f"[dim]amounts in {money.code} {money.rate_note()}[/]")


def _legend(plan: Any, gpus: list[Any], console: Console, money: Currency = USD) -> None:
    a = plan.assumptions
    groups: dict[str, list[str]] = {}
    for t in gpus:
        if t.inference:
            groups.setdefault(", ".join(f"{k} x{v}" for k, v in t.fusions.items()) or "none", []).append(t.name)
    if len(groups) == 1:
        fused = next(iter(groups))
    else:
        fused = "; ".join(f"{', '.join(names)}: {rules}" for rules, names in groups.items())
    work, trt = a["conv_workspace_bytes"], plan.engine == "tensorrt"
    console.print(
        f"[dim]Latency: copy + max(the forward's kernels on the per-kernel GPU model "
        f"({a['calibration']}), host); host: {a['host']}; copy: {a['copy']}. Peak = weights + live "
        "activations of one forward"
        + (f" + conv workspace {work / MIB:,.0f} MiB (models with convolutions)" if work else "")
        + (
            "; build (GiB) = TensorRT's engine-build peak: Paddle's fp32 weights, the engine's weights, "
            "the builder workspace and the activations"
            if trt
            else ""
        )
        + f"; fits if peak{' and build' if trt else ''} <= {a['safety_margin']:.0%} "
        f"of (capacity - {a['cuda_context_bytes'] / GIB:.1f} GiB CUDA context). Fusions: "
        f"{escape(fused)}. Serve: the batch and what sets its latency "
        "(device: the kernels; host: dispatching the request and its ops; copy: inputs and results over "
        "the host link, added to the rest): "
        + (
            "the largest batch within the latency target (none: batch 1 misses it; N+: the search stops at "
            f"{a['latency_search_max_batch']})"
            if plan.latency_ms
            else "the listed batch with the most samples/s that fits"
        )
        + f"; {money.symbol.strip()}/1M: {money.code} per million requests"
        + (f" {money.rate_note()}" if money.rate_note() else "")
        + ", one replica per GPU at that batch, on-demand, cheapest "
        "instance.[/]",
        soft_wrap=True,
    )
    by_note: dict[str, list[str]] = {}
    for t in gpus:
        for n in t.notes:
            by_note.setdefault(n, []).append(t.name)
    for n, names in by_note.items():
        who = "all GPUs" if len(names) == len(gpus) > 1 else ", ".join(names)
        console.print(f"[dim]{escape(who)}: {escape(n)}[/]", soft_wrap=True)
    console.print(f"Accuracy: {escape(a['measured_error'])}", soft_wrap=True)
    for n in plan.notes:
        console.print(f"[yellow]{escape(n)}[/]", soft_wrap=True)
