"""``paddlefit runs``: the run registry, each `paddlefit train` run with its configuration, predicted and measured
figures (list, ``show ID``, ``compare ID ID``)."""

from __future__ import annotations

from pathlib import Path

import typer

from paddlefit.cli.common import handle_errors, out, shown
from paddlefit.jsondoc import to_json

runs_app = typer.Typer(
    invoke_without_command=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@runs_app.callback(invoke_without_command=True)
@handle_errors
def runs_command(
    ctx: typer.Context,
    json_out: bool = typer.Option(False, "--json", help="Print the runs as one JSON list (every field)."),
    model: str = typer.Option(
        None,
        "--model",
        help="Only runs of this model: the spec's `model` string or its name "
        "after the module (`digits_cnn` for `paddlefit.models.examples:digits_cnn`), "
        "case-insensitive.",
    ),
    device: str = typer.Option(
        None, "--device", help="Only runs on this device name (L4, A100-SXM4-80GB, cpu) or kind (gpu, cpu)."
    ),
    last: int = typer.Option(None, "--last", help="Only the newest N runs (N >= 1)."),
    here: bool = typer.Option(
        False, "--here", help="Only the runs whose run directory is under the current directory (this project's)."
    ),
    wide: bool = typer.Option(
        False, "--wide", help="Every column at its full width (default: the columns that fit the terminal)."
    ),
) -> None:
    """List the runs `paddlefit train` recorded; `show` one, `compare` two.

    One row per run, newest first: status, model, device x count, precision, global batch, steps, measured
    samples/s, predicted/measured step time, final loss, eval accuracy, model, run directory; the columns that fit
    the terminal unless --wide. The registry is
    $PADDLEFIT_HOME/runs.db, or runs.db in the user data directory (~/.local/share/paddlefit on Linux).

    Examples:
      paddlefit runs
      paddlefit runs --model resnet50 --device L4 --last 5
      paddlefit runs --here --wide
      paddlefit runs --json | jq '.[] | select(.status=="finished") | .measured_samples_per_s'
      paddlefit runs show 12
      paddlefit runs compare 11 12
    """
    if ctx.invoked_subcommand is not None:
        return
    from paddlefit.cli.render.runs import render_runs
    from paddlefit.runs import Registry
    from paddlefit.runs.view import runs_under

    registry = Registry()
    rows = registry.list_runs(model=model, device=device, last=None if here else last)
    if here:
        rows = runs_under(rows, Path.cwd())[:last]
    if json_out:
        print(to_json(rows))
        return
    if not rows:
        if here:
            out.print(
                f"no recorded run has its run directory under {shown(str(Path.cwd()))}; `paddlefit runs` "
                "lists every run of the registry."
            )
        elif model is None and device is None:
            out.print(f"no runs recorded yet in {shown(str(registry.path))}; `paddlefit train` records each run.")
        else:
            chosen = " ".join(f"{o} {v}" for o, v in (("--model", model), ("--device", device)) if v is not None)
            out.print(
                f"no recorded run matches {shown(chosen)} in {shown(str(registry.path))}; `paddlefit runs` "
                "lists them all."
            )
        return
    render_runs(rows, out, wide=wide)


@runs_app.command("show")
@handle_errors
def show_command(
    run_id: int = typer.Argument(..., help="A run id (the first column of `paddlefit runs`)."),
    json_out: bool = typer.Option(False, "--json", help="Print the run as one JSON object (every field)."),
) -> None:
    """Show every recorded field of one run and its predicted-vs-measured table.

    The table (step time, samples/s, peak memory, MFU, data wait) is shown when the trainer recorded one.

    Examples:
      paddlefit runs show 12
      paddlefit runs show 12 --json | jq .comparison_json.figures
    """
    from paddlefit.cli.render.runs import render_run
    from paddlefit.runs import Registry

    run = Registry().get_run(run_id)
    if json_out:
        print(to_json(run))
        return
    render_run(run, out)


@runs_app.command("compare")
@handle_errors
def compare_command(
    run_a: int = typer.Argument(..., help="The first run id (the baseline of the ratios)."),
    run_b: int = typer.Argument(..., help="The second run id."),
    json_out: bool = typer.Option(False, "--json", help="Print the comparison as one JSON object."),
) -> None:
    """Two runs side by side, `*` marking what differs.

    Configuration (model, device, count, precision, micro-batch, accumulation, global batch, spec hash, versions)
    and figures (predicted and measured step time, samples/s, peak memory, MFU, final loss, eval accuracy) with the
    ratio B/A.

    Examples:
      paddlefit runs compare 11 12
      paddlefit runs compare 11 12 --json | jq '.figures[] | select(.differs)'
    """
    from paddlefit.cli.render.runs import render_compare
    from paddlefit.runs import Registry
    from paddlefit.runs.view import compare_runs

    registry = Registry()
    doc = compare_runs(registry.get_run(run_a), registry.get_run(run_b))
    if json_out:
        print(to_json(doc))
        return
    render_compare(doc, out)
