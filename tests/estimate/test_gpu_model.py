"""The per-operator GPU model: trace contents, per-kernel bytes and FLOPs (hand-computed), AMP dtypes, waves."""

import json
import math
from dataclasses import replace

import paddle
import pytest
from paddle import nn

from paddlefit.catalog.gpus import get_gpu, load_gpus
from paddlefit.errors import CatalogError
from paddlefit.estimate.amp import assign_dtypes, saved_activation_bytes
from paddlefit.estimate.collectives import BucketedCollective
from paddlefit.estimate.gpu_model import dp_exposed_allreduce_s, estimate_step, kernel_time_s
from paddlefit.estimate.kernel_model import (
    FFMA_ISSUE_SHARE,
    batched_sgemm_tile,
    fp32_issue_share,
    gemm_compute_s,
    gemm_tiling,
    memory_s,
    sustained_fp32_flops,
    winograd_fused_s,
    winograd_s,
)
from paddlefit.estimate.kernels import OPTIMIZER_BYTES_PER_PARAM, Kernel, step_kernels
from paddlefit.estimate.optrace import OpTrace
from paddlefit.estimate.perf_params import PerfParams, batched_sgemm_tiles, load_perf_params, parse_perf_params
from paddlefit.estimate.transformer_ops import transformer_trace
from paddlefit.models import resolve_model
from paddlefit.probe.recorder import record_trace
from paddlefit.units import MIB

A100 = get_gpu("A100-SXM4-40GB")
V100 = get_gpu("V100-SXM2-16GB")


def _trace(layer, *shapes):
    layer.train()
    ins1 = [paddle.randn([1, *s]) for s in shapes]
    ins2 = [paddle.randn([2, *s]) for s in shapes]
    return record_trace(layer, ins1, ins2)


def _kernels(layer, batch, *shapes, precision="fp32", gpu=A100, optimizer="sgd"):
    t = _trace(layer, *shapes)
    n = sum(math.prod(p.shape) for p in layer.parameters() if not p.stop_gradient)
    k = len([p for p in layer.parameters() if not p.stop_gradient])
    return t, step_kernels(t.at(batch), precision, gpu, optimizer, n, k)


def _by_op(kernels):
    return {k.op: k for k in kernels}


def test_linear_with_bias_bytes_and_flops_exact():
    t, ks = _kernels(nn.Linear(10, 20), 4, (10,))
    (op,) = [o for o in t.at(4) if o.cls != "view"]
    assert (op.op, op.cls, op.gemm) == ("linear", "gemm", (1, 4, 20, 10))
    assert op.flops == 2 * 4 * 20 * 10 + 4 * 20
    k = _by_op(ks)
    assert k["linear"].bytes == 4 * (4 * 10 + 10 * 20 + 20 + 4 * 20)  # read x, W, b; write y (fp32)
    assert "linear.dgrad" not in k  # the input needs no gradient
    assert (k["linear.wgrad"].flops, k["linear.wgrad"].bytes) == (2 * 4 * 20 * 10, 4 * (4 * 10 + 4 * 20 + 10 * 20))
    assert k["linear.wgrad"].gemm == (1, 10, 20, 4)  # dW = X^T dY: (K, N) reduced over M
    assert k["linear.bias_grad"].bytes == 4 * 4 * 20 + 4 * 20
    assert k["sgd"].bytes == OPTIMIZER_BYTES_PER_PARAM["sgd"] * 220 and k["sgd"].count == 2
    assert k["clear_grad"].bytes == 4 * 220


def test_conv_and_depthwise_conv_exact():
    t, ks = _kernels(nn.Conv2D(3, 8, 3, padding=1), 1, (3, 16, 16))
    (op,) = [o for o in t.ops1 if o.cls != "view"]
    assert (op.cls, op.gemm, op.layout) == ("conv", (1, 256, 8, 27), "NCHW")
    assert op.conv == (3, 3, 1, 1, 1, 1, 16, 16)  # 3x3, stride 1, dilation 1, 16 x 16 output
    assert op.flops == 2 * 256 * 8 * 27 + 256 * 8
    assert _by_op(ks)["conv2d"].bytes == 4 * (3 * 256 + 8 * 27 + 8 + 8 * 256)
    dw = nn.Conv2D(8, 8, 3, padding=1, groups=8)
    t, ks = _kernels(dw, 2, (8, 16, 16))
    (op,) = [o for o in t.at(2) if o.cls != "view"]
    assert (op.cls, op.gemm) == ("dwconv", (8, 512, 1, 9))  # groups x (samples x pixels) x 1 x 9
    assert op.flops == 2 * 2 * 8 * 256 * 9 + 2 * 8 * 256
    k = _by_op(ks)["depthwise_conv2d"]  # Paddle's own depthwise kernel, not in the AMP white list
    assert k.unit == "dwconv" and k.bytes == 4 * (2 * 8 * 256 + 8 * 9 + 8 + 2 * 8 * 256)


