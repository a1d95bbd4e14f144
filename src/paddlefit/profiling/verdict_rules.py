"""Profile's verdict rules, a registry like doctor's checks: :data:`RULES` in the order they are tried, each a
:class:`VerdictRule` (when it applies to the measured step, and its ranked fixes). The thresholds are this module's
policy, stated in ``profile``'s output; :mod:`paddlefit.profiling.verdict`'s docstring states each rule, and its
:func:`~paddlefit.profiling.verdict.summarise` builds the :class:`StepFacts` they read. Pure: no Paddle calls.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from paddlefit.jobspec.spec import JobSpec
from paddlefit.units import MIB

INPUT_BOUND_WAIT = 0.25
COMPUTE_SHARE = 0.60
LOW_GPU_UTIL = 50.0
COMM_BOUND_SHARE = 0.25
OPTIMIZER_HEAVY = 0.30
#: compute-bound needs the step's FLOP/s to reach this fraction of what the device attains on a dense GEMM (CPU:
#: a 1024^3 float32 matmul timed here at the job's thread count; GPU: the datasheet dense peak of the precision)
MIN_COMPUTE_EFFICIENCY = 0.10
LOSS_HEAVY = 0.25


@dataclass
class StepFacts:
    """What the verdict rules read (:data:`RULES`): the job, the measured step (seconds, samples/s) and its shares
    (fractions of the mean step), the device's figures (FLOP/s, FLOP/byte), and the evidence so far (sentences a
    rule may add to)."""

    spec: JobSpec
    device: str
    cores: int
    step_mean: float
    gb: int
    breakdown: dict[str, dict[str, float]]
    wait: float
    produce: float
    data_share: float
    compute: float
    gpu: dict[str, float] | None
    efficiency: float | None
    intensity: float | None
    ridge: float | None
    comm_share: float
    grads_bytes: float
    params: dict[str, Any] | None
    evidence: list[str]


Fix = dict[str, Any]


@dataclass(frozen=True)
class VerdictRule:
    """One verdict: when it applies to the step, and its ranked fixes. :data:`RULES` are tried in order; the first
    that applies names the bottleneck (the module docstring states each rule)."""

    verdict: str
    applies: Callable[[StepFacts], bool]
    fixes: Callable[[StepFacts], list[Fix]]


def _input_fixes(f: StepFacts) -> list[Fix]:
    """More DataLoader workers (bounded by Amdahl's law and the cores), shared memory, persistent workers, and
    cheaper preprocessing."""
    spec, cores, data = f.spec, f.cores, f.spec.data
    bound = min(1 / (1 - f.data_share) if f.data_share < 1 else math.inf, float(cores))
    share = f"the workers share the {cores} core(s) with the training process" + (
        f" and Paddle's {spec.cpu_threads or cores} math thread(s)" if f.gpu is None else ""
    )
    fixes: list[Fix] = []
    if data.num_workers == 0:
        workers = max(1, min(cores, 8))
        fixes.append(
            {
                "fix": f"data.num_workers: {workers}",
                "settings": {"data.num_workers": workers},
                "why": "the samples are prepared in the training process; workers prepare the next batches "
                "while the model trains",
                "expected_gain": f"hypothesis: up to {bound:.2f}x (Amdahl bound 1/(1-d), d = "
                f"{_data_d(f.wait, f.produce)}, capped at the {cores} core(s)); not "
                f"measured: {share}, which the bound does not count",
            }
        )
    else:
        more = min(cores, data.num_workers * 2)
        fixes.append(
            {
                "fix": f"data.num_workers: {more} (now {data.num_workers})",
                "settings": {"data.num_workers": more},
                "why": "the workers do not keep up with training",
                "expected_gain": f"hypothesis: up to {bound:.2f}x (Amdahl bound); not measured: {share}",
            }
        )
    if not data.use_shared_memory:
        fixes.append(
            {
                "fix": "data.use_shared_memory: true",
                "settings": {"data.use_shared_memory": True},
                "why": "batches are copied through a pipe",
                "expected_gain": "measure with `paddlefit tune`",
            }
        )
    if data.num_workers and not data.persistent_workers:
        fixes.append(
            {
                "fix": "data.persistent_workers: true",
                "settings": {"data.persistent_workers": True},
                "why": "workers restart every epoch",
                "expected_gain": "the first batches of each epoch",
            }
        )
    fixes.append(
        {
            "fix": "cache or simplify the per-sample preprocessing (precompute what does not change)",
            "why": "the dataset's __getitem__ sets the pace",
            "expected_gain": f"up to {bound:.2f}x",
        }
    )
    return fixes


def _host_fixes(f: StepFacts) -> list[Fix]:
    """Bigger batches or a static graph for a GPU that idles between kernels."""
    return [
        {
            "fix": "raise batch_size (within `paddlefit plan`'s max batch) or use paddle.jit.to_static",
            "why": "the GPU idles between small kernels launched from Python",
            "expected_gain": "measure with `paddlefit tune`",
        }
    ]


def _comm_fixes(f: StepFacts) -> list[Fix]:
    """Gradient accumulation, NVLink boards, O2's half-precision gradients."""
    spec, gain = f.spec, 1 / (1 - f.comm_share / 2)
    fixes: list[Fix] = [
        {
            "fix": f"grad_accum_steps: {spec.grad_accum_steps * 2} (with the same batch_size)",
            "why": "gradients are all-reduced once per optimizer step, so accumulation spreads it over more samples "
            "(global batch doubles; halve batch_size to keep it)",
            "expected_gain": f"up to {gain:.2f}x (half the all-reduce share)",
        },
        {
            "fix": "GPUs joined by NVLink/NVSwitch (e.g. SXM boards) instead of PCIe",
            "why": f"the ring all-reduce moves 2(n-1)/n x {f.grads_bytes / MIB:,.0f} MiB per step",
            "expected_gain": "`paddlefit cost --config` compares the instance types",
        },
    ]
    if spec.precision.level != "O2":
        fixes.append(
            {
                "fix": "precision: bf16-o2 / fp16-o2",
                "why": "O2 keeps half-precision gradients: half the all-reduce bytes",
                "expected_gain": f"up to {gain:.2f}x",
            }
        )
    return fixes


def _memory_fixes(f: StepFacts) -> list[Fix]:
    """Half precision (fewer bytes per op) and fusion, for a step below the roofline's ridge point."""
    return [
        {
            "fix": "precision: bf16-o1 (Ampere+) or fp16-o1"
            if not f.spec.precision.is_amp
            else "precision O2 (bf16-o2/fp16-o2)",
            "why": "half-precision activations and weights halve the bytes each op reads and writes",
            "expected_gain": f"up to 2x on the memory-bound ops (roofline: intensity {f.intensity:,.1f} < "
            f"ridge {f.ridge:,.1f} FLOP/byte)",
        },
        {
            "fix": "paddle.jit.to_static (operator fusion) for element-wise chains, LayerNorm, activations",
            "why": "fused kernels keep intermediates in registers instead of device memory",
            "expected_gain": "measure with `paddlefit profile` before/after",
        },
    ]


def _overhead_fixes(f: StepFacts) -> list[Fix]:
    """A heavy loss, bigger batches, fusion, and sparse updates of a dominant embedding."""
    fixes: list[Fix] = []
    loss_share = f.breakdown["loss"]["share"]
    if loss_share >= LOSS_HEAVY:
        fixes.append(
            {
                "fix": f"look at the loss: it takes {loss_share:.0%} of the step (`paddlefit profile --ops 10` "
                "names its kernels)",
                "why": "the loss's kernels (e.g. log_softmax over a large vocabulary, CTC) do little "
                "arithmetic per byte",
                "expected_gain": f"up to {1 / (1 - loss_share):.2f}x (Amdahl bound: the loss is "
                f"{loss_share:.0%} of the step)",
            }
        )
    fixes.append(
        {
            "fix": "raise batch_size (within `paddlefit plan`'s max batch)",
            "why": "per-op dispatch and small kernels cost the same per call whatever the batch; more samples "
            "per op amortise them",
            "expected_gain": "measure with `paddlefit tune`",
        }
    )
    fixes.append(
        {
            "fix": "paddle.jit.to_static (operator fusion)",
            "why": "fewer, fused kernels for element-wise chains and normalisations",
            "expected_gain": "measure with `paddlefit profile` before/after",
        }
    )
    sparse = sparse_update_fix(f.spec, f.breakdown["optimizer"]["share"], f.params, f.evidence)
    return [sparse, *fixes] if sparse else fixes


def _compute_fixes(f: StepFacts) -> list[Fix]:
    """AMP and cuDNN's exhaustive search on a GPU (a GPU on a CPU), sparse updates, fewer FLOPs."""
    fixes: list[Fix] = []
    if f.device == "gpu" and not f.spec.precision.is_amp:
        fixes.append(
            {
                "fix": "precision: bf16-o1 (Ampere+) or fp16-o1",
                "why": "tensor cores run half precision several times faster than fp32/TF32",
                "expected_gain": "2.6x (A100 TF32 -> AMP) to 3.3x (V100 FP32 -> AMP) for ResNet-50 "
                "(NVIDIA DeepLearningExamples, docs/sources.md#resnet-50-deeplearningexamples)",
            }
        )
    if f.device == "gpu":
        fixes.append(
            {
                "fix": "FLAGS_cudnn_exhaustive_search=1 (fixed input shapes only)",
                "why": "cuDNN tries every conv algorithm once per shape and keeps the fastest",
                "expected_gain": "measure with `paddlefit tune`",
            }
        )
    else:
        fixes.append(
            {
                "fix": "train on a GPU (`paddlefit plan --config` / `paddlefit cost --config`)",
                "why": "the CPU spends the step in the model's arithmetic",
                "expected_gain": "see `paddlefit plan`'s samples/s per GPU",
            }
        )
    opt_share = f.breakdown["optimizer"]["share"]
    sparse = sparse_update_fix(f.spec, opt_share, f.params, f.evidence)
    fixes = [sparse, *fixes] if sparse else fixes
    if opt_share < f.breakdown["forward"]["share"] + f.breakdown["backward"]["share"]:
        fixes.append(
            {
                "fix": "a smaller model or fewer FLOPs per sample (lower resolution, fewer layers)",
                "why": "the step time scales with the FLOPs",
                "expected_gain": "proportional to the FLOPs cut",
            }
        )
    return fixes


def _computing(f: StepFacts) -> bool:
    return f.compute >= COMPUTE_SHARE


#: The verdict rules in the order they are tried (the module docstring states each); none applying: undetermined.
RULES: tuple[VerdictRule, ...] = (
    VerdictRule("input-bound", lambda f: f.data_share >= INPUT_BOUND_WAIT, _input_fixes),
    VerdictRule(
        "host-overhead-bound", lambda f: f.gpu is not None and f.gpu["util_mean_percent"] < LOW_GPU_UTIL, _host_fixes
    ),
    VerdictRule("communication-bound", lambda f: f.comm_share >= COMM_BOUND_SHARE, _comm_fixes),
    VerdictRule(
        "memory-bound",
        lambda f: _computing(f) and f.intensity is not None and f.ridge is not None and f.intensity < f.ridge,
        _memory_fixes,
    ),
    VerdictRule(
        "overhead-bound",
        lambda f: _computing(f) and f.efficiency is not None and f.efficiency < MIN_COMPUTE_EFFICIENCY,
        _overhead_fixes,
    ),
    VerdictRule("compute-bound", _computing, _compute_fixes),
)


def judge(facts: StepFacts) -> tuple[str, list[Fix]]:
    """The first rule of :data:`RULES` that applies and its fixes (each ``basis: hypothesis``: profile tries none;
    ``paddlefit tune --profile`` tests them); ``undetermined`` with an evidence line when none does."""
    for rule in RULES:
        if rule.applies(facts):
            fixes = rule.fixes(facts)
            for fix in fixes:
                fix.setdefault("basis", "hypothesis")
            return rule.verdict, fixes
    other = facts.breakdown["other"]["share"]
    facts.evidence.append(f"no component dominates: {other:.0%} of the step is outside the timed phases")
    return "undetermined", []


def _data_d(wait: float, produce: float) -> str:
    """The ``d`` of the input-bound Amdahl bound, named by what it is (a bare "data d = 100% of the step" beside a
    table's ``data wait 55%`` reads as a contradiction): the data wait's share of the step, or batch production's
    (capped at 100%) when larger."""
    if produce > wait:
        return f"batch production, {produce:.0%} of a step's time (the workers must overlap it)"
    return f"data wait, {wait:.0%} of the step"


def sparse_update_fix(
    spec: JobSpec, opt_share: float, params: dict[str, Any] | None, evidence: list[str]
) -> dict[str, str] | None:
    """The sparse-update fix when the optimizer takes >= ``OPTIMIZER_HEAVY`` of the step and one tensor (typically
    an embedding table) holds most parameters (its evidence line is appended); else None."""
    big = params or {}
    if opt_share < OPTIMIZER_HEAVY or big.get("largest_count", 0) < 0.5 * big.get("count", 1):
        return None
    evidence.append(
        f"the optimizer update is {opt_share:.0%} of the step; {big['largest']} "
        f"{big['largest_shape']} holds {big['largest_count'] / big['count']:.1%} of the "
        f"{big['count']:,} parameters and is updated in full every step"
    )
    from paddlefit.process.userimport import factory_takes

    how = (
        "`model_args: {sparse: true}` and `lazy_mode: true` in the spec (`paddlefit tune` measures it)"
        if factory_takes(spec.model, "sparse")
        else "paddle.nn.Embedding(..., sparse=True) with Adam/AdamW `lazy_mode: true` or SGD"
    )
    return {
        "fix": f"sparse updates for {big['largest']}: {how}",
        "why": "only the rows looked up in the batch get a gradient and an update (Paddle's `lazy_mode` docs: "
        "dense Adam updates every element every step)",
        "expected_gain": f"up to {1 / (1 - opt_share):.2f}x (Amdahl bound: the update is {opt_share:.0%} of the step)",
    }
