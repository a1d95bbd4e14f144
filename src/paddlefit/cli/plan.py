"""``paddlefit plan``: predict memory, FLOPs and speed of a training job on this CPU and every GPU."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from paddlefit.cli.common import err, fail, handle_errors, out, quiet_paddle, stdout_to_stderr
from paddlefit.models.zoo import parse_model_args
from paddlefit.plan.planner import PlanRequest, build_plan
from paddlefit.report.render import render_explain, render_plan, to_json
from paddlefit.spec import (
    JobSpec,
    OptimizerName,
    Precision,
    load_job_spec,
    parse_enum,
    parse_input_spec,
    parse_input_specs,
)


def _job_length(spec: JobSpec, train_size: int | None, batch_size: int,
                devices: int) -> tuple[int | None, float | None]:  # fmt: skip
    """(samples per epoch, epochs) that make the planner's time to train match what `train` runs: full global
    batches only when ``data.drop_last``; ``max_steps`` alone = that many global batches as one "epoch".
    ``train_size`` is the length of ``data.train`` (None when the spec has none)."""
    global_batch = batch_size * devices * spec.grad_accum_steps
    steps = []
    if train_size is not None and spec.epochs:
        size = train_size
        per_epoch = size // global_batch if spec.data.drop_last else math.ceil(size / global_batch)
        steps.append(max(1, round(spec.epochs * per_epoch)))
    if spec.max_steps:
        steps.append(spec.max_steps)
    if not steps:
        return None, None
    return min(steps) * global_batch, 1.0


@dataclass
class ResolvedJob:
    """The job the model/--config options describe (options override the spec), for plan and cost."""

    spec: JobSpec | None
    model: str
    batch_size: int
    inputs: list[str] | None
    model_args: dict
    optimizer: str
    precision: str
    own_job: bool
    train_size: int | None
    label: str | None = None
    label_arg: str | None = None
    loss: str | None = None
    eval_batch_size: int | None = None
    sample: object = None
    evaluates: bool = True
    queued: tuple[int, int, int] = (0, 0, 0)

    def call_fields(self) -> dict:
        """The :class:`~paddlefit.plan.planner.PlanRequest` fields of how the job calls its model.

        Raises:
            InputSpecError: an input or label spec does not parse.
        """
        return {
            "inputs": parse_input_specs(self.inputs) if self.inputs else None,
            "label": parse_input_spec(self.label) if self.label else None,
            "label_arg": self.label_arg, "loss": self.loss,
            "loss_strict": self.loss is not None or self.own_job or self.label_arg is not None,
            "eval_batch_size": self.eval_batch_size,
            "cpu_threads": self.spec.cpu_threads if self.own_job and self.spec else None,
            "sample": self.sample,
            "eval_phase": self.evaluates,
            "loader_prefetch": self.queued[0], "eval_prefetch": self.queued[1], "eval_held": self.queued[2],
        }  # fmt: skip


def resolve_job(model: str | None, config: Path | None, batch_size: int | None, inputs: list[str] | None,
                model_arg: list[str] | None, optimizer: str | None, precision: str | None,
                need_train: bool, command: str = "plan", label: str | None = None, label_arg: str | None = None,
                loss: str | None = None, eval_batch_size: int | None = None) -> ResolvedJob:  # fmt: skip
    """Merge MODEL/options with ``--config``; build ``data.train`` once: its first sample gives the inputs, the
    label and the probe's batches (unless ``--input`` is given), its length the job length.

    Raises:
        PaddlefitError (exit 2): neither a model nor a spec; a bad spec or dataset.
    """
    spec = load_job_spec(config) if config is not None else None
    if spec is None and model is None:
        raise fail(f"Give a MODEL (e.g. `paddlefit {command} resnet50`) or a job spec with `--config FILE`.")
    model = model or spec.model  # type: ignore[union-attr]
    batch_size = batch_size if batch_size is not None else (spec.batch_size if spec else 32)
    optimizer = optimizer or (spec.optimizer.value if spec else "adam")
    precision = precision or (spec.precision.value if spec else "fp32")
    cli_inputs = bool(inputs)
    if not inputs and spec and spec.inputs:
        inputs = spec.inputs
    own_job = spec is not None and model == spec.model
    if own_job:
        label = label or spec.label  # type: ignore[union-attr]
        label_arg = label_arg or spec.label_arg  # type: ignore[union-attr]
        loss = loss or spec.loss  # type: ignore[union-attr]
        eval_batch_size = eval_batch_size or spec.data.eval_batch_size  # type: ignore[union-attr]
    train_ds = None
    if own_job and spec.data.train:  # type: ignore[union-attr]
        from paddlefit.datasets import resolve_dataset

        with stdout_to_stderr():
            train_ds = resolve_dataset(spec.data.train, spec.data.train_args, "data.train")  # type: ignore[union-attr]
    if train_ds is not None:
        from paddlefit.datasets import infer_sample_specs

        found, found_label = infer_sample_specs(train_ds, f"data.train: {spec.data.train}", label_arg)  # type: ignore
        if inputs and not cli_inputs:
            _check_inputs_match_data(inputs, found, spec.data.train)  # type: ignore[union-attr]
        if not inputs:
            inputs = found
            err.print(f"[dim]inputs from data.train: {' '.join(inputs)}[/]")
        if not label and found_label:
            label = found_label
            err.print(f"[dim]label from data.train: {label}[/]")
    evaluates = not own_job or bool(spec.data.eval)  # type: ignore[union-attr]
    # batches Paddle's single-process DataLoader holds besides the one in use: its blocking queue
    # (prefetch_factor) + the BufferedReader's 2, never more than the loader has left (PlanRequest.loader_prefetch)
    queued = [0, 0, 0]
    single = own_job and spec.data.num_workers == 0  # type: ignore[union-attr]
    if single and train_ds is not None:
        batches = len(train_ds) // batch_size
        queued[0] = max(0, min(spec.data.prefetch_factor + 2, batches - 1))  # type: ignore[union-attr]
        # the last eval comes mid-epoch when the run stops there (max_steps): the train loader then still holds its
        # queue and the batch it last handed out; evals at epoch ends find it drained
        per_epoch = max(1, batches // spec.grad_accum_steps)  # type: ignore[union-attr]
        limits = [round(spec.epochs * per_epoch)] if spec.epochs else []  # type: ignore[union-attr]
        limits += [spec.max_steps] if spec.max_steps else []  # type: ignore[union-attr]
        total = min(limits) if limits else per_epoch
        left = (per_epoch - total % per_epoch) * spec.grad_accum_steps  # type: ignore[union-attr]
        if total % per_epoch:
            queued[2] = min(queued[0], left) + 1
    if own_job and spec.data.eval:  # type: ignore[union-attr]
        from paddlefit.datasets import resolve_dataset

        with stdout_to_stderr():  # train's eval batches hold at most the whole eval set
            n_eval = len(resolve_dataset(spec.data.eval, spec.data.eval_args, "data.eval"))  # type: ignore
        eval_batch_size = min(eval_batch_size or batch_size, n_eval)
        queued[1] = max(0, min(spec.data.prefetch_factor + 2, math.ceil(n_eval / eval_batch_size) - 1))  # type: ignore
    model_args = parse_model_args(model_arg) if model_arg else (dict(spec.model_args) if spec else {})
    return ResolvedJob(spec, model, batch_size, list(inputs) if inputs else None, model_args, optimizer, precision,
                       own_job, len(train_ds) if train_ds is not None else None, label, label_arg, loss,
                       eval_batch_size,
                       # the probe's batches are copies of data.train's first sample unless --input overrides them
                       train_ds[0] if train_ds is not None and not cli_inputs else None, evaluates,
                       (queued[0], queued[1], queued[2]))  # fmt: skip


def _check_inputs_match_data(given: list[str], found: list[str], dataset: str) -> None:
    """The job's ``inputs:`` must describe ``data.train``'s samples (train calls the model with the data): the
    same count, dtypes and shapes (names: the dict keys of dict samples; id ranges may differ).

    Raises:
        PaddlefitError: naming both lists.
    """
    g, f = parse_input_specs(given, "inputs:"), parse_input_specs(found, "inputs:")
    dict_samples = all(s.name for s in f) and f

    def key(s: Any) -> tuple:
        return (s.name if dict_samples else None, s.dtype, s.shape)

    same = sorted(map(key, g)) == sorted(map(key, f)) if dict_samples else \
        [(s.dtype, s.shape) for s in g] == [(s.dtype, s.shape) for s in f]  # fmt: skip
    if not same:
        raise fail(f"`inputs: {' '.join(given)}` does not describe data.train ({dataset}), whose first sample has "
                   f"{' '.join(found)}; train calls the model with the data, so fix `inputs:` or remove it (plan "
                   "reads the data's).")  # fmt: skip


@handle_errors
def plan_command(
    model: str = typer.Argument(None, help="Zoo name (`paddlefit models`) or `package.module:factory`."),
    config: Path = typer.Option(None, "--config", "-c", help="Job spec YAML (model, inputs, batch_size, ...); "
                                "options given on the command line override it."),
    batch_size: int = typer.Option(None, "--batch-size", "-b", help="Per-device micro-batch size (samples) [32]."),
    inputs: list[str] = typer.Option(None, "--input", "-i",
                                     help="Per-sample input, e.g. float32[3,224,224] or int64[128]; repeat for "
                                          "multi-input models, in forward()'s order; name=SPEC passes a keyword "
                                          "argument (token_type_ids=int64[128]:2). Default: the zoo model's own."),
    label: str = typer.Option(None, "--label", help="Per-sample label spec, e.g. int64[]:10 (class ids) or "
                              "int64[512,512]:19 (a mask). Default: data.train's, else generated from the loss."),
    label_arg: str = typer.Option(None, "--label-arg", help="Pass the label to forward() as this keyword (a model "
                                  "that computes its own loss, e.g. labels)."),
    loss: str = typer.Option(None, "--loss", help="cross_entropy | mse | package.module:function (default: the "
                             "model's own loss if it returns one, else cross_entropy)."),
    eval_batch_size: int = typer.Option(None, "--eval-batch-size", help="Samples per evaluation forward "
                                        "(default: data.eval_batch_size, else --batch-size)."),
    model_arg: list[str] = typer.Option(None, "--model-arg", help="key=value passed to the model factory."),
    optimizer: str = typer.Option(None, "--optimizer", help="sgd | momentum | adam | adamw (default: adam)"),
    precision: str = typer.Option(None, "--precision", help="fp32 | fp16-o1 | bf16-o1 | fp16-o2 | bf16-o2 "
                                 "(default: fp32)"),
    gpu: list[str] = typer.Option(None, "--gpu", help="Only these GPUs (repeatable). Default: whole catalog."),
    devices: int = typer.Option(None, "--devices", help="Data-parallel GPUs per target (adds all-reduce time) [1]."),
    dataset_size: int = typer.Option(None, "--dataset-size", help="Samples per epoch, for time to train."),
    epochs: float = typer.Option(None, "--epochs", help="Epochs, for time to train."),
    catalog: list[Path] = typer.Option(None, "--catalog", help="Extra GPU CSV (same header as shipped)."),
    calibration: list[Path] = typer.Option(None, "--calibration",
                                           help="Calibration JSON from `paddlefit calibrate` on a device."),
    safety_margin: float = typer.Option(0.9, "--safety-margin",
                                        help="Fraction of device memory a peak may use and still fit."),
    max_probe_gib: float = typer.Option(None, "--max-probe-gib",
                                        help="Probe on CPU only if fp32 Adam states (16 B/param) stay below "
                                             "this. Default: min(25% of RAM, 8 GiB)."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document on stdout."),
    seq_len: int = typer.Option(None, "--seq-len", help="Parallel planner: tokens per sequence "
                                "\\[min(max_position, 4096)]."),
    global_batch: int = typer.Option(None, "--global-batch", help="Parallel planner: sequences per optimizer step "
                                     "[4M tokens / seq-len]."),
    gpus: int = typer.Option(None, "--gpus", help="Parallel planner: GPUs in the job [8]."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="Parallel planner: GPUs per node."),
    mfu: float = typer.Option(None, "--mfu", help="Parallel planner: fraction of dense peak compute reaches "
                              "\\[published MFU per GPU class]."),
    network_gbps: float = typer.Option(None, "--network-gbps", help="Parallel planner: inter-node network per "
                                       "node, Gbit/s [AWS p4d 400 / p5 3200]."),
    flash_attention: bool = typer.Option(True, "--flash-attention/--no-flash-attention",
                                         help="Parallel planner: fused attention (no s x s activations)."),
    top: int = typer.Option(5, "--top", help="Parallel planner: layouts shown per GPU."),
    explain: list[str] = typer.Option(None, "--explain", help="Also print the predicted top operators of one "
                                      "step on this GPU (repeatable): a profile of a card you do not have."),
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
      paddlefit plan mobilenet_v2 -b 128 --precision fp16-o1 --explain A100-SXM4-40GB
      paddlefit plan bert-base --input int64[512] -b 32 --optimizer adamw --devices 8 --json
      paddlefit plan mypkg.models:build_net --input float32[1,28,28] --model-arg num_classes=10
      paddlefit plan --config job.yaml --gpu L4      # inputs from `inputs:` or data.train's first sample
      paddlefit plan llama-2-7b --seq-len 4096 --global-batch 1024 --gpus 8 --gpu A100-SXM4-80GB
      paddlefit plan llama-2-70b --seq-len 4096 --gpus 64 --gpu H100-SXM --json
      paddlefit plan ./config.json --gpus 16 --seq-len 2048   # a Hugging Face / PaddleNLP config.json
    """
    for opt, value in (("--precision", precision), ("--optimizer", optimizer)):
        if value is not None and not value.strip():
            raise fail(f"`{opt}` is empty; give a value (see --help) or leave the option out for the default.")
    if _parallel_requested(model, seq_len, global_batch, gpus):
        _plan_parallel(
            model, seq_len, global_batch, gpus, gpus_per_node, gpu, precision, optimizer, flash_attention, mfu,
            network_gbps, safety_margin, top, catalog, json_out,
            {"--config": config, "--batch-size": batch_size, "--input": inputs, "--model-arg": model_arg,
             "--label": label, "--label-arg": label_arg, "--loss": loss, "--eval-batch-size": eval_batch_size,
             "--devices": devices, "--dataset-size": dataset_size, "--epochs": epochs,
             "--calibration": calibration, "--max-probe-gib": max_probe_gib, "--explain": explain},
        )  # fmt: skip
        return
    stray = [name for name, given in (("--gpus-per-node", gpus_per_node != 8), ("--mfu", mfu is not None),
                                      ("--network-gbps", network_gbps is not None),
                                      ("--no-flash-attention", not flash_attention), ("--top", top != 5)) if given]
    if stray:
        raise fail(f"{', '.join(f'`{s}`' for s in stray)} only apply to the parallel planner (a built-in LLM, a "
                   "config.json, or with `--gpus N`); this plan probes the model on the CPU.")  # fmt: skip
    quiet_paddle()
    import re

    if label_arg is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", label_arg):
        raise fail(f"`--label-arg {label_arg!r}` must be a forward() argument name, e.g. `labels`.")
    if eval_batch_size is not None and not 1 <= eval_batch_size <= 10**7:
        raise fail(f"`--eval-batch-size` must be 1..10000000 (got {eval_batch_size}).")
    for opt, value in (("--label", label), ("--loss", loss)):
        if value is not None and not value.strip():
            raise fail(f"`{opt}` is empty; give a value (see --help) or leave the option out.")
    if label is not None and parse_input_spec(label).name:
        raise fail(f"`--label {label}` takes no name; the forward() argument is `--label-arg`.")
    job = resolve_job(model, config, batch_size, inputs, model_arg, optimizer, precision,
                      need_train=dataset_size is None and epochs is None, label=label, label_arg=label_arg,
                      loss=loss, eval_batch_size=eval_batch_size)  # fmt: skip
    spec, model, batch_size, inputs, model_args, optimizer, precision = (
        job.spec, job.model, job.batch_size, job.inputs, job.model_args, job.optimizer, job.precision)
    devices = devices if devices is not None else (spec.devices if spec else 1)
    if job.own_job and dataset_size is None and epochs is None:
        dataset_size, epochs = _job_length(spec, job.train_size, batch_size, devices)  # type: ignore[arg-type]
    if batch_size < 1:
        raise fail(f"`--batch-size` must be >= 1 (got {batch_size}).")
    if devices < 1:
        raise fail(f"`--devices` must be >= 1 (got {devices}).")
    if not (math.isfinite(safety_margin) and 0 < safety_margin <= 1):
        raise fail(f"`--safety-margin` must be in (0, 1] (got {safety_margin}).")
    if (dataset_size is None) != (epochs is None):
        raise fail("`--dataset-size` and `--epochs` go together; give both or neither.")
    if dataset_size is not None and (dataset_size < 1 or not math.isfinite(epochs) or epochs <= 0):
        raise fail("`--dataset-size` must be >= 1 and `--epochs` a finite number > 0.")
    if max_probe_gib is not None and (not math.isfinite(max_probe_gib) or max_probe_gib * 1024**3 < 1):
        raise fail(f"`--max-probe-gib` must be a finite number > 0 (got {max_probe_gib}).")
    _check_explain(explain or [], gpu or [], catalog or [])
    req = PlanRequest(
        model=model,
        batch_size=batch_size,
        **job.call_fields(),
        model_args=model_args,
        optimizer=parse_enum(OptimizerName, optimizer, "--optimizer"),  # type: ignore[arg-type]
        precision=parse_enum(Precision, precision, "--precision"),  # type: ignore[arg-type]
        gpus=list(gpu or []),
        devices=devices,
        dataset_size=dataset_size,
        epochs=epochs,
        catalog_files=[str(p) for p in catalog or []],
        calibration_files=[str(p) for p in calibration or []],
        safety_margin=safety_margin,
        max_probe_bytes=int(max_probe_gib * 1024**3) if max_probe_gib is not None else None,
        explain=list(explain or []),
    )
    # user code may print: keep stdout for the result alone
    with err.status("planning...") as status, stdout_to_stderr():
        plan = build_plan(req, progress=lambda msg: status.update(msg))
    if json_out:
        print(to_json(plan.to_dict()))
        return
    render_plan(plan, out)
    for name, rows in plan.explain.items():
        render_explain(plan, name, rows, out)