def test_layer_norm_and_softmax_bytes_exact():
    _, ks = _kernels(nn.LayerNorm(16), 2, (5, 16))
    k = _by_op(ks)
    x = 2 * 5 * 16 * 4
    assert k["layer_norm"].flops == 8 * 160
    assert k["layer_norm"].bytes == x + 2 * 16 * 4 + x + x  # read x, scale, bias; second pass over x; write y
    assert k["layer_norm.grad"].bytes == 2 * (x + x) + x + 2 * 16 * 4  # two passes over (x, dy); dx; params

    class Soft(nn.Layer):
        def __init__(self):
            super().__init__()
            self.w = self.create_parameter([5])

        def forward(self, x):
            return paddle.nn.functional.softmax(x * self.w, axis=-1)

    _, ks = _kernels(Soft(), 2, (5, 5))
    k = _by_op(ks)
    assert (k["softmax"].flops, k["softmax"].bytes) == (3 * 50, 2 * 50 * 4)
    assert k["softmax.grad"].bytes == 3 * 50 * 4  # read dy and out, write dx


def test_adam_update_bytes_and_kernels():
    layer = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 3))
    _, ks = _kernels(layer, 2, (8,), optimizer="adam")
    adam = _by_op(ks)["adam"]
    params = 8 * 8 + 8 + 8 * 3 + 3
    assert adam.bytes == 28 * params and adam.count == 4  # p, g, m, v read + p, m, v written; one per tensor
    t = kernel_time_s(adam, A100, _params(bw_eff=0.5, kernel_s=1e-5, l2_gain=1.0), "fp32")[0]
    assert t == pytest.approx(28 * params / (1555e9 * 0.5) + 4 * 1e-5)


def test_amp_o1_casts_weights_and_keeps_black_list_ops_fp32():
    model = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 4))
    t = _trace(model, (16,))
    ops = [a for a in assign_dtypes(t.at(8), "fp16-o1") if a.op.cls != "view"]
    lin1, ln, lin2 = ops
    assert lin1.compute == "float16" and lin1.out_dtype == "float16"
    # x (8 x 16), W (16 x 32), b (32) cast fp32 -> fp16 before the white-list linear_v2
    assert sorted(c[0] for c in lin1.casts) == sorted([8 * 16, 16 * 32, 32])
    assert ln.compute == "float32" and ln.casts == ((8 * 32, "float16", "float32", False),)  # black at O1
    assert lin2.compute == "float16"
    # O2: parameters stored in half, LayerNorm keeps fp32 parameters and, being gray at O2, follows X
    o2 = [a for a in assign_dtypes(t.at(8), "fp16-o2") if a.op.cls != "view"]
    assert o2[0].casts == ((8 * 16, "float32", "float16", False),) and o2[1].compute == "float16"
    acts, cast_w = saved_activation_bytes(t.at(8), "fp16-o1")
    acts32, cast32 = saved_activation_bytes(t.at(8), "fp32")
    # fp32: each op keeps its input (x0 for W's gradient, LN's input, lin2's input)
    assert acts32 == 4 * (8 * 16 + 8 * 32 + 8 * 32) and cast32 == 0
    # O1: the linears keep fp16 cast copies of x0 and of LN's output; LN (fp32, black) keeps the fp32 cast copy
    # of its fp16 input
    assert acts == 2 * 8 * 16 + 4 * 8 * 32 + 2 * 8 * 32
    assert cast_w == 2 * (16 * 32 + 32 * 4)  # half copies of both weights live until their backward


def test_nchw_half_convolutions_pay_layout_transposes():
    conv = nn.Conv2D(16, 16, 3, padding=1)
    t, ks = _kernels(conv, 4, (16, 8, 8), precision="fp16-o1")
    fwd, bwd = (k for k in ks if k.op == "nchw_transpose")
    n = 4 * 16 * 64  # x and y elements
    assert (fwd.count, fwd.bytes) == (2, 2 * 2 * (n + n))  # x to NHWC, y back: read + write at 2 bytes
    assert (bwd.count, bwd.bytes) == (3, 2 * 2 * (2 * n + n))  # dy, x in; dx out
    from paddlefit.estimate.optrace import with_layout

    ks2 = step_kernels(with_layout(t.at(4), "NHWC"), "fp16-o1", A100, "sgd", 16 * 16 * 9 + 16, 2)
    assert not [k for k in ks2 if k.op == "nchw_transpose"]


def _params(**over):
    """The shipped parameters with some values replaced (hand-computable cases)."""
    shipped = load_perf_params()
    return PerfParams(dict(shipped.values, **over))


def test_wave_quantization_at_a_tile_boundary():
    # 108 tiles of 128 x 128 fill the A100's 108 SMs once; one more tile needs a second, nearly empty wave
    assert [float(x) for x in gemm_tiling(1, 128 * 108, 128, 64, 108)] == [128, 128, 1, 64]
    assert [float(x) for x in gemm_tiling(1, 128 * 109, 128, 64, 108)] == [128, 128, 2, 64]
    one = gemm_compute_s(1, 128 * 108, 128, 64, 19.5e12, 108, 1.0, 0.0, 16.0)
    two = gemm_compute_s(1, 128 * 109, 128, 64, 19.5e12, 108, 1.0, 0.0, 16.0)
    # a wave: each SM runs 2 x 128 x 128 x 64 FLOPs at 1/108 of the peak
    assert one == pytest.approx(2 * 128 * 128 * 64 / (19.5e12 / 108)) and two == pytest.approx(2 * one)
    # the prologue/epilogue of a tile costs gemm_k0 k-steps: k = 64 with k0 = 16 takes 80/64 as long
    assert gemm_compute_s(1, 128 * 108, 128, 64, 19.5e12, 108, 1.0, 16.0, 16.0) == pytest.approx(one * 80 / 64)


