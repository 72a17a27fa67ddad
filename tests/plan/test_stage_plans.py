"""Stage DAGs, list scheduling and the plan search on hand-made profiles (no models)."""
import itertools
import random

import networkx as nx
import pytest
from yggc.passes.plan import EXECUTABLE, best_executable, plan_record, search_plans

from yggc.plan.bundle_profile import Profile
from yggc.plan.schedule import list_schedule
from yggc.plan.shape import TreeShape
from yggc.plan.stages import SHARED, VARIANTS, StageCosts, iteration_dag, iteration_stages, split_assignment

HOST = {"prune": 0.1, "accept_greedy": 0.2, "compact_kv": 0.3}
PROFILE = {"models": {"verifier": {"cost_curve": {"t0_ms": 10.0, "knee": 8.0, "slope_ms": 1.0}},
                      "drafter": {"cost_curve": {"t0_ms": 2.0, "knee": 4.0, "slope_ms": 0.5}}},
           "host_ms": HOST}
STAGES = StageCosts.from_profile(Profile(PROFILE))
SPLIT = split_assignment(1.0, 1.0)


def iteration_ms(variant, shape, assignment=SHARED):
    return list_schedule(iteration_dag(variant, shape, STAGES, assignment)).iteration_ms


@pytest.mark.parametrize("shape", [TreeShape(1, 1, 1), TreeShape(2, 2, 3), TreeShape(4, 3, 10)])
@pytest.mark.parametrize("variant", VARIANTS)
def test_one_resource_serializes_every_stage(variant, shape):
    total = sum(s.cost_ms for s in iteration_stages(variant, shape, STAGES))
    assert iteration_ms(variant, shape) == pytest.approx(total)


def test_sequential_prices_the_objective_plus_host_stages():
    shape = TreeShape(3, 2, 5)  # head at width 2, two steps at width 2, verify 6 rows
    assert iteration_ms("sequential", shape) == pytest.approx(2 + 2 * 2 + 10 + sum(HOST.values()))


def test_glue_is_what_the_phases_took_beyond_the_priced_stages():
    """The profile times the draft and verify phases whole at one shape; the host work around the calls is the
    rest. At that shape the sequential estimate is then the two phases' time, and other shapes scale it."""
    shape = TreeShape(3, 2, 5)  # drafter calls 2 + 2 + 2 = 6 ms; verify 10 + prune, accept, compact 0.6 ms
    profile = {**PROFILE, "phase_ms": {"draft": 6 + 3 * 0.4, "verify": 10.6 + 1.5}, "phase_shape": [3, 2, 5]}
    costs = StageCosts.from_profile(Profile(profile))
    assert costs.glue_ms == pytest.approx((0.4, 1.5))
    assert iteration_stages("sequential", shape, costs)[-1].name == "glue"
    assert list_schedule(iteration_dag("sequential", shape, costs)).iteration_ms == pytest.approx(7.2 + 12.1)
    assert costs.glue(TreeShape(1, 4, 4)) == pytest.approx(0.4 + 1.5)  # one drafter call
    fast = {**profile, "phase_ms": {"draft": 1.0, "verify": 1.0}}  # faster than the stages: no negative glue
    assert StageCosts.from_profile(Profile(fast)).glue_ms == (0.0, 0.0)
    for variant in VARIANTS:  # the glue stage sits on every variant's critical path, and no DAG has a cycle
        total = sum(st.cost_ms for st in iteration_stages(variant, shape, costs))
        assert list_schedule(iteration_dag(variant, shape, costs)).iteration_ms == pytest.approx(total)


def test_glue_subtracts_the_calls_timed_in_turn_with_the_phases():
    """A shared VM's memory speed moves a verify call by 10-25% within minutes: priced by a curve timed minutes
    before the phases, that drift would pass for glue. The profile times the calls the phases are priced with in turn
    with them, and the glue is the phases' time beyond those calls."""
    shape = TreeShape(3, 2, 5)  # verifies 6 rows; the curves say 10 ms there and 2 ms a drafter call
    phases = {"phase_ms": {"draft": 3 * 2.2 + 3 * 0.4, "verify": 11.2 + 0.6 + 0.3}, "phase_shape": [3, 2, 5]}
    calls = {"verifier": {"1": 9.0, "6": 11.2}, "drafter": {"2": 2.2}}  # the same minutes' calls: slower
    timed_in_turn = Profile({**PROFILE, **phases, "phase_calls_ms": calls})
    assert StageCosts.from_profile(timed_in_turn).glue_ms == pytest.approx((0.4, 0.3))
    by_curves = StageCosts.from_profile(Profile({**PROFILE, **phases})).glue_ms  # the drift passes for glue
    assert by_curves == pytest.approx((0.4 + 0.2, 0.3 + 1.2))
    only_verifier = {"verifier": calls["verifier"]}  # a drafter profiled by its phase alone: its curve
    verifier_in_turn = Profile({**PROFILE, **phases, "phase_calls_ms": only_verifier})
    assert StageCosts.from_profile(verifier_in_turn).glue_ms == pytest.approx((0.6, 0.3))


