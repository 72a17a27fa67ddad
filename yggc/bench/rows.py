"""Rows and samples of `yggc bench`: what the harness fills in, and the statistics the floor and report read."""
from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from ..tree.sampling import SamplingParams


@dataclass
class Result:
    tokens: list[int]
    tpot_ms: float
    per_iter: list[int]  # tokens committed per decode iteration after the first token


Runner = Callable[[list[int], int, SamplingParams], Result]


@dataclass
class Sample:
    prompt: int
    repeat: int
    tokens: list[int]
    tpot_ms: float
    per_iter: list[int]


@dataclass
class Row:
    name: str
    run: Runner
    runs_as: str  # how the row runs: "eager", "compiled D4 W2 V8 (bundle plan)", ...
    decoder: object | None = None  # the yggc decoder behind `run` (None for transformers rows)
    samples: list[Sample] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    rss_mb: float = 0.0
    rss_delta_mb: float = 0.0
    verify_ms: float | None = None
    floor_ms: float | None = None  # the floor measured around the decode that timed verify_ms (yggc.bench.floor)

    def tpots(self) -> list[float]:
        return [s.tpot_ms for s in self.samples]

    def per_iter(self) -> list[int]:
        return [k for s in self.samples for k in s.per_iter]


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def p90(xs: list[float]) -> float:
    """Nearest-rank 90th percentile."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[max(0, -(-9 * len(s) // 10) - 1)]


def mean_accepted(row: Row) -> float:
    k = row.per_iter()
    return sum(k) / len(k) if k else float("nan")



# Greedy output is checked against the verifier decoding alone. In float32 that is transformers' (yggc's
# own when transformers is absent); in bfloat16 it is yggc's own verifier decoding, as losslessness is
# defined per dtype (transformers' bf16 kernels round differently, so its greedy path drifts apart).
REFERENCES = {"float32": ("hf-ar", "yggc-ar-eager", "yggc-ar-compiled"),
              "bfloat16": ("yggc-ar-compiled", "yggc-ar-eager", "hf-ar")}


def reference_row(rows: list[Row], dtype: str = "float32") -> Row | None:
    by_name = {r.name: r for r in rows}
    return next((by_name[n] for n in REFERENCES[dtype] if n in by_name), None)



def sampling_params(temperature: float, seed: int) -> SamplingParams:
    return SamplingParams() if temperature == 0.0 else SamplingParams(temperature=temperature, seed=seed)
