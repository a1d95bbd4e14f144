"""``paddlefit cost``: hours and USD of a training job on every priced cloud instance type, on-demand and spot."""

from __future__ import annotations

from pathlib import Path

import typer

from paddlefit.cli import common
from paddlefit.cli.common import err, handle_errors, out, quiet_paddle, shown, stdout_to_stderr, warn_deprecated
from paddlefit.errors import PaddlefitError
from paddlefit.jsondoc import to_json


@handle_errors
def cost_command(
    model: str = typer.Argument(None, help="Zoo name or `package.module:factory` (or use --config)."),
    config: Path = typer.Option(
        None,
        "--config",
        "-c",
        help="Job spec YAML; the job length comes from data.train "
        "and epochs/max_steps unless --dataset-size/--epochs are given.",
    ),
    batch_size: list[int] = typer.Option(
        None,
        "--batch-size",
        "-b",
        help="Per-GPU micro-batch size (samples) [32]. With --inference: batch sizes to serve, repeatable [1, 8, 32].",
    ),
    inputs: list[str] = typer.Option(None, "--input", "-i", help="Per-sample input, e.g. float32[3,224,224]."),
    label: str = typer.Option(None, "--label", help=common.LABEL_HELP),
    label_arg: str = typer.Option(None, "--label-arg", help=common.LABEL_ARG_HELP),
    loss: str = typer.Option(None, "--loss", help=common.LOSS_HELP),
    model_arg: list[str] = typer.Option(None, "--model-arg", help="key=value passed to the model factory."),
    optimizer: str = typer.Option(None, "--optimizer", help="sgd | momentum | adam | adamw (default: adam)"),
    precision: str = typer.Option(
        None,
        "--precision",
        help="fp32 | fp16-o1 | bf16-o1 | fp16-o2 | bf16-o2 "
        "(default: fp32); with --inference: fp32 | fp16 | int8 (TensorRT).",
    ),
    flash_attention: bool = typer.Option(
        None,
        "--flash-attention/--no-flash-attention",
        help="Time GPUs with each "
        "eager attention core as one FlashAttention-2 kernel (CC 8.0+, fp16/bf16), "
        "or as written (job spec `attention`) \\[eager]; see `plan`.",
    ),
    tf32: bool = typer.Option(
        None,
        "--tf32/--no-tf32",
        help="fp32 matmul/conv on TF32 tensor cores (Ampere+; "
        "Paddle's default) or, with --no-tf32, on the FP32 CUDA cores (TF32 off for "
        "reproducibility). Default: the spec's `tf32`, else on.",
    ),
    dataset_size: int = typer.Option(None, "--dataset-size", help="Samples per epoch."),
    epochs: float = typer.Option(None, "--epochs", help="Epochs."),
    cloud: list[str] = typer.Option(
        None, "--cloud", help="Only these clouds (repeatable): aws, gcp, azure, lambda, runpod."
    ),
    gpu: list[str] = typer.Option(None, "--gpu", help="Only instances with these GPUs (repeatable)."),
    region: str = typer.Option(
        None,
        "--region",
        help="One region for every cloud. Default: aws us-east-1, gcp "
        "us-central1, azure eastus, lambda us-east-1, runpod US.",
    ),
    spot: bool = typer.Option(False, "--spot", help="Rank by spot expected cost (on-demand where no spot price)."),
    interruptions_per_hour: float = typer.Option(
        None,
        "--interruptions-per-hour",
        help="Spot interruptions per instance-hour, for every instance. "
        "Default: each instance's published AWS Spot Instance Advisor "
        "bucket, else 1/24 (`default (no published rate)`).",
    ),
    spot_bucket: str = typer.Option(
        None,
        "--spot-bucket",
        help="AWS Spot Instance Advisor bucket for every "
        "instance: '<5%', '5-10%', '10-15%', '15-20%' or '>20%' (share interrupted per "
        "month).",
    ),
    disk_mib_s: float = typer.Option(
        None,
        "--disk-mib-s",
        "--disk-mbps",
        help="Checkpoint write bandwidth, MiB/s "
        "[125, EBS gp3]. (`--disk-mbps`: deprecated alias, removed in the next release.)",
    ),
    restart_minutes: float = typer.Option(
        None,
        "--restart-minutes",
        help="Minutes lost per interruption besides the lost work (new instance, start-up, checkpoint load) [10].",
    ),
    prices: list[Path] = typer.Option(
        None,
        "--prices",
        help="Extra price CSV (same header as shipped; optional `gpu` column naming the GPU catalog entry).",
    ),
    shipped_prices: bool = typer.Option(
        False,
        "--shipped-prices",
        help="Ignore SkyPilot's cached catalogs (~/.sky/catalogs) and use the shipped snapshot.",
    ),
    catalog: list[Path] = typer.Option(None, "--catalog", help="Extra GPU CSV (same header as shipped)."),
    calibration: list[Path] = typer.Option(None, "--calibration", help="Calibration JSON from `paddlefit calibrate`."),
    safety_margin: float = typer.Option(0.9, "--safety-margin", help="Fraction of GPU memory a peak may use."),
    top: int = typer.Option(15, "--top", help="Table rows to show (JSON has all)."),
    wide: bool = typer.Option(
        False,
        "--wide",
        help="Every table column, however wide the terminal; without it "
        "ckpt, time and spot time go, in that order, while the table is wider.",
    ),
    no_runs: bool = typer.Option(
        False,
        "--no-runs",
        help="Do not correct step times by the runs this machine "
        "recorded on the device (`paddlefit runs`); shown as `calibration: runs (n=K)`.",
    ),
    currency: str = typer.Option(None, "--currency", help=common.CURRENCY_HELP),
    fx_rate: list[str] = typer.Option(None, "--fx-rate", help=common.FX_RATE_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document on stdout."),
    inference: bool = typer.Option(
        False,
        "--inference",
        help="Price serving instead of training: USD per million "
        "requests per instance type, at each GPU's serving batch (`plan --inference`).",
    ),
    engine: str = typer.Option(None, "--engine", help=common.ENGINE_HELP),
    latency_ms: float = typer.Option(None, "--latency-ms", help=common.LATENCY_HELP),
) -> None:
    """Time and money to train a job on every priced cloud instance type: on-demand, and spot with lost work,
    restarts and checkpoint writes at the job spec's checkpoint cadence, else at the optimal (Daly) interval.

    Prices: SkyPilot's cached catalogs when SkyPilot has fetched them (~/.sky/catalogs/<version>/<cloud>/vms.csv),
    else the shipped snapshot; `--prices FILE` adds rows (a Chinese cloud, an internal rate).
    Every assumption (efficiency, interruption rate, disk bandwidth, restart time) is printed with the result.

    Examples:
      paddlefit cost resnet50 -b 256 --precision bf16-o1 --dataset-size 1281167 --epochs 90
      paddlefit cost resnet50 -b 256 --dataset-size 1281167 --epochs 90 --spot --spot-bucket '5-10%' --cloud aws
      paddlefit cost bert-base --input int64[128] -b 32 --optimizer adamw --dataset-size 392702 --epochs 3 --json
      paddlefit cost --config examples/digits.yaml --gpu T4 --gpu L4
      paddlefit cost resnet50 --inference --engine tensorrt --precision fp16 --latency-ms 20 --cloud aws
      paddlefit cost --config job.yaml --prices autodl-cny.csv --fx-rate CNY=7.10 --currency CNY
    """
    from paddlefit.cli.render.cost import render_cost
    from paddlefit.cost.job import cost_job
    from paddlefit.cost.request import CostRequest
    from paddlefit.job import JobOptions, attention_option

    if inference:
        _cost_inference(
            model,
            config,
            batch_size,
            inputs,
            model_arg,
            precision,
            engine,
            latency_ms,
            gpu,
            catalog,
            cloud,
            region,
            prices,
            shipped_prices,
            safety_margin,
            tf32,
            top,
            json_out,
            currency,
            fx_rate,
            {
                "--label": label,
                "--label-arg": label_arg,
                "--loss": loss,
                "--optimizer": optimizer,
                "--dataset-size": dataset_size,
                "--epochs": epochs,
                "--spot": spot or None,
                "--interruptions-per-hour": interruptions_per_hour,
                "--spot-bucket": spot_bucket,
                "--disk-mib-s": disk_mib_s,
                "--restart-minutes": restart_minutes,
                "--calibration": calibration,
                "--flash-attention/--no-flash-attention": flash_attention,
                "--wide": wide or None,
                "--no-runs": no_runs or None,
            },
        )
        return
    if engine is not None or latency_ms is not None:
        raise PaddlefitError("`--engine`/`--latency-ms` apply to serving costs only: add `--inference`.")
    if batch_size and len(batch_size) > 1:
        raise PaddlefitError(
            f"`--batch-size` given {len(batch_size)} times: a training cost takes one micro-batch "
            "(several batch sizes are for `--inference`)."
        )
    batch_size = batch_size[0] if batch_size else None  # type: ignore[assignment]
    # the request checks the options that do not depend on the job first: a bad rate fails before the model is built
    request = CostRequest(
        dataset_size=dataset_size,
        epochs=epochs,
        clouds=list(cloud or []),
        gpus=list(gpu or []),
        region=region,
        spot=spot,
        interruptions_per_hour=interruptions_per_hour,
        spot_bucket=spot_bucket,
        disk_mib_s=disk_mib_s,
        restart_minutes=restart_minutes,
        price_files=[str(p) for p in prices or []],
        shipped_prices=shipped_prices,
        catalog_files=[str(p) for p in catalog or []],
        calibration_files=[str(p) for p in calibration or []],
        safety_margin=safety_margin,
        top=top,
        use_runs=not no_runs,
        currency=currency,
        fx_rates=list(fx_rate or []),
    )
    job = JobOptions(
        model=model,
        config=config,
        batch_size=batch_size,
        inputs=inputs,
        model_args=model_arg,
        optimizer=optimizer,
        precision=precision,
        label=label,
        label_arg=label_arg,
        loss=loss,
        tf32=tf32,
        command="cost",
        attention=attention_option(flash_attention),
    )
    quiet_paddle()
    warn_deprecated({"--disk-mbps": "--disk-mib-s"})
    with common.progress_status("planning...") as say, stdout_to_stderr():
        result = cost_job(job, request, progress=say)
    for note in result.notes:
        err.print(f"[dim]{shown(note)}[/]")
    if json_out:
        print(to_json({**result.report.to_dict(), "currency": request.display().to_dict()}))
        return
    render_cost(result.report, out, top=top, wide=wide, money=request.display())


def _cost_inference(
    model: str | None,
    config: Path | None,
    batch_size: list[int] | None,
    inputs: list[str] | None,
    model_arg: list[str] | None,
    precision: str | None,
    engine: str | None,
    latency_ms: float | None,
    gpu: list[str] | None,
    catalog: list[Path] | None,
    cloud: list[str] | None,
    region: str | None,
    prices: list[Path] | None,
    shipped_prices: bool,
    safety_margin: float,
    tf32: bool | None,
    top: int,
    json_out: bool,
    currency: str | None,
    fx_rate: list[str] | None,
    unused: dict,
) -> None:
    """``cost --inference``: the serving plan's cost per million requests (no CPU measurement)."""
    from paddlefit.cli.render.serving import render_inference_cost
    from paddlefit.serving.job import plan_inference

    req = common.serving_request(
        unused,
        model=model,
        config=config,
        inputs=inputs,
        model_args=model_arg,
        batch_sizes=batch_size,
        precision=precision,
        engine=engine,
        latency_ms=latency_ms,
        gpus=gpu,
        catalog_files=[str(p) for p in catalog or []],
        cpu=False,
        prices=[str(p) for p in prices or []],
        shipped_prices=shipped_prices,
        clouds=cloud,
        region=region,
        safety_margin=safety_margin,
        tf32=tf32 is not False,
        currency=currency,
        fx_rates=fx_rate,
    )
    quiet_paddle()
    with common.progress_status("planning serving...") as say, stdout_to_stderr():
        plan = plan_inference(req, progress=say)
    if not plan.cost:
        raise PaddlefitError(
            "Nothing to price: "
            + "; ".join(unserved(plan) or ["no priced instance has these GPUs"])
            + ". Drop `--gpu`/`--cloud`, relax `--latency-ms`, or add prices with "
            "`--prices FILE`."
        )
    if json_out:
        print(
            to_json(
                {
                    "kind": "inference-cost",
                    "model": plan.model,
                    "engine": plan.engine,
                    "precision": plan.precision,
                    "latency_ms": plan.latency_ms,
                    "cost_per_million_requests": plan.cost,
                    "prices_source": plan.prices_source,
                    "assumptions": plan.assumptions,
                    "notes": plan.notes + unserved(plan),
                    "currency": req.display().to_dict(),
                }
            )
        )
        return
    render_inference_cost(plan, out, top=top, money=req.display())
    for note in plan.notes + unserved(plan):
        err.print(f"[dim]{shown(note)}[/]", soft_wrap=True)
    err.print(
        f"[dim]prices: {shown(plan.prices_source)}; one model replica per GPU at the GPU's serving batch "
        "(`plan --inference` shows each GPU's latency and memory)[/]",
        soft_wrap=True,
    )


def unserved(plan: object) -> list[str]:
    """One note per GPU with no serving point (nothing fits, or batch 1 misses the latency target), so an empty
    price list says why."""
    out = []
    for t in plan.targets:  # type: ignore[attr-defined]
        if t.kind == "gpu" and t.serving is None:
            why = (
                t.notes[0]
                if t.notes and t.notes[0].startswith("not predicted")
                else (f"batch 1 misses {plan.latency_ms:g} ms" if plan.latency_ms else "no listed batch fits")
            )  # type: ignore[attr-defined]
            out.append(f"{t.name}: not priced ({why})")
    return out
