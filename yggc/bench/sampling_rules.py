"""`yggc bench --sampling-rules`: the T > 0 verification rules through one bundle, side by side: tokens per verify
call and TPOT of each RULE:DxWxV at every temperature, over the same prompts and seeds, beside the bundle's AR
(greedy and at each temperature), its greedy plan and, where the bundle has one (`--calib` compiles), its sampling plan.

Rules: `chain` (W = 1, drafts sampled, block verification), `point-mass` (the greedy-grown tree, each child
accepted with the verifier's probability of it), `rrs` (the tree grown from drafter samples without replacement,
recursive rejection sampling), `rrs-q` (rrs with each draw priced at the drafter's probability instead of the
measured rank acceptance) and `traversal` (the rrs tree, traversal verification). With exact pricing every verified
draft is also priced under each rule that fits it (block and token verification for a chain; recursive rejection
and traversal for a sampled tree): expected tokens per call on the same drafts, without the counts' sampling noise.
"""
from __future__ import annotations

import statistics

import torch

from ..errors import YggcError
from ..plan.shape import TreeShape
from ..runtime.runtime import Runtime
from ..tree.block_verification import block_outcome, tokenwise_outcome
from ..tree.recursive_rejection import acceptance_probs
from ..tree.traversal import traversal_outcome
from .suite import parse_shape

RULES = ("chain", "point-mass", "rrs", "rrs-q", "traversal")


def parse_runs(text: str) -> list[tuple[str, TreeShape]]:
    """'chain:4x1x4,rrs:2x2x4' -> [(rule, shape), ...]."""
    runs = []
    for item in text.split(","):
        rule, _, dims = item.partition(":")
        if rule not in RULES:
            raise YggcError(f"unknown rule {rule!r} in {item!r}; write RULE:DxWxV with RULE one of {', '.join(RULES)}")
        runs.append((rule, parse_shape(dims)))
    return runs


def sampling_decoder(rt: Runtime, rule: str, shape: TreeShape):
    """The runtime's decoder for RULE:shape; rrs-q prices each draw at the drafter's probability of its rank
    instead of the rank's acceptance rate (sampled_egt.RANK_ACCEPTANCE)."""
    dec = rt.decoder(shape=shape, tree_rule="rrs" if rule in ("chain", "rrs-q") else rule)
    if rule == "rrs-q":
        dec.proposer.rank_rates = None
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


def measure(rt: Runtime, decoder, prompts: list[str], n: int, temperature: float, repeats: int,
            exact: bool = False) -> dict[str, float]:
    """Median TPOT and mean tokens per iteration (accepted + 1) over prompts x repeats (seed 1000 x repeat + prompt);
    exact: also the mean exact expectation of each applicable rule over the same drafts (the timed runs then include
    the pricing)."""
    tpots, per_iter, priced = [], [], []
    if exact:
        decoder.on_sampled_verify = lambda draft, kept, probs: priced.append(exact_tokens_per_call(draft, kept, probs))
    for r in range(repeats):
        for i, text in enumerate(prompts):
            out = rt.generate(text, n, temperature=temperature, seed=1000 * r + i, decoder=decoder)
            tpots.append(out.stats.tpot_ms)
            per_iter += [k + 1 for k in out.stats.accepted_lengths] or [1]
    out = {"tpot_ms": round(statistics.median(tpots), 2), "tokens_per_call": round(statistics.mean(per_iter), 3)}
    for rule in priced[0] if priced else ():
        out[f"exact {rule}"] = round(statistics.mean(p[rule] for p in priced), 3)
    return out


def compare_rules(rt: Runtime, runs: list[tuple[str, TreeShape]], prompts: list[str], n: int, temps: list[float],
                  repeats: int, exact: bool = False) -> dict[str, dict[str, float]]:
    """Row name -> measure(): greedy AR and plan once, then per temperature AR, the sampling plan and each run."""
    results = {"ar": measure(rt, rt.decoder(speculative=False), prompts, n, 0.0, 1),
               f"greedy plan {rt.shape.short}": measure(rt, rt.decoder(speculative=True), prompts, n, 0.0, 1)}
    for temp in temps:
        results[f"T={temp} ar"] = measure(rt, rt.decoder(speculative=False), prompts, n, temp, repeats)
        if rt.sampling_plan:  # what a T > 0 request runs: the plan priced at a temperature
            shape, speculate = rt.sampling_plan
            label = shape.short if speculate else "(no speculation)"
            results[f"T={temp} sampling plan {label}"] = measure(rt, rt.decoder(sampling=True), prompts, n, temp,
                                                                 repeats)
        for rule, shape in runs:
            results[f"T={temp} {rule} {shape.short}"] = measure(
                rt, sampling_decoder(rt, rule, shape), prompts, n, temp, repeats, exact)
    return results


def rules_table(results: dict[str, dict[str, float]]) -> str:
    lines = ["| run | tokens/call | TPOT ms | exact tokens/call per rule, same drafts |", "|---|---|---|---|"]
    for name, r in results.items():
        exact = " ".join(f"{k[6:]} {v:.3f}" for k, v in r.items() if k.startswith("exact ")) or "-"
        lines.append(f"| {name} | {r['tokens_per_call']:.2f} | {r['tpot_ms']:.2f} | {exact} |")
    return "\n".join(lines)
