"""Time of NCCL's all-reduce, all-gather and reduce-scatter, and of a data-parallel gradient all-reduce in buckets.

A collective of P bytes over n ranks on N nodes (g = n / N GPUs per node) takes

    t = CALL_OVERHEAD_S + min over the algorithms and protocols NCCL may pick of (latency + bytes moved / bandwidth)

as NCCL's tuner does (``ncclTopoGetAlgoTime``: time = latency + bytes / bandwidth, the cheapest algorithm and
protocol wins; NVIDIA/nccl ``src/graph/tuning.cc`` at 5067397, read 2026-12-06, cited as *tuning.cc* below):

- **Ring, one node** (protocols LL, LL128, Simple): latency = base(p) + steps x hop(link, p), steps = 2(n-1) for an
  all-reduce and n-1 for an all-gather or reduce-scatter (tuning.cc ``baseLatencies``, ``hwLatencies`` NVLink/PCI
  rows); bytes moved per rank 2(n-1)/n x P or (n-1)/n x P (nccl-tests ``busbw``). Bus bandwidth: Simple reaches
  :data:`RING_EFFICIENCY` of the per-direction link figure (fitted), LL half of it capped at NCCL's per-architecture
  ``llMaxBws``, LL128 0.92 of it and only over NVLink (tuning.cc's refinements and LL128 enable rule). Small messages
  are therefore latency-bound and ride LL; the ramp to the Simple ceiling comes out of the minimum.
- **NVLS, one node** (all-reduce only): on an NVSwitch with NVLink SHARP (compute capability 9.0+; NCCL ``search.cc``
  skips the NVLS graph without an NVSwitch or below SM90) the switch reduces, so each GPU sends and receives P once:
  latency = the NVLS hop (25 us, tuning.cc), algorithm bandwidth = :data:`NVLS_SCALE` x ``nvlsEfficiency``(architecture)
  x (g-1)/g x link. NCCL picks it over the ring when ``nvlsEfficiency`` x (g-1) exceeds :data:`NVLS_PICK` (fitted on
  the measured picks: above 4 GPUs on Hopper, above 5 on Blackwell).
- **Hierarchical, several nodes**: reduce-scatter inside each node (NVLink or PCIe, or NVLS), all-reduce of each
  GPU's shard across the nodes through its share of the node's network, all-gather inside; the stages are pipelined
  chunk by chunk, so the slowest stage sets the rate (tuning.cc takes min(intra, inter) bandwidth for its
  hierarchical NVLS_TREE). Across the network NCCL's tuning model counts 2(n-1)/n of the payload per unit of the
  node's bandwidth (its bus-to-algorithm conversion n / (2(n-1)) for Ring, NVLS and NVLS_TREE alike), so a node's
  NICs carry 2(n-1)/n x P for an all-reduce, (n-1)/n x P for an all-gather or reduce-scatter, at line rate.
  Latency: NCCL's ring latency with 2(N-1) of the 2(n-1) steps on the network (hop 14 us, Simple), the others at
  max(NVLink hop, 3 x the 1 us network post overhead), x 1.4 for an all-reduce (the "plateau effect of ring",
  compute capability 8.0+; 1.9 below). Simple protocol only: LL and LL128 need 8-byte / 128-byte store atomicity
  that network providers need not give (aws-ofi-nccl sets ``NCCL_PROTO=simple`` on EFA: aws/aws-ofi-nccl#76, #850).

The fitted constants are fitted on the measured NCCL tables in ``bench/data/collectives/`` (from
stas00/ml-engineering@744d01e ``network/README.md``), named at each; ``bench/collectives.py`` recomputes them and
compares the model with every measured row (median |error| from 1 MiB up: 4-14% per system, against 11-296% for the
plain 2(n-1)/n x P / link; docs/sources.md#collectives-nccl). Expressed through catalog figures only: the
per-direction link (NVLink when all ranks of a node share its NVLink domain, else PCIe), ``nvlink_gpus`` > 2 (NVLink
through an NVSwitch, not a bridged pair), the compute capability (NCCL's per-architecture constants), nodes and the
network's GB/s.

A data-parallel gradient all-reduce is not one message: Paddle sends it in buckets, each a collective paying its own
latency (:func:`bucketed_collective`, :data:`DATA_PARALLEL_BUCKETS`, :data:`FUSED_ALLREDUCE_BUCKETS`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from paddlefit.units import MIB

#: Kinds of collective: all-reduce, all-gather, reduce-scatter. For the last two ``nbytes`` is the whole buffer of
#: all n shards (the all-gather's output, the reduce-scatter's input), as nccl-tests counts them.
KINDS = ("allreduce", "allgather", "reduce_scatter")
#: NCCL protocols (tuning.cc order).
PROTOCOLS = ("LL", "LL128", "Simple")

#: Ring base latency per protocol, microseconds (tuning.cc ``ncclTunerConstantsDefaults.baseLatencies``, Ring row).
RING_BASE_LATENCY_US = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}
#: Ring latency per step by hardware and protocol, microseconds (tuning.cc ``hwLatencies``, Ring columns of the
#: NVLINK, PCI and NET rows).
RING_HOP_LATENCY_US = {
    "nvlink": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
    "pcie": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7},
    "net": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0},
}
#: NVLS latency on one node, microseconds: its NVLink ``hwLatencies`` entry, no base latency (tuning.cc).
NVLS_LATENCY_US = 25.0
#: Network post overhead per step, microseconds, tripled for Simple, the floor of an inter-node ring's intra-node
#: steps (tuning.cc ``getNetOverhead``: 1 us on x86 Intel, 2 us on AMD; the Intel figure).
NET_OVERHEAD_US = 1.0
#: Latency factor of a multi-node Simple ring all-reduce, "plateau effect of ring" (tuning.cc
#: ``ncclTopoGetAlgoTime``: 1.4 from compute capability 8.0, 1.9 below).
RING_PLATEAU = {True: 1.4, False: 1.9}
#: LL's bus bandwidth: half of the ring's, capped at NCCL's single-node ``llMaxBws`` by architecture, GB/s
#: (tuning.cc: ``busBw = min(llMaxBw, busBw * .5)``; Volta 39.0, Ampere 87.7, Hopper 141.0, Blackwell 282.0).
LL_SHARE = 0.5
LL_MAX_BUS_GB_S = ((10.0, 282.0), (9.0, 141.0), (8.0, 87.7), (0.0, 39.0))  # (from compute capability, GB/s)
#: LL128's bus bandwidth: 0.92 of the ring's ("120/128", tuning.cc); NCCL enables it only over NVLink
#: (``typeIntra <= PATH_NVB``) from compute capability 7.0.
LL128_SHARE = 0.92
#: NCCL's ``nvlsEfficiency`` by architecture (tuning.cc: Hopper 0.85, Blackwell 0.74; none before Hopper).
NVLS_EFFICIENCY = ((10.0, 0.74), (9.0, 0.85))  # (from compute capability, efficiency)

#: Fitted: the ring's Simple bus bandwidth / the per-direction link figure. The mean of the three ring rows of
#: ``collectives_h200.csv`` (8x H200, 16 GiB: all-reduce with NVLS off 367.2, all-gather 361.4, reduce-scatter
#: 362.9 GB/s busbw) over H200's 450 GB/s per direction (catalog ``nvlink_gb_s`` 900 / 2).
RING_EFFICIENCY = (367.2 + 361.4 + 362.9) / 3 / 450
#: Fitted: NVLS algorithm bandwidth / (``nvlsEfficiency`` x (g-1)/g x per-direction link). The median over the
#: seven NVLS rows of ``allreduce_by_gpu_count.csv`` (8 GiB; H200 with 5-8 GPUs, B200 with 6-8), each
#: busbw x g / (2(g-1)) / (efficiency x (g-1)/g x link); they span 0.808-0.846.
NVLS_SCALE = 0.822
#: Fitted: NCCL picks NVLS over the ring when ``nvlsEfficiency`` x (GPUs - 1) > this. ``allreduce_by_gpu_count.csv``:
#: ring at 4 H200 (0.85 x 3 = 2.55) and 5 B200 (0.74 x 4 = 2.96), NVLS at 5 H200 (3.40) and 6 B200 (3.70); any value
#: in [2.96, 3.40) reproduces them; this is the middle.
NVLS_PICK = 3.18
#: Fitted: what one collective call costs beyond NCCL's device-side latencies (kernel launch, the framework's call),
#: seconds: the median over the 32 KiB rows of the three single-node systems of ``allreduce_busbw.csv`` (A100
#: nccl-tests, H200 and B200 torch.distributed) of measured - this model without it.
CALL_OVERHEAD_S = 28.1e-6


@dataclass(frozen=True)
class Fabric:
    """What a group of ranks communicates over.

    Attributes:
        link_gb_s: per-direction GB/s of each GPU's link inside a node (NVLink, or PCIe when the node's ranks do
            not all share an NVLink domain).
        link: the link's name (``nvlink``, ``pcie gen4``, ...).
        compute_capability: the GPUs' CUDA compute capability (NCCL's per-architecture constants); 0 when unknown.
        nvswitch: the NVLink goes through an NVSwitch (catalog ``nvlink_gpus`` > 2), where NVLS can run.
        network_gb_s: each node's network bandwidth available to the group, GB/s (all NICs of the node when every
            GPU of the node is in the group); needed when the group spans nodes.
    """

    link_gb_s: float
    link: str
    compute_capability: float = 0.0
    nvswitch: bool = False
    network_gb_s: float | None = None

    @property
    def nvlink(self) -> bool:
        """The intra-node link is NVLink."""
        return self.link == "nvlink"


@dataclass(frozen=True)
class CollectiveTime:
    """Seconds of one collective and what NCCL is taken to run: ``algorithm`` ``ring``, ``nvls``, ``hierarchical``
    or ``none`` (one rank or no bytes), ``protocol`` ``LL``, ``LL128``, ``Simple`` or ``-``."""

    seconds: float
    algorithm: str
    protocol: str


def node_fabric(gpu: Any, ranks_per_node: int, network_gb_s: float | None = None) -> Fabric:
    """The :class:`Fabric` of ``ranks_per_node`` GPUs of catalog model ``gpu`` in each node (a
    :class:`~paddlefit.catalog.gpus.GPU`): its link from :meth:`~paddlefit.catalog.gpus.GPU.interconnect_gb_s`
    (NVLink per direction when all of them share the NVLink domain, else PCIe), an NVSwitch when NVLink joins more
    than a bridged pair (``nvlink_gpus`` > 2), and the node's network GB/s (None for one node)."""
    bw, link = gpu.interconnect_gb_s(max(ranks_per_node, 2))
    nvswitch = link == "nvlink" and (gpu.nvlink_gpus or 2) > 2
    return Fabric(bw, link, gpu.compute_capability or 0.0, nvswitch, network_gb_s)


