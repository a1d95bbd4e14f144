"""Analytic FLOPs and step time of transformer training under data/sharding/tensor/pipeline parallelism.

FLOPs (1 multiply-add = 2 FLOPs; matrix multiplications only, the convention of the closed forms):
Korthikanti et al. 2022 (arXiv 2205.05198) eq. 7, 72·B·s·l·h²·(1 + s/(6h) + V/(12hl)) without recompute, and
Narayanan et al. 2021 (arXiv 2104.04473) eq. 3, 96·B·s·l·h²·(1 + s/(6h) + V/(16lh)) with full recompute, are
generalised per matrix multiplication to grouped-query attention and SwiGLU in :func:`layer_forward_flops`.

Step time = 1F1B pipeline of micro-batches (compute at a stated fraction of dense peak + tensor-parallel
collectives + pipeline send/recv) + the exposed part of the data-parallel / sharding collectives + the optimizer
update. Overlap assumptions (stated in :func:`step_time`): TP collectives are not overlapped; the DP gradient
all-reduce (and sharding stage 1/2 reduce-scatter) goes out in ``paddle.DataParallel``'s buckets (25 MB, the last
1 MB; ``python/paddle/distributed/parallel.py``) during the backward of the last micro-batch and what that backward
does not hide stays (:func:`~paddlefit.estimate.gpu_model.dp_exposed_allreduce_s`); the stage 1/2 parameter
all-gather after the update is not overlapped; stage 3 gathers overlap each micro-batch's compute (prefetch).
Every collective's time is NCCL's, latency and protocols included (:mod:`paddlefit.estimate.collectives`): inside a
node over NVLink (or PCIe), across nodes hierarchical over the node's network, the group's share of it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from paddlefit.catalog.gpus import GPU, XPU_UNCALIBRATED
from paddlefit.catalog.published import figures
from paddlefit.catalog.transformers import TransformerConfig
from paddlefit.estimate.collectives import (
    DATA_PARALLEL_BUCKETS,
    Fabric,
    allgather_s,
    allreduce_s,
    bucketed_collective,
    node_fabric,
    reduce_scatter_s,
)
from paddlefit.estimate.gpu_model import dp_exposed_allreduce_s
from paddlefit.estimate.transformer_ops import head_ops, layer_ops, matmul_flops
from paddlefit.llm.memory import Layout, TrainSetup, stage_params, state_bytes_per_param

#: Published end-to-end model-FLOPs utilisation used as the default fraction of dense peak that compute reaches,
#: by GPU architecture: (fraction, source) from ``catalog/data/published_figures.csv``. An end-to-end MFU already
#: pays communication and pipeline bubbles, which this model adds itself, so the best published figure is used as
#: the compute-phase efficiency; smaller models (h = 4096) reach less. Override with ``mfu=`` / ``--mfu``.
DEFAULT_MFU: dict[str, tuple[float, str]] = {a: (f.value, f.source) for a, f in figures("default_mfu").items()}
#: Inter-node network bandwidth per node by architecture, Gbit/s: (value, source), from the same file.
DEFAULT_NETWORK_GBPS: dict[str, tuple[float, str]] = {
    a: (f.value, f.source) for a, f in figures("default_network_gbps").items()
}


def default_mfu(gpu: GPU) -> tuple[float, str]:
    """The :data:`DEFAULT_MFU` figure for the GPU's architecture (Ampere's, labelled as such, for others; for a
    Kunlunxin XPU labelled uncalibrated: no XPU run is published with an MFU)."""
    if gpu.is_xpu:
        v, src = DEFAULT_MFU["ampere"]
        return v, f"{XPU_UNCALIBRATED}; the A100 figure is assumed ({src})"
    if gpu.architecture in DEFAULT_MFU:
        return DEFAULT_MFU[gpu.architecture]
    v, src = DEFAULT_MFU["ampere"]
    return v, f"assumption: no published figure for {gpu.architecture}; using the A100 one ({src})"


def default_network_gbit_s(gpu: GPU) -> tuple[float, str]:
    """The :data:`DEFAULT_NETWORK_GBPS` figure for the GPU's architecture (400 Gbps, labelled, for others)."""
    if gpu.architecture in DEFAULT_NETWORK_GBPS:
        return DEFAULT_NETWORK_GBPS[gpu.architecture]
    v, src = DEFAULT_NETWORK_GBPS["ampere"]
    return v, f"assumption: no cloud figure for {gpu.architecture} nodes; using {src}"


def layer_forward_flops(cfg: TransformerConfig, seq_len: int, batch: int) -> int:
    """Forward matmul FLOPs of one transformer layer for ``batch`` sequences: the matrix multiplications of
    :func:`~paddlefit.estimate.transformer_ops.layer_ops` (:func:`~paddlefit.estimate.transformer_ops.matmul_flops`).

    That is 2·b·s·(2h² + 2h·k + n·h·f) + 4·b·s²·h, with k = kv_heads·h/a (K and V projections) and n = 2 (GELU
    MLP) or 3 (SwiGLU: gate, up, down): the q and output projections 2·bsh² each, k and v 2·bshk each, the MLP
    n·2·bshf, Q·Kᵀ and P·V 2·bs²h each (full s x s, causal masking not discounted, as in Korthikanti eq. 7).
    With k = h, n = 2, f = 4h: 24·bsh² + 4·bs²h, the forward third of Korthikanti eq. 7.
    """
    return matmul_flops(layer_ops(cfg, seq_len, batch))


