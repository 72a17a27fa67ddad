"""Eager tree shapes side by side: mean accepted length and TPOT per (D, W, V) vs autoregressive.

    python tools/bench_shapes.py [-m VERIFIER -md DRAFTER] [--prompts 4] [-n 128] [--repeats 2]

Defaults to the embedded demo pair and its held-out prompts; greedy, float32, interleaved per prompt.
"""
from __future__ import annotations

import argparse
import json
import statistics

import torch

from yggc import models
from yggc.autoregressive import AutoregressiveDecoder
from yggc.sampling import SamplingParams
from yggc.speculative import SpeculativeDecoder, TreeShape

SHAPES = [TreeShape(d, 1, d) for d in (4, 6, 8)] + [TreeShape(6, w, v) for w, v in ((4, 16), (4, 24), (8, 16), (8, 32))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model")
    ap.add_argument("-md", "--model-draft")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    vdir, ddir = (args.model, args.model_draft) if args.model else models.demo_pair_dirs()
    v, d = models.load_pair(vdir, ddir, torch.float32, 1024)
    texts = [p["text"] for p in json.loads((models.DEMO_PAIR / "prompts.json").read_text())["prompts"]]
    prompts = [models.encode_prompt(v.tokenizer, t) for t in texts[: args.prompts]]
    decoders = {"autoregressive": AutoregressiveDecoder(v.graph, v.layout)}
    decoders |= {f"D={s.depth} W={s.width} V={s.verify}": SpeculativeDecoder(v.graph, d.graph, v.layout, s) for s in SHAPES}
    tpot, accepted, equal = ({k: [] for k in decoders}, {k: [] for k in decoders}, dict.fromkeys(decoders, True))
    for prompt in prompts:
        ref = None
        for rep in range(args.repeats + 1):  # round 0 warms up
            for name, dec in decoders.items():
                out = [t for chunk in dec.stream(prompt, args.n, SamplingParams()) for t in chunk]
                ref = out if ref is None else ref
                equal[name] &= out == ref
                if rep:
                    tpot[name].append(dec.stats.tpot_ms)
                    accepted[name].append(dec.stats.summary().get("mean_accepted_length", 1.0))
    base = statistics.median(tpot["autoregressive"])
    print(f"{vdir} + {ddir}; {len(prompts)} held-out prompts x {args.n} tokens x {args.repeats} repeats, "
          f"{args.threads} thread(s), eager, greedy")
    print("| decoding | mean accepted length | TPOT median ms | speedup vs AR | equal to AR |\n|---|---|---|---|---|")
    for name in decoders:
        med = statistics.median(tpot[name])
        print(f"| {name} | {statistics.mean(accepted[name]):.2f} | {med:.3f} | {base / med:.2f}x | "
              f"{'yes' if equal[name] else 'NO'} |")


if __name__ == "__main__":
    main()
