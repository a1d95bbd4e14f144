"""Fit the per-operator GPU model's efficiency parameters on published training measurements.

Rows: ``bench/data/gpu-training-measurements.csv`` (73 published runs; sources and conditions in
``bench/data/gpu-training-measurements.SOURCES.md``). Each row's model is built with ``paddle.nn`` (zoo models,
``bench/published_models.py``), its forward traced on this CPU at batch 1 and 2 (cached in
``bench/data/gpu_traces.json.gz``; ``--retrace`` rebuilds the cache), and the step predicted on the row's GPU by
:func:`paddlefit.estimate.gpu_model.estimate_step`. The parameters minimise the squared log error of samples/s
over the rows (``scipy.optimize.least_squares``, parameters in log space within their bounds) plus a weak prior
that keeps each parameter near its starting value (weight 0.05 per log unit), so a parameter that no row
constrains stays where physics puts it rather than drifting.

    .venv/bin/python bench/gpu_fit.py            # fit, print the table, compare with the shipped file
    .venv/bin/python bench/gpu_fit.py --write    # write src/paddlefit/catalog/data/gpu_perf_params.json
    .venv/bin/python bench/gpu_fit.py --retrace  # re-run every trace on this CPU first (a few minutes)
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import gzip
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROWS_CSV = HERE / "data" / "gpu-training-measurements.csv"
TRACE_CACHE = HERE / "data" / "gpu_traces.json.gz"
PARAMS_FILE = HERE.parent / "src" / "paddlefit" / "catalog" / "data" / "gpu_perf_params.json"

#: What the end-to-end rows fit: only what the measured kernels (``bench/gpu_kernels.py``) cannot tell. Starting
#: values (and the prior's centre): tensor-core GEMMs ~70% of the dense peak (NVIDIA "Matrix Multiplication
#: Background" guide, A100 FP16), convolutions somewhat less; ~5 us per kernel (launch + tail, and the cost of
#: kernels the traces do not show). ``dwconv`` (depthwise convolutions on CUDA cores) is a guess that no row
#: constrains: plan rows of models with depthwise convolutions say so, and ``paddlefit calibrate`` measures it.
#: Every other key (GEMM tiles, FP32, memory-bound classes, L2, power, host) is held at the shipped file's value.
START = {"gemm_half": 0.7, "gemm_tf32": 0.7, "conv_half": 0.6, "conv_tf32": 0.6, "dwconv": 0.3, "kernel_s": 5e-6}


def half_bound() -> float:
    """Upper bound of the tensor-core efficiencies: what DeepBench's FP16 GEMMs reach on V100 and T4 (the
    kernel fit's ``gemm_half``, in the parameter file's kernel provenance), not 1.0 of the peak."""
    doc = json.loads(PARAMS_FILE.read_text(encoding="utf-8"))
    return float(doc["provenance"]["kernels"]["gemm_half_bound"])


BOUNDS = {k: (0.02, half_bound()) for k in START} | {"dwconv": (0.02, 1.0), "kernel_s": (5e-7, 1e-4)}


def base_values() -> dict[str, float]:
    """The shipped parameter values with the end-to-end keys at their starting values."""
    doc = json.loads(PARAMS_FILE.read_text(encoding="utf-8"))
    return dict(doc["values"], **START)


PRIOR_WEIGHT = 0.05
#: Largest share of a unit's dense peak a published run may imply for the whole training step built here. The best
#: single GEMM measured on A100, H100 and B200 reaches 78-87% of the BF16 peak (MAMF, ``paddlefit.catalog.ceilings``)
#: and a whole step also runs its norms, softmax, elementwise ops and optimizer update far below it; Megatron-LM's
#: best published model FLOPs utilisation on A100 is 56% (Korthikanti et al. 2022, docs/sources.md#published-mfu).
#: A row above 70% did less work than the model planned here.
MAX_IMPLIED_SHARE = 0.70


@dataclass(frozen=True)
class Workload:
    """How a row's model is built and counted.

    Attributes:
        key: trace-cache key.
        build: ``module:function`` (``zoo:NAME`` for the zoo) returning the model.
        inputs: per-sample input specs (paddlefit strings).
        optimizer: optimizer the published run used (bytes per parameter of the update).
        units_per_sample: how many of the row's units (images, sequences, tokens) one sample is.
    """

    key: str
    build: str
    inputs: tuple[str, ...]
    optimizer: str
    units_per_sample: int = 1


TOKENS = 128  # per-sample source/target length for the translation rows (token batches; see published_models)

WORKLOADS = {
    "resnet50": Workload("resnet50", "zoo:resnet50", ("float32[3,224,224]",), "momentum"),
    # the Paddle Perf rows ran PaddleNLP with fuse_transformer=True (SOURCES.md, S1): Paddle's fused encoder layers
    "bert-base-pretrain-p80-fused": Workload(
        "bert-base-pretrain-p80-fused", "bench_models:bert_pretrain:base:80:fused", ("int64[128]",), "adamw"
    ),
    "bert-large-pretrain-p20": Workload(
        "bert-large-pretrain-p20", "bench_models:bert_pretrain:large:20", ("int64[128]",), "adamw"
    ),
    "bert-large-squad-384": Workload("bert-large-squad-384", "bench_models:bert_squad:large", ("int64[384]",), "adamw"),
    "transformer-big": Workload(
        "transformer-big", "published_models:transformer_big", (f"int64[{TOKENS}]", f"int64[{TOKENS}]"), "adam", TOKENS
    ),
    "ssd300": Workload("ssd300", "published_models:ssd300", ("float32[3,300,300]",), "momentum"),
    "unet": Workload("unet", "published_models:unet_medical", ("float32[1,572,572]",), "adam"),
    "hrnet-w18": Workload("hrnet-w18", "published_models:hrnet_w18_fcn", ("float32[3,512,1024]",), "momentum"),
    "deeplabv3p": Workload(
        "deeplabv3p", "published_models:deeplabv3p_resnet50_vd", ("float32[3,512,1024]",), "momentum"
    ),
}


#: Leading words of the CSV's ``model`` column -> workload key.
MODEL_PREFIXES = (
    ("ResNet-50", "resnet50"),
    ("BERT-base pre", "bert-base-pretrain-p80-fused"),
    ("BERT-large pre", "bert-large-pretrain-p20"),
    ("BERT-large SQuAD", "bert-large-squad-384"),
    ("Transformer-big", "transformer-big"),
    ("SSD300", "ssd300"),
    ("U-Net", "unet"),
    ("FCN-HRNet", "hrnet-w18"),
    ("DeepLabV3+", "deeplabv3p"),
)


def workload_for(row: dict[str, str]) -> Workload | None:
    """The workload of a CSV row, or None when no model here matches it."""
    return next((WORKLOADS[key] for prefix, key in MODEL_PREFIXES if row["model"].startswith(prefix)), None)


def precision_of(row: dict[str, str]) -> str:
    """paddlefit precision of a row: pure-fp16 (O2) runs -> fp16-o2, other AMP -> fp16-o1, else fp32."""
    p = row["precision_as_printed"].upper()
    if p.startswith(("FP32", "TF32", '"FP32"')):
        return "fp32"
    if "O2" in p or "PURE" in p:
        return "fp16-o2"
    if "AMP" in p or "FP16" in p:
        return "fp16-o1"
    return "fp32"


def batch_of(row: dict[str, str], w: Workload) -> int | None:
    """Micro-batch in samples: the leading integer of ``batch_per_gpu`` (tokens / tokens per sample)."""
    text = row["batch_per_gpu"].strip().strip('"')
    mt = re.match(r"(\d+)", text)
    if not mt:
        return None
    b = int(mt.group(1))
    if "tokens" in text:
        return max(1, b // w.units_per_sample)
    return b


def layout_of(row: dict[str, str]) -> str:
    """Convolution layout the run used: NHWC where the row or its source says so (Paddle Perf's pure-fp16
    ResNet50 logs show ``data_format: NHWC``; DLE's AMP ResNet50 rows say NHWC), else NCHW (Paddle's and
    PyTorch's default; Lambda's runs pass no ``--memory-format``)."""
    text = (row["precision_as_printed"] + " " + row["framework"]).upper()
    if "NHWC" in text or "CHANNELS_LAST" in text:
        return "NHWC"
    if row["source"].startswith("PaddlePaddle/Perf") and "ResNet50" in row["source"] and "O2" in text:
        return "NHWC"  # the SOURCES file: every pure-FP16 ResNet50 log shows `data_format: NHWC`
    return "NCHW"


def source_group(row: dict[str, str]) -> str:
    """The source a row belongs to (S1, S11, S13, S14, S16 as in the SOURCES file)."""
    s = row["source"]
    if s.startswith("PaddlePaddle/Perf"):
        return "S1 Paddle Perf"
    if s.startswith("lambdal/"):
        return "S16 Lambda"
    if "ConvNets" in s:
        return "S11 DLE ResNet50"
    if "LanguageModeling/BERT" in s:
        return "S13 DLE BERT"
    return "S14 DLE other"


def load_rows() -> list[dict[str, str]]:
    """The CSV rows."""
    with ROWS_CSV.open(encoding="utf-8") as f:
        return list(csv.DictReader(f))


# ---------------------------------------------------------------- traces


def _build(w: Workload) -> Any:
    sys.path.insert(0, str(HERE))
    kind, _, rest = w.build.partition(":")
    if kind == "zoo":
        from paddlefit.models import resolve_model

        return resolve_model(rest).factory()
    if kind == "bench_models":
        import bench_models

        fn, *args = rest.split(":")
        return getattr(bench_models, fn)(*args)
    import importlib

    mod = importlib.import_module(kind)
    return getattr(mod, rest)()


def trace_workload(w: Workload) -> dict[str, Any]:
    """Trace ``w``'s forward at batch 1 and 2 on this CPU; returns the cache entry."""
    import paddle

    from paddlefit.jobspec.inputs import parse_input_spec
    from paddlefit.models.build import param_info
    from paddlefit.probe.job_call import make_inputs
    from paddlefit.probe.recorder import record_trace

    paddle.seed(0)
    model = _build(w)
    model.train()
    info = param_info(model)
    specs = [parse_input_spec(s) for s in w.inputs]
    trace = record_trace(model, make_inputs(specs, 1), make_inputs(specs, 2))
    return {
        "trace": trace.to_dict(),
        "trainable_params": info.trainable_params,
        "trainable_tensors": info.trainable_tensors,
        "inputs": list(w.inputs),
    }


