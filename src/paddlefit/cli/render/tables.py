"""Render plans and catalogs as rich tables or JSON. Pure formatting: numbers come from the core."""

from __future__ import annotations

import math
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from paddlefit.catalog.currency import USD
from paddlefit.catalog.gpus import GPU
from paddlefit.units import GIB, MIB, capacity_gib, column_unit, duration, gib, size


def flops(n: float) -> str:
    """FLOPs with an SI prefix: ``8.24 GFLOPs``, ``1.40 MFLOPs``."""
    for unit, scale in (("TFLOPs", 1e12), ("GFLOPs", 1e9), ("MFLOPs", 1e6), ("kFLOPs", 1e3)):
        if n >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,.0f} FLOPs"


def pct(fraction: float | None) -> str:
    """A fraction as a whole percentage (``0.354`` -> ``35%``); ``-`` for None/NaN (a figure the plan could not
    make, e.g. the MFU of a row timed at a slower unit's peak)."""
    if fraction is None or (isinstance(fraction, float) and math.isnan(fraction)):
        return "-"
    return f"{fraction:.0%}"


def peak_text(unit: str | None, peak_flops: float | None) -> str:
    """A row's compute unit and its dense peak: ``fp16 tensor 119.5 TFLOPS``; ``-`` for an unknown unit or peak."""
    if not unit or peak_flops is None or math.isnan(peak_flops) or peak_flops <= 0:
        return "-"
    return f"{unit} {peak_flops / 1e12:,.4g} TFLOPS"


def print_min_width(console: Console, renderable: Any, min_width: int) -> None:
    """Print ``renderable`` laid out for at least ``min_width`` columns, so numbers are never cut to "..." (a pipe or
    CI log reports 80 columns; a narrower terminal wraps the long lines instead)."""
    fixed = console._width  # None: the width follows the terminal (or COLUMNS); restored as it was, not frozen
    console.width = max(console.width, min_width)
    try:
        console.print(renderable)
    finally:
        console._width = fixed


def table_width(console: Console, table: Table) -> int:
    """Columns ``table`` takes at its natural width (nothing folded), on ``console``."""
    return Measurement.get(console, console.options.update(width=10_000), table).maximum


def render_plan(plan: Any, console: Console) -> None:
    """Print the plan: header, table sorted by recommendation, recommendation line."""
    _plan_header(plan, console)
    wide = console.width >= 140
    table = Table(
        show_lines=False,
        header_style="bold",
        box=box.HEAVY_HEAD if wide else None,
        padding=(0, 1) if wide else (0, 1, 0, 0),
        pad_edge=wide,
        show_edge=wide,
    )
    cols = [
        ("target", "left"),
        ("fits", "center"),
        ("GiB peak/cap", "right"),
        ("max batch", "right"),
        ("step", "right"),
        ("samples/s", "right"),
        ("MFU", "right"),
        ("cal", "center"),
    ]
    if wide:
        cols.append(("notes", "left"))
    for col, just in cols:
        table.add_column(col, justify=just, no_wrap=col != "notes", overflow="fold")
    has_ttt = any(t.time_to_train_s is not None for t in plan.targets)
    step_unit = column_unit(t.step_time_s for t in plan.targets)
    ttt_unit = column_unit(t.time_to_train_s for t in plan.targets)
    if has_ttt:
        table.add_column("to train", justify="right", no_wrap=True)
    for t in plan.targets:
        row = [
            t.name,
            "[green]yes[/]" if t.fits else "[red]no[/]",
            f"{t.peak_bytes / GIB:,.1f}/{capacity_gib(t.capacity_bytes)}",
            "-" if t.max_batch_size is None else f"{t.max_batch_size:,}",
            step_unit.fmt(t.step_time_s),
            "-" if math.isnan(t.samples_per_s) else f"{t.samples_per_s:,.{0 if t.samples_per_s >= 100 else 1}f}",
            pct(t.predicted_mfu),
            (
                t.calibration.replace("runs (n=", "runs n=").rstrip(")")
                if t.calibration.startswith("runs")
                else {"device": "device", "published-fit": "fit", "uncalibrated": "uncal"}.get(t.calibration, "none")
            ),
        ]
        if wide:
            row.append("; ".join(t.notes))
        if has_ttt:
            row.append(ttt_unit.fmt(t.time_to_train_s))
        table.add_row(*row)
    print_min_width(console, table, 100)
    if not wide:
        for t in plan.targets:
            if t.notes:
                console.print(f"[dim]{t.name}:[/] {'; '.join(t.notes)}", highlight=False)
    _plan_method_line(plan, console)
    rec = plan.recommendation
    if rec["target"]:
        console.print(f"[bold green]Recommendation:[/] {rec['target']}: {rec['reason']}")
        if rec.get("tie_break"):
            console.print(f"[dim]tie-break: {escape(rec['tie_break'])}[/]", soft_wrap=True)
    else:
        console.print(f"[bold red]No fit:[/] {rec['reason']}")


