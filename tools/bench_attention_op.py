#!/usr/bin/env python3
"""The attention op (yggc::attend_rows_v3) of kernel libraries built by different checkouts, side by side.

Two libraries register the op under one name, so each runs in a process of its own, the libraries taking turns
round by round (a shared VM's memory speed drifts within minutes). A process times one verify step's attention:
30 layers' bf16 caches of SmolLM2's shape (9 query heads, 3 key/value heads, head_dim 64), `--context` cached
tokens and a binary tree of W rows above them, at each width in turn. Printed: the median ms per step of each
library at each width, and whether every library computed the same bits (a digest of the outputs; a kernel may
change speed, never bits).

    python tools/bench_attention_op.py build -o NEW.so            # in each checkout (the working tree's sources)
    python tools/bench_attention_op.py time OLD.so NEW.so --widths 1,4,8,16 --rounds 4
"""
from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from yggc.passes.kernels import kernel_library

from yggc.artifacts import cache_layout, kernel_ops
from yggc.errors import YggcError
from yggc.tree import token_tree

HEADS, KV_HEADS, HEAD_DIM, LAYERS = 9, 3, 64, 30  # SmolLM2-135M


def tree_mask(width: int, context: int, slots: int) -> torch.Tensor:
    """[W, slots]: every row sees the context, itself and its ancestors in a binary tree (row w's parent (w-1)//2),
    as the runtime builds a verify call's mask (yggc.tree.token_tree)."""
    tree = token_tree.TokenTree.from_root(0, width)
    tree.parents[1:] = (torch.arange(1, width) - 1) // 2
    return token_tree.tree_mask(context, tree.ancestor_mask(), slots)


def step_inputs(width: int, context: int, seed: int = 0) -> list[tuple[torch.Tensor, ...]]:
    """Per layer (q [H, W, hd], keys, values [KV, S, hd], mask [W, S]), S the view a CPU call reads."""
    g = torch.Generator().manual_seed(seed)
    slots = cache_layout.CacheLayout(context + 256, cache_layout.VIEW_ALIGN["cpu"]).view(context + width)
    mask = tree_mask(width, context, slots)
    return [(torch.randn(HEADS, width, HEAD_DIM, generator=g).bfloat16(),
             torch.randn(KV_HEADS, slots, HEAD_DIM, generator=g).bfloat16(),
             torch.randn(KV_HEADS, slots, HEAD_DIM, generator=g).bfloat16(), mask) for _ in range(LAYERS)]


def one_library(library: Path, widths: list[int], context: int, calls: int, threads: int) -> dict:
    """In this process: -> {width: {"ms": median ms per step, "digest": sha256 of the outputs}}."""
    kernel_ops.load(library)
    torch.set_num_threads(threads)
    op = getattr(torch.ops.yggc, kernel_ops.ATTEND_OP)
    inputs = {w: step_inputs(w, context) for w in widths}
    digests = {w: hashlib.sha256(b"".join(op(*layer).view(torch.int16).numpy().tobytes() for layer in inputs[w]))
               .hexdigest() for w in widths}
    times = {w: [] for w in widths}
    for _ in range(calls):
        for w in widths:
            start = time.perf_counter()
            for layer in inputs[w]:
                op(*layer)
            times[w].append((time.perf_counter() - start) * 1e3)
    return {w: {"ms": statistics.median(times[w]), "digest": digests[w]} for w in widths}


def time_libraries(args) -> None:
    runs = [[] for _ in args.libraries]  # per library (the same one may be listed twice), per round
    for _ in range(args.rounds):
        for lib, lib_runs in zip(args.libraries, runs):
            out = subprocess.run([sys.executable, __file__, "_one", lib, "--widths", ",".join(map(str, args.widths)),
                                  "--context", str(args.context), "--calls", str(args.calls),
                                  "--threads", str(args.threads)], capture_output=True, text=True, check=True)
            lib_runs.append({int(w): r for w, r in json.loads(out.stdout).items()})
    first = runs[0][0]
    same = all(run[w]["digest"] == first[w]["digest"] for lib_runs in runs for run in lib_runs for w in args.widths)
    print(f"bf16, {args.threads} threads, {args.context} cached tokens, {LAYERS} layers a step; "
          f"outputs {'equal' if same else 'DIFFER'} between the libraries; ms per step, median of {args.rounds} rounds")
    print("| library | " + " | ".join(f"W={w}" for w in args.widths) + " |")
    print("|---|" + "---|" * len(args.widths))
    for lib, lib_runs in zip(args.libraries, runs):
        cells = [f"{statistics.median(run[w]['ms'] for run in lib_runs):.3f}" for w in args.widths]
        print(f"| {lib} | " + " | ".join(cells) + " |")
    if not same:
        raise SystemExit("bench_attention_op: the libraries' outputs differ")


def parse_widths(text: str) -> list[int]:
    widths = [int(w) for w in text.split(",")]
    if min(widths) < 1:
        raise argparse.ArgumentTypeError(f"widths must be >= 1, got {text}")
    return widths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_attention_op", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build this checkout's kernel library")
    build.add_argument("-o", "--out", type=Path, required=True)
    for name in ("time", "_one"):
        p = sub.add_parser(name, help="time libraries side by side" if name == "time" else argparse.SUPPRESS)
        p.add_argument("libraries", nargs="+" if name == "time" else 1)
        p.add_argument("--widths", type=parse_widths, default=[1, 4, 8, 16])
        p.add_argument("--context", type=int, default=256)
        p.add_argument("--calls", type=int, default=200, help="steps timed per width in each process")
        p.add_argument("--threads", type=int, default=2)
        if name == "time":
            p.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    if args.command == "build":
        try:
            kernel_library.compile_sources(kernel_ops.SOURCES, args.out)
        except YggcError as e:
            raise SystemExit(f"bench_attention_op: {e}")
        print(args.out)
    elif args.command == "_one":
        print(json.dumps(one_library(Path(args.libraries[0]), args.widths, args.context, args.calls, args.threads)))
    else:
        time_libraries(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