def load_traces(retrace: bool = False, keys: list[str] | None = None) -> dict[str, Any]:
    """Trace cache (built when missing or with ``retrace``)."""
    cache: dict[str, Any] = {}
    if TRACE_CACHE.exists() and not retrace:
        cache = json.loads(gzip.decompress(TRACE_CACHE.read_bytes()))
    wanted = keys or list(WORKLOADS)
    missing = [k for k in wanted if k not in cache or cache[k].get("inputs") != list(WORKLOADS[k].inputs)]
    for k in missing:
        print(f"tracing {k} on this CPU ...", file=sys.stderr, flush=True)
        cache[k] = trace_workload(WORKLOADS[k])
    if missing:
        TRACE_CACHE.write_bytes(gzip.compress(json.dumps(cache, sort_keys=True).encode(), mtime=0))
    return cache


# ---------------------------------------------------------------- model and fit


@dataclass
class Case:
    """One buildable row, its kernels compiled for its GPU (parameter-free), ready to time."""

    row: dict[str, str]
    workload: Workload
    precision: str
    batch: int
    gpu: Any
    measured_per_gpu: float  # samples/s per GPU
    source: str
    step: Any  # paddlefit.estimate.gpu_model.CompiledStep
    grads_bytes: int
    fwd_ops: int = 0  # traced forward ops (views excluded), for the host floor as plan counts them
    tensors: int = 0  # trainable parameter tensors (the optimizer's loop)


