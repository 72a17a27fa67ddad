#!/usr/bin/env python3
"""T(W), the verifier package's time per call of W rows, against the memory floor measured in the same minutes.

    python tools/bench_step_floor.py PACKAGE.pt2 -m $(yggc pull smollm2) --widths 1,8,16 --repeats 60

PACKAGE.pt2 is one that `tools/bench_verify_packages.py lower` wrote. Each of `--repeats` rounds times `--per-round`
calls of every width and as many reads of a weights-sized tensor (the floor: the verifier's weight bytes over that
read's bandwidth, as `yggc bench` measures it), all taking turns call by call, and keeps each one's median. A shared
VM's memory speed moves within minutes, so the rounds are grouped by their floor (fastest third, middle, slowest):
where T(W) - floor stays put while the floor moves, that part of the step is work the memory waits for, not weights
it streams.
"""
from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch
from bench_verify_packages import add_call_args, prefilled
from yggc.passes.profile import bucket_call

from yggc.artifacts.timing import steady_ms_each
from yggc.bench.floor import weight_bytes


def summary(rounds: list[dict], widths: list[int]) -> list[str]:
    """A markdown table: per third of the rounds by floor, the medians of the floor, T(W), T(W) - floor, T(1) / floor
    and T(W) / T(1) (1: the first width)."""
    ordered = sorted(rounds, key=lambda r: r["floor"])
    thirds = [ordered[i * len(ordered) // 3:(i + 1) * len(ordered) // 3] for i in range(3)]
    cols = ["floor ms"] + [f"T({w})" for w in widths] + [f"T({w}) - floor" for w in widths] \
        + [f"T({widths[0]}) / floor"] + [f"T({w}) / T({widths[0]})" for w in widths[1:]]
    lines = ["| rounds | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for name, group in zip(("fastest third", "middle third", "slowest third"), thirds):
        def med(f) -> str:
            return f"{statistics.median(f(r) for r in group):.2f}"
        cells = [med(lambda r: r["floor"])] + [med(lambda r, w=w: r[w]) for w in widths] \
            + [med(lambda r, w=w: r[w] - r["floor"]) for w in widths] \
            + [med(lambda r: r[widths[0]] / r["floor"])] \
            + [med(lambda r, w=w: r[w] / r[widths[0]]) for w in widths[1:]]
        lines.append(f"| {name} ({len(group)}) | " + " | ".join(cells) + " |")
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("package", help="an O2 package (tools/bench_verify_packages.py lower)")
    add_call_args(ap, "1,8,16", "", "rounds, each keeping the medians of its calls (--per-round)")
    ap.add_argument("--per-round", type=int, default=7, help="calls of each width (and floor reads) a round")
    args = ap.parse_args(argv)
    widths = [int(w) for w in args.widths.split(",")]
    torch.set_num_threads(args.threads)
    with torch.inference_mode():
        model, loaded = prefilled(args, Path(args.package).resolve())
        n_bytes = weight_bytes(loaded.graph)
        weights_sized = torch.ones(n_bytes // 4)  # float32, read whole by a sum (yggc bench's read_gbs)
        fns = {w: bucket_call(model, w, loaded.layout, args.context) for w in widths}
        fns["floor"] = weights_sized.sum
        # each round: every fn's median over per_round calls, the fns taking turns call by call
        rounds = [steady_ms_each(fns, args.per_round, rounds=1) for _ in range(args.repeats)]
    gbs = [n_bytes / r["floor"] / 1e6 for r in rounds]
    print(f"{args.dtype} ({args.weights or args.dtype} linear weights), {args.threads} threads, {args.context} cached "
          f"tokens, {n_bytes / 1e6:.1f} MB of weights; "
          f"{args.repeats} rounds, the memory at {min(gbs):.0f}-{max(gbs):.0f} GB/s; medians in ms")
    print("\n".join(summary(rounds, widths)))


if __name__ == "__main__":
    main()
