#!/usr/bin/env python3
"""Two drafters for one verifier, side by side, eager: tokens per verify call, acceptance per depth, TPOT.

    python tools/bench_drafters.py -m VERIFIER -md DRAFTER -md2 EAGLE3_HEAD --shapes 4x1x4,4x2x8 \\
        --prompts-file PROMPTS.json [--prompts 4] [-n 128] [--repeats 1] [--dtype bfloat16] [--temp 0]

Every prompt runs autoregressively first (the reference), then each (drafter, shape), interleaved;
greedy rows must equal the reference token for token. "tokens/call" is accepted drafts + the bonus per
verifier call (vLLM's mean accepted length); "per depth" is the fraction of verify calls whose path
reached each depth, among calls that verified that depth. Eager on purpose: it compares what the
drafters predict, not how they are compiled (`yggc bench` times compiled bundles).
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from yggc.bench.suite import parse_shape
from yggc.runtime import drafters, loading
from yggc.runtime.autoregressive import AutoregressiveDecoder
from yggc.tree.sampling import SamplingParams


def load_prompts(path: Path, n: int, tokenizer) -> list[list[int]]:
    data = json.loads(path.read_text())
    texts = [p["text"] if isinstance(p, dict) else p for p in data.get("prompts", data)][:n]
    return [tokenizer.encode(t).ids for t in texts]


def run(dec, prompt: list[int], n: int, params: SamplingParams) -> tuple[list[int], dict]:
    out = [t for chunk in dec.stream(prompt, n, params) for t in chunk]
    return out, dec.stats.summary()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-md", "--model-draft", required=True, help="the first drafter (e.g. the standalone one)")
    ap.add_argument("-md2", "--model-draft2", required=True, help="the second drafter (e.g. an EAGLE-3 head)")
    ap.add_argument("--shapes", default="4x1x4,4x2x8", help="DxWxV,... for both drafters")
    ap.add_argument("--prompts-file", type=Path, required=True)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--temp", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = loading.parse_dtype(args.dtype)
    verifier = loading.load(loading.model_dir(args.model), dtype, 2048)
    names = {"drafter": args.model_draft, "eagle3" if drafters.kind_of_folder(args.model_draft2).name == "eagle3"
             else "drafter2": args.model_draft2}
    loaded = {}
    for label, path in names.items():
        drafters.check_drafter(verifier.path, path)
        loaded[label] = drafters.load_drafter(path, verifier, dtype)
    shapes = [parse_shape(s) for s in args.shapes.split(",")]
    decoders = {"ar": AutoregressiveDecoder(verifier.graph, verifier.layout)}
    for label, d in loaded.items():
        for shape in shapes:
            decoders[f"{label} {shape.depth}x{shape.width}x{shape.verify}"] = drafters.speculative_decoder(
                verifier.graph, d.graph, verifier.layout, shape)
    prompts = load_prompts(args.prompts_file, args.prompts, verifier.tokenizer)
    rows = {k: {"tpot": [], "calls": 0, "accepted": 0, "depth_hit": [], "depth_n": [], "equal": True}
            for k in decoders}
    for i, prompt in enumerate(prompts):
        ref = None
        for rep in range(args.repeats + 1):  # round 0 warms up
            for name, dec in decoders.items():
                params = SamplingParams(args.temp, seed=1000 * i + rep if args.temp else None)
                out, s = run(dec, prompt, args.n, params)
                ref = out if ref is None else ref
                if rep == 0:
                    continue
                r = rows[name]
                r["equal"] &= out == ref or args.temp > 0
                r["tpot"].append(s["tpot_ms"])
                r["calls"] += s["n_iterations"]
                r["accepted"] += s["n_accept"]
                for lst, key in ((r["depth_hit"], "accepted_per_depth"), (r["depth_n"], "drafted_per_depth")):
                    lst.extend([0] * (len(s[key]) - len(lst)))
                    for d, v in enumerate(s[key]):
                        lst[d] += v
        print(f"prompt {i + 1}/{len(prompts)} done", flush=True)
    base = statistics.median(rows["ar"]["tpot"])
    print(f"\nverifier {args.model}, {args.dtype}, {len(prompts)} prompts from {args.prompts_file} x {args.n} tokens, "
          f"{args.repeats} repeat(s), temperature {args.temp}, {args.threads} threads, eager")
    print("| decoding | tokens/call | per-depth acceptance | TPOT median ms | vs ar | equal to ar |")
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        per_call = (r["accepted"] + r["calls"]) / r["calls"] if r["calls"] else 1.0
        depth = " / ".join(f"{h / n:.2f}" for h, n in zip(r["depth_hit"], r["depth_n"]) if n) or "-"
        med = statistics.median(r["tpot"])
        print(f"| {name} | {per_call:.2f} | {depth} | {med:.2f} | {base / med:.2f}x | "
              f"{'yes' if r['equal'] else 'NO'} |")


if __name__ == "__main__":
    main()
