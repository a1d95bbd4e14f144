"""The ``paddlefit`` command: registers one verb per module (``paddlefit --help`` lists them)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from paddlefit import __version__, options
from paddlefit.cli.calibrate import calibrate_command
from paddlefit.cli.cost import cost_command
from paddlefit.cli.doctor import doctor_command
from paddlefit.cli.export import export_command
from paddlefit.cli.gpus import gpus_command
from paddlefit.cli.image import image_command
from paddlefit.cli.launch import launch_command
from paddlefit.cli.models import models_command
from paddlefit.cli.plan import plan_command
from paddlefit.cli.profile import profile_command
from paddlefit.cli.report import report_command
from paddlefit.cli.runs import runs_app
from paddlefit.cli.train import train_command
from paddlefit.cli.tune import tune_command

app = typer.Typer(
    name="paddlefit",
    help="Make PaddlePaddle training fit its hardware: plan memory, speed and hardware for a job.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("plan")(plan_command)
app.command("cost")(cost_command)
app.command("train")(train_command)
app.command("export")(export_command)
app.command("report")(report_command)
app.command("gpus")(gpus_command)
app.command("models")(models_command)
app.command("calibrate")(calibrate_command)
app.command("doctor")(doctor_command)
app.command("image")(image_command)
app.command("launch")(launch_command)
app.command("profile")(profile_command)
app.command("tune")(tune_command)
app.add_typer(runs_app, name="runs")


def _version(value: bool) -> None:
    if value:
        print(f"paddlefit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        options.VERSION.default, *options.VERSION.decls, callback=_version, is_eager=True, help=options.VERSION.help
    ),
) -> None:
    """Make PaddlePaddle training fit its hardware."""
    from paddlefit.process.userimport import add_import_dir

    try:
        cwd = Path.cwd()
    except OSError:  # Paddle's own import opens log files relative to it and fails with a traceback
        print(
            "error: the current directory no longer exists (deleted or unmounted); cd to an existing folder and "
            "run the command again.",
            file=sys.stderr,
        )
        raise typer.Exit(2) from None
    add_import_dir(cwd, "the current directory")  # the user's own modules, after the installed packages


def main() -> None:
    """Console-script entry point (Ctrl-C before a command's own handler is installed: exit 130, no traceback).

    An option that does not parse (``-b x``, an unknown option) is typer's usage error, exit 2, its message on
    stderr; with ``--json`` one JSON error object is also printed on stdout, as every failing ``--json`` command
    does (:func:`paddlefit.cli.common.handle_errors` prints the others).
    """
    from paddlefit.cli import common

    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except SystemExit as exc:
        if exc.code == 2 and "--json" in sys.argv[1:] and not common.json_error_printed():
            import json

            # typer exits inside its handler of click's UsageError, so the exit's context is that error
            said = getattr(exc.__context__, "format_message", lambda: "")()
            why = f": {said}" if said else ": see the message on stderr"
            print(
                json.dumps(
                    {
                        "error": {
                            "type": "UsageError",
                            "message": f"the command line does not parse{why} (`--help` lists the options)",
                            "exit_code": 2,
                        }
                    }
                ),
                flush=True,
            )
        raise


if __name__ == "__main__":  # pragma: no cover
    main()
