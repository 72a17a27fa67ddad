#!/usr/bin/env python3
"""The Yggdrasil Fig. 12 ablation on one calibrated O2 bundle (issue #14), greedy, held-out prompts, one run.

    python tools/bench_ablation.py BUNDLE --prompts-file yggc/smollm2_drafter/prompts.json [--prompts 4] [-n 128]

Rows, each decoded through the bundle's compiled packages and checked token for token against its AR:
  ar                    the verifier alone
  static (no pruning)   the best (D, W, V = D*W) of the calibration grid search
  + verify pruning      the best (D, W, V) (the bundle's plan)
  + depth predictor     the shape chosen per iteration (when the bundle's predictor beat the constant)
  + stage plan          the searched plan; on a CPU without a second resource it is the no-overlap plan
For each: TPOT, mean accepted length, the measured iteration and host bubble (`yggc run --trace`'s
spans) and the list-scheduled estimate of the iteration.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
from bench_drafters import load_prompts  # tools/ sibling

from yggc.plan.shape import TreeShape
from yggc.plan.stages import StageCosts
from yggc.runtime import Runtime
from yggc.tree.sampling import SamplingParams


def decode_row(dec, prompts: list[list[int]], n: int) -> tuple[list[list[int]], dict]:
    """Every prompt decoded once (after one warm-up prompt) -> outputs and medians over prompts."""
    list(dec.stream(prompts[0], 8, SamplingParams()))
    outs, tpot, acc, trace_rows = [], [], [], []
    for prompt in prompts:
        trace = dec.enable_trace() if hasattr(dec, "enable_trace") else None
        outs.append([t for chunk in dec.stream(prompt, n, SamplingParams()) for t in chunk])
        tpot.append(dec.stats.tpot_ms)
        acc.append(dec.stats.summary().get("mean_accepted_length", 1.0))
        trace_rows += trace.per_iteration() if trace else []
    row = {"tpot_ms": statistics.median(tpot), "accepted": statistics.mean(acc)}
    if trace_rows:
        row.update({k: statistics.median(r[k] for r in trace_rows) for k in ("iteration_ms", "host_bubble_ms")})
    return outs, row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bundle", type=Path)
    ap.add_argument("--prompts-file", type=Path, required=True)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("-n", type=int, default=128)
    args = ap.parse_args()
    rt = Runtime.load(args.bundle)
    plan = json.loads((args.bundle / "plan.json").read_text())
    profile = json.loads((args.bundle / "profile.json").read_text())
    stages = StageCosts.from_profile(profile)
    prompts = load_prompts(args.prompts_file, args.prompts, rt.tokenizer)
    unpruned = TreeShape(*(plan["best_unpruned"][k] for k in ("depth", "width", "verify")))
    rows = {"ar": (rt.decoder(speculative=False), None),
            "static (no pruning)": (rt.decoder(shape=unpruned), unpruned),
            "+ verify pruning": (rt.decoder(shape=rt.shape), rt.shape)}
    if rt.policy is not None:
        rows["+ depth predictor"] = (rt.decoder(speculative=True), None)
    schedule = plan["schedule"]
    print(f"bundle {args.bundle}: {len(prompts)} prompts x {args.n} tokens, greedy, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}")
    print("| row | shape | TPOT ms | mean accepted | iteration ms (measured / estimated) | host bubble ms | equal to AR |")
    print("|---|---|---|---|---|---|---|")
    ref = None
    for name, (dec, shape) in rows.items():
        outs, r = decode_row(dec, prompts, args.n)
        ref = outs if ref is None else ref
        est = f"{stages.iteration_ms(shape):.2f}" if shape else "-"
        label = f"D={shape.depth} W={shape.width} V={shape.verify}" if shape else ("per iteration" if name != "ar" else "-")
        measured = f"{r['iteration_ms']:.2f} / {est}" if "iteration_ms" in r else "-"
        bubble = f"{r['host_bubble_ms']:.2f}" if "host_bubble_ms" in r else "-"
        print(f"| {name} | {label} | {r['tpot_ms']:.2f} | {r['accepted']:.2f} | {measured} | {bubble} | "
              f"{'yes' if outs == ref else 'NO'} |")
    adaptive = plan.get("adaptive", {})
    if rt.policy is None:
        print(f"\n+ depth predictor: not in this bundle ({adaptive.get('reason', 'no record')}; held-out "
              f"{adaptive.get('held_out_tokens_per_ms')})")
    best = schedule["best_estimated"]
    print(f"\n+ stage plan: the runtime runs {schedule['variant']} on {schedule['assignment']} cores "
          f"(estimated {schedule['iteration_ms']:.2f} ms/iteration); the best plan the search priced is "
          f"{best['variant']} on {best['assignment']} cores, D={best['depth']} W={best['width']} V={best['verify']}, "
          f"{best['iteration_ms']:.2f} ms/iteration")


if __name__ == "__main__":
    main()
