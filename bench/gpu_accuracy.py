"""Accuracy of GPU step-time predictions against published measurements: the previous model vs the per-op model.

For every row of ``bench/data/gpu-training-measurements.csv`` that can be built (see ``bench/gpu_fit.py``):

- published samples/s per GPU;
- ``old``: the previous planner's GPU time, the step's counted training FLOPs at one efficiency per unit class
  (``paddlefit.estimate.timing.default_efficiency``, derived from ResNet-50 alone; its memory-traffic term of
  2 x activations + 2 x model states is below the compute term for every row here, so it is left out);
- ``fit``: the per-operator model with the shipped parameters (fitted on all rows);
- ``loso``: leave-one-source-out: the parameters refitted without the row's source, then the row predicted.

Then median |error|, the share of rows within 25% and the worst row, for each. Target, under
leave-one-source-out: median |error| <= 10%, >= 85% of rows within 25%, no row off by more than 1.5x.

Second block: NeuSight's whole-model timings (``bench/data/gpu-kernels/e2e_latency.csv``: BERT-large, GPT-2 large,
GPT-3 XL / 2.7B-shaped, OPT-1.3B, eager PyTorch FP32 with TF32 off, forward or forward + backward, on P4, P100,
T4, V100 and A100) predicted by composing the operator trace of the same transformer shape
(:func:`paddlefit.estimate.transformer_ops.transformer_trace`) with the per-kernel model; no parameter is fitted
on these rows (the FP32 GEMM and memory-bound constants come from the kernels, ``kernel_s`` from the published rows).
``torch.compile`` rows (``parallel=fusion``) and the Switch MoE rows have no counterpart here and are left out.
It also prints the predicted time breakdown of a MobileNetV2-class and a BERT-class step on an A100.

    .venv/bin/python bench/gpu_accuracy.py [--retrace]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_fit


def old_prediction(case: gpu_fit.Case) -> float:
    """Samples/s of the previous model: training FLOPs / (unit peak x default_efficiency()[class])."""
    from paddlefit.catalog.units import compute_unit
    from paddlefit.estimate.timing import default_efficiency

    flops = float(case.step.flops[np.array([k.phase != "optimizer" for k in case.step.kernels])].sum())
    peak = case.gpu.peak_flops(case.precision)[0]
    return case.batch / (flops / (peak * default_efficiency()[compute_unit(case.gpu, case.precision)]))


def _summary(name: str, ratios: list[float]) -> str:
    s = gpu_fit.stats(ratios)
    return (
        f"{name:28s} median |error| {s['median_abs_error']:6.1%}   within 25% {s['within_25pct']:5.0%}   "
        f"worst {s['worst_ratio']:.2f}x   ({s['rows']} rows)"
    )


def signed_by_gpu(title: str, pairs: list[tuple[str, float]]) -> None:
    """Print, per GPU, the median of predicted / measured step TIME over ``pairs`` ((gpu, time ratio)) beside the
    median |error|: < 1 predicted too fast, > 1 too slow. A GPU whose rows all sit on one side is a factor the
    model lacks (clock, power, issue width, bandwidth), not noise."""
    print(f"\n{title}: per GPU, predicted / measured time (signed; < 1 = predicted too fast)")
    by: dict[str, list[float]] = {}
    for g, r in pairs:
        by.setdefault(g, []).append(r)
    for g, rs in sorted(by.items()):
        a = np.array(rs)
        side = "all too fast" if (a < 1).all() else "all too slow" if (a > 1).all() else "both signs"
        print(
            f"  {g:24s} rows {len(a):3d}   median {np.median(a):5.2f}   range {a.min():.2f}-{a.max():.2f}   "
            f"median |error| {np.median(np.abs(a - 1)):6.1%}   {side}"
        )


def same_job_across_sources(cases: list[gpu_fit.Case], fit_r: list[float]) -> None:
    """Print the rows that publish one job (model, GPU and count, precision, layout) from different sources, each
    with its predicted / published under the full fit. The spread of those ratios is either the sources disagreeing
    (clocks, software, input pipeline: what no row records) or the model's batch-size dependence being wrong where
    the batches differ; one prediction per job cannot put both rows of a pair closer than its square root."""
    groups: dict[tuple[str, ...], list[tuple[gpu_fit.Case, float]]] = {}
    for c, f in zip(cases, fit_r, strict=True):
        key = (c.workload.key, c.gpu.name, c.row["gpus"], c.precision, gpu_fit.layout_of(c.row))
        groups.setdefault(key, []).append((c, f))
    shown = [g for g in groups.values() if len({c.source for c, _ in g}) > 1]
    if not shown:
        return
    print("\nthe same job published by two sources (fit = predicted / published, full fit; spread = max / min fit):")
    for g in shown:
        fits = [f for _, f in g]
        rows = ", ".join(
            f"{c.row['id']} {c.source.split()[0]} b{c.batch} {c.measured_per_gpu:,.1f}/s fit {f:.2f}" for c, f in g
        )
        c0 = g[0][0]
        print(f"  {c0.workload.key} {c0.gpu.name} {c0.precision}: {rows}; spread {max(fits) / min(fits):.2f}x")


def breakdown(key: str, gpu_name: str, batch: int, precision: str, optimizer: str, traces: dict) -> None:
    """Print the predicted by-class breakdown of one step."""
    from paddlefit.catalog.gpus import get_gpu
    from paddlefit.estimate.gpu_model import estimate_step
    from paddlefit.estimate.optrace import OpTrace
    from paddlefit.estimate.perf_params import load_perf_params

    e = traces[key]
    est = estimate_step(
        OpTrace.from_dict(e["trace"]).at(batch),
        precision,
        get_gpu(gpu_name),
        optimizer,
        e["trainable_params"],
        e["trainable_tensors"],
        load_perf_params(),
    )
    print(
        f"\n{key} on {gpu_name}, batch {batch}, {precision}: predicted step {est.device_s * 1e3:.1f} ms "
        f"({batch / est.device_s:,.0f} samples/s)"
    )
    for c, v in sorted(est.by_class.items(), key=lambda kv: -kv[1]["seconds"]):
        print(
            f"  {c:12s} {v['seconds'] * 1e3:8.2f} ms  {v['seconds'] / est.device_s:5.1%}  {v['bound']:7s}  "
            f"{v['kernels']:6,} kernels"
        )


#: NeuSight's e2e models as transformer shapes, read from the runs' own op traces (``e2e_traces/``: embedding width,
#: the attention's [batch, heads, seq, head dim] permute, the MLP's addmm shapes) and ``layers`` of e2e_latency.csv.
#: bert-large-uncased, gpt2-large and facebook/opt-1.3b match their HuggingFace configs and "gpt3_27" GPT-3 2.7B
#: (Brown et al. 2020, table 2.1); NeuSight's "gpt3_xl" is not Brown's XL (d_model 2048): its trace runs width 3072,
#: 24 heads of 128 and an MLP of 12288 over 24 layers.
E2E_MODELS = {
    "bert_large": dict(
        vocab_size=30522,
        hidden_size=1024,
        num_layers=24,
        num_heads=16,
        ffn_size=4096,
        max_position=512,
        type_vocab_size=2,
        causal=False,
    ),
    "gpt2_large": dict(
        vocab_size=50257,
        hidden_size=1280,
        num_layers=36,
        num_heads=20,
        ffn_size=5120,
        max_position=1024,
        type_vocab_size=0,
        causal=True,
    ),
    "gpt3_xl": dict(
        vocab_size=50257,
        hidden_size=3072,
        num_layers=24,
        num_heads=24,
        ffn_size=12288,
        max_position=2048,
        type_vocab_size=0,
        causal=True,
    ),
    "gpt3_27": dict(
        vocab_size=50257,
        hidden_size=2560,
        num_layers=32,
        num_heads=32,
        ffn_size=10240,
        max_position=2048,
        type_vocab_size=0,
        causal=True,
    ),
    "opt_13": dict(
        vocab_size=50272,
        hidden_size=2048,
        num_layers=24,
        num_heads=32,
        ffn_size=8192,
        max_position=2050,
        type_vocab_size=0,
        causal=True,
    ),
}


def e2e_gpu(name: str) -> object:
    """The GPU of an e2e row: the catalog's row, or (P4, P100) the kernel bench's datasheet figures."""
    from paddlefit.catalog.gpus import get_gpu

    catalog = {"Tesla T4": "T4", "Tesla V100-PCIE-32GB": "V100-PCIe-32GB", "NVIDIA A100-PCIE-40GB": "A100-PCIe-40GB"}
    if name in catalog:
        return get_gpu(catalog[name])
    import gpu_kernels

    return gpu_kernels.DEVICES[name.replace(" ", "_")].as_gpu(name)


#: The ops :func:`~paddlefit.estimate.transformer_ops.transformer_trace` puts after an encoder's last layer, in
#: order: the masked-LM head (dense h -> h, GELU, LayerNorm, vocabulary projection, its bias add).
MLM_HEAD_OPS = ("linear", "gelu", "layer_norm", "matmul", "add")


def classifier_trace(trace: object) -> object:
    """An encoder's trace without its masked-LM head. NeuSight's ``bert_large`` inference rows ran a sequence
    classifier (their traces end in ``bert.pooler.dense`` on the first token and a 2-way ``classifier``: 1024 x 1024
    and 1024 x 2 per sample, < 0.1% of a step), not the pre-training model the README names (its train traces do
    end in ``cls.predictions.decoder``, the vocabulary projection, which stays); the projection the inference rows
    do not run would be 90 ms of a 700 ms T4 step."""
    from dataclasses import replace

    n = len(MLM_HEAD_OPS)
    for ops in (trace.ops1, trace.ops2):  # the tail must be the head, not whatever the trace ends in now
        if tuple(o.op for o in ops[-n:]) != MLM_HEAD_OPS:
            raise ValueError(f"trace does not end in the masked-LM head {MLM_HEAD_OPS}: {[o.op for o in ops[-n:]]}")
    return replace(trace, ops1=trace.ops1[:-n], ops2=trace.ops2[:-n])


def e2e_rows(params: object) -> list[tuple[dict[str, str], float]]:
    """(row, predicted / measured milliseconds) for every e2e_latency row with a counterpart."""
    import csv

    from paddlefit.catalog.transformers import TransformerConfig
    from paddlefit.estimate.gpu_model import compile_step
    from paddlefit.estimate.kernels import step_kernels
    from paddlefit.estimate.transformer_ops import transformer_trace

    out = []
    with (Path(__file__).resolve().parent / "data" / "gpu-kernels" / "e2e_latency.csv").open() as f:
        for r in csv.DictReader(f):
            if r["parallel"] or r["model"] not in E2E_MODELS:
                continue
            train = r["mode"] == "train"  # eval mode (no dropout) under no_grad for inference
            shape = E2E_MODELS[r["model"]]
            cfg = TransformerConfig(
                name=r["model"], num_kv_heads=shape["num_heads"], **shape, dropout=0.1 if train else 0.0
            )
            trace = transformer_trace(cfg, int(r["seq_len"]))
            ops = (trace if cfg.causal or train else classifier_trace(trace)).at(int(r["batch"]))
            gpu = e2e_gpu(r["gpu"])
            phases = ("forward", "backward") if train else ("forward",)  # inference: the forward kernels only
            ks = [k for k in step_kernels(ops, "fp32", gpu, "sgd", 0, 0, tf32=False) if k.phase in phases]
            t, _ = compile_step(ks, gpu, "fp32").times(params)
            out.append((r, float(t.sum()) * 1e3 / float(r["e2e_ms"])))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--retrace", action="store_true", help="re-run every trace on this CPU")
    args = ap.parse_args(argv)
    from paddlefit.estimate.perf_params import load_perf_params

    t0 = time.perf_counter()
    traces = gpu_fit.load_traces(args.retrace)
    traces["mobilenet_v2"] = gpu_fit.trace_workload(
        gpu_fit.Workload("mobilenet_v2", "zoo:mobilenet_v2", ("float32[3,224,224]",), "momentum")
    )
    cases, skipped = gpu_fit.build_cases(gpu_fit.load_rows(), traces)
    shipped = load_perf_params()
    fit_r = [gpu_fit.predict(c, shipped) / c.measured_per_gpu for c in cases]
    old_r = [old_prediction(c) / c.measured_per_gpu for c in cases]
    loso_r = [0.0] * len(cases)
    sources = sorted({c.source for c in cases})
    for src in sources:
        train = [c for c in cases if c.source != src]
        p = gpu_fit.fit(train)
        for i, c in enumerate(cases):
            if c.source == src:
                loso_r[i] = gpu_fit.predict(c, p) / c.measured_per_gpu
    print(
        f"{'row':4s} {'model':24s} {'gpu':15s} {'prec':8s} {'n':>2s} {'batch':>5s} {'published':>10s} "
        f"{'old':>6s} {'fit':>6s} {'loso':>6s}  source"
    )
    for c, o, f, lo in zip(cases, old_r, fit_r, loso_r, strict=True):
        print(
            f"{c.row['id']:4s} {c.workload.key:24s} {c.gpu.name:15s} {c.precision:8s} {c.row['gpus']:>2s} "
            f"{c.batch:5d} {c.measured_per_gpu:10.1f} {o:6.2f} {f:6.2f} {lo:6.2f}  {c.source}"
        )
    print("(old/fit/loso = predicted / published samples/s per GPU)")
    for rid, why in skipped:
        print(f"left out {rid}: {why}")
    print()
    print(_summary("old (ResNet-50 efficiency)", old_r))
    print(_summary("per-op model, full fit", fit_r))
    print(_summary("per-op, leave-one-source-out", loso_r))
    s_old, s_loso = gpu_fit.stats(old_r), gpu_fit.stats(loso_r)
    ok = (
        s_loso["median_abs_error"] <= 0.10
        and s_loso["within_25pct"] >= 0.85
        and max(s_loso["worst_ratio"], 1 / s_loso["worst_ratio"]) <= 1.5
    )
    print(
        f"ratio of median |error|, old / leave-one-source-out: "
        f"{s_old['median_abs_error'] / max(s_loso['median_abs_error'], 1e-9):.1f}x"
    )
    print(
        "target (leave-one-source-out: median <= 10%, >= 85% within 25%, worst <= 1.5x): "
        + ("MET" if ok else "NOT MET")
    )
    for src in sources:
        rs = [lo for c, lo in zip(cases, loso_r, strict=True) if c.source == src]
        print("  " + _summary(f"held out: {src}", rs))
    same_job_across_sources(cases, fit_r)
    e2e = e2e_rows(shipped)
    print(f"\n{'gpu':22s} {'model':11s} {'mode':5s} {'seq':>5s} {'batch':>5s} {'measured':>10s} {'predicted':>10s}")
    for r, ratio in e2e:
        print(
            f"{r['gpu']:22s} {r['model']:11s} {r['mode']:5s} {r['seq_len']:>5s} {r['batch']:>5s} "
            f"{float(r['e2e_ms']):8.1f}ms {float(r['e2e_ms']) * ratio:8.1f}ms  {ratio:.2f}"
        )
    for mode in ("train", "inf"):
        rs = [x for r, x in e2e if r["mode"] == mode]
        print(_summary(f"NeuSight e2e {mode}", rs))
    print(_summary("NeuSight e2e, kernel model", [x for _, x in e2e]))
    for mode, label in (("train", "training (forward + backward)"), ("inf", "inference (forward)")):
        signed_by_gpu(f"NeuSight e2e {label}", [(r["gpu"], x) for r, x in e2e if r["mode"] == mode])
    signed_by_gpu("published rows, full fit", [(c.gpu.name, 1 / f) for c, f in zip(cases, fit_r, strict=True)])
    signed_by_gpu(
        "published rows, leave-one-source-out", [(c.gpu.name, 1 / f) for c, f in zip(cases, loso_r, strict=True)]
    )
    breakdown("mobilenet_v2", "A100-SXM4-40GB", 256, "fp16-o1", "momentum", traces)
    breakdown("bert-large-squad-384", "A100-SXM4-40GB", 32, "fp16-o1", "adamw", traces)
    print(f"\n(bench wall time {time.perf_counter() - t0:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
