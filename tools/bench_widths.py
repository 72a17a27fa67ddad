#!/usr/bin/env python3
"""The verify-cost curve T(W) of compiled bundles beside the memory floor.

For each bundle: the verifier's compiled forward at W rows (W = 1, 2, 4, ..., 64; each row attends to
`--context` cached tokens plus the rows before it), the median of `--repeats` calls, and T(W)/T(1).
The floor is the verifier's weight bytes over the measured main-memory bandwidth (yggc.bench.floor).
Widths a bundle has not compiled are skipped (O1 bundles hold a few widths; O2 takes every width).

    python tools/bench_widths.py fp32.bundle bf16.bundle --threads 2
"""
from __future__ import annotations

import argparse
import resource
import time

import torch
from yggc.passes.profile import probe_tokens

from yggc.bench.floor import copy_gbs, read_gbs, weight_bytes
from yggc.runtime import Runtime
from yggc.runtime.cache_layout import causal_rows
from yggc.runtime.timing import median_ms

WIDTHS = (1, 2, 4, 8, 16, 32, 64)


def forward_ms(model, width: int, context: int, layout, repeats: int) -> float:
    """Median ms of one forward of `width` rows (distinct tokens: an MoE routes them apart) after `context`
    cached tokens."""
    slots = torch.arange(context, context + width)
    mask, ids = causal_rows(slots, layout.view(context + width)), probe_tokens(width, model.cfg.vocab_size, "cpu")
    with torch.inference_mode():
        return median_ms(lambda: model(ids, slots, slots, mask), repeats, warmup=2)


def curve(bundle: str, widths: tuple[int, ...], context: int, repeats: int) -> tuple[dict[int, float], int, float]:
    """-> ({width: ms}, verifier weight bytes, seconds from Runtime.load to its return)."""
    t0 = time.perf_counter()
    rt = Runtime.load(bundle)
    load_s = time.perf_counter() - t0
    verifier, layout = rt.compiled["verifier"], rt.verifier.layout
    ms = {w: forward_ms(verifier, w, context, layout, repeats) for w in widths if verifier.runner(w) is not None}
    return ms, weight_bytes(rt.verifier.graph), load_s


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundles", nargs="+", help="bundles written by `yggc compile`")
    ap.add_argument("--widths", default=",".join(map(str, WIDTHS)), help="verify widths (default 1,2,4,...,64)")
    ap.add_argument("--context", type=int, default=256, help="cached tokens before the rows (default 256)")
    ap.add_argument("--repeats", type=int, default=20, help="timed calls per width; the median is shown")
    ap.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    widths = tuple(int(w) for w in args.widths.split(","))
    gbs = max(read_gbs(1 << 30, 5), copy_gbs(1 << 29, 5))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {torch.backends.cpu.get_cpu_capability()}, "
          f"main-memory bandwidth {gbs:.1f} GB/s, context {args.context}")
    print("| bundle | floor ms | " + " | ".join(f"T({w})" for w in widths) + " | T(8)/T(1) | T(32)/T(1) | load s |")
    print("|---" * (len(widths) + 5) + "|")
    for bundle in args.bundles:
        ms, n_bytes, load_s = curve(bundle, widths, args.context, args.repeats)
        cells = [f"{ms[w]:.2f}" if w in ms else "-" for w in widths]
        ratio = {w: f"{ms[w] / ms[1]:.2f}" if w in ms and 1 in ms else "-" for w in (8, 32)}
        print(f"| {bundle} | {n_bytes / gbs / 1e6:.2f} | " + " | ".join(cells) + f" | {ratio[8]} | {ratio[32]} | "
              f"{load_s:.2f} |")
    print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