def test_a_timed_width_is_priced_at_its_median_and_others_by_the_fit():
    """The fit is a smooth roofline; where the profile timed a width the objective takes the timing, so a shape
    whose verify width the fit overprices is not ranked below one it prices right."""
    timed = {"1": 10.0, "2": 10.2, "4": 10.5}  # flat to 4 rows: the fit's knee at 8 says 10.0 there
    profile = {**PROFILE, "models": {**PROFILE["models"], "verifier": {**PROFILE["models"]["verifier"],
                                                                      "bucket_ms": timed}}}
    costs = StageCosts.from_profile(Profile(profile))
    assert [costs.verifier(w) for w in (1, 2, 4)] == [10.0, 10.2, 10.5]
    assert costs.verifier(3) == STAGES.verifier(3) == pytest.approx(10.0)  # not timed: the fit
    assert costs.verifier(12) == STAGES.verifier(12) == pytest.approx(14.0)
    assert costs.drafter(4) == STAGES.drafter(4)  # no timings: the fit alone
    shape = TreeShape(1, 4, 3)  # verifies 4 rows
    assert costs.iteration_ms(shape) - STAGES.iteration_ms(shape) == pytest.approx(0.5)


def test_a_profile_without_the_phases_shape_prices_no_glue():
    """Bundles written before phase_shape was recorded keep their estimates."""
    costs = StageCosts.from_profile(Profile({**PROFILE, "phase_ms": {"draft": 50.0, "verify": 50.0}}))
    assert costs.glue_ms == (0.0, 0.0)
    assert "glue" not in [st.name for st in iteration_stages("sequential", TreeShape(2, 2, 3), costs)]


def test_hand_computed_overlaps_on_two_core_groups():
    shape = TreeShape(2, 2, 3)
    sequential = 2 + 2 + 0.1 + 10 + 0.2 + 0.3  # head, step, prune, verify(4), accept, compact
    assert iteration_ms("sequential", shape, SPLIT) == pytest.approx(sequential)
    # the tail runs during verification; the next head feeds only the root, which costs the same here
    assert iteration_ms("aot_tail", shape, SPLIT) == pytest.approx(sequential)
    # no head step: the bonus rows (width 4, 2 ms) run while accept and compact (0.5 ms) do
    assert iteration_ms("aot_head", shape, SPLIT) == pytest.approx(2 + 0.1 + 10 + 2)


def test_slower_core_groups_are_priced_by_their_factors():
    shape = TreeShape(2, 2, 3)
    slow = split_assignment(2.0, 1.5)
    assert iteration_ms("sequential", shape, slow) == pytest.approx(1.5 * 4 + 2.0 * 10.6)