def _by_cc(table: tuple[tuple[float, float], ...], cc: float, default: float = 0.0) -> float:
    return next((v for low, v in table if cc >= low), default)


def nvls_efficiency(compute_capability: float) -> float:
    """NCCL's ``nvlsEfficiency`` for a GPU of ``compute_capability`` (:data:`NVLS_EFFICIENCY`; 0: no NVLS)."""
    return _by_cc(NVLS_EFFICIENCY, compute_capability)


def nvls_picked(fabric: Fabric, gpus: int) -> bool:
    """NCCL runs an all-reduce over ``gpus`` GPUs of a node as NVLS (NVLink SHARP) rather than a ring: an NVSwitch,
    compute capability 9.0+ and ``nvlsEfficiency`` x (gpus - 1) > :data:`NVLS_PICK`."""
    eff = nvls_efficiency(fabric.compute_capability)
    return fabric.nvswitch and eff > 0 and eff * (gpus - 1) > NVLS_PICK


def _volume(kind: str, ranks: int) -> float:
    """Bytes each rank moves per payload byte in a ring: 2(n-1)/n for an all-reduce, (n-1)/n otherwise."""
    return (2 if kind == "allreduce" else 1) * (ranks - 1) / ranks


def _ring_s(kind: str, nbytes: float, ranks: int, fabric: Fabric, protocol: str) -> float:
    steps = (2 if kind == "allreduce" else 1) * (ranks - 1)
    hw = "nvlink" if fabric.nvlink else "pcie"
    latency = RING_BASE_LATENCY_US[protocol] + steps * RING_HOP_LATENCY_US[hw][protocol]
    bus = RING_EFFICIENCY * fabric.link_gb_s
    if protocol == "LL":
        bus = min(_by_cc(LL_MAX_BUS_GB_S, fabric.compute_capability), LL_SHARE * bus)
    elif protocol == "LL128":
        bus *= LL128_SHARE
    return latency * 1e-6 + _volume(kind, ranks) * nbytes / (bus * 1e9)


