"""trace_program: an exported program (paddle.jit.save) traced into the same OpTrace as the dygraph recorder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import paddle
import pytest
from paddle import nn

from paddlefit.errors import ModelError
from paddlefit.estimate.optrace import OpTrace, TracedOp
from paddlefit.jobspec.inputs import InputSpec
from paddlefit.probe.program_trace import trace_program
from paddlefit.probe.recorder import record_trace

GEMM = ("gemm", "conv", "dwconv")


class SmallCNN(nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2D(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2D(8)
        self.act = nn.ReLU()
        self.dw = nn.Conv2D(8, 8, 3, padding=1, stride=2, groups=8)
        self.pool = nn.MaxPool2D(2)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = self.pool(self.dw(self.act(self.bn(self.conv(x)))))
        return self.fc(paddle.flatten(x, 1))


class SmallEncoder(nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(100, 32)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64), 2)
        self.head = nn.Linear(32, 5)

    def forward(self, ids):
        return self.head(self.enc(self.emb(ids)))


def _image(b: int) -> list:
    return [paddle.randn([b, 3, 16, 16])]


def _ids(b: int) -> list:
    return [paddle.randint(0, 100, [b, 12])]


CASES = {"cnn": (SmallCNN, [None, 3, 16, 16], "float32", _image), "encoder": (SmallEncoder, [None, 12], "int64", _ids)}


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict:
    """Each model in eval mode, saved by paddle.jit.save, with its dygraph trace at batch 1 and 4."""
    paddle.seed(0)
    out = {}
    for name, (cls, shape, dtype, make) in CASES.items():
        model = cls()
        model.eval()
        prefix = tmp_path_factory.mktemp(name) / "model"
        paddle.jit.save(model, str(prefix), input_spec=[paddle.static.InputSpec(shape, dtype, "x")])
        with paddle.no_grad():
            dy = record_trace(model, make(1), make(4))
        out[name] = (model, prefix, dy)
    return out


def _gemm_flops(ops: list[TracedOp]) -> int:
    return sum(o.flops for o in ops if o.cls in GEMM)


def _gemm_shapes(ops: list[TracedOp]) -> Counter:
    return Counter((o.cls, o.gemm) for o in ops if o.cls in GEMM)


def _compare(pt_trace: OpTrace, dy: OpTrace) -> None:
    for mine, ref in ((pt_trace.ops1, dy.ops1), (pt_trace.ops2, dy.ops2), (pt_trace.at(8), dy.at(8))):
        assert _gemm_flops(mine) == _gemm_flops(ref)
        assert _gemm_shapes(mine) == _gemm_shapes(ref)


@pytest.mark.parametrize("name", list(CASES))
def test_program_trace_matches_dygraph(exported, name):
    model, prefix, dy = exported[name]
    pt = trace_program(prefix, 1, 4)
    assert paddle.in_dynamic_mode()  # the loader's static mode is undone
    assert pt.trace.source == "program" and (pt.trace.batch1, pt.trace.batch2) == (1, 4) and pt.trace.aligned
    _compare(pt.trace, dy)
    n = sum(int(p.numel()) for p in model.parameters())
    assert pt.params == n and pt.param_bytes == 4 * n
    assert pt.unmapped == {}
    _, shape, dtype, _ = CASES[name]
    assert pt.inputs == [InputSpec(dtype=dtype, shape=tuple(shape[1:]), name="x")]
    ops = pt.trace.ops1
    assert all(not t.grad for o in ops for t in (*o.inputs, *o.outputs))
    assert all(t.param for o in ops if o.cls in ("conv", "dwconv") for t in o.inputs[1:])
    # one tid per value: the encoder's Q, K and V projections read the same embedding output
    if name == "encoder":
        reads = Counter(o.inputs[0].tid for o in ops if o.op == "linear")
        assert max(reads.values()) == 3
    # element-wise ops: printed, compared loosely (the dygraph recorder names `q * s` multiply, as the program's
    # scale is traced; it misses the encoder FFN's ReLU, which nn.TransformerEncoderLayer binds before the hooks)
    mine = Counter(o.op for o in ops if o.cls == "elementwise")
    ref = Counter(o.op for o in dy.ops1 if o.cls == "elementwise")
    print(name, "program:", dict(mine), "dygraph:", dict(ref))
    assert sum(mine.values()) >= sum(ref.values())
    assert all(mine[k] >= v for k, v in ref.items())


def test_dynamic_sequence_needs_and_takes_shapes(exported, tmp_path):
    """An export with a dynamic sequence length: refused without `shapes`, the same trace with them."""
    model, prefix, dy = exported["encoder"]
    dyn = tmp_path / "model"
    paddle.jit.save(model, str(dyn), input_spec=[paddle.static.InputSpec([None, None], "int64", "ids")])
    with pytest.raises(ModelError, match="shapes"):
        trace_program(dyn, 1, 4)
    pt = trace_program(dyn, 1, 4, shapes={"ids": [12]})
    _compare(pt.trace, dy)
    fixed = trace_program(prefix, 1, 4)
    assert [(o.op, o.outputs[0].numel) for o in pt.trace.ops2] == [(o.op, o.outputs[0].numel) for o in fixed.trace.ops2]


def test_legacy_pdmodel(exported, tmp_path):
    """A legacy ProgramDesc export (model.pdmodel, written with FLAGS_enable_pir_api=0) traces the same."""
    model, _, dy = exported["cnn"]
    paddle.save(model.state_dict(), str(tmp_path / "w.pdparams"))
    script = (
        "import sys, paddle; sys.path.insert(0, sys.argv[1]); from test_program_trace import SmallCNN\n"
        "m = SmallCNN(); m.set_state_dict(paddle.load(sys.argv[2])); m.eval()\n"
        "paddle.jit.save(m, sys.argv[3], input_spec=[paddle.static.InputSpec([None, 3, 16, 16], 'float32', "
        "'x')])\n"
    )
    env = {**os.environ, "FLAGS_enable_pir_api": "0"}
    subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            str(Path(__file__).parent),
            str(tmp_path / "w.pdparams"),
            str(tmp_path / "legacy" / "model"),
        ],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert (tmp_path / "legacy" / "model.pdmodel").is_file()
    pt = trace_program(tmp_path / "legacy" / "model", 1, 4)
    _compare(pt.trace, dy)
    assert pt.params == sum(int(p.numel()) for p in model.parameters()) and pt.unmapped == {}
    assert paddle.in_dynamic_mode()


def test_missing_or_broken_file_is_a_model_error(tmp_path):
    with pytest.raises(ModelError, match=re.escape(str(tmp_path / "nope"))):
        trace_program(tmp_path / "nope")
    (tmp_path / "bad.json").write_text("not a program")
    with pytest.raises(ModelError, match="Cannot load"):
        trace_program(tmp_path / "bad.json")
    with pytest.raises(ModelError, match="batch"):
        trace_program(tmp_path / "nope", 2, 2)
    assert paddle.in_dynamic_mode()
