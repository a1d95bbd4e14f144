"""Fused kernels as the user runs them: flash attention, Paddle's incubate fused norms, rotary embedding, bias +
activation, swiglu and fused linear, each traced as ONE kernel with its own FLOPs and bytes; and the rewrite of an
eager attention core (matmul -> softmax -> matmul) into one flash-attention kernel for ``attention: flash``.

Tracing (:func:`~paddlefit.probe.fused_hooks.patch_fused`, installed by
:func:`~paddlefit.probe.flop_functional.patch_functional`): the functions are wrapped like every functional op
(:meth:`~paddlefit.probe.flops.FlopCounter.wrap`), so whatever the call runs inside, on this CPU, is not traced
again (and ``_math_attention``, the CPU path of both attention functions, is wrapped in their modules too, so a
function imported by name before the trace began is seen).
That matters because the CPU probe cannot run the GPU
kernels: Paddle 3.3.1's ``F.scaled_dot_product_attention`` picks its ``math`` backend off the GPU
(``python/paddle/nn/functional/sdpa.py``, ``select_sdp_for_sdpa``) and ``flash_attention`` does the same
(``python/paddle/nn/functional/flash_attention.py``, ``_select_sdp``); both then run ``_math_attention``
(transpose, matmul, softmax, dropout, matmul), which the trace replaces by the single kernel the GPU runs. The
incubate ops below have no CPU kernel (``fused_rotary_position_embedding``, ``fused_bias_act``,
``fused_gemm_epilogue``) or no CPU backward (``fused_rms_norm``: ``fused_rms_norm_quant_grad`` is not registered;
``fused_layer_norm`` builds no grad node);
:func:`~paddlefit.probe.fused_ref.cpu_reference_kernels` runs a reference of their math made of ordinary Paddle
ops during the probe, so such a model can be probed at all (its CPU memory and time are those of the reference;
the trace is the fused kernel's). Paddle's fused transformer layers (``fused_multi_head_attention``,
``fused_feedforward``) are not one kernel on the GPU either: their reference runs the kernels their GPU ops run,
each traced, marked with the op's name (:func:`~paddlefit.probe.fused_ref.current_scope`).

No Paddle import: the rewrite and formulas are plain data.
"""

from __future__ import annotations

from dataclasses import replace

from paddlefit.estimate.optrace import OpTrace, TensorRef, TracedOp

#: Backward FLOPs of flash attention / its forward FLOPs: the backward runs five GEMMs of the forward's two's size
#: (recomputing S = Q·Kᵀ, then dV = Pᵀ·dO, dP = dO·Vᵀ, dQ = dS·K, dK = dSᵀ·Q), i.e. 2.5x (Dao, FlashAttention-2,
#: arXiv 2307.08691, 2023, §3 and the FLOPs formula of its benchmarks, §4.1: "backward pass = 2.5x forward").
FLASH_BWD_FACTOR = 2.5


def flash_attention_flops(
    batch_heads: int, seq_q: int, seq_k: int, head_dim: int, head_dim_v: int | None = None, causal: bool = False
) -> int:
    """Forward FLOPs of flash attention: the two GEMMs S = Q·Kᵀ and O = P·V, 2·BH·Sq·Sk·(D + Dv) = 4·B·H·Sq·Sk·D,
    halved under a causal mask (Dao 2023, arXiv 2307.08691, §4.1's FLOPs formula; softmax not counted).

    Args:
        batch_heads: batch x query heads (with grouped-query attention every query head does its own GEMMs).
        seq_q, seq_k: query and key sequence lengths, tokens.
        head_dim, head_dim_v: head size of Q/K and of V (None = ``head_dim``).
        causal: a causal mask (only the lower triangle is computed).
    """
    dv = head_dim if head_dim_v is None else head_dim_v
    flops = 2 * batch_heads * seq_q * seq_k * (head_dim + dv)
    return flops // 2 if causal else flops


def attention_gemm(batch_heads: int, seq_q: int, seq_k: int, head_dim: int) -> tuple[int, int, int, int]:
    """(batch, M, N, K) a flash-attention kernel is timed as: ``batch_heads`` GEMMs of an Sq x D output reduced over
    Sk (FlashAttention-2 §3.2: one thread block per (batch, head, block of Q rows), looping over K/V blocks, so its
    grid is the output O's tiles, not S's)."""
    return batch_heads, seq_q, head_dim, seq_k


_SCORE_OPS = ("add", "subtract", "multiply", "divide", "view")


