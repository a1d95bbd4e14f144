"""``paddlefit plan``: predict memory, FLOPs and speed of a training job on this CPU and every GPU."""

from __future__ import annotations

from typing import TYPE_CHECKING

from paddlefit import options
from paddlefit.cli import common
from paddlefit.cli.common import err, fail, out, quiet_paddle, shown, stdout_to_stderr
from paddlefit.cli.params import Args, command
from paddlefit.jsondoc import to_json

if TYPE_CHECKING:
    from paddlefit.plan.jobs import JobPlan


#: Options only a serving plan (``--inference``) takes.
SERVING_ONLY = ("engine", "latency_ms", "threads", "cpu_budget_s", "currency", "fx_rate", "no_cpu")
#: Options only the parallel LLM planner takes.
PARALLEL_ONLY = ("gpus_per_node", "mfu", "network_gbit_s", "top")
#: Options of the CPU-probe training plan that the parallel planner, which searches the micro-batch, has no use for.
PROBE_ONLY = (
    "config",
    "batch_size",
    "inputs",
    "model_arg",
    "label",
    "label_arg",
    "loss",
    "eval_batch_size",
    "devices",
    "dataset_size",
    "epochs",
    "calibration",
    "max_probe_gib",
    "explain",
    "probe_timeout",
    "probe_memory_gib",
    "tf32",
    "no_runs",
)
#: Options of a training plan that a serving plan refuses.
TRAINING_ONLY = (
    "label",
    "label_arg",
    "loss",
    "optimizer",
    "eval_batch_size",
    "devices",
    "dataset_size",
    "epochs",
    "calibration",
    "explain",
    "max_probe_gib",
    "probe_timeout",
    "probe_memory_gib",
    "seq_len",
    "global_batch",
    "gpus",
    "mfu",
    "network_gbit_s",
    "flash_attention",
    "top",
    "no_runs",
    "gpus_per_node",
)


