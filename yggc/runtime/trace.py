"""Wall-clock spans of the decode loop (`yggc run --trace out.json`), written as a Chrome trace.

Tracks: "decode" (one span per iteration), "phases" (the draft and verify phases), "models" (each
compiled call, from a bundle: the model forwards around eager phases, or a phase's own package where it is one
compiled call). The host bubble of an iteration is its time outside compiled calls; a phase's host time is its
time outside the compiled calls inside it (what builds the inputs of a compiled phase and reads its outputs too).
A bundle's stage plan can be laid beside the measured iterations as its own track ("plan estimate").
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ..plan.bundle_plan import TimelineSlot


@dataclass(frozen=True)
class Span:
    track: str
    name: str
    iteration: int
    start_s: float
    end_s: float

    @property
    def ms(self) -> float:
        return 1e3 * (self.end_s - self.start_s)


def host_ms(phase: Span, inside: list[Span]) -> float:
    """A phase's time outside the compiled calls within it."""
    calls = sum(s.ms for s in inside if s.track == "models" and phase.start_s <= s.start_s and s.end_s <= phase.end_s)
    return max(0.0, phase.ms - calls)


class StageTrace:
    def __init__(self):
        self.spans: list[Span] = []
        self.iteration = 0

    @contextmanager
    def span(self, name: str, track: str, width: int | None = None) -> Iterator[None]:
        """Time the block; a width is appended to the name ("verifier W=9")."""
        name = name if width is None else f"{name} W={width}"
        start = time.perf_counter()
        try:
            yield
        finally:
            self.spans.append(Span(track, name, self.iteration, start, time.perf_counter()))
            if track == "decode":
                self.iteration += 1

    def per_iteration(self) -> list[dict[str, float]]:
        """Each iteration's ms: total, draft and verify phases, model calls, host bubble, each phase's host time,
        and the host bubble's share of the iteration."""
        rows = []
        for it in (s for s in self.spans if s.track == "decode"):
            inside = [s for s in self.spans  # by time: prefill's model calls precede the first iteration
                      if s.track != "decode" and it.start_s <= s.start_s and s.end_s <= it.end_s]
            phase = {s.name: s for s in inside if s.name in ("draft", "verify")}
            models = sum(s.ms for s in inside if s.track == "models")
            bubble = it.ms - models if models else 0.0
            row = {"iteration_ms": it.ms, "model_ms": models, "host_bubble_ms": bubble,
                   "host_share": bubble / it.ms if it.ms > 0 else 0.0}
            for name in ("draft", "verify"):
                span = phase.get(name)
                row[f"{name}_ms"] = span.ms if span else 0.0
                row[f"{name}_host_ms"] = host_ms(span, inside) if span else 0.0
            rows.append(row)
        return rows

    def summary(self) -> dict[str, float]:
        """Medians over the iterations (empty when no iteration ran)."""
        rows = self.per_iteration()
        if not rows:
            return {}
        return {"iterations": len(rows), **{k: round(statistics.median(r[k] for r in rows), 4) for k in rows[0]}}

    def chrome_trace(self, plan_timeline: tuple[TimelineSlot, ...] | None = None) -> dict:
        """Chrome trace JSON (chrome://tracing, Perfetto); the plan's estimated stages are drawn from
        the start of every measured iteration."""
        t0 = min((s.start_s for s in self.spans), default=0.0)
        tids = {"decode": 1, "phases": 2, "models": 3}
        events = [{"name": s.name, "ph": "X", "pid": 1, "tid": tids.get(s.track, 4), "ts": 1e6 * (s.start_s - t0),
                   "dur": 1e6 * (s.end_s - s.start_s), "args": {"iteration": s.iteration}} for s in self.spans]
        events += [{"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": track}}
                   for track, tid in tids.items()]
        if plan_timeline:
            tracks = sorted({p.resource for p in plan_timeline})
            for it in (s for s in self.spans if s.track == "decode"):
                events += [{"name": p.stage, "ph": "X", "pid": 2, "tid": tracks.index(p.resource) + 1,
                            "ts": 1e6 * (it.start_s - t0) + 1e3 * p.start_ms,
                            "dur": 1e3 * (p.end_ms - p.start_ms), "args": {"iteration": it.iteration}}
                           for p in plan_timeline]
            events.append({"name": "process_name", "ph": "M", "pid": 2, "args": {"name": "plan estimate"}})
            events.append({"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "measured"}})
        return {"traceEvents": events, "displayTimeUnit": "ms"}