def _attention_core(
    ops: list[TracedOp], i: int, producer: dict[int, int], consumers: dict[int, list[int]]
) -> tuple[list[int], TracedOp] | None:
    """The eager attention core around the softmax ``ops[i]`` and the flash-attention op that replaces it:
    (indices of the core's ops, the new op), or None when ``ops[i]`` is not one.

    The core, by data flow: a ``matmul`` of two activations S = Q·Kᵀ (GEMM (G, Sq, Sk, D)), optionally a scale of
    Q or K just before it, then element-wise ops on S (scale, mask add) and views, the softmax, optionally dropout
    and views, and the ``matmul`` P·V (GEMM (G, Sq, Dv, Sk)); every intermediate read by the next op only (probs
    the model also returns stay eager). Other inputs of the mask adds become the kernel's mask input. A softmax
    inside a fused Paddle op (``fused_attention``: :attr:`TracedOp.scope`) is not one: that op's GPU kernel has no
    flash path, and the user cannot switch one on without rewriting the model.
    """
    if ops[i].scope:
        return None

    def only(t: TensorRef) -> int | None:
        c = consumers.get(t.tid, [])
        return c[0] if len(c) == 1 else None

    def is_qk(o: TracedOp) -> bool:
        return o.op == "matmul" and o.gemm is not None and sum(not t.param and t.floating for t in o.inputs) == 2

    core, masks = [i], []
    t = ops[i].inputs[0]
    while True:  # back from the softmax to Q·Kᵀ
        j = producer.get(t.tid)
        if j is None or only(t) is None:
            return None
        o = ops[j]
        core.append(j)
        if is_qk(o):
            qk = o
            break
        if o.op not in _SCORE_OPS or not o.inputs:
            return None
        t, *rest = sorted(o.inputs, key=lambda x: (x.numel != t.numel, x.tid not in producer))
        masks += [x for x in rest if x.floating and not x.param]
    t, pv = ops[i].outputs[0], None
    while pv is None:  # forward from the softmax to P·V
        j = only(t)
        if j is None:
            return None
        o = ops[j]
        core.append(j)
        if o.op == "matmul" and o.gemm is not None and o.inputs and o.inputs[0].tid == t.tid and len(o.inputs) > 1:
            pv = o
        elif o.op in ("dropout", "view") and o.outputs:
            t = o.outputs[0]
        else:
            return None
    qkv = list(qk.inputs[:2])
    for n, x in enumerate(qkv):  # a scale of Q (nn.MultiHeadAttention) or K right before the GEMM is absorbed
        j = producer.get(x.tid)
        if j is not None and ops[j].op in ("multiply", "divide") and len(ops[j].inputs) == 1 and only(x) is not None:
            core.append(j)
            qkv[n] = ops[j].inputs[0]
    g, sq, sk, d = qk.gemm  # type: ignore[misc]
    dv = pv.gemm[2]  # type: ignore[index]
    new = TracedOp(
        "flash_attn",
        "attention",
        flash_attention_flops(g, sq, sk, d, dv),
        (*qkv, pv.inputs[1], *masks),
        pv.outputs,
        attention_gemm(g, sq, sk, d),
    )
    return core, new


def flash_rewrite(ops: list[TracedOp]) -> tuple[list[TracedOp], int]:
    """The forward ``ops`` as they run with flash attention: every eager attention core (:func:`_attention_core`)
    replaced by one ``flash_attn`` op (class ``attention``) at the place of its P·V matmul, with the same FLOPs as
    the core's two matmuls (softmax not counted, as in FlashAttention-2's formula) and its tensors Q, K, V, the
    mask and O; the S x S scores and probabilities are gone, so neither their kernels nor the bytes kept for the
    backward remain. A mask add stays a dense mask input (the trace cannot tell a causal mask from another, so
    FLOPs are not halved for it). Transposes around the core stay. Returns (ops, attention blocks replaced).
    """
    producer = {t.tid: i for i, o in enumerate(ops) for t in o.outputs}
    consumers: dict[int, list[int]] = {}
    for i, o in enumerate(ops):
        for t in o.inputs:
            consumers.setdefault(t.tid, []).append(i)
    drop: set[int] = set()
    at: dict[int, TracedOp] = {}
    for i, o in enumerate(ops):
        if o.op == "softmax" and o.inputs and o.outputs and i not in drop:
            found = _attention_core(ops, i, producer, consumers)
            if found is not None and not drop.intersection(found[0]):
                drop.update(found[0])
                at[max(found[0])] = found[1]
    out = [at.get(i, o) for i, o in enumerate(ops) if i not in drop or i in at]
    return out, len(at)


def flash_trace(trace: OpTrace) -> tuple[OpTrace, int]:
    """``trace`` with :func:`flash_rewrite` applied to both of its batch sizes; (trace, attention blocks replaced in
    the first)."""
    ops1, n = flash_rewrite(trace.ops1)
    ops2 = flash_rewrite(trace.ops2)[0] if trace.ops2 else []
    return replace(trace, ops1=ops1, ops2=ops2), n


def attention_note(blocks: int, trace: OpTrace) -> str:
    """The plan's note on ``attention: flash``: how many eager attention cores :func:`flash_rewrite` replaced, or
    why none (the model already calls a fused attention, or has no matmul -> softmax -> matmul core)."""
    if blocks:
        return (
            f"attention: flash: {blocks} eager attention core{'s' if blocks > 1 else ''} (matmul -> softmax -> "
            "matmul) planned as one flash-attention kernel each on GPUs that run it (CC 8.0+, fp16/bf16); the "
            "cpu row runs the model as written"
        )
    if any(o.cls == "attention" for o in trace.ops1):
        return "attention: flash: the model already calls a fused attention; nothing to replace"
    if any(o.scope == "fused_attention" for o in trace.ops1):
        return (
            "attention: flash: the model calls Paddle's fused_attention (paddle.incubate.nn."
            "FusedMultiHeadAttention), whose GPU kernel has no flash path; planned as written"
        )
    return "attention: flash: no eager attention core (matmul -> softmax -> matmul) in the trace; planned as written"


def fused_amp_note(trace: OpTrace, precision: str) -> str:
    """The plan's note when a model calls Paddle's fused transformer ops under bf16 AMP: neither is on a bf16 list
    (``python/paddle/amp/amp_lists.py``: ``ONLY_FP16_WHITE_LIST``), so Paddle runs them promoted, fp32 at O1
    (:func:`~paddlefit.estimate.amp.assign_dtypes`); empty otherwise."""
    scopes = sorted({o.scope for o in trace.ops1 if o.scope})
    if not scopes or not precision.startswith("bf16"):
        return ""
    return (
        f"{' and '.join(scopes)} are on Paddle's fp16 AMP white list only: under {precision} they run promoted "
        "(fp32 when an input or parameter is fp32, as at O1); fp16 AMP runs them in half"
    )
