"""Choose-shape pass: the Equal-Growth Tree (D, W, V) the objective ranks first.

Tokens per iteration come from the calibration trees, latencies from the profiled cost curves of
the forward buckets (yggc/plan/objective.py); the plan keeps the best few candidates for `yggc inspect`.
After the shape's own buckets are profiled, checked_plan prices it again with the measured phase
latencies and switches speculation off when decoding real text (decode_check) finds it slower than the
verifier alone.
"""
from __future__ import annotations

from ..errors import YggcError
from ..plan.calibration import TreeSample, tokens_per_iteration
from ..plan.objective import SamplingCosts, ShapeScore, StageCosts, measured_speedup, rank_shapes
from ..plan.shape import TreeShape
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


def choose_shape(candidates: dict[TreeShape, float], costs: StageCosts) -> tuple[TreeShape, dict]:
    """-> the best shape and the plan.json record that explains the choice."""
    ranking: list[ShapeScore] = rank_shapes(candidates, costs)
    best = ranking[0]
    unpruned = next((c for c in ranking if c.shape.verify == c.shape.depth * c.shape.width), best)
    plan = {"depth": best.shape.depth, "width": best.shape.width, "verify": best.shape.verify,
            "source": "calibration", "objective": best.to_dict(),
            "best_unpruned": unpruned.to_dict(),  # every drafted node verified: the ablation's first step
            "candidates": [c.to_dict() for c in ranking[:PLAN_CANDIDATES]]}
    return best.shape, plan


def sampling_plan(samples: list[TreeSample], record: dict, costs: StageCosts, spec) -> dict:
    """plan.json's "sampling" entry, for T > 0 requests: every shape's tokens per iteration by expectation at
    the calibrated temperature, priced by the profile plus the host sampling work per draft step (what a
    calibration iteration at D_max x W measured beyond its model calls), against plain decoding that also
    draws each token. Its verdict ("speculate") comes from decoding, in checked_sampling_plan."""
    full = {w: TreeShape(spec.max_depth, w, spec.max_depth * w) for w in spec.widths}
    step_ms = {w: max(0.0, record["iteration_ms"][str(w)] - costs.iteration_ms(full[w])) / spec.max_depth
               for w in spec.widths}
    candidates = candidate_shapes(samples, spec.max_depth, spec.pin_depth, spec.pin_verify)
    _, plan = choose_shape(candidates, SamplingCosts(costs, step_ms, record["token_ms"]))
    return {**plan, "temperature": spec.temperature, "host_ms_per_step": {str(w): round(ms, 4) for w, ms in step_ms.items()},
            "rank_acceptance": record["rank_acceptance"]}  # what its sampled trees price each draw at


def checked_plan(plan: dict, profile: dict, decoded: dict[str, float], step) -> dict:
    """The calibrated plan with its measured speedups: from the profiled phases (the objective's terms, measured)
    and from decoding calibration text end to end (decode_check). Speculation is switched off unless the
    decode measured the tree faster than the compiled verifier alone (`yggc run --depth ...` still forces it)."""
    phases, step_ms = profile["phase_ms"], profile["models"]["verifier"]["bucket_ms"]["1"]
    iteration_ms = phases["draft"] + phases["verify"]
    speedup = measured_speedup(plan["objective"]["tokens_per_iter"], step_ms, iteration_ms)
    plan = {**plan, "measured": {"iteration_ms": round(iteration_ms, 4), "verifier_step_ms": round(step_ms, 4),
                                 "speedup": round(speedup, 4)},
            "decoded": decoded, "speculate": decoded["speedup"] > MIN_SPEEDUP}
    if not plan["speculate"]:
        step(f"the tree decoded at {decoded['speedup']:.2f}x the verifier alone: the bundle decodes without "
             "speculation")
    off = estimate_off(plan["objective"]["speedup"], decoded["speedup"])
    if off:
        plan["estimate_off"] = off
        step(off)
    return plan


def estimate_off(estimated: float, decoded: float) -> str | None:
    """A line when the objective's estimate and the decode check are more than ESTIMATE_TOLERANCE apart: the
    profile or the calibration text does not describe this machine or the text decoded (yggc inspect shows it)."""
    if abs(estimated / decoded - 1.0) <= ESTIMATE_TOLERANCE:
        return None
    return (f"the plan was estimated at {estimated:.2f}x and decoded at {decoded:.2f}x the verifier alone (more than "
            f"{ESTIMATE_TOLERANCE:.0%} apart): timings from a busy machine, or calibration text unlike what was "
            "decoded; the decode's verdict decides")


def checked_sampling_plan(sampling: dict, decoded: dict[str, float], step) -> dict:
    """plan.json's "sampling" entry with the decode check at its temperature; its verdict follows the decode."""
    out = {**sampling, "decoded": decoded, "speculate": decoded["speedup"] > MIN_SPEEDUP}
    if not out["speculate"]:
        step(f"the sampling tree decoded at {decoded['speedup']:.2f}x the verifier alone: requests at T > 0 decode "
             "without speculation")
    return out