@command(
    options.MODEL_ARG,
    options.CONFIG,
    options.BATCH_SIZE,
    options.INPUT,
    options.LABEL,
    options.LABEL_ARG,
    options.LOSS,
    options.EVAL_BATCH_SIZE,
    options.MODEL_ARG_PLAN,
    options.OPTIMIZER,
    options.PRECISION,
    options.TF32,
    options.GPU,
    options.DEVICES,
    options.DATASET_SIZE,
    options.EPOCHS,
    options.CATALOG,
    options.CALIBRATION,
    options.SAFETY_MARGIN,
    options.NO_RUNS,
    options.MAX_PROBE_GIB,
    options.PROBE_TIMEOUT,
    options.PROBE_MEMORY_GIB,
    options.JSON,
    options.SEQ_LEN,
    options.GLOBAL_BATCH,
    options.GPUS,
    options.GPUS_PER_NODE,
    options.MFU,
    options.NETWORK_GBIT_S,
    options.FLASH_ATTENTION,
    options.TOP,
    options.EXPLAIN,
    options.INFERENCE,
    options.ENGINE,
    options.LATENCY_MS,
    options.NO_CPU,
    options.THREADS,
    options.CURRENCY,
    options.FX_RATE,
    options.CPU_BUDGET_S,
)
def plan_command(args: Args) -> None:
    """Predict peak memory, FLOPs, step time and largest batch of a training job on this CPU and every GPU.

    For large transformers (a built-in LLM such as llama-2-7b, a config.json / YAML path, or whenever --gpus,
    --global-batch or --seq-len is given) it instead searches data parallel, sharding stage, tensor and pipeline
    parallel degrees, micro-batch and recompute on N GPUs, analytically, and prints the layouts that fit ranked
    by tokens/s with their PaddleNLP TrainingArguments.

    Memory = model states (exact) + activations/workspace measured by a CPU probe (real training steps at
    batch 1, 2, 3 and, within a few seconds' budget, 6, 12, ... up to --batch-size) and extrapolated per phase.
    GPU rows adjust it for precision (activations at the AMP dtypes Paddle gives each traced op). GPU step
    time is a per-operator model over the ops traced in the probe (forward, derived backward, AMP casts,
    optimizer), each kernel at its unit's peak or the memory bandwidth with parameters fitted on published
    measurements (`cal fit`), or measured on the GPU by `paddlefit calibrate` (`cal device`).

    Examples:
      paddlefit plan resnet50 --batch-size 256
      paddlefit plan resnet50 -b 256 --precision fp16-o1 --gpu L4 --gpu A100-SXM4-40GB
      paddlefit plan resnet50 -b 256 --gpu A100-SXM4-40GB --no-tf32   # fp32 on CUDA cores (reproducible fp32)
      paddlefit plan mobilenet_v2 -b 128 --precision fp16-o1 --explain A100-SXM4-40GB
      paddlefit plan bert-base --input int64[512] -b 32 --optimizer adamw --devices 8 --json
      paddlefit plan mypkg.models:build_net --input float32[1,28,28] --model-arg num_classes=10
      paddlefit plan --config job.yaml --gpu L4      # inputs from `inputs:` or data.train's first sample
      paddlefit plan llama-2-7b --seq-len 4096 --global-batch 1024 --gpus 8 --gpu A100-SXM4-80GB
      paddlefit plan llama-2-70b --seq-len 4096 --gpus 64 --gpu H100-SXM --json
      paddlefit plan ./config.json --gpus 16 --seq-len 2048   # a Hugging Face / PaddleNLP config.json
      paddlefit plan resnet50 --inference -b 1 -b 8 --engine tensorrt --precision fp16 --latency-ms 10
      paddlefit plan runs/digits/inference --inference --gpu T4 --gpu L4 --json   # an exported model
      paddlefit plan gpt2-xl --inference --input int64[1024] -b 1 -b 8 --gpu L20 --no-cpu
      paddlefit plan llama-2-7b --inference --input int64[2048] --precision fp16 --gpu A800-SXM4-80GB
    """
    from paddlefit.plan.jobs import plan_job

    if args.inference:
        _plan_inference(args)
        return
    given = args.typed(*SERVING_ONLY)
    if given:
        raise fail(
            f"{', '.join(f'`{g}`' for g in given)} {'applies' if len(given) == 1 else 'apply'} to serving "
            "plans only: add `--inference`."
        )
    if args.batch_size and len(args.batch_size) > 1:
        raise fail(
            f"`--batch-size` given {len(args.batch_size)} times: a training plan takes one micro-batch (several "
            "batch sizes are for `--inference`)."
        )
    if _parallel_requested(args.model, args.seq_len, args.global_batch, args.gpus):
        _plan_parallel(args)
        return
    stray = args.typed(*PARALLEL_ONLY)
    if stray:
        raise fail(
            f"{', '.join(f'`{s}`' for s in stray)} only {'applies' if len(stray) == 1 else 'apply'} to the "
            "parallel planner (a built-in LLM, a "
            "config.json, or with `--gpus N`); this plan probes the model on the CPU."
        )
    quiet_paddle()
    job = common.job_options(args, "plan", eval_batch_size=args.eval_batch_size, devices=args.devices)
    # user code may print: keep stdout for the result alone
    with common.progress_status("planning...") as say, stdout_to_stderr():
        result = plan_job(
            job,
            gpus=args.gpu or [],
            dataset_size=args.dataset_size,
            epochs=args.epochs,
            catalog_files=[str(p) for p in args.catalog or []],
            calibration_files=[str(p) for p in args.calibration or []],
            safety_margin=args.safety_margin,
            max_probe_gib=args.max_probe_gib,
            explain=args.explain or [],
            use_runs=not args.no_runs,
            probe_timeout_s=args.probe_timeout,
            probe_memory_gib=args.probe_memory_gib,
            progress=say,
        )
    _render(result, args.json_out)


