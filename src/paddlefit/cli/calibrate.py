"""``paddlefit calibrate``: measure real training steps here and write a calibration file."""

from __future__ import annotations

import statistics
from pathlib import Path

import typer
from rich.table import Table

from paddlefit.cli.common import err, fail, handle_errors, out, quiet_paddle, stdout_to_stderr
from paddlefit.fileio import atomic_write_text, check_output_path
from paddlefit.jsondoc import to_json


@handle_errors
def calibrate_command(
    model: list[str] = typer.Option(
        None, "--model", "-m", help="Zoo model to measure (repeatable). Default: lenet, mobilenet_v3_small, resnet18."
    ),
    batch_size: list[int] = typer.Option(None, "--batch-size", "-b", help="Batch sizes (repeatable). Default 4, 8."),
    precision: list[str] = typer.Option(
        None,
        "--precision",
        help="Precisions (repeatable). Default: fp32 on CPU; fp32 + bf16-o1 (fp16-o1 before Ampere) on GPU.",
    ),
    device_name: str = typer.Option(
        None,
        "--device-name",
        help="Catalog GPU name to file results under (default: matched from the CUDA device name).",
    ),
    out_file: Path = typer.Option(Path("calibration.json"), "--out", "-o", help="Calibration file to write."),
    json_out: bool = typer.Option(False, "--json", help="Print the calibration document on stdout."),
) -> None:
    """Measure peak allocated memory and step time of zoo models on this device; write a calibration file.

    Run it on the GPU you want to plan for, then `paddlefit plan ... --calibration FILE`: that GPU's rows
    use the measured memory ratio and CUDA context and, from the kernels timed on it (GEMM, convolution,
    depthwise convolution, elementwise, launch cost), the per-operator model's parameters for that device
    (`calibration: device`). On a CPU it measures memory and step time only.

    Examples:
      paddlefit calibrate --out cpu.json
      paddlefit calibrate -m resnet50 -m bert-base -b 16 -b 32 --out a100.json   # on the GPU machine
      paddlefit plan resnet50 -b 256 --calibration a100.json
    """
    from paddlefit.calibrate.measure import run_calibration
    from paddlefit.jobspec.spec import Precision, parse_enum
    from paddlefit.units import gib

    quiet_paddle()
    sizes = tuple(batch_size) if batch_size else (4, 8)
    precs = [parse_enum(Precision, p, "--precision") for p in precision] if precision else None
    check_output_path(out_file)
    with err.status("calibrating...") as status, stdout_to_stderr():
        doc = run_calibration(
            models=model or None,
            batch_sizes=sizes,
            precisions=precs,  # type: ignore[arg-type]
            device_name=device_name,
            progress=lambda m: status.update(m),
        )
    try:
        atomic_write_text(out_file, to_json(doc) + "\n")
    except OSError as exc:
        raise fail(f"Could not write `{out_file}`: {exc.strerror or exc}; nothing was written.") from None
    if json_out:
        print(to_json(doc))
        return
    table = Table(header_style="bold", title=f"calibration on {doc['device']} ({doc['device_name']})")
    for c in ("model", "batch", "precision", "measured peak", "predicted", "error", "step", "predicted step"):
        table.add_column(c, justify="left" if c in ("model", "precision") else "right")
    errs = []
    for r in doc["rows"]:
        e = r["predicted_peak_bytes"] / r["peak_bytes"] - 1
        errs.append(abs(e))
        table.add_row(
            r["model"],
            str(r["batch_size"]),
            r["precision"],
            gib(r["peak_bytes"]),
            gib(r["predicted_peak_bytes"]),
            f"{e:+.1%}",
            f"{r['step_time_s']:.3f} s",
            f"{r['predicted_step_time_s']:.3f} s",
        )
    out.print(table)
    out.print(f"median |error| {statistics.median(errs):.1%}, max {max(errs):.1%}; wrote {out_file}")
