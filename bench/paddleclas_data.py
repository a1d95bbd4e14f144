"""Build `bench/data/paddleclas_v100_trt_fp32.csv`: PaddleClas's published V100 + TensorRT FP32 latencies.

PaddleClas publishes Paddle Inference + TensorRT-8.0.3.4 FP32 latencies on a V100 at batch 1, 4 and 8 (plus FLOPs
and Params from ``paddle.flops()``) in ``docs/zh_CN/models/ImageNet1k/model_list.md`` of PaddlePaddle/PaddleClas.
This script reads a LOCAL copy of that markdown, given by ``--markdown PATH`` (it never downloads anything), keeps
the GPU tables (those whose header has ``time(ms) bs=1`` columns without an "SD855" / "Intel" prefix; the ARM and
Intel-CPU tables are skipped), merges names that appear in two tables (the family table's copy wins), and writes one
row per model with:

- ``ppcls_name``: the constructor in the installed ``paddleclas.ppcls.arch.backbone`` that builds the network
  (``_ssld`` and ImageNet-22k->1k rows are other weights of the same constructor; see ``ppcls_name``);
- ``input_size``: the eval/infer crop side from PaddleClas's configs (``INPUT_SIZE``, read from the repo's
  ``ppcls/configs/ImageNet/<Family>/<Model>.yaml``; ``--configs DIR`` re-derives it from a local copy of that
  directory and reports disagreements with the table here);
- ``builds_here``: 1 if ``getattr(backbone, ppcls_name)(class_num=1000)`` builds and runs one eval-mode forward on a
  random [1,3,S,S] float32 input under ``paddle.no_grad()`` on CPU within ``--timeout`` seconds (60), each in a fresh
  subprocess; else 0. The parameter count of the built network is compared with the published Params(M).

Run: ``.venv/bin/python bench/paddleclas_data.py --markdown /path/to/model_list.md`` (about 11 min on 2 cores).
Details of each build go to ``--log`` (JSON) and a summary to stdout.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "data" / "paddleclas_v100_trt_fp32.csv"
BACKBONE = "paddleclas.ppcls.arch.backbone"
HEADER = ["model", "ppcls_name", "input_size", "bs1_ms", "bs4_ms", "bs8_ms", "flops_g", "params_m", "builds_here"]

# Eval/Infer crop side where it is not 224, from PaddlePaddle/PaddleClas@d178931f ppcls/configs/ImageNet/*/*.yaml
# (DataLoader.Eval transform_ops and Infer.transforms: CropImage size; both agree in every config read).
INPUT_SIZE = {
    "InceptionV3": 299,
    "InceptionV4": 299,
    "Xception41": 299,
    "Xception41_deeplab": 299,
    "Xception65": 299,
    "Xception65_deeplab": 299,
    "Xception71": 299,
    "EfficientNetB1": 240,
    "EfficientNetB2": 260,
    "EfficientNetB3": 300,
    "EfficientNetB4": 380,
    "EfficientNetB5": 456,
    "EfficientNetB6": 528,
    "EfficientNetB7": 600,
    "CSPDarkNet53": 256,
    "DarkNet53": 256,
    "MobileViT_XXS": 256,
    "MobileViT_XS": 256,
    "MobileViT_S": 256,
    "ViT_base_patch16_384": 384,
    "ViT_base_patch32_384": 384,
    "ViT_large_patch16_384": 384,
    "ViT_large_patch32_384": 384,
    "DeiT_base_patch16_384": 384,
    "DeiT_base_distilled_patch16_384": 384,
    "SwinTransformer_base_patch4_window12_384": 384,
    "SwinTransformer_large_patch4_window12_384": 384,
    "SwinTransformerV2_tiny_patch4_window8_256": 256,
    "SwinTransformerV2_tiny_patch4_window16_256": 256,
    "SwinTransformerV2_small_patch4_window8_256": 256,
    "SwinTransformerV2_small_patch4_window16_256": 256,
    "SwinTransformerV2_base_patch4_window8_256": 256,
    "SwinTransformerV2_base_patch4_window16_256": 256,
    "SwinTransformerV2_base_patch4_window24_384": 384,
    "SwinTransformerV2_large_patch4_window16_256": 256,
    "SwinTransformerV2_large_patch4_window24_384": 384,
    "CSWinTransformer_base_384": 384,
    "CSWinTransformer_large_384": 384,
    # no config at all; ResNeXt101_wsl.md's speed table lists it at 320 (FixRes: same net, higher resolution)
    "Fix_ResNeXt101_32x48d_wsl": 320,
}
# Models with no config of their own at the commit read; the size used instead and where it comes from.
NO_CONFIG = {
    "ResNet50_vc": "224: ppcls/configs/ResNet/ResNet50_vc.yaml as last present (deleted in 7b77835c, 2021-06-16)",
    "RegNetX_4GF": "224: ppcls/configs/RegNet/RegNetX_4GF.yaml as last present (deleted in 7b77835c, 2021-06-16); "
    "RegNet.md speed table also 224 (the other RegNetX configs at HEAD crop 256)",
    "EfficientNetB0_small": "224: no config ever; EfficientNet.md speed table lists 224",
    "SE_HRNet_W64_C_ssld": "224: no config; HRNet.md speed table lists 224",
    "Fix_ResNeXt101_32x48d_wsl": "320: no config; ResNeXt101_wsl.md speed table lists 320",
}
# Table names whose network is built by a constructor of another name (checked against the installed ppcls).
ALIASES = {"Fix_ResNeXt101_32x48d_wsl": "ResNeXt101_32x48d_wsl"}
# Rows marked <sup>[1]</sup> (ImageNet-22k pretrained, fine-tuned on 1k) share their name with a 1k-only row of
# different timings; they get this suffix, as in their weight file names (*_22kto1k_pretrained.pdparams).
SUFFIX_22K = "_22kto1k"

_BR = re.compile(r"<br\s*/?>", re.I)
_TAG = re.compile(r"<[^>]+>")
_SUP = re.compile(r"<sup>.*?</sup>", re.I)


def _cell(text: str) -> str:
    return _TAG.sub("", _SUP.sub("", _BR.sub("", text))).strip()


def _split(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_markdown(text: str) -> tuple[list[dict], list[str]]:
    """GPU-table rows (dicts of the CSV fields that come from the markdown, plus 'section', 'line') and notes."""
    lines = text.splitlines()
    rows, notes, section = [], [], ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            section = line.lstrip("#").strip()
        if not (line.startswith("|") and "模型" in line):
            i += 1
            continue
        hdr = [_BR.sub(" ", h) for h in _split(line)]
        i += 2  # header and |---| separator
        body = []
        while i < len(lines) and lines[i].startswith("|"):
            body.append((i + 1, _split(lines[i])))
            i += 1
        tcol = {m.group(1): k for k, h in enumerate(hdr) if (m := re.match(r"time\(ms\)\s*bs=(\d+)$", h))}
        if not tcol:
            notes.append(f"skipped table in '{section}' (no GPU time columns): {' | '.join(hdr[:6])}")
            continue
        fcol = next(k for k, h in enumerate(hdr) if h.startswith("FLOPs"))
        in_mflops = hdr[fcol] == "FLOPs(M)"
        pcol = hdr.index("Params(M)")
        if set(tcol) != {"1", "4", "8"}:
            notes.append(f"'{section}': time columns only for bs={','.join(sorted(tcol))}")
        for lineno, cells in body:
            raw = cells[0]
            name = _cell(raw)
            if "<sup>[1]</sup>" in raw.replace(" ", ""):
                name += SUFFIX_22K

            def num(k: int, cells: list[str] = cells) -> str:
                v = _cell(cells[k]) if k is not None and k < len(cells) else ""
                return "" if v in ("", "-") else v

            flops = num(fcol)
            if flops and in_mflops:
                flops = str(Decimal(flops).scaleb(-3))
            rows.append(
                {
                    "model": name,
                    "bs1_ms": num(tcol.get("1")),
                    "bs4_ms": num(tcol.get("4")),
                    "bs8_ms": num(tcol.get("8")),
                    "flops_g": flops,
                    "params_m": num(pcol),
                    "section": section,
                    "line": lineno,
                }
            )
    return rows, notes


def merge(rows: list[dict]) -> tuple[list[dict], list[str]]:
    """One row per model name; a later (family-table) copy replaces an earlier (section 2.1) one in place."""
    keep: dict[str, dict] = {}
    notes = []
    fields = ["bs1_ms", "bs4_ms", "bs8_ms", "flops_g", "params_m"]
    for r in rows:
        old = keep.get(r["model"])
        if old is None:
            keep[r["model"]] = r
            continue
        diff = [
            f"{f} {old[f] or '-'} (line {old['line']}) vs {r[f] or '-'} (line {r['line']})"
            for f in fields
            if old[f] != r[f]
        ]
        notes.append(
            f"{r['model']}: in '{old['section']}' and '{r['section']}', kept the latter"
            + (f"; they differ: {'; '.join(diff)}" if diff else "; identical")
        )
        keep[r["model"]] = r
    return list(keep.values()), notes


def ppcls_name(model: str, available: set[str]) -> str:
    """Installed constructor for a table name: itself, an alias, or the name less _ssld / _22kto1k."""
    for cand in (model, ALIASES.get(model, ""), re.sub(rf"(_ssld|{SUFFIX_22K})$", "", model)):
        if cand in available:
            return cand
    return ""


def input_size(model: str) -> int:
    base = re.sub(rf"(_ssld|{SUFFIX_22K})$", "", model)
    return INPUT_SIZE.get(model, INPUT_SIZE.get(base, 224))


def sizes_from_configs(cfg_dir: Path) -> dict[str, tuple[int | None, int | None, str]]:
    """{config stem: (Eval crop, Infer crop, path)} from a local copy of ppcls/configs/ImageNet."""
    import yaml

    def crop(ops: list | None) -> int | None:
        size = None
        for op in ops or []:
            if isinstance(op, dict):
                for k, v in op.items():
                    crop_op = k == "CropImage" or (k == "ResizeImage" and size is None)
                    if crop_op and v and "size" in v:
                        size = v["size"]
        return size

    out = {}
    for p in sorted(cfg_dir.glob("*/*.yaml")):
        c = yaml.safe_load(p.read_text()) or {}
        ev = ((c.get("DataLoader") or {}).get("Eval") or {}).get("dataset", {}).get("transform_ops")
        inf = (c.get("Infer") or {}).get("transforms")
        out[p.stem] = (crop(ev), crop(inf), str(p.relative_to(cfg_dir)))
    return out


WORKER = r"""
import json, sys, time
import numpy as np
import paddle
paddle.set_device("cpu")
import {mod} as bb
name, size = sys.argv[1], int(sys.argv[2])
t0 = time.perf_counter()
net = getattr(bb, name)(class_num=1000)
net.eval()
params = int(sum(int(np.prod(p.shape)) for p in net.parameters()))
x = paddle.randn([1, 3, size, size], dtype="float32")
with paddle.no_grad():
    y = net(x)