def test_small_outputs_take_small_tiles_and_split_k():
    # 128 x 128 output: no tile size fills 108 SMs, so the smallest (32 x 32: 16 tiles), and the reduction is split
    # into min(ceil(108 / 16), 1024 // 128) = 7 slices: 112 units of k = 1024 / 7. An SM holds min(128 x 128 /
    # (32 x 32), 8) = 8 such tiles at once, sharing its rate: one wave of 108 x 8 slots, 8 tile times
    tm, tn, waves, kt = gemm_tiling(1, 128, 128, 1024, 108)
    assert (float(tm), float(tn), float(waves)) == (32, 32, 8) and float(kt) == pytest.approx(1024 / 7)
    # with the tensor cores' one tile per SM: 112 units are 2 waves of one tile time
    assert [float(x) for x in gemm_tiling(1, 128, 128, 1024, 108, simt=False)[:3]] == [32, 32, 2]
    # a 32 x 32 tile has intensity h = 16 FLOPs per element loaded against 64 for 128 x 128: its SM is slower
    rate = (16 / (16 + 36.0)) / (64 / (64 + 36.0))
    t = gemm_compute_s(1, 128, 128, 1024, 19.5e12, 108, 1.0, 0.0, 36.0)
    assert t == pytest.approx(8 * 2 * 32 * 32 * (1024 / 7) / (19.5e12 * rate / 108))
    # 64 x 64 tiles (a batched GEMM of a family that runs them) go 4 to an SM: 4 x 108 fill one wave of 4 tile
    # times, one more tile takes a second
    assert [float(x) for x in gemm_tiling(432, 64, 64, 4096, 108, (64, 64))] == [64, 64, 4, 4096]
    assert [float(x) for x in gemm_tiling(433, 64, 64, 4096, 108, (64, 64))] == [64, 64, 8, 4096]
    # a large output keeps the 128 x 128 tile: 32 x 32 = 1024 tiles are 9.48 waves of 108, so 10
    assert [float(x) for x in gemm_tiling(1, 4096, 4096, 64, 108)[:3]] == [128, 128, 10]
    # 6 x 128 rows and 2 x 128 columns = 12 tiles of 128 x 128 do not fill 108 SMs; 64 x 64 tiles: 48, neither;
    # 32 x 32: 192 tiles fill them, 8 to an SM: one wave of 8 tile times
    assert [float(x) for x in gemm_tiling(1, 768, 256, 64, 108)[:3]] == [32, 32, 8]


def test_a_tile_never_outgrows_the_output_it_covers():
    # DeepBench's DeepSpeech layer (5x10 filter, stride 2, 32 -> 32 channels, 16 x 38 x 166 outputs): one GEMM of
    # 100,928 x 32 outputs over 1,600. A 128 x 128 tile would fill V100's 80 SMs (789 tiles) but compute 3/4
    # padding: the layer was timed 3.9x slower than DeepBench measured (11.9 TFLOP/s, FP32, V100-SXM2). The widest
    # tile no wider than 32 columns is 128 x 32: 789 tiles, 4 to an SM (128 x 128 accumulators / 4,096), so
    # ceil(789 / 320) = 3 waves of 4 tile times
    assert [float(x) for x in gemm_tiling(1, 16 * 38 * 166, 32, 1600, 80)[:3]] == [128, 32, 12]
    # 33-64 columns round up to 64: 128 x 64
    assert [float(x) for x in gemm_tiling(1, 100_000, 40, 1600, 80)[:2]] == [128, 64]
    # batched GEMMs keep the general rule: cuBLAS's batched SGEMM runs its family's large tiles on small matrices
    # too (NeuSight's bmm calls on A100 are timed within 8-10% with them, 1.5-2.3x too fast with fitted ones)
    assert [float(x) for x in gemm_tiling(128, 32, 32, 64, 108)[:2]] == [128, 128]


def test_batched_sgemm_takes_its_kernel_familys_tile_without_split_k():
    # 12 x 8 heads' 197 x 64 @ 64 x 197 (ViT-B attention scores): the general rule gives 128 x 128 tiles (384 of
    # them fill 80 SMs); Volta's batched SGEMM kernels are 64 x 64: 96 x 4 x 4 = 1536 tiles, 4 to an SM, so
    # ceil(1536 / 320) = 5 waves of 4 tile times; no split-K
    assert [float(x) for x in gemm_tiling(96, 197, 197, 64, 80)[:3]] == [128, 128, 5]
    assert [float(x) for x in gemm_tiling(96, 197, 197, 64, 80, (64, 64))] == [64, 64, 20, 64]
    # a single GEMM, or one the family does not cover (TF32/half tensor-core kernels), keeps the general rule
    assert [float(x) for x in gemm_tiling(1, 197, 197, 64, 80, (64, 64))[:2]] == [32, 32]
    assert [float(x) for x in gemm_tiling(96, 197, 197, 64, 80, (64, 64), False)[:2]] == [128, 128]
    tiles = {"volta_sgemm": {"tile": [64, 64], "architectures": ["turing", "volta"]}}
    assert batched_sgemm_tile("Turing", tiles) == (64.0, 64.0) and batched_sgemm_tile("ada", tiles) is None