def _plan_header(plan: Any, console: Console) -> None:
    """The plan's model line, memory breakdown, CPU peak per phase and the model section's notes."""
    m, mem = plan.model, plan.memory
    workspace = plan.assumptions.get("conv_workspace_bytes") or 0
    console.print(
        f"[bold]{m['name']}[/]  {m['params'] / 1e6:,.2f}M params  {flops(m['forward_flops_per_sample'])} fwd / "
        f"{flops(m['train_flops_per_sample'])} train per sample  inputs {' '.join(plan.inputs)}"
    )
    console.print(
        f"batch {plan.batch_size} per device x {plan.devices} device(s), {plan.precision}, {plan.optimizer}  "
        f"GPU memory ({mem['method']}, {mem['precision_of_breakdown']}): weights {size(mem['weights_bytes'])}, "
        f"grads {size(mem['grads_bytes'])}, optimizer {size(mem['optimizer_bytes'])}, activations "
        f"{mem['activation_bytes_per_sample'] / MIB:,.1f} MiB/sample, rest {size(mem['fixed_bytes'])}"
        + (f" (incl. the {size(workspace)} cuDNN conv workspace)" if workspace else "")
    )
    phase_peaks = mem.get("phase_peak_bytes") or {}
    if phase_peaks:
        shown = ", ".join(
            f"{p.replace('optimizer_step', 'optimizer')}"
            + (f" (batch {mem['eval_batch_size']})" if p == "eval" else "")
            + f" {size(v)}"
            for p, v in phase_peaks.items()
        )
        console.print(
            f"CPU fp32 peak by phase at batch {plan.batch_size} ({m.get('loss') or 'loss'}): {shown}; "
            f"dominant: {mem['dominant_phase'].replace('optimizer_step', 'optimizer')}"
        )
    for n in mem.get("notes", []):
        console.print(f"[yellow]note:[/] {n}")


def _plan_method_line(plan: Any, console: Console) -> None:
    """The dim paragraph under the plan's table: how a GPU row's peak and step were computed, and the CPU row's."""
    mem = plan.memory
    a = plan.assumptions
    act = a["amp_activation_factor"] if plan.precision != "fp32" or a.get("flash_attention_blocks") else 1
    probed = mem.get("probe_batch_sizes") or []
    cpu_line = (
        f"CPU row extrapolated from training steps measured here at batch {', '.join(map(str, probed))}."
        if probed
        else "CPU row: no probe (model too large), memory analytic, no step time."
    )
    cast = a.get("amp_cast_weight_bytes") or 0
    console.print(
        f"[dim]GPU rows: peak = model states + activations x {act:.2f} (AMP dtypes of the traced ops"
        + (", flash attention where it runs" if a.get("flash_attention_blocks") else "")
        + ")"
        + (f" + {gib(cast)} AMP weight copies" if cast else "")
        + f" + conv workspace {gib(a['conv_workspace_bytes'])}; fits if peak <= {a['safety_margin']:.0%} of "
        f"(capacity - {gib(a['cuda_context_bytes'])} CUDA context). Step = sum over the "
        f"{a['trace_ops']} traced ops' forward/backward kernels + optimizer of max(GEMM tiles x waves / (unit peak x "
        f"efficiency), bytes / (DRAM or L2 bandwidth x efficiency)) + per-kernel cost, from datasheet figures and "
        f"constants fitted on measured kernels, never below the host floor {duration(a['host_floor_s'])} (Paddle's "
        f"dispatch: a constant of the model, the same on any planning machine); cal fit = tensor-core efficiencies "
        f"fitted on published runs (`plan --explain GPU` shows each op's source), runs n=K = corrected by K runs "
        f"recorded here (`paddlefit "
        f"runs`); cal uncal = no measurement behind the row's time (Kunlunxin XPUs: the CUDA fit carried over, a "
        f"rough guess); samples/s across all devices. {cpu_line}[/]"
    )


