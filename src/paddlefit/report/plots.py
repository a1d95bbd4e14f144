"""The report's plots, drawn by matplotlib (Agg) as inline SVG: loss and eval by step, throughput and data wait by
step, samples/s over wall-clock time (a stop/kill and resume is a shaded gap), peak memory by step, the profiled
step-time breakdown. Resumes are drawn as vertical dashed lines on the by-step plots."""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from typing import Any

from paddlefit.units import MIB

#: at most this many points a line (longer series are strided, the last point kept)
MAX_POINTS = 4000
RESUME_COLOR = "#c0392b"


def thin(xs: Sequence[float], ys: Sequence[float]) -> tuple[list[float], list[float]]:
    """At most :data:`MAX_POINTS` of (xs, ys), evenly strided, the last point kept."""
    if len(xs) <= MAX_POINTS:
        return list(xs), list(ys)
    stride = -(-len(xs) // MAX_POINTS)
    idx = list(range(0, len(xs), stride))
    if idx[-1] != len(xs) - 1:
        idx.append(len(xs) - 1)
    return [xs[i] for i in idx], [ys[i] for i in idx]


def rolling_mean(ys: Sequence[float], window: int) -> list[float]:
    """Trailing mean over ``window`` points (fewer at the start)."""
    out, total = [], 0.0
    for i, y in enumerate(ys):
        total += y
        if i >= window:
            total -= ys[i - window]
        out.append(total / min(i + 1, window))
    return out


def figure(height: float = 3.2, rows: int = 1) -> tuple[Any, Any]:
    """A new Agg figure (``rows`` stacked axes sharing x), SVG text kept as text (no embedded glyphs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    matplotlib.rcParams["svg.fonttype"] = "none"
    fig, axes = plt.subplots(rows, 1, figsize=(8.0, height), sharex=True, squeeze=False)
    return fig, [a[0] for a in axes]


def to_svg(fig: Any, prefix: str) -> str:
    """The figure as an ``<svg>`` element (no XML prolog), every id prefixed with ``prefix`` so several plots can
    share a page; the figure is closed."""
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None}, bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    text = re.sub(r"<metadata>.*?</metadata>", "", text[text.index("<svg") :], flags=re.S)
    text = re.sub(r'\bid="', f'id="{prefix}-', text)
    text = text.replace("url(#", f"url(#{prefix}-").replace('href="#', f'href="#{prefix}-')
    return text


def mark_resumes(axes: Sequence[Any], steps: Sequence[int]) -> None:
    """A dashed vertical line at each resume step on every axis (labelled once, on the first)."""
    for ax in axes:
        for i, s in enumerate(steps):
            ax.axvline(
                s,
                color=RESUME_COLOR,
                linestyle="--",
                linewidth=1.2,
                label="resumed" if ax is axes[0] and i == 0 else None,
            )


def loss_plot(train: list[dict[str, Any]], evals: list[dict[str, Any]], resumes: Sequence[int]) -> str:
    """Train loss by step, eval loss (markers) on the same axis, eval accuracy on a second axis."""
    fig, (ax,) = figure()
    xs, ys = thin([r["step"] for r in train], [r["loss"] for r in train])
    ax.plot(xs, ys, color="#2c7fb8", linewidth=0.8, label="train loss")
    ev = [r for r in evals if isinstance(r.get("eval_loss"), int | float)]
    if ev:
        ax.plot([r["step"] for r in ev], [r["eval_loss"] for r in ev], "o-", color="#e67e22", label="eval loss")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss")
    if ys and min(ys) > 0 and max(ys) / min(ys) > 50:
        ax.set_yscale("log")
    mark_resumes([ax], resumes)
    handles, labels = ax.get_legend_handles_labels()
    acc = [r for r in evals if isinstance(r.get("eval_accuracy"), int | float)]
    ax2 = ax.twinx() if acc else None
    if ax2 is not None:
        ax2.plot(
            [r["step"] for r in acc], [r["eval_accuracy"] for r in acc], "s--", color="#27ae60", label="eval accuracy"
        )
        ax2.set_ylabel("eval accuracy")
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    # above the axes, not over the points (an eval point under a legend is lost)
    ax.legend(handles, labels, loc="lower left", bbox_to_anchor=(0, 1.02), ncol=3, fontsize=8, frameon=False)
    ax.grid(alpha=0.3)
    return to_svg(fig, "loss")


def throughput_plot(train: list[dict[str, Any]], resumes: Sequence[int]) -> str:
    """Samples/s by step (each step and a 20-step mean) above data wait (ms) by step."""
    fig, (top, bottom) = figure(height=4.6, rows=2)
    steps = [r["step"] for r in train]
    rate = [float(r.get("samples_per_s") or 0.0) for r in train]
    wait = [float(r.get("data_wait_s") or 0.0) * 1e3 for r in train]
    xs, ys = thin(steps, rate)
    top.plot(xs, ys, color="#9ecae1", linewidth=0.6, label="each step")
    top.plot(*thin(steps, rolling_mean(rate, 20)), color="#08519c", linewidth=1.2, label="20-step mean")
    top.set_ylabel("samples/s")
    bottom.plot(*thin(steps, wait), color="#8e44ad", linewidth=0.7, label="data wait")
    bottom.set_ylabel("data wait (ms)")
    bottom.set_xlabel("optimizer step")
    mark_resumes([top, bottom], resumes)
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
    return to_svg(fig, "throughput")


def time_plot(train: list[dict[str, Any]], gaps: Sequence[tuple[float, float, float]]) -> str | None:
    """Samples/s (each step and a 20-step mean) over wall-clock time since the first train line (seconds, minutes
    from a run of 5 minutes on), the line broken
    (NaN) across each ``gap`` (Unix seconds of the lines either side, down seconds) and the gap shaded, labelled
    "down N s";
    None when the train lines have no ``time`` (metrics of an older paddlefit)."""
    rows = [r for r in train if isinstance(r.get("time"), int | float) and not isinstance(r.get("time"), bool)]
    if len(rows) < 2:
        return None
    rows.sort(key=lambda r: r["time"])
    t0 = float(rows[0]["time"])
    span = float(rows[-1]["time"]) - t0
    scale, unit = (60.0, "minutes") if span >= 300 else (1.0, "seconds")  # a short run reads in seconds
    rate = [float(r.get("samples_per_s") or 0.0) for r in rows]
    mean = rolling_mean(rate, 20)
    starts = sorted(b for _, b, _ in gaps)
    xs: list[float] = []
    ys: list[float] = []
    ms: list[float] = []
    for r, y, m in zip(rows, rate, mean, strict=True):
        t = float(r["time"])
        while starts and t >= starts[0]:
            starts.pop(0)
            if xs:
                xs.append(float("nan"))
                ys.append(float("nan"))
                ms.append(float("nan"))
        xs.append((t - t0) / scale)
        ys.append(y)
        ms.append(m)
    fig, (ax,) = figure()
    ax.plot(*thin(xs, ys), color="#9ecae1", linewidth=0.6, label="each step")
    ax.plot(*thin(xs, ms), color="#08519c", linewidth=1.2, label="20-step mean")
    top = max((y for y in ys if y == y), default=1.0)
    for i, (a, b, down) in enumerate(gaps):
        xa, xb = (a - t0) / scale, (b - t0) / scale
        ax.axvspan(
            xa, xb, color=RESUME_COLOR, alpha=0.15, linewidth=0, label="down (stop/kill + resume)" if i == 0 else None
        )
        ax.text(
            (xa + xb) / 2,
            top * 0.5,
            f"down {down:.0f} s",
            color=RESUME_COLOR,
            ha="center",
            va="center",
            rotation=90,
            fontsize=8,
        )
    ax.set_ylabel("samples/s")
    ax.set_xlabel(f"wall-clock {unit} since the first step")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return to_svg(fig, "time")


def memory_plot(train: list[dict[str, Any]], resumes: Sequence[int]) -> str | None:
    """Peak allocated memory (MiB) by step, or None when no train line has ``peak_memory_bytes`` (CPU runs)."""
    rows = [r for r in train if isinstance(r.get("peak_memory_bytes"), int | float)]
    if not rows:
        return None
    fig, (ax,) = figure()
    ax.plot(
        *thin([r["step"] for r in rows], [r["peak_memory_bytes"] / MIB for r in rows]),
        color="#d35400",
        linewidth=1.0,
        label="peak allocated",
    )
    ax.set_ylabel("peak allocated (MiB)")
    ax.set_xlabel("optimizer step")
    mark_resumes([ax], resumes)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return to_svg(fig, "memory")


def profile_plot(profile: dict[str, Any]) -> str | None:
    """The step-time breakdown of a ``paddlefit profile --json`` document: one horizontal bar per component (mean
    ms, p95 as a whisker), or None when it has no usable ``breakdown``."""
    breakdown = profile.get("breakdown")
    if not isinstance(breakdown, dict):
        return None
    rows = [
        (str(k), float(v["mean_s"]) * 1e3, float(v.get("p95_s") or v["mean_s"]) * 1e3)
        for k, v in breakdown.items()
        if isinstance(v, dict) and isinstance(v.get("mean_s"), int | float)
    ]
    if not rows:
        return None
    fig, (ax,) = figure(height=0.5 + 0.35 * len(rows))
    names, means, p95 = zip(*rows, strict=True)
    ax.barh(
        names,
        means,
        color="#3182bd",
        xerr=[[0] * len(rows), [max(p - m, 0) for p, m in zip(p95, means, strict=True)]],
        capsize=3,
        label="mean (whisker: p95)",
    )
    ax.invert_yaxis()
    ax.set_xlabel("ms per step")
    ax.grid(alpha=0.3, axis="x")
    ax.legend(loc="lower right", fontsize=8)
    return to_svg(fig, "profile")