def random_dag(seed: int) -> nx.DiGraph:
    rng = random.Random(seed)
    dag = nx.DiGraph()
    for v in range(12):
        dag.add_node((v // 4, f"s{v}"), resource=rng.choice("ab"), cost_ms=rng.uniform(0.1, 3))
    nodes = list(dag)
    for a, b in itertools.combinations(range(12), 2):
        if rng.random() < 0.25:
            dag.add_edge(nodes[a], nodes[b])
    return dag


@pytest.mark.parametrize("seed", range(20))
def test_list_schedule_keeps_dependencies_and_one_stage_per_resource(seed):
    dag = random_dag(seed)
    sched = list_schedule(dag)
    at = {(s.iteration, s.stage): s for s in sched.slots}
    assert set(at) == set(dag)
    for a, b in dag.edges:
        assert at[b].start_ms >= at[a].end_ms - 1e-9
    for r in "ab":
        runs = sorted((s.start_ms, s.end_ms) for s in sched.slots if s.resource == r)
        assert all(e0 <= s1 + 1e-9 for (_, e0), (s1, _) in zip(runs, runs[1:]))
    # never worse than running everything in one line, never better than the longest path
    assert sched.makespan_ms <= sum(dag.nodes[v]["cost_ms"] for v in dag) + 1e-9
    longest = nx.dag_longest_path_length(nx.DiGraph([(a, b, {"w": dag.nodes[b]["cost_ms"]}) for a, b in dag.edges]),
                                         weight="w") if dag.number_of_edges() else 0.0
    assert sched.makespan_ms >= longest - 1e-9


def test_search_finds_the_brute_force_best():
    candidates = {TreeShape(1, 1, 1): 1.6, TreeShape(2, 2, 3): 2.1, TreeShape(4, 2, 8): 2.9, TreeShape(6, 4, 20): 3.2}
    profile = {**PROFILE, "core_groups": {"verifier_factor": 1.1, "drafter_factor": 1.2}}
    plans = search_plans(candidates, Profile(profile))
    priced = [v for v in VARIANTS if v != "fuzzy"]  # this profile has no fuzzy-drafting measurements
    assert len(plans) == len(candidates) * len(priced) * 2
    brute = min(
        (iteration_ms(v, s, a) / t, v, a.name, s)
        for s, t in candidates.items() for v in priced for a in (SHARED, split_assignment(1.1, 1.2)))
    assert (plans[0].ms_per_token, plans[0].variant, plans[0].assignment, plans[0].shape) == pytest.approx(brute)
    exe = best_executable(plans)
    assert (exe.variant, exe.assignment) in EXECUTABLE
    assert exe.ms_per_token == pytest.approx(min(iteration_ms("sequential", s) / t for s, t in candidates.items()))


def test_plan_record_reports_the_executed_plan_and_what_overlap_would_buy():
    shape = TreeShape(2, 2, 3)
    profile = {**PROFILE, "core_groups": {"verifier_factor": 1.0, "drafter_factor": 1.0}}
    rec = plan_record(shape, Profile(profile))
    run = rec.executed
    assert (run.variant, run.assignment, run.executable, run.shape) == ("sequential", "shared", True, shape)
    assert run.iteration_ms == pytest.approx(14.6)
    assert [s.stage for s in rec.timeline] == ["head", "draft1", "prune", "verify", "accept", "compact"]
    assert rec.timeline[0].start_ms == 0.0 and rec.timeline[-1].end_ms == pytest.approx(14.6)
    best = rec.best_estimated
    assert (best.variant, best.assignment, best.iteration_ms) == ("aot_head", "split", pytest.approx(14.1))
    assert best.ms_per_token is None  # no calibration: variants of one shape are ranked by time alone
    assert "ms_per_token" not in best.to_json() and "ms_per_token" not in rec.to_json()
    calibrated = plan_record(shape, Profile(profile), {shape: 2.0, TreeShape(1, 1, 1): 1.5})
    assert calibrated.executed.ms_per_token == pytest.approx(14.6 / 2.0)
    assert len(calibrated.runners_up) == 8


def test_unknown_variant_is_refused():
    with pytest.raises(ValueError, match="unknown plan variant"):
        iteration_stages("pearl", TreeShape(2, 2, 3), STAGES)


def test_fuzzy_drafting_is_priced_from_its_measurements():
    fuzzy = StageCosts.from_profile(Profile({**PROFILE, "fuzzy": {"draft_factor": 0.5, "acceptance_ratio": 0.9}}))
    shape = TreeShape(5, 2, 5)
    # bonus calibration: the head feeds D + 1 = 6 rows (2 + 0.5 * 2 ms), then 4 steps of width 2 (2 ms), all
    # at half cost; prune, verify (6 rows, 10 ms), accept, compact as in the sequential plan
    ms = list_schedule(iteration_dag("fuzzy", shape, fuzzy)).iteration_ms
    assert ms == pytest.approx(0.5 * (3 + 4 * 2) + 0.1 + 10 + 0.2 + 0.3)
    plans = search_plans({shape: 3.0}, Profile({**PROFILE, "fuzzy": {"draft_factor": 0.5, "acceptance_ratio": 0.9}}))
    plan = next(p for p in plans if p.variant == "fuzzy")
    assert plan.tokens_per_iter == pytest.approx(1 + 2 * 0.9)  # the bonus, and 90% of the accepted drafts
    assert not plan.executable  # fuzzy drafting runs eagerly (yggc run --draft-parallel fuzzy), not in bundles
