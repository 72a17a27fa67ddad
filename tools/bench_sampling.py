#!/usr/bin/env python3
"""Sampling through a bundle: tokens per verify call and TPOT of each T > 0 rule, side by side.

Rules: `chain` (W = 1, drafts sampled, block verification), `point-mass` (the greedy-grown tree, each
child accepted with the verifier's probability of it) and `rrs` (the tree grown from drafter samples
without replacement, recursive rejection sampling). Each shape runs at every temperature over the
same prompts and seeds; the plan's greedy TPOT and the bundle's AR TPOT (greedy and at each temperature)
are measured in the same run, and
a bundle compiled with `--temp` also runs its sampling plan (what a T > 0 request gets) at each temperature.

    python tools/bench_sampling.py smollm2_bf16.bundle --prompts-file $D/prompts.json \\
        --temps 0.7,1.0 --shapes chain:4x1x4,point-mass:2x2x4,rrs:2x2x4 --threads 2
"""
from __future__ import annotations

import argparse
import json
import statistics

import torch

from yggc.plan.shape import TreeShape
from yggc.runtime import Runtime
from yggc.tree.sampling import SamplingParams


def parse_runs(text: str) -> list[tuple[str, TreeShape]]:
    runs = []
    for item in text.split(","):
        rule, _, dims = item.partition(":")
        if rule not in ("chain", "point-mass", "rrs"):
            raise SystemExit(f"unknown rule {rule!r} in --shapes; use chain, point-mass or rrs")
        runs.append((rule, TreeShape.from_args(*(int(v) for v in dims.split("x")))))
    return runs


def measure(rt: Runtime, decoder, prompts: list[str], n: int, params: SamplingParams, repeats: int) -> dict:
    """Median TPOT and mean tokens per iteration (accepted + 1) over prompts x repeats."""
    tpots, per_iter = [], []
    for r in range(repeats):
        for i, text in enumerate(prompts):
            out = rt.generate(text, n, temperature=params.temperature, seed=1000 * r + i, decoder=decoder)
            tpots.append(out.stats.tpot_ms)
            per_iter += [k + 1 for k in out.stats.accepted_lengths] or [1]
    return {"tpot_ms": round(statistics.median(tpots), 2), "tokens_per_call": round(statistics.mean(per_iter), 3)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--prompts-file", required=True, help="prompts.json as `yggc bench --prompts-file` reads it")
    ap.add_argument("--prompts", type=int, default=4, help="prompts to decode (default 4)")
    ap.add_argument("--temps", default="0.7,1.0", help="temperatures, comma-separated (default 0.7,1.0)")
    ap.add_argument("--shapes", required=True, help="RULE:DxWxV, comma-separated; RULE is chain, point-mass or rrs")
    ap.add_argument("-n", type=int, default=128, help="new tokens per prompt (default 128)")
    ap.add_argument("--repeats", type=int, default=2, help="seeds per prompt (default 2)")
    ap.add_argument("--threads", type=int, help="torch threads")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rt = Runtime.load(args.bundle)
    runs = parse_runs(args.shapes)
    prompts = [p["text"] for p in json.loads(open(args.prompts_file, encoding="utf-8").read())["prompts"]][: args.prompts]
    greedy = SamplingParams()
    results = {"ar": measure(rt, rt.decoder(speculative=False), prompts, args.n, greedy, 1),
               f"greedy plan D{rt.shape.depth}W{rt.shape.width}V{rt.shape.verify}":
                   measure(rt, rt.decoder(speculative=True), prompts, args.n, greedy, 1)}
    for temp in (float(t) for t in args.temps.split(",")):
        results[f"T={temp} ar"] = measure(rt, rt.decoder(speculative=False), prompts, args.n, SamplingParams(temp),
                                          args.repeats)
        if rt.sampling_plan:  # what a T > 0 request runs: the plan of `yggc compile --temp`
            shape, speculate = rt.sampling_plan
            label = f"D{shape.depth}W{shape.width}V{shape.verify}" if speculate else "(no speculation)"
            results[f"T={temp} sampling plan {label}"] = measure(rt, rt.decoder(sampling=True), prompts, args.n,
                                                                 SamplingParams(temp), args.repeats)
        for rule, shape in runs:
            dec = rt.decoder(shape=shape, tree_rule="rrs" if rule == "chain" else rule)
            results[f"T={temp} {rule} D{shape.depth}W{shape.width}V{shape.verify}"] = measure(
                rt, dec, prompts, args.n, SamplingParams(temp), args.repeats)
    print(f"{args.bundle}: dtype {rt.manifest.dtype}, {len(prompts)} prompts x {args.n} tokens, "
          f"{torch.get_num_threads()} threads")
    print(f"{'run':<36} {'tokens/call':>11} {'TPOT ms':>8}")
    for name, r in results.items():
        print(f"{name:<36} {r['tokens_per_call']:>11.2f} {r['tpot_ms']:>8.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