def build_cases(rows: list[dict[str, str]], traces: dict[str, Any]) -> tuple[list[Case], list[tuple[str, str]]]:
    """Rows -> cases; (row id, reason) for rows left out."""
    from paddlefit.catalog.gpus import get_gpu
    from paddlefit.estimate.gpu_model import compile_step
    from paddlefit.estimate.kernels import step_kernels
    from paddlefit.estimate.optrace import OpTrace, with_layout
    from paddlefit.jobspec.spec import Precision
    from paddlefit.plan.rows import effective_precision

    cases, skipped = [], []
    for r in rows:
        w = workload_for(r)
        if w is None:
            skipped.append((r["id"], "no model for this row"))
            continue
        b = batch_of(r, w)
        if b is None:
            skipped.append((r["id"], f"batch not stated ({r['batch_per_gpu']!r})"))
            continue
        gpu = get_gpu(r["catalog_gpu"])
        prec = effective_precision(gpu, Precision(precision_of(r))).value
        gpus = int(r["gpus"])
        per_gpu = float(r["throughput"]) / (gpus if "(total)" in r["unit"] else 1) / w.units_per_sample
        entry = traces[w.key]
        ops = OpTrace.from_dict(entry["trace"]).at(b)
        if layout_of(r) == "NHWC":
            ops = with_layout(ops, "NHWC")
        kernels = step_kernels(ops, prec, gpu, w.optimizer, entry["trainable_params"], entry["trainable_tensors"])
        # a run faster than the GPU's dense peak allows for this model's counted FLOPs is not this model
        # (a reconstruction that does more work than the published one): leave it out, never fit to it; nor is a
        # run whose rate implies more than MAX_IMPLIED_SHARE of the peak for the whole step (module docstring)
        flops = sum(k.flops for k in kernels if k.phase != "optimizer")
        peak, _ = gpu.peak_flops(prec)
        share = per_gpu * sum(k.flops for k in kernels) / b / peak
        if per_gpu * flops / b > peak:
            skipped.append(
                (
                    r["id"],
                    f"published {per_gpu:,.1f} samples/s x {flops / b / 1e9:,.0f} GFLOP/sample "
                    f"exceeds the {gpu.name}'s dense peak {peak / 1e12:g} TFLOP/s: the model built "
                    "here does more work than the published run",
                )
            )
            continue
        if share > MAX_IMPLIED_SHARE:
            skipped.append(
                (
                    r["id"],
                    f"published {per_gpu:,.1f} samples/s implies {share:.0%} of the {gpu.name}'s "
                    f"dense {prec} peak for the whole step built here (norms, softmax and "
                    f"optimizer included; above {MAX_IMPLIED_SHARE:.0%}): the run did less work "
                    "(unpadded or packed sequences, a head on the masked positions only, fused "
                    "kernels)",
                )
            )
            continue
        grads = (2 if prec.endswith("o2") else 4) * entry["trainable_params"]
        cases.append(
            Case(
                r,
                w,
                prec,
                b,
                gpu,
                per_gpu,
                source_group(r),
                compile_step(kernels, gpu, prec),
                grads,
                sum(o.cls != "view" for o in ops),
                int(entry["trainable_tensors"]),
            )
        )
    bad = {
        w.key
        for r in rows
        if (w := workload_for(r)) and any(rid == r["id"] and "exceeds" in why for rid, why in skipped)
    }
    for c in [c for c in cases if c.workload.key in bad]:  # the reconstruction is wrong for all its rows
        cases.remove(c)
        skipped.append(
            (
                c.row["id"],
                f"another row of {c.workload.key} is faster than the GPU's peak allows for "
                "the model built here, so the model is not the published one",
            )
        )
    return cases, skipped


