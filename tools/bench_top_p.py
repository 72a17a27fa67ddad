#!/usr/bin/env python3
"""Top-p over the top k (yggc's `top_p_drop`) against the plain full sort, decoding through a bundle at T = 0.7,
top-p 0.9: sampled AR and a sampled RRS tree, the two filters interleaved in one process, TPOT medians.

    python tools/bench_top_p.py BUNDLE --prompts-file $D/prompts.json --threads 2
"""
import argparse
import json
import statistics

import torch

from yggc.plan.shape import TreeShape
from yggc.runtime import Runtime
from yggc.tree import sampling


def full_sort_drop(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The plain rule over a full sort of the vocabulary (the reference yggc's top-k-based rule is timed against)."""
    sorted_p, order = torch.sort(probs, dim=-1, descending=True)
    drop_sorted = (sorted_p.cumsum(-1) - sorted_p) >= top_p
    return drop_sorted.scatter(-1, order, drop_sorted)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--prompts-file", required=True)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rt = Runtime.load(args.bundle)
    prompts = [p["text"] for p in json.load(open(args.prompts_file, encoding="utf-8"))["prompts"]][: args.prompts]
    decoders = {"ar": lambda: rt.decoder(speculative=False), "rrs D2W2V4": lambda: rt.decoder(shape=TreeShape(2, 2, 4))}
    filters = {"top-k sort": sampling.top_p_drop, "full sort": full_sort_drop}
    tpot = {(f, d): [] for f in filters for d in decoders}
    per_call = {(f, d): [] for f in filters for d in decoders}
    for rep, order in enumerate((("top-k sort", "full sort") * 2, ("full sort", "top-k sort") * 2)):
        for name in order:
            sampling.top_p_drop = filters[name]
            for dec_name, make in decoders.items():
                dec = make()
                for i, text in enumerate(prompts):
                    out = rt.generate(text, args.n, temperature=0.7, top_p=0.9, seed=100 * rep + i, decoder=dec)
                    tpot[(name, dec_name)].append(out.stats.tpot_ms)
                    per_call[(name, dec_name)] += [k + 1 for k in out.stats.accepted_lengths] or [1]
    for (name, dec_name), v in tpot.items():
        print(f"{name:10} {dec_name:12} TPOT median {statistics.median(v):7.2f} ms over {len(v)} decodes, "
              f"tokens/call {statistics.mean(per_call[(name, dec_name)]):.2f}")


if __name__ == "__main__":
    main()
