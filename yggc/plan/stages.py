"""One decode iteration as a DAG of stages (yggdrasil.txt, section 5), in networkx.

A stage is a model call or a piece of host work with a profiled cost and the role that runs it
(drafter, verifier or host); an Assignment maps roles to resources (core groups on a CPU, host and
device stream on CUDA). Iterations are unrolled so stages moved ahead of time overlap the previous
iteration, and the steady-state iteration time is read off a list schedule (yggc/plan/schedule.py).

Variants, all lossless by construction (a stage run ahead of time works on a superset of what the
iteration turns out to need, and only the part the accepted path selects is kept):
  sequential  head -> D-1 tree steps -> prune -> verify -> accept -> compact -> next head
              (and `glue`, the host work around the model calls, where the profile measured it)
  aot_tail    the drafter also runs on the W deepest leaves right after drafting them, so the next
              head step feeds only the root (width 1): the tail leaves the critical path
  aot_head    aot_tail, and after verification the drafter runs on every candidate bonus token
              (the verifier's choice after each verified node, V + 1 rows) while acceptance and
              compaction run; the next iteration's tree steps start from the accepted row's logits
  fuzzy       sequential with the drafter's layer sets run EasySpec-fuzzily across the ranks: each
              drafter step costs the measured fuzzy/sequential ratio (profile "fuzzy": draft_factor),
              the head step feeds every accepted token and the bonus (bonus calibration: D + 1 rows),
              and fuzzy drafts accept a measured share of what sequential ones do (acceptance_ratio);
              priced only where the profile carries those measurements
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import networkx as nx

from .bundle_profile import Profile
from .cost_model import CostCurve, MeasuredCurve
from .shape import HEAD_WIDTH, TreeShape

VARIANTS = ("sequential", "aot_tail", "aot_head", "fuzzy")
ROLES = ("drafter", "verifier", "host")


@dataclass(frozen=True)
class Assignment:
    """Roles -> resources, and each role's cost factor there (1.0: as profiled with every core)."""
    name: str
    resources: dict[str, str]                               # role -> resource
    factors: dict[str, float] = field(default_factory=dict)  # role -> cost multiplier on that resource

    def factor(self, role: str) -> float:
        return self.factors.get(role, 1.0)


SHARED = Assignment("shared", {role: "cores" for role in ROLES})


def split_assignment(verifier_factor: float, drafter_factor: float) -> Assignment:
    """Verifier (and host glue) on one core group, the drafter on the other; the factors are the
    measured slowdowns of each model on its group while the other works (docs/benchmarks/host-costs.md)."""
    return Assignment("split", {"verifier": "group0", "host": "group0", "drafter": "group1"},
                      {"verifier": verifier_factor, "host": verifier_factor, "drafter": drafter_factor})


@dataclass(frozen=True)
class StageCosts:
    """Profiled costs (ms, every core) the stages, and so the objective, are priced from."""
    verifier: CostCurve | MeasuredCurve  # T_verifier(width)
    drafter: CostCurve | MeasuredCurve   # T_drafter(width)
    host_ms: dict[str, float] = field(default_factory=dict)  # prune, accept_greedy, compact_kv (profile host_ms)
    fuzzy: dict[str, float] = field(default_factory=dict)  # draft_factor, acceptance_ratio (profile "fuzzy")
    glue_ms: tuple[float, float] = (0.0, 0.0)  # host work around the calls: per drafter call, per verify phase

    @classmethod
    def from_profile(cls, profile: Profile, depth: int = 1) -> StageCosts:
        """The profiled curves (each timed width at its median, the fit elsewhere); a drafter without forward
        buckets (an EAGLE-3 head compiled for one shape) is priced per step from its measured draft phase of
        `depth` steps. Where the profile timed the phases whole at a recorded shape, the host glue is what they
        took beyond the priced stages."""
        curves = {name: m.measured_curve() for name, m in profile.models.items() if m.cost_curve is not None}
        if "drafter" not in curves:
            curves["drafter"] = CostCurve(profile.phase_ms["draft"] / depth, 0.0, 0.0)
        costs = cls(curves["verifier"], curves["drafter"], profile.host_ms, profile.fuzzy)
        phases = profile.phases
        if phases is not None:
            costs = replace(costs, glue_ms=measured_glue(phases.phase_ms, phases.shape, costs, phases.calls_ms))
        return costs

    def prices(self, variant: str) -> bool:
        """Whether the costs cover `variant` (fuzzy drafting needs its own measurements)."""
        return variant != "fuzzy" or {"draft_factor", "acceptance_ratio"} <= set(self.fuzzy)

    def tokens_per_iter(self, variant: str, calibrated: float) -> float:
        """Tokens per iteration under `variant`, from the calibrated (sequential-draft) ones: the bonus token
        plus the accepted drafts, fewer of which a fuzzy draft gets accepted."""
        return 1 + (calibrated - 1) * self.fuzzy.get("acceptance_ratio", 1.0) if variant == "fuzzy" else calibrated

    def host(self, name: str) -> float:
        return self.host_ms.get(name, 0.0)

    def glue(self, shape: TreeShape) -> float:
        """Host work around the model calls of one iteration at `shape`: D drafter calls and one verify."""
        per_call, per_verify = self.glue_ms
        return shape.depth * per_call + per_verify

    def iteration_ms(self, shape: TreeShape) -> float:
        """One iteration with every stage in turn (the sequential plan on one resource): the objective's cost."""
        return sum(s.cost_ms for s in iteration_stages("sequential", shape, self))


