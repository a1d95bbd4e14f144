"""``paddlefit gpus``: list the GPU catalog (shipped rows plus ``--catalog`` files)."""

from __future__ import annotations

from paddlefit import options
from paddlefit.cli.common import fail, out
from paddlefit.cli.params import Args, command
from paddlefit.jsondoc import to_json


@command(options.CATALOG_GPUS, options.JSON_GPUS, options.CSV)
def gpus_command(args: Args) -> None:
    """List the GPU catalog: memory, bandwidth, dense TFLOPS per precision, interconnect, TDP, source.

    Examples:
      paddlefit gpus
      paddlefit gpus --json | jq '.[] | select(.name=="L4")'
      paddlefit gpus --catalog my_gpus.csv
      paddlefit gpus --csv > my_gpus.csv   # edit, then pass with --catalog
    """
    from paddlefit.catalog.gpus import catalog_csv, catalog_docs, load_gpus
    from paddlefit.cli.render.tables import render_gpus

    if args.csv_out and args.json_out:
        raise fail("`--csv` and `--json` each print the whole catalog; give one of them.")
    rows = load_gpus(args.catalog or [])
    if args.csv_out:
        print(catalog_csv(rows), end="")
        return
    if args.json_out:
        out.print_json(to_json(catalog_docs(rows)))
        return
    render_gpus(rows, out)
