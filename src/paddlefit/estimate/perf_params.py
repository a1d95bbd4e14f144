"""The fitted efficiency parameters of the per-operator GPU model: their keys, ranges, validation and loading.

The shipped values live in ``paddlefit/catalog/data/gpu_perf_params.json`` (fitted on published measurements by
``bench/gpu_fit.py``); ``paddlefit calibrate`` writes per-device ones in the same format (validated here too).
The model that uses them is :mod:`paddlefit.estimate.gpu_model`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from paddlefit.errors import CatalogError

#: The parameters of the per-kernel model (:mod:`paddlefit.estimate.kernel_model`) and the host floor.
#: Efficiencies are fractions of a unit's datasheet peak; see :class:`PerfParams` for each key.
PARAM_KEYS = (
    "gemm_half",
    "gemm_tf32",
    "gemm_fp32",
    "conv_half",
    "conv_tf32",
    "conv_fp32",
    "dwconv",
    "bw_eff",
    "kernel_s",
    "gemm_k0",
    "tile_h0",
    "fp32_gflops_per_w",
    "norm_bw_eff",
    "softmax_bw_eff",
    "l2_gain",
    "host_op_s",
    "host_step_s_per_tensor",
    "fp32_node_exponent",
    "winograd_fp32",
    "winograd_transform",
    "host_step_s",
    "winograd_fused_fp32",
    "predictor_call_s",
    "predictor_op_s",
)
#: Keys fitted on measured kernels by ``bench/gpu_kernels.py``; the others (tensor-core efficiencies that no
#: kernel here measures, depthwise convolutions, the fixed cost per kernel) by ``bench/gpu_fit.py`` on published
#: end-to-end runs; ``host_*`` measured by ``bench/host_overhead.py`` (or by ``paddlefit calibrate`` on the host).
KERNEL_FIT_KEYS = (
    "gemm_fp32",
    "conv_fp32",
    "gemm_k0",
    "tile_h0",
    "fp32_gflops_per_w",
    "fp32_node_exponent",
    "bw_eff",
    "norm_bw_eff",
    "softmax_bw_eff",
    "l2_gain",
    "winograd_fp32",
    "winograd_transform",
    "winograd_fused_fp32",
)


@dataclass(frozen=True)
class PerfParams:
    """Fitted efficiency parameters of the per-operator model.

    Attributes:
        values: ``gemm_half``/``gemm_tf32``/``gemm_fp32`` (fraction of the unit's dense peak a 128 x 128 tile
            of a linear/matmul reaches at long k; also 1x1 convolutions), ``conv_*`` (the same for other
            convolutions as implicit GEMMs; ``paddlefit calibrate``'s conv_fp32, from one 3x3 convolution without its
            geometry, may exceed 1 where cuDNN runs Winograd), ``winograd_fp32`` (the same for the 36 batched GEMMs
            of an FP32 Winograd convolution) and ``winograd_transform`` (multiplier on its transform passes'
            bytes), ``winograd_fused_fp32`` (fraction of an SM's FP32 peak a block of cuDNN's fused Winograd F(2x2, 3x3)
            kernel reaches), ``dwconv`` (fraction of the FP32 CUDA-core peak
            for depthwise/grouped convolutions), ``bw_eff`` (fraction of the datasheet DRAM bandwidth reached by
            elementwise kernels; ``norm_bw_eff``/``softmax_bw_eff`` the same for norms and softmax, on the bytes
            :mod:`~paddlefit.estimate.kernels` counts), ``l2_gain`` (how much faster bytes within the L2 size
            move), ``gemm_k0`` (k steps of a tile's prologue/epilogue), ``tile_h0`` (tile-size constant),
            ``fp32_gflops_per_w`` (FP32 CUDA-core GFLOP/s the board sustains per watt of TDP on a 12 nm process;
            x (12 / process nm) ^ ``fp32_node_exponent`` on others), ``kernel_s``
            (fixed GPU seconds per kernel: launch, tail), ``host_op_s`` (host seconds to dispatch one eager
            op), ``host_step_s_per_tensor`` (host seconds of ``optimizer.step()`` per parameter tensor) and
            ``host_step_s`` (the rest of a step's host work: :class:`~paddlefit.estimate.timing.HostOverhead`),
            ``predictor_call_s`` and ``predictor_op_s`` (host seconds of one Paddle Inference request and of each
            op its executor runs: :class:`~paddlefit.serving.predictor_overhead.PredictorOverhead`).
            The formulas: :mod:`paddlefit.estimate.kernel_model`.
        by_generation: per GPU architecture (``volta``, ``ampere``...) overrides of any of those keys.
        calibration: ``published-fit`` (fitted on published measurements) or ``device`` (measured on this
            GPU by ``paddlefit calibrate``).
        provenance: where the values come from (rows, date, residuals), as stored in the file.
    """

    values: dict[str, float]
    by_generation: dict[str, dict[str, float]] = field(default_factory=dict)
    calibration: str = "published-fit"
    provenance: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, architecture: str | None = None) -> float:
        """The value of ``key`` for a GPU of ``architecture`` (its override, else the global value)."""
        gen = self.by_generation.get((architecture or "").lower(), {})
        return float(gen.get(key, self.values[key]))


#: Allowed range of each parameter: efficiencies between 0.1% and 100% of the unit's peak (convolutions up to 2.25x:
#: Winograd F(2x2, 3x3), cuDNN's, does 2.25x fewer multiplies, Lavin & Gray, CVPR 2016: what ``calibrate`` may
#: measure for a 3x3 convolution timed without its geometry); at most 1 ms per kernel, 10 ms per host op or optimizer
#: tensor (a busy or slow host measured by ``calibrate``: 1.4 ms per tensor was seen on a loaded 2-core machine),
#: 100 ms of fixed host work per step or per Paddle Inference request, 10 ms per predictor op; L2
#: at most 10x the DRAM rate (the fit's bound: GPUs' L2 bandwidth is 2-5x their DRAM's).
PARAM_RANGE = (
    {k: (1e-3, 1.0) for k in PARAM_KEYS}
    | {k: (1e-3, 2.25) for k in ("conv_half", "conv_tf32", "conv_fp32")}
    | {
        "kernel_s": (0.0, 1e-3),
        "host_op_s": (0.0, 1e-2),
        "host_step_s_per_tensor": (0.0, 1e-2),
        "host_step_s": (0.0, 1e-1),
        "predictor_call_s": (0.0, 1e-1),
        "predictor_op_s": (0.0, 1e-2),
        "gemm_k0": (0.0, 1e5),
        "tile_h0": (0.0, 1e5),
        "fp32_gflops_per_w": (1e-3, 1e6),
        "l2_gain": (1.0, 10.0),
        "fp32_node_exponent": (0.0, 5.0),
        "winograd_transform": (0.0, 10.0),
    }
)
#: Seconds that must be above 0 (their range's lower end is exclusive).
POSITIVE_SECONDS = ("kernel_s", "host_op_s", "host_step_s_per_tensor")


def is_finite_number(value: Any) -> bool:
    """True for an int or float (not a bool) that is finite as a float; False for NaN, infinities and JSON
    integers too large for a float (``float()`` raises OverflowError for those)."""
    try:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(float(value))
    except OverflowError:
        return False


def _check_value(key: str, v: Any, origin: str, where: str) -> float:
    if not is_finite_number(v):
        raise CatalogError(
            f"GPU model parameters `{origin}`, {where}, key `{key}`: expected a finite number, got {str(v)[:40]!r}."
        )
    lo, hi = PARAM_RANGE[key]
    strict = key in POSITIVE_SECONDS
    if not (lo < v <= hi if strict else lo <= v <= hi):
        raise CatalogError(
            f"GPU model parameters `{origin}`, {where}, key `{key}`: {v!r} is outside "
            f"{'(' if strict else '['}{lo:g}, {hi:g}]; rerun `paddlefit calibrate` (or refit with "
            "`python bench/gpu_fit.py --write`)."
        )
    return float(v)


#: The host side of a step (:func:`paddlefit.estimate.timing.host_floor_s`), measured on the host.
HOST_KEYS = ("host_op_s", "host_step_s_per_tensor", "host_step_s", "predictor_call_s", "predictor_op_s")
#: Keys ``paddlefit calibrate`` measures on the device (``plan --explain`` says ``device`` for these only).
DEVICE_MEASURED_KEYS = (
    "gemm_half",
    "gemm_tf32",
    "gemm_fp32",
    "conv_half",
    "conv_tf32",
    "conv_fp32",
    "dwconv",
    "bw_eff",
    "kernel_s",
    *HOST_KEYS,
)
#: Keys of the kernel model that ``paddlefit calibrate`` does not time (it copies the shipped fit's values), and
#: that files written before they existed lack; :func:`with_shipped_model_keys` fills them in.
SHIPPED_ONLY_KEYS = tuple(k for k in PARAM_KEYS if k not in DEVICE_MEASURED_KEYS)


def with_shipped_model_keys(doc: dict[str, Any]) -> dict[str, Any]:
    """A calibration's ``perf_params`` with the kernel-model keys it lacks (:data:`SHIPPED_ONLY_KEYS`, and the host
    keys a file of an earlier release has no measurement of) taken from the shipped fit: ``calibrate`` copies those
    anyway, so an older file keeps its device measurements instead of being refused."""
    vals = doc.get("values")
    if not isinstance(vals, dict):
        return doc
    shipped = load_perf_params().values
    missing = [k for k in (*SHIPPED_ONLY_KEYS, *HOST_KEYS) if k not in vals]
    return {**doc, "values": {**vals, **{k: shipped[k] for k in missing}}}


def parse_perf_params(doc: Any, origin: str) -> PerfParams:
    """Validate a parameter document (the JSON of ``gpu_perf_params.json``).

    Raises:
        CatalogError: not an object, a missing or unknown key, or a value out of range (names the key).
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("values"), dict):
        raise CatalogError(f"GPU model parameters `{origin}`: expected a JSON object with a `values` object.")
    vals = doc["values"]
    missing = [k for k in PARAM_KEYS if k not in vals]
    unknown = [k for k in vals if k not in PARAM_KEYS]
    if missing or unknown:
        raise CatalogError(
            f"GPU model parameters `{origin}`, `values`: missing {missing or 'none'}, unknown "
            f"{unknown or 'none'}; the keys are {', '.join(PARAM_KEYS)}."
        )
    values = {k: _check_value(k, vals[k], origin, "`values`") for k in PARAM_KEYS}
    gens: dict[str, dict[str, float]] = {}
    by_gen = doc.get("by_generation") or {}
    if not isinstance(by_gen, dict):
        raise CatalogError(
            f"GPU model parameters `{origin}`, key `by_generation`: expected an object of "
            "architecture -> {key: value}, got " + type(by_gen).__name__ + "."
        )
    prov = doc.get("provenance") or {}
    if not isinstance(prov, dict):
        raise CatalogError(
            f"GPU model parameters `{origin}`, key `provenance`: expected an object, got {type(prov).__name__}."
        )
    for arch, over in by_gen.items():
        if not isinstance(over, dict):
            raise CatalogError(f"GPU model parameters `{origin}`, `by_generation.{arch}`: expected an object.")
        bad = [k for k in over if k not in PARAM_KEYS]
        if bad:
            raise CatalogError(
                f"GPU model parameters `{origin}`, `by_generation.{arch}`: unknown key(s) "
                f"{', '.join(bad)}; the keys are {', '.join(PARAM_KEYS)}."
            )
        gens[str(arch).lower()] = {k: _check_value(k, v, origin, f"`by_generation.{arch}`") for k, v in over.items()}
    cal = doc.get("calibration", "published-fit")
    if cal not in ("published-fit", "device"):
        raise CatalogError(
            f"GPU model parameters `{origin}`, key `calibration`: {cal!r} is not `published-fit` or `device`."
        )
    return PerfParams(values, gens, cal, dict(prov))


