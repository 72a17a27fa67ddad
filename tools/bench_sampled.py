#!/usr/bin/env python3
"""Sampled requests side by side: each bundle's decoder for a request at `--temp` (Runtime.request_decoder: the
bundle's sampling plan where it has one, else its greedy plan's tree) and the first bundle's verifier alone, taking
turns prompt by prompt, every row drawing with the same seeds. A row's TPOT is its decode time over its tokens.

    python tools/bench_sampled.py B_TEMP0 B_TEMP1 --prompts-file P --temp 1 --prompts 4 -n 128 --rounds 3 --threads 2
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

from yggc.bench.prompt_sets import load_prompt_texts
from yggc.errors import USER_ERRORS
from yggc.runtime.runtime import Runtime

AR_ROW = "verifier alone"


def rows(bundles: list[Path]) -> dict[str, tuple[Runtime, object]]:
    """{row name: (runtime, decoder)}: each bundle's sampled-request decoder, then the first one's verifier alone."""
    out = {}
    for i, path in enumerate(bundles, 1):
        rt = Runtime.load(path)
        plan = "its sampling plan" if rt.sampling_plan else "its greedy plan's tree"
        out[f"{i}. {path.name} ({plan})"] = (rt, rt.request_decoder(sampling=True))
    first = next(iter(out.values()))[0]
    out[AR_ROW] = (first, first.decoder(speculative=False))
    return out


def measure(configs: dict, prompts: list[str], n: int, temperature: float, rounds: int) -> dict:
    """{row: [(ms per token, tokens per verify call)] per round}, over all prompts of the round."""
    out: dict[str, list[tuple[float, float]]] = {name: [] for name in configs}
    for r in range(rounds):
        for name, (rt, dec) in configs.items():
            seconds = tokens = accepted = calls = 0
            for i, prompt in enumerate(prompts):
                st = rt.generate(prompt, n, temperature=temperature, seed=1000 * r + i, decoder=dec,
                                 prompt_cache=False).stats
                seconds, tokens = seconds + st.decode_s, tokens + st.n_generated - 1  # decode_s: after the first
                accepted, calls = accepted + st.n_accept, calls + st.n_iterations  # 0 and 0 alone
            out[name].append((1000 * seconds / max(tokens, 1), (accepted + calls) / calls if calls else 1.0))
    return out


def table(results: dict) -> str:
    lines = ["| decoding | TPOT median ms | tokens per verify call | vs the verifier alone |", "|---|---|---|---|"]
    ar = statistics.median(x[0] for x in results[AR_ROW])
    for name, xs in results.items():
        tpot = statistics.median(x[0] for x in xs)
        lines.append(f"| {name} | {tpot:.3f} | {statistics.mean(x[1] for x in xs):.2f} | {ar / tpot:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_sampled.py", description=__doc__.splitlines()[0])
    p.add_argument("bundles", type=Path, nargs="+")
    p.add_argument("--prompts-file", type=Path, help="JSON {\"prompts\": [{\"text\": ...}]} (default: the demo's)")
    p.add_argument("--temp", type=float, default=1.0, help="temperature of every request (default 1)")
    p.add_argument("--prompts", type=int, default=4, help="measured prompts (after one for warm-up)")
    p.add_argument("-n", type=int, default=128, help="new tokens per request at most")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, help="torch threads")
    args = p.parse_args(argv)
    if args.temp <= 0:
        print(f"bench_sampled: error: --temp must be > 0 (sampled requests), got {args.temp:g}", file=sys.stderr)
        return 2
    try:
        if args.threads:
            torch.set_num_threads(args.threads)
        configs = rows(args.bundles)
        texts = load_prompt_texts(args.prompts_file)[0][:args.prompts + 1]
        for rt, dec in configs.values():  # warm-up
            rt.generate(texts[0], 16, temperature=args.temp, seed=0, decoder=dec, prompt_cache=False)
        print(table(measure(configs, texts[1:], args.n, args.temp, args.rounds)))
    except USER_ERRORS as e:
        print(f"bench_sampled: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
