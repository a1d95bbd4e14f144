import paddle
import pytest
from tinymodels import mlp

from paddlefit.estimate.analytic import analytic_transformer_activation_bytes
from paddlefit.estimate.model_states import model_state_bytes
from paddlefit.jobspec.inputs import parse_input_spec
from paddlefit.jobspec.spec import OptimizerName, Precision
from paddlefit.models import resolve_model
from paddlefit.models.build import param_info
from paddlefit.probe.memory import measure_training_steps, probe_memory


@pytest.mark.parametrize("opt", list(OptimizerName))
def test_model_states_exact_against_allocator(opt):
    with paddle.LazyGuard():
        info = param_info(mlp())
    assert (info.params, info.trainable_tensors) == (30 * 40 + 40 + 40 * 5 + 5, 4)
    m = measure_training_steps(mlp, [parse_input_spec("float32[30]")], 4, opt)
    assert m.states_bytes_after_step == model_state_bytes(info, opt, Precision.FP32).total_bytes


def test_mixed_precision_adam_is_16_bytes_per_param():
    with paddle.LazyGuard():
        info = param_info(mlp())
    st = model_state_bytes(info, OptimizerName.ADAM, Precision.BF16_O2)
    assert st.total_bytes == 16 * info.params + 4 + 8 * info.trainable_tensors  # ZeRO §3.1 + beta-pow + lr
    st1 = model_state_bytes(info, OptimizerName.ADAM, Precision.FP16_O1)
    assert st1.total_bytes == 16 * info.params + 4 + 8 * info.trainable_tensors


@pytest.mark.parametrize(("name", "spec"), [("lenet", None), ("mobilenet_v3_small", "float32[3,64,64]")])
def test_probe_extrapolates_to_unprobed_batches(name, spec):
    ref = resolve_model(name)
    specs = [parse_input_spec(spec)] if spec else list(ref.default_inputs)
    probe, flops = probe_memory(ref.factory, specs, OptimizerName.ADAM, extend_to=12)
    assert flops.forward_flops > 0
    for b in (8, 16):
        measured = measure_training_steps(ref.factory, specs, b, OptimizerName.ADAM).peak_bytes
        assert probe.peak_bytes(b) == pytest.approx(measured, rel=0.02), b


def test_probe_times_each_thread_count_once_reusing_its_own_measured_step():
    """``time_threads``: the probe's own thread count is its measured step at the largest mandatory batch (not
    timed again); each other count of {1, cores / 2, cores} is one more step."""
    import os

    ref, cores = resolve_model("lenet"), len(os.sched_getaffinity(0))
    probe, _ = probe_memory(
        ref.factory, list(ref.default_inputs), OptimizerName.ADAM, count=False, time_threads=True, cpu_threads=cores
    )
    if cores == 1:
        assert probe.thread_step_s == {}
        return
    assert list(probe.thread_step_s) == sorted({1, cores // 2, cores})
    at3 = next(m for m in probe.measurements if m.batch_size == 3)
    assert probe.thread_step_s[cores] == at3.step_time_s
    assert all(v > 0 for v in probe.thread_step_s.values())


@pytest.mark.slow
def test_analytic_transformer_activations_vs_probe():
    ref = resolve_model(
        "bert-base", {"num_layers": 2, "hidden_size": 256, "num_heads": 4, "ffn_size": 1024, "vocab_size": 2000}
    )
    seq = 64
    specs = [parse_input_spec(f"int64[{seq}]:2000")]
    probe, _ = probe_memory(ref.factory, specs, OptimizerName.ADAM, count=False)
    analytic = analytic_transformer_activation_bytes(ref.transformer, seq)
    assert analytic == pytest.approx(probe.fits["forward"].per_sample_bytes, rel=0.25)
