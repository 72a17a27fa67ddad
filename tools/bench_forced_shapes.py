#!/usr/bin/env python3
"""TPOT of forced tree shapes through one bundle beside its compiled AR, greedy, rows interleaved per prompt.

    python tools/bench_forced_shapes.py BUNDLE PROMPTS.json 1x1x1,2x1x2,4x2x8

Every shape's tokens must equal compiled AR's (asserted). Prints a markdown row per shape: TPOT median ms
over prompts x 2 repeats, tokens per verify call (accepted + 1; 0 for AR), equal to AR.
"""
import json
import statistics
import sys

import torch

from yggc.plan.shape import TreeShape
from yggc.runtime import Runtime


def main() -> None:
    torch.set_num_threads(2)
    rt = Runtime.load(sys.argv[1])
    prompts = [p["text"] for p in json.load(open(sys.argv[2]))["prompts"][:4]]
    shapes = {"AR": None, **{s: TreeShape(*map(int, s.split("x"))) for s in sys.argv[3].split(",")}}
    decs = {k: (rt.decoder(speculative=False) if v is None else rt.decoder(shape=v)) for k, v in shapes.items()}
    res, acc, ref = {k: [] for k in shapes}, {k: [] for k in shapes}, {}
    rt.generate(prompts[0], 16, decoder=decs["AR"])
    for _repeat in range(2):
        for i, p in enumerate(prompts):
            for k, d in decs.items():
                g = rt.generate(p, 128, decoder=d)
                res[k].append(g.stats.tpot_ms)
                acc[k].append((g.stats.n_accept + g.stats.n_iterations) / max(1, g.stats.n_iterations))
                if k == "AR":
                    ref[i] = g.tokens
                else:
                    assert g.tokens == ref[i], (k, i)
    for k in shapes:
        print(f"| {k} | {statistics.median(res[k]):.2f} | {statistics.mean(acc[k]):.2f} | yes |")


if __name__ == "__main__":
    main()
