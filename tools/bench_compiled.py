"""Compiled vs eager on one bundle: per-bucket forward latency, AR and tree TPOT, host share.

    python tools/bench_compiled.py BUNDLE [--prompts 4] [-n 128] [--repeats 2] [--threads 1]

Eager rows run the bundle's own graphs without its compiled buckets; every row must produce the
same greedy tokens. The host share is the part of a steady-state tree iteration spent outside the
two compiled phase calls.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch

from yggc.runtime import Runtime
from yggc.runtime.autoregressive import AutoregressiveDecoder, StopPolicy
from yggc.runtime.cache_layout import causal_rows, prefill
from yggc.runtime.loading import DEMO_PAIR
from yggc.runtime.speculative import SpeculativeDecoder
from yggc.runtime.timing import median_ms
from yggc.tree.sampling import SamplingParams


def forward_ms(fn, width: int, context: int, layout) -> float:
    """Median ms of one forward at `width` with `context` tokens in view."""
    slots = torch.arange(context, context + width)
    mask, ids = causal_rows(slots, layout.view(context + width)), torch.zeros(width, dtype=torch.long)
    with torch.inference_mode():
        return median_ms(lambda: fn(ids, slots, slots, mask), 30)


def bucket_table(rt: Runtime, context: int = 256) -> list[str]:
    if not rt.verifier.graph.has_weights:  # an O2 bundle: its packages carry the weights
        return ["(an O2 bundle: no eager weights to compare with; tools/bench_widths.py times its widths)"]
    lines = ["| bucket | eager ms | compiled ms | speedup |", "|---|---|---|---|"]
    layout = rt.verifier.layout
    for name, model in rt.compiled.items():
        for w, run in sorted(model.runners.items()):
            eager, compiled = forward_ms(model.graph, w, context, layout), forward_ms(run, w, context, layout)
            lines.append(f"| {name} W={w} | {eager:.3f} | {compiled:.3f} | {eager / compiled:.2f}x |")
    return lines


def compare_decoders(decoders: dict, prompts: list[list[int]], n: int, repeats: int,
                     eos_ids: tuple[int, ...] = (), bubble: bool = False) -> list[str]:
    """Markdown rows: mean accepted length, median TPOT and equality, each decoder vs the first one
    (up to n tokens, or to the first of eos_ids). bubble: trace the speculative decoders (`yggc run --trace`'s
    StageTrace) and add the median host bubble per iteration (time outside compiled model calls)."""
    tpot = {k: [] for k in decoders}
    accepted = {k: [] for k in decoders}
    bubbles = {k: [] for k in decoders}
    equal = dict.fromkeys(decoders, True)
    for prompt in prompts:
        ref = None
        for rep in range(repeats + 1):  # round 0 warms up
            for name, dec in decoders.items():
                trace = dec.enable_trace() if bubble and hasattr(dec, "enable_trace") else None
                out = [t for chunk in dec.stream(prompt, n, SamplingParams(), eos_ids) for t in chunk]
                ref = out if ref is None else ref
                equal[name] &= out == ref
                if rep:
                    tpot[name].append(dec.stats.tpot_ms)
                    accepted[name].append(dec.stats.summary().get("mean_accepted_length", 1.0))
                    bubbles[name] += [it["host_bubble_ms"] for it in trace.per_iteration()] if trace else []
    first = next(iter(decoders))
    base = statistics.median(tpot[first])
    extra = (" host bubble ms |", "---|") if bubble else ("", "")
    lines = [f"| decoding | mean accepted | TPOT median ms | vs {first} | equal to {first} |{extra[0]}",
             f"|---|---|---|---|---|{extra[1]}"]
    for name in decoders:
        med = statistics.median(tpot[name])
        cell = (f" {statistics.median(bubbles[name]):.2f} |" if bubbles[name] else " - |") if bubble else ""
        lines.append(f"| {name} | {statistics.mean(accepted[name]):.2f} | {med:.3f} | {base / med:.2f}x | "
                     f"{'yes' if equal[name] else 'NO'} |{cell}")
    return lines


def decode_table(rt: Runtime, prompts: list[list[int]], n: int, repeats: int) -> list[str]:
    layout = rt.verifier.layout
    decoders = {"ar-compiled": rt.decoder(speculative=False), "tree-compiled": rt.decoder(speculative=True)}
    if rt.verifier.graph.has_weights:
        decoders = {"ar-eager": AutoregressiveDecoder(rt.verifier.graph, layout), **decoders,
                    "tree-eager": SpeculativeDecoder(rt.verifier.graph, rt.drafter.graph, layout, rt.shape)}
    return compare_decoders(decoders, prompts, n, repeats)


def host_share(rt: Runtime, prompt: list[int], iterations: int = 60) -> str:
    dec, layout = rt.decoder(speculative=True), rt.verifier.layout
    inside = [0.0]

    def timed(fn):
        def call(*args):
            t0 = time.perf_counter()
            out = fn(*args)
            inside[0] += time.perf_counter() - t0
            return out
        return call

    dec.run_draft, dec.run_verify = timed(dec.run_draft), timed(dec.run_verify)
    with torch.inference_mode():
        prefill(dec.verifier, prompt, 0, layout, 32)
        prefill(dec.drafter, prompt, 0, layout, 32)
        n, pending, stop = len(prompt), [prompt[-1]], StopPolicy(10**9, (), layout)
        t0 = time.perf_counter()
        for _ in range(iterations):
            _, n, pending = dec.iterate(n, pending, SamplingParams(), torch.Generator(), stop)
        total = time.perf_counter() - t0
    host = total - inside[0]
    return (f"host share of a compiled tree iteration: {100 * host / total:.1f}% "
            f"({1000 * host / iterations:.3f} ms of {1000 * total / iterations:.3f} ms)")


FIRST_TOKEN = """
import json, sys, time
t0 = time.perf_counter()
import torch, yggc
t1 = time.perf_counter()
rt = yggc.Runtime.load(sys.argv[1])
t2 = time.perf_counter()
next(iter(rt.stream_tokens(sys.argv[2], 16)))
t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "first_token": t3 - t2}))
"""


def load_to_first_token(bundle: str, prompt: str, runs: int = 3) -> str:
    """Fresh processes: Runtime.load, then the first streamed token (import torch reported apart)."""
    times = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", FIRST_TOKEN, bundle, prompt], capture_output=True, text=True,
                             check=True)
        times.append(json.loads(out.stdout.strip().splitlines()[-1]))
    med = {k: statistics.median(t[k] for t in times) for k in times[0]}
    return (f"Runtime.load to first token, median of {runs} fresh processes: {med['load'] + med['first_token']:.2f} s "
            f"(load {med['load']:.2f} s + first token {med['first_token']:.2f} s; import torch+yggc {med['import']:.2f} s)")


def add_workload_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)


def heldout_texts(n: int) -> list[str]:
    """The first n held-out prompts shipped with the demo pair."""
    return [p["text"] for p in json.loads((DEMO_PAIR / "prompts.json").read_text())["prompts"]][:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bundle")
    add_workload_args(ap)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rt = Runtime.load(args.bundle)
    prompts = [rt.encode(t) for t in heldout_texts(args.prompts)]
    print(f"bundle {args.bundle}, plan {rt.shape}, {args.threads} thread(s), torch {torch.__version__}")
    print("\n".join(bucket_table(rt)), end="\n\n")
    print("\n".join(decode_table(rt, prompts, args.n, args.repeats)), end="\n\n")
    print(host_share(rt, prompts[0]))
    print(load_to_first_token(args.bundle, heldout_texts(1)[0]))


if __name__ == "__main__":
    main()
