import paddle
import pytest
from paddle import nn

from paddlefit.estimate.analytic import analytic_transformer_flops
from paddlefit.estimate.timing import RESNET50_TRAIN_FLOPS_PER_IMAGE
from paddlefit.models import resolve_model
from paddlefit.probe.flops import count_flops


def test_linear_exact_forward_and_backward():
    model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 3))
    x = paddle.randn([4, 10])  # stop_gradient=True: first layer gets no dX
    c = count_flops(model, [x])
    fwd = 4 * (2 * 10 * 20 + 20) + 4 * 20 + 4 * (2 * 20 * 3 + 3)
    bwd = 4 * (2 * 10 * 20 + 20) + 4 * 20 + 4 * (2 * 2 * 20 * 3 + 3)
    assert (c.forward_flops, c.backward_flops) == (fwd, bwd)
    assert c.forward_flops_per_sample == fwd / 4


def test_functional_matmul_softmax_and_reused_layer_counted():
    orig = paddle.matmul

    class M(nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8, bias_attr=False)

        def forward(self, x):
            h = self.fc(self.fc(x))  # reused layer: counted twice
            s = paddle.nn.functional.softmax(paddle.matmul(h, h, transpose_y=True))  # (b, 5, 5)
            return s @ h

    c = count_flops(M(), [paddle.randn([2, 5, 8])])
    fc = 2 * 2 * 5 * 8 * 8
    expected = 2 * fc + 2 * 2 * 5 * 5 * 8 + 3 * 2 * 5 * 5 + 2 * 2 * 5 * 5 * 8
    assert c.forward_flops == expected
    assert c.forward_by_op["matmul"] == 2 * (2 * 2 * 5 * 5 * 8)
    # patches are removed afterwards
    assert paddle.matmul is orig


def test_functional_linear_with_a_vector_weight():
    """F.linear(x, w) with a 1-D weight (K,) is a matrix-vector product (PaddleDetection's GFL `Integral` projects
    box distributions onto 0..reg_max this way): 2 * M * K FLOPs, no crash reading the weight's second axis."""

    class Project(nn.Layer):
        def __init__(self):
            super().__init__()
            self.register_buffer("project", paddle.linspace(0, 7, 8))

        def forward(self, x):
            return paddle.nn.functional.linear(paddle.nn.functional.softmax(x.reshape([-1, 8]), axis=1), self.project)

    x = paddle.randn([2, 6, 8])
    c = count_flops(Project(), [x])
    assert c.forward_by_op["linear"] == 2 * 12 * 8


def test_conv_exact():
    conv = nn.Conv2D(3, 8, 3, padding=1, groups=1)
    c = count_flops(conv, [paddle.randn([1, 3, 16, 16])])
    assert c.forward_flops == 2 * (16 * 16 * 8) * 3 * 9 + 16 * 16 * 8
    assert c.backward_flops == 2 * (16 * 16 * 8) * 3 * 9 + 16 * 16 * 8  # dW + bias, no dX


def test_resnet50_matches_published_count_within_1pct():
    ref = resolve_model("resnet50")
    m = ref.factory()
    m.train()
    c = count_flops(m, [paddle.randn([1, 3, 224, 224])])
    assert c.forward_flops == pytest.approx(2 * 4_111_514_624, rel=0.01)
    # training = 3 forwards (the backward's dX and dW each cost the forward's FLOPs; Kaplan et al. 2020, sec. 2.1)
    # less the stem convolution's dX (the image needs no gradient): 2 * 112*112*64 * 3*7*7 FLOPs
    stem_dx = 2 * 112 * 112 * 64 * 3 * 7 * 7
    assert c.forward_flops + c.backward_flops == pytest.approx(3 * 2 * 4_111_514_624 - stem_dx, rel=0.002)
    # the constant timing.py derives its efficiencies from is this count
    assert c.forward_flops + c.backward_flops == RESNET50_TRAIN_FLOPS_PER_IMAGE


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert-base", "gpt2-small"])
def test_transformer_matches_korthikanti_closed_form_within_2pct(name):
    ref = resolve_model(name)
    cfg = ref.transformer
    m = ref.factory()
    m.train()
    s = 128
    c = count_flops(m, [paddle.randint(0, cfg.vocab_size, [1, s])])
    b, layers, h, v = 1, cfg.num_layers, cfg.hidden_size, cfg.vocab_size
    closed_train = 72 * b * s * layers * h * h * (1 + s / (6 * h) + v / (12 * h * layers))
    assert c.train_flops_per_sample == pytest.approx(closed_train, rel=0.02)
    assert c.forward_flops == pytest.approx(analytic_transformer_flops(cfg, s), rel=0.02)
    assert sum(p.numel().item() for p in m.parameters()) == cfg.params


def test_one_table_of_per_element_flops_feeds_the_counter_and_the_program_reader():
    """Paddle's flops.py figures (gelu 5, softmax 3, layer_norm with epsilon 8, relu 1), batch norm 4
    (hapi count_bn), swiglu = sigmoid + 2 multiplies; the program reader's table is the same numbers."""
    from paddlefit.estimate.element_flops import ELEMENT_FLOPS, per_element
    from paddlefit.probe.program_trace import _PER_ELEMENT

    assert [per_element(o) for o in ("gelu", "softmax", "layer_norm", "relu", "batch_norm", "swiglu", "geglu")] == [
        5,
        3,
        8,
        1,
        4,
        3,
        6,
    ]
    assert all(_PER_ELEMENT[op][:2] == v for op, v in ELEMENT_FLOPS.items())
    x = paddle.randn([4, 6])
    x.stop_gradient = False
    c = count_flops(nn.Sequential(nn.LayerNorm(6), nn.GELU()), [x])
    assert c.forward_flops == (8 + 5) * 24


def test_unfold_is_traced_as_the_im2col_it_writes():
    """``F.unfold`` (RedNet's involution) writes kernel_h x kernel_w x its input: a memory-bound op in the trace,
    not an invisible one (its output only appeared as the input of the multiply that reads it)."""
    from paddlefit.probe.recorder import record_trace

    class Im2col(nn.Layer):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2D(4, 4, 1)

        def forward(self, x):
            return paddle.nn.functional.unfold(self.conv(x), 7, 1, 3, 1).sum()

    trace = record_trace(Im2col(), [paddle.rand([2, 4, 8, 8])])
    (op,) = [o for o in trace.ops1 if o.op == "unfold"]
    assert op.cls == "move" and op.flops == 0
    assert [t.numel for t in op.outputs] == [2 * 4 * 49 * 8 * 8] and op.inputs[0].numel == 2 * 4 * 8 * 8
