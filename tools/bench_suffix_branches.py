#!/usr/bin/env python3
"""Suffix-branch shapes side by side: a bundle's greedy decoder with the text's suffix branches at each `--shapes`
(tokens per branch x branches x suffix nodes added at most, as runtime/drafters/suffix_branches.py's
BRANCHES_SHAPE) and `--min-chance`, the configurations taking turns prompt by prompt. Each decode is a request
(Runtime.generate, which stops at a chat turn's end) and must equal the compiled verifier alone's.

    python tools/bench_suffix_branches.py B --prompts-file P --shapes 6x2x8,16x2x20 --min-chance 0.2,0.1 --threads 2
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

from yggc.bench.prompt_sets import load_prompt_texts
from yggc.bench.suite import parse_shape
from yggc.errors import USER_ERRORS, YggcError
from yggc.plan.shape import TreeShape
from yggc.runtime.drafters.suffix_branches import with_suffix_branches
from yggc.runtime.runtime import Runtime

Config = tuple[TreeShape, float]


def label(shape: TreeShape) -> str:
    return f"{shape.depth}x{shape.width}x{shape.verify}"  # as --shapes writes it


def branched(rt: Runtime, config: Config):
    """The bundle's greedy decoder with suffix branches of `config`, priced by the bundle's profile as the runtime's."""
    shape, chance = config
    return with_suffix_branches(rt.decoder(), shape=shape, min_chance=chance, iteration_ms=rt.iteration_ms)


def measure(rt: Runtime, prompts: list[list[int]], n: int, configs: list[Config], rounds: int) -> dict:
    """{config: [(TPOT ms, tokens per verify call)] per prompt and round}; YggcError if any output differs from AR."""
    plain = [rt.generate(p, n, decoder=rt.decoder(speculative=False)).tokens for p in prompts]
    out: dict[Config, list[tuple[float, float]]] = {c: [] for c in configs}
    for _ in range(rounds):
        for prompt, ref in zip(prompts, plain, strict=True):
            for shape, chance in configs:
                res = rt.generate(prompt, n, decoder=branched(rt, (shape, chance)))
                if res.tokens != ref:
                    raise YggcError(f"suffix branches {label(shape)} at min chance {chance} decoded other tokens than "
                                    "the verifier alone")
                st = res.stats
                out[(shape, chance)].append((st.tpot_ms, (st.n_accept + st.n_iterations) / max(st.n_iterations, 1)))
    return out


def table(results: dict) -> str:
    lines = ["| branches | min chance | TPOT median ms | tokens per verify call | vs the first |", "|---|---|---|---|---|"]
    first = None
    for (shape, chance), xs in results.items():
        tpot = statistics.median(x[0] for x in xs)
        first = first or tpot
        lines.append(f"| {label(shape)} | {chance:g} | {tpot:.3f} | {statistics.mean(x[1] for x in xs):.2f} | "
                     f"{first / tpot:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_suffix_branches.py", description=__doc__.splitlines()[0])
    p.add_argument("bundle", type=Path)
    p.add_argument("--prompts-file", type=Path, help="JSON {\"prompts\": [{\"text\": ...}]} (default: the demo's)")
    p.add_argument("--shapes", default="6x2x8,16x2x20", help="tokens per branch x branches x nodes, comma-separated")
    p.add_argument("--min-chance", default="0.2", help="least estimated acceptance of a suffix node, comma-separated")
    p.add_argument("--prompts", type=int, default=4, help="measured prompts (after one for warm-up)")
    p.add_argument("-n", type=int, default=128, help="new tokens per request at most")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, help="torch threads")
    args = p.parse_args(argv)
    try:
        configs = [(parse_shape(s), float(c)) for s in args.shapes.split(",") for c in args.min_chance.split(",")]
        if args.threads:
            torch.set_num_threads(args.threads)
        rt = Runtime.load(args.bundle)
        texts = load_prompt_texts(args.prompts_file)[0][:args.prompts + 1]
        prompts = [rt.encode(t) for t in texts]
        for config in configs:  # warm-up
            rt.generate(prompts[0], 16, decoder=branched(rt, config))
        print(table(measure(rt, prompts[1:], args.n, configs, args.rounds)))
    except (*USER_ERRORS, ValueError) as e:
        print(f"bench_suffix_branches: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
