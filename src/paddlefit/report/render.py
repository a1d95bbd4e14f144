"""Render plans and catalogs as rich tables or JSON. Pure formatting: numbers come from the core."""

from __future__ import annotations

import json
import math
from typing import Any

from rich.console import Console
from rich.table import Table

from paddlefit.catalog.gpus import GPU


def gib(nbytes: float | None) -> str:
    """Bytes as GiB with one decimal (``1.5 GiB``); ``-`` for None/NaN."""
    if nbytes is None or (isinstance(nbytes, float) and math.isnan(nbytes)):
        return "-"
    return f"{nbytes / 1024**3:,.1f} GiB"


def duration(seconds: float | None) -> str:
    """Seconds as ``812 ms``, ``3.2 s``, ``4.1 h``; ``-`` for None/NaN."""
    if seconds is None or math.isnan(seconds):
        return "-"
    if seconds < 1:
        return f"{seconds * 1e3:,.0f} ms"
    if seconds < 3600:
        return f"{seconds:,.1f} s"
    return f"{seconds / 3600:,.1f} h"


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def to_json(doc: Any) -> str:
    """One JSON document; NaN/inf become null so the output is strict JSON."""
    return json.dumps(_clean(doc), indent=2, sort_keys=False)


def render_plan(plan: Any, console: Console) -> None:
    """Print the plan: header, table sorted by recommendation, recommendation line."""
    m, mem = plan.model, plan.memory
    console.print(
        f"[bold]{m['name']}[/]  {m['params'] / 1e6:,.1f}M params  "
        f"{m['forward_flops_per_sample'] / 1e9:,.2f} GFLOPs fwd / {m['train_flops_per_sample'] / 1e9:,.2f} "
        f"GFLOPs train per sample  inputs {' '.join(plan.inputs)}"
    )
    console.print(
        f"batch {plan.batch_size} per device x {plan.devices} device(s), {plan.precision}, {plan.optimizer}  "
        f"memory ({mem['method']}, {mem['precision_of_breakdown']}): weights {gib(mem['weights_bytes'])}, "
        f"grads {gib(mem['grads_bytes'])}, optimizer {gib(mem['optimizer_bytes'])}, activations "
        f"{mem['activation_bytes_per_sample'] / 1024**2:,.1f} MiB/sample, fixed {gib(mem['fixed_bytes'])}"
    )
    for n in mem.get("notes", []):
        console.print(f"[yellow]note:[/] {n}")
    table = Table(show_lines=False, header_style="bold")
    for col, just in (("target", "left"), ("fits", "center"), ("peak", "right"), ("capacity", "right"),
                      ("max batch", "right"), ("step", "right"), ("samples/s", "right"),
                      ("calibrated", "center"), ("notes", "left")):  # fmt: skip
        table.add_column(col, justify=just, overflow="fold", no_wrap=col not in ("notes", "target"))
    has_ttt = any(t.time_to_train_s is not None for t in plan.targets)
    if has_ttt:
        table.add_column("time to train", justify="right")
    for t in plan.targets:
        row = [
            t.name,
            "[green]yes[/]" if t.fits else "[red]no[/]",
            gib(t.peak_bytes),
            gib(t.capacity_bytes),
            "-" if t.max_batch_size is None else f"{t.max_batch_size:,}",
            duration(t.step_time_s),
            "-" if math.isnan(t.samples_per_s) else f"{t.samples_per_s:,.1f}",
            "yes" if t.calibrated else "no",
            "; ".join(t.notes),
        ]
        if has_ttt:
            row.append(duration(t.time_to_train_s))
        table.add_row(*row)
    console.print(table)
    a = plan.assumptions
    eff = ", ".join(f"{k} {v:.0%}" for k, v in a["default_efficiency"].items())
    act = a["amp_activation_factor"] if plan.precision != "fp32" else 1
    console.print(
        f"[dim]GPU rows: peak = model states + activations x {act:g} + conv workspace "
        f"{gib(a['conv_workspace_bytes'])}; fits if peak <= {a['safety_margin']:.0%} of (capacity - "
        f"{gib(a['cuda_context_bytes'])} CUDA context). Step = roofline at efficiency {eff} of peak "
        "(ResNet-50, NVIDIA DeepLearningExamples) unless calibrated. CPU row measured by the probe.[/]"
    )
    rec = plan.recommendation
    if rec["target"]:
        console.print(f"[bold green]Recommendation:[/] {rec['target']}: {rec['reason']}")
    else:
        console.print(f"[bold red]No fit:[/] {rec['reason']}")


def render_gpus(gpus: list[GPU], console: Console) -> None:
    """Print the GPU catalog as a table (dense tensor TFLOPS)."""
    table = Table(header_style="bold")
    cols = ("name", "arch", "CC", "memory", "usable MiB", "BW GB/s", "FP32", "TF32", "FP16", "BF16",
            "INT8", "FP8", "NVLink GB/s", "PCIe", "TDP W", "checked")  # fmt: skip
    for c in cols:
        table.add_column(c, justify="left" if c in ("name", "arch", "checked") else "right")

    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:g}"

    for g in gpus:
        table.add_row(g.name, g.architecture, f"{g.compute_capability:.1f}", f"{g.memory_gib:g} GiB",
                      f(g.usable_memory_mib), f(g.mem_bw_gbps), f(g.fp32_tflops), f(g.tf32_tflops),
                      f(g.fp16_tflops), f(g.bf16_tflops), f(g.int8_tops), f(g.fp8_tflops), f(g.nvlink_gbps),
                      f"gen{g.pcie_gen} {g.pcie_gbps:g}", f(g.tdp_w), g.verified)  # fmt: skip
    console.print(table)
    console.print("Tensor figures are dense (no sparsity). Sources: `paddlefit gpus --json` (field `source`).")
