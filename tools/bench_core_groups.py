#!/usr/bin/env python3
"""Core groups on a CPU (issue #14): is a memory-bound verifier on fewer cores, with the drafter
working beside it, cheaper than running the two one after the other on every core?

    python tools/bench_core_groups.py -m $(yggc pull smollm2) -d $(yggc pull smollm2 --drafter)

Each model runs in its own process (its own thread pool), pinned with sched_setaffinity. Rows:
  alone, all cores      the model's forward at each width with every core (today's sequential plan)
  alone, its group      the same on its core group only (the other group idle)
  beside the other      on its group while the other model loops on the other group (shared memory bandwidth)
The stage plans (yggc/plan/stages.py) price the "split" assignment from the last row against the first;
--bundle re-prices a calibrated bundle's shapes under every plan variant with those factors.
The timings are eager (one process per model cannot share an O2 package, whose kernels have their
thread count compiled in), so the factors stand in for the compiled models' ones.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import time
from pathlib import Path

WIDTHS = {"verifier": (1, 9, 17), "drafter": (2, 4)}


def time_widths(model_dir: str, dtype: str, widths: tuple[int, ...], cores: list[int], seconds: float,
                start, stop, out) -> None:
    """Worker: load the model on `cores`, wait at `start`, time each width until `stop` is set or
    `seconds` pass per width -> out.put({width: median ms})."""
    os.sched_setaffinity(0, cores)
    import torch
    from yggc.passes.profile import profile_context

    from yggc.runtime import loading
    from yggc.runtime.cache_layout import causal_rows

    torch.set_num_threads(len(cores))
    m = loading.load(model_dir, loading.parse_dtype(dtype), 1024)
    context = profile_context(m.layout)
    result = {}
    start.wait()
    with torch.inference_mode():
        for w in widths:
            slots = torch.arange(context, context + w)
            mask, ids = causal_rows(slots, m.layout.view(context + w)), torch.zeros(w, dtype=torch.long)
            times, t_end = [], time.perf_counter() + seconds
            while time.perf_counter() < t_end:
                t = time.perf_counter()
                m.graph(ids, slots, slots, mask)
                times.append((time.perf_counter() - t) * 1e3)
            result[w] = statistics.median(times[3:] or times)
    out.put(result)
    stop.wait()  # keep the cores busy until every timed worker is done


def run_group(jobs: dict[str, tuple[str, list[int], tuple[int, ...]]], dtype: str, seconds: float,
              background: dict[str, tuple[str, list[int], tuple[int, ...]]] | None = None) -> dict:
    """Time `jobs` concurrently; `background` models loop (untimed) beside them the whole while."""
    ctx = mp.get_context("spawn")
    start, stop = ctx.Barrier(len(jobs) + len(background or {})), ctx.Event()
    procs, queues = [], {}
    for name, (path, cores, widths) in {**jobs, **(background or {})}.items():
        q = ctx.Queue()
        secs = seconds if name in jobs else 1e9
        p = ctx.Process(target=time_widths, args=(path, dtype, widths, cores, secs, start, stop, q))
        p.start()
        procs.append(p)
        queues[name] = q
    results = {name: queues[name].get() for name in jobs}
    stop.set()
    for p in procs:  # background loops never end by themselves
        p.kill()
        p.join()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--verifier", required=True)
    ap.add_argument("-d", "--drafter", required=True)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--seconds", type=float, default=4.0, help="timing per width (default 4)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--bundle", type=Path, help="a calibrated bundle of this pair: re-price its stage plans with "
                                                 "the measured core-group factors")
    args = ap.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit("bench_core_groups: needs at least 2 cores")
    half = len(cores) // 2
    group = {"verifier": cores[:half], "drafter": cores[half:]}
    paths = {"verifier": args.verifier, "drafter": args.drafter}

    def job(name, on):
        return {name: (paths[name], on, WIDTHS[name])}

    rows = {}
    for name in paths:
        rows[(name, "alone, all cores")] = run_group(job(name, cores), args.dtype, args.seconds)[name]
        rows[(name, "alone, its group")] = run_group(job(name, group[name]), args.dtype, args.seconds)[name]
        other = "drafter" if name == "verifier" else "verifier"
        rows[(name, "beside the other")] = run_group(job(name, group[name]), args.dtype, args.seconds,
                                                     background=job(other, group[other]))[name]
    if args.json:
        print(json.dumps({f"{n}/{c}": {str(w): round(ms, 3) for w, ms in r.items()} for (n, c), r in rows.items()}))
        return
    print(f"cores {cores}, verifier group {group['verifier']}, drafter group {group['drafter']}, {args.dtype}, eager")
    for (name, case), r in rows.items():
        print(f"{name:9s} {case:18s} " + "  ".join(f"W={w}: {ms:7.2f} ms" for w, ms in r.items()))
    factors = split_factors(rows)
    print(f"split factors (beside the other / alone on all cores, median over widths): {factors}")
    if args.bundle:
        print_plans(args.bundle, factors)


def split_factors(rows: dict) -> dict[str, float]:
    """Each model's slowdown on its own core group while the other works, against every core alone."""
    return {f"{name}_factor": round(statistics.median(rows[(name, "beside the other")][w] / rows[(name, "alone, all cores")][w]
                                                      for w in WIDTHS[name]), 3) for name in ("verifier", "drafter")}


def print_plans(bundle: Path, factors: dict[str, float]) -> None:
    """The bundle's calibrated shapes re-priced with the split assignment: the best plan per (variant, cores)."""
    from yggc.passes.plan import search_plans

    from yggc.plan.shape import TreeShape

    plan = json.loads((bundle / "plan.json").read_text())
    profile = {**json.loads((bundle / "profile.json").read_text()), "core_groups": factors}
    candidates = {TreeShape(c["depth"], c["width"], c["verify"]): c["tokens_per_iter"] for c in plan["candidates"]}
    best = {}
    for p in search_plans(candidates, profile):
        best.setdefault((p.variant, p.assignment), p)
    print(f"\n{bundle}: best plan per variant and assignment over its {len(candidates)} calibrated shapes")
    print("| variant | cores | shape | iteration ms | ms/token (estimated) | runs today |\n|---|---|---|---|---|---|")
    for (variant, assignment), p in sorted(best.items(), key=lambda kv: kv[1].ms_per_token):
        s = p.shape
        print(f"| {variant} | {assignment} | D={s.depth} W={s.width} V={s.verify} | {p.iteration_ms:.2f} | "
              f"{p.ms_per_token:.2f} | {'yes' if p.executable else 'no'} |")


if __name__ == "__main__":
    main()