def test_bandwidth_bound_add_and_l2():
    n = 2**26  # 768 MiB moved: far beyond the A100's 40 MiB L2
    add = Kernel("elementwise", "add", "forward", n, 12 * n, "memory")
    p = _params(bw_eff=0.8, l2_gain=2.0, kernel_s=3e-6)
    l2 = 40 * MIB
    t, bound = kernel_time_s(add, A100, p, "fp32")
    assert bound == "memory"
    assert t == pytest.approx((12 * n - l2) / (1555e9 * 0.8) + l2 / (1555e9 * 0.8 * 2.0) + 3e-6)
    # within the L2 the bytes move twice as fast
    small = Kernel("elementwise", "add", "forward", MIB, 12 * MIB, "memory")
    assert kernel_time_s(small, A100, p, "fp32")[0] == pytest.approx(12 * MIB / (1555e9 * 0.8 * 2.0) + 3e-6)
    # layer norm and softmax have their own bandwidth efficiency
    ln = Kernel("norm", "layer_norm", "forward", 0, 12 * n, "memory")
    p2 = _params(bw_eff=0.8, norm_bw_eff=0.4, l2_gain=1.0, kernel_s=3e-6)
    assert kernel_time_s(ln, A100, p2, "fp32")[0] == pytest.approx(12 * n / (1555e9 * 0.4) + 3e-6)


def test_tiny_kernels_are_launch_bound():
    tiny = Kernel("elementwise", "add", "forward", 1, 12, "memory", count=1000)
    p = _params(kernel_s=4e-6, bw_eff=0.8, l2_gain=1.5)
    t, _ = kernel_time_s(tiny, V100, p, "fp32")
    assert t == pytest.approx(1000 * 4e-6, rel=1e-6)  # 12 bytes a kernel: nothing but the fixed cost


def test_fp32_on_cuda_cores_is_held_to_the_board_power_never_below_the_base_clock():
    t4 = get_gpu("T4")  # 70 W, 8.1 TFLOPS FP32 at its 1,590 MHz boost clock, base 585 MHz
    big = Kernel("gemm", "matmul", "forward", 2 * 8192**3, 3 * 4 * 8192**2, "fp32", (1, 8192, 8192, 8192))
    # 70 W x 60 GFLOP/W = 4.2 TFLOPS: the power limit binds (above the base clock's 8.1 x 585 / 1590 = 2.98)
    p = _params(fp32_gflops_per_w=60.0, gemm_fp32=1.0)
    t, bound = kernel_time_s(big, t4, p, "fp32")
    assert bound == "compute" and t == pytest.approx(2 * 8192**3 / (70 * 60e9) + p.values["kernel_s"])
    # 70 W x 30 GFLOP/W = 2.1 TFLOPS would be below the base clock: the card holds its base clock at TDP
    p = _params(fp32_gflops_per_w=30.0, gemm_fp32=1.0)
    t, _ = kernel_time_s(big, t4, p, "fp32")
    assert t == pytest.approx(2 * 8192**3 / (8.1e12 * 585 / 1590) + p.values["kernel_s"])
    # the same kernel on TF32 tensor cores is not held to the CUDA cores' power (far less energy per FLOP)
    a100_tf32 = Kernel("gemm", "matmul", "forward", 2 * 8192**3, 3 * 4 * 8192**2, "tf32", (1, 8192, 8192, 8192))
    t2, _ = kernel_time_s(a100_tf32, A100, p, "fp32")
    assert t2 < 2 * 8192**3 / 156e12 / p.values["gemm_tf32"] * 1.2


def test_two_fp32_paths_per_partition_issue_a_share_of_the_peak():
    # an RTX 3090 (GA102: 128 FP32 lanes per SM, one dispatch per partition) with power to spare issues
    # FFMA_ISSUE_SHARE of its datasheet FP32 peak in a long SGEMM; a V100 (64 lanes per SM) issues all of it
    assert fp32_issue_share(128, 8.6) == FFMA_ISSUE_SHARE == pytest.approx(512 / 552)
    assert fp32_issue_share(64, 7.0) == fp32_issue_share(64, 8.0) == 1.0
    assert fp32_issue_share(128, 6.1) == 1.0  # Pascal's partitions dispatch two instructions a clock
    assert fp32_issue_share(None, 8.6) == 1.0
    big = Kernel("gemm", "matmul", "forward", 2 * 8192**3, 3 * 4 * 8192**2, "fp32", (1, 8192, 8192, 8192))
    p = _params(fp32_gflops_per_w=1e6, gemm_fp32=1.0, gemm_k0=0.0)
    rtx = get_gpu("RTX-3090")
    t, _ = kernel_time_s(big, rtx, p, "fp32")
    assert t == pytest.approx(2 * 8192**3 / (35.6e12 * FFMA_ISSUE_SHARE) + p.values["kernel_s"])
    assert sustained_fp32_flops(35.6e12, FFMA_ISSUE_SHARE, 350, 8, 1395, 1695, 1e6, 1.0) == pytest.approx(
        35.6e12 * FFMA_ISSUE_SHARE
    )
    # power-limited: the clock falls until the issued FLOPs fit in the TDP (350 W x 50 GFLOP/W x (12/8))
    assert sustained_fp32_flops(35.6e12, FFMA_ISSUE_SHARE, 350, 8, 0, 0, 50.0, 1.0) == pytest.approx(350 * 75e9)