if isinstance(y, dict):
    y = next(iter(y.values()))
if isinstance(y, (list, tuple)):
    y = y[0]
print("RESULT " + json.dumps({{"seconds": time.perf_counter() - t0, "params": params, "out_shape": list(y.shape)}}))
"""


def check_build(name: str, size: int, timeout: float) -> dict:
    """Build + one forward in a fresh process; 'ok' iff it finished within timeout seconds (import time excluded)."""
    code = WORKER.format(mod=BACKBONE)
    try:
        p = subprocess.run(
            [sys.executable, "-c", code, name, str(size)],
            capture_output=True,
            text=True,
            timeout=timeout + 60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "why": f"timed out (> {timeout + 60:.0f} s including import)"}
    res = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode != 0 or not res:
        err = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
        return {"ok": False, "why": (err[-1] if err else f"exit {p.returncode}")[:300]}
    r = json.loads(res[-1][7:])
    r["ok"] = r["seconds"] <= timeout
    if not r["ok"]:
        r["why"] = f"build+forward took {r['seconds']:.1f} s > {timeout:.0f} s"
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", required=True, type=Path, help="local copy of model_list.md")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--configs", type=Path, help="local copy of ppcls/configs/ImageNet, to check INPUT_SIZE")
    ap.add_argument("--log", type=Path, help="write per-model build results (JSON) here")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--jobs", type=int, default=2, help="build checks run at once")
    args = ap.parse_args(argv)

    rows, notes = parse_markdown(args.markdown.read_text(encoding="utf-8"))
    n_raw = len(rows)
    rows, merge_notes = merge(rows)
    import importlib

    bb = importlib.import_module(BACKBONE)
    available = {n for n in dir(bb) if not n.startswith("_") and callable(getattr(bb, n))}
    for r in rows:
        r["ppcls_name"] = ppcls_name(r["model"], available)
        r["input_size"] = input_size(r["model"])

    if args.configs:
        cfg = sizes_from_configs(args.configs)
        for r in rows:
            base = ALIASES.get(r["model"]) if r["model"] in NO_CONFIG else None
            key = re.sub(rf"(_ssld|{SUFFIX_22K})$", "", r["model"])
            got = cfg.get(key) or (cfg.get(base) if base else None)
            if got is None:
                print(f"config: none for {r['model']} (using {r['input_size']}: {NO_CONFIG.get(r['model'], '?')})")
            elif not (got[0] == got[1] == r["input_size"]):
                print(f"config: {r['model']}: Eval {got[0]} / Infer {got[1]} in {got[2]}, table {r['input_size']}")

    jobs = sorted({(r["ppcls_name"], r["input_size"]) for r in rows if r["ppcls_name"]})
    results: dict[tuple[str, int], dict] = {}
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        futs = {job: ex.submit(check_build, *job, args.timeout) for job in jobs}
        for job, fut in futs.items():
            results[job] = fut.result()
            r = results[job]
            print(
                f"[{time.perf_counter() - t0:6.0f}s] {job[0]} @{job[1]}: "
                + ("ok" if r["ok"] else "FAIL " + r["why"])
                + (f" ({r['seconds']:.1f} s, {r['params'] / 1e6:.2f} M params)" if "params" in r else ""),
                flush=True,
            )

    mismatch = []
    for r in rows:
        res = results.get((r["ppcls_name"], r["input_size"])) if r["ppcls_name"] else None
        r["builds_here"] = int(bool(res and res["ok"]))
        if res and "params" in res and r["params_m"]:
            built = res["params"] / 1e6
            if abs(built - float(r["params_m"])) > 0.02 * float(r["params_m"]) + 0.01:
                mismatch.append(f"{r['model']}: published {r['params_m']} M, {r['ppcls_name']} has {built:.2f} M")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=HEADER, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    if args.log:
        args.log.write_text(json.dumps({f"{k[0]}@{k[1]}": v for k, v in results.items()}, indent=1))

    print(
        f"\n{n_raw} GPU-table rows -> {len(rows)} models; {sum(bool(r['ppcls_name']) for r in rows)} with "
        f"ppcls_name; {sum(r['builds_here'] for r in rows)} build here; wrote {args.out}"
    )
    for title, items in (
        ("tables", notes),
        ("merged", merge_notes),
        ("params mismatch", mismatch),
        ("no ppcls_name", [r["model"] for r in rows if not r["ppcls_name"]]),
        ("build failures", [f"{k[0]}@{k[1]}: {v['why']}" for k, v in results.items() if not v["ok"]]),
    ):
        if items:
            print(f"\n{title}:")
            for it in items:
                print(f"  {it}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