def shown_unit(unit: str, precision: str) -> str:
    """An explain row's unit as plans print units (:func:`~paddlefit.catalog.units.unit_label`: ``fp16 tensor`` for
    ``half`` under fp16 AMP); the kernel kinds that are no catalog unit (``memory``, ``dwconv``) as they are."""
    from paddlefit.catalog.units import COMPUTE_UNITS, unit_label

    return unit_label(unit, precision) if unit in COMPUTE_UNITS else unit


def render_explain(plan: Any, gpu: str, rows: list[dict[str, Any]], console: Console) -> None:
    """Print ``plan --explain GPU``: the predicted slowest kernel groups of one training step on that GPU."""
    t = next(x for x in plan.targets if x.name == gpu)
    # every figure through a formatter that prints "-" for None: a row timed at a slower unit's peak has no MFU
    # (Target.speed_lower_bound), and formatting that None crashed `plan --explain` after the whole probe
    lower = " (a lower bound: the catalog lacks the card's peak for this precision)" if t.speed_lower_bound else ""
    table = Table(
        header_style="bold",
        title=f"predicted top operators on {gpu}: step {duration(t.step_time_s)}, "
        f"MFU {pct(t.predicted_mfu)}, {plan.precision} on {peak_text(t.peak_unit, t.peak_flops)} peak"
        f"{lower}, batch {plan.batch_size}",
        title_justify="left",
    )
    for c, just in (
        ("op", "left"),
        ("phase", "left"),
        ("class", "left"),
        ("time", "right"),
        ("share", "right"),
        ("kernels", "right"),
        ("GFLOP", "right"),
        ("MB moved", "right"),
        ("bound", "left"),
        ("unit", "left"),
        ("eff", "right"),
        ("eff from", "left"),
    ):
        table.add_column(c, justify=just, no_wrap=True)
    for r in rows:
        table.add_row(
            r["op"],
            r["phase"],
            r["cls"],
            duration(r["seconds"]),
            pct(r["share"]),
            f"{r['kernels']:,}",
            f"{r['flops'] / 1e9:,.1f}",
            f"{r['bytes'] / 1e6:,.0f}",
            r["bound"],
            shown_unit(r["unit"], plan.precision),
            pct(r["efficiency"]),
            r["source"],
        )
    print_min_width(console, table, 150)
    console.print(
        "[dim]eff: FLOPs / (time x the unit's datasheet peak) for compute-bound ops, bytes / (time x DRAM "
        "bandwidth) for memory-bound ones. eff from: kernels = fitted on measured kernels of that class "
        "(NeuSight, DeepBench; bench/gpu_kernels.py), kernels+datasheet = that fit carried to this "
        "architecture by its datasheet (no measured kernel on it), published-fit = fitted on published "
        "end-to-end runs (tensor cores; +arch: with a generation factor from a parameter file), mamf = held "
        "to the best GEMM measured on the architecture's cards (MAMF), device = timed on this GPU "
        "by paddlefit calibrate, prior = nothing measured constrains it.[/]"
    )
    by = t.time_breakdown or {}
    parts = ", ".join(f"{c} {duration(v['seconds'])} ({v['bound']})" for c, v in by.items() if v["seconds"] > 0)
    host = plan.assumptions.get("host_floor_s") or 0.0
    console.print(
        f"[dim]by class: {parts}. Step = max(their sum, host floor {duration(host)}: Paddle's dispatch, a "
        "constant of the model) + the "
        f"all-reduce not hidden. Times are predictions of the per-kernel model (row: {t.calibration}; "
        "each op's efficiency source is in the table); "
        "`paddlefit profile` measures them on a card you have.[/]"
    )


