"""``paddlefit train``: run a job spec on 1..N devices with exact resume."""

from __future__ import annotations

import difflib
import math
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from paddlefit.cli.common import err, fail, handle_errors, out, quiet_paddle, require_positive, stdout_to_stderr
from paddlefit.errors import PaddlefitError
from paddlefit.report.render import to_json
from paddlefit.spec import JobSpec, field_help, load_job_spec
from paddlefit.train.loop import EXIT_BUDGET, EXIT_REQUEUE
from paddlefit.train.run import run_job


def parse_devices(text: str) -> tuple[int, list[int] | None]:
    """``"2"`` -> (2, None): two devices, GPU ids 0..1 when GPUs exist, else two CPU processes;
    ``"0,1"`` or ``"3"``-style lists with a comma -> (2, [0, 1]) explicit GPU ids.

    Raises:
        PaddlefitError: not a positive count or a comma-separated list of distinct non-negative ids.
    """
    t = text.strip()
    try:
        if "," in t:
            ids = [int(x) for x in t.split(",") if x.strip()]
            if not ids or min(ids) < 0 or len(set(ids)) != len(ids):
                raise ValueError
            return len(ids), ids
        n = int(t)
        if n < 1:
            raise ValueError
        return n, None
    except ValueError:
        raise PaddlefitError(f"`--devices {text}` must be a count such as 2 or GPU ids such as 0,1.") from None


