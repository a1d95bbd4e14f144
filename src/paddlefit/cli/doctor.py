"""``paddlefit doctor``: check this machine (or a saved snapshot) and print each problem with its fix."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from paddlefit.cli.common import err, fail, handle_errors, out, quiet_paddle, stdout_to_stderr
from paddlefit.diagnose.checks import JobContext, run_checks
from paddlefit.diagnose.checks import fix_script as fix_script_text
from paddlefit.diagnose.snapshot import collect_snapshot, load_snapshot
from paddlefit.fileio import atomic_write_text, check_output_path
from paddlefit.report.render import to_json
from paddlefit.spec import load_job_spec, merge_loader_options, parse_input_spec

_STYLE = {"ok": "green", "warn": "yellow", "error": "bold red"}


def _checkpoint_bytes(model: str, model_args: dict | None = None) -> int:
    """Weights + Adam states of ``model`` (built under paddle.LazyGuard, or for real when that fails), bytes: what
    a checkpoint holds."""
    from paddlefit.errors import ModelError
    from paddlefit.estimate.memory import model_state_bytes
    from paddlefit.models.build import param_inventory
    from paddlefit.models.zoo import resolve_model
    from paddlefit.spec import OptimizerName, Precision

    ref = resolve_model(model, model_args)
    try:
        info, _ = param_inventory(ref)
    except ModelError as exc:
        raise ModelError(f"`--model {model}`: {exc}") from None
    st = model_state_bytes(info, OptimizerName.ADAM, Precision.FP32)
    return st.weights_bytes + st.optimizer_bytes


@handle_errors
def doctor_command(
    show_all: bool = typer.Option(False, "--all", help="Also list the checks that passed."),
    json_out: bool = typer.Option(False, "--json", help="Print {snapshot, findings} as one JSON document."),
    snapshot_file: Path = typer.Option(None, "--snapshot", help="Save the collected snapshot to this JSON file."),
    from_file: Path = typer.Option(None, "--from", help="Check a saved snapshot instead of this machine."),
    fix_script: bool = typer.Option(False, "--fix-script", help="Print the fixes that are shell exports/unsets."),
    num_workers: int = typer.Option(None, "--num-workers", help="DataLoader workers per trainer (shm, cores)."),
    prefetch_factor: int = typer.Option(None, "--prefetch-factor", help="DataLoader prefetch_factor [2]."),
    batch_size: int = typer.Option(None, "--batch-size", "-b", help="Per-device batch size (shm need)."),
    inputs: list[str] = typer.Option(None, "--input", "-i", help="Per-sample input spec, e.g. float32[3,224,224]."),
    devices: int = typer.Option(None, "--devices", help="Trainer processes on this machine [1]."),
    model: str = typer.Option(None, "--model", help="Zoo model or pkg.mod:factory (checkpoint size, disk check)."),
    run_dir: Path = typer.Option(None, "--run-dir", help="Where checkpoints will be written (disk check) [.]."),
    config: Path = typer.Option(None, "--config", "-c", help="Job spec YAML: fills the job options above."),
    measure: bool = typer.Option(True, "--measure/--no-measure", help="Time a small CPU training step under your "
                                 "OpenMP wait policy, the default and PASSIVE (fresh processes, a few seconds)."),
) -> None:
    """Check the machine: Paddle build vs driver and GPU, devices, /dev/shm, cores, disk, NCCL, FLAGS.

    Exit code 1 if any check finds an error.

    Examples:
      paddlefit doctor
      paddlefit doctor --num-workers 8 -b 256 -i float32[3,224,224] --devices 8 --model resnet50
      paddlefit doctor --config job.yaml           # DataLoader, devices, checkpoint size from the job spec
      paddlefit doctor --snapshot me.json          # send it; then: paddlefit doctor --from me.json
      eval "$(paddlefit doctor --fix-script)"
    """
    quiet_paddle()
    if json_out and fix_script:
        raise fail("`--json` and `--fix-script` print different things; use one.")
    spec = load_job_spec(config) if config is not None else None
    opts = merge_loader_options(spec, num_workers=num_workers, prefetch_factor=prefetch_factor,
                                batch_size=batch_size, inputs=inputs, devices=devices)  # fmt: skip
    num_workers, prefetch_factor, batch_size = opts.num_workers, opts.prefetch_factor, opts.batch_size
    inputs, devices, use_shm = opts.inputs, opts.devices, opts.use_shared_memory
    if spec is not None:
        model = model or spec.model
        run_dir = run_dir or Path(spec.run_dir)
    run_dir = run_dir or Path(".")
    if num_workers < 0:
        raise fail(f"`--num-workers` must be >= 0 (got {num_workers}).")
    if batch_size is not None and batch_size < 1:
        raise fail(f"`--batch-size` must be >= 1 (got {batch_size}).")
    if devices < 1 or prefetch_factor < 1:
        raise fail("`--devices` and `--prefetch-factor` must be >= 1.")
    specs = [parse_input_spec(x) for x in inputs or []]
    if snapshot_file is not None:
        check_output_path(snapshot_file, "--snapshot")
    if from_file is not None:
        snap = load_snapshot(from_file, "--from")
    else:
        with err.status("collecting the environment..."), stdout_to_stderr():
            snap = collect_snapshot(run_dir, measure_omp=measure)
    ckpt = None
    if model:
        with stdout_to_stderr():
            ckpt = _checkpoint_bytes(model, dict(spec.model_args) if spec is not None and model == spec.model else None)
    batch_bytes = batch_size * sum(s.bytes_per_sample for s in specs) if batch_size and specs else None
    job = JobContext(num_workers=num_workers or None, prefetch_factor=prefetch_factor, batch_bytes=batch_bytes,
                     devices=devices, checkpoint_bytes=ckpt, use_shared_memory=use_shm)  # fmt: skip
    findings = run_checks(snap, job)
    if snapshot_file is not None:
        atomic_write_text(snapshot_file, to_json(snap.to_dict()) + "\n")
    errors = [f for f in findings if f.severity == "error"]
    if fix_script:
        print(fix_script_text(findings))
    elif json_out:
        print(to_json({"snapshot": snap.to_dict(), "findings": [f.__dict__ for f in findings]}))
    else:
        shown = findings if show_all else [f for f in findings if f.severity != "ok"]
        table = Table(header_style="bold", box=None, padding=(0, 1), pad_edge=False)
        for c in ("id", "severity", "finding", "fix"):
            table.add_column(c, overflow="fold", no_wrap=c in ("id", "severity"))
        for f in shown:
            text = escape(f.title) + (f" [dim]({escape(f.detail)})[/]" if f.detail else "")
            table.add_row(f.check_id, f"[{_STYLE[f.severity]}]{f.severity}[/]", text, escape(f.fix))
        if shown:
            out.print(table)
        n_ok = sum(f.severity == "ok" for f in findings)
        n_warn = sum(f.severity == "warn" for f in findings)
        out.print(f"{len(errors)} error(s), {n_warn} warning(s), {n_ok} ok"
                  + ("" if show_all else " (--all lists them)"))  # fmt: skip
    if errors:
        raise typer.Exit(1)
