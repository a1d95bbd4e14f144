"""Benchmark: plan Llama-2 7B/13B/70B training on 8 and 64 GPUs of A100-80GB and H100 at sequence length 4096.

Global batch: 1024 sequences = 4M tokens, Llama 2's pre-training batch (Touvron et al. 2023, arXiv 2307.09288
§2.2). bf16 AMP O2, AdamW, FlashAttention, 8 GPUs per node, default compute efficiency and network per GPU class
(see ``paddlefit.llm.perf``). Prints the best layout per case with memory per GPU, tokens/s, MFU and the wall time of
each search (target: <= 5 s). Pure Python: no Paddle import. Run: ``python bench/llm_plan.py``.

Out-of-sample check: Llama 2's pre-training cost in A100-80GB GPU-hours for 2.0T tokens (Touvron et al. 2023, arXiv
2307.09288, §2.2.1 and table 2: 7B 184,320 h, 70B 1,720,320 h; 4M-token batches, seq 4096) gives the throughput Meta
sustained per GPU. It includes restarts and evaluation, so it is a lower bound of the step throughput; the best
64-GPU A100 plan is compared with it (target: predicted / published 0.75-1.33x, as ``bench/cost_sanity.py``). Nothing
in paddlefit is fitted to these figures.
"""

from __future__ import annotations

import sys
import time

from paddlefit.catalog.gpus import get_gpu
from paddlefit.catalog.transformer_configs import LLM_CONFIGS
from paddlefit.llm.memory import TrainSetup
from paddlefit.llm.search import search
from paddlefit.units import GIB

SEQ_LEN = 4096
GLOBAL_BATCH = 1024
TARGET_S = 5.0
PUBLISHED_GPU_HOURS = {"llama-2-7b": 184_320, "llama-2-70b": 1_720_320}  # Touvron et al. 2023 table 2, A100-80GB
PUBLISHED_TOKENS = 2.0e12


def main() -> int:
    """Run the 12 searches; exit 1 if any search is slower than the target."""
    setup = TrainSetup(SEQ_LEN)
    print(
        f"seq {SEQ_LEN}, global batch {GLOBAL_BATCH} sequences ({GLOBAL_BATCH * SEQ_LEN / 1e6:.2f}M tokens), "
        f"{setup.precision.value}, {setup.optimizer.value}, flash attention, 8 GPUs/node"
    )
    header = (
        f"{'model':<12} {'gpu':<15} {'N':>3} {'layouts':>7} {'fit':>5} {'search':>8}  {'dp':>3} {'shard':>6} "
        f"{'tp':>2} {'pp':>2} {'mb x acc':>9} {'recomp':>9} {'sp':>3} {'GiB/GPU':>8} {'tokens/s':>10} {'MFU':>6}"
    )
    print(header)
    print("-" * len(header))
    slow = 0
    best64: dict[str, float] = {}
    for name in ("llama-2-7b", "llama-2-13b", "llama-2-70b"):
        for gpu_name in ("A100-SXM4-80GB", "H100-SXM"):
            gpu = get_gpu(gpu_name)
            for n in (8, 64):
                t0 = time.perf_counter()
                r = search(LLM_CONFIGS[name], setup, gpu, n, GLOBAL_BATCH)
                wall = time.perf_counter() - t0
                slow += wall > TARGET_S
                head = f"{name:<12} {gpu.name:<15} {n:>3} {r.evaluated:>7} {len(r.fitting):>5} {wall:>7.2f}s"
                if not r.fitting:
                    low = r.plans[0]
                    print(
                        f"{head}  no layout fits (smallest peak {low.memory.peak / GIB:.0f} GiB/GPU > "
                        f"{low.memory.usable / GIB:.0f} usable)"
                    )
                    continue
                b = r.fitting[0]
                if gpu_name == "A100-SXM4-80GB" and n == 64:
                    best64[name] = b.tokens_per_s / n
                lay = b.layout
                print(
                    f"{head}  {lay.dp:>3} {('stage' + str(lay.sharding)) if lay.sharding else '-':>6} {lay.tp:>2} "
                    f"{lay.pp:>2} {f'{lay.micro_batch} x {lay.accum}':>9} {lay.recompute:>9} "
                    f"{'yes' if lay.sequence_parallel else '-':>3} {b.memory.peak / GIB:>8.1f} "
                    f"{b.tokens_per_s:>10,.0f} {b.mfu:>6.1%}"
                )
    a100, h100 = (
        search(LLM_CONFIGS["llama-2-7b"], setup, get_gpu(g), 8, GLOBAL_BATCH) for g in ("A100-SXM4-80GB", "H100-SXM")
    )
    for r in (a100, h100):
        print(
            f"{r.gpu.name}: compute at {r.mfu:.1%} of dense peak ({r.mfu_source}); network {r.network_gbit_s:,.0f} "
            f"Gbit/s per node ({r.network_source})"
        )
    print(f"searches slower than {TARGET_S:.0f} s: {slow}")
    off = 0
    print("out-of-sample: predicted (best 64-GPU A100-80GB plan) vs Llama 2 paper (GPU-hours for 2.0T tokens)")
    for name, hours in PUBLISHED_GPU_HOURS.items():
        published = PUBLISHED_TOKENS / (hours * 3600)
        ratio = best64[name] / published
        ok = 0.75 <= ratio <= 1.33
        off += not ok
        print(
            f"  {name}: predicted {best64[name]:,.0f} tokens/s/GPU, published {published:,.0f} ({hours:,} GPU-hours) "
            f"-> {ratio:.2f}x, target 0.75-1.33x {'MET' if ok else 'MISSED'}"
        )
    return 1 if slow or off else 0


if __name__ == "__main__":
    sys.exit(main())
