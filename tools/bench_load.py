"""What a bundle costs before and while it decodes: its size on disk against its weights, `Runtime.load`
time, time to the first token (of a chat answer when the model has a chat template), and the process's
RSS after load and at its peak.

    python tools/bench_load.py BUNDLE [--prompt "Write a haiku about rust."] [-n 64] [--threads 2]

Run one bundle per process: RSS and the import time are the process's own.
"""
from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

T0 = time.perf_counter()
import torch  # noqa: E402

import yggc  # noqa: E402
from yggc.bench.floor import weight_bytes  # noqa: E402
from yggc.runtime.drafters import is_head  # noqa: E402

IMPORTED_S = time.perf_counter() - T0


def rss_mb() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    return 0


def peak_rss_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle", type=Path)
    ap.add_argument("--prompt", default="Write a haiku about rust.")
    ap.add_argument("-n", type=int, default=64, help="new tokens to decode after the first")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rss_imported = rss_mb()
    t = time.perf_counter()
    rt = yggc.Runtime.load(args.bundle)
    load_s = time.perf_counter() - t
    rss_loaded = rss_mb()
    chat = {"messages": [{"role": "user", "content": args.prompt}]} if rt.verifier.chat else {"prompt": args.prompt}
    steps = rt.stream_tokens(max_new_tokens=args.n, **chat)
    next(steps)
    first_token_s = time.perf_counter() - t
    n = sum(1 for _ in steps)
    on_disk = sum(p.stat().st_size for p in args.bundle.rglob("*") if p.is_file())
    weights = weight_bytes(rt.verifier.graph) + weight_bytes(rt.drafter.graph)  # tied weights once
    if is_head(rt.drafter.graph):  # its token embedding is the verifier's, counted there
        weights -= weight_bytes(rt.drafter.graph.embed)
    print(json.dumps({
        "bundle_mb": round(on_disk / 1e6, 1), "weights_mb": round(weights / 1e6, 1),
        "bundle_over_weights": round(on_disk / weights, 3),
        "packages_mb": {p.name: round(p.stat().st_size / 1e6, 1) for p in sorted(args.bundle.glob("artifacts/*"))},
        "import_s": round(IMPORTED_S, 2), "load_s": round(load_s, 2), "load_to_first_token_s": round(first_token_s, 2),
        "rss_imported_mb": rss_imported, "rss_loaded_mb": rss_loaded, "rss_end_mb": rss_mb(),
        "peak_rss_mb": peak_rss_mb(), "decoded_steps": n + 1, "threads": torch.get_num_threads(),
    }, indent=1))


if __name__ == "__main__":
    main()
