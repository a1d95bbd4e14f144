"""``paddlefit tune``: measured trials over DataLoader (and, on GPU, AMP/cuDNN) settings; before/after table."""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from rich.console import Console
from rich.table import Table

from paddlefit import options
from paddlefit.cli.common import err, fail, out, quiet_paddle, shown, stdout_to_stderr
from paddlefit.cli.params import Args, command
from paddlefit.jsondoc import to_json
from paddlefit.units import MIB

if TYPE_CHECKING:
    from paddlefit.jobspec.spec import JobSpec
    from paddlefit.tune.trials import Trial, TuneResult


def tuned_yaml(config: Path, settings: dict) -> str:
    """The user's spec file with the winning settings set (dotted keys; ``FLAGS_*`` become a comment): the user's
    own keys and values stay as written, only the tuned ones change (YAML comments are not kept)."""
    from paddlefit.tune.trials import set_dotted

    doc = set_dotted(yaml.safe_load(config.read_text(encoding="utf-8")) or {}, settings)
    flags = [f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in settings.items() if k.startswith("FLAGS_")]
    head = f"# tuned by paddlefit tune from {config.name}"
    if flags:
        head += f"; also set in the environment: {' '.join(flags)}"
    return head + "\n" + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def tuned_run_dir(run_dir: str) -> str:
    """The tuned spec's own ``run_dir``: the original's with ``-tuned`` appended (``runs/digits`` ->
    ``runs/digits-tuned``; a tuned one's gets ``-2``, ``-3``...), so training it does not resume the original run's
    checkpoints. A path string in, a path string out; raises nothing."""
    base = run_dir.rstrip("/\\") or run_dir
    m = re.fullmatch(r"(.*-tuned)(?:-(\d+))?", base)
    if m is None:
        return base + "-tuned"
    return f"{m.group(1)}-{int(m.group(2) or 1) + 1}"


def write_tuned(config: Path, spec: JobSpec, best: Trial, write: Path) -> None:
    """Write ``spec`` with ``best``'s settings and its own run_dir (:func:`tuned_run_dir`) to ``write``, atomically
    (the user's file with only those keys changed where that gives the measured spec, else the spec whole), and say
    where it went and which run_dir it trains into.

    Raises:
        typer.Exit (2, via :func:`fail`): the file cannot be written (nothing was written).
    """
    from paddlefit.fileio import atomic_write_text
    from paddlefit.jobspec.spec import JobSpec
    from paddlefit.rundir.files import spec_yaml
    from paddlefit.tune.trials import apply_settings

    run_dir = tuned_run_dir(spec.run_dir)
    settings = {**best.settings, "run_dir": run_dir}
    best_spec = apply_settings(spec, settings)
    text = tuned_yaml(config, settings)  # the user's file with the winning settings
    if JobSpec.model_validate(yaml.safe_load(text)) != best_spec:  # not the spec tune measured: write it whole
        text = spec_yaml(best_spec)
    try:
        atomic_write_text(write, text, option="--write")
    except OSError as exc:
        raise fail(
            f"`--write {write}` cannot be written ({exc.strerror or exc}); nothing was written. The "
            f"winner was {best.label}: {best.settings}."
        ) from None
    err.print(
        f"wrote {shown(str(write))} with run_dir: {shown(run_dir)} (its own, not {shown(spec.run_dir)}, "
        "whose checkpoints are the original spec's)",
        highlight=False,
        soft_wrap=True,
    )
    if Path(run_dir).exists():
        err.print(
            f"[yellow]note:[/] {shown(run_dir)} already exists: `paddlefit train {shown(str(write))}` resumes "
            "from its checkpoints; delete it or pass `--resume never`.",
            highlight=False,
            soft_wrap=True,
        )


@command(
    options.CONFIG_ARG_LAUNCH,
    options.BUDGET_MINUTES,
    options.STEPS_TUNE,
    options.WARMUP_TUNE,
    options.CONFIRM,
    options.GLOBAL_BATCH_TUNE,
    options.WRITE,
    options.PROFILE,
    options.JSON,
)
def tune_command(args: Args) -> None:
    """Run short measured trials of the job under candidate settings (num_workers 0..cores, then shared memory,
    prefetch_factor, persistent workers and, on CPU, fewer math threads on the best; AMP and cuDNN exhaustive
    search on a GPU; then larger per-device batches under the memory limit), repeat the best against your own
    settings, interleaved, and print the before/after table with the measured ratio.

    Examples:
      paddlefit tune examples/digits-warped.yaml --write runs/digits-warped-tuned.yaml
      paddlefit tune job.yaml --budget-minutes 10 --steps 50 --json
      paddlefit tune job.yaml --global-batch free     # also try batch x2/x4/x8 without accumulation
      paddlefit profile job.yaml --json > profile.json && paddlefit tune job.yaml --profile profile.json
    """
    from paddlefit.jobspec.spec import load_job_spec
    from paddlefit.tune.trials import tune

    quiet_paddle()
    spec = load_job_spec(args.config, option="CONFIG")
    fixes = profile_fixes(args.profile) if args.profile is not None else None
    if args.write is not None:
        from paddlefit.fileio import check_output_path

        check_output_path(args.write, "--write")
    with err.status("tuning...") as status, stdout_to_stderr():
        result = tune(
            spec,
            budget_s=args.budget_minutes * 60,
            steps=args.steps,
            warmup=args.warmup,
            confirm=args.confirm,
            progress=lambda msg: status.update(f"tuning: {msg}"),
            global_batch=args.global_batch,
            hypotheses=fixes,
        )
    if args.write is not None:
        write_tuned(args.config, spec, result.best, args.write)
    if args.json_out:
        print(to_json(result.to_dict()))
        return
    render_tune(result, spec, args.config, args.profile, out)


