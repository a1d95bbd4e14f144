"""``paddlefit export``: a run's checkpoint as a ``paddle.jit.save`` inference model, checked after reload."""

from __future__ import annotations

from pathlib import Path

import typer

from paddlefit.cli.common import err, handle_errors, out, quiet_paddle, shown, stdout_to_stderr
from paddlefit.report.render import to_json


@handle_errors
def export_command(
    run_dir: Path = typer.Argument(..., help="The --run-dir of a `paddlefit train` run."),
    checkpoint: Path = typer.Option(None, "--checkpoint", help="A checkpoint directory "
                                    "(RUN_DIR/checkpoints/step-...). Default: the newest that verifies."),
    out_dir: Path = typer.Option(None, "--out", help="Output directory (default: RUN_DIR/inference)."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Export a checkpoint with paddle.jit.save, reload it with paddle.jit.load and check its outputs against the
    dynamic model on a sample batch (rtol 1e-5, atol 1e-6). Nothing is left behind if the check fails.

    Examples:
      paddlefit export runs/digits
      paddlefit export runs/digits --checkpoint runs/digits/checkpoints/step-00000400 --out model/
    """
    quiet_paddle()
    from paddlefit.textsafe import name_safe
    from paddlefit.train.export import export_run

    with err.status("exporting..."), stdout_to_stderr():
        res = export_run(run_dir, checkpoint, out_dir)
    doc = {"out_dir": str(res.out_dir), "prefix": str(res.out_dir / "model"), "checkpoint": str(res.checkpoint),
           "files": res.files, "max_abs_diff": res.max_abs_diff, "sample_batch": res.sample_batch}  # fmt: skip
    if json_out:
        print(to_json(doc))
        return
    out.print(f"exported {shown(name_safe(res.checkpoint))} -> {shown(name_safe(res.out_dir / 'model'))} "
              f"({', '.join(res.files)})", soft_wrap=True)  # fmt: skip
    out.print(f"paddle.jit.load check on {res.sample_batch} samples: max |diff| = {res.max_abs_diff:.3g} (ok)")
