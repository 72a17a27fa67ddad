"""Stage plans, for pipeline.py's stage-plan pass: grid search over stage-plan variants x tree shapes x resource
assignments (yggdrasil.txt 5.2).

Each candidate is priced by list-scheduling its unrolled stage DAG with the profiled stage costs
(yggc/plan/stages.py, schedule.py) and ranked by estimated ms per token (iteration time over the
calibrated tokens per iteration; the trees are the same under every variant, so acceptance is too).
The runtime executes only the plans in EXECUTABLE; the others are priced and kept as runners-up so a
bundle records what an overlap would buy on its machine.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..plan.bundle_plan import StageEstimate, StagePlan, TimelineSlot
from ..plan.bundle_profile import Profile
from ..plan.schedule import Schedule, list_schedule
from ..plan.shape import TreeShape
from ..plan.stages import SHARED, VARIANTS, Assignment, StageCosts, iteration_dag, split_assignment

EXECUTABLE = {("sequential", "shared")}  # (variant, assignment) the runtime's decode loop runs today
RUNNERS_UP = 8


@dataclass(frozen=True)
class PlanEstimate:
    variant: str
    assignment: str
    shape: TreeShape
    tokens_per_iter: float
    schedule: Schedule

    @property
    def iteration_ms(self) -> float:
        return self.schedule.iteration_ms

    @property
    def ms_per_token(self) -> float:
        return self.iteration_ms / self.tokens_per_iter

    @property
    def executable(self) -> bool:
        return (self.variant, self.assignment) in EXECUTABLE

    def to_estimate(self, per_token: bool = True) -> StageEstimate:
        """As plan.json records it (rounded); per_token=False leaves out the tokens per iteration and ms per token."""
        return StageEstimate(self.variant, self.assignment, self.shape, round(self.iteration_ms, 4), self.executable,
                             round(self.tokens_per_iter, 4) if per_token else None,
                             round(self.ms_per_token, 4) if per_token else None)


def assignments(profile: Profile) -> list[Assignment]:
    """Every core shared, plus the split between core groups where the profile measured it."""
    groups = profile.core_groups
    return [SHARED] if groups is None else [SHARED, split_assignment(*groups)]


def estimate(variant: str, assignment: Assignment, shape: TreeShape, tokens_per_iter: float,
             stages: StageCosts) -> PlanEstimate:
    schedule = list_schedule(iteration_dag(variant, shape, stages, assignment))
    return PlanEstimate(variant, assignment.name, shape, stages.tokens_per_iter(variant, tokens_per_iter), schedule)


def search_plans(candidates: dict[TreeShape, float], profile: Profile,
                 variants: tuple[str, ...] = VARIANTS) -> list[PlanEstimate]:
    """Every (variant, shape, assignment), best estimated ms per token first (ties: fewer nodes)."""
    stages = StageCosts.from_profile(profile, max(s.depth for s in candidates))
    plans = [estimate(v, a, shape, tpi, stages) for shape, tpi in candidates.items()
             for v in variants if stages.prices(v) for a in assignments(profile)]
    return sorted(plans, key=lambda p: (p.ms_per_token, p.shape.n_nodes, VARIANTS.index(p.variant)))


def best_executable(plans: list[PlanEstimate]) -> PlanEstimate:
    return next(p for p in plans if p.executable)


def timeline_record(plan: PlanEstimate) -> tuple[TimelineSlot, ...]:
    """The steady-state iteration's stages (the second unrolled one), times relative to its first start."""
    slots = plan.schedule.timeline(1)
    t0 = min(s.start_ms for s in slots)
    return tuple(TimelineSlot(s.stage, s.resource, round(s.start_ms - t0, 4), round(s.end_ms - t0, 4)) for s in slots)


def plan_record(shape: TreeShape, profile: Profile, candidates: dict[TreeShape, float] | None = None) -> StagePlan:
    """plan.json's "schedule": the executed plan for the bundle's shape, its estimate and timeline, and
    the runners-up over the calibrated shapes (without calibration: the variants of the bundle's shape,
    ranked by iteration time, as every variant of one shape accepts the same tokens)."""
    plans = search_plans(candidates or {shape: 1.0}, profile)
    chosen = next(p for p in plans if p.executable and p.shape == shape)
    per_token = bool(candidates)
    return StagePlan(chosen.to_estimate(per_token), timeline_record(chosen), plans[0].to_estimate(per_token),
                     tuple(p.to_estimate(per_token) for p in plans[:RUNNERS_UP]))
