"""``paddlefit export``: a run's checkpoint as a ``paddle.jit.save`` inference model, checked after reload, and
with ``--benchmark`` its latency on this CPU under Paddle Inference (:mod:`paddlefit.serving.cpu_bench`)."""

from __future__ import annotations

from paddlefit import options
from paddlefit.cli.common import err, out, quiet_paddle, shown, stdout_to_stderr
from paddlefit.cli.params import Args, command
from paddlefit.jsondoc import to_json

#: Batch sizes `--benchmark` measures without `--batch-size`.
DEFAULT_BATCH_SIZES = options.BATCH_SIZE_EXPORT.shown["bench"]


@command(
    options.RUN_DIR_ARG,
    options.CHECKPOINT,
    options.OUT,
    options.BENCHMARK,
    options.BATCH_SIZE_EXPORT,
    options.THREADS_EXPORT,
    options.JSON_EXPORT,
)
def export_command(args: Args) -> None:
    """Export a checkpoint with paddle.jit.save, reload it with paddle.jit.load and check its outputs against the
    dynamic model on a sample batch (rtol 1e-5, atol 1e-6). Nothing is left behind if the check fails.

    With --benchmark, the exported model is then served on this CPU as a service would serve it (Paddle Inference,
    oneDNN, random inputs shaped like the run's data): median and p95 latency per request, samples/s and the
    serving process's peak RSS, per batch size and thread count.

    Examples:
      paddlefit export runs/digits
      paddlefit export runs/digits --checkpoint runs/digits/checkpoints/step-00000400 --out model/
      paddlefit export runs/digits --benchmark
      paddlefit export runs/digits --benchmark -b 1 -b 32 --threads 4 --json
    """
    from paddlefit.serving import default_threads

    quiet_paddle()
    from paddlefit.errors import PaddlefitError
    from paddlefit.textsafe import name_safe
    from paddlefit.train.export import export_run

    if not args.benchmark and (args.batch_sizes or args.threads):
        raise PaddlefitError("`--batch-size` and `--threads` apply only to the benchmark; add `--benchmark`.")
    bench_args: tuple[list[int], list[int]] | None = None
    if args.benchmark:  # bad values fail before the export, not after it
        from paddlefit.serving.cpu_bench import check_bench_args

        bench_args = check_bench_args(args.batch_sizes or list(DEFAULT_BATCH_SIZES), args.threads or default_threads())
    with err.status("exporting..."), stdout_to_stderr():
        res = export_run(args.run_dir, args.checkpoint, args.out_dir)
    doc = {
        "out_dir": str(res.out_dir),
        "prefix": str(res.out_dir / "model"),
        "checkpoint": str(res.checkpoint),
        "files": res.files,
        "max_abs_diff": res.max_abs_diff,
        "sample_batch": res.sample_batch,
    }
    if bench_args is not None:
        from paddlefit.serving.cpu_bench import benchmark_cpu
        from paddlefit.train.export import input_specs_of_run

        with err.status("benchmarking on this CPU (Paddle Inference, oneDNN)...") as status, stdout_to_stderr():
            specs = input_specs_of_run(args.run_dir)

            def progress(line: str) -> None:
                err.print(f"[dim]{shown(line)}[/]", highlight=False)
                status.update(f"benchmarking on this CPU (Paddle Inference, oneDNN)... last: {shown(line)}")

            rows = benchmark_cpu(res.out_dir / "model", specs, *bench_args, progress=progress)
        from paddlefit.serving.job import cpu_points, thread_notes

        points = cpu_points(rows)
        doc["benchmark"] = [q.to_dict() for q in points]
        doc["benchmark_notes"] = thread_notes(points)
        doc["benchmark_inputs"] = [str(s) for s in specs]
    if args.json_out:
        print(to_json(doc))
        return
    out.print(
        f"exported {shown(name_safe(res.checkpoint))} -> {shown(name_safe(res.out_dir / 'model'))} "
        f"({', '.join(res.files)})",
        soft_wrap=True,
    )
    out.print(f"paddle.jit.load check on {res.sample_batch} samples: max |diff| = {res.max_abs_diff:.3g} (ok)")
    if "benchmark" in doc:
        from paddlefit.cli.render.serving import render_cpu

        render_cpu(
            points,
            doc["benchmark_notes"],
            out,
            title="latency measured on this CPU (Paddle Inference, "
            "oneDNN), inputs " + shown(", ".join(doc["benchmark_inputs"])),
        )