@lru_cache(maxsize=1)
def kernel_fit_architectures() -> tuple[str, ...]:
    """Architectures of the GPUs whose measured kernels the shipped constants are fitted on (the parameter file's
    ``provenance.kernels.architectures``, written by ``bench/gpu_kernels.py``); other architectures get the fit
    through their datasheet figures."""
    return tuple(load_perf_params().provenance.get("kernels", {}).get("architectures", ()))


def load_perf_params() -> PerfParams:
    """The shipped fitted parameters (``paddlefit/catalog/data/gpu_perf_params.json``).

    Raises:
        CatalogError: the file is malformed.
    """
    return parse_perf_params(_shipped_doc(), "paddlefit/catalog/data/gpu_perf_params.json")


@lru_cache(maxsize=1)
def _shipped_doc() -> dict[str, Any]:
    text = resources.files("paddlefit.catalog").joinpath("data/gpu_perf_params.json").read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CatalogError(f"GPU model parameters: not valid JSON: {exc}.") from None


def batched_sgemm_tiles() -> dict[str, Any]:
    """The shipped table of FP32 batched-SGEMM tiles per cuBLAS kernel family (``batched_sgemm_tiles`` of
    ``gpu_perf_params.json``: family -> ``{"tile": [tm, tn], "architectures": [...], "calls": n}``, counted from
    NeuSight's kernel names by ``bench/gpu_kernels.py``; see
    :func:`~paddlefit.estimate.kernel_model.batched_sgemm_tile`). A property of cuBLAS, not of a calibration.

    Raises:
        CatalogError: the table is malformed (names the family).
    """
    table = _shipped_doc().get("batched_sgemm_tiles") or {}
    for fam, v in table.items():
        tile = v.get("tile") if isinstance(v, dict) else None
        if not (
            isinstance(tile, list)
            and len(tile) == 2
            and all(isinstance(x, int) and x > 0 for x in tile)
            and isinstance(v.get("architectures"), list)
        ):
            raise CatalogError(
                f"GPU model parameters: `batched_sgemm_tiles.{fam}` needs a `tile` of two positive "
                "integers and a list of `architectures`."
            )
    return table