def head_forward_flops(cfg: TransformerConfig, seq_len: int, batch: int) -> int:
    """Forward matmul FLOPs of the output head (:func:`~paddlefit.estimate.transformer_ops.head_ops`): logits
    2·bshV (+ the MLM transform 2·bsh² for encoders)."""
    return matmul_flops(head_ops(cfg, seq_len, batch))


@dataclass(frozen=True)
class Flops:
    """FLOPs of one optimizer step (all GPUs together).

    Attributes:
        model: 3 x forward (forward + backward = 2 x forward; Kaplan et al. 2020), no recompute: the MFU numerator
            (PaLM, Chowdhery et al. 2022 appendix B).
        hardware: model + recomputation actually executed: full recompute one more forward of every layer
            (Narayanan eq. 3), selective the attention core Q·Kᵀ and P·V (4·bs²h per layer), FlashAttention's
            backward recomputes Q·Kᵀ (2·bs²h per layer; Dao 2023 §3.1).
    """

    model: float
    hardware: float


def step_flops(
    cfg: TransformerConfig, seq_len: int, global_batch: int, recompute: str = "none", flash_attention: bool = False
) -> Flops:
    """:class:`Flops` for ``global_batch`` sequences of ``seq_len`` tokens."""
    s, b, h, n = seq_len, global_batch, cfg.hidden_size, cfg.num_layers
    layer = layer_forward_flops(cfg, s, b)
    model = 3 * (n * layer + head_forward_flops(cfg, s, b))
    extra = 0.0
    if recompute == "full":
        extra += n * layer
    elif recompute == "selective" and not flash_attention:
        extra += n * 4 * b * s * s * h
    if flash_attention:
        extra += n * 2 * b * s * s * h
    return Flops(model, model + extra)


