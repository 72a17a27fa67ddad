#!/usr/bin/env python3
"""Attention formulations inside the O2 verifier package: T(W) and whether rows stay bit-identical.

    python tools/bench_attention.py -m $(yggc pull smollm2) --attention bmm --out /tmp/v-bmm.pt2

kernel:  the attention kernel op (yggc/runtime/kernels/attend_rows.cpp), the CPU bundle's; batch-invariant
rowwise: graphs.llama.attend_rowwise, the CUDA bundle's (broadcast products and sums; batch-invariant)
sdpa:    F.scaled_dot_product_attention (fast; its rows are not batch-invariant)
bmm:     two float32 batched GEMMs (scores over head_dim, then P @ V over slots); Inductor's C++ GEMM
         template does not take them, so ATen is allowed beside it (--backends CPP,ATEN)
An experiment for issue #20, never a bundle: the package is lowered with the formulation patched in.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import yggc.graphs.llama as llama
import yggc.passes.lower as lower
from yggc.passes import kernel_library
from yggc.passes.profile import bucket_latency_ms

from yggc.runtime import kernel_ops, loading
from yggc.runtime.buckets import CompiledModel
from yggc.runtime.cache_layout import causal_rows

WIDTHS = (1, 2, 4, 9, 17, 33, 64)


def attend_sdpa(q, keys, values, mask):
    return F.scaled_dot_product_attention(q[None], keys[None], values[None], attn_mask=mask[None, None],
                                          enable_gqa=True)[0]


def attend_bmm(q, keys, values, mask):
    """q [H, W, hd]; keys, values [KV, S, hd]; mask [W, S] -> [H, W, hd], in float32 GEMMs."""
    (H, W, hd), n_kv, S = q.shape, keys.shape[0], keys.shape[1]
    G = H // n_kv
    scores = torch.bmm(q.reshape(n_kv, G * W, hd).float(), keys.float().transpose(1, 2)) * hd ** -0.5
    scores = scores.view(n_kv, G, W, S).masked_fill(~mask[None, None], float("-inf"))
    e = torch.exp(scores - scores.amax(-1, keepdim=True))  # [KV, G, W, S]
    num = torch.bmm(e.view(n_kv, G * W, S), values.float()).view(n_kv, G, W, hd)
    return (num / e.sum(-1, keepdim=True)).to(q.dtype).view(H, W, hd)


FORMULATIONS = {"kernel": kernel_ops.attend_rows, "rowwise": llama.attend_rowwise, "sdpa": attend_sdpa,
                "bmm": attend_bmm}


def invariant_rows(model: CompiledModel, layout, width: int = 33, context: int = 120) -> int:
    """Rows of one `width`-row call bit-identical to one-row calls over the same slots (AR)."""
    ids = torch.randint(0, model.cfg.vocab_size, (context + width,), generator=torch.Generator().manual_seed(0))
    for c0 in range(0, context, 64):
        pos = torch.arange(c0, min(context, c0 + 64))
        model(ids[pos], pos, pos, causal_rows(pos, layout.view(int(pos[-1]) + 1)))
    rows = torch.arange(context, context + width)
    wide = model(ids[rows], rows, rows, causal_rows(rows, layout.view(context + width)))
    same = 0
    for j, p in enumerate(rows):
        p = p.view(1)
        same += torch.equal(model(ids[p], p, p, causal_rows(p, layout.view(int(p) + 1)))[0], wide[j])
    return same


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--attention", choices=sorted(FORMULATIONS), default="kernel")
    ap.add_argument("--backends", help="max_autotune_gemm_backends (default: CPP, or CPP,ATEN for bmm)")
    ap.add_argument("--out", type=Path, required=True, help="the package (.pt2; reused when present)")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--contexts", default="32,256,768")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    v = loading.load(args.model, loading.parse_dtype(args.dtype), 1024)
    if not args.out.exists():
        kernel_library.build()
        lower.exported_attention = lambda device: FORMULATIONS[args.attention]
        lower.CPU_GEMM_BACKENDS = args.backends or ("CPP,ATEN" if args.attention == "bmm" else "CPP")
        t0 = time.perf_counter()
        lower.lower_model(v.graph, max(WIDTHS), 1024, args.out, "cpu", "O2")
        print(f"lowered in {time.perf_counter() - t0:.0f} s")
    model = CompiledModel(v.graph, {1: args.out}, "O2", "inductor", max(WIDTHS))
    print(f"{args.attention}: T(W) ms at W = {', '.join(map(str, WIDTHS))}")
    for ctx in (int(c) for c in args.contexts.split(",")):
        ms = [bucket_latency_ms(model, w, v.layout, ctx, 8) for w in WIDTHS]
        print(f"  context {ctx}: " + " / ".join(f"{t:.2f}" for t in ms))
    print(f"rows bit-identical, one 33-row call vs 33 one-row calls: {invariant_rows(model, v.layout)} of 33")


if __name__ == "__main__":
    main()
