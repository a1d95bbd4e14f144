"""``paddlefit gpus``: list the GPU catalog (shipped rows plus ``--catalog`` files)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import typer

from paddlefit.catalog.gpus import COLUMNS, load_gpus
from paddlefit.cli.common import handle_errors, out
from paddlefit.report.render import render_gpus, to_json


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
    rows = load_gpus(catalog or [])
    if csv_out:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        for g in rows:
            d = g.model_dump()
            d["aliases"] = ";".join(g.aliases)
            writer.writerow({k: "" if d[k] is None else d[k] for k in COLUMNS})
        print(buf.getvalue(), end="")
        return
    if json_out:
        docs = []
        for g in rows:
            d = g.model_dump()
            d["capacity_bytes"] = g.capacity_bytes
            docs.append(d)
        out.print_json(to_json(docs))
        return
    render_gpus(rows, out)