@dataclass(frozen=True)
class Network:
    """Links between GPUs.

    Attributes:
        gpus_per_node: GPUs in one node (ranks of a group fit in a node when stride x size <= this).
        inter_node_gbit_s: the node's network bandwidth, Gbit/s. Each GPU has its share, / 8 / gpus_per_node GB/s
            (as when every GPU of the node talks off-node at once; an assumption); a group spanning nodes uses the
            shares of its members in each node.
    """

    gpus_per_node: int
    inter_node_gbit_s: float

    def bandwidth(self, gpu: GPU, size: int, stride: int) -> tuple[float, str]:
        """Per-rank GB/s and link name for point-to-point traffic in a group of ``size`` ranks ``stride`` apart
        (ranks numbered in PaddleNLP's default ``pp_first`` topology: mp innermost, then sharding, pp, dp;
        ``training_args.py``)."""
        if size * stride <= self.gpus_per_node:
            return gpu.interconnect_gb_s(size)
        return self.inter_node_gbit_s / 8 / self.gpus_per_node, "network"

    def group(self, gpu: GPU, size: int, stride: int) -> tuple[Fabric, int, str]:
        """The :class:`~paddlefit.estimate.collectives.Fabric` of a group of ``size`` ranks ``stride`` apart, the
        nodes it spans and its link's name. Inside one node: the link of the GPUs it spans (NVLink when they share
        its domain). Across nodes: ``m`` members per node (the largest divisor of ``size`` that fits the node at
        that stride) on ``size / m`` nodes, whose network share is m x the node's bandwidth / ``gpus_per_node``."""
        span = size * stride
        if span <= self.gpus_per_node:
            fabric = node_fabric(gpu, span)
            return fabric, 1, fabric.link
        per_node = math.gcd(size, max(1, self.gpus_per_node // stride))
        share = self.inter_node_gbit_s / 8 * per_node / self.gpus_per_node
        fabric = node_fabric(gpu, per_node * stride, share)
        return fabric, size // per_node, fabric.link + " + network"


@dataclass(frozen=True)
class StepTime:
    """Seconds of one optimizer step and what they are made of.

    Attributes:
        compute: compute of all micro-batches on one stage, m x per-micro-batch compute.
        tp_comm: TP collectives on the critical path (m micro-batches).  pp_comm: pipeline send/recv (m).
        bubble: 1F1B fill/drain, (p-1) x per-micro-batch time; fraction (p-1)/(m+p-1) of the pipeline.
        dp_comm: exposed data-parallel / sharding communication.  optimizer: the update (memory-bound).
        step: total.  tp_link, dp_link, pp_link: which link each group uses.
    """

    compute: float
    tp_comm: float
    pp_comm: float
    bubble: float
    dp_comm: float
    optimizer: float
    step: float
    tp_link: str = ""
    dp_link: str = ""
    pp_link: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (seconds)."""
        return asdict(self)


def step_time(cfg: TransformerConfig, setup: TrainSetup, lay: Layout, gpu: GPU, net: Network, mfu: float) -> StepTime:
    """Seconds per optimizer step of ``lay`` on ``gpu`` GPUs.

    Per micro-batch on one stage: hardware FLOPs / (p·t) at ``mfu`` x dense peak (stages balanced: embedding and
    head spread evenly, an approximation), plus TP: 4 all-reduces of s·b·h·e bytes per layer (2 forward, 2
    backward; Megatron, Shoeybi et al. 2019 §3; 6 with full recompute; with sequence parallelism each is a
    reduce-scatter + all-gather pair of the same s·b·h·e buffer, Korthikanti §4.2.2), plus PP: the activation forward
    and its gradient backward, s·b·h·e / t bytes each (PaddleNLP partial send/recv splits it over the TP ranks).
    Pipeline: (m + p - 1) micro-batch times (1F1B; bubble (p-1)/(m+p-1), Narayanan 2021 §2.2.1).
    Data parallel (see module doc for overlap): plain DP all-reduces the stage's gradients in DataParallel's
    buckets; sharding stage 1/2 reduce-scatters them in the same buckets (an assumption: PaddleNLP's sharding comm
    buffers are not modelled) and all-gathers the updated weights in one call; stage 3 all-gathers each layer's
    weights for forward and backward (and the recompute forward) and reduce-scatters each layer's gradients on every
    micro-batch. Each collective: :mod:`paddlefit.estimate.collectives` over the group's links
    (:meth:`Network.group`).
    Optimizer: reads gradients, reads and writes its states, writes weights, at HBM bandwidth.
    """
    s, b, t, p, d, m = setup.seq_len, lay.micro_batch, lay.tp, lay.pp, lay.dp, lay.accum
    e = setup.act_bytes
    peak, _unit = gpu.peak_flops(setup.precision.value)
    fl = step_flops(cfg, s, b, lay.recompute, setup.flash_attention)  # one micro-batch, whole model
    compute_mb = fl.hardware / (p * t) / (peak * mfu)
    layers = cfg.num_layers / p
    tp_fabric, tp_nodes, tp_link = net.group(gpu, t, 1)
    n_ar = 6 if lay.recompute == "full" else 4
    act = s * b * cfg.hidden_size * e
    if lay.sequence_parallel:
        tp_one = reduce_scatter_s(act, t, tp_fabric, tp_nodes) + allgather_s(act, t, tp_fabric, tp_nodes)
    else:
        tp_one = allreduce_s(act, t, tp_fabric, tp_nodes)
    tp_mb = layers * n_ar * tp_one if t > 1 else 0.0
    shard_size = d if lay.sharding else 1
    pp_bw, pp_link = net.bandwidth(gpu, p, t * shard_size)
    pp_mb = 2 * s * b * cfg.hidden_size * e / t / (pp_bw * 1e9) if p > 1 else 0.0
    mb = compute_mb + tp_mb + pp_mb
    bubble = (p - 1) * mb
    wb, gb, ob = state_bytes_per_param(setup.precision, setup.optimizer)
    n_params = max(stage_params(cfg, t, p, "first"), stage_params(cfg, t, p, "last"))
    grads, weights = n_params * gb, n_params * wb
    dp_stride = t if lay.sharding else t * p
    dp_fabric, dp_nodes, dp_link = net.group(gpu, d, dp_stride)
    backward_last = compute_mb * 2 / 3
    dp = 0.0
    if d > 1 and lay.sharding in (0, 1, 2):
        kind = "allreduce" if lay.sharding == 0 else "reduce_scatter"
        sync = bucketed_collective(kind, grads, d, dp_fabric, DATA_PARALLEL_BUCKETS, dp_nodes)
        dp = dp_exposed_allreduce_s(sync, backward_last)
        if lay.sharding:
            dp += allgather_s(weights, d, dp_fabric, dp_nodes)
    elif d > 1:
        gathers = 3 if lay.recompute == "full" else 2
        n_layers = max(1, round(layers))
        per_mb = n_layers * (
            gathers * allgather_s(weights / n_layers, d, dp_fabric, dp_nodes)
            + reduce_scatter_s(grads / n_layers, d, dp_fabric, dp_nodes)
        )
        dp = m * max(0.0, per_mb - compute_mb)
    opt_params = n_params / (d if lay.sharding else 1)
    optimizer = opt_params * (2 * ob + gb + wb) / (gpu.mem_bw_gb_s * 1e9)
    step = m * mb + bubble + dp + optimizer
    return StepTime(
        m * compute_mb,
        m * tp_mb,
        m * pp_mb,
        bubble,
        dp,
        optimizer,
        step,
        tp_link if t > 1 else "-",
        dp_link if d > 1 else "-",
        pp_link if p > 1 else "-",
    )