def _render(result: JobPlan, json_out: bool) -> None:
    """The plan's notes on stderr, then the plan: one JSON document (``--json``) or the tables."""
    from paddlefit.cli.render.tables import render_explain, render_plan

    for note in result.notes:
        err.print(f"[dim]{shown(note)}[/]")
    if json_out:
        print(to_json(result.plan.to_dict()))
        return
    render_plan(result.plan, out)
    for name, rows in result.plan.explain.items():
        render_explain(result.plan, name, rows, out)


def _parallel_requested(model: str | None, seq_len: int | None, global_batch: int | None, gpus: int | None) -> bool:
    """The parallel LLM planner runs for --gpus/--global-batch/--seq-len, a JSON/YAML config path, or a built-in
    LLM that is not a probe-able zoo model."""
    from paddlefit.catalog.transformer_configs import LLM_CONFIGS, is_llm_config_path
    from paddlefit.models.zoo import zoo_names

    if seq_len is not None or global_batch is not None or gpus is not None:
        return True
    if model is None:
        return False
    key = model.strip().lower()
    return is_llm_config_path(model) or (key in LLM_CONFIGS and key not in zoo_names())


def _plan_parallel(args: Args) -> None:
    """Parse -> :func:`paddlefit.llm.search.plan_llm` -> render (table or ``--json``)."""
    from paddlefit.cli.render.tables import render_parallel_plan
    from paddlefit.jobspec.spec import Precision, parse_enum
    from paddlefit.llm.search import LLMPlanRequest, plan_llm

    given = args.typed(*PROBE_ONLY)
    if args.model is None:
        why = (
            " (`--config` job specs go to the CPU-probe plan, without --gpus/--global-batch/--seq-len)"
            if "--config" in given
            else ""
        )
        raise fail(f"Give a MODEL for the parallel planner, e.g. `paddlefit plan llama-2-7b --gpus 8`{why}.")
    if given:
        raise fail(
            f"{', '.join(f'`{k}`' for k in given)} not used by the parallel planner (MODEL with --gpus, "
            "--global-batch or --seq-len): the micro-batch and degrees are searched; give the global batch "
            "with --global-batch."
        )
    fields = {
        "model": args.model,
        "seq_len": args.seq_len,
        "global_batch": args.global_batch,
        "gpus": args.gpus,
        "gpu_names": list(args.gpu) if args.gpu else None,
        "gpus_per_node": args.gpus_per_node,
        "precision": parse_enum(Precision, args.precision, "--precision") if args.precision is not None else None,
        "optimizer": args.optimizer,
        "flash_attention": args.flash_attention,
        "mfu": args.mfu,
        "network_gbit_s": args.network_gbit_s,
        "safety_margin": args.safety_margin,
        "top": args.top,
        "catalog_files": [str(p) for p in args.catalog or []],
    }
    # an option not given takes the request's default (one place: the field)
    req = LLMPlanRequest(**{k: v for k, v in fields.items() if v is not None})
    plan = plan_llm(req)
    if args.json_out:
        print(to_json(plan.to_dict()))
        return
    render_parallel_plan(plan, out)


def _plan_inference(args: Args) -> None:
    """Parse -> :func:`paddlefit.serving.job.plan_inference` -> render (tables or ``--json``)."""
    from paddlefit.cli.render.serving import render_inference
    from paddlefit.serving.job import plan_inference

    if args.no_cpu and (args.threads or args.cpu_budget_s is not None):
        raise fail(
            f"`{'--threads' if args.threads else '--cpu-budget-s'}` sets the CPU measurement, and `--no-cpu` skips "
            "it: give one of them."
        )
    req = common.serving_request(
        args,
        args.typed(*TRAINING_ONLY),
        cpu=not args.no_cpu,
        threads=args.threads,
        cpu_budget_s=args.cpu_budget_s,
    )
    quiet_paddle()
    with common.progress_status("planning serving...") as say, stdout_to_stderr():
        plan = plan_inference(req, progress=say)
    if args.json_out:
        print(to_json({**plan.to_dict(), "currency": req.display().to_dict()}))
        return
    render_inference(plan, out, money=req.display())
