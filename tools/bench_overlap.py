#!/usr/bin/env python3
"""Shared cores (issue #14): does a drafter stage run beside the verifier's call cost less than after it?

The overlapped stage plans (aot_tail, aot_head; yggc/plan/stages.py) pay only if the drafter's work can
hide under the verifier's. On a CPU whose compiled packages both use every core, the only way to overlap
them without compiling per-group packages is two Python threads, each calling its package: AOTInductor's
call releases the GIL, so they do run at once, but on the same cores. This times, through a bundle's own
O2 packages and with `--context` cached tokens:

  verifier       the verifier's forward at W rows, alone
  drafter        the drafter's forward at its width, alone
  serial         the two one after the other (what the sequential plan on shared cores does)
  concurrent     the drafter in a second thread while the verifier runs (what an executor of an overlapped
                 plan on shared cores would do)

and whether the main thread's Python keeps running during a verifier call (the GIL check). The plan search
prices the shared assignment as one resource (stages one at a time): the model holds where concurrent is
no faster than serial.

    python tools/bench_overlap.py BUNDLE --pairs 1x1,4x4,8x4 --threads 2
"""
from __future__ import annotations

import argparse
import threading
import time

import torch
from yggc.passes.profile import probe_tokens

from yggc.runtime import Runtime
from yggc.runtime.cache_layout import causal_rows
from yggc.runtime.timing import median_ms


def forward_call(rt: Runtime, name: str, width: int, context: int):
    """A closure running model `name`'s compiled forward on `width` rows after `context` cached tokens."""
    model, layout = rt.compiled[name], getattr(rt, name).layout
    slots = torch.arange(context, context + width)
    mask = causal_rows(slots, layout.view(context + width))
    ids = probe_tokens(width, rt.verifier.graph.cfg.vocab_size, "cpu")
    if name == "drafter" and hasattr(rt.drafter.graph, "fuse"):  # an EAGLE-3 head also reads a feature per row
        feature = torch.zeros(width, rt.drafter.graph.cfg.hidden_size, dtype=rt.drafter.graph.fc.weight.dtype)
        return lambda: model(ids, feature, slots, slots, mask)
    return lambda: model(ids, slots, slots, mask)


def concurrently(first, second) -> None:
    """`second` in a new thread while `first` runs in this one."""
    worker = threading.Thread(target=second)
    worker.start()
    first()
    worker.join()


def python_progress(call) -> tuple[int, float]:
    """Loop iterations this thread makes while `call` runs in another, and the call's ms: ~0 iterations means
    the call holds the GIL."""
    done = threading.Event()
    worker = threading.Thread(target=lambda: (call(), done.set()))
    count, t0 = 0, time.perf_counter()
    worker.start()
    while not done.is_set():
        count += 1
    worker.join()
    return count, (time.perf_counter() - t0) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bundle")
    ap.add_argument("--pairs", default="1x1,4x4,8x4", help="verifier rows x drafter rows, comma-separated")
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rt = Runtime.load(args.bundle)
    print(f"{args.bundle}: {args.context} cached tokens, {args.threads} threads, medians of {args.repeats}\n")
    print("| verifier W | drafter W | verifier ms | drafter ms | serial ms | concurrent ms | concurrent / serial |")
    print("|---|---|---|---|---|---|---|")
    with torch.inference_mode():
        for pair in args.pairs.split(","):
            wv, wd = map(int, pair.split("x"))
            verify, draft = forward_call(rt, "verifier", wv, args.context), forward_call(rt, "drafter", wd, args.context)
            serial = lambda v=verify, d=draft: (v(), d())  # noqa: E731
            overlapped = lambda v=verify, d=draft: concurrently(v, d)  # noqa: E731
            ms = [median_ms(fn, args.repeats) for fn in (verify, draft, serial, overlapped)]
            print(f"| {wv} | {wd} | " + " | ".join(f"{m:.2f}" for m in ms) + f" | {ms[3] / ms[2]:.2f} |")
        count, call_ms = python_progress(forward_call(rt, "verifier", 4, args.context))
    print(f"\nGIL: this thread looped {count} times during one {call_ms:.1f} ms verifier call in another thread "
          f"({'released' if count > 1000 else 'held'})")


if __name__ == "__main__":
    main()
