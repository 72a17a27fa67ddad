"""EasySpec fuzzy drafting vs sequential drafting: acceptance, and the draft phase's time on 1 vs 2 ranks.

    python tools/bench_easyspec.py -m VERIFIER -md DRAFTER --prompts-file P.json --prompts 4 -n 64 \
        --shapes 2x4x3,4x2x6 --sets all:2,all:3 --dtype bfloat16 --threads 2

Part 1 decodes every prompt with sequential drafting and with each fuzzy layer-set choice (SPAN:SIZE, in
one process: the same numbers a rank group computes), greedy and eager; every row must equal the first.
Part 2 times one draft phase (head step + D - 1 tree steps, eager) of the drafter alone: one process with
1 and with --threads threads, and 2 gloo ranks with 1 thread each running the fuzzy sets of size 2,
rounds interleaved; medians.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from bench_compiled import add_workload_args, compare_decoders  # tools/ sibling
from bench_shapes import label, prompt_texts
from yggc.graphs.fuzzy import FuzzyDrafter, fuzzy_groups

from yggc.bench.suite import parse_shape
from yggc.plan.shape import TreeShape
from yggc.runtime import drafters, loading
from yggc.runtime.cache_layout import prefill
from yggc.runtime.draft_phase import DraftPhase
from yggc.runtime.fuzzy_decoder import FuzzyDecoder
from yggc.runtime.speculative import SpeculativeDecoder
from yggc.runtime.tp_processes import free_port, process_group

WORLD = 2


def acceptance(args, shapes: list[TreeShape], sets: list[tuple[str, int]]) -> None:
    v, d = drafters.load_pair(args.model, args.model_draft, loading.parse_dtype(args.dtype), 1024)
    prompts = [loading.encode_prompt(v.tokenizer, t) for t in prompt_texts(args.prompts_file, args.prompts)]
    for shape in shapes:
        decoders = {f"sequential {label(shape)}": SpeculativeDecoder(v.graph, d.graph, v.layout, shape)}
        for span, size in sets:
            groups = fuzzy_groups(d.graph.cfg.n_layers, size, span)
            fuzzy = FuzzyDrafter(d.graph, groups)
            decoders[f"fuzzy {span}:{size} {list(groups)}"] = FuzzyDecoder(v.graph, d.graph, v.layout, shape, fuzzy)
        print("\n".join(compare_decoders(decoders, prompts, args.n, args.repeats)))


def phase_call(args, world: int, rank: int, shape: TreeShape):
    """A draft phase of the drafter, fuzzy over `world` ranks when world > 1, at a prefilled context."""
    dtype = loading.parse_dtype(args.dtype)
    drafter = loading.load(args.model_draft, dtype, 1024)
    fuzzy = FuzzyDrafter(drafter.graph, fuzzy_groups(drafter.graph.cfg.n_layers, WORLD, "all"), rank, world)
    layout = drafter.layout
    phase = DraftPhase(drafter.graph, shape.depth, shape.width, drafter.graph.cfg.vocab_size, layout.trash,
                       tree_drafter=fuzzy if world > 1 else None)
    context = list(range(100, 100 + args.context))
    prefill(drafter.graph, context, 0, layout, 32)
    n = len(context)
    inputs = (torch.tensor([context[-1], 0]), torch.tensor([0, n]), torch.arange(layout.view(n + shape.n_nodes)),
              torch.full((2, shape.depth), layout.trash))
    return lambda: phase(*inputs)


def timed_calls(call, repeats: int, barrier=None) -> float:
    samples = []
    for i in range(repeats + 3):
        if barrier:
            barrier()
        t0 = time.perf_counter()
        call()
        if i >= 3:
            samples.append(1000 * (time.perf_counter() - t0))
    return statistics.median(samples)


def rank_main(rank: int, port: int, args, shape: TreeShape, out) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    with process_group("gloo", rank=rank, world_size=WORLD), torch.inference_mode():
        torch.set_num_threads(1)
        out[rank] = timed_calls(phase_call(args, WORLD, rank, shape), args.calls, dist.barrier)


def draft_phase_times(args, shape: TreeShape) -> None:
    rows = {"1 process, 1 thread, sequential": [], f"1 process, {args.threads} threads, sequential": [],
            "2 ranks x 1 thread, fuzzy all:2": []}
    keys = list(rows)
    for _ in range(args.rounds):
        for threads, key in ((1, keys[0]), (args.threads, keys[1])):
            torch.set_num_threads(threads)
            with torch.inference_mode():
                rows[key].append(timed_calls(phase_call(args, 1, 0, shape), args.calls))
        out = mp.Manager().dict()
        mp.spawn(rank_main, args=(free_port(), args, shape, out), nprocs=WORLD)
        rows[keys[2]].append(out[0])
    print(f"\ndraft phase {label(shape)} at {args.context} cached tokens, {args.dtype}, median of {args.rounds} "
          f"rounds x {args.calls} calls")
    print("| drafter run | draft phase ms |\n|---|---|")
    for key, values in rows.items():
        print(f"| {key} | {statistics.median(values):.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-md", "--model-draft", required=True)
    ap.add_argument("--prompts-file", type=Path, help="held-out prompts JSON (default: the demo pair's)")
    ap.add_argument("--shapes", default="2x4x3,4x2x6", help="DxWxV,...")
    ap.add_argument("--sets", default="all:2", help="fuzzy layer sets SPAN:SIZE,... (span inner or all)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--context", type=int, default=256, help="cached tokens when timing the draft phase")
    ap.add_argument("--calls", type=int, default=40, help="draft phases per timing round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-acceptance", action="store_true")
    ap.add_argument("--skip-timing", action="store_true")
    add_workload_args(ap)
    args = ap.parse_args()
    shapes = [parse_shape(s) for s in args.shapes.split(",")]
    sets = [(s.split(":")[0], int(s.split(":")[1])) for s in args.sets.split(",")]
    torch.set_num_threads(args.threads)
    if not args.skip_acceptance:
        acceptance(args, shapes, sets)
    for shape in shapes if not args.skip_timing else ():
        draft_phase_times(args, shape)


if __name__ == "__main__":
    main()