def predict(case: Case, params: Any) -> float:
    """Predicted samples/s per GPU of a case as ``plan`` predicts it: the device time, never below the host floor
    (the shipped ``host_op_s``/``host_step_s_per_tensor``, :func:`paddlefit.estimate.timing.host_floor_s`), plus
    for multi-GPU rows the all-reduce the backward does not hide."""
    from paddlefit.estimate.collectives import dataparallel_gradient_allreduce
    from paddlefit.estimate.gpu_model import dp_exposed_allreduce_s
    from paddlefit.estimate.timing import host_floor_s

    t, _ = case.step.times(params)
    step = max(float(t.sum()), host_floor_s(params, case.fwd_ops, case.tensors, case.gpu.architecture))
    gpus = int(case.row["gpus"])
    if gpus > 1:  # the published runs use the frameworks' DataParallel / DDP: 25 MB buckets overlapping the backward
        ar = dataparallel_gradient_allreduce(case.gpu, case.grads_bytes, gpus)
        step += dp_exposed_allreduce_s(ar, float(t[case.step.backward].sum()))
    return case.batch / step


def _params(theta: np.ndarray, keys: list[str], base: dict[str, float]) -> Any:
    from paddlefit.estimate.perf_params import PerfParams

    return PerfParams(dict(base, **{k: float(math.exp(t)) for k, t in zip(keys, theta, strict=True)}))


def fit(cases: list[Case], keys: list[str] | None = None) -> Any:
    """Least-squares fit of the parameters on ``cases``; returns :class:`PerfParams`. One set of efficiencies for
    every architecture: where a GPU's half-precision tensor cores reach less, the measured GEMM ceiling of its
    architecture (:mod:`paddlefit.catalog.ceilings`, MAMF) bounds them, not a factor fitted on these rows."""
    from scipy.optimize import least_squares

    keys = keys or list(START)
    base = base_values()
    x0 = np.log([START[k] for k in keys])
    lo = np.log([BOUNDS[k][0] for k in keys])
    hi = np.log([BOUNDS[k][1] for k in keys])
    meas = np.log([c.measured_per_gpu for c in cases])

    def residuals(theta: np.ndarray) -> np.ndarray:
        p = _params(theta, keys, base)
        pred = np.log([predict(c, p) for c in cases])
        return np.concatenate([pred - meas, PRIOR_WEIGHT * (theta - x0)])

    res = least_squares(
        residuals, np.clip(x0, lo + 1e-9, hi - 1e-9), bounds=(lo, hi), x_scale=1.0, diff_step=1e-3, max_nfev=400
    )
    return _params(res.x, keys, base)


