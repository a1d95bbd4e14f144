"""Analytic per-GPU training memory of a transformer under data/sharding/tensor/pipeline parallelism.

Model states (Rajbhandari et al., ZeRO, arXiv 1910.02054 §3.1 and §5): bytes per parameter for weights, gradients
and optimizer states (:func:`state_bytes_per_param`: mixed-precision Adam 2 + 2 + 12 = 16), divided over the
sharding group by stage: stage 1 shards the optimizer states, stage 2 also the gradients, stage 3 also the weights
(Paddle's sharding stages; PaddleNLP ``training_args.py``: "stage1 : optimizer state segmentation, stage2 :
optimizer state + gradient segmentation, stage3 : parameter + gradient + optimizer state segmentation").

Activations per layer: Korthikanti et al. 2022 (arXiv 2205.05198) §4 and table 2, re-derived per saved tensor so
that grouped-query attention, SwiGLU, fp32 and no-dropout models follow (:func:`layer_activation_bytes`).
Pipeline: with 1F1B stage i keeps ``min(p - i, m)`` micro-batches in flight (Narayanan et al. 2021, arXiv
2104.04473 §2.2.1; Korthikanti §4.2.3: the first stage holds p micro-batches).

Reserved memory is reported beside the peak, never folded into it: the CUDA context (1.3 GB, the planner's
figure from the Hugging Face "model memory anatomy" docs) and the allocator-fragmentation allowance
(1 - safety margin of what is left, the planner's policy, 10% by default).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from paddlefit.catalog.transformers import TransformerConfig
from paddlefit.estimate.model_states import OPTIMIZER_STATE_BYTES_PER_PARAM
from paddlefit.jobspec.spec import OptimizerName, Precision

RECOMPUTE = ("none", "selective", "full")
SHARDING_STAGES = (0, 1, 2, 3)


@dataclass(frozen=True)
class Layout:
    """One parallel configuration. GPUs = dp x tp x pp.

    Attributes:
        dp: data-parallel degree: plain replicas (``sharding == 0``) or the sharding group size.
        sharding: 0 (none) or ZeRO stage 1, 2, 3 over the ``dp`` ranks.
        tp: tensor (Megatron) parallel degree.  pp: pipeline stages.
        micro_batch: sequences per micro-batch per GPU (PaddleNLP ``per_device_train_batch_size``).
        accum: micro-batches per optimizer step per data rank (``gradient_accumulation_steps``; with pipeline
            parallelism also the pipeline's micro-batch count m, PaddleNLP ``pipeline_configs.accumulate_steps``).
        recompute: ``none``, ``selective`` (attention core: Q·Kᵀ, softmax, dropout, ·V; PaddleNLP
            ``recompute_granularity=core_attn``) or ``full`` (whole layer; ``recompute_granularity=full``).
        sequence_parallel: Korthikanti §4.2.2; only with ``tp > 1``.
    """

    dp: int
    sharding: int
    tp: int
    pp: int
    micro_batch: int
    accum: int
    recompute: str = "none"
    sequence_parallel: bool = False

    @property
    def gpus(self) -> int:
        """dp x tp x pp."""
        return self.dp * self.tp * self.pp

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step: dp x micro_batch x accum."""
        return self.dp * self.micro_batch * self.accum


@dataclass(frozen=True)
class TrainSetup:
    """What is trained, independent of the split.

    Attributes:
        seq_len: tokens per sequence (s).
        precision: fp32 or AMP O1/O2 with fp16/bf16 (PaddleNLP ``bf16``/``fp16`` + ``fp16_opt_level``).
        optimizer: optimizer whose state size is known (default AdamW, PaddleNLP's default ``optim``).
        flash_attention: attention by a fused kernel that keeps no s x s tensors (Dao 2023, FlashAttention-2,
            arXiv 2307.08691; PaddleNLP ``use_flash_attention``).
    """

    seq_len: int
    precision: Precision = Precision.BF16_O2
    optimizer: OptimizerName = OptimizerName.ADAMW
    flash_attention: bool = True

    @property
    def act_bytes(self) -> int:
        """Bytes per activation element: 2 under AMP (half-precision storage, Micikevicius et al. 2018), 4 in fp32."""
        return 2 if self.precision.is_amp else 4


def state_bytes_per_param(precision: Precision, optimizer: OptimizerName) -> tuple[int, int, int]:
    """(weight, gradient, optimizer-state) bytes per parameter.

    AMP O2 (Paddle ``amp.decorate(level='O2')`` with fp32 master weights): 2, 2, optimizer states + 4 (master);
    Adam: 2 + 2 + 12 = 16 (ZeRO §3.1). fp32 and O1 (weights stay fp32): 4, 4, optimizer states (Adam 8).
    Optimizer states per :data:`paddlefit.estimate.model_states.OPTIMIZER_STATE_BYTES_PER_PARAM` (Paddle optimizers).
    """
    opt = OPTIMIZER_STATE_BYTES_PER_PARAM[optimizer]
    if precision.level == "O2":
        return 2, 2, opt + 4
    return 4, 4, opt


def layer_activation_bytes(
    cfg: TransformerConfig,
    seq_len: int,
    micro_batch: int,
    act_bytes: int,
    tp: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "none",
    flash_attention: bool = False,
) -> float:
    """Bytes of activations one transformer layer keeps for its backward, per GPU, for one micro-batch.

    Derivation (Korthikanti et al. 2022 §4.1, per saved tensor; e = ``act_bytes``, masks 1 byte/element and only
    when ``cfg.dropout > 0``; s = seq_len, b = micro_batch, h, f, a heads, k = K/V width = kv_heads x h/a):

    - not split by tensor parallelism (split by t only with sequence parallelism): the inputs of the two norms
      (2·e·sbh), the norm outputs feeding attention and MLP (2·e·sbh), the dropout masks after attention and MLP
      (2·sbh);
    - attention, split by t: Q (e·sbh), K and V (2·e·sbk; with eager attention and GQA the K/V heads are repeated
      before the matmuls and the repeated copies are saved: 2·e·sbh), the output projection's input (e·sbh);
      scores (eager attention only): softmax output e·as²b, dropout mask as²b and dropout output e·as²b;
      FlashAttention keeps no s x s tensor (only a 4-byte log-sum-exp per row, 4·asb);
    - MLP, split by t: GELU MLP: fc1 output (GELU input) and GELU output, 2·e·sbf; SwiGLU: gate and up outputs
      (inputs of the fused swiglu) and its output, 3·e·sbf.

    Check: e = 2, dropout, MHA, GELU, f = 4h, eager: sbh·(10 + 24/t) + 5·as²b/t = Korthikanti table 2
    (34·sbh + 5·as²b without parallelism). Selective recompute drops the score terms (the attention core is
    recomputed from the kept Q, K, V): sbh·(10 + 24/t), table 2. Full recompute keeps the layer input only:
    e·sbh (2·sbh in table 2), / t with sequence parallelism.
    """
    s, b, h, f, a = seq_len, micro_batch, cfg.hidden_size, cfg.ffn_size, cfg.num_heads
    e, t = act_bytes, tp
    sp_div = t if sequence_parallel else 1
    if recompute == "full":
        return e * s * b * h / sp_div
    mask = 1 if cfg.dropout > 0 else 0
    replicated = s * b * h * (4 * e + 2 * mask)
    kv = cfg.kv_size if flash_attention else h
    attention = s * b * (2 * e * h + 2 * e * kv)
    if flash_attention:
        scores = 4.0 * a * s * b
    elif recompute == "selective":
        scores = 0.0
    else:
        scores = a * s * s * b * (e + (mask + e if mask else 0))
    mlp = s * b * e * (3 if cfg.ffn_type == "swiglu" else 2) * f
    return replicated / sp_div + (attention + scores + mlp) / t


def embedding_activation_bytes(
    cfg: TransformerConfig, seq_len: int, micro_batch: int, act_bytes: int, tp: int = 1, sequence_parallel: bool = False
) -> float:
    """First pipeline stage, per micro-batch: the embedding dropout mask (1 byte/element, when dropout > 0),
    not split unless sequence parallel (Korthikanti §4.3 "input embeddings")."""
    mask = 1 if cfg.dropout > 0 else 0
    return mask * seq_len * micro_batch * cfg.hidden_size / (tp if sequence_parallel else 1)


def head_activation_bytes(
    cfg: TransformerConfig, seq_len: int, micro_batch: int, act_bytes: int, tp: int = 1, sequence_parallel: bool = False
) -> float:
    """Last pipeline stage, per micro-batch: the output head and the loss.

    Decoder: final-norm input and output (2·e·sbh); encoder MLM head: dense input, GELU input, LayerNorm input and
    output (4·e·sbh). Logits: the e-byte logits and their fp32 copy for the softmax cross-entropy, alive together,
    (e + 4)·sbV / t (vocab-parallel output; Korthikanti §4.3 counts the fp32 cross-entropy part as 4·sbV/t).
    """
    s, b, h, v, e = seq_len, micro_batch, cfg.hidden_size, cfg.vocab_size, act_bytes
    head_in = (2 if cfg.causal else 4) * e * s * b * h / (tp if sequence_parallel else 1)
    return head_in + (e + 4) * s * b * v / tp


def stage_params(cfg: TransformerConfig, tp: int, pp: int, stage: str) -> float:
    """Parameters held by one GPU of the ``first`` or ``last`` pipeline stage (before sharding).

    Layers: l/p of them, linear weights split by t, norms replicated (Megatron TP, Shoeybi et al. 2019 §3).
    Token embedding and output projection: vocab-parallel (V/t rows); with pipeline parallelism and tied
    embeddings the last stage holds its own copy of the embedding (Megatron / PaddleNLP shared embedding).
    """
    layers = cfg.num_layers / pp * (cfg.layer_matrix_params / tp + 2 * cfg.norm_params)
    vh = cfg.vocab_size * cfg.hidden_size
    emb = vh / tp + (cfg.embedding_params - vh)
    head = (cfg.head_params - (0 if cfg.tie_embeddings else vh)) + (0 if cfg.tie_embeddings else vh / tp)
    if pp == 1:
        return layers + emb + head
    if stage == "first":
        return layers + emb
    return layers + head + (vh / tp if cfg.tie_embeddings else 0)


@dataclass(frozen=True)
class MemoryBreakdown:
    """Peak memory of one GPU (the pipeline stage with the larger peak), bytes.

    Attributes:
        stage: ``first`` or ``last`` pipeline stage (``only`` without pipeline parallelism).
        params: parameters this GPU's stage holds before sharding (count).
        weights, grads, optimizer: model states on this GPU after sharding.
        gather_buffer: ZeRO-3 only: two layers' full (un-sharded) weights, the layer in use and the one being
            prefetched (an assumption; Paddle's stage 3 gathers per layer).
        activations: transformer layers' saved activations x micro-batches in flight.
        embedding_head: embedding / output-head / logits activations of the micro-batches in flight.
        in_flight: micro-batches whose activations are alive at once on this stage.
        peak: sum of the above.
        cuda_context, fragmentation_allowance, capacity: reserved lines; fits if peak <= capacity - both.
    """

    stage: str
    params: float
    weights: float
    grads: float
    optimizer: float
    gather_buffer: float
    activations: float
    embedding_head: float
    in_flight: int
    peak: float
    cuda_context: float = 0.0
    fragmentation_allowance: float = 0.0
    capacity: float = 0.0

    @property
    def usable(self) -> float:
        """Bytes a peak may reach: capacity - CUDA context - fragmentation allowance (0 when the context alone
        does not fit)."""
        return max(0.0, self.capacity - self.cuda_context - self.fragmentation_allowance)

    @property
    def fits(self) -> bool:
        """Peak within :attr:`usable`."""
        return self.peak <= self.usable

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (bytes), plus ``usable`` and ``fits``."""
        return {**asdict(self), "usable": self.usable, "fits": self.fits}


def stage_memory(cfg: TransformerConfig, setup: TrainSetup, lay: Layout, stage: str) -> MemoryBreakdown:
    """Memory of one GPU of pipeline stage ``stage`` (``first``/``last``) for layout ``lay`` (no reserved lines)."""
    wb, gb, ob = state_bytes_per_param(setup.precision, setup.optimizer)
    n = stage_params(cfg, lay.tp, lay.pp, stage)
    d = lay.dp
    weights = n * wb / (d if lay.sharding >= 3 else 1)
    grads = n * gb / (d if lay.sharding >= 2 else 1)
    optimizer = n * ob / (d if lay.sharding >= 1 else 1)
    gather = 2 * wb * cfg.layer_matrix_params / lay.tp if lay.sharding >= 3 and d > 1 else 0.0
    in_flight = min(lay.pp, lay.accum) if lay.pp > 1 and stage == "first" else 1
    e, s, b = setup.act_bytes, setup.seq_len, lay.micro_batch
    per_layer = layer_activation_bytes(
        cfg, s, b, e, lay.tp, lay.sequence_parallel, lay.recompute, setup.flash_attention
    )
    acts = per_layer * cfg.num_layers / lay.pp * in_flight
    extra = 0.0
    if lay.pp == 1 or stage == "first":
        extra += embedding_activation_bytes(cfg, s, b, e, lay.tp, lay.sequence_parallel) * in_flight
    if lay.pp == 1 or stage == "last":
        extra += head_activation_bytes(cfg, s, b, e, lay.tp, lay.sequence_parallel)
    peak = weights + grads + optimizer + gather + acts + extra
    name = "only" if lay.pp == 1 else stage
    return MemoryBreakdown(name, n, weights, grads, optimizer, gather, acts, extra, in_flight, peak)


def gpu_memory(
    cfg: TransformerConfig,
    setup: TrainSetup,
    lay: Layout,
    capacity: float = 0.0,
    cuda_context: float = 0.0,
    safety_margin: float = 1.0,
) -> MemoryBreakdown:
    """Peak memory per GPU: the larger of the first and last pipeline stages, with the reserved lines:
    ``cuda_context`` bytes and a fragmentation allowance of (1 - safety_margin) x (capacity - cuda_context)."""
    first = stage_memory(cfg, setup, lay, "first")
    worst = first if lay.pp == 1 else max(first, stage_memory(cfg, setup, lay, "last"), key=lambda m: m.peak)
    frag = (1 - safety_margin) * max(capacity - cuda_context, 0.0)
    return MemoryBreakdown(
        **{**asdict(worst), "cuda_context": cuda_context, "fragmentation_allowance": frag, "capacity": capacity}
    )
