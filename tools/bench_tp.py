"""Tensor parallelism on this machine: the verifier's forward on 1 process vs 2 gloo ranks, and the
collectives inside the compiled graph vs between compiled segments.

    python tools/random_checkpoint.py --kind llama --hidden 1024 --layers 16 --intermediate 2816 \\
        --vocab 32000 --out /tmp/rand260m
    python tools/bench_tp.py -m /tmp/rand260m --dtype bfloat16 --widths 1,8

One process (2 threads, then 1) times the whole verifier; then 2 ranks with 1 thread each time their
slices, every rank the same calls in lockstep. Modes:
  eager     the graph in PyTorch eager, c10d all-reduces
  aoti      AOTInductor packages, one per width, all-reduces inside the package (what `yggc compile --tp`
            writes; for one process the plain O1 bucket)
  ingraph   torch.compile of the whole forward, functional all-reduces traced into one graph
  segments  torch.compile with every all-reduce outside it: compiled segments between eager collectives
A forward at width 1 is one autoregressive step (its TPOT); width 8 is a small tree's verify step.
Before the timings: each process's read bandwidth (sum of a 512 MiB tensor), alone and with both ranks
reading at once. Medians of --repeats calls at a --context-token cache view.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from yggc.graphs import load_model
from yggc.graphs import tensor_parallel as tp
from yggc.passes.lower import lower_bucket
from yggc.passes.profile import bucket_latency_ms

from yggc.bench.floor import read_gbs, weight_bytes
from yggc.runtime import loading
from yggc.runtime.buckets import CompiledModel
from yggc.runtime.cache_layout import CacheLayout
from yggc.runtime.timing import median_ms
from yggc.runtime.tp_processes import free_port, process_group

MODES = ("eager", "aoti", "ingraph", "segments")
WORLD = 2
SUM_OVER_RANKS = tp.sum_over_ranks  # functional collectives when traced; "segments" swaps in an untraced one


def _eager_sum(t: torch.Tensor) -> torch.Tensor:
    dist.all_reduce(t)
    return t


def compiled(graph: torch.nn.Module, mode: str, widths: list[int], max_seq: int, tmp: Path, tag: str):
    """The graph as `mode` runs it."""
    if mode == "eager":
        return graph
    if mode == "aoti":
        files = {w: lower_bucket(graph, w, max_seq, tmp / f"{tag}_w{w}.pt2") for w in widths}
        return CompiledModel(graph, files)
    torch._dynamo.reset()
    tp.sum_over_ranks = torch._dynamo.disable(_eager_sum) if mode == "segments" else SUM_OVER_RANKS
    return torch.compile(graph, dynamic=False)


def time_modes(graph, layout: CacheLayout, args, tmp: Path, tag: str, modes=MODES) -> dict[str, dict[int, float]]:
    out = {}
    with torch.inference_mode():
        for mode in modes:
            model = compiled(graph, mode, args.widths, layout.max_seq, tmp, tag)
            out[mode] = {w: bucket_latency_ms(model, w, layout, args.context, args.repeats) for w in args.widths}
    tp.sum_over_ranks = SUM_OVER_RANKS
    return out


def rank_main(rank: int, args, port: int, tmp: str, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    with process_group("gloo", rank=rank, world_size=WORLD):
        torch.set_num_threads(1)
        dist.barrier()
        bandwidth = read_gbs(512 * 2**20)
        graph = tp.load_tp_model(args.model, CacheLayout(args.max_seq).n_slots, loading.parse_dtype(args.dtype))
        layout = CacheLayout(args.max_seq)
        dist.barrier()
        row = torch.zeros(1, graph.cfg.hidden_size)  # one step's all-reduce at width 1, float32
        allreduce = median_ms(lambda: dist.all_reduce(row), 100, warmup=10)
        times = time_modes(graph, layout, args, Path(tmp), f"rank{rank}")
        results[rank] = {"bandwidth": bandwidth, "bytes": weight_bytes(graph), "ms": times, "allreduce": allreduce,
                         "collectives": 2 * graph.cfg.n_layers + 1}


def single_process(args, tmp: Path) -> dict:
    layout = CacheLayout(args.max_seq)
    graph = load_model(args.model, layout.n_slots, loading.parse_dtype(args.dtype))
    out = {"bytes": weight_bytes(graph)}
    for threads in (2, 1):
        torch.set_num_threads(threads)
        out[threads] = {"bandwidth": read_gbs(512 * 2**20),
                        "ms": time_modes(graph, layout, args, tmp, f"tp1_t{threads}", ("eager", "aoti"))}
    return out


def report(single: dict, ranks: dict, args) -> None:
    mb = single["bytes"] / 2**20
    print(f"verifier {args.model} {args.dtype}: {mb:.0f} MB of weights; each rank {ranks[0]['bytes'] / 2**20:.0f} MB")
    print(f"read bandwidth: 1 process 2 threads {single[2]['bandwidth']:.1f} GB/s, 1 thread "
          f"{single[1]['bandwidth']:.1f} GB/s; 2 ranks at once {ranks[0]['bandwidth']:.1f} + "
          f"{ranks[1]['bandwidth']:.1f} GB/s")
    n, ms = ranks[0]["collectives"], max(r["allreduce"] for r in ranks.values())
    print(f"an all-reduce of one [1, hidden] float32 row between the ranks: {ms:.3f} ms; a TP step makes {n} "
          f"({n * ms:.1f} ms)")
    print(f"\n{'setup':<26}{'mode':<10}" + "".join(f"{f'W={w} ms':>11}" for w in args.widths) + f"{'GB/s at W=1':>13}")
    rows = [(f"TP=1, {t} thread(s)", m, single[t]["ms"][m], single["bytes"]) for t in (2, 1) for m in ("eager", "aoti")]
    rows += [("TP=2, 2 ranks x 1 thread", m, {w: max(r["ms"][m][w] for r in ranks.values()) for w in args.widths},
              ranks[0]["bytes"] * WORLD) for m in MODES]
    for setup, mode, ms, nbytes in rows:
        rate = nbytes / 1e9 / (ms[args.widths[0]] / 1000)
        print(f"{setup:<26}{mode:<10}" + "".join(f"{ms[w]:>11.2f}" for w in args.widths) + f"{rate:>13.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True, help="a verifier checkpoint whose heads split over 2 ranks")
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    ap.add_argument("--widths", default="1,8", type=lambda s: [int(w) for w in s.split(",")])
    ap.add_argument("--context", type=int, default=128, help="committed tokens in view (default 128)")
    ap.add_argument("--max-seq", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        single = single_process(args, Path(tmp))
        results = mp.Manager().dict()
        mp.spawn(rank_main, args=(args, free_port(), tmp, results), nprocs=WORLD)
    report(single, dict(results), args)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
