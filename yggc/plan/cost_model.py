"""Latency T(t) of one model step at input width t: MoESD's cost model (moesd.txt, section 3.3, Alg. 1).

    T(t) = t0 + slope * G(t) + expert_ms * N(t) + expert_slope * G(T_exp(t))

- G(t; knee, s), Eq. 11: the roofline's shape. Flat while a step is memory-bound, linear with slope 1 past
  the knee (lambda * RP, where it turns compute-bound), and in between s^t, continuous with its first
  derivative. Here it is normalised so that G(1) = 0 and the linear part has slope 1: t0 is the cost of one
  row and slope the cost of a row past the knee. s = None is the hard corner (s -> infinity); s -> 1 is a
  line from t = 1.
- N(t) = E (1 - (1 - K/E)^t), Eq. 8: the experts t tokens activate (each reads its weights once).
- T_exp(t) = t K / N(t), Eq. 10: the rows each activated expert serves, which is what pushes an expert's
  GEMMs toward the compute-bound side.

- tiles: GEMM kernels work on blocks of rows (16 for AMX tiles, 4 for the AVX2 bf16 kernel), so one row
  past a block boundary costs a whole block of compute: tile_ms * (ceil(t / row_tile) - 1), a step MoESD's
  smooth model does not have (measured from 16 to 17 rows on a dense verifier, docs/benchmarks/moe.md, and from
  4 to 5 rows on SmolLM2 bf16 on AVX2, docs/benchmarks/cpu-verify-curve.md).

A dense model has no expert terms (E = 0): T(t) = t0 + slope * G(t), the roofline curve yggc always used.
With E = K every expert is always active and serves every row, and the model is that dense curve again
(t0 + expert_ms * E, slope + expert_slope). The slack parameters (t0, slope, expert_ms, expert_slope,
tile_ms, knee, s, row_tile) are fitted to the profiled bucket latencies.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, field

import numpy as np

S_GRID = (1.02, 1.05, 1.1, 1.2, 1.4, 1.7, 2.0, 3.0, None)  # None: the hard corner
# rows per GEMM block; 0: no tile term. 4: yggc's AVX2 bf16 micro-kernel (4 x 16 registers), whose every block of
# 4 rows widens the weights again (T(5) well above T(4), T(9) above T(8): docs/benchmarks/cpu-verify-curve.md)
TILE_GRID = (0, 4, 8, 16, 32)


def activated_experts(t: float, n_experts: int, top_k: int) -> float:
    """MoESD Eq. 8: the expected number of distinct experts t tokens route to (uniform routing)."""
    return n_experts * (1.0 - (1.0 - top_k / n_experts) ** t)


def tokens_per_expert(t: float, n_experts: int, top_k: int) -> float:
    """MoESD Eq. 10: the mean rows an activated expert serves for t tokens."""
    return t * top_k / activated_experts(t, n_experts, top_k)


def extra_tiles(t: float, row_tile: int) -> int:
    """Row blocks past the first that t rows occupy."""
    return math.ceil(t / row_tile) - 1


def roofline(t: float, knee: float, s: float | None) -> float:
    """MoESD Eq. 11, normalised: 0 at t = 1, slope 1 past the knee, s^t (scaled) below it."""
    if s is None:
        return max(0.0, t - knee)
    ln_s = math.log(s)
    below = (math.exp((min(t, knee) - knee) * ln_s) - math.exp((1.0 - knee) * ln_s)) / ln_s
    return below + max(0.0, t - knee)


@dataclass(frozen=True)
class CostCurve:
    t0_ms: float  # one row (with its K experts for an MoE): the memory-bound floor of a step
    knee: float  # rows where the dense part turns compute-bound (MoESD's lambda * RP)
    slope_ms: float  # each row past the knee
    s: float | None = None  # curvature below the knee; None: a hard corner
    n_experts: int = 0  # E; 0 for a dense model
    top_k: int = 0  # K
    expert_ms: float = 0.0  # loading one activated expert (summed over the sparse layers)
    expert_slope_ms: float = 0.0  # an expert's GEMMs growing with its rows
    row_tile: int = 0  # rows per GEMM block; 0: no tile term
    tile_ms: float = 0.0  # each block of rows past the first

    def __call__(self, width: float) -> float:
        t = self.t0_ms + self.slope_ms * roofline(width, self.knee, self.s)
        if self.row_tile:
            t += self.tile_ms * extra_tiles(width, self.row_tile)
        if self.n_experts:
            extra = activated_experts(width, self.n_experts, self.top_k) - self.top_k  # t0 holds N(1) = K
            per_expert = tokens_per_expert(width, self.n_experts, self.top_k)
            t += self.expert_ms * extra + self.expert_slope_ms * roofline(per_expert, self.knee, self.s)
        return t

    def efficiency(self, width: float) -> float:
        """MoESD's target efficiency T(1) / T(t): 1 while extra rows are free."""
        return self(1) / self(width)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class MeasuredCurve:
    """A model's step cost as the objective prices it: the profile's own median at a width it timed, the fitted
    curve at any other. The fit is a smooth roofline over every probe up to 64 rows; at the few rows a verify
    takes it can miss by more than the shapes differ (on a Zen 4 the fit priced 4 rows above their timing and
    ranked D1 W2 V1 over D1 W4 V3, which decoded held-out chat faster; docs/benchmarks/drafters.md)."""
    fit: CostCurve
    measured: dict[int, float] = field(default_factory=dict)  # width -> ms

    def __call__(self, width: float) -> float:
        ms = self.measured.get(width)
        return self.fit(width) if ms is None else ms


