"""paddlefit.estimate.collectives: NCCL's latency terms, the protocol ramp, the ring ceiling, NVLS where NCCL picks it,
the hierarchical inter-node all-reduce and the gradient buckets (exact where the arithmetic is exact), and the model
against measured NCCL all-reduces (bench/data/collectives/, at the tolerances bench/collectives.py reports)."""

import csv
from dataclasses import replace
from pathlib import Path

import pytest

from paddlefit.catalog.gpus import get_gpu
from paddlefit.estimate import collectives as co
from paddlefit.estimate.collectives import (
    CALL_OVERHEAD_S,
    DATA_PARALLEL_BUCKETS,
    FUSED_ALLREDUCE_BUCKETS,
    NVLS_SCALE,
    RING_EFFICIENCY,
    BucketedCollective,
    allgather_s,
    allreduce_s,
    bucketed_collective,
    collective,
    dataparallel_gradient_allreduce,
    node_fabric,
    nvls_picked,
    reduce_scatter_s,
    train_gradient_allreduce,
)
from paddlefit.units import GIB, MIB

DATA = Path(__file__).resolve().parents[2] / "bench" / "data" / "collectives"


def test_fitted_constants_are_the_named_rows():
    # the mean of the three ring rows of collectives_h200.csv over H200's 450 GB/s per direction
    assert pytest.approx((367.2 + 361.4 + 362.9) / 3 / 450, rel=1e-15) == RING_EFFICIENCY
    assert round(RING_EFFICIENCY, 4) == 0.8085
    assert (NVLS_SCALE, co.NVLS_PICK, CALL_OVERHEAD_S) == (0.822, 3.18, 28.1e-6)


def test_node_fabric_reads_the_catalog_links():
    sxm = node_fabric(get_gpu("A100-SXM4-80GB"), 8)
    assert (sxm.link_gb_s, sxm.link, sxm.compute_capability, sxm.nvswitch) == (300.0, "nvlink", 8.0, True)
    pair = node_fabric(get_gpu("A100-PCIe-40GB"), 2)  # an NVLink bridge joins two cards: no NVSwitch
    assert (pair.link_gb_s, pair.link, pair.nvswitch) == (300.0, "nvlink", False)
    four = node_fabric(get_gpu("A100-PCIe-40GB"), 4)
    assert (four.link_gb_s, four.link, four.nvswitch) == (31.5, "pcie gen4", False)
    assert node_fabric(get_gpu("B200"), 8, 400.0).network_gb_s == 400.0


def test_large_ring_allreduce_is_simple_at_the_fitted_ceiling_plus_nccl_latency():
    fab = node_fabric(get_gpu("A100-SXM4-80GB"), 8)
    c = collective("allreduce", GIB, 8, fab)
    assert (c.algorithm, c.protocol) == ("ring", "Simple")
    # base 8.4 us + 2(n-1) steps x 3.4 us (tuning.cc, Ring/Simple over NVLink) + 2(n-1)/n x P / (0.8085 x 300 GB/s)
    want = CALL_OVERHEAD_S + (8.4 + 14 * 3.4) * 1e-6 + 2 * 7 / 8 * GIB / (RING_EFFICIENCY * 300e9)
    assert c.seconds == pytest.approx(want, rel=1e-12)
    assert allreduce_s(GIB, 8, fab) == c.seconds


def test_small_messages_ride_ll_then_ll128():
    fab = node_fabric(get_gpu("A100-SXM4-80GB"), 8)
    small = collective("allreduce", 32 * 1024, 8, fab)
    # LL: base 6.6 us + 14 x 0.6 us; bus bandwidth min(Ampere's llMaxBw 87.7, half the ring's 121.3 GB/s)
    assert (small.algorithm, small.protocol) == ("ring", "LL")
    want = CALL_OVERHEAD_S + (6.6 + 14 * 0.6) * 1e-6 + 2 * 7 / 8 * 32 * 1024 / 87.7e9
    assert small.seconds == pytest.approx(want, rel=1e-12)
    mid = collective("allreduce", 8 * MIB, 8, fab)
    assert mid.protocol == "LL128"  # base 14 us + 14 x 1.9 us at 0.92 of the ring
    want = CALL_OVERHEAD_S + (14.0 + 14 * 1.9) * 1e-6 + 2 * 7 / 8 * 8 * MIB / (0.92 * RING_EFFICIENCY * 300e9)
    assert mid.seconds == pytest.approx(want, rel=1e-12)
    # latency-bound: a 32 KiB all-reduce costs as much as ~10 MB at the ring's rate
    assert small.seconds > 100 * 2 * 7 / 8 * 32 * 1024 / (RING_EFFICIENCY * 300e9)


