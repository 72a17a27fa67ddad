#!/usr/bin/env python3
"""Paired pricing of tree shapes and T > 0 rules: every shape drafts from the same contexts, priced exactly.

`yggc bench --sampling-rules` counts what each decoder accepts, but each decoder samples its own texts, and
on a few dozen prompts the texts' own variation is larger than the differences between rules. Here
the verifier samples each prompt's continuation alone (so the contexts follow its own law); at every
`--stride`-th position of it, every shape drafts once from the same verifier and drafter state (the
same seed: common random numbers), the verifier scores the pruned draft, and the draft is priced
exactly under its rule (1 + the expected accepted length: block verification for a chain, recursive
rejection or traversal verification for a sampled tree; `yggc.bench.sampling_rules.exact_tokens_per_call`).
Printed per shape: the mean over positions with its standard error, and the ratio to the first
shape with a standard error clustered by prompt (positions of one text are not independent).
At T = 0 (`--temps 0`) the text is the verifier's greedy one and every shape drafts its greedy tree;
a node is accepted when it is the verifier's argmax after its accepted parent (the rule is ignored).
`--oracle` prices the shapes in the bundle profile's estimated ms per iteration: the best static shape
against an oracle that picks each position's shape knowing its yield (no depth predictor can do better).

    python tools/bench_sampling_paired.py B --prompts-file $D/prompts.json --temps 0.7,1.0 \\
        --shapes chain:8x1x8,rrs:1x8x8,rrs:3x4x8 --stride 4 --threads 2
"""
from __future__ import annotations

import argparse
import functools
import json
import math
from pathlib import Path

import torch
from tqdm import tqdm

from yggc.bench.prompt_sets import load_prompt_texts
from yggc.bench.sampling_rules import exact_tokens_per_call, parse_runs, sampling_decoder
from yggc.plan.bundle_profile import Profile
from yggc.plan.objective import choice_tokens_per_ms, oracle_choice
from yggc.plan.stages import StageCosts, iteration_stages
from yggc.runtime import Runtime
from yggc.runtime.draft import DraftRequest
from yggc.tree.recursive_rejection import acceptance_probs
from yggc.tree.sampling import SamplingParams, target_probs
from yggc.tree.verification import children_lists, verify_greedy


def sampled_texts(rt: Runtime, prompts: list[str], n: int, temp: float) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, the verifier's own sampled continuation) per prompt, seeded by its index."""
    ar = rt.decoder(speculative=False)
    return [(rt.encode(p), rt.generate(p, n, temperature=temp, seed=i, decoder=ar).tokens)
            for i, p in enumerate(prompts)]


def greedy_acceptance(sub, logits: torch.Tensor) -> list[float]:
    """Per node of a greedy tree: 1.0 for the root and the path greedy verification accepts, else 0.0."""
    on_path = {0, *verify_greedy(sub.tokens, sub.parents, logits).path}
    return [float(i in on_path) for i in range(sub.tokens.shape[0])]


def score_greedy(dec, ctx: list[int]):
    """The decoder's greedy tree from root ctx[-1] (its caches hold ctx[:-1]) scored by the verifier ->
    (draft, kept ids, their subtree, greedy_acceptance per subtree row)."""
    n = len(ctx) - 1
    draft = dec.draft_greedy([ctx[-1]], n)
    kept, sub, logits, _ = dec.score_draft(draft, n)
    return draft, kept, sub, greedy_acceptance(sub, logits)


def add_rank_acceptance(ranks: dict, sub, accepted: list[float], greedy: bool) -> None:
    """ranks[(depth, sibling rank)] += (P(child accepted), P(its parent accepted)); siblings rank in draw order
    (a sampled tree) or by the drafter's probability (a greedy tree)."""
    depth = sub.depth.tolist()
    for u, kids in enumerate(children_lists(sub.parents, sub.cum_logp if greedy else None)):
        for rank, c in enumerate(kids):
            num, den = ranks.get((depth[c], rank), (0.0, 0.0))
            ranks[(depth[c], rank)] = (num + accepted[c], den + accepted[u])


def best_tree_bound(rates: dict, budget: int) -> float:
    """1 + the largest expected accepted length of a tree of `budget` nodes whose node at (depth, sibling rank)
    is accepted with rates[(depth, rank)] once its parent is (Sequoia's positional model; missing keys are 0).
    A node's children are its first ranks 0..k-1, as EGT growth and top-V pruning keep them (greedy or
    sampled). Exact dynamic programme over (depth, first rank, nodes left)."""

    last_rank = {d: max(r for dd, r in rates if dd == d) for d, _ in rates}

    @functools.cache
    def forest(depth: int, rank: int, n: int) -> float:  # children of one accepted node, ranks >= rank, n nodes
        if n == 0 or rank > last_rank.get(depth, -1):
            return 0.0
        rate = rates.get((depth, rank), 0.0)
        best = 0.0
        for size in range(1, n + 1):  # this child's subtree takes `size` nodes, later siblings the rest
            best = max(best, rate * (1.0 + forest(depth + 1, 0, size - 1)) + forest(depth, rank + 1, n - size))
        return best

    return 1.0 + forest(1, 0, budget)


