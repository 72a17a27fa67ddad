"""Wall-clock medians with warm-up, shared by the profile pass and the benchmarks, and the tracer that times nothing."""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext


def median_ms(fn: Callable[[], object], repeats: int = 20, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(1000 * (time.perf_counter() - t0))
    return statistics.median(samples)


def steady_ms(fn: Callable[[], object], repeats: int = 20, rounds: int = 3) -> float:
    """The lowest of `rounds` medians: a burst of load from another process spoils one round, not all."""
    return steady_ms_each({0: fn}, repeats, rounds)[0]


def steady_ms_each(fns: dict, repeats: int = 20, rounds: int = 3) -> dict:
    """steady_ms of every fn in `fns` (key -> fn), the fns taking turns call by call: where the machine's speed
    drifts (a shared VM), every fn sees the drift alike instead of one catching a slow minute."""
    for fn in fns.values():
        for _ in range(3):
            fn()
    per_round = max(3, repeats // rounds)
    samples: dict = {key: [] for key in fns}
    for _ in range(per_round * rounds):
        for key, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            samples[key].append(1000 * (time.perf_counter() - t0))
    return {key: best_round_median(s, rounds) for key, s in samples.items()}


def best_round_median(samples: list[float], rounds: int = 3) -> float:
    """The fastest of the medians of `rounds` equal runs of consecutive samples (a slow minute spoils one round)."""
    per_round = len(samples) // rounds
    return min(statistics.median(samples[r * per_round:(r + 1) * per_round]) for r in range(rounds))


class NoTrace:
    """The default tracer of compiled models and decoders: spans cost one attribute lookup and a null context
    (yggc/runtime/trace.py's StageTrace records them)."""

    def span(self, name: str, track: str, width: int | None = None):
        return nullcontext()
