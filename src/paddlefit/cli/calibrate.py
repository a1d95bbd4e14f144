"""``paddlefit calibrate``: measure real training steps here and write a calibration file."""

from __future__ import annotations

import statistics

from rich.table import Table

from paddlefit import options
from paddlefit.cli.common import err, fail, out, quiet_paddle, stdout_to_stderr
from paddlefit.cli.params import Args, command
from paddlefit.fileio import atomic_write_text, check_output_path
from paddlefit.jsondoc import to_json


@command(
    options.MODEL,
    options.BATCH_SIZE_CALIBRATE,
    options.PRECISION_CALIBRATE,
    options.DEVICE_NAME,
    options.OUT_CALIBRATE,
    options.JSON_CALIBRATE,
)
def calibrate_command(args: Args) -> None:
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
    sizes = tuple(args.batch_size) if args.batch_size else options.BATCH_SIZE_CALIBRATE.shown["calib"]
    precs = [parse_enum(Precision, p, "--precision") for p in args.precision] if args.precision else None
    check_output_path(args.out_file)
    with err.status("calibrating...") as status, stdout_to_stderr():
        doc = run_calibration(
            models=args.model or None,
            batch_sizes=sizes,
            precisions=precs,  # type: ignore[arg-type]
            device_name=args.device_name,
            progress=lambda m: status.update(m),
        )
    try:
        atomic_write_text(args.out_file, to_json(doc) + "\n")
    except OSError as exc:
        raise fail(f"Could not write `{args.out_file}`: {exc.strerror or exc}; nothing was written.") from None
    if args.json_out:
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
    out.print(f"median |error| {statistics.median(errs):.1%}, max {max(errs):.1%}; wrote {args.out_file}")