def test_fused_winograd_blocks_waves_and_filter_transform_by_hand():
    # cuDNN's fused F(2x2, 3x3) kernel: blocks of 32 output channels x 8 x 16 output pixels. 4 samples, 64 -> 100
    # channels on a 20 x 20 output: 4 x ceil(20 / 8) x ceil(20 / 16) = 24 pixel blocks x ceil(100 / 32) = 4
    # channel blocks = 96 thread blocks; on 40 SMs that is 3 waves, each block 2 x 16 x 32 x 32 x 64 FLOPs
    t4 = get_gpu("T4")
    peak, sm, bw = t4.fp32_tflops * 1e12, t4.sm_count, t4.mem_bw_gb_s * 1e9
    cin, cout, pix = 64, 100, 4 * 20 * 20
    t, comp = winograd_fused_s(24.0, cin, cout, pix * cin, pix * cout, peak, sm, 0.5, 0.0, math.inf, bw, 0.8, 0.0, 1.0)
    main = 3 * (2 * 16 * 32 * 32 * 64) / (peak * 0.5 / sm)
    filt = 4 * (9 + 16) * cin * cout / (bw * 0.8)
    assert bool(comp) and float(t) == pytest.approx(main + filt)
    # 33 output channels instead of 32 need a second channel block: 2 thread blocks, still one wave on 40 SMs, so
    # the same compute time; only the filter transform grows
    one = winograd_fused_s(1.0, cin, 32, 128 * cin, 128 * 32, peak, sm, 0.5, 0.0, math.inf, bw, 0.8, 0.0, 1.0)[0]
    two = winograd_fused_s(1.0, cin, 33, 128 * cin, 128 * 33, peak, sm, 0.5, 0.0, math.inf, bw, 0.8, 0.0, 1.0)[0]
    compute_one = 2 * 16 * 32 * 32 * 64 / (peak * 0.5 / sm)
    assert float(one) == pytest.approx(compute_one + 4 * 25 * cin * 32 / (bw * 0.8))
    assert float(two) == pytest.approx(compute_one + 4 * 25 * cin * 33 / (bw * 0.8))  # 2 blocks, still 1 wave
    # in the step model the fused kernel is a third candidate: with the other two made slow it sets the time
    geo = (3, 3, 1, 1, 1, 1, 20, 20)
    io = 4 * (pix * cin + cout * cin * 9 + pix * cout)
    k = Kernel("conv", "conv2d", "forward", 2 * pix * cout * cin * 9, io, "fp32", (1, pix, cout, cin * 9), conv=geo)
    p = _params(
        conv_fp32=0.01,
        winograd_fp32=0.01,
        winograd_fused_fp32=0.5,
        kernel_s=5e-6,
        gemm_k0=0.0,
        bw_eff=0.8,
        l2_gain=1.0,
        fp32_gflops_per_w=1e6,
    )
    t_step, bound = kernel_time_s(k, t4, p, "fp32")
    ref = winograd_fused_s(
        24.0, cin, cout, pix * cin, pix * cout, peak, sm, 0.5, 0.0, math.inf, bw, 0.8, t4.l2_mib * MIB, 1.0
    )[0]
    assert bound == "compute" and t_step == pytest.approx(float(ref) + 2 * 5e-6)


