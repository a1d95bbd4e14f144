"""Collectives: the NCCL all-reduce model's predicted time against measured NCCL all-reduces by payload and system.

Data: ``bench/data/collectives/`` (stas00/ml-engineering@744d01e, conditions in its SOURCES.md): all-reduce bus
bandwidth from 32 KiB to 16 GiB on one 8x A100 node, one 8x H200 node, one and four 8x B200 nodes (8x 50 GB/s EFA
per node); 8 GiB all-reduces on 4-8 GPUs of an H200 and a B200 node (which algorithm NCCL picks); all-gather and
reduce-scatter at 16 GiB on 8x H200. Measured time of one all-reduce of P bytes over n ranks = P x 2(n-1)/n / busbw.

Model: :mod:`paddlefit.estimate.collectives` on the catalog's figures for the GPU (per-direction NVLink, NVSwitch,
compute capability) and the node's network GB/s. Beside it, the plain model it replaces: 2(n-1)/n x P / link, the
link being NVLink per direction inside a node and, across nodes, each GPU's share of the node's network (the LLM
planner's previous per-rank figure).

Per system: every payload's predicted and measured time; median |error| from 1 MiB up and the median ratio
(max(pred/meas, meas/pred)) below 1 MiB, and the worst payload. Targets: median |error| <= 15% from 1 MiB up and the
median ratio below 1 MiB <= 2x on every system; NCCL's ring/NVLS pick reproduced on every GPU count; the module's
fitted constants reproduced from these tables (0.5%). Exit code 1 when a target is missed.

Run: ``python bench/collectives.py``
"""

from __future__ import annotations

import csv
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from paddlefit.catalog.gpus import get_gpu
from paddlefit.estimate import collectives as co
from paddlefit.units import GIB, MIB

DATA = Path(__file__).resolve().parent / "data" / "collectives"
TARGET_LARGE = 0.15  # median |error| from 1 MiB up
TARGET_SMALL = 2.0  # median ratio below 1 MiB
TARGET_CONSTANTS = 0.005

#: The systems of allreduce_busbw.csv: (catalog GPU, nodes, network GB/s per node: 8 EFA v4 x 50 GB/s on p6-b200).
SYSTEMS = {
    "8x A100 (one node)": ("A100-SXM4-80GB", 1, None),
    "8x H200 (one node)": ("H200", 1, None),
    "8x B200 (one node, AWS p6-b200.48xlarge)": ("B200", 1, None),
    "4 nodes x 8x B200 (AWS p6-b200.48xlarge)": ("B200", 4, 8 * 50.0),
}


