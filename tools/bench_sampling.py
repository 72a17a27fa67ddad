#!/usr/bin/env python3
"""Sampling through a bundle: tokens per verify call and TPOT of each T > 0 rule, side by side.

Rules: `chain` (W = 1, drafts sampled, block verification), `point-mass` (the greedy-grown tree, each
child accepted with the verifier's probability of it), `rrs` (the tree grown from drafter samples
without replacement, recursive rejection sampling) and `traversal` (the same tree, traversal
verification). Each shape runs at every temperature over the same prompts and seeds; the plan's greedy
TPOT and the bundle's AR TPOT (greedy and at each temperature) are measured in the same run, and a bundle
compiled with `--temp` also runs its sampling plan (what a T > 0 request gets) at each temperature.

`--exact` also prices every verified draft exactly under each rule that fits it (block and token
verification for a chain; recursive rejection and traversal verification for a sampled tree): expected
tokens per call on the same drafts, a paired comparison without the sampling noise of the counts.

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
from yggc.tree.block_verification import block_outcome, tokenwise_outcome
from yggc.tree.recursive_rejection import acceptance_probs
from yggc.tree.sampling import SamplingParams
from yggc.tree.traversal import traversal_outcome


def parse_runs(text: str) -> list[tuple[str, TreeShape]]:
    runs = []
    for item in text.split(","):
        rule, _, dims = item.partition(":")
        if rule not in ("chain", "point-mass", "rrs", "rrs-q", "traversal"):
            raise SystemExit(f"unknown rule {rule!r} in --shapes; use chain, point-mass, rrs, rrs-q "
                             "(draws priced at the drafter's probabilities) or traversal")
        runs.append((rule, TreeShape.from_args(*(int(v) for v in dims.split("x")))))
    return runs


def sampling_decoder(rt, rule: str, shape: TreeShape):
    """The runtime's decoder for a --shapes entry; rrs-q prices each draw at the drafter's probability of its rank
    instead of the rank's acceptance rate (sampled_egt.RANK_ACCEPTANCE)."""
    dec = rt.decoder(shape=shape, tree_rule="rrs" if rule in ("chain", "rrs-q") else rule)
    if rule == "rrs-q":
        dec.rank_rates = None
    return dec


def exact_tokens_per_call(draft, kept: torch.Tensor, probs: torch.Tensor) -> dict[str, float]:
    """1 + the expected accepted length of one verified draft under each rule that applies to it."""
    sub = draft.tree.subtree(kept)
    if draft.q is not None:  # a sampled chain: drafts [D], q [D, vocab], probs [D + 1, vocab]
        depth = torch.arange(kept.shape[0], dtype=torch.float64)
        q = draft.q[: kept.shape[0] - 1]
        return {rule: 1.0 + float((outcome(sub.tokens[1:], q, probs)[0] * depth).sum())
                for rule, outcome in (("block", block_outcome), ("token", tokenwise_outcome))}
    if draft.q_rows is None:  # the greedy-grown tree of the point-mass rule: nothing to price
        return {}
    rows = draft.q_rows[kept]
    end, _ = traversal_outcome(sub.tokens, sub.parents, probs, rows)
    return {"rrs": 1.0 + float(acceptance_probs(sub.tokens, sub.parents, probs, rows)[1:].sum()),
            "traversal": 1.0 + float((end * sub.depth.to(torch.float64)).sum())}


def measure(rt: Runtime, decoder, prompts: list[str], n: int, params: SamplingParams, repeats: int,
            exact: bool = False) -> dict:
    """Median TPOT and mean tokens per iteration (accepted + 1) over prompts x repeats; exact: also the mean
    exact expectation of each applicable rule over the same drafts (timed runs then include pricing)."""
    tpots, per_iter, priced = [], [], []
    if exact:
        decoder.on_sampled_verify = lambda draft, kept, probs: priced.append(exact_tokens_per_call(draft, kept, probs))
    for r in range(repeats):
        for i, text in enumerate(prompts):
            out = rt.generate(text, n, temperature=params.temperature, seed=1000 * r + i, decoder=decoder)
            tpots.append(out.stats.tpot_ms)
            per_iter += [k + 1 for k in out.stats.accepted_lengths] or [1]
    out = {"tpot_ms": round(statistics.median(tpots), 2), "tokens_per_call": round(statistics.mean(per_iter), 3)}
    for rule in priced[0] if priced else ():
        out[f"exact {rule}"] = round(statistics.mean(p[rule] for p in priced), 3)
    return out


def add_common_args(ap: argparse.ArgumentParser, prompts: int, shapes_help: str) -> None:
    """What every sampling bench takes: the bundle, its prompts, temperatures, shapes, threads and --json."""
    ap.add_argument("bundle")
    ap.add_argument("--prompts-file", required=True, help="prompts.json as `yggc bench --prompts-file` reads it")
    ap.add_argument("--prompts", type=int, default=prompts, help=f"prompts to use (default {prompts or 'all'})")
    ap.add_argument("--temps", default="0.7,1.0", help="temperatures, comma-separated (default 0.7,1.0)")
    ap.add_argument("--shapes", required=True, help=shapes_help)
    ap.add_argument("--threads", type=int, help="torch threads")
    ap.add_argument("--json", help="also write the results here")


def load_prompts(path: str, count: int) -> list[str]:
    """The first `count` prompts' texts of a prompts.json (all for 0)."""
    return [p["text"] for p in json.loads(open(path, encoding="utf-8").read())["prompts"]][: count or None]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(ap, 4, "RULE:DxWxV, comma-separated; RULE is chain, point-mass, rrs or traversal")
    ap.add_argument("-n", type=int, default=128, help="new tokens per prompt (default 128)")
    ap.add_argument("--repeats", type=int, default=2, help="seeds per prompt (default 2)")
    ap.add_argument("--exact", action="store_true",
                    help="also price every draft exactly under each applicable rule (TPOT then includes pricing)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rt = Runtime.load(args.bundle)
    runs = parse_runs(args.shapes)
    prompts = load_prompts(args.prompts_file, args.prompts)
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
            dec = sampling_decoder(rt, rule, shape)
            results[f"T={temp} {rule} D{shape.depth}W{shape.width}V{shape.verify}"] = measure(
                rt, dec, prompts, args.n, SamplingParams(temp), args.repeats, args.exact)
    print(f"{args.bundle}: dtype {rt.manifest.dtype}, {len(prompts)} prompts x {args.n} tokens, "
          f"{torch.get_num_threads()} threads")
    print(f"{'run':<36} {'tokens/call':>11} {'TPOT ms':>8}  exact tokens/call per rule, same drafts")
    for name, r in results.items():
        exact = "  ".join(f"{k[6:]} {v:.3f}" for k, v in r.items() if k.startswith("exact "))
        print(f"{name:<36} {r['tokens_per_call']:>11.2f} {r['tpot_ms']:>8.2f}  {exact}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