def test_fp32_3x3_convolution_is_the_faster_of_implicit_gemm_and_winograd():
    t4 = get_gpu("T4")
    p = _params(
        conv_fp32=0.7,
        winograd_fp32=0.7,
        winograd_transform=1.0,
        kernel_s=5e-6,
        gemm_k0=0.0,
        bw_eff=0.8,
        l2_gain=1.0,
        fp32_gflops_per_w=1e6,
    )  # no power cap: the peak decides
    # 32 samples, 256 -> 256 channels, 3x3 stride 1 on a 16 x 16 output: implicit GEMM M = 32 x 256, N = 256,
    # K = 256 x 9; Winograd F(4x4, 3x3): 32 x 4 x 4 = 512 tiles, 36 GEMMs of 512 x 256 over 256
    m, cin, cout = 32 * 256, 256, 256
    geo = (3, 3, 1, 1, 1, 1, 16, 16)
    io = 4 * (m * cin + cout * cin * 9 + m * cout)
    k = Kernel("conv", "conv2d", "forward", 2 * m * cout * cin * 9, io, "fp32", (1, m, cout, cin * 9), conv=geo)
    peak, sm, bw, l2 = t4.fp32_tflops * 1e12, t4.sm_count, t4.mem_bw_gb_s * 1e9, t4.l2_mib * MIB
    h0 = p.values["tile_h0"]
    implicit = (
        max(gemm_compute_s(1, m, cout, cin * 9, peak, sm, 0.7, 0.0, h0), float(memory_s(io, bw, 0.8, l2, 1.0))) + 5e-6
    )
    # the 36 GEMMs are a batched SGEMM: Turing runs Volta's family, 64 x 64 tiles (the shipped table)
    bt = batched_sgemm_tile(t4.architecture, batched_sgemm_tiles())
    assert bt == (64.0, 64.0)
    wino, _ = winograd_s(
        512.0, cin, cout, m * cin, m * cout, peak, sm, 0.7, 0.0, h0, math.inf, bw, 0.8, l2, 1.0, 1.0, bt
    )
    # by hand: the 36 GEMMs (or their operands' bytes), then the input transform (read x, write 36 x tiles x cin),
    # the output transform (read 36 x tiles x cout, write y) and the filter's (read 9, write 36 per channel pair)
    gemm36 = max(
        gemm_compute_s(36, 512, cout, cin, peak, sm, 0.7, 0.0, h0, math.inf, bt),
        float(memory_s(4 * 36 * (512 * cin + cin * cout + 512 * cout), bw, 0.8, l2, 1.0)),
    )
    passes = [m * cin + 36 * 512 * cin, 36 * 512 * cout + m * cout, 45 * cin * cout]
    assert float(wino) == pytest.approx(gemm36 + sum(float(memory_s(4 * b, bw, 0.8, l2, 1.0)) for b in passes))
    t, _ = kernel_time_s(k, t4, p, "fp32")
    assert float(wino) + 4 * 5e-6 < implicit  # 4x fewer multiplies win at this size
    assert t == pytest.approx(float(wino) + 4 * 5e-6)
    # a strided convolution is implicit GEMM only
    strided = Kernel("conv", "conv2d", "forward", k.flops, io, "fp32", k.gemm, conv=(3, 3, 2, 2, 1, 1, 16, 16))
    assert kernel_time_s(strided, t4, p, "fp32")[0] == pytest.approx(implicit)
    # the data gradient is a convolution of C_out -> C_in channels: the same Winograd time at C_in == C_out
    dgrad = Kernel("conv", "conv2d.dgrad", "backward", k.flops, io, "fp32", (1, m, cin * 9, cout), conv=geo)
    assert kernel_time_s(dgrad, t4, p, "fp32")[0] == pytest.approx(t)
    # a 1x1 convolution is a GEMM: it takes gemm_fp32, not conv_fp32
    one = Kernel(
        "conv",
        "conv2d",
        "forward",
        2 * m * cout * cin,
        4 * (2 * m * cin + cin * cout),
        "fp32",
        (1, m, cout, cin),
        conv=(1, 1, 1, 1, 1, 1, 16, 16),
    )
    assert kernel_time_s(one, t4, _params(gemm_fp32=0.5, conv_fp32=1.0), "fp32")[0] == pytest.approx(
        kernel_time_s(replace(one, cls="gemm", conv=None), t4, _params(gemm_fp32=0.5), "fp32")[0]
    )


def test_dataparallel_overlap():
    # all the buckets shorter than the backward: only the last (1 MiB) bucket's all-reduce is exposed
    ar = BucketedCollective(0.01, 0.0002, 5, "nvlink", "ring Simple")
    assert dp_exposed_allreduce_s(ar, 0.05) == 0.0002
    assert dp_exposed_allreduce_s(replace(ar, seconds=0.08), 0.05) == pytest.approx(0.03)  # outlasts the backward
    assert dp_exposed_allreduce_s(BucketedCollective(0.0, 0.0, 0, "nvlink", "none"), 0.05) == 0.0


def test_analytic_transformer_trace_matches_the_recorded_one():
    ref = resolve_model("bert-base", {"num_layers": 2, "vocab_size": 1000})
    m = ref.factory()
    m.train()
    s = 32
    rec = record_trace(m, [paddle.randint(0, 1000, [1, s])], [paddle.randint(0, 1000, [2, s])])
    ana = transformer_trace(ref.transformer, s)
    for b in (1, 8):
        gemm_r = sorted((o.gemm, o.flops) for o in rec.at(b) if o.cls == "gemm")
        gemm_a = sorted((o.gemm, o.flops) for o in ana.at(b) if o.cls == "gemm")
        assert gemm_r == gemm_a
    for cls in ("softmax", "norm", "embedding"):
        assert len([o for o in rec.ops1 if o.cls == cls]) == len([o for o in ana.ops1 if o.cls == cls])
    p = load_perf_params()
    n = ref.transformer.params
    t_rec = estimate_step(rec.at(16), "fp16-o1", A100, "adamw", n, 40, p).device_s
    t_ana = estimate_step(ana.at(16), "fp16-o1", A100, "adamw", n, 40, p).device_s
    assert t_ana == pytest.approx(t_rec, rel=0.1)


def test_trace_scales_linearly_and_round_trips():
    t = _trace(nn.Sequential(nn.Conv2D(3, 4, 3), nn.BatchNorm2D(4), nn.ReLU()), (3, 10, 10))
    assert t.aligned
    conv = next(o for o in t.at(7) if o.cls == "conv")
    assert conv.gemm == (1, 7 * 64, 4, 27) and conv.outputs[0].numel == 7 * 4 * 64
    again = OpTrace.from_dict(json.loads(json.dumps(t.to_dict())))
    assert again.at(7) == t.at(7)