def _read(name: str) -> list[dict[str, str]]:
    with open(DATA / name, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _size(nbytes: float) -> str:
    return f"{nbytes / MIB:g} MiB" if nbytes >= MIB else f"{nbytes / 1024:g} KiB"


def _ratio(pred: float, meas: float) -> float:
    return max(pred / meas, meas / pred)


def payload_sweep(console: Console) -> bool:
    """One table per system, then the summary; True when every system meets both targets."""
    by_system: dict[str, list[dict[str, str]]] = {}
    for r in _read("allreduce_busbw.csv"):
        by_system.setdefault(r["system"], []).append(r)
    summary = Table(
        title="summary: all-reduce time, model vs measured (plain: 2(n-1)/n x P / link); |err| = median "
        "|error| from 1 MiB up, ratio = median max(pred/meas, meas/pred) below 1 MiB"
    )
    for c in ("system", "model |err|", "model ratio", "model worst", "plain |err|", "plain ratio", "target"):
        summary.add_column(c, justify="left" if c in ("system", "model worst") else "right")
    ok = True
    for system, rows in by_system.items():
        gpu_name, nodes, network = SYSTEMS[system]
        gpu = get_gpu(gpu_name)
        n = int(rows[0]["ranks"])
        fabric = co.node_fabric(gpu, n // nodes, network)
        plain_link = fabric.link_gb_s if nodes == 1 else network / (n // nodes)  # type: ignore[operator]
        t = Table(
            title=f"{system}: {n} ranks on {nodes} node(s), {gpu.name} {fabric.link} "
            f"{fabric.link_gb_s:g} GB/s per direction" + (f", network {network:g} GB/s per node" if network else "")
        )
        for c in ("payload", "measured us", "model us", "NCCL path (model)", "error", "plain us", "plain error"):
            t.add_column(c, justify="left" if c in ("payload", "NCCL path (model)") else "right")
        large, small, plain_large, plain_small, worst = [], [], [], [], (0.0, "")
        for r in rows:
            p = int(r["payload_bytes"])
            meas = p * 2 * (n - 1) / n / (float(r["busbw_gb_s"]) * 1e9)
            c = co.collective("allreduce", p, n, fabric, nodes)
            plain = 2 * (n - 1) / n * p / (plain_link * 1e9)
            err, plain_err = c.seconds / meas - 1, plain / meas - 1
            if p >= MIB:
                large.append(abs(err))
                plain_large.append(abs(plain_err))
            else:
                small.append(_ratio(c.seconds, meas))
                plain_small.append(_ratio(plain, meas))
            if _ratio(c.seconds, meas) > worst[0]:
                worst = (_ratio(c.seconds, meas), f"{_size(p)} {err:+.0%}")
            t.add_row(
                _size(p),
                f"{meas * 1e6:,.1f}",
                f"{c.seconds * 1e6:,.1f}",
                f"{c.algorithm} {c.protocol}",
                f"{err:+.1%}",
                f"{plain * 1e6:,.1f}",
                f"{plain_err:+.1%}",
            )
        console.print(t)
        med_l, med_s = statistics.median(large), statistics.median(small)
        met = med_l <= TARGET_LARGE and med_s <= TARGET_SMALL
        ok &= met
        summary.add_row(
            system,
            f"{med_l:.1%}",
            f"{med_s:.2f}x",
            worst[1],
            f"{statistics.median(plain_large):.1%}",
            f"{statistics.median(plain_small):.2f}x",
            "MET" if met else "MISSED",
        )
    console.print(summary)
    return ok


def by_gpu_count(console: Console) -> bool:
    """8 GiB all-reduces on 4-8 GPUs: the model's ring/NVLS pick and bus bandwidth against NCCL's; True when every
    pick is reproduced."""
    t = Table(title="8 GiB all-reduce by GPU count: NCCL's pick and busbw vs the model")
    for c in (
        "node",
        "GPUs",
        "NCCL picks",
        "model picks",
        "busbw GB/s",
        "model GB/s",
        "error",
        "busbw NVLS off",
        "model ring",
    ):
        t.add_column(c, justify="left" if c in ("node", "NCCL picks", "model picks") else "right")
    ok = True
    for r in _read("allreduce_by_gpu_count.csv"):
        gpu = get_gpu(r["node"].split()[-1])
        g, p = int(r["gpus_engaged"]), 8 * GIB
        fabric = co.node_fabric(gpu, g)
        c = co.collective("allreduce", p, g, fabric)
        ring = co.collective("allreduce", p, g, replace(fabric, nvswitch=False))  # NCCL_NVLS_ENABLE=0
        bus = 2 * (g - 1) / g * p / c.seconds / 1e9
        bus_ring = 2 * (g - 1) / g * p / ring.seconds / 1e9
        same = c.algorithm.lower() == r["algorithm_nccl_picks"].lower()
        ok &= same
        t.add_row(
            r["node"],
            str(g),
            r["algorithm_nccl_picks"],
            c.algorithm.upper() if c.algorithm == "nvls" else c.algorithm.capitalize(),
            r["busbw_gb_s"],
            f"{bus:,.1f}",
            f"{bus / float(r['busbw_gb_s']) - 1:+.1%}",
            r["busbw_gb_s_nvls_off"],
            f"{bus_ring:,.1f}",
        )
    console.print(t)
    console.print(f"NCCL's ring/NVLS pick reproduced on every GPU count: {'MET' if ok else 'MISSED'}")
    return ok


def h200_collectives(console: Console) -> None:
    """16 GiB all-reduce (NVLS on and off), all-gather and reduce-scatter on 8x H200: busbw against the model."""
    gpu = get_gpu("H200")
    fabric = co.node_fabric(gpu, 8)
    t = Table(title="8x H200, 16 GiB: busbw by collective (the ring rows are where RING_EFFICIENCY is fitted)")
    for c in ("collective", "measured GB/s", "model GB/s", "error"):
        t.add_column(c, justify="left" if c == "collective" else "right")
    kinds = {
        "all-reduce (NCCL_NVLS_ENABLE=1)": ("allreduce", fabric),
        "all-reduce (NCCL_NVLS_ENABLE=0)": ("allreduce", replace(fabric, nvswitch=False)),
        "all-gather": ("allgather", fabric),
        "reduce-scatter": ("reduce_scatter", fabric),
    }
    for r in _read("collectives_h200.csv"):
        kind, fab = kinds[r["collective"]]
        p, n = 16 * GIB, int(r["ranks"])
        s = co.collective(kind, p, n, fab).seconds
        bus = (2 if kind == "allreduce" else 1) * (n - 1) / n * p / s / 1e9
        t.add_row(r["collective"], r["busbw_gb_s"], f"{bus:,.1f}", f"{bus / float(r['busbw_gb_s']) - 1:+.1%}")
    console.print(t)


def fitted_constants(console: Console) -> bool:
    """Recompute the module's fitted constants from the tables; True when each is within 0.5% (NVLS_PICK: inside
    the interval the picks allow)."""
    ring = [float(r["busbw_gb_s"]) for r in _read("collectives_h200.csv") if r["algorithm"] == "Ring"]
    link_h200 = get_gpu("H200").nvlink_gb_s / 2  # type: ignore[operator]
    ring_eff = statistics.mean(ring) / link_h200
    scale, lo, hi = [], 0.0, float("inf")
    for r in _read("allreduce_by_gpu_count.csv"):
        gpu = get_gpu(r["node"].split()[-1])
        g, eff = int(r["gpus_engaged"]), co.nvls_efficiency(gpu.compute_capability)
        if r["algorithm_nccl_picks"] == "NVLS":
            algbw = float(r["busbw_gb_s"]) * g / (2 * (g - 1))
            scale.append(algbw / (eff * (g - 1) / g * gpu.nvlink_gb_s / 2))  # type: ignore[operator]
            hi = min(hi, eff * (g - 1))
        else:
            lo = max(lo, eff * (g - 1))
    over = []  # measured - the model without its call overhead, at 32 KiB on one node
    for r in _read("allreduce_busbw.csv"):
        if r["nodes"] == "1" and int(r["payload_bytes"]) == 32 * 1024:
            gpu_name, _, _ = SYSTEMS[r["system"]]
            n, p = int(r["ranks"]), 32 * 1024
            meas = p * 2 * (n - 1) / n / (float(r["busbw_gb_s"]) * 1e9)
            model = co.allreduce_s(p, n, co.node_fabric(get_gpu(gpu_name), n)) - co.CALL_OVERHEAD_S
            over.append(meas - model)
    fits = [
        ("RING_EFFICIENCY", co.RING_EFFICIENCY, ring_eff, "mean of the 3 ring rows of collectives_h200.csv / 450"),
        ("NVLS_SCALE", co.NVLS_SCALE, statistics.median(scale), f"median of {len(scale)} NVLS rows"),
        ("CALL_OVERHEAD_S", co.CALL_OVERHEAD_S, statistics.median(over), "median of the 3 single-node 32 KiB rows"),
    ]
    ok = True
    t = Table(title="fitted constants, recomputed from the tables")
    for c in ("constant", "shipped", "refit", "rows"):
        t.add_column(c, justify="left" if c in ("constant", "rows") else "right")
    for name, shipped, refit, rows in fits:
        ok &= abs(shipped / refit - 1) <= TARGET_CONSTANTS
        t.add_row(name, f"{shipped:.4g}", f"{refit:.4g}", rows)
    inside = lo <= co.NVLS_PICK < hi
    ok &= inside
    t.add_row("NVLS_PICK", f"{co.NVLS_PICK:g}", f"[{lo:.2f}, {hi:.2f})", "the picks of allreduce_by_gpu_count.csv")
    console.print(t)
    console.print(
        f"fitted constants reproduced (within {TARGET_CONSTANTS:.1%}; NVLS_PICK inside its interval): "
        f"{'MET' if ok else 'MISSED'}"
    )
    return ok


def main() -> int:
    """Print the comparison; 1 when a target is missed."""
    console = Console(width=150)
    ok = payload_sweep(console)
    ok &= by_gpu_count(console)
    h200_collectives(console)
    ok &= fitted_constants(console)
    console.print(
        f"targets: median |error| <= {TARGET_LARGE:.0%} from 1 MiB up and median ratio <= "
        f"{TARGET_SMALL:g}x below 1 MiB on every system; NCCL's picks; fitted constants: "
        f"{'MET' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