def price_position(decoders: list, ctx: list[int], params: SamplingParams, seed: int,
                   ranks: dict | None = None) -> list[float]:
    """Both caches hold ctx[:-1]; ctx[-1] is the root at slot n -> each decoder's exact tokens per call
    (and, into `ranks`, the rank acceptance of the last decoder's tree: main checks it is priced per node)."""
    n = len(ctx) - 1
    decoders[0].proposer.prefill(ctx[:-1], 0)
    state = getattr(decoders[0].proposer, "pending_features", None)  # an EAGLE-3 head's pair for the root
    prices = []
    for dec in decoders:
        if state is not None:
            dec.proposer.pending_features = state
        if params.greedy:
            draft, kept, sub, accepted = score_greedy(dec, ctx)
        else:
            request = DraftRequest([ctx[-1]], n, params, torch.Generator().manual_seed(seed), None,
                                   dec.tree_rule.sampled)
            draft = dec.proposer.propose(request)
            kept, sub, logits, _ = dec.score_draft(draft, n)
            probs = target_probs(logits, params)
            accepted = (acceptance_probs(sub.tokens, sub.parents, probs, draft.q_rows[kept]).tolist()
                        if draft.q_rows is not None and dec.tree_rule == "rrs" and not sub.is_chain() else None)
        # a per-node law sums to 1 + the expected accepted length; chains and traversal are priced as a whole
        prices.append(sum(accepted) if accepted is not None else
                      exact_tokens_per_call(draft, kept, probs)["block" if draft.q is not None else
                                                                "traversal" if sub.is_chain() else dec.tree_rule])
    if ranks is not None:
        add_rank_acceptance(ranks, sub, accepted, params.greedy)
    return prices


def clustered_ratio(per_text: list[tuple[list[float], list[float]]]) -> tuple[float, float]:
    """sum(b) / sum(a) over texts and its standard error clustered by text (delta method)."""
    a_tot, b_tot = (sum(sum(t[k]) for t in per_text) for k in (0, 1))
    r = b_tot / a_tot
    k = len(per_text)
    resid = sum((sum(b) - r * sum(a)) ** 2 for a, b in per_text)
    return r, math.sqrt(resid * k / max(k - 1, 1)) / a_tot


def report(temp: float, runs, prices: list[list[list[float]]]) -> dict:
    """prices[text][position][shape] -> printed table and its JSON."""
    rows = {}
    for s, (rule, shape) in enumerate(runs):
        flat = [p[s] for text in prices for p in text]
        mean = sum(flat) / len(flat)
        se = math.sqrt(sum((x - mean) ** 2 for x in flat) / max(len(flat) - 1, 1) / len(flat))
        pairs = [([p[0] for p in text], [p[s] for p in text]) for text in prices if text]
        ratio, ratio_se = clustered_ratio(pairs)
        name = f"{'greedy' if temp == 0 else rule} D{shape.depth}W{shape.width}V{shape.verify}"
        rows[name] = {"tokens_per_call": round(mean, 4), "se": round(se, 4), "ratio": round(ratio, 4),
                      "ratio_se": round(ratio_se, 4), "positions": len(flat)}
        print(f"T={temp:<4} {name:<22} {mean:7.3f} +- {se:.3f}   x{ratio:.3f} +- {ratio_se:.3f}", flush=True)
    return rows


def print_bound(temp: float, ranks: dict, budgets: list[int]) -> dict:
    """The measured rates per (depth, rank) and the best trees they allow with each budget of nodes."""
    rates = {key: num / den for key, (num, den) in sorted(ranks.items()) if den > 0}
    for depth in sorted({d for d, _ in rates}):
        row = " ".join(f"{rates[(d, r)]:.3f}" for d, r in rates if d == depth)
        print(f"T={temp:<4} depth {depth} acceptance by sibling rank (given the parent's): {row}")
    bounds = {budget: round(best_tree_bound(rates, budget), 4) for budget in budgets}
    for budget, bound in bounds.items():
        print(f"T={temp:<4} best {budget}-node tree at these rates: {bound:.3f} tokens per call")
    return {"rates": {f"{d},{r}": round(v, 4) for (d, r), v in rates.items()}, "best_tree": bounds}


def drafting_free_ms(shape, costs: StageCosts) -> float:
    """An iteration's estimated ms with every drafter call free (what an ideal overlap of drafting leaves)."""
    return sum(st.cost_ms for st in iteration_stages("sequential", shape, costs) if st.role != "drafter")


