"""``paddlefit plan``: predict memory, FLOPs and speed of a training job on this CPU and every GPU."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from paddlefit.cli import common
from paddlefit.cli.common import err, fail, handle_errors, out, quiet_paddle, shown, stdout_to_stderr, warn_deprecated
from paddlefit.jsondoc import to_json

if TYPE_CHECKING:
    from paddlefit.plan.jobs import JobPlan


@handle_errors
def plan_command(
    model: str = typer.Argument(None, help="Zoo name (`paddlefit models`) or `package.module:factory`."),
    config: Path = typer.Option(
        None,
        "--config",
        "-c",
        help="Job spec YAML (model, inputs, batch_size, ...); options given on the command line override it.",
    ),
    batch_size: list[int] = typer.Option(
        None,
        "--batch-size",
        "-b",
        help="Per-device micro-batch size (samples) "
        "[32]. With --inference: batch sizes to serve, repeatable [1, 8, 32].",
    ),
    inputs: list[str] = typer.Option(
        None,
        "--input",
        "-i",
        help="Per-sample input, e.g. float32[3,224,224] or int64[128]; repeat for "
        "multi-input models, in forward()'s order; name=SPEC passes a keyword "
        "argument (token_type_ids=int64[128]:2). Default: the zoo model's own.",
    ),
    label: str = typer.Option(None, "--label", help=common.LABEL_HELP),
    label_arg: str = typer.Option(None, "--label-arg", help=common.LABEL_ARG_HELP),
    loss: str = typer.Option(None, "--loss", help=common.LOSS_HELP),
    eval_batch_size: int = typer.Option(
        None,
        "--eval-batch-size",
        help="Samples per evaluation forward (default: data.eval_batch_size, else --batch-size).",
    ),
    model_arg: list[str] = typer.Option(None, "--model-arg", help="key=value passed to the model factory."),
    optimizer: str = typer.Option(None, "--optimizer", help="sgd | momentum | adam | adamw (default: adam)"),
    precision: str = typer.Option(
        None,
        "--precision",
        help="fp32 | fp16-o1 | bf16-o1 | fp16-o2 | bf16-o2 "
        "(default: fp32); with --inference: fp32 | fp16 | int8 (TensorRT).",
    ),
    tf32: bool = typer.Option(
        None,
        "--tf32/--no-tf32",
        help="fp32 matmul/conv on TF32 tensor cores (Ampere+; "
        "Paddle's default) or, with --no-tf32, on the FP32 CUDA cores (TF32 off for "
        "reproducibility). Default: the spec's `tf32`, else on.",
    ),
    gpu: list[str] = typer.Option(None, "--gpu", help="Only these GPUs (repeatable). Default: whole catalog."),
    devices: int = typer.Option(None, "--devices", help="Data-parallel GPUs per target (adds all-reduce time) [1]."),
    dataset_size: int = typer.Option(None, "--dataset-size", help="Samples per epoch, for time to train."),
    epochs: float = typer.Option(None, "--epochs", help="Epochs, for time to train."),
    catalog: list[Path] = typer.Option(None, "--catalog", help="Extra GPU CSV (same header as shipped)."),
    calibration: list[Path] = typer.Option(
        None, "--calibration", help="Calibration JSON from `paddlefit calibrate` on a device."
    ),
    safety_margin: float = typer.Option(
        0.9, "--safety-margin", help="Fraction of device memory a peak may use and still fit."
    ),
    no_runs: bool = typer.Option(
        False,
        "--no-runs",
        help="Do not correct step times by the runs this machine "
        "recorded on the device (`paddlefit runs`); shown as `calibration: runs (n=K)`.",
    ),
    max_probe_gib: float = typer.Option(
        None,
        "--max-probe-gib",
        help="Probe on CPU only if fp32 Adam states (16 B/param) stay below this. Default: min(25% of RAM, 8 GiB).",
    ),
    probe_timeout: float = typer.Option(
        None,
        "--probe-timeout",
        help="Seconds the CPU probe (run in a child "
        "process) may take before it is killed and the plan fails naming the "
        "model and inputs [600].",
    ),
    probe_memory_gib: float = typer.Option(
        None,
        "--probe-memory-gib",
        help="Memory the CPU probe's child "
        "process may allocate (RLIMIT_DATA), GiB; past it the plan fails "
        "naming it. Default: 90% of the available RAM.",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document on stdout."),
    seq_len: int = typer.Option(
        None, "--seq-len", help="Parallel planner: tokens per sequence \\[min(max_position, 4096)]."
    ),
    global_batch: int = typer.Option(
        None, "--global-batch", help="Parallel planner: sequences per optimizer step [4M tokens / seq-len]."
    ),
    gpus: int = typer.Option(None, "--gpus", help="Parallel planner: GPUs in the job [8]."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="Parallel planner: GPUs per node."),
    mfu: float = typer.Option(
        None, "--mfu", help="Parallel planner: fraction of dense peak compute reaches \\[published MFU per GPU class]."
    ),
    network_gbit_s: float = typer.Option(
        None,
        "--network-gbit-s",
        "--network-gbps",
        help="Parallel planner: "
        "inter-node network per node, Gbit/s [AWS p4d 400 / p5 3200]. "
        "(`--network-gbps`: deprecated alias, removed in the next release.)",
    ),
    flash_attention: bool = typer.Option(
        None,
        "--flash-attention/--no-flash-attention",
        help="Plan GPU rows with each eager attention core (matmul -> softmax -> "
        "matmul) as one FlashAttention-2 kernel (CC 8.0+, fp16/bf16), or as "
        "written (job spec `attention`) \\[eager]. Parallel planner: fused "
        "attention, no s x s activations \\[on].",
    ),
    top: int = typer.Option(5, "--top", help="Parallel planner: layouts shown per GPU."),
    explain: list[str] = typer.Option(
        None,
        "--explain",
        help="Also print the predicted top operators of one "
        "step on this GPU (repeatable): a profile of a card you do not have.",
    ),
    inference: bool = typer.Option(
        False,
        "--inference",
        help="Plan serving instead of training: latency, "
        "throughput and memory per batch on every GPU, the CPU row measured here, USD per "
        "million requests. MODEL may also be an exported model (a `paddlefit export` "
        "folder, or model.json/model.pdmodel beside model.pdiparams).",
    ),
    engine: str = typer.Option(None, "--engine", help=common.ENGINE_HELP),
    latency_ms: float = typer.Option(None, "--latency-ms", help=common.LATENCY_HELP),
    no_cpu: bool = typer.Option(False, "--no-cpu", help="With --inference: skip the CPU measurement."),
    threads: list[int] = typer.Option(
        None,
        "--threads",
        help="With --inference: CPU threads of the measured CPU row, repeatable [1 and the physical cores].",
    ),
    currency: str = typer.Option(None, "--currency", help="With --inference: " + common.CURRENCY_HELP),
    fx_rate: list[str] = typer.Option(
        None,
        "--fx-rate",
        help="With --inference: CODE=RATE, units of that currency "
        "per USD, e.g. CNY=7.10, for --currency (price files in it: `cost --inference "
        "--prices`). No rate is shipped.",
    ),
    cpu_budget_s: float = typer.Option(
        None,
        "--cpu-budget-s",
        help="With --inference: wall seconds the measured "
        "CPU row may take (build, export, measure); batches it does not reach are "
        "listed [20].",
    ),
) -> None:
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
    from paddlefit.job import JobOptions, attention_option, check_not_empty
    from paddlefit.plan.jobs import plan_job

    if inference:
        _plan_inference(
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
            no_cpu,
            threads,
            cpu_budget_s,
            safety_margin,
            tf32,
            json_out,
            currency,
            fx_rate,
            {
                "--label": label,
                "--label-arg": label_arg,
                "--loss": loss,
                "--optimizer": optimizer,
                "--eval-batch-size": eval_batch_size,
                "--devices": devices,
                "--dataset-size": dataset_size,
                "--epochs": epochs,
                "--calibration": calibration,
                "--explain": explain,
                "--max-probe-gib": max_probe_gib,
                "--probe-timeout": probe_timeout,
                "--probe-memory-gib": probe_memory_gib,
                "--seq-len": seq_len,
                "--global-batch": global_batch,
                "--gpus": gpus,
                "--mfu": mfu,
                "--network-gbit-s": network_gbit_s,
                "--flash-attention/--no-flash-attention": flash_attention,
                "--top": top if top != 5 else None,
                "--no-runs": no_runs or None,
                "--gpus-per-node": gpus_per_node if gpus_per_node != 8 else None,
            },
        )
        return
    given = [
        n
        for n, v in (
            ("--engine", engine),
            ("--latency-ms", latency_ms),
            ("--threads", threads),
            ("--cpu-budget-s", cpu_budget_s),
            ("--currency", currency),
            ("--fx-rate", fx_rate),
        )
        if v not in (None, [])
    ] + (["--no-cpu"] if no_cpu else [])
    if given:
        raise fail(
            f"{', '.join(f'`{g}`' for g in given)} {'applies' if len(given) == 1 else 'apply'} to serving "
            "plans only: add `--inference`."
        )
    if batch_size and len(batch_size) > 1:
        raise fail(
            f"`--batch-size` given {len(batch_size)} times: a training plan takes one micro-batch (several "
            "batch sizes are for `--inference`)."
        )
    batch_size = batch_size[0] if batch_size else None  # type: ignore[assignment]
    warn_deprecated({"--network-gbps": "--network-gbit-s"})
    check_not_empty({"--precision": precision, "--optimizer": optimizer})
    if _parallel_requested(model, seq_len, global_batch, gpus):
        _plan_parallel(
            model,
            seq_len,
            global_batch,
            gpus,
            gpus_per_node,
            gpu,
            precision,
            optimizer,
            flash_attention is not False,
            mfu,
            network_gbit_s,
            safety_margin,
            top,
            catalog,
            json_out,
            {
                "--config": config,
                "--batch-size": batch_size,
                "--input": inputs,
                "--model-arg": model_arg,
                "--label": label,
                "--label-arg": label_arg,
                "--loss": loss,
                "--eval-batch-size": eval_batch_size,
                "--devices": devices,
                "--dataset-size": dataset_size,
                "--epochs": epochs,
                "--calibration": calibration,
                "--max-probe-gib": max_probe_gib,
                "--explain": explain,
                "--probe-timeout": probe_timeout,
                "--probe-memory-gib": probe_memory_gib,
                "--tf32/--no-tf32": tf32,
            },
        )
        return
    stray = [
        name
        for name, given in (
            ("--gpus-per-node", gpus_per_node != 8),
            ("--mfu", mfu is not None),
            ("--network-gbit-s", network_gbit_s is not None),
            ("--top", top != 5),
        )
        if given
    ]
    if stray:
        raise fail(
            f"{', '.join(f'`{s}`' for s in stray)} only apply to the parallel planner (a built-in LLM, a "
            "config.json, or with `--gpus N`); this plan probes the model on the CPU."
        )
    quiet_paddle()
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
        eval_batch_size=eval_batch_size,
        devices=devices,
        tf32=tf32,
        attention=attention_option(flash_attention),
    )
    # user code may print: keep stdout for the result alone
    with common.progress_status("planning...") as say, stdout_to_stderr():
        result = plan_job(
            job,
            gpus=gpu or [],
            dataset_size=dataset_size,
            epochs=epochs,
            catalog_files=[str(p) for p in catalog or []],
            calibration_files=[str(p) for p in calibration or []],
            safety_margin=safety_margin,
            max_probe_gib=max_probe_gib,
            explain=explain or [],
            use_runs=not no_runs,
            probe_timeout_s=probe_timeout,
            probe_memory_gib=probe_memory_gib,
            progress=say,
        )
    _render(result, json_out)


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


def _plan_parallel(
    model: str | None,
    seq_len: int | None,
    global_batch: int | None,
    gpus: int | None,
    gpus_per_node: int,
    gpu: list[str] | None,
    precision: str | None,
    optimizer: str | None,
    flash_attention: bool,
    mfu: float | None,
    network_gbit_s: float | None,
    safety_margin: float,
    top: int,
    catalog: list[Path] | None,
    json_out: bool,
    unused: dict,
) -> None:
    """Parse -> :func:`paddlefit.llm.search.plan_llm` -> render (table or ``--json``)."""
    from paddlefit.cli.render.tables import render_parallel_plan
    from paddlefit.jobspec.spec import Precision, parse_enum
    from paddlefit.llm.search import LLMPlanRequest, plan_llm

    given = [k for k, v in unused.items() if v not in (None, [], ())]
    if model is None:
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
    req = LLMPlanRequest(
        model=model,
        seq_len=seq_len,
        global_batch=global_batch,
        gpus=gpus if gpus is not None else 8,
        gpu_names=list(gpu) if gpu else None,
        gpus_per_node=gpus_per_node,
        precision=parse_enum(Precision, precision or "bf16-o2", "--precision"),  # type: ignore[arg-type]
        optimizer=optimizer or "adamw",
        flash_attention=flash_attention,
        mfu=mfu,
        network_gbit_s=network_gbit_s,
        safety_margin=safety_margin,
        top=top,
        catalog_files=[str(p) for p in catalog or []],
    )
    plan = plan_llm(req)
    if json_out:
        print(to_json(plan.to_dict()))
        return
    render_parallel_plan(plan, out)


def _plan_inference(
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
    no_cpu: bool,
    threads: list[int] | None,
    cpu_budget_s: float | None,
    safety_margin: float,
    tf32: bool | None,
    json_out: bool,
    currency: str | None,
    fx_rate: list[str] | None,
    unused: dict,
) -> None:
    """Parse -> :func:`paddlefit.serving.job.plan_inference` -> render (tables or ``--json``)."""
    from paddlefit.cli.render.serving import render_inference
    from paddlefit.serving.job import plan_inference

    if no_cpu and (threads or cpu_budget_s is not None):
        raise fail(
            f"`{'--threads' if threads else '--cpu-budget-s'}` sets the CPU measurement, and `--no-cpu` skips "
            "it: give one of them."
        )
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
        cpu=not no_cpu,
        threads=threads,
        cpu_budget_s=cpu_budget_s,
        safety_margin=safety_margin,
        tf32=tf32 is not False,
        currency=currency,
        fx_rates=fx_rate,
    )
    quiet_paddle()
    with common.progress_status("planning serving...") as say, stdout_to_stderr():
        plan = plan_inference(req, progress=say)
    if json_out:
        print(to_json({**plan.to_dict(), "currency": req.display().to_dict()}))
        return
    render_inference(plan, out, money=req.display())