@dataclass(frozen=True)
class Stage:
    name: str
    role: str
    cost_ms: float


def iteration_stages(variant: str, shape: TreeShape, p: StageCosts) -> list[Stage]:
    """The stages of one iteration, in their order along its critical path."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown plan variant {variant!r}; known: {', '.join(VARIANTS)}")
    scale = p.fuzzy.get("draft_factor", 1.0) if variant == "fuzzy" else 1.0
    head_width = {"aot_tail": 1, "fuzzy": shape.depth + 1}.get(variant, HEAD_WIDTH)
    stages = []
    if variant != "aot_head":
        stages.append(Stage("head", "drafter", scale * p.drafter(head_width)))
    stages += [Stage(f"draft{k}", "drafter", scale * p.drafter(shape.width)) for k in range(1, shape.depth)]
    if variant in ("aot_tail", "aot_head"):
        stages.append(Stage("tail", "drafter", p.drafter(shape.width)))
    stages += [Stage("prune", "host", p.host("prune")), Stage("verify", "verifier", p.verifier(shape.verify + 1))]
    if variant == "aot_head":
        stages.append(Stage("bonus", "drafter", p.drafter(shape.verify + 1)))
    stages += [Stage("accept", "host", p.host("accept_greedy")), Stage("compact", "verifier", p.host("compact_kv"))]
    if p.glue(shape) > 0:
        stages.append(Stage("glue", "host", p.glue(shape)))
    return stages


def call_beside_phases(calls_ms: dict[str, dict[int, float]] | None, model: str, width: int, otherwise: float) -> float:
    """`model`'s call at `width` as the profile timed it in turn with the phases (its phase_calls_ms: model -> width
    -> ms), else `otherwise`."""
    return (calls_ms or {}).get(model, {}).get(width, otherwise)


def measured_glue(phase_ms: dict[str, float], shape: TreeShape, p: StageCosts,
                  calls_ms: dict[str, dict[int, float]] | None = None) -> tuple[float, float]:
    """Host work around the model calls from the draft and verify phases timed whole at `shape` (the
    profile's phase_ms): (ms per drafter call, ms per verify phase), beyond what the stages already price
    (the drafter and verifier calls, prune, accept, K/V compaction). A call is priced as timed in turn with the phases
    where `calls_ms` (model -> width -> ms, the profile's phase_calls_ms) has it, else by its curve. Never negative."""
    def call(model: str, width: int) -> float:
        return call_beside_phases(calls_ms, model, width, (p.drafter if model == "drafter" else p.verifier)(width))

    drafter_calls = call("drafter", HEAD_WIDTH) + (shape.depth - 1) * call("drafter", shape.width)
    per_call = max(0.0, phase_ms["draft"] - drafter_calls) / shape.depth
    priced = call("verifier", shape.verify + 1) + p.host("prune") + p.host("accept_greedy") + p.host("compact_kv")
    return per_call, max(0.0, phase_ms["verify"] - priced)


def stage_edges(variant: str, names: list[str]) -> list[tuple[str, str, int]]:
    """(from, to, iteration offset of `to`): dependencies inside an iteration and into the next one."""
    drafting = [n for n in names if n == "head" or n.startswith("draft")]
    edges = [(a, b, 0) for a, b in zip(drafting, drafting[1:])]
    last_draft = drafting[-1] if drafting else None
    first_draft_next = drafting[0] if drafting else "prune"
    if last_draft:
        edges.append((last_draft, "prune", 0))
    edges += [("prune", "verify", 0), ("verify", "accept", 0), ("accept", "compact", 0)]
    # the next iteration's drafting reads the accepted root and the compacted caches
    edges += [("accept", first_draft_next, 1), ("compact", first_draft_next, 1)]
    if "glue" in names:  # the host builds the next iteration's inputs once the iteration's calls are done
        edges += [("compact", "glue", 0), ("glue", first_draft_next, 1)]
    if "tail" in names:  # the leaves exist once the last step grew them (D = 1 under aot_head: at the start)
        edges.append((last_draft or "prune", "tail", 0))
        edges.append(("tail", first_draft_next, 1))
    if "bonus" in names:  # candidate bonus tokens come out of verification, above fed leaves
        edges += [("verify", "bonus", 0), ("tail", "bonus", 0), ("bonus", first_draft_next, 1)]
    return edges


def iteration_dag(variant: str, shape: TreeShape, p: StageCosts, assignment: Assignment = SHARED,
                  iterations: int = 4) -> nx.DiGraph:
    """`iterations` unrolled iterations; nodes (i, stage name) carry role, resource and cost_ms."""
    stages = iteration_stages(variant, shape, p)
    edges = stage_edges(variant, [s.name for s in stages])
    dag = nx.DiGraph(variant=variant, assignment=assignment.name, shape=shape)
    for i in range(iterations):
        for s in stages:
            dag.add_node((i, s.name), role=s.role, resource=assignment.resources[s.role],
                         cost_ms=s.cost_ms * assignment.factor(s.role))
        for a, b, offset in edges:
            if i + offset < iterations:
                dag.add_edge((i, a), (i + offset, b))
    if not nx.is_directed_acyclic_graph(dag):  # a wrong edge table, never user input
        raise AssertionError(f"the {variant} stage graph has a cycle")
    return dag