def settings_text(trial: Trial) -> str:
    """What ``trial`` sets, each setting once (``data.num_workers=2, cpu_threads=1``; ``no change`` for none), and
    which profile fix it started from (``, from profile fix 1``): its label already names the settings, so the
    ``after:`` line shows this instead of label and settings. Raises nothing."""
    text = ", ".join(f"{k}={v}" for k, v in trial.settings.items()) or "no change"
    m = re.match(r"profile fix \d+", trial.label)
    return text + (f", from {m.group(0)}" if m else "")


def render_tune(result: TuneResult, spec: JobSpec, config: Path, profile: Path | None, console: Console) -> None:
    """Print ``tune``'s table of trials (settings folded to the console width, never cut to "..."), the
    before/after lines, profile's fixes as judged, and notes. Raises nothing."""
    table = Table(
        title=f"trials ({result.steps} timed steps each, {result.elapsed_s:,.0f} s in all)", box=None, padding=(0, 1)
    )
    table.add_column("settings", overflow="fold")  # narrowed to fit the console: a long label folds, never "…"
    for col in ("runs", "median samples/s", "step", "data wait", "peak memory", "global batch"):
        table.add_column(col.replace(" ", "\n"), justify="right", no_wrap=True)  # numbers whole, headers 2 lines
    for t in [result.baseline, *result.trials]:
        if not t.samples_per_s:
            table.add_row(shown(t.label), shown(t.note or "failed"), "-", "-", "-", "-", str(t.global_batch or "-"))
            continue
        mark = " (best)" if t is result.best else ""
        table.add_row(
            shown(t.label) + mark,
            str(len(t.samples_per_s)),
            f"{t.median:,.0f}",
            f"{statistics.median(t.step_s) * 1e3:,.1f} ms",
            f"{statistics.median(t.data_wait_fraction):.0%}",
            f"{t.peak_memory_bytes / MIB:,.1f} MiB",
            str(t.global_batch),
        )
    console.print(table)  # fits the console: the settings column folds
    b, w = result.baseline, result.best
    console.print(f"before: {b.median:,.0f} samples/s ({shown(str(config))} as written)")
    console.print(f"after:  {w.median:,.0f} samples/s ({shown(settings_text(w))})")
    console.print(f"measured ratio: [bold]{result.ratio:.2f}x[/] (medians of the interleaved confirmation runs)")
    if profile is not None:
        console.print(
            f"profile's fixes ({shown(str(profile))}), tried first:"
            if result.hypotheses
            else f"profile's fixes ({shown(str(profile))}): none is a setting tune can try"
        )
        for i, h in enumerate(result.hypotheses, 1):
            console.print(
                f"  {i}. {shown(str(h['fix']))}: {shown(str(h['expected_gain']))}; [bold]{shown(h['said'])}[/]"
            )
    else:
        console.print(
            "[dim]`paddlefit profile CONFIG --json > profile.json` then `tune CONFIG --profile "
            "profile.json` tries profile's fixes first and says which the measurement confirms.[/]"
        )
    if not result.trials:
        console.print("[yellow]note:[/] the budget ran out before any candidate ran; raise `--budget-minutes`.")
    if spec.devices > 1:
        console.print(f"[yellow]note:[/] trials run one device; samples/s are per device, of the job's {spec.devices}.")
    if w.global_batch != b.global_batch:
        console.print(
            f"[yellow]note:[/] the winner trains with global batch {w.global_batch} instead of "
            f"{b.global_batch}: the optimisation changes (rescale `lr` and re-check accuracy)."
        )


def profile_fixes(path: Path) -> list[dict]:
    """The ``fixes`` of a ``paddlefit profile --json`` document at ``path``.

    Raises:
        typer.Exit (2, via :func:`fail`): the file cannot be read or is not a profile document.
    """
    import json

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise fail(
            f"`--profile {path}` cannot be read as JSON ({exc}); pass the output of `paddlefit profile CONFIG --json`."
        ) from None
    fixes = doc.get("fixes") if isinstance(doc, dict) else None
    if not isinstance(fixes, list) or not all(isinstance(f, dict) and "fix" in f for f in fixes):
        raise fail(f"`--profile {path}` has no `fixes` list: pass the output of `paddlefit profile CONFIG --json`.")
    return fixes