def test_pcie_has_no_ll128_and_pcie_hops():
    fab = node_fabric(get_gpu("A100-PCIe-40GB"), 8)
    c = collective("allreduce", 8 * MIB, 8, fab)
    assert c.protocol in ("LL", "Simple")
    big = collective("allreduce", GIB, 8, fab)
    want = CALL_OVERHEAD_S + (8.4 + 14 * 5.7) * 1e-6 + 2 * 7 / 8 * GIB / (RING_EFFICIENCY * 31.5e9)
    assert (big.protocol, big.seconds) == ("Simple", pytest.approx(want, rel=1e-12))


def test_nvls_where_nccl_picks_it():
    h200, b200 = node_fabric(get_gpu("H200"), 8), node_fabric(get_gpu("B200"), 8)
    assert [co.nvls_efficiency(cc) for cc in (8.0, 9.0, 10.0)] == [0.0, 0.85, 0.74]  # NCCL's nvlsEfficiency
    # allreduce_by_gpu_count.csv: ring at 4 H200 and at 4-5 B200, NVLS above
    assert [nvls_picked(h200, g) for g in range(4, 9)] == [False, True, True, True, True]
    assert [nvls_picked(b200, g) for g in range(4, 9)] == [False, False, True, True, True]
    assert not nvls_picked(node_fabric(get_gpu("A100-SXM4-80GB"), 8), 8)  # before Hopper: no NVLink SHARP
    assert not nvls_picked(node_fabric(get_gpu("H100-PCIe"), 2), 2)  # a bridged pair: no NVSwitch
    c = collective("allreduce", 8 * GIB, 8, h200)
    assert (c.algorithm, c.protocol) == ("nvls", "Simple")
    want = CALL_OVERHEAD_S + 25e-6 + 8 * GIB / (NVLS_SCALE * 0.85 * 7 / 8 * 450e9)
    assert c.seconds == pytest.approx(want, rel=1e-12)
    # all-gather and reduce-scatter stay on the ring: each GPU moves (n-1)/n of the buffer either way
    want = CALL_OVERHEAD_S + (8.4 + 7 * 3.4) * 1e-6 + 7 / 8 * 16 * GIB / (RING_EFFICIENCY * 450e9)
    assert allgather_s(16 * GIB, 8, h200) == reduce_scatter_s(16 * GIB, 8, h200) == pytest.approx(want, rel=1e-12)


def test_hierarchical_allreduce_across_nodes():
    fab = node_fabric(get_gpu("B200"), 8, 8 * 50.0)  # 8x 50 GB/s EFA per node
    c = collective("allreduce", 16 * GIB, 32, fab, nodes=4)
    assert (c.algorithm, c.protocol) == ("hierarchical", "Simple")
    # NCCL's ring latency: 2(N-1) = 6 of the 62 steps on the network (14 us), the others at max(3.4, 3 x 1 us),
    # x 1.4 (plateau, CC 8.0+); the slowest pipelined stage: the node's NICs carry 2(n-1)/n x P
    latency = (8.4 + 56 * 3.4 + 6 * 14.0) * 1.4e-6
    inter = 2 * 31 / 32 * 16 * GIB / 400e9
    intra = 16 * GIB / (NVLS_SCALE * 0.74 * 7 / 8 * 900e9)  # NVLS inside (8 B200), faster than the ring's
    assert inter > intra
    assert c.seconds == pytest.approx(CALL_OVERHEAD_S + latency + inter, rel=1e-12)
    # leaving the node costs ~2x at large payloads, not the 18x of NVLink (900) over one NIC (50 GB/s)
    one = allreduce_s(16 * GIB, 8, fab)
    assert 2.0 < c.seconds / one < 2.6
    # one GPU per node: every step crosses the network, no intra-node stage
    solo = collective("allreduce", GIB, 4, replace(fab, network_gb_s=50.0), nodes=4)
    assert solo.seconds == pytest.approx(CALL_OVERHEAD_S + (8.4 + 6 * 14.0) * 1.4e-6 + 1.5 * GIB / 50e9, rel=1e-12)


def test_trivial_cases_and_errors():
    fab = node_fabric(get_gpu("H200"), 8)
    assert collective("allreduce", GIB, 1, fab) == co.CollectiveTime(0.0, "none", "-")
    assert allreduce_s(0, 8, fab) == 0.0
    with pytest.raises(ValueError, match="unknown collective"):
        collective("broadcast", 1.0, 8, fab)
    with pytest.raises(ValueError, match="multiple of nodes"):
        collective("allreduce", 1.0, 12, fab, nodes=5)
    with pytest.raises(ValueError, match="bytes >= 0"):
        collective("allreduce", -1.0, 8, fab)
    with pytest.raises(ValueError, match="network's GB/s"):
        collective("allreduce", 1.0, 16, fab, nodes=2)