def test_param_file_loads_and_bad_values_name_the_key():
    p = load_perf_params()
    assert p.calibration == "published-fit" and set(p.values) >= {"gemm_half", "bw_eff", "kernel_s"}
    assert p.provenance["fitted_by"] == "bench/gpu_fit.py" and p.provenance["rows"]
    doc = {"values": dict(p.values)}
    for key, bad, needle in (
        ("bw_eff", 1.5, "outside"),
        ("kernel_s", "x", "expected a finite number"),
        ("gemm_half", float("nan"), "expected a finite number"),
    ):
        with pytest.raises(CatalogError, match=rf"`{key}`.*{needle}"):
            parse_perf_params({"values": dict(doc["values"], **{key: bad})}, "f.json")
    with pytest.raises(CatalogError, match=r"`bw_eff`.*outside \[0.001, 1\]"):
        parse_perf_params({"values": dict(doc["values"], bw_eff=5e-324)}, "f.json")
    with pytest.raises(CatalogError, match=r"`gemm_tf32`.*expected a finite number"):
        parse_perf_params({"values": dict(doc["values"], gemm_tf32=int("9" * 400))}, "f.json")
    for key, bad in (("by_generation", [1]), ("provenance", "abc"), ("provenance", 5)):
        with pytest.raises(CatalogError, match=f"key `{key}`: expected an object"):
            parse_perf_params({"values": doc["values"], key: bad}, "f.json")
    with pytest.raises(CatalogError, match="missing"):
        parse_perf_params({"values": {"bw_eff": 0.5}}, "f.json")
    with pytest.raises(CatalogError, match=r"by_generation\.volta"):
        parse_perf_params({"values": doc["values"], "by_generation": {"volta": {"nope": 1}}}, "f.json")


def test_memory_bound_models_differ_from_gemm_bound_ones():
    """MobileNetV2-class (depthwise) steps are memory-bound; BERT-class steps are GEMM-bound."""
    p = load_perf_params()
    mb = resolve_model("mobilenet_v2").factory()
    tm = _trace(mb, (3, 64, 64))
    n = sum(math.prod(q.shape) for q in mb.parameters())
    est = estimate_step(tm.at(64), "fp16-o1", A100, "momentum", n, len(mb.parameters()), p)
    mem = sum(v["seconds"] for v in est.by_class.values() if v["bound"] == "memory")
    assert mem / est.device_s > 0.5
    assert est.by_class["dwconv"]["seconds"] > 0


def _has_cuda() -> bool:
    return paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0


@pytest.mark.gpu
@pytest.mark.skipif(not _has_cuda(), reason="needs a CUDA GPU and paddlepaddle-gpu")
def test_calibrate_times_kernels_on_this_gpu():
    """On a GPU: the kernel timings give parameters in range, and a plan with them says `calibration: device`."""
    from paddlefit.calibrate.measure import current_device, time_kernels
    from paddlefit.catalog.device_name import match_gpu
    from paddlefit.plan.calibration import parse_calibration

    gpu = match_gpu(current_device()[1], load_gpus())
    perf = time_kernels(gpu, reps=5)
    p = parse_perf_params(dict(perf, calibration="device"), "measured")
    assert 0.05 < p.values["bw_eff"] <= 1 and 0.05 < p.values["gemm_half"] <= 1 and p.values["kernel_s"] < 1e-3
    cal = parse_calibration(
        {
            "device": gpu.name,
            "rows": [
                {
                    "model": "lenet",
                    "batch_size": 8,
                    "precision": "fp32",
                    "peak_bytes": 1e6,
                    "predicted_peak_bytes": 1e6,
                    "step_time_s": 0.01,
                    "train_flops_per_sample": 1e6,
                }
            ],
            "perf_params": perf,
        },
        "measured",
    )
    assert cal.perf_params is not None and cal.perf_params.calibration == "device"


