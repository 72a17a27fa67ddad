#!/usr/bin/env python3
"""Where a verify step's time goes, kernel by kernel: the O2 verifier package at several widths.

Lowers the model as `yggc compile --opt O2` does, with Inductor's per-kernel profiling compiled in
(cpp.enable_kernel_profile), prefills `--context` tokens and profiles calls at each width with torch.profiler, the
widths taking turns (a shared VM's speed drifts within minutes); each call is the profile pass's (bucket_call).
Kernels are grouped by what they compute: each linear layer's GEMM (named from the model's config), the attention
op, the tied LM head, and the pointwise and norm kernels around them. Printed: ms per call of each group at each
width and how much it grows from the first width to the last, and the wall time of unprofiled calls (the best of
3 round medians, widths in turn). The instrumented package runs slower than a bundle's: read the groups' growth,
not their absolute sum.

    python tools/bench_package_kernels.py -m $(yggc pull smollm2) --widths 1,4,8 --threads 2
"""
from __future__ import annotations

import argparse
import re
import tempfile
from collections import defaultdict
from pathlib import Path

import torch
from yggc.passes.lower import lower_model
from yggc.passes.profile import bucket_call

from yggc.artifacts.buckets import CompiledModel
from yggc.artifacts.cache_layout import prefill
from yggc.artifacts.timing import steady_ms_each
from yggc.runtime import loading

GEMM_NAME = re.compile(r"gemm_m\w*?n(\d+)k(\d+)")


def linear_names(cfg) -> dict[tuple[int, int], str]:
    """(N, K) of each linear layer in a block -> its name (GEMMs are named by their output and input sizes)."""
    hidden, head_dim = cfg.hidden_size, cfg.head_dim
    qkv = (cfg.n_heads + 2 * cfg.n_kv_heads) * head_dim
    return {(qkv, hidden): "qkv projection", (hidden, cfg.n_heads * head_dim): "attention output projection",
            (2 * cfg.intermediate_size, hidden): "gate + up projection",
            (hidden, cfg.intermediate_size): "down projection"}


def kernel_group(name: str, linears: dict[tuple[int, int], str]) -> str:
    """A profiler event's name -> what it computes."""
    if "attend_rows" in name:
        return "attention op"
    if name.startswith("yggc::tied_head"):
        return "tied LM head"
    gemm = GEMM_NAME.search(name)
    if gemm:
        n, k = int(gemm.group(1)), int(gemm.group(2))
        return "GEMM " + linears.get((n, k), f"N={n} K={k}")
    if "cpp_fused" in name:
        return "pointwise and norm kernels"
    return f"other: {name}"


def group_ms(self_ms: dict[str, float], linears: dict[tuple[int, int], str]) -> dict[str, float]:
    """{event name: self ms per call} -> {group: ms per call}."""
    out: dict[str, float] = defaultdict(float)
    for name, ms in self_ms.items():
        out[kernel_group(name, linears)] += ms
    return dict(out)


def profiled_ms(calls: dict, rounds: int, per_round: int) -> dict[int, dict[str, float]]:
    """{width: {event name: self ms per call}} of the width -> call map, the widths taking turns (`rounds` x
    `per_round` profiled calls each), so a machine whose speed drifts weighs on every width alike."""
    total: dict[int, dict[str, float]] = {w: defaultdict(float) for w in calls}
    for _ in range(rounds):
        for w, call in calls.items():
            call()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                for _ in range(per_round):
                    call()
            for e in prof.key_averages():
                total[w][e.key] += e.self_cpu_time_total / 1e3 / (rounds * per_round)
    return {w: dict(events) for w, events in total.items()}


def print_table(groups: dict[int, dict[str, float]], wall: dict[int, float]) -> None:
    widths = list(groups)
    names = sorted({g for per in groups.values() for g in per},
                   key=lambda g: -(groups[widths[-1]].get(g, 0) - groups[widths[0]].get(g, 0)))
    print("| kernels | " + " | ".join(f"W={w} ms" for w in widths) + f" | W={widths[-1]} - W={widths[0]} |")
    print("|---|" + "---|" * (len(widths) + 1))
    for g in names:
        ms = [groups[w].get(g, 0.0) for w in widths]
        print(f"| {g} | " + " | ".join(f"{m:.3f}" for m in ms) + f" | {ms[-1] - ms[0]:+.3f} |")
    total = [sum(groups[w].values()) for w in widths]
    print("| all profiled | " + " | ".join(f"{t:.3f}" for t in total) + f" | {total[-1] - total[0]:+.3f} |")
    print("| wall, unprofiled (median) | " + " | ".join(f"{wall[w]:.3f}" for w in widths)
          + f" | {wall[widths[-1]] - wall[widths[0]]:+.3f} |")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True, help="a verifier checkpoint folder")
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    ap.add_argument("--widths", default="1,4,8", help="rows per call, comma-separated (the first is the baseline)")
    ap.add_argument("--context", type=int, default=256, help="cached tokens before the rows")
    ap.add_argument("--max-seq", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=30, help="unprofiled calls per width (wall: min of 3 round medians)")
    ap.add_argument("--rounds", type=int, default=6, help="profiled rounds, the widths taking turns")
    ap.add_argument("--calls", type=int, default=5, help="profiled calls per width and round")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    widths = [int(w) for w in args.widths.split(",")]
    loaded = loading.load(args.model, loading.parse_dtype(args.dtype), args.max_seq)
    with tempfile.TemporaryDirectory() as tmp, torch._inductor.config.patch({"cpp.enable_kernel_profile": True}):
        print(f"lowering {args.model} (O2, kernels profiled) ...", flush=True)
        package = lower_model(loaded.graph, max(64, *widths), args.max_seq, Path(tmp) / "verifier.pt2")
        model = CompiledModel(loaded.graph, {1: package}, "O2", package_width=max(64, *widths))
        ids = torch.randint(0, loaded.graph.cfg.vocab_size, (args.context,), generator=torch.Generator().manual_seed(0))
        with torch.inference_mode():
            prefill(model, ids.tolist(), 0, loaded.layout, 64)
            calls = {w: bucket_call(model, w, loaded.layout, args.context) for w in widths}  # as the profile pass
            wall = steady_ms_each(calls, args.repeats)
            events = profiled_ms(calls, args.rounds, args.calls)
        linears = linear_names(loaded.graph.cfg)
        groups = {w: group_ms(events[w], linears) for w in widths}
    print(f"{args.dtype}, {torch.get_num_threads()} threads, {args.context} cached tokens, ms per call (self time per "
          f"kernel group, mean of {args.rounds} x {args.calls} profiled calls; widths interleaved)")
    print_table(groups, wall)


if __name__ == "__main__":
    main()
