"""``paddlefit models``: list zoo model names with their default per-sample inputs."""

from __future__ import annotations

from paddlefit import options
from paddlefit.cli.common import out
from paddlefit.cli.params import Args, command
from paddlefit.jsondoc import to_json


@command(options.JSON)
def models_command(args: Args) -> None:
    """List the model zoo (paddle.vision.models classifiers and transformer configs) with default inputs, and the
    built-in large transformers `plan --gpus N` lays out without building them.

    Examples:
      paddlefit models
      paddlefit plan ernie-3.0-base-zh --input int64[512] --batch-size 32
      paddlefit plan llama-2-7b --gpus 8
    """
    from paddlefit.catalog.transformers import llm_transformer_names
    from paddlefit.models.zoo import zoo_rows

    rows = zoo_rows()
    llms = list(llm_transformer_names())
    if args.json_out:
        out.print_json(
            to_json(
                [{**r, "kind": "zoo"} for r in rows] + [{"name": n, "default_inputs": [], "kind": "llm"} for n in llms]
            )
        )
        return
    for r in rows:
        out.print(f"{r['name']:<24} {' '.join(r['default_inputs'])}", highlight=False)
    out.print(f"Large transformers for `plan NAME --gpus N` (parallel layouts, never built): {', '.join(llms)}.")
    out.print("Any other model: `package.module:factory` with `--input` and `--model-arg key=value`.")
