"""``paddlefit cost``: hours and USD of a training job on every priced cloud instance type, on-demand and spot."""

from __future__ import annotations

import math
from pathlib import Path

import typer

from paddlefit.catalog.gpus import get_gpu, load_gpus
from paddlefit.catalog.prices import SKYPILOT_CACHE, catalog_gpu, select_prices
from paddlefit.cli.common import err, fail, handle_errors, out, quiet_paddle, require_positive, stdout_to_stderr
from paddlefit.cli.plan import resolve_job
from paddlefit.plan.cost import InterruptionRate, build_cost, rate_from_bucket
from paddlefit.plan.planner import PlanRequest, build_plan
from paddlefit.report.render import render_cost, to_json
from paddlefit.spec import OptimizerName, Precision, parse_enum


@handle_errors
def cost_command(
    model: str = typer.Argument(None, help="Zoo name or `package.module:factory` (or use --config)."),
    config: Path = typer.Option(None, "--config", "-c", help="Job spec YAML; the job length comes from data.train "
                                "and epochs/max_steps unless --dataset-size/--epochs are given."),
    batch_size: int = typer.Option(None, "--batch-size", "-b", help="Per-GPU micro-batch size (samples) [32]."),
    inputs: list[str] = typer.Option(None, "--input", "-i", help="Per-sample input, e.g. float32[3,224,224]."),
    model_arg: list[str] = typer.Option(None, "--model-arg", help="key=value passed to the model factory."),
    optimizer: str = typer.Option(None, "--optimizer", help="sgd | momentum | adam | adamw (default: adam)"),
    precision: str = typer.Option(None, "--precision", help="fp32 | fp16-o1 | bf16-o1 | fp16-o2 | bf16-o2 "
                                 "(default: fp32)"),
    dataset_size: int = typer.Option(None, "--dataset-size", help="Samples per epoch."),
    epochs: float = typer.Option(None, "--epochs", help="Epochs."),
    cloud: list[str] = typer.Option(None, "--cloud", help="Only these clouds (repeatable): aws, gcp, azure, lambda."),
    gpu: list[str] = typer.Option(None, "--gpu", help="Only instances with these GPUs (repeatable)."),
    region: str = typer.Option(None, "--region", help="One region for every cloud. Default: aws us-east-1, gcp "
                               "us-central1, azure eastus, lambda us-east-1."),
    spot: bool = typer.Option(False, "--spot", help="Rank by spot expected cost (on-demand where no spot price)."),
    interruptions_per_hour: float = typer.Option(None, "--interruptions-per-hour",
                                                 help="Spot interruptions per instance-hour [1/24]."),
    spot_bucket: str = typer.Option(None, "--spot-bucket", help="AWS Spot Instance Advisor bucket instead: '<5%', "
                                    "'5-10%', '10-15%', '15-20%' or '>20%' (share interrupted per month)."),
    disk_mbps: float = typer.Option(None, "--disk-mbps", help="Checkpoint write bandwidth, MiB/s [125, EBS gp3]."),
    restart_minutes: float = typer.Option(None, "--restart-minutes", help="Minutes lost per interruption besides "
                                          "the lost work (new instance, start-up, checkpoint load) [10]."),
    prices: list[Path] = typer.Option(None, "--prices", help="Extra price CSV (same header as shipped; optional "
                                      "`gpu` column naming the GPU catalog entry)."),
    shipped_prices: bool = typer.Option(False, "--shipped-prices", help="Ignore SkyPilot's cached catalogs "
                                        "(~/.sky/catalogs) and use the shipped snapshot."),
    catalog: list[Path] = typer.Option(None, "--catalog", help="Extra GPU CSV (same header as shipped)."),
    calibration: list[Path] = typer.Option(None, "--calibration", help="Calibration JSON from `paddlefit calibrate`."),
    safety_margin: float = typer.Option(0.9, "--safety-margin", help="Fraction of GPU memory a peak may use."),
    top: int = typer.Option(15, "--top", help="Table rows to show (JSON has all)."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document on stdout."),
) -> None:
    """Time and money to train a job on every priced cloud instance type: on-demand, and spot with lost work,
    restarts and checkpoint writes at the optimal (Daly) checkpoint interval.

    Prices: SkyPilot's cached catalogs when SkyPilot has fetched them (~/.sky/catalogs/<version>/<cloud>/vms.csv),
    else the shipped snapshot; `--prices FILE` adds rows (a Chinese cloud, an internal rate).
    Every assumption (efficiency, interruption rate, disk bandwidth, restart time) is printed with the result.

    Examples:
      paddlefit cost resnet50 -b 256 --precision bf16-o1 --dataset-size 1281167 --epochs 90
      paddlefit cost resnet50 -b 256 --dataset-size 1281167 --epochs 90 --spot --spot-bucket '5-10%' --cloud aws
      paddlefit cost bert-base --input int64[128] -b 32 --optimizer adamw --dataset-size 392702 --epochs 3 --json
      paddlefit cost --config examples/digits.yaml --gpu T4 --gpu L4
    """
    # options that do not depend on the job first: a bad price file or rate fails before the model is built
    if not (math.isfinite(safety_margin) and 0 < safety_margin <= 1):
        raise fail(f"`--safety-margin` must be in (0, 1] (got {safety_margin}).")
    if top < 1:
        raise fail(f"`--top` must be >= 1 (got {top}).")
    require_positive(interruptions_per_hour, "--interruptions-per-hour")
    require_positive(disk_mbps, "--disk-mbps")
    require_positive(restart_minutes, "--restart-minutes", allow_zero=True)
    for opt, value, lo, hi in (("--interruptions-per-hour", interruptions_per_hour, 1e-6, 3600),
                               ("--disk-mbps", disk_mbps, 1e-3, 1e7), ("--restart-minutes", restart_minutes, 0, 1e5)):
        if value is not None and not lo <= value <= hi:
            raise fail(f"`{opt} {value:g}` is outside {lo:g}..{hi:g}.")
    if region is not None and not region.strip():
        raise fail("`--region` is empty; give a region such as us-east-1 or leave it out.")
    if interruptions_per_hour is not None and spot_bucket is not None:
        raise fail("Give `--interruptions-per-hour` or `--spot-bucket`, not both.")
    rate = None
    if spot_bucket is not None:
        rate = rate_from_bucket(spot_bucket)
    elif interruptions_per_hour is not None:
        rate = InterruptionRate(interruptions_per_hour, f"--interruptions-per-hour {interruptions_per_hour:g}")

    gpus_all = load_gpus([str(p) for p in catalog or []])
    rows, source = select_prices([str(p) for p in prices or []], region=region, clouds=list(cloud or []),
                                 skypilot_root=None if shipped_prices else SKYPILOT_CACHE)  # fmt: skip
    if gpu:
        wanted = {get_gpu(g, gpus_all).name for g in gpu}
        rows = [r for r in rows if (g := catalog_gpu(r, gpus_all)) is not None and g.name in wanted]
        if not rows:
            raise fail(f"No priced instance has {', '.join(sorted(wanted))}; drop `--gpu` or add prices with "
                       "`--prices FILE`.")  # fmt: skip
    for r in rows:  # a `gpu` the user wrote must exist; a catalog accelerator without specs is only skipped
        if r.gpu and catalog_gpu(r, gpus_all) is None:
            raise fail(f"price file {r.source}: instance {r.instance_type} names gpu {r.gpu!r}, which is not in the "
                       "GPU catalog (`paddlefit gpus`); fix the name or add the GPU with --catalog.")  # fmt: skip
    quiet_paddle()
    job = resolve_job(model, config, batch_size, inputs, model_arg, optimizer, precision,
                      need_train=dataset_size is None and epochs is None, command="cost")  # fmt: skip
    accum = job.spec.grad_accum_steps if job.own_job and job.spec else 1
    drop_last = bool(job.own_job and job.spec and job.spec.data.drop_last)
    if dataset_size is None and epochs is None and job.own_job and job.spec:
        spec = job.spec
        if job.train_size and spec.epochs:
            dataset_size, epochs = job.train_size, float(spec.epochs)
        if spec.max_steps:
            capped = spec.max_steps * job.batch_size * spec.devices * accum
            if dataset_size is None or epochs is None or capped < dataset_size * epochs:
                dataset_size, epochs = capped, 1.0
    if (dataset_size is None) != (epochs is None) or dataset_size is None or epochs is None:
        if job.spec is not None and not job.own_job:
            raise fail(f"MODEL {job.model} is not the spec's model ({job.spec.model}), so the spec's data and epochs "
                       "do not apply: give `--dataset-size N --epochs E`.")  # fmt: skip
        raise fail("Give the job length: `--dataset-size N --epochs E` (or a --config whose data.train and "
                   "epochs/max_steps give it).")  # fmt: skip
    if not 1 <= dataset_size <= 10**13 or not math.isfinite(epochs) or not 0 < epochs <= 1e6:
        raise fail("`--dataset-size` must be 1..1e13 and `--epochs` a number in (0, 1e6].")
    if job.batch_size < 1:
        raise fail(f"`--batch-size` must be >= 1 (got {job.batch_size}).")
    needed = sorted({g.name for r in rows if (g := catalog_gpu(r, gpus_all)) is not None})
    req = PlanRequest(
        model=job.model, batch_size=job.batch_size,
        **job.call_fields(), model_args=job.model_args,
        optimizer=parse_enum(OptimizerName, job.optimizer, "--optimizer"),  # type: ignore[arg-type]
        precision=parse_enum(Precision, job.precision, "--precision"),  # type: ignore[arg-type]
        gpus=needed, devices=1, catalog_files=[str(p) for p in catalog or []],
        calibration_files=[str(p) for p in calibration or []], safety_margin=safety_margin,
    )  # fmt: skip
    with err.status("planning...") as status, stdout_to_stderr():
        plan = build_plan(req, progress=lambda msg: status.update(msg))
    kwargs = {}
    if disk_mbps is not None:
        kwargs["disk_bytes_per_s"] = disk_mbps * 1024**2
    if restart_minutes is not None:
        kwargs["restart_s"] = restart_minutes * 60
    report = build_cost(plan, rows, gpus_all, dataset_size=dataset_size, epochs=epochs, grad_accum_steps=accum,
                        rate=rate, use_spot=spot, price_source=source, drop_last=drop_last, **kwargs)  # fmt: skip
    if json_out:
        print(to_json(report.to_dict()))
        return
    render_cost(report, out, top=top)
