"""``paddlefit profile``: where a training step's time goes, the bottleneck, and ranked fixes."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from paddlefit import options
from paddlefit.cli.common import err, out, quiet_paddle, shown, stdout_to_stderr
from paddlefit.cli.params import Args, command
from paddlefit.jsondoc import to_json


@command(options.CONFIG_ARG_PROFILE, options.STEPS, options.WARMUP, options.PLOT, options.OPS, options.JSON)
def profile_command(args: Args) -> None:
    """Run a few steps of the job on one device, time data wait, host-to-device copy, forward, backward and
    optimizer per step (mean and p95), sample CPU (and GPU) utilisation, and name the bottleneck with its
    evidence and a ranked list of fixes.

    Examples:
      paddlefit profile examples/digits-warped.yaml            # input-bound
      paddlefit profile examples/digits-wide.yaml --steps 20   # compute-bound
      paddlefit profile job.yaml --json --plot profile.png
      paddlefit profile job.yaml --ops 10                      # + operator top-10 from paddle.profiler
    """
    from paddlefit.jobspec.spec import load_job_spec
    from paddlefit.profiling.profiler import plot_profile, profile_job

    quiet_paddle()
    spec = load_job_spec(args.config, option="CONFIG")
    if args.plot is not None:
        from paddlefit.fileio import check_output_path

        check_output_path(args.plot, "--plot")
    with err.status("profiling...") as status, stdout_to_stderr():
        result = profile_job(
            spec,
            steps=args.steps,
            warmup=args.warmup,
            progress=lambda d, n: status.update(f"profiling: step {d}/{n}"),
            top_ops=args.ops,
        )
    if args.plot is not None:
        plot_profile(result, str(args.plot))
        err.print(f"wrote {shown(str(args.plot))}", highlight=False)
    if args.json_out:
        print(to_json(result.to_dict()))
        return
    render_breakdown(result, out)
    mfu = f", MFU {result.mfu:.1%}" if result.mfu is not None else ""
    out.print(f"{result.samples_per_s:,.0f} samples/s, {result.achieved_flops_per_s / 1e9:,.2f} GFLOP/s achieved{mfu}")
    out.print(f"verdict: [bold]{result.verdict}[/]")
    for e in result.evidence:
        out.print(f"  - {shown(e)}")
    if result.operators:
        table = Table(
            title="operators with the most time (paddle.profiler; nested events overlap)", box=None, padding=(0, 2)
        )
        for col in ("operator", "calls/step", "ms/step", "share of step"):
            table.add_column(col, justify="left" if col == "operator" else "right")
        for o in result.operators:
            table.add_row(shown(o["name"]), f"{o['calls']:,.0f}", f"{o['ms_per_step']:,.2f}", f"{o['share']:.0%}")
        out.print(table)
        slow = result.operators[0]["profiled_step_s"] / result.step_mean_s - 1 if result.step_mean_s else 0.0
        out.print(
            f"[dim]profiled steps took {result.operators[0]['profiled_step_s'] * 1e3:,.1f} ms, {slow:+.0%} vs "
            "the timed ones (profiler overhead); shares are of the profiled step[/]"
        )
    if result.fixes:
        out.print("fixes, most promising first:")
        for i, f in enumerate(result.fixes, 1):
            gain = str(f["expected_gain"])
            basis = "" if gain.startswith(f.get("basis", "hypothesis")) else f"{f.get('basis', 'hypothesis')}: "
            out.print(f"  {i}. {shown(f['fix'])}: {shown(f['why'])} ({shown(basis + gain)})")
        out.print(
            f"[dim]The gains are hypotheses (profile runs no fix): `paddlefit profile {shown(str(args.config))} "
            f"--json > profile.json; paddlefit tune {shown(str(args.config))} --profile profile.json` measures "
            "them first and says which hold.[/]",
            soft_wrap=True,
        )


def render_breakdown(result: Any, console: Console) -> None:
    """The headline (model, device, steps, batch) and the step's components: mean and p95 (ms) and share of the
    mean step, labelled by :data:`paddlefit.profiling.verdict.COMPONENT_LABELS` (``data wait``, never the batch
    production time the evidence gives apart)."""
    from paddlefit.profiling.verdict import COMPONENT_LABELS

    console.print(
        f"[bold]{shown(result.model)}[/] on {shown(result.device)}: {result.steps} steps measured after "
        f"{result.warmup} warm-up, batch {result.global_batch}"
    )
    table = Table(box=None, padding=(0, 2))
    for col in ("component", "mean", "p95", "share of step"):
        table.add_column(col, justify="left" if col == "component" else "right")
    for name, b in result.breakdown.items():
        label = COMPONENT_LABELS.get(name, name) + (" (estimated)" if b.get("estimated") else "")
        table.add_row(label, f"{b['mean_s'] * 1e3:,.2f} ms", f"{b['p95_s'] * 1e3:,.2f} ms", f"{b['share']:.0%}")
    table.add_row("[bold]step[/]", f"{result.step_mean_s * 1e3:,.2f} ms", f"{result.step_p95_s * 1e3:,.2f} ms", "")
    console.print(table)
