"""Eager tree shapes side by side: mean accepted length and TPOT per (D, W, V) vs autoregressive.

    python tools/bench_shapes.py [-m VERIFIER -md DRAFTER] [--prompts 4] [-n 128] [--repeats 2]

Defaults to the embedded demo pair and its held-out prompts; greedy, float32, interleaved per prompt.
"""
from __future__ import annotations

import argparse

import torch
from bench_compiled import add_workload_args, compare_decoders, heldout_texts  # tools/ sibling

from yggc.plan.shape import TreeShape
from yggc.runtime import drafters, models
from yggc.runtime.autoregressive import AutoregressiveDecoder
from yggc.runtime.speculative import SpeculativeDecoder

SHAPES = [TreeShape(d, 1, d) for d in (4, 6, 8)] + [TreeShape(6, w, v) for w, v in ((4, 16), (4, 24), (8, 16), (8, 32))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model")
    ap.add_argument("-md", "--model-draft")
    add_workload_args(ap)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    vdir, ddir = (args.model, args.model_draft) if args.model else models.demo_pair_dirs()
    v, d = drafters.load_pair(vdir, ddir, torch.float32, 1024)
    prompts = [models.encode_prompt(v.tokenizer, t) for t in heldout_texts(args.prompts)]
    decoders = {"autoregressive": AutoregressiveDecoder(v.graph, v.layout)}
    decoders |= {f"D={s.depth} W={s.width} V={s.verify}": SpeculativeDecoder(v.graph, d.graph, v.layout, s) for s in SHAPES}
    print(f"{vdir} + {ddir}; {len(prompts)} held-out prompts x {args.n} tokens x {args.repeats} repeats, "
          f"{args.threads} thread(s), eager, greedy")
    print("\n".join(compare_decoders(decoders, prompts, args.n, args.repeats)))


if __name__ == "__main__":
    main()