def _check_explain(explain: list[str], gpu: list[str], catalog: list[Path]) -> None:
    """Fail (exit 2) before the probe when an `--explain` name is empty, unknown or not among `--gpu`."""
    from paddlefit.catalog.gpus import get_gpu, load_gpus
    from paddlefit.errors import UnknownNameError

    if not explain:
        return
    pool = load_gpus([str(p) for p in catalog])
    chosen = {get_gpu(g, pool).name for g in gpu}
    for name in explain:
        if not name.strip():
            raise fail("`--explain` is empty; give a GPU name from `paddlefit gpus`, e.g. `--explain A100-SXM4-40GB`.")
        try:
            g = get_gpu(name, pool)
        except UnknownNameError as exc:
            raise fail(f"`--explain {name}`: {exc}") from None
        if chosen and g.name not in chosen:
            given = ", ".join(f"`--gpu {c}`" for c in sorted(chosen))
            raise fail(f"`--explain {name}` is not among the planned GPUs ({given}); add `--gpu {g.name}` or drop "
                       "`--explain`.")  # fmt: skip


def _parallel_requested(model: str | None, seq_len: int | None, global_batch: int | None, gpus: int | None) -> bool:
    """The parallel LLM planner runs for --gpus/--global-batch/--seq-len, a JSON/YAML config path, or a built-in
    LLM that is not a probe-able zoo model."""
    from paddlefit.llm.configs import LLM_CONFIGS, is_llm_config_path
    from paddlefit.models.zoo import zoo_names

    if seq_len is not None or global_batch is not None or gpus is not None:
        return True
    if model is None:
        return False
    key = model.strip().lower()
    return is_llm_config_path(model) or (key in LLM_CONFIGS and key not in zoo_names())


