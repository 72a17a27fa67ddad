"""Choosing the tree shape, for pipeline.py's calibrate and decode-check passes: the Equal-Growth Tree (D, W, V)
the objective ranks first.

Tokens per iteration come from the calibration trees, latencies from the profiled cost curves of
the forward buckets (yggc/plan/objective.py); the plan keeps the best few candidates for `yggc inspect`.
After the shape's own buckets are profiled, checked_plan prices it again with the measured phase
latencies and switches speculation off when decoding real text (decode_check) finds it slower than the
verifier alone.
"""
from __future__ import annotations

from dataclasses import replace

from ..errors import YggcError
from ..plan.bundle_plan import BundlePlan, DecodeCheck, MeasuredSpeedup, SamplingPlan
from ..plan.bundle_profile import Profile
from ..plan.calibration import TreeSample, tokens_per_iteration
from ..plan.objective import SamplingCosts, ShapeScore, StageCosts, measured_speedup, rank_shapes
from ..plan.shape import TreeShape
from ..plan.stages import call_beside_phases
from .decode_check import MIN_SPEEDUP

PLAN_CANDIDATES = 10
ESTIMATE_TOLERANCE = 0.15  # the objective's estimate and the decode check agree within this on a quiet machine


def candidate_shapes(samples: list[TreeSample], max_depth: int, depth: int | None = None,
                     verify: int | None = None) -> dict[TreeShape, float]:
    """Tokens per iteration of every shape the calibration prices, less those a pinned flag rules out."""
    table = tokens_per_iteration(samples, max_depth)
    kept = {s: t for s, t in table.items()
            if (depth is None or s.depth == depth) and (verify is None or s.verify == verify)}
    if not kept:
        raise YggcError(f"no tree shape has depth {depth} and verify {verify} among the calibrated widths; "
                        "--verify must be at most --depth x --width")
    return kept


def choose_shape(candidates: dict[TreeShape, float], costs: StageCosts) -> tuple[TreeShape, BundlePlan]:
    """-> the best shape and the plan that explains the choice."""
    ranking: list[ShapeScore] = rank_shapes(candidates, costs)
    best = ranking[0]
    unpruned = next((c for c in ranking if c.shape.verify == c.shape.depth * c.shape.width), best)
    plan = BundlePlan(best.shape, "calibration", best.to_estimate(),
                      unpruned.to_estimate(),  # every drafted node verified: the ablation's first step
                      tuple(c.to_estimate() for c in ranking[:PLAN_CANDIDATES]))
    return best.shape, plan


def sampling_plan(samples: list[TreeSample], record: dict, costs: StageCosts, spec) -> SamplingPlan:
    """plan.json's "sampling" entry, for T > 0 requests: every shape's tokens per iteration by expectation at
    the calibrated temperature, priced by the profile plus the host sampling work per draft step (what a
    calibration iteration at D_max x W measured beyond its model calls), against plain decoding that also
    draws each token. Its verdict ("speculate") comes from decoding, in checked_sampling_plan."""
    full = {w: TreeShape(spec.max_depth, w, spec.max_depth * w) for w in spec.widths}
    step_ms = {w: max(0.0, record["iteration_ms"][str(w)] - costs.iteration_ms(full[w])) / spec.max_depth
               for w in spec.widths}
    candidates = candidate_shapes(samples, spec.max_depth, spec.pin_depth, spec.pin_verify)
    shape, plan = choose_shape(candidates, SamplingCosts(costs, step_ms, record["token_ms"]))
    return SamplingPlan(shape, plan.objective, plan.best_unpruned, plan.candidates, spec.temperature,
                        {w: round(ms, 4) for w, ms in step_ms.items()},
                        tuple(record["rank_acceptance"]))  # what its sampled trees price each draw at


def checked_plan(plan: BundlePlan, profile: Profile, decoded: DecodeCheck, log,
                 with_suffix: DecodeCheck | None = None) -> BundlePlan:
    """The calibrated plan with its measured speedups: from the profiled phases (the objective's terms, measured)
    and from decoding calibration text end to end (decode_check): `decoded` the tree the objective priced, which its
    estimate is checked against; `with_suffix` the same tree with the text's suffix branches, what greedy requests
    decode by default. Speculation is switched off unless the decode of the default (with_suffix where given)
    measured it faster than the compiled verifier alone (`yggc run --depth ...` still forces it)."""
    phases, profiled_step = profile.phase_ms, profile.models["verifier"].bucket_ms[1]
    step_ms = call_beside_phases(profile.phase_calls_ms, "verifier", 1, profiled_step)
    iteration_ms = phases["draft"] + phases["verify"]
    speedup = measured_speedup(plan.objective.tokens_per_iter, step_ms, iteration_ms)
    measured = MeasuredSpeedup(round(iteration_ms, 4), round(step_ms, 4), round(speedup, 4))
    off = estimate_off(plan.objective.speedup, decoded.speedup)
    verdict = with_suffix or decoded
    plan = replace(plan, measured=measured, decoded=decoded, decoded_with_suffix=with_suffix,
                   speculate=verdict.speedup > MIN_SPEEDUP, estimate_off=off)
    if not plan.speculate:
        branches = " with suffix branches" if with_suffix else ""
        log(f"the tree{branches} decoded at {verdict.speedup:.2f}x the verifier alone: the bundle decodes without "
            "speculation")
    if off:
        log(off)
    return plan


def estimate_off(estimated: float, decoded: float) -> str | None:
    """A line when the objective's estimate and the decode check are more than ESTIMATE_TOLERANCE apart: the
    profile or the calibration text does not describe this machine or the text decoded (yggc inspect shows it)."""
    if abs(estimated / decoded - 1.0) <= ESTIMATE_TOLERANCE:
        return None
    return (f"the plan was estimated at {estimated:.2f}x and decoded at {decoded:.2f}x the verifier alone (more than "
            f"{ESTIMATE_TOLERANCE:.0%} apart): timings from a busy machine, or calibration text unlike what was "
            "decoded; the decode's verdict decides")


def checked_sampling_plan(sampling: SamplingPlan, decoded: DecodeCheck, log) -> SamplingPlan:
    """plan.json's "sampling" entry with the decode check at its temperature; its verdict follows the decode."""
    out = replace(sampling, decoded=decoded, speculate=decoded.speedup > MIN_SPEEDUP)
    if not out.speculate:
        log(f"the sampling tree decoded at {decoded.speedup:.2f}x the verifier alone: requests at T > 0 decode "
            "without speculation")
    return out