class RichProgress:
    """A rich progress bar with ETA on stderr (a terminal), implementing :class:`paddlefit.train.metrics.Progress`;
    the rate shown is since the last ``log_every`` boundary."""

    def __init__(self, log_every: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.log_every = log_every
        self.samples = self.seconds = 0.0
        self.bar = Progress(TextColumn("train"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                            TimeRemainingColumn(), console=err)  # fmt: skip
        self.task: Any = None

    def start(self, step: int, total_steps: int) -> None:
        self.task = self.bar.add_task("train", total=total_steps, completed=step, info="")
        self.bar.start()

    def update(self, step: int, epoch: float, loss: float, samples: float, seconds: float) -> None:
        self.samples += samples
        self.seconds += seconds
        rate = self.samples / self.seconds if self.seconds else 0.0
        self.bar.update(self.task, completed=step, info=f"loss {loss:.4f}  {rate:,.0f} samples/s")
        if step % self.log_every == 0:
            self.samples = self.seconds = 0.0

    def close(self) -> None:
        self.bar.stop()


def _human_bytes(n: int) -> str:
    return f"{n / 1024**3:.2f} GiB" if n >= 1024**3 else f"{n / 1024**2:.1f} MiB"


def render_summary(summary: dict) -> None:
    """The end-of-run table on stdout."""
    table = Table(title="run summary", show_header=False, box=None, padding=(0, 2))
    acc = summary.get("eval_accuracy")
    rows = [
        ("steps", f"{summary['steps']:,} ({summary['epochs']:.2f} epochs, global batch {summary['global_batch']})"),
        ("devices", f"{summary['devices']} x {summary['device']}, {summary['precision']}"
                    + ("" if summary["amp_active"] or summary["precision"] == "fp32" else " (AMP inactive on CPU)")),
        ("final loss", f"{summary['final_loss']:.4f}" if summary["final_loss"] is not None else "-"),
        ("eval accuracy", f"{acc:.2%}" if acc is not None else "-"),
        ("throughput", f"{summary['samples_per_s']:,.1f} samples/s" if summary["samples_per_s"] else "-"),
        ("data wait", f"{summary['data_wait_fraction']:.1%} of step time" if summary["data_wait_fraction"]
         is not None else "-"),
        ("peak memory", f"{_human_bytes(summary['peak_memory_bytes'])} ({summary['peak_memory_kind']})"),
        ("params sha256", summary["params_sha256"][:16] + "..."),
        ("last checkpoint", str(summary.get("last_checkpoint"))),
    ]  # fmt: skip
    for k, v in rows:
        table.add_row(k, escape(v))
    out.print(table)


def instance_price(instance: str, cloud: str | None, spot: bool) -> float:
    """USD/hour of one instance type from the price catalog (SkyPilot's cache or the shipped snapshot).

    Raises:
        PaddlefitError: unknown or ambiguous instance type, or no spot price when ``spot``.
    """
    from paddlefit.catalog.prices import SKYPILOT_CACHE, select_prices

    rows, _ = select_prices(skypilot_root=SKYPILOT_CACHE, clouds=[cloud] if cloud else [])
    match = [r for r in rows if r.instance_type.lower() == instance.strip().lower()]
    if not match:
        close = difflib.get_close_matches(instance, sorted({r.instance_type for r in rows}), n=4, cutoff=0.5)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise PaddlefitError(f"`--instance {instance}` is not in the price catalog.{hint} Give `--price-per-hour` "
                             "instead, or see `paddlefit cost` for the priced instance types.")  # fmt: skip
    prices = {(r.on_demand_usd_per_hour, r.spot_usd_per_hour) for r in match}
    if len(prices) > 1:
        where = ", ".join(f"{r.cloud} {r.gpu_count}x{r.accelerator}" for r in match)
        hint = "`--price-per-hour`" if cloud else "`--cloud` or `--price-per-hour`"
        raise PaddlefitError(f"`--instance {instance}` has several prices ({where}); give {hint}.")
    row = match[0]
    if spot:
        if row.spot_usd_per_hour is None:
            raise PaddlefitError(f"`--instance {instance} --spot`: the catalog has no spot price for it "
                                 f"({row.cloud}); give `--price-per-hour`.")  # fmt: skip
        return row.spot_usd_per_hour
    return row.on_demand_usd_per_hour


def _budget(spec: JobSpec, max_hours: float | None, max_cost: float | None, price: float | None,
            instance: str | None, cloud: str | None, spot: bool) -> Any:  # fmt: skip
    """The spec's budget with the command-line limits applied, or None when no option was given."""
    if (spot or cloud) and instance is None:
        raise PaddlefitError("`--spot`/`--cloud` go with `--instance` (the price of a catalog instance type).")
    require_positive(max_hours, "--max-hours")
    require_positive(max_cost, "--max-cost")
    require_positive(price, "--price-per-hour")
    if price is not None and instance is not None:
        raise PaddlefitError("Give `--price-per-hour` or `--instance`, not both.")
    if instance is not None:
        price = instance_price(instance, cloud, spot)
        err.print(f"[dim]price: {instance}{' spot' if spot else ''} {price:g} USD/hour (catalog)[/]")
    upd = {k: v for k, v in (("max_hours", max_hours), ("max_cost_usd", max_cost), ("price_usd_per_hour", price))
           if v is not None}  # fmt: skip
    merged = spec.budget.model_dump() | upd
    if merged["max_cost_usd"] is not None and merged["price_usd_per_hour"] is None:
        raise PaddlefitError("a cost limit (`--max-cost` or budget.max_cost_usd) needs the price: `--price-per-hour "
                             "USD`, `--instance TYPE` or budget.price_usd_per_hour.")  # fmt: skip
    if not upd:
        return None
    return _validated(spec.budget, merged, "budget")


def _checkpoint(spec: JobSpec, interval: str | None, rate: float | None, bucket: str | None) -> Any:
    """The spec's checkpoint section with ``--checkpoint-interval`` applied, or None when not given."""
    auto = interval is not None and interval.strip().lower() == "auto"
    if (rate is not None or bucket is not None) and not auto:
        raise PaddlefitError("`--interruptions-per-hour`/`--spot-bucket` go with `--checkpoint-interval auto`.")
    if interval is None:
        return None
    if auto:
        if rate is not None and bucket is not None:
            raise PaddlefitError("Give `--interruptions-per-hour` or `--spot-bucket`, not both.")
        require_positive(rate, "--interruptions-per-hour")
        if bucket is not None:
            from paddlefit.plan.cost import rate_from_bucket

            rate = rate_from_bucket(bucket).per_hour
        upd: dict[str, Any] = {"auto_interval": True, **({"interruptions_per_hour": rate} if rate is not None else {})}
    else:
        try:
            minutes = float(interval)
        except ValueError:
            minutes = -1.0
        if not (math.isfinite(minutes) and minutes > 0):
            raise PaddlefitError(f"`--checkpoint-interval {interval}` must be `auto` or minutes > 0 (e.g. 15).")
        upd = {"auto_interval": False, "every_minutes": minutes, "every_steps": 0}
    return _validated(spec.checkpoint, spec.checkpoint.model_dump() | upd, "checkpoint")


def _validated(model: Any, values: dict[str, Any], section: str) -> Any:
    """``values`` validated as ``model``'s class; a range error names the option's spec key."""
    from pydantic import ValidationError

    try:
        return model.model_validate(values)
    except ValidationError as exc:
        e = exc.errors()[0]
        where = ".".join(str(x) for x in e["loc"])
        raise PaddlefitError(f"{section}.{where}: {e['msg']} (got {e.get('input')!r}).") from None


@handle_errors
def train_command(
    config: Path = typer.Argument(..., help="Job spec YAML (see examples/digits.yaml)."),
    devices: str = typer.Option(None, "--devices", help=f"{field_help('devices')} A count (2) or GPU ids (0,1). "
                                "Default: the spec's `devices`."),
    run_dir: str = typer.Option(None, "--run-dir", help=f"{field_help('run_dir')} Default: the spec's `run_dir`."),
    resume: str = typer.Option("auto", "--resume", help="auto (newest checkpoint that verifies), never, or a "
                               "checkpoint directory."),
    max_steps: int = typer.Option(None, "--max-steps", help=f"Replaces the spec's max_steps: {field_help('max_steps')} "
                                  "The LR schedule spans the run's length."),
    max_hours: float = typer.Option(None, "--max-hours", help=f"budget.max_hours: {field_help('budget.max_hours')} "
                                    "Checkpoint, exit 4; wall time counts across resumes of the run."),
    max_cost: float = typer.Option(None, "--max-cost", help=f"budget.max_cost_usd: {field_help('budget.max_cost_usd')}"
                                   " Checkpoint, exit 4; needs --price-per-hour or --instance."),
    price_per_hour: float = typer.Option(None, "--price-per-hour",
                                         help=f"budget.price_usd_per_hour: {field_help('budget.price_usd_per_hour')}"),
    instance: str = typer.Option(None, "--instance", help="Take the price from the catalog (`paddlefit cost`): "
                                 "an instance type such as g5.xlarge; with --cloud, --spot."),
    cloud: str = typer.Option(None, "--cloud", help="Cloud of --instance when the name is ambiguous."),
    spot: bool = typer.Option(False, "--spot", help="Use the spot price of --instance."),
    checkpoint_interval: str = typer.Option(None, "--checkpoint-interval", help="`auto` (Daly optimum for the "
                                            "measured write time and the interruption rate) or minutes."),
    interruptions_per_hour: float = typer.Option(
        None, "--interruptions-per-hour",
        help=f"checkpoint.interruptions_per_hour: {field_help('checkpoint.interruptions_per_hour')} For "
        "--checkpoint-interval auto."),
    spot_bucket: str = typer.Option(None, "--spot-bucket", help="Or an AWS Spot Instance Advisor bucket, e.g. "
                                    "'5-10%', for --checkpoint-interval auto."),
    json_out: bool = typer.Option(False, "--json", help="Print summary.json on stdout at the end ({exit_code, reason, "
                                  "run_dir} when the run stops early)."),
) -> None:
    """Train a job spec on 1..N devices: data parallel through paddle.distributed.launch, AMP, gradient
    accumulation, atomic checkpoints and exact resume.

    Only global rank 0 writes. On SIGTERM/SIGINT every rank finishes the current step, rank 0 saves a checkpoint
    and the run exits with code 143 (requeue); `--resume auto` (the default) continues on the exact next batch.
    Exit codes: 0 done, 1 the job failed (out of memory at micro-batch 1, the model raising), 2 bad input, 3 loss
    became NaN/Inf, 4 budget reached (checkpoint saved), 143 stopped by a signal after checkpointing, 130 Ctrl-C
    during start-up (docs/errors.md).

    Examples:
      paddlefit train examples/digits.yaml
      paddlefit train examples/digits.yaml --devices 2 --run-dir runs/digits-dp2
      paddlefit train examples/sentiment-zh.yaml --max-steps 200 --resume never
      paddlefit train job.yaml --devices 0,1,2,3      # four GPUs
      paddlefit train job.yaml --max-cost 40 --instance g5.xlarge --spot --checkpoint-interval auto
    """
    quiet_paddle()
    spec = load_job_spec(config, option="CONFIG")
    n, gpu_ids = parse_devices(devices) if devices is not None else (spec.devices, None)
    if max_steps is not None and max_steps < 1:
        raise fail(f"`--max-steps` must be >= 1 (got {max_steps}).")
    if resume not in ("auto", "never") and not Path(resume).is_dir():
        raise fail(f"`--resume {resume}` is not `auto`, `never` or a checkpoint directory.")
    if run_dir is not None and not run_dir.strip():
        raise fail("`--run-dir` is empty; give a directory such as runs/digits.")
    run_dir = Path(run_dir if run_dir is not None else spec.run_dir)  # type: ignore[assignment]
    update: dict = {"devices": n, "run_dir": str(run_dir)}
    if max_steps is not None:  # the command line replaces the spec's max_steps (epochs still bound the run)
        update["max_steps"] = max_steps
    budget = _budget(spec, max_hours, max_cost, price_per_hour, instance, cloud, spot)
    if budget is not None:
        update["budget"] = budget
    ckpt = _checkpoint(spec, checkpoint_interval, interruptions_per_hour, spot_bucket)
    if ckpt is not None:
        update["checkpoint"] = ckpt
    spec = spec.model_copy(update=update)
    bar = RichProgress(spec.log_every) if err.is_terminal else None
    with stdout_to_stderr():
        outcome = run_job(spec, gpu_ids=gpu_ids, resume=resume, progress_bar=bar,
                          relay=lambda line: err.print(escape(line), highlight=False))  # fmt: skip
    code, reason = outcome.exit_code, outcome.reason
    if code == 0:
        summary = outcome.summary or {}
        if json_out:
            print(to_json(summary))
        else:
            render_summary(summary)
        return
    if json_out:  # one JSON document on stdout whatever the outcome
        print(to_json({"exit_code": code, "reason": reason, "run_dir": str(run_dir)}))
    if code == EXIT_REQUEUE:
        err.print(f"stopped by a signal; checkpoint saved. Exit {EXIT_REQUEUE}: run the same command to resume.")
    elif code == EXIT_BUDGET:
        err.print(f"stopped at the budget; checkpoint saved. Exit {EXIT_BUDGET}. To continue, run again with a higher "
                  "limit (e.g. a larger --max-hours): --resume auto picks up the checkpoint.")
    else:  # EXIT_NONFINITE, bad input found by a worker, or a crash
        err.print(f"[bold red]error:[/] {escape(reason)}", soft_wrap=True, highlight=False)
    raise typer.Exit(code)