def render_gpus(gpus: list[GPU], console: Console) -> None:
    """Print the GPU catalog as a table (dense tensor TFLOPS); narrow terminals get the main columns only."""

    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:g}"

    wide = console.width >= 150
    table = Table(
        header_style="bold", box=box.HEAVY_HEAD if wide else None, padding=(0, 1), pad_edge=wide, show_edge=wide
    )
    cols = {
        "name": lambda g: g.name,
        "arch": lambda g: g.architecture,
        "CC": lambda g: g.device_label,
        "mem GB": lambda g: f"{g.memory_gib:g}",
        "usable MiB": lambda g: f"{g.capacity_bytes / MIB:g}" + ("" if g.usable_memory_mib else " label"),
        "GB/s": lambda g: f(g.mem_bw_gb_s),
        "FP32": lambda g: f(g.fp32_tflops),
        "TF32": lambda g: f(g.tf32_tflops),
        "FP16": lambda g: f(g.fp16_tflops),
        "BF16": lambda g: f(g.bf16_tflops),
        "INT8": lambda g: f(g.int8_tops),
        "FP8": lambda g: f(g.fp8_tflops),
        "NVLink": lambda g: f(g.nvlink_gb_s),
        "PCIe": lambda g: f"gen{g.pcie_gen} {g.pcie_gb_s:g}",
        "TDP W": lambda g: f(g.tdp_w),
        "checked": lambda g: g.verified,
    }
    if not wide:
        cols = {k: v for k, v in cols.items() if k not in ("arch", "usable MiB", "INT8", "TDP W", "checked", "PCIe")}
    for c in cols:
        table.add_column(c, justify="left" if c in ("name", "arch", "checked") else "right", no_wrap=True)
    for g in gpus:
        table.add_row(*(fn(g) for fn in cols.values()))
    console.print(table)
    console.print(
        'FP32 ... FP8: dense TFLOPS (no sparsity; INT8: TOPS); mem GB: the vendor\'s label ("16 GB"); '
        "memory bandwidth and NVLink (bidirectional) in GB/s; usable MiB: "
        "what a process can use, measured by a cloud where published, else the label (`label`). "
        "`--json` adds usable MiB, PCIe, TDP and each row's source document."
    )


def usd(value: float | None) -> str:
    """USD as :meth:`paddlefit.catalog.currency.Currency.fmt` prints it (``$0.0031``, ``$12.34``, ``$1,234``; ``-``
    for None)."""
    return USD.fmt(value)


