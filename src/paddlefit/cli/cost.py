"""``paddlefit cost``: hours and USD of a training job on every priced cloud instance type, on-demand and spot."""

from __future__ import annotations

from paddlefit import options
from paddlefit.cli import common
from paddlefit.cli.common import err, out, quiet_paddle, shown, stdout_to_stderr
from paddlefit.cli.params import Args, command
from paddlefit.errors import PaddlefitError
from paddlefit.jsondoc import to_json

#: Options of a training cost that a serving cost (``--inference``) refuses.
TRAINING_ONLY = (
    "label",
    "label_arg",
    "loss",
    "optimizer",
    "dataset_size",
    "epochs",
    "spot",
    "interruptions_per_hour",
    "spot_bucket",
    "disk_mib_s",
    "restart_minutes",
    "calibration",
    "flash_attention",
    "wide",
    "no_runs",
)


@command(
    options.MODEL_ARG,
    options.CONFIG_COST,
    options.BATCH_SIZE,
    options.INPUT,
    options.LABEL,
    options.LABEL_ARG,
    options.LOSS,
    options.MODEL_ARG_PLAN,
    options.OPTIMIZER_COST,
    options.PRECISION_COST,
    options.FLASH_ATTENTION_COST,
    options.TF32,
    options.DATASET_SIZE,
    options.EPOCHS,
    options.CLOUD,
    options.GPU_COST,
    options.REGION,
    options.SPOT,
    options.INTERRUPTIONS_PER_HOUR,
    options.SPOT_BUCKET,
    options.DISK_MIB_S,
    options.RESTART_MINUTES,
    options.PRICES,
    options.SHIPPED_PRICES,
    options.CATALOG,
    options.CALIBRATION,
    options.SAFETY_MARGIN,
    options.TOP_COST,
    options.WIDE,
    options.NO_RUNS,
    options.CURRENCY,
    options.FX_RATE,
    options.JSON,
    options.INFERENCE_COST,
    options.ENGINE,
    options.LATENCY_MS,
)
def cost_command(args: Args) -> None:
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

    if args.inference:
        _cost_inference(args)
        return
    if args.given("engine") or args.given("latency_ms"):
        raise PaddlefitError("`--engine`/`--latency-ms` apply to serving costs only: add `--inference`.")
    if args.batch_size and len(args.batch_size) > 1:
        raise PaddlefitError(
            f"`--batch-size` given {len(args.batch_size)} times: a training cost takes one micro-batch "
            "(several batch sizes are for `--inference`)."
        )
    # the request checks the options that do not depend on the job first: a bad rate fails before the model is built
    request = CostRequest(
        dataset_size=args.dataset_size,
        epochs=args.epochs,
        clouds=list(args.cloud or []),
        gpus=list(args.gpu or []),
        region=args.region,
        spot=args.spot,
        interruptions_per_hour=args.interruptions_per_hour,
        spot_bucket=args.spot_bucket,
        disk_mib_s=args.disk_mib_s,
        restart_minutes=args.restart_minutes,
        price_files=[str(p) for p in args.prices or []],
        shipped_prices=args.shipped_prices,
        catalog_files=[str(p) for p in args.catalog or []],
        calibration_files=[str(p) for p in args.calibration or []],
        safety_margin=args.safety_margin,
        top=args.top,
        use_runs=not args.no_runs,
        currency=args.currency,
        fx_rates=list(args.fx_rate or []),
    )
    job = common.job_options(args, "cost")
    quiet_paddle()
    with common.progress_status("planning...") as say, stdout_to_stderr():
        result = cost_job(job, request, progress=say)
    for note in result.notes:
        err.print(f"[dim]{shown(note)}[/]")
    if args.json_out:
        print(to_json({**result.report.to_dict(), "currency": request.display().to_dict()}))
        return
    render_cost(result.report, out, top=args.top, wide=args.wide, money=request.display())


def _cost_inference(args: Args) -> None:
    """``cost --inference``: the serving plan's cost per million requests (no CPU measurement)."""
    from paddlefit.cli.render.serving import render_inference_cost
    from paddlefit.serving.job import plan_inference

    options.TOP_COST.check(args.top)  # the table's rows: the range a training cost's request checks
    req = common.serving_request(
        args,
        args.typed(*TRAINING_ONLY),
        cpu=False,
        prices=[str(p) for p in args.prices or []],
        shipped_prices=args.shipped_prices,
        clouds=args.cloud,
        region=args.region,
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
    if args.json_out:
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
    render_inference_cost(plan, out, top=args.top, money=req.display())
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
