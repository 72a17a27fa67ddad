#!/usr/bin/env python3
"""How much can choosing the tree per iteration gain? Bounds for the draft-depth/width policy (#14).

At every `--stride`-th position of the verifier's greedy text of each held-out prompt, the drafter grows
one wide greedy Equal-Growth Tree (`--shape`, default D8 W4: 8 drafter steps of 4 nodes, every node
verified). Every smaller shape (D' <= D steps at the same width, top-V' pruning) is a part of it, so its
yield at that position is read off the same tree exactly, as the calibration pass prices shapes. Each
shape is priced in the bundle profile's estimated ms per iteration (yggc/plan/stages.py), and the tool
prints tokens per ms of:

- the best static shape;
- the oracle: each position's shape chosen knowing its yield (no policy of any kind does better);
- drafter-confidence thresholds: draft another step while the best node the last step added has path
  probability >= E under the drafter, verify the nodes >= V (a policy that can run: it pays for the levels it drafts);
  the pair is chosen on even-numbered texts and scored on odd ones, beside the static best there;
- the expected-value policy with free look-ahead: per position the shape maximising the drafter's
  expected tokens minus lambda x ms, knowing all D steps' probabilities before drafting them (a bound
  for policies reading the drafter), also with every drafter call free (an ideal overlap of drafting).

    python tools/bench_policy_bound.py B --prompts-file $D/prompts.json -n 64 --stride 2 --threads 2
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from tqdm import tqdm

TOOLS = Path(__file__).resolve().parent
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

from bench_sampling_paired import drafting_free_ms, sampled_texts, score_greedy  # noqa: E402

from yggc.bench.prompt_sets import load_prompt_texts  # noqa: E402
from yggc.plan.bundle_profile import Profile  # noqa: E402
from yggc.plan.objective import choice_tokens_per_ms, oracle_choice  # noqa: E402
from yggc.plan.shape import TreeShape  # noqa: E402
from yggc.plan.stages import StageCosts  # noqa: E402
from yggc.tree.prune import rank_nodes  # noqa: E402

THRESHOLDS = (0.9, 0.7, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05, 0.02)
LAMBDAS = tuple(0.02 * k for k in range(1, 21))  # tokens per ms the expected-value policy trades against


def collect(rt, prompts: list[str], n: int, stride: int, shape: TreeShape) -> list[dict]:
    """One wide greedy tree per priced position: {text, p (drafter path probability), accepted per node id,
    rank (non-root node ids in the runtime's top-V order)}; node ids follow the drafter's steps."""
    dec, out = rt.decoder(shape=shape), []
    with torch.inference_mode():
        for t, (ids, new) in enumerate(tqdm(sampled_texts(rt, prompts, n, 0.0), desc="texts", disable=None)):
            for j in range(1, len(new), stride):
                ctx = ids + new[:j]
                dec.proposer.prefill(ctx[:-1], 0)
                draft, ids_kept, _, flags = score_greedy(dec, ctx)  # all nodes, in the subtree's order
                accepted = [0.0] * shape.n_nodes
                for node, flag in zip(ids_kept.tolist(), flags):
                    accepted[node] = flag
                out.append({"text": t, "p": draft.tree.cum_logp[:shape.n_nodes].float().exp().tolist(),
                            "accepted": accepted, "rank": rank_nodes(draft.tree).tolist()})
    return out


def kept(pos: dict, steps: int, width: int, verify: int) -> list[int]:
    """The nodes a (steps, width, verify) tree verifies at this position: the EGT after `steps` drafter steps
    is the first 1 + steps x width node ids (as calibration truncates it), then the first `verify` of those
    in rank order (top-V pruning)."""
    return [i for i in pos["rank"] if i <= steps * width][:verify]


def yields(positions: list[dict], shapes: list[TreeShape]) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (realized, drafter-expected) tokens per iteration [M positions, S shapes], bonus token included."""
    real = [[1.0 + sum(p["accepted"][i] for i in kept(p, s.depth, s.width, s.verify)) for s in shapes]
            for p in positions]
    expect = [[1.0 + sum(p["p"][i] for i in kept(p, s.depth, s.width, s.verify)) for s in shapes] for p in positions]
    return torch.tensor(real, dtype=torch.float64), torch.tensor(expect, dtype=torch.float64)


def threshold_shape(pos: dict, expand: float, verify: float, wide: TreeShape) -> TreeShape:
    """Draft another step while the best node the last step added has path probability >= expand; verify
    the nodes >= verify (at least one)."""
    w, steps = wide.width, 1
    while steps < wide.depth and max(pos["p"][(steps - 1) * w + 1: steps * w + 1]) >= expand:
        steps += 1
    drafted = kept(pos, steps, w, steps * w)
    return TreeShape(steps, w, max(1, sum(1 for i in drafted if pos["p"][i] >= verify)))


def threshold_rates(positions: list[dict], shapes: list[TreeShape], real: torch.Tensor, ms: torch.Tensor,
                    wide: TreeShape) -> dict:
    """Tokens per ms of every (expand, verify) threshold pair with verify <= expand."""
    index = {s: k for k, s in enumerate(shapes)}
    def choices(e: float, v: float) -> torch.Tensor:
        return torch.tensor([index[threshold_shape(p, e, v, wide)] for p in positions])

    return {(e, v): choice_tokens_per_ms(real, ms, choices(e, v)) for e in THRESHOLDS for v in THRESHOLDS if v <= e}


def best_expected_value(real: torch.Tensor, expect: torch.Tensor, ms: torch.Tensor) -> tuple[float, float]:
    """The expected-value policy at its best lambda -> (tokens per ms, lambda)."""
    return max((choice_tokens_per_ms(real, ms, (expect - lam * ms).argmax(1)), lam) for lam in LAMBDAS)


def bounds(positions: list[dict], costs: StageCosts, shape: TreeShape) -> dict:
    shapes = [TreeShape(d, shape.width, v) for d in range(1, shape.depth + 1) for v in range(1, shape.width * d + 1)]
    ms = torch.tensor([costs.iteration_ms(s) for s in shapes], dtype=torch.float64)
    undrafted = torch.tensor([drafting_free_ms(s, costs) for s in shapes], dtype=torch.float64)
    real, expect = yields(positions, shapes)
    static = real.mean(0) / ms
    best = int(static.argmax())
    even = [k for k, p in enumerate(positions) if p["text"] % 2 == 0]
    odd = [k for k, p in enumerate(positions) if p["text"] % 2 == 1]
    on_even = threshold_rates([positions[k] for k in even], shapes, real[even], ms, shape)
    pair = max(on_even, key=on_even.get)
    held_out = threshold_rates([positions[k] for k in odd], shapes, real[odd], ms, shape)[pair]
    static_odd = real[odd].mean(0) / ms
    ev, lam = best_expected_value(real, expect, ms)
    ev_free, lam_free = best_expected_value(real, expect, undrafted)
    base = float(static[best])
    return {"positions": len(positions), "best_static": {"depth": shapes[best].depth, "verify": shapes[best].verify,
                                                          "tokens_per_ms": round(base, 5)},
            "oracle": round(choice_tokens_per_ms(real, ms, oracle_choice(real, ms)) / base, 4),
            "threshold": {"expand": pair[0], "verify": pair[1], "held_out_tokens_per_ms": round(held_out, 5),
                          "held_out_vs_static": round(held_out / float(static_odd[best]), 4)},
            "expected_value": {"lambda": lam, "vs_static": round(ev / base, 4)},
            "expected_value_drafting_free": {"lambda": lam_free, "vs_static": round(ev_free / base, 4)}}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle", help="a compiled bundle (its drafter grows the trees, its profile prices the shapes)")
    ap.add_argument("--prompts-file", type=Path, help="held-out prompts (JSON, as `yggc bench` reads them)")
    ap.add_argument("--prompts", type=int, default=None, help="use the first N prompts (default all)")
    ap.add_argument("-n", type=int, default=64, help="greedy tokens the verifier decodes per prompt (default 64)")
    ap.add_argument("--stride", type=int, default=2, help="one priced position in STRIDE (default 2)")
    ap.add_argument("--shape", default="8x4", help="DEPTHxWIDTH of the wide tree (default 8x4)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    ap.add_argument("--trees", help="save the recorded trees here, or read them if the file exists (no bundle run)")
    ap.add_argument("--json", help="write the bounds here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    depth, width = (int(x) for x in args.shape.split("x"))
    shape = TreeShape(depth, width, depth * width)
    if args.trees and Path(args.trees).is_file():
        positions = json.loads(Path(args.trees).read_text())
    elif not args.prompts_file:
        ap.error("--prompts-file is needed to grow the trees (or --trees FILE of trees saved before)")
    else:
        from yggc.runtime import Runtime
        prompts = load_prompt_texts(args.prompts_file)[0][: args.prompts]
        positions = collect(Runtime.load(args.bundle), prompts, args.n, args.stride, shape)
        if args.trees:
            Path(args.trees).write_text(json.dumps(positions))
    costs = StageCosts.from_profile(Profile.load(args.bundle))
    out = bounds(positions, costs, shape)
    b = out["best_static"]
    print(f"{out['positions']} positions; best static D{b['depth']} W{width} V{b['verify']}: "
          f"{b['tokens_per_ms']:.4f} tokens per estimated ms. Against it:")
    print(f"  oracle (each position's shape chosen knowing its yield): {out['oracle']:.3f}x")
    t = out["threshold"]
    print(f"  drafter-confidence thresholds (expand >= {t['expand']}, verify >= {t['verify']}, chosen on even texts), "
          f"odd texts: {t['held_out_vs_static']:.3f}x the static shape there")
    print(f"  expected value with free look-ahead: {out['expected_value']['vs_static']:.3f}x; "
          f"and with every drafter call free: {out['expected_value_drafting_free']['vs_static']:.3f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