def _features(widths: list[int], knee: float, s: float | None, row_tile: int, n_experts: int,
              top_k: int) -> np.ndarray:
    """Columns: 1, G(t), tiles (if row_tile), N(t) - K and G(T_exp(t)) (if n_experts)."""
    cols = [[1.0] * len(widths), [roofline(w, knee, s) for w in widths]]
    if row_tile:
        cols.append([extra_tiles(w, row_tile) for w in widths])
    if n_experts:
        cols.append([activated_experts(w, n_experts, top_k) - top_k for w in widths])
        cols.append([roofline(tokens_per_expert(w, n_experts, top_k), knee, s) for w in widths])
    return np.array(cols, dtype=float).T  # [points, terms]


def _nonnegative_lstsq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """min |a x - b| over x >= 0 by trying every support (a has at most 5 columns)."""
    best, n = None, a.shape[1]
    for k in range(1, n + 1):
        for cols in itertools.combinations(range(n), k):
            x_s = np.linalg.lstsq(a[:, cols], b, rcond=None)[0]
            if (x_s < 0).any():
                continue
            x = np.zeros(n)
            x[list(cols)] = x_s
            err = float(((a @ x - b) ** 2).sum())
            if best is None or err < best[0]:
                best = (err, x)
    return best[1] if best else np.zeros(n)


def fit_cost_curve(points: dict[int, float], n_experts: int = 0, top_k: int = 0) -> CostCurve:
    """Least squares in relative error over the measured (width -> ms) points, the knee, s and the row tile
    searched on a grid (each measured width as the knee), the linear terms non-negative. n_experts = top_k = 0:
    dense. A row tile is tried only where measured widths on both sides of one of its boundaries identify it."""
    if n_experts and not 0 < top_k <= n_experts:
        raise ValueError(f"top_k {top_k} must be in 1..{n_experts}")
    ws = sorted(points)
    y = np.array([points[w] for w in ws])
    scale = 1.0 / y  # relative error: every width counts the same
    tiles = [0] + [b for b in TILE_GRID if b and any(w % b == 1 and w > b for w in ws)]
    best = None
    for knee, s, tile in itertools.product(ws, S_GRID, tiles):
        a = _features(ws, float(knee), s, tile, n_experts, top_k)
        x = [float(v) for v in _nonnegative_lstsq(a * scale[:, None], y * scale)]
        err = float((((a @ np.array(x) - y) * scale) ** 2).sum())
        if best is None or err < best[0] - 1e-12:
            tile_ms = x.pop(2) if tile else 0.0
            expert = (x[2], x[3]) if n_experts else (0.0, 0.0)
            best = (err, CostCurve(x[0], float(knee), x[1], s, n_experts, top_k, *expert, tile, tile_ms))
    return best[1]
