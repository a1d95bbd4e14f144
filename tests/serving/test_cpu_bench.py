"""paddlefit.serving.cpu_bench: an exported model served with Paddle Inference (oneDNN) on this CPU, in a child
process; and `paddlefit export --benchmark`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from trainrun import ENV, SharedRun, run

from paddlefit.errors import InputSpecError, JobFailedError, PaddlefitError
from paddlefit.jobspec.inputs import parse_input_spec, parse_input_specs
from paddlefit.serving.cpu_bench import CpuLatency, benchmark_cpu, predict_cpu
from paddlefit.serving.program import model_files, random_inputs, save_inference_model
from paddlefit.units import GIB, MIB

SPECS = [parse_input_spec("float32[3,16,16]")]


def conv_net():
    import paddle

    class ConvNet(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.conv = paddle.nn.Conv2D(3, 8, 3, padding=1)
            self.bn = paddle.nn.BatchNorm2D(8)
            self.fc = paddle.nn.Linear(8 * 16 * 16, 10)

        def forward(self, x):
            return self.fc(paddle.flatten(paddle.nn.functional.relu(self.bn(self.conv(x))), 1))

    paddle.seed(7)
    return ConvNet()


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path]:
    """(the eval-mode dygraph model, the prefix it was saved to)."""
    prefix = tmp_path_factory.mktemp("cpu_bench") / "model"
    model = conv_net()
    files = save_inference_model(model, SPECS, prefix)
    assert files == ["model.json", "model.pdiparams"]  # PIR, Paddle 3's default
    return model, prefix


def dygraph(model: object, arrays: list[np.ndarray], names: list[str | None] | None = None) -> np.ndarray:
    import paddle

    names = names or [None] * len(arrays)
    args = [paddle.to_tensor(a) for a, n in zip(arrays, names, strict=True) if n is None]
    kwargs = {n: paddle.to_tensor(a) for a, n in zip(arrays, names, strict=True) if n is not None}
    with paddle.no_grad():
        return model(*args, **kwargs).numpy()  # type: ignore[operator]


def test_benchmark_measures_each_batch_size_in_one_serving_process(saved: tuple[object, Path]) -> None:
    _, prefix = saved
    lines: list[str] = []
    rows = benchmark_cpu(prefix, SPECS, [4, 1, 4], [1], warmup=3, runs=12, max_seconds=5, progress=lines.append)
    assert [(r.batch_size, r.threads) for r in rows] == [(1, 1), (4, 1)]  # deduplicated, ascending
    params_bytes = prefix.with_name("model.pdiparams").stat().st_size
    for r in rows:
        assert 0 < r.median_s <= r.p95_s < 5
        assert 5 <= r.runs <= 12
        assert r.peak_rss_bytes > params_bytes
        assert r.samples_per_s == pytest.approx(r.batch_size / r.median_s)
        assert set(r.to_dict()) == {
            "batch_size",
            "threads",
            "median_s",
            "p95_s",
            "runs",
            "peak_rss_bytes",
            "samples_per_s",
        }
    # one process: the peak after batch 4 includes the one after batch 1; Paddle itself is > 100 MiB, yet not the
    # parent's memory (pytest with Paddle imported), which ru_maxrss would report after execve
    assert rows[0].peak_rss_bytes <= rows[1].peak_rss_bytes
    assert 100 * MIB < rows[0].peak_rss_bytes < 4 * GIB
    assert len(lines) == 2 and lines[0].startswith("batch 1, 1 thread(s): median ")
    assert CpuLatency(**{k: v for k, v in rows[0].to_dict().items() if k != "samples_per_s"}) == rows[0]


def test_paddle_inference_outputs_equal_the_dygraph_models(saved: tuple[object, Path]) -> None:
    model, prefix = saved
    x = random_inputs(SPECS, 3, seed=11)
    (got,) = predict_cpu(prefix, SPECS, x)
    np.testing.assert_allclose(got, dygraph(model, x), rtol=1e-5, atol=1e-5)
    assert predict_cpu(prefix.parent, SPECS, x)[0].shape == (3, 10)  # a directory means DIR/model


def test_keyword_int_inputs_and_the_legacy_pdmodel_format(tmp_path: Path) -> None:
    """A forward taking a keyword id input is wrapped as `export` wraps it; the legacy ProgramDesc
    (FLAGS_enable_pir_api=0: model.pdmodel + model.pdiparams.info) is served too."""
    import paddle

    class Tagger(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.emb = paddle.nn.Embedding(50, 4)
            self.fc = paddle.nn.Linear(4, 3)

        def forward(self, x, token_ids=None):
            return self.fc(self.emb(token_ids)).mean(axis=1) + x

    specs = parse_input_specs(["float32[3]", "token_ids=int64[6]:50"])
    model = Tagger()
    assert save_inference_model(model, specs, tmp_path / "kw" / "model") == ["model.json", "model.pdiparams"]
    xs = random_inputs(specs, 2, seed=3)
    assert xs[1].dtype == np.int64 and xs[1].min() >= 0 and xs[1].max() < 50
    (got,) = predict_cpu(tmp_path / "kw" / "model", specs, xs)
    np.testing.assert_allclose(got, dygraph(model, xs, [None, "token_ids"]), rtol=1e-5, atol=1e-5)

    code = (
        "import sys, paddle; sys.path.insert(0, sys.argv[2]); from test_cpu_bench import SPECS, conv_net; "
        "from paddlefit.serving.program import save_inference_model; "
        "print(','.join(save_inference_model(conv_net(), SPECS, __import__('pathlib').Path(sys.argv[1]))))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "legacy" / "model"), str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(ENV, FLAGS_enable_pir_api="0"),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split()[-1] == "model.pdiparams,model.pdiparams.info,model.pdmodel"
    assert model_files(tmp_path / "legacy" / "model")[0].name == "model.pdmodel"
    x = random_inputs(SPECS, 2, seed=5)
    (got,) = predict_cpu(tmp_path / "legacy" / "model", SPECS, x)
    np.testing.assert_allclose(got, dygraph(conv_net().eval(), x), rtol=1e-5, atol=1e-5)  # same seed, same weights
    (row,) = benchmark_cpu(tmp_path / "legacy", SPECS, [2], [1], warmup=1, runs=5, max_seconds=2)
    assert row.runs >= 5 and row.median_s <= row.p95_s


def test_bad_arguments_name_the_option_and_the_missing_file(saved: tuple[object, Path], tmp_path: Path) -> None:
    _, prefix = saved
    with pytest.raises(PaddlefitError, match="`--batch-size 0`: give batch sizes from 1"):
        benchmark_cpu(prefix, SPECS, [0], [1])
    with pytest.raises(PaddlefitError, match="`--batch-size none`: give batch sizes from 1"):
        benchmark_cpu(prefix, SPECS, [], [1])
    for threads in (0, (os.cpu_count() or 1) + 1):
        with pytest.raises(PaddlefitError, match=rf"`--threads {threads}`: .*from 1 to {os.cpu_count()}"):
            benchmark_cpu(prefix, SPECS, [1], [threads])
    with pytest.raises(PaddlefitError, match="runs >= 5"):
        benchmark_cpu(prefix, SPECS, [1], [1], runs=2)
    with pytest.raises(
        PaddlefitError,
        match=r"nope/model` is not a saved inference model: model.json \(or "
        r"\.pdmodel\) and model.pdiparams missing",
    ):
        benchmark_cpu(tmp_path / "nope" / "model", SPECS, [1], [1])
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "model.json").write_text("{}")
    with pytest.raises(PaddlefitError, match=r"model.pdiparams missing in .*half"):
        benchmark_cpu(tmp_path / "half" / "model", SPECS, [1], [1])
    with pytest.raises(InputSpecError, match="bfloat16"):
        benchmark_cpu(prefix, [parse_input_spec("bfloat16[4]")], [1], [1])
    # specs that do not match the model: reported by the child, raised as InputSpecError
    with pytest.raises(InputSpecError, match=r"the model has 1 input\(s\) \['input_0'\], the input specs give 2"):
        benchmark_cpu(prefix, [*SPECS, parse_input_spec("y=float32[2]")], [1], [1], warmup=0, runs=5)


def test_a_crash_in_paddle_inference_names_the_model_and_its_stderr(saved: tuple[object, Path], tmp_path: Path) -> None:
    _, prefix = saved
    bad = tmp_path / "model"
    bad.with_name("model.json").write_text('{"not": "a program"}')
    bad.with_name("model.pdiparams").write_bytes(prefix.with_name("model.pdiparams").read_bytes())
    with pytest.raises(JobFailedError) as err:
        benchmark_cpu(bad, SPECS, [1], [1], warmup=0, runs=5)
    msg = str(err.value)
    assert f"Paddle Inference on `{bad.with_name('model.json')}` failed" in msg
    assert "Its last stderr lines: " in msg and "(none)" not in msg


@pytest.mark.slow
def test_export_benchmark_json_and_its_bad_options(tmp_path: Path, finished_run: SharedRun) -> None:
    spec = finished_run.spec
    finished_run.copy(tmp_path / "run")
    cli = [sys.executable, "-m", "paddlefit.cli.main", "export", str(tmp_path / "run")]
    r = run([*cli, "--benchmark", "-b", "2", "-b", "1", "--threads", "1", "--json"])
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["max_abs_diff"] <= 1e-5 and doc["benchmark_inputs"] == ["float32[1,8,8]"]  # the digits images
    assert [(b["batch_size"], b["threads"]) for b in doc["benchmark"]] == [(1, 1), (2, 1)]
    for b in doc["benchmark"]:
        assert b["latency_s"] <= b["p95_s"] and b["runs"] >= 5 and b["samples_per_s"] > 0  # latency: the median
        assert b["peak_bytes"] > Path(doc["prefix"] + ".pdiparams").stat().st_size  # the serving process's RSS
    assert "batch 2, 1 thread(s): median" in r.stderr  # progress on stderr
    r = run([*cli, "--benchmark", "--threads", "0", "--json"])
    assert r.returncode == 2 and "`--threads 0`:" in json.loads(r.stdout)["error"]["message"]
    r = run([*cli, "-b", "4"])
    assert r.returncode == 2 and "add `--benchmark`" in r.stderr
    r = run([*cli, "--benchmark", "-b", "1"])  # default threads: 1 and the physical cores
    assert r.returncode == 0, r.stderr[-2000:]
    assert "measured on this CPU (Paddle Inference, oneDNN)" in r.stdout and "peak RSS MiB" in r.stdout
    # the exported run planned for serving gives the same GPU rows as its job spec (two references, one answer)
    plan = [
        sys.executable,
        "-m",
        "paddlefit.cli.main",
        "plan",
        "--inference",
        "--no-cpu",
        "--gpu",
        "T4",
        "-b",
        "1",
        "-b",
        "16",
        "--json",
    ]
    by_export = run([*plan[:4], str(tmp_path / "run"), *plan[4:]])
    by_spec = run([*plan, "--config", str(spec)])
    assert by_export.returncode == 0 and by_spec.returncode == 0, by_export.stderr[-2000:] + by_spec.stderr[-2000:]
    ex, sp = json.loads(by_export.stdout), json.loads(by_spec.stdout)
    assert ex["model"]["kind"] == "exported" and sp["model"]["kind"] == "spec"
    assert ex["model"]["params"] == sp["model"]["params"]
    (t_ex,), (t_sp,) = ex["targets"], sp["targets"]
    assert [p["latency_s"] for p in t_ex["inference"]] == pytest.approx(
        [p["latency_s"] for p in t_sp["inference"]], rel=1e-9
    )
