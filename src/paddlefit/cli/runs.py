"""``paddlefit runs``: the run registry, each `paddlefit train` run with its configuration, predicted and measured
figures (list, ``show ID``, ``compare ID ID``)."""

from __future__ import annotations

from pathlib import Path

import typer

from paddlefit import options
from paddlefit.cli.common import fail, out, shown
from paddlefit.cli.params import Args, command
from paddlefit.jsondoc import to_json

runs_app = typer.Typer(
    invoke_without_command=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@runs_app.callback(invoke_without_command=True)
@command(options.JSON_RUNS, options.MODEL_DOCTOR_RUNS, options.DEVICE, options.LAST, options.HERE, options.WIDE_RUNS)
def runs_command(args: Args) -> None:
    """List the runs `paddlefit train` recorded; `show` one, `compare` two.

    One row per run, newest first: status, device x count, precision, global batch, steps, measured
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
    if args.ctx.invoked_subcommand is not None:
        typed = args.typed(*args.options)
        if typed:
            sub = args.ctx.invoked_subcommand
            raise fail(
                f"{', '.join(f'`{t}`' for t in typed)} {'applies' if len(typed) == 1 else 'apply'} to the list "
                f"of runs (`paddlefit runs`), not to `runs {sub}`: for JSON from it, put `--json` after `{sub}` "
                f"(`paddlefit runs {sub} ... --json`); leave the list options out."
            )
        return
    from paddlefit.cli.render.runs import render_runs
    from paddlefit.runs import Registry
    from paddlefit.runs.view import runs_under

    registry = Registry()
    rows = registry.list_runs(model=args.model, device=args.device, last=None if args.here else args.last)
    if args.here:
        rows = runs_under(rows, Path.cwd())[: args.last]
    if args.json_out:
        print(to_json(rows))
        return
    if not rows:
        if args.here:
            out.print(
                f"no recorded run has its run directory under {shown(str(Path.cwd()))}; `paddlefit runs` "
                "lists every run of the registry."
            )
        elif args.model is None and args.device is None:
            out.print(f"no runs recorded yet in {shown(str(registry.path))}; `paddlefit train` records each run.")
        else:
            chosen = " ".join(
                f"{o} {v}" for o, v in (("--model", args.model), ("--device", args.device)) if v is not None
            )
            out.print(
                f"no recorded run matches {shown(chosen)} in {shown(str(registry.path))}; `paddlefit runs` "
                "lists them all."
            )
        return
    render_runs(rows, out, wide=args.wide)


@runs_app.command("show")
@command(options.RUN_ID_ARG, options.JSON_RUNS_SHOW)
def show_command(args: Args) -> None:
    """Show every recorded field of one run and its predicted-vs-measured table.

    The table (step time, samples/s, peak memory, MFU, data wait) is shown when the trainer recorded one.

    Examples:
      paddlefit runs show 12
      paddlefit runs show 12 --json | jq .comparison_json.figures
    """
    from paddlefit.cli.render.runs import render_run
    from paddlefit.runs import Registry

    run = Registry().get_run(args.run_id)
    if args.json_out:
        print(to_json(run))
        return
    render_run(run, out)


@runs_app.command("compare")
@command(options.RUN_A_ARG, options.RUN_B_ARG, options.JSON_RUNS_COMPARE)
def compare_command(args: Args) -> None:
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
    doc = compare_runs(registry.get_run(args.run_a), registry.get_run(args.run_b))
    if args.json_out:
        print(to_json(doc))
        return
    render_compare(doc, out)
