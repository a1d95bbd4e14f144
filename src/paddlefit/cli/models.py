"""``paddlefit models``: list zoo model names with their default per-sample inputs."""

from __future__ import annotations

import typer

from paddlefit.cli.common import handle_errors, out
from paddlefit.jsondoc import to_json


@handle_errors
def models_command(json_out: bool = typer.Option(False, "--json", help="Print one JSON document.")) -> None:
    """List the model zoo (paddle.vision.models classifiers and transformer configs) with default inputs.

    Examples:
      paddlefit models
      paddlefit plan ernie-3.0-base-zh --input int64[512] --batch-size 32
    """
    from paddlefit.models.zoo import zoo_rows

    rows = zoo_rows()
    if json_out:
        out.print_json(to_json(rows))
        return
    for r in rows:
        out.print(f"{r['name']:<24} {' '.join(r['default_inputs'])}", highlight=False)
    out.print("Any other model: `package.module:factory` with `--input` and `--model-arg key=value`.")
