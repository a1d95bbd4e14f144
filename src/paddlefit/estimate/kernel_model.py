"""Time of one GPU kernel from its shape and the GPU's datasheet: GEMM tiles and waves, DRAM and L2 bytes, launch.

Every function here takes datasheet figures (SM count, a unit's dense peak FLOP/s, DRAM bandwidth, L2 size, board
power) and the fitted constants of :class:`~paddlefit.estimate.perf_params.PerfParams`; nothing depends on a GPU's
name, so a GPU without a measured kernel (Ada, Hopper, Blackwell) is timed from its datasheet. The constants are
fitted op class by op class on measured kernels (``bench/gpu_kernels.py``: NeuSight's ~256,000 FP32 kernel timings
on P4, P100, T4, V100 and A100, and DeepBench's FP16 tensor-core GEMMs on V100 and T4) and judged leave one GPU out.

GEMM-like kernels (linear, matmul, convolution as implicit GEMM) are cut into output tiles (:data:`TILES`) that
run one per SM at a time (NVIDIA "Matrix Multiplication Background" guide, "Wave Quantization"; Habitat, Yu et al.,
USENIX ATC 2021, §4.2)::

    compute_s = waves x 2 tm tn (k_tile + gemm_k0) / (peak x eff x tile_rate(tm, tn) / SMs)
    tile_rate = (h / (h + tile_h0)) / (64 / (64 + tile_h0)),  h = tm tn / (tm + tn)

``h`` is the tile's arithmetic intensity in FLOPs per element loaded (a tm x tn tile loads tm + tn elements per
k step for 2 tm tn FLOPs), so small tiles reach less of the peak; ``gemm_k0`` is the prologue and epilogue of a
tile in k steps, which short reductions do not amortise. A GEMM with fewer tiles than SMs is split along k
(split-K; CUTLASS ``GemmSplitKParallel``) into ``min(ceil(SMs / tiles), k // SPLIT_K_MIN)`` slices. FP32 on the
CUDA cores is also held to what the card sustains: the clock its board power allows with every FP32 lane busy
(:func:`sustained_fp32_flops`: TDP x ``fp32_gflops_per_w`` x (12 / process_nm) ^ ``fp32_node_exponent`` against
the boost-clock peak, never below the base clock; the T4 and P4, 70-75 W cards, sustain 40-65% of their
boost-clock peak in the kernel data, the 250 W A100 PCIe 85%), and on GPUs with two FP32 paths per SM partition
to the share of issue slots SGEMM gives to FFMA (:func:`fp32_issue_share`): the datasheet peaks of GA10x, AD10x,
GH100 and Blackwell count both paths.

FP32 3x3 convolutions with stride 1 and no dilation may instead run as Winograd F(4x4, 3x3) (Lavin & Gray, "Fast
Algorithms for Convolutional Neural Networks", CVPR 2016; cuDNN's ``WINOGRAD_NONFUSED``, whose kernels
``winogradforwarddata4x4`` / ``winogradforwardfilter4x4`` / an SGEMM / ``winogradforwardoutput4x4`` are the ones
NeuSight's traces show for most such convolutions): 36 batched GEMMs over 6x6 input tiles, 4x fewer multiplies at
large outputs, plus three transform passes through DRAM (:func:`winograd_s`). The same convolutions may also run as
cuDNN's fused Winograd F(2x2, 3x3) kernel (``scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t`` after a
``generatewinogradtileskernel`` filter transform, a third of NeuSight's convolutions): one thread block per 32
output channels and 8 x 16 output pixels (the kernel's grid in NeuSight's traces is samples x ceil(C_out / 32),
ceil(H / 8), ceil(W / 16)), 2.25x fewer multiplies than direct, transforms kept on chip
(:func:`winograd_fused_s`). cuDNN picks the fastest algorithm for the shape, so the kernel's time is the lowest
of the three (:class:`~paddlefit.estimate.gpu_model.CompiledStep`).

Memory-bound kernels move their bytes at ``bw_eff`` of the DRAM bandwidth; bytes up to the L2 size are served
``l2_gain`` times faster (the kernels' inputs are the previous kernel's outputs, still in L2 when they fit).

Every kernel also costs ``kernel_s`` on the GPU (launch and tail). The host's own cost (Paddle's eager dispatch)
is not here: :func:`paddlefit.estimate.timing.host_floor_s`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Output tiles of one thread block, largest first: cuBLAS's SGEMM kernels are named by them
#: (``ampere_sgemm_128x128_nn``, ``volta_sgemm_128x64_tn``, ``..._64x64_..``, ``..._128x32_..``,
#: ``..._32x32_sliced1x4_..`` in NeuSight's kernel traces) and CUTLASS's default threadblock shapes are the same.
TILES = ((128, 128), (128, 64), (64, 64), (128, 32), (32, 32))
#: Shortest k slice of a split-K GEMM: 4 k-iterations of CUTLASS's default 32-deep threadblock tile, so each slice
#: still amortises its prologue and the final reduction of the partial tiles.
SPLIT_K_MIN = 128
#: A reduction this long (a weight gradient's, which runs over every sample and pixel: 10^5-10^6 for a CNN) is split
#: further, until every resident tile slot (SMs x tiles per SM) has a slice. The value is the shortest at which
#: NeuSight's measured GEMMs (reductions up to 65,536) do not get worse leave one GPU out (bench/gpu_kernels.py,
#: GEMM median |error| at 2,048 / 4,096 / 16,384: 16.7% / 15.0% / 12.8%).
SPLIT_K_LONG = 16384


#: Output elements whose accumulators one SM holds at a time: one 128 x 128 tile's (64 KiB of FP32 accumulators, a
#: quarter of the 256 KiB register file every SM from Pascal to Hopper has; NVIDIA's architecture whitepapers).
#: Smaller tiles run that many at once per SM, at most :data:`MAX_BLOCKS_PER_SM`.
RESIDENT_OUTPUTS = 128 * 128
#: At most 8 resident thread blocks of 256 threads: the 2,048 threads an SM holds (CUDA Programming Guide,
#: "Compute Capabilities": 2,048 threads per SM on compute capability 6.0-9.0).
MAX_BLOCKS_PER_SM = 8


def gemm_tiling(
    g: np.ndarray,
    m: np.ndarray,
    n: np.ndarray,
    k: np.ndarray,
    sm: float,
    batched_tile: tuple[float, float] | None = None,
    simt: np.ndarray | bool = True,
) -> tuple[np.ndarray, ...]:
    """Tile, waves and k per tile of GEMMs (arrays of one shape; ``g`` batched GEMMs of m x n outputs, reduction k).

    The tile is the largest of :data:`TILES` whose count still fills every SM, its long edge along the longer
    output dimension (cuBLAS's heuristics prefer large tiles and fall back to smaller ones for small outputs: the
    kernel names in NeuSight's traces), else the smallest. A single GEMM's tile edge is never longer than its
    output dimension rounded up to 32 (a 128-wide tile on 32 columns computes 3/4 padding: DeepBench's 5x10
    DeepSpeech convolution, 32 channels, ran 3.9x faster on a V100 than such tiles allow); a batched one keeps the
    rule above (NeuSight's small ``bmm`` calls are timed within 8-10% with it, 1.5-2.3x too fast with fitted
    tiles). With fewer tiles than SMs the reduction is split (split-K, see the module docstring). ``simt`` marks
    FP32 GEMMs on the CUDA cores (cuBLAS's SGEMM kernels, whose tiles :data:`TILES` are; tensor-core kernels have
    their own): a batched one (``g`` > 1) runs ``batched_tile``
    when one is given, the tile of the architecture's SGEMM kernel family for strided-batched GEMMs
    (:func:`batched_sgemm_tile`), without split-K (its grid is tiles x batch in NeuSight's traces); and an SM runs
    ``o = min(RESIDENT_OUTPUTS / (tm tn), MAX_BLOCKS_PER_SM)`` of its tiles at once (at least 1), sharing its
    rate, so they are quantized in waves of ``SMs x o`` and a wave takes ``o`` tile times (split-K aims at one unit
    per SM, so a lone small tile runs at 1 / o of its SM, too few warps to fill it; only a reduction of at least
    :data:`SPLIT_K_LONG` is split until all ``SMs x o`` slots have one). Other GEMMs run one tile per SM at a time.

    Returns:
        (tm, tn, waves, k_tile): tile edges, tile times per SM (ceil(units / (SMs x o)) x o, units = tiles x
        split), and k / split.
    """
    g, m, n, k = (np.maximum(np.asarray(x, dtype=float), 1.0) for x in (g, m, n, k))
    tm, tn = np.full(m.shape, 32.0), np.full(m.shape, 32.0)
    done = np.zeros(m.shape, dtype=bool)
    fit_m, fit_n = np.ceil(m / 32.0) * 32.0, np.ceil(n / 32.0) * 32.0
    for a, b in TILES:
        ta, tb = np.where(m >= n, a, b), np.where(m >= n, b, a)
        ok = ~done & (g * np.ceil(m / ta) * np.ceil(n / tb) >= sm) & (((ta <= fit_m) & (tb <= fit_n)) | (g > 1))
        tm, tn, done = np.where(ok, ta, tm), np.where(ok, tb, tn), done | ok
    simt = np.asarray(simt, dtype=bool)
    fixed = np.zeros(m.shape, dtype=bool)
    if batched_tile is not None:
        fixed = (g > 1) & simt
        a, b = batched_tile
        tm, tn = np.where(fixed, np.where(m >= n, a, b), tm), np.where(fixed, np.where(m >= n, b, a), tn)
    tiles = g * np.ceil(m / tm) * np.ceil(n / tn)
    split = np.where(
        (tiles < sm) & ~fixed, np.maximum(1.0, np.minimum(np.ceil(sm / tiles), np.floor(k / SPLIT_K_MIN))), 1.0
    )
    per_sm = np.where(simt, np.clip(RESIDENT_OUTPUTS / (tm * tn), 1.0, MAX_BLOCKS_PER_SM), 1.0)
    long_k = np.minimum(np.ceil(sm * per_sm / tiles), np.floor(k / SPLIT_K_LONG))
    split = np.where(~fixed, np.maximum(split, long_k), split)
    return tm, tn, np.ceil(tiles * split / (sm * per_sm)) * per_sm, k / split


def batched_sgemm_tile(architecture: str | None, tiles: dict[str, Any]) -> tuple[float, float] | None:
    """The output tile of ``architecture``'s FP32 strided-batched SGEMM kernels, or None (the general rule of
    :func:`gemm_tiling`).

    cuBLAS runs one SGEMM kernel family per architecture (``maxwell_sgemm_*`` on Pascal, ``volta_sgemm_*`` on
    Volta and Turing, ``ampere_sgemm_*`` on Ampere: the kernel names in NeuSight's traces), and for batched GEMMs
    each family settles on one tile. ``tiles`` is the shipped table (``batched_sgemm_tiles`` of the parameter
    file: family -> tile and which architectures run it, counted from the kernel names by
    ``bench/gpu_kernels.py``); an architecture it does not list gets None.
    """
    for fam in tiles.values():
        if (architecture or "").lower() in fam.get("architectures", ()):
            return float(fam["tile"][0]), float(fam["tile"][1])
    return None


#: Share of a Volta-or-later SM partition's issue slots that cuBLAS's SIMT SGEMM main loop spends on FFMA: a thread
#: of a 128 x 128 tile (256 threads) owns an 8 x 8 block of outputs, so each k step issues 64 FFMA and loads 8 + 8
#: operands from shared memory as 4 LDS.128; each 8-deep k tile adds its 2 LDG.128, 2 STS.128, a barrier and about
#: 3 address and loop instructions (CUTLASS's SIMT GEMM, ``include/cutlass/gemm/warp/mma_simt.h`` and
#: ``threadblock/default_mma_core_simt.h``; the kernel names ``*_sgemm_128x128_*`` in NeuSight's traces):
#: 8 x 64 / (8 x (64 + 4) + 8) = 0.93. From Volta on, a partition's scheduler dispatches one warp instruction per
#: clock (Volta, Turing, Ampere GA102, Ada and Hopper whitepapers, "SM architecture"); with 16 FP32 lanes per
#: partition (64 per SM: Volta, Turing, GA100) an FFMA holds the FP32 pipe for two clocks and the loads issue in
#: the other, so the loop fills the pipe; with 32 lanes (two FP32 paths per partition, 128 per SM: GA10x, AD10x,
#: GH100, Blackwell) the FP32 pipe takes an FFMA every clock and every other instruction costs it a slot, so SGEMM
#: reaches at most this share of the datasheet FP32 peak, which counts both paths.
FFMA_ISSUE_SHARE = 8 * 64 / (8 * (64 + 4) + 8)
#: FP32 lanes per SM partition above which a single-dispatch scheduler (compute capability 7.0 on) cannot keep
#: the FP32 pipe busy while issuing anything else: 16 lanes take a warp's FFMA in two clocks (see above).
SINGLE_PATH_LANES = 16
#: SM partitions (processing blocks) per SM from Volta on (the architecture whitepapers above).
PARTITIONS_PER_SM = 4


def fp32_issue_share(fp32_lanes_per_sm: float | None, compute_capability: float | None) -> float:
    """Share of the datasheet FP32 peak an SGEMM can issue (dimensionless, :data:`FFMA_ISSUE_SHARE` or 1):
    :data:`FFMA_ISSUE_SHARE` on a GPU whose SM partitions have two FP32 paths (more than
    :data:`SINGLE_PATH_LANES` lanes per partition) behind one dispatch unit (compute capability 7.0 or later),
    1 otherwise (one path: the loads issue while an FFMA occupies the pipe; Pascal's partitions dispatch two
    instructions a clock, Pascal whitepapers) or when either figure is unknown."""
    if not fp32_lanes_per_sm or not compute_capability or compute_capability < 7.0:
        return 1.0
    return FFMA_ISSUE_SHARE if fp32_lanes_per_sm / PARTITIONS_PER_SM > SINGLE_PATH_LANES else 1.0


def sustained_fp32_flops(
    fp32_peak_flops: float,
    issue_share: float,
    tdp_w: float | None,
    process_nm: float | None,
    base_clock_mhz: float | None,
    boost_clock_mhz: float | None,
    gflops_per_w: float,
    node_exponent: float,
) -> float:
    """FP32 FLOP/s a GPU's CUDA cores sustain in a long GEMM (inf without a peak).

    The datasheet FP32 peak is 2 x SMs x FP32 lanes per SM x boost clock; SGEMM issues ``issue_share`` of it
    (:func:`fp32_issue_share`). Issuing that at the boost clock takes peak x issue_share / (``gflops_per_w`` x
    (12 / ``process_nm``) ^ ``node_exponent``) watts (the energy per FP32 FLOP, fitted at 12 nm on NeuSight's
    kernels by ``bench/gpu_kernels.py``, falls with the process node); when that is more than the board power (TDP)
    allows, GPU Boost lowers the clock until it fits. The clock never falls below the base clock: NVIDIA rates the
    base clock as the one the card holds at TDP (the T4's 585 of 1,590 MHz, an L4's 795 of 2,040 MHz; datasheets).
    So the rate is peak x issue_share x min(1, max(base / boost, TDP x GFLOP/W / (peak x issue_share))); no power
    limit without a TDP, no floor without both clocks.
    """
    if fp32_peak_flops <= 0:
        return float("inf")
    issued = fp32_peak_flops * issue_share
    if not tdp_w:
        return issued
    per_w = gflops_per_w * 1e9 * (12.0 / process_nm if process_nm else 1.0) ** node_exponent
    floor = base_clock_mhz / boost_clock_mhz if base_clock_mhz and boost_clock_mhz else 0.0
    return issued * min(1.0, max(floor, tdp_w * per_w / issued))


def tile_rate(tm: np.ndarray, tn: np.ndarray, tile_h0: float) -> np.ndarray:
    """Rate of an SM on a tm x tn tile relative to a 128 x 128 tile (see the module docstring), dimensionless."""
    h = tm * tn / (tm + tn)
    return (h / (h + tile_h0)) / (64.0 / (64.0 + tile_h0))


def gemm_compute_s(
    g: np.ndarray,
    m: np.ndarray,
    n: np.ndarray,
    k: np.ndarray,
    peak_flops: np.ndarray | float,
    sm: float,
    eff: np.ndarray | float,
    gemm_k0: float,
    tile_h0: float,
    sustained_flops: np.ndarray | float = np.inf,
    batched_tile: tuple[float, float] | None = None,
    simt: np.ndarray | bool = True,
) -> np.ndarray:
    """Compute seconds of GEMMs (see the module docstring).

    Args:
        g, m, n, k: batch, output rows, output columns, reduction length (FLOPs = 2 g m n k).
        peak_flops: dense peak FLOP/s of the unit the GEMM runs on (datasheet).
        sm: SM count (datasheet).
        eff: fraction of the peak a 128 x 128 tile reaches at long k (fitted per unit).
        gemm_k0, tile_h0: fitted, see the module docstring.
        sustained_flops: FP32 FLOP/s the CUDA cores sustain (:func:`sustained_fp32_flops`; inf: no ceiling).
        batched_tile, simt: as :func:`gemm_tiling`.
    """
    tm, tn, waves, kt = gemm_tiling(g, m, n, k, sm, batched_tile, simt)
    t = _tiles_s(tm, tn, waves, kt, peak_flops, sm, eff, gemm_k0, tile_h0)
    flops = 2.0 * np.maximum(g, 1) * np.maximum(m, 1) * np.maximum(n, 1) * np.maximum(k, 1)
    return np.maximum(t, flops / sustained_flops)


def _tiles_s(
    tm: np.ndarray,
    tn: np.ndarray,
    waves: np.ndarray,
    kt: np.ndarray,
    peak_flops: np.ndarray | float,
    sm: float,
    eff: np.ndarray | float,
    gemm_k0: float,
    tile_h0: float,
) -> np.ndarray:
    """Seconds of ``waves`` tile times of tm x tn tiles over ``kt`` k steps (the module docstring's formula)."""
    rate_sm = np.asarray(peak_flops) * eff * tile_rate(tm, tn, tile_h0) / sm
    return waves * 2.0 * tm * tn * (kt + gemm_k0) / rate_sm


def tuned_gemm_compute_s(
    g: np.ndarray,
    m: np.ndarray,
    n: np.ndarray,
    k: np.ndarray,
    peak_flops: np.ndarray | float,
    sm: float,
    eff: np.ndarray | float,
    gemm_k0: float,
    tile_h0: float,
    sustained_flops: np.ndarray | float = np.inf,
    simt: np.ndarray | bool = True,
) -> np.ndarray:
    """Compute seconds of GEMMs whose kernel was chosen by timing the candidates, as TensorRT's builder does ("the
    builder times each candidate kernel (tactic) of a layer and keeps the fastest", NVIDIA TensorRT Developer
    Guide, "Optimizing Builder Performance"): the fastest of every tile of :data:`TILES` (long edge along the
    longer output dimension) with no split-K, one k slice per SM, or one per resident tile slot (SMs x
    ``min(RESIDENT_OUTPUTS / (tm tn), MAX_BLOCKS_PER_SM)``; slices at least :data:`SPLIT_K_MIN` deep). cuBLAS's
    heuristic instead picks one tile by rule (:func:`gemm_tiling`); a GEMV-shaped layer at batch 1 (a classifier's
    fully connected layers) is where the two differ most. Arguments as :func:`gemm_compute_s`.
    """
    g, m, n, k = (np.maximum(np.asarray(x, dtype=float), 1.0) for x in (g, m, n, k))
    simt = np.asarray(simt, dtype=bool)
    best = np.full(m.shape, np.inf)
    for a, b in TILES:
        tm, tn = np.where(m >= n, a, b), np.where(m >= n, b, a)
        tiles = g * np.ceil(m / tm) * np.ceil(n / tn)
        per_sm = np.where(simt, np.clip(RESIDENT_OUTPUTS / (tm * tn), 1.0, MAX_BLOCKS_PER_SM), 1.0)
        for slots in (0.0, sm, sm * per_sm):
            split = np.maximum(1.0, np.minimum(np.ceil(slots / tiles), np.floor(k / SPLIT_K_MIN)))
            waves = np.ceil(tiles * split / (sm * per_sm)) * per_sm
            best = np.minimum(best, _tiles_s(tm, tn, waves, k / split, peak_flops, sm, eff, gemm_k0, tile_h0))
    return np.maximum(best, 2.0 * g * m * n * k / sustained_flops)


def memory_s(
    nbytes: np.ndarray, bandwidth: float, bw_eff: np.ndarray | float, l2_bytes: float, l2_gain: float
) -> np.ndarray:
    """Seconds to move ``nbytes`` (bytes): the first ``l2_bytes`` at ``l2_gain`` x the DRAM rate, the rest at
    ``bw_eff`` x the datasheet DRAM ``bandwidth`` (bytes/s)."""
    nbytes = np.asarray(nbytes, dtype=float)
    hit = np.minimum(nbytes, l2_bytes)
    return (nbytes - hit) / (bandwidth * bw_eff) + hit / (bandwidth * bw_eff * l2_gain)


#: Winograd F(m x m, 3x3) with m = 4: a 4 x 4 output tile from a 6 x 6 input tile (alpha = m + 3 - 1 = 6), so
#: 36 element-wise products per tile and channel pair (Lavin & Gray, CVPR 2016, section 4).
WINOGRAD_TILE, WINOGRAD_ALPHA = 4, 6


def winograd_eligible(conv: tuple[int, ...] | None) -> bool:
    """True for a 3x3 convolution with stride 1 and dilation 1 (``conv``: the geometry of
    :func:`~paddlefit.estimate.flop_formulas.conv_geometry`), the shapes cuDNN's Winograd algorithms accept."""
    return conv is not None and tuple(conv[:6]) == (3, 3, 1, 1, 1, 1)


def winograd_s(
    tiles: np.ndarray,
    cin: np.ndarray,
    cout: np.ndarray,
    x_elems: np.ndarray,
    y_elems: np.ndarray,
    peak_flops: np.ndarray | float,
    sm: float,
    eff: float,
    gemm_k0: float,
    tile_h0: float,
    sustained_flops: float,
    bandwidth: float,
    bw_eff: float,
    l2_bytes: float,
    l2_gain: float,
    transform: float,
    batched_tile: tuple[float, float] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Seconds of an FP32 convolution as Winograd F(4x4, 3x3), without the fixed per-kernel costs (4 kernels).

    Args:
        tiles: 4x4 output tiles (samples x ceil(out_h / 4) x ceil(out_w / 4)); cin, cout: channels.
        x_elems, y_elems: elements of the convolution's input and output.
        peak_flops, sm, eff, gemm_k0, tile_h0, sustained_flops: as :func:`gemm_compute_s` (``eff``: the fitted
            ``winograd_fp32``).
        bandwidth, bw_eff, l2_bytes, l2_gain: as :func:`memory_s`.
        transform: fitted multiplier on the transform passes' bytes (``winograd_transform``).
        batched_tile: the tile of the 36 batched SGEMMs (:func:`gemm_tiling`).

    Returns:
        (seconds, compute-bound flag) per convolution: max(36 GEMMs of tiles x cout over cin, their operands'
        bytes) + the input, filter and output transforms (each reads its tensor and writes the 36-fold one, 4-byte
        elements).
    """
    a2 = WINOGRAD_ALPHA**2
    ones = np.ones_like(np.asarray(tiles, dtype=float))
    comp = gemm_compute_s(
        a2 * ones, tiles, cout, cin, peak_flops, sm, eff, gemm_k0, tile_h0, sustained_flops, batched_tile
    )
    mem = memory_s(4.0 * a2 * (tiles * cin + cin * cout + tiles * cout), bandwidth, bw_eff, l2_bytes, l2_gain)
    passes = (x_elems + a2 * tiles * cin, a2 * tiles * cout + y_elems, (9 + a2) * cin * cout)
    trans = sum(memory_s(4.0 * np.asarray(b, dtype=float), bandwidth, bw_eff, l2_bytes, l2_gain) for b in passes)
    return np.maximum(comp, mem) + transform * trans, comp >= mem


#: cuDNN's fused FP32 Winograd F(2x2, 3x3) kernel: a thread block computes 32 output channels of 8 x 16 output
#: pixels (4 x 8 tiles of 2 x 2, "tile148"), 16 (= 4 x 4 input tile) element-wise products per tile and channel pair.
FUSED_BLOCK_CO, FUSED_BLOCK_H, FUSED_BLOCK_W, FUSED_ALPHA2, FUSED_TILES = 32, 8, 16, 16, 32


def winograd_fused_s(
    blocks: np.ndarray,
    cin: np.ndarray,
    cout: np.ndarray,
    x_elems: np.ndarray,
    y_elems: np.ndarray,
    peak_flops: np.ndarray | float,
    sm: float,
    eff: float,
    gemm_k0: float,
    sustained_flops: float,
    bandwidth: float,
    bw_eff: float,
    l2_bytes: float,
    l2_gain: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Seconds of an FP32 3x3 convolution as cuDNN's fused Winograd F(2x2, 3x3) kernel plus its filter transform,
    without the fixed per-kernel costs (2 kernels).

    Args:
        blocks: pixel blocks, samples x ceil(out_h / 8) x ceil(out_w / 16) (:data:`FUSED_BLOCK_H`...); each is
            run for every 32 output channels, one thread block per SM at a time (waves over ``sm``).
        cin, cout, x_elems, y_elems: channels, input and output elements.
        peak_flops, sm, gemm_k0, sustained_flops: as :func:`gemm_compute_s`; ``eff``: the fitted
            ``winograd_fused_fp32``, the fraction of an SM's peak a block reaches.
        bandwidth, bw_eff, l2_bytes, l2_gain: as :func:`memory_s`.

    Returns:
        (seconds, compute-bound flag): max(waves x 2 x 16 x 32 x 32 x (C_in + gemm_k0) FLOPs of a block at
        ``eff`` x peak / SMs, the input, output and transformed-filter bytes) + the filter transform pass (reads
        9, writes 16 values per channel pair; 4-byte elements).
    """
    units = np.asarray(blocks, dtype=float) * np.ceil(np.asarray(cout, dtype=float) / FUSED_BLOCK_CO)
    per_block = 2.0 * FUSED_ALPHA2 * FUSED_TILES * FUSED_BLOCK_CO
    comp = np.ceil(units / sm) * per_block * (cin + gemm_k0) / (np.asarray(peak_flops) * eff / sm)
    comp = np.maximum(comp, units * per_block * cin / sustained_flops)
    mem = memory_s(4.0 * (x_elems + y_elems + FUSED_ALPHA2 * cin * cout), bandwidth, bw_eff, l2_bytes, l2_gain)
    trans = memory_s(4.0 * (9 + FUSED_ALPHA2) * cin * cout, bandwidth, bw_eff, l2_bytes, l2_gain)
    return np.maximum(comp, mem) + trans, comp >= mem
