"""`yggc inspect BUNDLE --load-time`: what a bundle costs before and while it decodes, in this process: its size on
disk against its weights, the time from the process's start to torch and yggc imported, `Runtime.load`, the time
from the load's start to the first token of one answer (a chat answer when the model has a chat template), and
the RSS after the import, after the load, at the end and at its peak. Run one bundle per process: RSS and the import
are the process's own."""
from __future__ import annotations

import os
import resource
import time
from pathlib import Path

import torch

from ..runtime.drafters import kind_of
from ..runtime.runtime import Runtime
from .floor import streamed_verifier_bytes, weight_bytes

PROMPT = "Write a haiku about rust."
NEW_TOKENS = 64


def process_age_s() -> float:
    """Seconds since this process started (Linux: /proc/self/stat's start time against /proc/uptime)."""
    start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    return float(Path("/proc/uptime").read_text().split()[0]) - start_ticks / os.sysconf("SC_CLK_TCK")


def rss_mb() -> int:
    return next((int(line.split()[1]) // 1024 for line in open("/proc/self/status") if line.startswith("VmRSS:")), 0)


def bundle_weight_bytes(rt: Runtime) -> int:
    """The pair's parameter bytes, tied weights once; an EAGLE-3 head's token embedding is the verifier's."""
    total = streamed_verifier_bytes(rt) + weight_bytes(rt.drafter.graph)
    return total - (weight_bytes(rt.drafter.graph.embed) if kind_of(rt.drafter).head else 0)


def load_time(bundle: Path, prompt: str = PROMPT, n_new: int = NEW_TOKENS) -> dict:
    imported_s, rss_imported = process_age_s(), rss_mb()
    t = time.perf_counter()
    rt = Runtime.load(bundle)
    load_s, rss_loaded = time.perf_counter() - t, rss_mb()
    chat = {"messages": [{"role": "user", "content": prompt}]} if rt.verifier.chat else {"prompt": prompt}
    steps = rt.stream_tokens(max_new_tokens=n_new, **chat)
    next(steps)
    first_token_s = time.perf_counter() - t
    n_steps = 1 + sum(1 for _ in steps)
    on_disk, weights = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file()), bundle_weight_bytes(rt)
    return {
        "bundle_mb": round(on_disk / 1e6, 1), "weights_mb": round(weights / 1e6, 1),
        "bundle_over_weights": round(on_disk / weights, 3),
        "packages_mb": {p.name: round(p.stat().st_size / 1e6, 1) for p in sorted(bundle.glob("artifacts/*"))},
        "import_s": round(imported_s, 2), "load_s": round(load_s, 2), "load_to_first_token_s": round(first_token_s, 2),
        "rss_imported_mb": rss_imported, "rss_loaded_mb": rss_loaded, "rss_end_mb": rss_mb(),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, "decoded_steps": n_steps,
        "threads": torch.get_num_threads(),
    }


def load_time_lines(r: dict) -> list[str]:
    packages = ", ".join(f"{name} {mb} MB" for name, mb in r["packages_mb"].items()) or "none"
    return [f"  on disk: {r['bundle_mb']} MB, {r['bundle_over_weights']}x the weights ({r['weights_mb']} MB); "
            f"packages: {packages}",
            f"  process start to torch and yggc imported: {r['import_s']} s",
            f"  Runtime.load: {r['load_s']} s; to the first token: {r['load_to_first_token_s']} s "
            f"({r['decoded_steps']} decode steps, {r['threads']} threads)",
            f"  RSS: {r['rss_imported_mb']} MB imported, {r['rss_loaded_mb']} MB loaded, {r['rss_end_mb']} MB at the "
            f"end, {r['peak_rss_mb']} MB peak"]
