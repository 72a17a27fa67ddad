#!/usr/bin/env python3
"""The attention op's versions side by side: yggc::attend_rows_v1 (what packages compiled before v2 call) and
attend_rows_v2 (kernels/pair_scores.cpp's VDPBF16PS scores on AVX512-BF16), on SmolLM2-shaped caches.

Per dtype, context and row count W: medians of interleaved calls (one layer's op, times --layers), v2 / v1, each
op's worst error against float64 attention, and whether the last row of the W-row call is bit-identical to a
one-row call of that row. The op alone, cache in this process's caches: a package pays the KV reads on top.

    python tools/bench_attention_ops.py --threads 2
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from yggc.passes import kernel_library

from yggc.runtime import kernel_ops


def inputs(width: int, context: int, dtype: torch.dtype, heads: int, kv_heads: int, head_dim: int):
    """q [H, W, hd], keys and values [KV, S, hd] (views of a 4096-slot cache), causal mask [W, S]."""
    g = torch.Generator().manual_seed(context + width)
    view = (context + width + 63) // 64 * 64  # the cache view rounds up, as CacheLayout.view does
    k, v = (torch.randn(kv_heads, 4096, head_dim, generator=g).to(dtype) for _ in range(2))
    q = torch.randn(heads, width, head_dim, generator=g).to(dtype)
    rows = torch.arange(context, context + width)
    return q, k[:, :view], v[:, :view], torch.arange(view)[None, :] <= rows[:, None]


def worst_error(out: torch.Tensor, q, keys, values, mask) -> float:
    ref = F.scaled_dot_product_attention(q.double()[None], keys.double()[None], values.double()[None],
                                         attn_mask=mask[None, None], enable_gqa=True)[0]
    return float((out.double() - ref).abs().max())


def interleaved_ms(ops, args, repeats: int) -> list[float]:
    times = [[] for _ in ops]
    for _ in range(3):
        for op in ops:
            op(*args)
    for _ in range(repeats):
        for op, t in zip(ops, times):
            t0 = time.perf_counter()
            op(*args)
            t.append(time.perf_counter() - t0)
    return [1e3 * statistics.median(t) for t in times]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--widths", default="1,4,8,32")
    ap.add_argument("--contexts", default="256,1984")
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--heads", default="9,3,64", help="query heads, key/value heads, head_dim (SmolLM2's)")
    ap.add_argument("--layers", type=int, default=30, help="times shown are one op call times this")
    ap.add_argument("--repeats", type=int, default=100)
    ap.add_argument("--threads", type=int)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    kernel_library.build()
    ops = [getattr(torch.ops.yggc, name) for name in ("attend_rows_v1", kernel_ops.ATTEND_OP)]
    H, KV, hd = map(int, args.heads.split(","))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {torch.backends.cpu.get_cpu_capability()}; "
          f"ms per {args.layers} calls")
    print("| dtype | context | W | v1 ms | v2 ms | v2 / v1 | v1 error | v2 error | v2 row invariant |")
    print("|---|---|---|---|---|---|---|---|---|")
    for dtype in (getattr(torch, d) for d in args.dtypes.split(",")):
        for context in map(int, args.contexts.split(",")):
            for width in map(int, args.widths.split(",")):
                q, k, v, mask = inputs(width, context, dtype, H, KV, hd)
                old, new = (args.layers * t for t in interleaved_ms(ops, (q, k, v, mask), args.repeats))
                errors = [worst_error(op(q, k, v, mask), q, k, v, mask) for op in ops]
                last = torch.equal(ops[1](q[:, -1:], k, v, mask[-1:])[:, 0], ops[1](q, k, v, mask)[:, -1])
                print(f"| {str(dtype)[6:]} | {context} | {width} | {old:.3f} | {new:.3f} | {new / old:.2f} | "
                      f"{errors[0]:.1e} | {errors[1]:.1e} | {last} |")


if __name__ == "__main__":
    main()