def render_parallel_plan(plan: Any, console: Console) -> None:
    """Print an :class:`~paddlefit.llm.search.LLMPlan`: per GPU type the best layouts, the best one's memory and
    time breakdown and its PaddleNLP flags, then the assumptions."""
    cfg, st, req = plan.config, plan.setup, plan.request
    console.print(
        f"[bold]{escape(cfg.name)}[/]  {cfg.params / 1e9:,.2f}e9 params  h {cfg.hidden_size}, {cfg.num_layers} layers, "
        f"{cfg.num_heads} heads / {cfg.num_kv_heads} KV, FFN {cfg.ffn_size} {cfg.ffn_type}, vocab {cfg.vocab_size:,}"
        f"  [dim](source: {escape(cfg.source or '-')})[/]",
        highlight=False,
    )
    console.print(
        f"seq {st.seq_len}, global batch {plan.global_batch} ({plan.global_batch * st.seq_len / 1e6:,.2f}M tokens), "
        f"{req.gpus} GPUs ({min(req.gpus_per_node, req.gpus)} per node), {st.precision.value}, {st.optimizer.value}, "
        f"flash attention {'on' if st.flash_attention else 'off'}",
        highlight=False,
    )
    for r in plan.results:
        fitting = r.fitting
        console.print(
            f"\n[bold]{r.gpu.name}[/]: {r.evaluated:,} layouts in {r.seconds:.2f} s, {len(fitting):,} fit; compute at "
            f"{r.mfu:.1%} of dense peak ({escape(r.mfu_source)}); network {r.network_gbit_s:,.0f} Gbit/s per node "
            f"({escape(r.network_source)})",
            highlight=False,
        )
        for note in r.notes:
            console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
        shown = fitting[: req.top] if fitting else r.plans[: min(3, req.top)]
        if not fitting:
            console.print(f"[bold red]No layout fits[/] on {req.gpus} x {r.gpu.name}; the smallest peaks:")
        table = Table(header_style="bold", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
        for col in (
            "#",
            "dp",
            "shard",
            "tp",
            "pp",
            "micro x accum",
            "recompute",
            "sp",
            "GiB peak/usable",
            "step",
            "tokens/s",
            "MFU",
        ):
            table.add_column(col, justify="left" if col in ("recompute",) else "right", no_wrap=True)
        step_unit = column_unit(p.time.step for p in shown)
        for i, p in enumerate(shown, 1):
            lay, m = p.layout, p.memory
            mem_cell = f"{m.peak / GIB:,.1f}/{m.usable / GIB:,.1f}"
            table.add_row(
                str(i),
                str(lay.dp),
                f"stage{lay.sharding}" if lay.sharding else "-",
                str(lay.tp),
                str(lay.pp),
                f"{lay.micro_batch} x {lay.accum}",
                lay.recompute,
                "yes" if lay.sequence_parallel else "-",
                mem_cell if p.fits else f"[red]{mem_cell}[/]",
                step_unit.fmt(p.time.step),
                f"{p.tokens_per_s:,.0f}",
                f"{p.mfu:.1%}",
            )
        print_min_width(console, table, 110)
        if r.tie_break and fitting:
            console.print(f"[dim]tie-break: {escape(r.tie_break)}[/]", highlight=False)
        _best_layout_lines(shown[0], r.setup or st, console)
    console.print("")
    for a in plan.to_dict()["assumptions"]:
        console.print(f"[dim]assumption: {escape(a)}[/]", highlight=False)


def _best_layout_lines(best: Any, own: Any, console: Console) -> None:
    """The best layout's memory per GPU, time per step and PaddleNLP flags (``own``: the setup it runs)."""
    from paddlefit.llm.search import LLM_SCRIPT_MODEL_ARGS

    m, t = best.memory, best.time
    console.print(
        f"best, per GPU ({m.stage} stage): weights {gib(m.weights)}, grads {gib(m.grads)}, optimizer "
        f"{gib(m.optimizer)}, ZeRO-3 buffer {gib(m.gather_buffer)}, activations {gib(m.activations)} "
        f"({m.in_flight} micro-batch(es) in flight), embedding/logits {gib(m.embedding_head)} = peak "
        f"{gib(m.peak)}; reserved: CUDA context {gib(m.cuda_context)}, fragmentation allowance "
        f"{gib(m.fragmentation_allowance)} of {gib(m.capacity)}",
        highlight=False,
    )
    console.print(
        f"best, per step: compute {duration(t.compute)}, TP comm {duration(t.tp_comm)} ({t.tp_link}), PP send/recv "
        f"{duration(t.pp_comm)} ({t.pp_link}), bubble {duration(t.bubble)}, exposed DP/sharding comm "
        f"{duration(t.dp_comm)} ({t.dp_link}), optimizer {duration(t.optimizer)} = {duration(t.step)}",
        highlight=False,
    )
    args = best.paddlenlp_args(own.precision, own.flash_attention)

    def flags(keys: Any, args: dict[str, Any] = args) -> str:
        return " ".join(
            f"--{k} {str(v).lower() if isinstance(v, bool) else v}"
            for k, v in args.items()
            if k in keys and v not in ("", -1)
        )  # no sharding: left out

    train_keys = [k for k in args if k not in LLM_SCRIPT_MODEL_ARGS]
    console.print(f"PaddleNLP TrainingArguments: [cyan]{escape(flags(train_keys))}[/]", highlight=False, soft_wrap=True)
    console.print(
        f"PaddleNLP llm/ scripts' model arguments: [cyan]{escape(flags(LLM_SCRIPT_MODEL_ARGS))}[/]",
        highlight=False,
        soft_wrap=True,
    )