def _nvls_bytes_per_s(fabric: Fabric, gpus: int) -> float:
    eff = nvls_efficiency(fabric.compute_capability)
    return NVLS_SCALE * eff * (gpus - 1) / gpus * fabric.link_gb_s * 1e9


def _intra_stage_s(kind: str, nbytes: float, gpus: int, fabric: Fabric) -> float:
    """Bandwidth seconds of the intra-node stages of a hierarchical collective (reduce-scatter + all-gather for an
    all-reduce: the ring's 2(g-1)/g, or NVLS where picked)."""
    if gpus <= 1:
        return 0.0
    ring = _volume(kind, gpus) * nbytes / (RING_EFFICIENCY * fabric.link_gb_s * 1e9)
    if kind == "allreduce" and nvls_picked(fabric, gpus):
        return min(ring, nbytes / _nvls_bytes_per_s(fabric, gpus))
    return ring


def _hierarchical_s(kind: str, nbytes: float, ranks: int, nodes: int, fabric: Fabric) -> float:
    g = ranks // nodes
    steps = (2 if kind == "allreduce" else 1) * (ranks - 1)
    inter_steps = (2 if kind == "allreduce" else 1) * (nodes - 1)
    hop = RING_HOP_LATENCY_US["nvlink" if fabric.nvlink else "pcie"]["Simple"]
    latency = (
        RING_BASE_LATENCY_US["Simple"]
        + (steps - inter_steps) * max(hop, 3 * NET_OVERHEAD_US)
        + inter_steps * RING_HOP_LATENCY_US["net"]["Simple"]
    )
    if kind == "allreduce":
        latency *= RING_PLATEAU[fabric.compute_capability >= 8.0]
    inter = _volume(kind, ranks) * nbytes / (fabric.network_gb_s * 1e9)  # type: ignore[operator]
    return latency * 1e-6 + max(_intra_stage_s(kind, nbytes, g, fabric), inter)