def _plan_parallel(model: str | None, seq_len: int | None, global_batch: int | None, gpus: int | None,
                   gpus_per_node: int, gpu: list[str] | None, precision: str | None, optimizer: str | None,
                   flash_attention: bool, mfu: float | None, network_gbps: float | None, safety_margin: float,
                   top: int, catalog: list[Path] | None, json_out: bool, unused: dict) -> None:  # fmt: skip
    """Parse -> :func:`paddlefit.llm.search.plan_llm` -> render (table or ``--json``)."""
    from paddlefit.llm.search import LLMPlanRequest, plan_llm
    from paddlefit.report.render import render_parallel_plan

    given = [k for k, v in unused.items() if v not in (None, [], ())]
    if model is None:
        why = " (`--config` job specs go to the CPU-probe plan, without --gpus/--global-batch/--seq-len)" \
            if "--config" in given else ""  # fmt: skip
        raise fail(f"Give a MODEL for the parallel planner, e.g. `paddlefit plan llama-2-7b --gpus 8`{why}.")
    if given:
        raise fail(f"{', '.join(f'`{k}`' for k in given)} not used by the parallel planner (MODEL with --gpus, "
                   "--global-batch or --seq-len): the micro-batch and degrees are searched; give the global batch "
                   "with --global-batch.")  # fmt: skip
    req = LLMPlanRequest(
        model=model, seq_len=seq_len, global_batch=global_batch, gpus=gpus if gpus is not None else 8,
        gpu_names=list(gpu) if gpu else None, gpus_per_node=gpus_per_node,
        precision=parse_enum(Precision, precision or "bf16-o2", "--precision"),  # type: ignore[arg-type]
        optimizer=optimizer or "adamw", flash_attention=flash_attention, mfu=mfu, network_gbps=network_gbps,
        safety_margin=safety_margin, top=top, catalog_files=[str(p) for p in catalog or []],
    )  # fmt: skip
    plan = plan_llm(req)
    if json_out:
        print(to_json(plan.to_dict()))
        return
    render_parallel_plan(plan, out)