@pytest.mark.slow
def test_gpu_fit_reproduces_the_shipped_parameters_and_the_trace_cache_is_current():
    """`bench/gpu_fit.py` refits the shipped parameters from the published rows (within 2%), and the cached
    ResNet-50 trace it fits on is what the tracer records today."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import gpu_fit

    traces = gpu_fit.load_traces()
    fresh = gpu_fit.trace_workload(gpu_fit.WORKLOADS["resnet50"])
    assert fresh["trace"] == traces["resnet50"]["trace"]
    assert fresh["trainable_params"] == traces["resnet50"]["trainable_params"] == 25_557_032
    cases, skipped = gpu_fit.build_cases(gpu_fit.load_rows(), traces)
    assert len(cases) + len(skipped) == 73
    refit = gpu_fit.fit(cases)
    shipped = load_perf_params()
    for k, v in shipped.values.items():
        assert refit.values[k] == pytest.approx(v, rel=0.02), k
    assert refit.by_generation.keys() == shipped.by_generation.keys()
    assert shipped.provenance["rows"] == [c.row["id"] for c in cases]
    ratios = [gpu_fit.predict(c, shipped) / c.measured_per_gpu for c in cases]
    assert gpu_fit.stats(ratios)["median_abs_error"] == pytest.approx(
        shipped.provenance["summary"]["median_abs_error"], abs=1e-3
    )


def test_kernel_timing_path_runs_here_and_gives_a_valid_parameter_file():
    """The calibrate kernel-timing code on this CPU (tiny shapes, no device sync, no fp16 kernels): the values
    it writes validate, and a kernel the model times as memory-bound does not move a compute parameter."""
    from paddlefit.calibrate.measure import time_kernels
    from paddlefit.estimate.perf_params import PARAM_RANGE

    d = time_kernels(get_gpu("T4"), reps=2, sizes=(256, 2, 32, 16, 1 << 20), sync=lambda: None, half=False)
    p = parse_perf_params(dict(d, calibration="device"), "cpu-run")
    fit = load_perf_params()
    ratios = d["provenance"]["ratios_predicted_over_measured"]
    for key, r in ratios.items():
        if r is None:
            assert p.values[key] == pytest.approx(fit.get(key, "turing"))
        else:
            # scaled by the ratio and held in the key's range, both ends (a loaded CPU times the tiny kernels
            # slowly enough to reach the floor, 1e-3)
            lo, hi = PARAM_RANGE[key]
            assert p.values[key] == pytest.approx(min(hi, max(lo, fit.get(key, "turing") * r)))
    assert p.values["kernel_s"] == d["provenance"]["measured"]["add_1_s"]


def test_a_tensor_kept_in_fp32_and_its_fp16_copy_are_both_counted():
    """O1: softmax (black list) keeps its fp32 output for its grad; the matmul after it (white list) keeps the fp16
    cast copy of that output: both are alive until the backward."""

    class Attn(nn.Layer):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(8, 8, bias_attr=False)

        def forward(self, x):
            q = self.q(x)  # (b, 4, 8)
            p = paddle.nn.functional.softmax(paddle.matmul(q, q, transpose_y=True), axis=-1)  # (b, 4, 4)
            return paddle.matmul(p, q)

    t = _trace(Attn(), (4, 8))
    acts, _ = saved_activation_bytes(t.at(2), "fp16-o1")
    x, q, s = 2 * 4 * 8, 2 * 4 * 8, 2 * 4 * 4
    # linear keeps x (fp16 copy); q.qT keeps q (fp16); softmax keeps its fp32 output; p.q keeps p's fp16 copy
    assert acts == 2 * x + 2 * q + 4 * s + 2 * s


def test_a_calibration_of_an_earlier_release_keeps_its_measurements():
    """A ``perf_params`` written before the kernel model's shape keys existed takes them from the shipped fit (which
    is what ``calibrate`` copies for them) and keeps what it measured."""
    from paddlefit.estimate.perf_params import DEVICE_MEASURED_KEYS, HOST_KEYS, SHIPPED_ONLY_KEYS
    from paddlefit.plan.calibration import parse_calibration

    shipped = load_perf_params()
    old = {k: v for k, v in shipped.values.items() if k in DEVICE_MEASURED_KEYS and not k.startswith("host_")}
    old["bw_eff"] = 0.5
    doc = {
        "device": "T4",
        "rows": [
            {
                "model": "lenet",
                "batch_size": 8,
                "precision": "fp32",
                "peak_bytes": 2_000_000,
                "predicted_peak_bytes": 1_000_000,
                "step_time_s": 0.01,
                "train_flops_per_sample": 2.0e6,
                "peak_flops": 8.1e12,
                "efficiency_class": "fp32",
            }
        ],
        "perf_params": {"values": old},
    }
    cal = parse_calibration(doc, "old.json")
    assert cal.perf_params.values["bw_eff"] == 0.5 and cal.perf_params.calibration == "device"
    for k in (*SHIPPED_ONLY_KEYS, *HOST_KEYS):
        assert cal.perf_params.values[k] == shipped.values[k]


def test_tensorrt_runs_a_grouped_convolution_one_group_at_a_time_and_winograd_as_one_kernel():
    """Under TensorRT a grouped 3x3 convolution (64 groups of 4 channels, ResNeXt's 64x4d stage 1) takes at least
    64 x kernel_s at batch 1, where one batched kernel is faster than that; at batch 64 its own time hides the
    launches. A Winograd convolution pays one per-kernel cost instead of cuDNN's four."""
    from paddlefit.estimate.gpu_model import compile_step, group_launches

    gpu, params = get_gpu("V100-SXM2-16GB"), load_perf_params()
    kernel_s = params.get("kernel_s", gpu.architecture)

    def grouped(batch: int) -> Kernel:
        m, n, k = batch * 56 * 56, 4, 4 * 9
        conv = (3, 3, 1, 1, 1, 1, 56, 56)
        return Kernel(
            "conv",
            "conv2d",
            "forward",
            2 * 64 * m * n * k,
            4 * (2 * 64 * m * 4 + 64 * n * k),
            "fp32",
            (64, m, n, k),
            conv=conv,
        )

    assert group_launches(grouped(1)) == 64 and group_launches(replace(grouped(1), unit="dwconv")) == 1
    one, trt = (compile_step([grouped(1)], gpu, "fp32", t).times(params)[0][0] for t in (False, True))
    assert one < 64 * kernel_s and trt == pytest.approx(64 * kernel_s, rel=1e-12)
    big, big_trt = (compile_step([grouped(64)], gpu, "fp32", t).times(params)[0][0] for t in (False, True))
    assert big > 64 * kernel_s and big_trt == big
    dense = Kernel(
        "conv",
        "conv2d",
        "forward",
        2 * 3136 * 64 * 576,
        4 * 3136 * 128,
        "fp32",
        (1, 3136, 64, 576),
        conv=(3, 3, 1, 1, 1, 1, 56, 56),
    )
    cudnn, tensorrt = (compile_step([dense], gpu, "fp32", t) for t in (False, True))
    assert (cudnn.winograd_kernels, tensorrt.winograd_kernels) == ((4, 2), (1, 1))
    assert tensorrt.times(params)[0][0] <= cudnn.times(params)[0][0]