def collective(kind: str, nbytes: float, ranks: int, fabric: Fabric, nodes: int = 1) -> CollectiveTime:
    """Seconds of one NCCL collective (see the module docstring for the model and its sources).

    Args:
        kind: ``allreduce``, ``allgather`` or ``reduce_scatter`` (:data:`KINDS`).
        nbytes: payload, bytes: the buffer all-reduced, or the whole buffer of all shards for an all-gather (its
            output) and a reduce-scatter (its input), as nccl-tests counts them.
        ranks: GPUs in the group (n), spread evenly over ``nodes``.
        fabric: the links (:func:`node_fabric`); ``network_gb_s`` (GB/s per node) is needed when ``nodes`` > 1.
        nodes: nodes the group spans (N).

    Returns:
        :class:`CollectiveTime`: 0 s (algorithm ``none``) for one rank or no bytes.

    Raises:
        ValueError: an unknown ``kind``, negative bytes, ``nodes`` < 1, ``ranks`` not a multiple of ``nodes``, or
            several nodes without a positive ``network_gb_s``.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown collective {kind!r}; one of {', '.join(KINDS)}")
    if nbytes < 0 or nodes < 1 or ranks % nodes:
        raise ValueError(
            f"need bytes >= 0, nodes >= 1 and ranks a multiple of nodes (got {nbytes}, {ranks} ranks on {nodes} nodes)"
        )
    if ranks <= 1 or nbytes == 0:
        return CollectiveTime(0.0, "none", "-")
    if nodes > 1:
        if not fabric.network_gb_s or fabric.network_gb_s <= 0:
            raise ValueError(f"a collective over {nodes} nodes needs the network's GB/s per node")
        best = CollectiveTime(_hierarchical_s(kind, nbytes, ranks, nodes, fabric), "hierarchical", "Simple")
    else:
        protocols = PROTOCOLS if fabric.nvlink and fabric.compute_capability >= 7.0 else ("LL", "Simple")
        options = [CollectiveTime(_ring_s(kind, nbytes, ranks, fabric, p), "ring", p) for p in protocols]
        if kind == "allreduce" and nvls_picked(fabric, ranks):
            options.append(
                CollectiveTime(NVLS_LATENCY_US * 1e-6 + nbytes / _nvls_bytes_per_s(fabric, ranks), "nvls", "Simple")
            )
        best = min(options, key=lambda c: c.seconds)
    return replace(best, seconds=best.seconds + CALL_OVERHEAD_S)


def allreduce_s(nbytes: float, ranks: int, fabric: Fabric, nodes: int = 1) -> float:
    """Seconds of one all-reduce of ``nbytes`` bytes over ``ranks`` GPUs on ``nodes`` nodes (:func:`collective`).

    Raises:
        ValueError: as :func:`collective`.
    """
    return collective("allreduce", nbytes, ranks, fabric, nodes).seconds


def allgather_s(nbytes: float, ranks: int, fabric: Fabric, nodes: int = 1) -> float:
    """Seconds of one all-gather whose output (all ``ranks`` shards) is ``nbytes`` bytes (:func:`collective`).

    Raises:
        ValueError: as :func:`collective`.
    """
    return collective("allgather", nbytes, ranks, fabric, nodes).seconds


def reduce_scatter_s(nbytes: float, ranks: int, fabric: Fabric, nodes: int = 1) -> float:
    """Seconds of one reduce-scatter whose input (all ``ranks`` shards) is ``nbytes`` bytes (:func:`collective`).

    Raises:
        ValueError: as :func:`collective`.
    """
    return collective("reduce_scatter", nbytes, ranks, fabric, nodes).seconds


@dataclass(frozen=True)
class Buckets:
    """How a framework groups gradients into all-reduce messages.

    Attributes:
        size_bytes: a bucket's size, bytes (the last one of the sequence may be smaller).
        last_bytes: a smaller bucket sent last, bytes (0: none).
        source: where the sizes come from.
    """

    size_bytes: int
    last_bytes: int
    source: str


#: ``paddle.DataParallel``'s buckets: ``comm_buffer_size=25`` and ``last_comm_buffer_size=1`` MB, MB = 1024 x 1024
#: bytes (``python/paddle/distributed/parallel.py``, Paddle 3.3.1: ``int(comm_buffer_size * 1024 * 1024)``). The
#: groups are assigned in parameter order, the first capped at the last size, and reversed for the reducer
#: (``core.EagerReducer(..., list(reversed(self.group_indices)), ...)``), so the first layers' gradients, ready last
#: in the backward, go last in a 1 MB bucket. PyTorch DDP's defaults are the same (25 MB, first bucket 1 MB).
DATA_PARALLEL_BUCKETS = Buckets(
    25 * MIB,
    1 * MIB,
    "paddle.DataParallel comm_buffer_size 25 MB, last_comm_buffer_size 1 MB (python/paddle/distributed/parallel.py)",
)
#: ``fused_allreduce_gradients``' groups, which ``paddlefit train`` all-reduces after the backward when several
#: devices train with ``oom_backoff: true`` (its default): ``bucket_size=128 * 1024 * 1024``, no smaller last group
#: (``python/paddle/distributed/fleet/utils/hybrid_parallel_util.py``, Paddle 3.3.1).
FUSED_ALLREDUCE_BUCKETS = Buckets(
    128 * MIB,
    0,
    "fused_allreduce_gradients bucket_size 128 MiB (python/paddle/distributed/fleet/utils/hybrid_parallel_util.py)",
)


@dataclass(frozen=True)
class BucketedCollective:
    """A collective of gradients sent as a sequence of buckets.

    Attributes:
        seconds: all buckets one after the other.
        last_bucket_s: the bucket sent last (the one no backward is left to hide).
        buckets: how many messages.
        link: the intra-node link (``nvlink``, ``pcie gen4``, ...), ``+ network`` across nodes.
        algorithm: what NCCL is taken to run for the biggest bucket (``ring LL128``, ``nvls Simple``, ...).
    """

    seconds: float
    last_bucket_s: float
    buckets: int
    link: str
    algorithm: str


def bucketed_collective(
    kind: str,
    nbytes: float,
    ranks: int,
    fabric: Fabric,
    buckets: Buckets,
    nodes: int = 1,
) -> BucketedCollective:
    """``nbytes`` bytes of gradients all-reduced (or reduce-scattered, ``kind``) over ``ranks`` GPUs on ``nodes``
    nodes as ``buckets`` sends them: a ``last_bytes`` bucket (or all the bytes, if fewer), the rest in ``size_bytes``
    buckets, the final one partial; each bucket is one :func:`collective` with its own latency. Gradients are taken
    as divisible at any byte: Paddle closes a group at the first tensor that reaches the size, so a real group can
    exceed it by up to one tensor.

    Raises:
        ValueError: as :func:`collective`.
    """
    link = fabric.link + (" + network" if nodes > 1 else "")
    biggest = collective(kind, min(nbytes, buckets.size_bytes), ranks, fabric, nodes)  # also checks the arguments
    if biggest.seconds == 0.0:
        return BucketedCollective(0.0, 0.0, 0, link, "none")
    last = min(nbytes, buckets.last_bytes)
    full, part = divmod(nbytes - last, buckets.size_bytes)
    seconds = int(full) * collective(kind, buckets.size_bytes, ranks, fabric, nodes).seconds
    for rest in (part, last):
        seconds += collective(kind, rest, ranks, fabric, nodes).seconds
    last_s = collective(kind, last or part or buckets.size_bytes, ranks, fabric, nodes).seconds
    count = int(full) + (part > 0) + (last > 0)
    return BucketedCollective(seconds, last_s, count, link, f"{biggest.algorithm} {biggest.protocol}")


def train_gradient_allreduce(gpu: Any, grads_bytes: float, devices: int) -> BucketedCollective:
    """The gradient all-reduce of one optimizer step of ``paddlefit train`` on ``devices`` GPUs of catalog model
    ``gpu`` in one node, as it runs with ``oom_backoff: true`` (the default): after the backward, in
    ``fused_allreduce_gradients``' 128 MiB groups (:data:`FUSED_ALLREDUCE_BUCKETS`), over the node's link
    (:func:`node_fabric`). The one figure ``plan --devices``, ``cost`` and ``profile`` use for a job's all-reduce.

    Raises:
        ValueError: negative bytes.
    """
    return bucketed_collective("allreduce", grads_bytes, devices, node_fabric(gpu, devices), FUSED_ALLREDUCE_BUCKETS)


def dataparallel_gradient_allreduce(gpu: Any, grads_bytes: float, devices: int) -> BucketedCollective:
    """The gradient all-reduce of ``paddle.DataParallel`` (``oom_backoff: false``) on ``devices`` GPUs of ``gpu`` in
    one node: 25 MB buckets and a last 1 MB one (:data:`DATA_PARALLEL_BUCKETS`), each sent as the backward produces
    it (:func:`~paddlefit.estimate.gpu_model.dp_exposed_allreduce_s` takes what the backward hides).

    Raises:
        ValueError: negative bytes.
    """
    return bucketed_collective("allreduce", grads_bytes, devices, node_fabric(gpu, devices), DATA_PARALLEL_BUCKETS)