def print_oracle(temp: float, runs, prices: list[list[list[float]]], costs: StageCosts) -> dict:
    """Tokens per estimated ms: every shape held constant, and the oracle that picks each position's shape
    knowing its yield (the bound on any per-iteration depth/width predictor over these shapes), also with
    every drafter call free (the most any overlap of drafting could add) and with all but the verifier's
    call free (no plan of this iteration's stages does better)."""
    shapes = [shape for _, shape in runs]
    tokens = torch.tensor([p for text in prices for p in text], dtype=torch.float64)  # [M positions, S shapes]
    full = torch.tensor([costs.iteration_ms(s) for s in shapes], dtype=torch.float64)
    undrafted = torch.tensor([drafting_free_ms(s, costs) for s in shapes], dtype=torch.float64)
    verify_only = torch.tensor([costs.verifier(s.verify + 1) for s in shapes], dtype=torch.float64)
    per_shape = tokens.mean(0) / full
    best = int(per_shape.argmax())
    out = {"iteration_ms": [round(float(t), 3) for t in full], "tokens_per_ms": [round(float(r), 5) for r in per_shape],
           "best_static": f"D{shapes[best].depth}W{shapes[best].width}V{shapes[best].verify}"}
    for name, ms in (("oracle", full), ("oracle_drafting_free", undrafted), ("oracle_verify_only", verify_only)):
        choice = oracle_choice(tokens, ms)
        rate = choice_tokens_per_ms(tokens, ms, choice)
        share = torch.bincount(choice, minlength=len(shapes)).double() / len(choice)
        out[name] = {"tokens_per_ms": round(rate, 5), "vs_best_static": round(rate / float(per_shape[best]), 4),
                     "share": [round(float(x), 3) for x in share]}
    for s, shape in enumerate(shapes):
        print(f"T={temp:<4} D{shape.depth}W{shape.width}V{shape.verify}: {out['iteration_ms'][s]:.2f} ms estimated, "
              f"{per_shape[s]:.4f} tokens/ms, oracle picks it at {out['oracle']['share'][s]:.1%} of positions")
    print(f"T={temp:<4} best static {out['best_static']}; oracle {out['oracle']['vs_best_static']:.3f}x it, "
          f"oracle with drafting free {out['oracle_drafting_free']['vs_best_static']:.3f}x, "
          f"with all but the verifier's call free {out['oracle_verify_only']['vs_best_static']:.3f}x")
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--prompts-file", type=Path, required=True, help="prompts.json as `yggc bench` reads it")
    ap.add_argument("--prompts", type=int, default=0, help="prompts to use (default all)")
    ap.add_argument("--temps", default="0.7,1.0", help="temperatures, comma-separated (default 0.7,1.0)")
    ap.add_argument("--shapes", required=True,
                    help="RULE:DxWxV, comma-separated (chain, rrs or traversal); ratios are to the first")
    ap.add_argument("--threads", type=int, help="torch threads")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("-n", type=int, default=64, help="tokens the verifier decodes per prompt (default 64)")
    ap.add_argument("--stride", type=int, default=4, help="price every STRIDE-th position (default 4)")
    ap.add_argument("--bound", type=lambda v: [int(x) for x in v.split(",")], metavar="V[,V]",
                    help="also measure each (depth, sibling rank)'s acceptance (recursive rejection at T > 0) on the "
                         "LAST shape (a wide tree, e.g. rrs:4x8x32) and print the best V-node trees those rates allow")
    ap.add_argument("--oracle", action="store_true",
                    help="also price every shape in the bundle profile's estimated ms per iteration: the best static "
                         "shape against an oracle choosing each position's shape (the bound on any depth predictor)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    runs = parse_runs(args.shapes)
    if any(rule == "point-mass" for rule, _ in runs):
        raise SystemExit("point-mass trees are grown greedily and have no exact price here; "
                         "use chain, rrs or traversal")
    if args.bound and (runs[-1][0] != "rrs" or runs[-1][1].width == 1):
        raise SystemExit("--bound measures rank rates on the last shape: make it a wide rrs tree, e.g. rrs:4x8x32")
    rt = Runtime.load(args.bundle)
    prompts = load_prompt_texts(args.prompts_file)[0][: args.prompts or None]
    decoders = [sampling_decoder(rt, rule, shape) for rule, shape in runs]
    print(f"{args.bundle}: {len(prompts)} prompts x {args.n} tokens of the verifier's own, "
          f"one position in {args.stride}; "
          f"tokens per call (exact, same contexts and seeds) +- standard error, ratio to the first shape")
    results = {}
    for temp in (float(t) for t in args.temps.split(",")):
        params, prices, ranks = SamplingParams(temp), [], {} if args.bound else None
        with torch.inference_mode():
            texts = sampled_texts(rt, prompts, args.n, temp)
            for t, (ids, new) in enumerate(tqdm(texts, desc=f"T={temp} texts", unit="text", disable=None)):
                prices.append([price_position(decoders, ids + new[:j], params, 7919 * t + j, ranks)
                               for j in range(1, len(new), args.stride)])
        results[str(temp)] = report(temp, runs, prices)
        if ranks:
            results[str(temp)]["bound"] = print_bound(temp, ranks, args.bound)
        if args.oracle:
            costs = StageCosts.from_profile(Profile.load(args.bundle))
            results[str(temp)]["oracle"] = print_oracle(temp, runs, prices, costs)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
