"""``paddlefit doctor``: check this machine (or a saved snapshot) and print each problem with its fix."""

from __future__ import annotations

import contextlib

import typer
from rich.console import Console
from rich.table import Table

from paddlefit import options
from paddlefit.cli import common
from paddlefit.cli.common import err, fail, out, quiet_paddle, shown, stdout_to_stderr
from paddlefit.cli.params import Args, command
from paddlefit.jsondoc import to_json

_STYLE = {"ok": "green", "inconclusive": "dim", "warn": "yellow", "error": "bold red"}


@command(
    options.ALL,
    options.JSON_DOCTOR,
    options.SNAPSHOT,
    options.FROM,
    options.FIX_SCRIPT,
    options.NUM_WORKERS,
    options.PREFETCH_FACTOR,
    options.BATCH_SIZE_DOCTOR,
    options.INPUT_DOCTOR,
    options.DEVICES_DOCTOR,
    options.MODEL_DOCTOR,
    options.RUN_DIR_DOCTOR,
    options.CONFIG_DOCTOR,
    options.MEASURE,
)
def doctor_command(args: Args) -> None:
    """Check the machine: Paddle build vs driver and GPU, devices, /dev/shm, cores, disk, NCCL, FLAGS.

    Exit code 1 if any check finds an error.

    Examples:
      paddlefit doctor
      paddlefit doctor --num-workers 8 -b 256 -i float32[3,224,224] --devices 8 --model resnet50
      paddlefit doctor --config job.yaml           # DataLoader, devices, checkpoint size from the job spec
      paddlefit doctor --snapshot me.json          # send it; then: paddlefit doctor --from me.json
      eval "$(paddlefit doctor --fix-script)"
    """
    from paddlefit.diagnose.doctor import DoctorRequest, run_doctor
    from paddlefit.diagnose.registry import fix_script as fix_script_text

    quiet_paddle()
    if args.json_out and args.fix_script:
        raise fail("`--json` and `--fix-script` print different things; use one.")
    if args.from_file is not None and args.typed("run_dir", "measure"):
        raise fail(
            f"{', '.join(f'`{t}`' for t in args.typed('run_dir', 'measure'))} check this machine, and `--from` "
            "checks a saved snapshot (its disk and no measurement); leave them out with `--from`."
        )
    req = DoctorRequest(
        from_file=args.from_file,
        snapshot_file=args.snapshot_file,
        config=args.config,
        **common.loader_fields(args),
        model=args.model,
        run_dir=args.run_dir,
        measure=args.measure,
    )
    collecting = err.status("collecting the environment...") if args.from_file is None else contextlib.nullcontext()
    with collecting, stdout_to_stderr():  # user model code and Paddle may print while the snapshot is taken
        report = run_doctor(req)
    findings = report.findings
    errors = report.errors
    if args.fix_script:
        print(fix_script_text(findings))
    elif args.json_out:
        print(to_json(report.to_dict()))
    else:
        listed = findings if args.show_all else [f for f in findings if f.severity != "ok"]
        if listed:
            render_findings(listed, out)
        out.print(summary_line(findings, args.show_all))
    if errors:
        raise typer.Exit(1)


def summary_line(findings: list, show_all: bool) -> str:
    """``N error(s), N warning(s), N ok`` and, when any, ``, N inconclusive`` (a timed check that could not tell:
    counted apart from ok, never a failure)."""
    n = {s: sum(f.severity == s for f in findings) for s in ("error", "warn", "ok", "inconclusive")}
    return (
        f"{n['error']} error(s), {n['warn']} warning(s), {n['ok']} ok"
        + (f", {n['inconclusive']} inconclusive" if n["inconclusive"] else "")
        + ("" if show_all else " (--all lists the ok ones)")
    )


#: Below this terminal width the fix goes under its finding instead of in a column beside it.
WIDE_FINDINGS = 120


def render_findings(findings: list, console: Console) -> None:
    """The findings as a table: id, severity, finding (title and detail) and, at :data:`WIDE_FINDINGS` columns or
    more, the fix beside it; on a narrower terminal the fix is the finding cell's second line (``fix: ...``), so the
    finding keeps the width instead of wrapping into a third of it."""
    wide = console.width >= WIDE_FINDINGS
    table = Table(header_style="bold", box=None, padding=(0, 1), pad_edge=False)
    for c in ("id", "severity", "finding", "fix")[: 4 if wide else 3]:
        table.add_column(c, overflow="fold", no_wrap=c in ("id", "severity"))
    for f in findings:
        text = shown(f.title) + (f" [dim]({shown(f.detail)})[/]" if f.detail else "")
        below = f"\n[cyan]fix:[/] {shown(f.fix)}" if f.fix else ""  # no empty `fix:` line under an ok row
        cells = [text, shown(f.fix)] if wide else [text + below]
        table.add_row(f.check_id, f"[{_STYLE[f.severity]}]{f.severity}[/]", *cells)
    console.print(table)
