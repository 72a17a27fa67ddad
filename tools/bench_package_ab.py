"""Two O2 verifier packages of one model timed side by side in one process, calls interleaved, T(W) medians,
and whether their logits are bit-identical: an A/B for a change to the graphs or the lowering, where
the bundle holding the old package no longer loads (its passes hash is stale).

    python tools/bench_package_ab.py OLD_BUNDLE/artifacts/verifier.pt2 NEW_BUNDLE/artifacts/verifier.pt2 \
        --model NEW_BUNDLE/verifier --widths 1,8,32,64 --threads 2
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from yggc.runtime import loading
from yggc.runtime.aoti_package import load_package
from yggc.runtime.cache_inputs import CacheInputBucket
from yggc.runtime.cache_layout import causal_rows, prefill


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("packages", nargs=2, type=Path, help="A and B (.pt2 of `yggc compile --opt O2`)")
    ap.add_argument("--model", type=Path, required=True, help="the model folder (config.json) both were lowered from")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--max-seq", type=int, default=2048, help="the bundles' max_seq")
    ap.add_argument("--widths", default="1,8,32,64")
    ap.add_argument("--context", type=int, default=256, help="cached tokens before the rows")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = loading.load(args.model, loading.parse_dtype(args.dtype), args.max_seq, weights=False)
    runs = [CacheInputBucket(load_package(p), loaded.graph) for p in args.packages]
    ids = torch.randint(0, loaded.graph.cfg.vocab_size, (args.context + 64,), generator=torch.Generator().manual_seed(0))
    prefill(runs[0], ids[:args.context].tolist(), 0, loaded.layout, 64)  # both read the one cache this fills
    print(f"T(W) ms, medians of {args.repeats} interleaved calls, {args.context} cached tokens, "
          f"{torch.get_num_threads()} threads")
    print("| W | A | B | B/A | logits equal |\n|---|---|---|---|---|")
    for w in (int(x) for x in args.widths.split(",")):
        rows = args.context + torch.arange(w)
        call = (ids[:w], rows, rows.clone(), causal_rows(rows, loaded.layout.view(args.context + w)))
        outs = [run(*call).clone() for run in runs]
        times: list[list[float]] = [[], []]
        for _ in range(args.repeats):
            for i, run in enumerate(runs):
                t = time.perf_counter()
                run(*call)
                times[i].append(time.perf_counter() - t)
        a, b = (statistics.median(t) * 1e3 for t in times)
        print(f"| {w} | {a:.2f} | {b:.2f} | {b / a:.2f} | {torch.equal(*outs)} |")


if __name__ == "__main__":
    main()