def sensitivity(cases: list[Case], p: Any) -> dict[str, int]:
    """For each parameter, how many rows' predictions move by more than 5% of the parameter's own change
    (d log samples/s / d log parameter > 0.05): 0 means no published row constrains it and its value is the
    prior (``START``)."""
    from paddlefit.estimate.perf_params import PerfParams

    base = np.log([predict(c, p) for c in cases])
    out = {}
    for k in START:
        moved = dict(p.values, **{k: p.values[k] * 1.1})
        q = PerfParams(moved)
        d = (np.log([predict(c, q) for c in cases]) - base) / math.log(1.1)
        out[k] = int((np.abs(d) > 0.05).sum())
    return out


def stats(ratios: list[float]) -> dict[str, float]:
    """median |error|, share within 25%, worst ratio (predicted / measured)."""
    errs = [abs(r - 1) for r in ratios]
    worst = max(ratios, key=lambda r: max(r, 1 / r))
    return {
        "median_abs_error": float(np.median(errs)),
        "within_25pct": float(np.mean([e <= 0.25 for e in errs])),
        "worst_ratio": float(worst),
        "rows": len(ratios),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help="write the fitted parameters into the package")
    ap.add_argument("--retrace", action="store_true", help="re-run every trace on this CPU")
    args = ap.parse_args(argv)
    from paddlefit.estimate.perf_params import load_perf_params

    rows = load_rows()
    cases, skipped = build_cases(rows, load_traces(args.retrace))
    p = fit(cases)
    values = p.values
    ratios = [predict(c, p) / c.measured_per_gpu for c in cases]
    s = stats(ratios)
    print(f"fitted on {len(cases)} rows ({len(skipped)} left out):")
    moved = sensitivity(cases, p)
    for k in START:
        print(
            f"  {k:10s} {values[k]:.4g}   rows that constrain it: {moved[k]}"
            + ("  (none: the prior)" if not moved[k] else "")
        )
    print(
        f"full fit: median |error| {s['median_abs_error']:.1%}, within 25% {s['within_25pct']:.0%}, "
        f"worst {s['worst_ratio']:.2f}x"
    )
    for rid, why in skipped:
        print(f"  left out {rid}: {why}")
    shipped_doc = json.loads(PARAMS_FILE.read_text(encoding="utf-8"))
    doc = {
        **{k: shipped_doc[k] for k in ("batched_sgemm_tiles",) if k in shipped_doc},
        "calibration": "published-fit",
        "values": values,
        "by_generation": {},
        "provenance": {
            **{k: shipped_doc["provenance"][k] for k in ("kernels", "host") if k in shipped_doc["provenance"]},
            "end_to_end_keys": list(START),
            "fitted_by": "bench/gpu_fit.py",
            "date": dt.date.today().isoformat(),
            "rows": [c.row["id"] for c in cases],
            "architectures": sorted({c.gpu.architecture for c in cases}),
            "left_out": {rid: why for rid, why in skipped},
            "data": "bench/data/gpu-training-measurements.csv (shared/data, read 2026-11-30)",
            "residuals": {c.row["id"]: round(r, 4) for c, r in zip(cases, ratios, strict=True)},
            "summary": {k: round(v, 4) for k, v in s.items()},
            "start": START,
            "rows_constraining_each_parameter": moved,
            "prior_weight": PRIOR_WEIGHT,
        },
    }
    if args.write:
        from paddlefit.fileio import atomic_write_text

        atomic_write_text(PARAMS_FILE, json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"wrote {PARAMS_FILE}")
    else:
        try:
            ship = load_perf_params()
            pairs = [(ship.values[k], values[k]) for k in values]
            worst = max(abs(a / b - 1) for a, b in pairs)
            print(f"shipped parameters reproduced within {worst:.2%}")
        except Exception as exc:
            print(f"no shipped parameters to compare: {exc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
