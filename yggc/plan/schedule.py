"""List scheduling of a stage DAG onto its resources: the plan search's estimate of an iteration.

Each resource runs one stage at a time, without preemption. Among the stages whose inputs are done,
the one that can start earliest goes first (ties: the longer remaining path to the end, the
classic list-scheduling priority, then the earlier iteration). The steady-state iteration time is
the spacing of iteration ends in the unrolled DAG, past the first iteration's warm-up.
"""
from __future__ import annotations

from dataclasses import dataclass

import networkx as nx


@dataclass(frozen=True)
class Slot:
    iteration: int
    stage: str
    resource: str
    start_ms: float
    end_ms: float


@dataclass(frozen=True)
class Schedule:
    slots: tuple[Slot, ...]  # in start order

    @property
    def makespan_ms(self) -> float:
        return max(s.end_ms for s in self.slots)

    def iteration_end_ms(self, i: int) -> float:
        return max(s.end_ms for s in self.slots if s.iteration == i)

    @property
    def iteration_ms(self) -> float:
        """Steady-state time per iteration: mean spacing of iteration ends after the first."""
        last = max(s.iteration for s in self.slots)
        if last == 0:
            return self.makespan_ms
        return (self.iteration_end_ms(last) - self.iteration_end_ms(0)) / last

    def busy_ms(self, resource: str) -> float:
        return sum(s.end_ms - s.start_ms for s in self.slots if s.resource == resource)

    def timeline(self, iteration: int) -> list[Slot]:
        return [s for s in self.slots if s.iteration == iteration]


def bottom_levels(dag: nx.DiGraph) -> dict:
    """Node -> its cost plus the longest cost path from it to a sink."""
    level = {}
    for node in reversed(list(nx.topological_sort(dag))):
        level[node] = dag.nodes[node]["cost_ms"] + max((level[s] for s in dag.successors(node)), default=0.0)
    return level


def list_schedule(dag: nx.DiGraph) -> Schedule:
    level = bottom_levels(dag)
    waiting = {node: dag.in_degree(node) for node in dag}
    ready_at = {node: 0.0 for node in dag}
    free_at: dict[str, float] = {}
    ready = [node for node, n in waiting.items() if n == 0]
    slots = []
    while ready:
        def start_of(node) -> float:
            return max(ready_at[node], free_at.get(dag.nodes[node]["resource"], 0.0))

        node = min(ready, key=lambda v: (start_of(v), -level[v], v[0]))
        ready.remove(node)
        attrs = dag.nodes[node]
        start = start_of(node)
        end = start + attrs["cost_ms"]
        free_at[attrs["resource"]] = end
        slots.append(Slot(node[0], node[1], attrs["resource"], start, end))
        for succ in dag.successors(node):
            ready_at[succ] = max(ready_at[succ], end)
            waiting[succ] -= 1
            if waiting[succ] == 0:
                ready.append(succ)
    return Schedule(tuple(sorted(slots, key=lambda s: (s.start_ms, s.end_ms))))
