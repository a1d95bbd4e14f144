"""``paddlefit gpus``: list the GPU catalog (shipped rows plus ``--catalog`` files)."""

from __future__ import annotations

from pathlib import Path

import typer

from paddlefit.cli.common import handle_errors, out
from paddlefit.jsondoc import to_json


@handle_errors
def gpus_command(
    catalog: list[Path] = typer.Option(None, "--catalog", help="Extra GPU CSV (same header); adds/overrides rows."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document (with each row's source)."),
    csv_out: bool = typer.Option(False, "--csv", help="Print the catalog as CSV (a template for `--catalog`)."),
) -> None:
    """List the GPU catalog: memory, bandwidth, dense TFLOPS per precision, interconnect, TDP, source.

    Examples:
      paddlefit gpus
      paddlefit gpus --json | jq '.[] | select(.name=="L4")'
      paddlefit gpus --catalog my_gpus.csv
      paddlefit gpus --csv > my_gpus.csv   # edit, then pass with --catalog
    """
    from paddlefit.catalog.gpus import catalog_csv, catalog_docs, load_gpus
    from paddlefit.cli.render.tables import render_gpus

    rows = load_gpus(catalog or [])
    if csv_out:
        print(catalog_csv(rows), end="")
        return
    if json_out:
        out.print_json(to_json(catalog_docs(rows)))
        return
    render_gpus(rows, out)
