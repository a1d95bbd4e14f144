"""``paddlefit train``: run a job spec on 1..N devices with exact resume."""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table

from paddlefit import options
from paddlefit.cli.common import (
    err,
    fail,
    json_document_printed,
    out,
    quiet_paddle,
    shown,
    stdout_to_stderr,
)
from paddlefit.cli.params import Args, command
from paddlefit.jsondoc import to_json


class RichProgress:
    """A rich progress bar with ETA on stderr (a terminal), implementing :class:`paddlefit.train.metrics.Progress`;
    the rate shown is since the last ``log_every`` boundary, with the rate since the run (or resume) started beside
    it (a short window swings with the machine's load, as :class:`paddlefit.train.metrics.LogLines` says)."""

    def __init__(self, log_every: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.log_every = log_every
        self.samples = self.seconds = self.all_samples = self.all_seconds = 0.0
        self.bar = Progress(
            TextColumn("train"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeRemainingColumn(),
            console=err,
        )
        self.task: Any = None

    def start(self, step: int, total_steps: int) -> None:
        self.task = self.bar.add_task("train", total=total_steps, completed=step, info="")
        self.bar.start()

    def update(self, step: int, epoch: float, loss: float, samples: float, seconds: float) -> None:
        self.samples += samples
        self.seconds += seconds
        self.all_samples += samples
        self.all_seconds += seconds
        rate = self.samples / self.seconds if self.seconds else 0.0
        overall = self.all_samples / self.all_seconds if self.all_seconds else 0.0
        self.bar.update(
            self.task, completed=step, info=f"loss {loss:.4f}  {rate:,.0f} samples/s ({overall:,.0f} since start)"
        )
        if step % self.log_every == 0:
            self.samples = self.seconds = 0.0

    def close(self) -> None:
        self.bar.stop()


def render_summary(summary: dict) -> None:
    """The end-of-run table on stdout; figures by :func:`paddlefit.runs.view.fmt` and window-named labels
    (:mod:`paddlefit.runs.labels`), as the report and ``paddlefit runs`` print them."""
    from paddlefit.cli.render.runs import render_comparison_document
    from paddlefit.runs.labels import summary_label
    from paddlefit.runs.view import fmt

    table = Table(title="run summary", show_header=False, box=None, padding=(0, 2))
    acc = summary.get("eval_accuracy")
    rows = [
        ("steps", f"{summary['steps']:,} ({summary['epochs']:.2f} epochs, global batch {summary['global_batch']})"),
        (
            "devices",
            f"{summary['devices']} x {summary['device']}, {summary['precision']}"
            + ("" if summary["amp_active"] or summary["precision"] == "fp32" else " (AMP inactive on CPU)"),
        ),
        ("final loss", f"{summary['final_loss']:.4f}" if summary["final_loss"] is not None else "-"),
        ("eval accuracy", fmt(acc, "%")),
        (summary_label("samples_per_s")[0], fmt(summary["samples_per_s"] or None, "1/s")),
        (
            summary_label("data_wait_fraction")[0],
            fmt(summary["data_wait_fraction"], "%")
            + (" of step time" if summary["data_wait_fraction"] is not None else ""),
        ),
        ("peak memory", f"{fmt(summary['peak_memory_bytes'], 'B')} ({summary['peak_memory_kind']})"),
        ("params sha256", summary["params_sha256"][:16] + "..."),
        ("last checkpoint", str(summary.get("last_checkpoint"))),
    ]
    for k, v in rows:
        table.add_row(k, shown(v))
    out.print(table)
    if summary.get("comparison"):
        render_comparison_document(summary["comparison"], out)


def resume_hint(resume: str) -> str:
    """How to resume a run stopped by a signal, given the ``--resume`` it ran with: the same command only under
    ``auto``; ``never`` would delete the checkpoint just saved, and a PATH would go back to that older checkpoint."""
    if resume == "auto":
        return "run the same command to resume"
    undo = "deletes the checkpoints and starts over" if resume == "never" else "goes back to that checkpoint"
    return f"resume with `--resume auto` (not `--resume {shown(resume)}`, which {undo})"


@command(
    options.CONFIG_ARG,
    options.DEVICES_TRAIN,
    options.RUN_DIR,
    options.RESUME,
    options.MAX_STEPS,
    options.MAX_HOURS,
    options.MAX_COST,
    options.PRICE_PER_HOUR,
    options.INSTANCE,
    options.CLOUD_TRAIN,
    options.SPOT_TRAIN,
    options.CHECKPOINT_INTERVAL,
    options.INTERRUPTIONS_PER_HOUR_TRAIN,
    options.SPOT_BUCKET_TRAIN,
    options.PREDICT,
    options.OVERWRITE,
    options.TRUST_CHECKPOINT,
    options.JSON_TRAIN,
)
def train_command(args: Args) -> None:
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
      paddlefit train examples/sentiment-zh.yaml --max-steps 200 --resume never --overwrite
      paddlefit train job.yaml --devices 0,1,2,3      # four GPUs
      paddlefit train job.yaml --max-cost 40 --instance g5.xlarge --spot --checkpoint-interval auto
    """
    from paddlefit.train.guards import ignore_stop_signals
    from paddlefit.train.loop import EXIT_BUDGET, EXIT_REQUEUE
    from paddlefit.train.request import TrainRequest
    from paddlefit.train.run import run_job

    if args.overwrite and args.resume != "never":
        raise fail(
            f"`--overwrite` replaces a finished run when the job starts over: it goes with `--resume never` (got "
            f"`--resume {args.resume}`); add `--resume never`, or leave `--overwrite` out to continue the run."
        )
    if args.trust_checkpoint and args.resume == "never":
        raise fail(
            "`--trust-checkpoint` lets a checkpoint load from outside the run directory, and `--resume never` "
            "loads none; leave one of them out."
        )
    quiet_paddle()
    job = TrainRequest(
        config=args.config,
        devices=args.devices,
        run_dir=args.run_dir,
        resume=args.resume,
        max_steps=args.max_steps,
        max_hours=args.max_hours,
        max_cost=args.max_cost,
        price_per_hour=args.price_per_hour,
        instance=args.instance,
        cloud=args.cloud,
        spot=args.spot,
        checkpoint_interval=args.checkpoint_interval,
        interruptions_per_hour=args.interruptions_per_hour,
        spot_bucket=args.spot_bucket,
    ).resolve()
    for note in job.notes:
        err.print(f"[dim]{shown(note)}[/]")
    spec, args.run_dir = job.spec, job.spec.run_dir
    bar = RichProgress(spec.log_every) if err.is_terminal else None
    with stdout_to_stderr():
        outcome = run_job(
            spec,
            gpu_ids=job.gpu_ids,
            resume=job.resume,
            progress_bar=bar,
            predict=args.predict,
            relay=lambda line: err.print(shown(line), highlight=False),
            trust_checkpoint=args.trust_checkpoint,
            overwrite=args.overwrite,
        )
    ignore_stop_signals()  # the outcome is recorded: the exit code below is the recorded one, whatever comes now
    code, reason = outcome.exit_code, outcome.reason
    if code == 0:
        summary = outcome.summary or {}
        if args.json_out:
            print(to_json(summary))
        else:
            render_summary(summary)
        return
    if args.json_out:  # one JSON document on stdout whatever the outcome
        print(to_json({"exit_code": code, "reason": reason, "run_dir": str(args.run_dir)}))
        json_document_printed()
    if code == EXIT_REQUEUE and not reason.startswith("stopped by signal"):  # before the first step: nothing was saved
        err.print(f"{shown(reason)} Exit {EXIT_REQUEUE}.", highlight=False)
    elif code == EXIT_REQUEUE:
        err.print(
            f"stopped by a signal; checkpoint saved. Exit {EXIT_REQUEUE}: {resume_hint(str(job.resume))}.",
            highlight=False,
        )
    elif code == EXIT_BUDGET:
        err.print(
            f"stopped at the budget; checkpoint saved. Exit {EXIT_BUDGET}. To continue, run again with a higher "
            "limit (e.g. a larger --max-hours): --resume auto picks up the checkpoint."
        )
    else:  # EXIT_NONFINITE, bad input found by a worker, or a crash
        err.print(f"[bold red]error:[/] {shown(reason)}", soft_wrap=True, highlight=False)
    raise typer.Exit(code)