def test_buckets_pay_their_latency_each():
    assert (DATA_PARALLEL_BUCKETS.size_bytes, DATA_PARALLEL_BUCKETS.last_bytes) == (25 * MIB, MIB)
    assert (FUSED_ALLREDUCE_BUCKETS.size_bytes, FUSED_ALLREDUCE_BUCKETS.last_bytes) == (128 * MIB, 0)
    gpu = get_gpu("A100-SXM4-80GB")
    fab = node_fabric(gpu, 8)
    dp = dataparallel_gradient_allreduce(gpu, 100 * MIB, 8)  # 1 MiB last, 3 x 25 MiB, 24 MiB
    t = {m: allreduce_s(m * MIB, 8, fab) for m in (1, 24, 25)}
    assert dp.buckets == 5 and dp.seconds == pytest.approx(3 * t[25] + t[24] + t[1], rel=1e-12)
    assert dp.last_bucket_s == t[1] and dp.link == "nvlink" and dp.algorithm == "ring Simple"
    assert dp.seconds > allreduce_s(100 * MIB, 8, fab)  # more than one message of all the gradients
    fused = train_gradient_allreduce(gpu, 300 * MIB, 8)  # 2 x 128 MiB + 44 MiB, none smaller last
    assert fused.buckets == 3
    assert fused.seconds == pytest.approx(2 * allreduce_s(128 * MIB, 8, fab) + allreduce_s(44 * MIB, 8, fab), rel=1e-12)
    assert fused.last_bucket_s == allreduce_s(44 * MIB, 8, fab)
    small = dataparallel_gradient_allreduce(gpu, 0.5 * MIB, 8)  # fewer gradients than the last bucket
    assert (small.buckets, small.seconds, small.last_bucket_s) == (
        1,
        allreduce_s(0.5 * MIB, 8, fab),
        allreduce_s(0.5 * MIB, 8, fab),
    )
    assert train_gradient_allreduce(gpu, 100 * MIB, 1) == BucketedCollective(0.0, 0.0, 0, "nvlink", "none")
    rs = bucketed_collective("reduce_scatter", 50 * MIB, 8, fab, DATA_PARALLEL_BUCKETS)
    assert rs.seconds == pytest.approx(
        reduce_scatter_s(25 * MIB, 8, fab) + reduce_scatter_s(24 * MIB, 8, fab) + reduce_scatter_s(MIB, 8, fab),
        rel=1e-12,
    )
    across = bucketed_collective(
        "allreduce", 50 * MIB, 16, node_fabric(get_gpu("B200"), 8, 400.0), DATA_PARALLEL_BUCKETS, nodes=2
    )
    assert across.link == "nvlink + network" and across.algorithm == "hierarchical Simple"


def _measured(system: str, payload: int) -> tuple[float, int]:
    with open(DATA / "allreduce_busbw.csv", newline="", encoding="utf-8") as f:
        row = next(r for r in csv.DictReader(f) if r["system"] == system and int(r["payload_bytes"]) == payload)
    n = int(row["ranks"])
    return payload * 2 * (n - 1) / n / (float(row["busbw_gb_s"]) * 1e9), n


@pytest.mark.parametrize(
    ("system", "gpu", "nodes", "network", "payload", "tol"),
    [
        # bench/collectives.py's errors at these rows: -4.5%, -2.4%, +1.0%, -4.1%, +3.3%, -2.5%
        ("8x A100 (one node)", "A100-SXM4-80GB", 1, None, GIB, 0.05),
        ("8x H200 (one node)", "H200", 1, None, GIB, 0.03),
        ("8x B200 (one node, AWS p6-b200.48xlarge)", "B200", 1, None, 16 * GIB, 0.02),
        ("4 nodes x 8x B200 (AWS p6-b200.48xlarge)", "B200", 4, 400.0, 16 * GIB, 0.05),
        ("4 nodes x 8x B200 (AWS p6-b200.48xlarge)", "B200", 4, 400.0, 4 * MIB, 0.04),
        ("8x B200 (one node, AWS p6-b200.48xlarge)", "B200", 1, None, MIB, 0.03),
    ],
)
def test_model_against_measured_allreduces(system, gpu, nodes, network, payload, tol):
    meas, n = _measured(system, payload)
    pred = allreduce_s(payload, n, node_fabric(get_gpu(gpu), n // nodes, network), nodes)
    assert pred == pytest.approx(meas, rel=tol)
