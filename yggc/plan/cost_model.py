"""Roofline-shaped latency curve T(W) of one model step at input width W (moesd.txt, section 3.3).

Below the knee a step is memory-bound: reading the weights costs the same for any W. Past it the
step is compute-bound and grows linearly: T(W) = t0 + slope * max(0, W - knee).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class CostCurve:
    t0_ms: float
    knee: float
    slope_ms: float

    def __call__(self, width: float) -> float:
        return self.t0_ms + self.slope_ms * max(0.0, width - self.knee)

    def to_dict(self) -> dict:
        return asdict(self)


def fit_roofline(points: dict[int, float]) -> CostCurve:
    """Least-squares fit over the measured (width -> ms) points, trying each width as the knee."""
    ws = sorted(points)
    best = None
    for knee in ws:
        flat = [points[w] for w in ws if w <= knee]
        t0 = sum(flat) / len(flat)
        over = [(w - knee, points[w] - t0) for w in ws if w > knee]
        slope = max(0.0, sum(x * y for x, y in over) / sum(x * x for x, _ in over)) if over else 0.0
        curve = CostCurve(t0, float(knee), slope)
        err = sum((curve(w) - points[w]) ** 2 for w in ws)
        if best is None or err < best[0]:
            best = (err, curve)
    return best[1]
