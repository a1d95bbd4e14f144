"""Search the parallel layouts of an LLM training job on N GPUs and rank the ones that fit by tokens/s.

Valid layouts (PaddleNLP ``paddlenlp/trainer/training_args.py`` rules where it has them):

- dp x tp x pp = N; tp divides the query and the key/value heads and the FFN size, and tp <= GPUs per node
  (tensor-parallel all-reduces stay on NVLink; PaddleNLP's help: "Suggest tensor_parallel_degree<=8");
- pp divides the layers (even stages);
- sharding stage 1/2/3 uses the whole data-parallel group (``sharding_parallel_degree`` = dp, PaddleNLP's default
  of world / (tp x pp)); "pipeline parallel is not compatible for sharding stage2 or stage3" (stage 1 only with
  pp > 1); sharding and plain data parallelism are not mixed ("sharding stage1 can not coexist with dp");
- global batch = dp x micro_batch x accum, micro_batch a power of two;
- recompute none / selective (not with FlashAttention, which keeps no score tensors to save) / full;
  sequence parallelism on or off when tp > 1.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from paddlefit import options
from paddlefit.catalog.gpus import GPU, XPU_UNCALIBRATED
from paddlefit.catalog.transformers import TransformerConfig
from paddlefit.errors import PaddlefitError
from paddlefit.jobspec.spec import Precision
from paddlefit.llm.memory import RECOMPUTE, Layout, MemoryBreakdown, TrainSetup, gpu_memory
from paddlefit.llm.perf import Network, StepTime, default_mfu, default_network_gbit_s, step_flops, step_time
from paddlefit.plan.request import DEFAULT_SAFETY_MARGIN
from paddlefit.plan.request import TIE_FACTOR as HEADROOM_TIE

# Reserved per GPU and fit policy, shared with the planner (CUDA context 1.3 GB from the Hugging Face "model
# memory anatomy" docs; peak <= 90% of the rest, 10% left to allocator fragmentation).
from paddlefit.plan.rows import CUDA_CONTEXT_BYTES
from paddlefit.units import GIB, MIB
from paddlefit.validation import RequestModel

#: Keys of :meth:`ParallelPlan.paddlenlp_args` that are model arguments of PaddleNLP's ``llm/`` scripts
#: (``run_pretrain.py`` / ``run_finetune.py`` ModelArgument), not ``TrainingArguments``.
LLM_SCRIPT_MODEL_ARGS = ("recompute_granularity", "use_flash_attention")


@dataclass(frozen=True)
class ParallelPlan:
    """One evaluated layout: memory per GPU, step time, throughput and the PaddleNLP flags.

    Attributes:
        gpu: catalog name.  layout: the split.  memory: per-GPU peak and reserved lines (bytes).
        time: step time breakdown (seconds).  tokens_per_s: global batch x seq_len / step, all GPUs.
        mfu: model FLOPs per step / (step x GPUs x dense peak).
    """

    gpu: str
    layout: Layout
    memory: MemoryBreakdown
    time: StepTime
    tokens_per_s: float
    mfu: float

    @property
    def fits(self) -> bool:
        """Peak within the usable memory."""
        return self.memory.fits

    def paddlenlp_args(self, precision: Precision, flash_attention: bool) -> dict[str, Any]:
        """PaddleNLP ``TrainingArguments`` for this layout (names and values from ``training_args.py``:
        ``sharding`` takes "stage1"/"stage2"/"stage3", ``recompute`` is a bool, ``fp16_opt_level`` "O1"/"O2"), plus
        the llm scripts' model arguments ``recompute_granularity`` ("full"/"core_attn"), ``use_flash_attention``
        and ``sequence_parallel`` (those three are not in ``TrainingArguments`` of every PaddleNLP version)."""
        lay = self.layout
        args: dict[str, Any] = {
            "tensor_parallel_degree": lay.tp,
            "pipeline_parallel_degree": lay.pp,
            "sharding": f"stage{lay.sharding}" if lay.sharding else "",
            "sharding_parallel_degree": lay.dp if lay.sharding else -1,
            "recompute": lay.recompute != "none",
            "per_device_train_batch_size": lay.micro_batch,
            "gradient_accumulation_steps": lay.accum,
            "bf16": precision.value.startswith("bf16"),
            "fp16": precision.value.startswith("fp16"),
            "fp16_opt_level": precision.level if precision.is_amp else "O0",
        }
        if lay.recompute != "none":
            args["recompute_granularity"] = "full" if lay.recompute == "full" else "core_attn"
        args["use_flash_attention"] = flash_attention
        if lay.tp > 1:
            args["sequence_parallel"] = lay.sequence_parallel
        return args

    def to_dict(self, precision: Precision, flash_attention: bool) -> dict[str, Any]:
        """The ``parallel_plans`` row of ``paddlefit plan --json``."""
        lay = self.layout
        return {
            "gpu": self.gpu,
            "gpus": lay.gpus,
            "dp": lay.dp,
            "sharding_stage": lay.sharding,
            "tp": lay.tp,
            "pp": lay.pp,
            "micro_batch": lay.micro_batch,
            "accum": lay.accum,
            "global_batch": lay.global_batch,
            "recompute": lay.recompute,
            "sequence_parallel": lay.sequence_parallel,
            "fits": self.fits,
            "memory": self.memory.to_dict(),
            "time": self.time.to_dict(),
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "paddlenlp_args": self.paddlenlp_args(precision, flash_attention),
        }


@dataclass
class SearchResult:
    """All layouts evaluated for one GPU type, best first (fitting ones by tokens/s, then the rest by memory).

    Attributes:
        gpu: the GPU.  plans: ranked.  evaluated: layouts tried.  seconds: wall time of the search.
        mfu, mfu_source, network_gbit_s, network_source: the compute and network figures used, and where from.
        rejected: why whole families of layouts were not valid (e.g. "tp=3: does not divide 32 heads").
    """

    gpu: GPU
    plans: list[ParallelPlan]
    evaluated: int
    seconds: float
    mfu: float
    mfu_source: str
    network_gbit_s: float
    network_source: str
    rejected: list[str] = field(default_factory=list)
    setup: TrainSetup | None = None  # precision / attention actually planned on this GPU
    notes: list[str] = field(default_factory=list)  # why they differ from the request
    tie_break: str = ""  # what decided #1 among the layouts within 1% of the fastest (:func:`tie_break`)

    @property
    def fitting(self) -> list[ParallelPlan]:
        """The plans that fit, best first."""
        return [p for p in self.plans if p.fits]


#: Throughputs closer than this factor are ranked as equal (below the model's resolution) and then by simplicity.
TIE_FACTOR = 1.005


def _rank_key(x: ParallelPlan, best_tps: float) -> tuple:
    """Fitting plans first. Those within 1% of the fastest fitting plan's tokens/s (:data:`HEADROOM_TIE`) tie and go
    to headroom: the fewest TP x PP ranks (model parallelism needs model support), then the lowest peak memory
    (the most free memory). The rest in tiers of tokens/s from the fastest (0.5% wide, below the model's
    resolution), inside a tier the simpler layout first (fewer TP x PP ranks, then lower sharding stage, less
    recompute, no sequence parallelism), then the larger micro-batch (fewer accumulation steps; real GEMMs are more
    efficient on larger matrices, which the model does not resolve), then lower memory; plans that do not fit,
    by memory."""
    if not x.fits:
        return (1, x.memory.peak)
    lay = x.layout
    if x.tokens_per_s * HEADROOM_TIE >= best_tps:
        return (0, 0, lay.tp * lay.pp, x.memory.peak)
    tier = max(0, math.floor(math.log(best_tps / x.tokens_per_s) / math.log(TIE_FACTOR)))
    return (
        0,
        1,
        tier,
        lay.tp * lay.pp,
        lay.sharding,
        RECOMPUTE.index(lay.recompute),
        lay.sequence_parallel,
        -lay.micro_batch,
        x.memory.peak,
    )


def tie_break(plans: list[ParallelPlan], best_tps: float) -> str:
    """What decided the first of ``plans`` (ranked by :func:`_rank_key`) among the layouts that tie with the
    fastest (within 1% of ``best_tps`` tokens/s); empty when none ties with another."""
    ties = [p for p in plans if p.fits and p.tokens_per_s * HEADROOM_TIE >= best_tps]
    if len(ties) < 2:
        return ""
    first, fastest = ties[0], max(ties, key=lambda p: (p.tokens_per_s, -p.memory.peak))
    gib = GIB
    free = (first.memory.usable - first.memory.peak) / gib
    said = (
        f"the fastest ({fastest.tokens_per_s:,.0f} tokens/s, {fastest.memory.peak / gib:,.1f} GiB peak) is #1"
        if first is fastest
        else f"#1 runs at {first.tokens_per_s / fastest.tokens_per_s:.1%} of the "
        f"fastest ({fastest.tokens_per_s:,.0f} tokens/s) with "
        f"{(fastest.memory.peak - first.memory.peak) / gib:,.1f} GiB less peak"
    )
    return (
        f"{len(ties)} layouts within 1% of the fastest tokens/s tie (below the model's resolution); the tie goes "
        f"to headroom: fewest TP x PP ranks, then the most free memory (#1: {free:,.1f} GiB free of "
        f"{first.memory.usable / gib:,.1f} usable); {said}"
    )


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def search(
    cfg: TransformerConfig,
    setup: TrainSetup,
    gpu: GPU,
    gpus: int,
    global_batch: int,
    gpus_per_node: int = options.GPUS_PER_NODE.default,
    mfu: float | None = None,
    network_gbit_s: float | None = None,
    safety_margin: float = DEFAULT_SAFETY_MARGIN,
    max_micro_batch: int = 64,
) -> SearchResult:
    """Enumerate valid layouts (module doc) of ``gpus`` GPUs for ``global_batch`` sequences and rank them.

    Args:
        mfu: fraction of dense peak that compute reaches; None = :func:`~paddlefit.llm.perf.default_mfu`.
        network_gbit_s: node network Gbit/s; None = :func:`~paddlefit.llm.perf.default_network_gbit_s`.

    Raises:
        PaddlefitError: no layout satisfies the divisibility rules (the message says why).
    """
    t0 = time.perf_counter()
    mfu_v, mfu_src = (mfu, "given") if mfu is not None else default_mfu(gpu)
    net_v, net_src = (network_gbit_s, "given") if network_gbit_s is not None else default_network_gbit_s(gpu)
    net = Network(gpus_per_node, net_v)
    capacity = float(gpu.capacity_bytes)
    rejected: list[str] = []
    tps = []
    for t in _divisors(gpus):
        why = []
        if t > gpus_per_node:
            why.append(f"exceeds {gpus_per_node} GPUs per node")
        for what, n in (("heads", cfg.num_heads), ("KV heads", cfg.num_kv_heads), ("FFN size", cfg.ffn_size)):
            if n % t:
                why.append(f"does not divide {n} {what}")
        if why:
            rejected.append(f"tp={t}: {', '.join(why)}")
        else:
            tps.append(t)
    plans: list[ParallelPlan] = []
    evaluated = 0
    tokens = global_batch * setup.seq_len
    flash = setup.flash_attention
    recomputes = ("none", "full") if flash else ("none", "selective", "full")
    for t in tps:
        for p in _divisors(gpus // t):
            if cfg.num_layers % p:
                rejected.append(f"pp={p}: does not divide {cfg.num_layers} layers")
                continue
            d = gpus // (t * p)
            if global_batch % d:
                rejected.append(f"dp={d} (tp={t}, pp={p}): does not divide the global batch {global_batch}")
                continue
            stages = (0,) if d == 1 else ((0, 1) if p > 1 else (0, 1, 2, 3))
            micro = [mb for mb in (2**i for i in range(12)) if mb <= max_micro_batch and global_batch % (d * mb) == 0]
            for z in stages:
                for mb in micro:
                    accum = global_batch // (d * mb)
                    for rc in recomputes:
                        for sp in (False, True) if t > 1 else (False,):
                            lay = Layout(d, z, t, p, mb, accum, rc, sp)
                            evaluated += 1
                            mem = gpu_memory(cfg, setup, lay, capacity, CUDA_CONTEXT_BYTES, safety_margin)
                            st = step_time(cfg, setup, lay, gpu, net, mfu_v)
                            peak, _ = gpu.peak_flops(setup.precision.value)
                            model = step_flops(cfg, setup.seq_len, global_batch).model
                            plans.append(
                                ParallelPlan(gpu.name, lay, mem, st, tokens / st.step, model / (st.step * gpus * peak))
                            )
    if not plans:
        raise PaddlefitError(
            f"No valid parallel layout of {cfg.name} on {gpus} GPUs with global batch {global_batch}: "
            f"{'; '.join(rejected[:6]) or 'no tensor-parallel degree is valid'}. Use a GPU count and global batch "
            "with common factors (e.g. powers of two)."
        )
    best_tps = max((q.tokens_per_s for q in plans if q.fits), default=1.0)
    plans.sort(key=lambda q: _rank_key(q, best_tps))
    return SearchResult(
        gpu,
        plans,
        evaluated,
        time.perf_counter() - t0,
        mfu_v,
        mfu_src,
        net_v,
        net_src,
        rejected,
        setup,
        tie_break=tie_break(plans, best_tps),
    )


#: Default global batch, tokens: Llama 2 trained with 4M-token batches (Touvron et al. 2023, arXiv 2307.09288 §2.2).
DEFAULT_GLOBAL_TOKENS = 4 * MIB
#: GPUs planned when none is named: the two data-center training GPUs of the catalog.
DEFAULT_GPUS = ("A100-SXM4-80GB", "H100-SXM")


#: Bounds of the parallel planner's job (policy: what a plan can mean, not what a cluster has): sequences per
#: global batch, GPUs in a job, GPUs per node.
MAX_GLOBAL_BATCH, MAX_GPUS, MAX_GPUS_PER_NODE = 2**24, 65536, 64


class LLMPlanRequest(RequestModel):
    """Everything ``paddlefit plan MODEL --gpus N ...`` takes for the parallel planner, validated by its fields
    (a bad value raises :class:`~paddlefit.errors.PaddlefitError` naming the option; :class:`RequestModel`).

    Attributes:
        model: built-in name or JSON/YAML config path.  seq_len: tokens per sequence (None = min(max_position,
            4096)).  global_batch: sequences per optimizer step (None = 4M tokens / seq_len, a power of two).
        gpus: GPUs in the job.  gpu_names: GPU types to plan (None = :data:`DEFAULT_GPUS`).
        gpus_per_node, mfu, network_gbit_s: see :func:`search`.  top: plans kept per GPU type.
    """

    model: str = Field(
        description="Built-in LLM name, or a Hugging Face / PaddleNLP config.json or YAML path.",
        json_schema_extra=options.MODEL_ARG.field(),
    )
    seq_len: int | None = Field(
        None,
        ge=1,
        description="Tokens per sequence; None = min(max_position, 4096).",
        json_schema_extra=options.SEQ_LEN.field(),
    )
    global_batch: int | None = Field(
        None,
        ge=1,
        le=MAX_GLOBAL_BATCH,
        description="Sequences per optimizer step; None = 4M tokens / seq_len.",
        json_schema_extra=options.GLOBAL_BATCH.field(),
    )
    gpus: int = Field(
        options.GPUS.shown["gpus"],
        ge=1,
        le=MAX_GPUS,
        description="GPUs in the job.",
        json_schema_extra=options.GPUS.field(),
    )
    gpu_names: list[str] | None = Field(
        None, description="GPU types to plan; None = the default pair.", json_schema_extra=options.GPU.field()
    )
    gpus_per_node: int = Field(
        options.GPUS_PER_NODE.default,
        ge=1,
        le=MAX_GPUS_PER_NODE,
        description="GPUs per node.",
        json_schema_extra=options.GPUS_PER_NODE.field(),
    )
    precision: Precision = Field(
        Precision(options.PRECISION.shown["llm"]),
        description="Training precision.",
        json_schema_extra=options.PRECISION.field(),
    )
    optimizer: str = Field(
        options.OPTIMIZER.shown["llm"],
        description="Optimizer (its states set the memory).",
        json_schema_extra=options.OPTIMIZER.field(),
    )
    flash_attention: bool = Field(
        True,
        description="Time attention as FlashAttention-2 where it runs.",
        json_schema_extra=options.FLASH_ATTENTION.field(),
    )
    mfu: float | None = Field(
        None,
        ge=0.01,
        le=1,
        description="Fraction of dense peak compute reaches.",
        json_schema_extra=options.MFU.field(),
    )
    network_gbit_s: float | None = Field(
        None,
        ge=1,
        le=1e6,
        description="Inter-node bandwidth per node, Gbit/s.",
        json_schema_extra=options.NETWORK_GBIT_S.field(),
    )
    safety_margin: float = Field(
        DEFAULT_SAFETY_MARGIN,
        description="Fraction of memory a peak may use.",
        **options.SAFETY_MARGIN.bounds,
        json_schema_extra=options.SAFETY_MARGIN.field(),
    )
    top: int = Field(
        options.TOP.default,
        ge=1,
        le=1000,
        description="Layouts kept per GPU type.",
        json_schema_extra=options.TOP.field(),
    )
    catalog_files: list[str] = Field(
        default_factory=list, description="User GPU catalog files.", json_schema_extra=options.CATALOG.field()
    )


@dataclass
class LLMPlan:
    """Result of :func:`plan_llm`; ``to_dict()`` is the ``--json`` document."""

    config: TransformerConfig
    setup: TrainSetup
    request: LLMPlanRequest
    global_batch: int
    results: list[SearchResult]

    def to_dict(self) -> dict[str, Any]:
        """JSON document: model, job, assumptions, per-GPU search summaries and ``parallel_plans`` rows."""
        req, st = self.request, self.setup
        rows = [
            p.to_dict((r.setup or st).precision, (r.setup or st).flash_attention)
            for r in self.results
            for p in r.plans[: req.top]
        ]
        return {
            "model": {**self.config.model_dump(), "params": self.config.params},
            "job": {
                "seq_len": st.seq_len,
                "global_batch": self.global_batch,
                "tokens_per_step": self.global_batch * st.seq_len,
                "gpus": req.gpus,
                "gpus_per_node": req.gpus_per_node,
                "precision": st.precision.value,
                "optimizer": st.optimizer.value,
                "flash_attention": st.flash_attention,
            },
            "searches": [
                {
                    "gpu": r.gpu.name,
                    "evaluated": r.evaluated,
                    "fitting": len(r.fitting),
                    "seconds": r.seconds,
                    "mfu": r.mfu,
                    "mfu_source": r.mfu_source,
                    "network_gbit_s": r.network_gbit_s,
                    "network_source": r.network_source,
                    "precision": (r.setup or st).precision.value,
                    "flash_attention": (r.setup or st).flash_attention,
                    "notes": r.notes,
                    "tie_break": r.tie_break,
                    "rejected": r.rejected,
                }
                for r in self.results
            ],
            "assumptions": ASSUMPTIONS,
            "parallel_plans": rows,
        }


#: What every parallel plan assumes, printed under the table and put in the JSON.
ASSUMPTIONS = [
    "memory: model states by ZeRO (Rajbhandari et al. 2019) per sharding stage; activations per Korthikanti et al. "
    "2022 table 2, re-derived per tensor for GQA/SwiGLU; 1F1B first stage holds min(pp, accum) micro-batches",
    "fits if peak <= capacity - CUDA context (1.2 GiB) - fragmentation allowance (1 - safety margin of the rest)",
    "compute at the stated fraction of dense peak; TP collectives not overlapped; DP gradient all-reduce / "
    "reduce-scatter in DataParallel's 25 MB buckets overlaps the last micro-batch's backward except the last "
    "(1 MB) bucket; stage-1/2 parameter all-gather not overlapped; stage-3 per-layer gathers overlap each "
    "micro-batch's compute",
    "collectives by NCCL's model (paddlefit.estimate.collectives): latency per call, LL/LL128/Simple, the ring at "
    "81% of the per-direction link, NVLS on NVSwitch from Hopper; across nodes hierarchical, the node's network "
    "(the group's GPUs' share) carrying 2(n-1)/n of an all-reduce's bytes",
    "stages balanced (embedding and head FLOPs spread evenly); ZeRO-3 keeps two gathered layers",
    "MFU counts model FLOPs (3 x forward); compute time also pays recomputation (full/selective recompute, "
    "FlashAttention's backward recompute of Q.K^T), so MFU sits below the stated compute fraction",
]


def plan_llm(req: LLMPlanRequest) -> LLMPlan:
    """Resolve the model and GPUs, validate the job and run :func:`search` for every GPU type.

    Raises:
        PaddlefitError: bad model, GPU, sequence length, batch, GPU counts or figures (message names the option).
    """
    from paddlefit.catalog.gpus import get_gpu, load_gpus
    from paddlefit.catalog.transformer_configs import resolve_llm
    from paddlefit.jobspec.spec import OptimizerName, parse_enum

    cfg = resolve_llm(req.model)
    seq = req.seq_len if req.seq_len is not None else min(cfg.max_position, 4096)
    if seq > cfg.max_position:  # 1 and up is the request's own bound
        raise PaddlefitError(
            f"`--seq-len` must be between 1 and {cfg.name}'s max_position {cfg.max_position} (got {seq})."
        )
    if req.global_batch is not None:
        gb = req.global_batch
    else:
        gb = 2 ** max(0, round(math.log2(max(1, DEFAULT_GLOBAL_TOKENS // seq))))
    if req.gpus > req.gpus_per_node and req.gpus % req.gpus_per_node:
        raise PaddlefitError(
            f"`--gpus` {req.gpus} is not a whole number of nodes of `--gpus-per-node` {req.gpus_per_node}."
        )
    opt = parse_enum(OptimizerName, req.optimizer, "--optimizer")
    setup = TrainSetup(seq, req.precision, opt, req.flash_attention)  # type: ignore[arg-type]
    pool = load_gpus(req.catalog_files)
    gpus = [get_gpu(n, pool) for n in (req.gpu_names or DEFAULT_GPUS)]
    per_node = min(req.gpus_per_node, req.gpus)
    results = []
    for g in gpus:
        own, notes = gpu_setup(setup, g)
        try:
            r = search(cfg, own, g, req.gpus, gb, per_node, req.mfu, req.network_gbit_s, req.safety_margin)
        except PaddlefitError as exc:
            fit = math.ceil(gb / req.gpus) * req.gpus
            default = " (the default: 4M tokens / seq-len)" if req.global_batch is None else ""
            raise PaddlefitError(
                f"{exc} With data parallel over all {req.gpus} GPUs, `--global-batch {fit}` "
                f"would divide; the global batch was {gb}{default}."
            ) from None
        r.notes = notes
        results.append(r)
    return LLMPlan(cfg, setup, req, gb, results)


def gpu_setup(setup: TrainSetup, gpu: GPU) -> tuple[TrainSetup, list[str]]:
    """The setup a GPU can run, and why it differs: where Paddle runs no bf16 AMP (:meth:`GPU.amp_blocked`)
    it becomes fp16 at the same AMP level; a precision
    whose peak the catalog lacks is timed at a slower unit's (:meth:`GPU.missing_peak`, said in a note);
    FlashAttention-2 runs on Ampere and newer (Dao 2023, arXiv 2307.08691), so older GPUs get eager attention.
    On Kunlunxin XPUs too, bf16 falls back to fp16 where that runs, else to fp32; no flash attention is
    modelled on an XPU, and every XPU row carries the note that its speed is uncalibrated."""
    from dataclasses import replace

    notes = []
    prec, flash = setup.precision, setup.flash_attention
    if prec.value.startswith("bf16") and gpu.amp_blocked(prec.value):
        prec = Precision(prec.value.replace("bf16", "fp16"))
        what = f"{gpu.device_label}" if gpu.is_xpu else f"compute capability {gpu.compute_capability:g}"
        notes.append(f"{gpu.name} ({what}) has no bf16: planned as {prec.value}")
    if prec.is_amp and gpu.amp_blocked(prec.value):
        notes.append(f"{gpu.name}: {gpu.amp_blocked(prec.value)}")
        prec = Precision.FP32
    if flash and gpu.flash_blocked():
        flash = False
        notes.append(str(gpu.flash_blocked()))
    if missing := gpu.missing_peak(prec.value):
        notes.append(f"{gpu.name}: {missing}")
    if gpu.is_xpu:
        notes.append(XPU_UNCALIBRATED)
    return replace(setup, precision=prec, flash_attention=flash), notes
