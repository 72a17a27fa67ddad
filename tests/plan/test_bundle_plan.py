"""plan.json as values: the JSON round trip, a plan written before the schema version, and a newer one refused."""
import json

import pytest

from yggc.errors import YggcError
from yggc.plan.bundle_plan import PLAN_VERSION, AdaptivePlan, BundlePlan, SamplingPlan, read_plan
from yggc.plan.shape import TreeShape


def estimate(d, w, v, tokens=2.0, ms=4.0, speedup=1.5):
    return {"depth": d, "width": w, "verify": v, "tokens_per_iter": tokens, "iteration_ms": ms,
            "ms_per_token": round(ms / tokens, 4), "speedup": speedup}


def stage(variant, assignment, executable, per_token=True):
    rec = {"variant": variant, "assignment": assignment, "depth": 3, "width": 2, "verify": 5}
    rec |= {"tokens_per_iter": 2.5} if per_token else {}
    rec |= {"iteration_ms": 6.25}
    rec |= {"ms_per_token": 2.5} if per_token else {}
    return rec | {"executable": executable}


DECODED = {"tree_tpot_ms": 8.2, "ar_tpot_ms": 9.9, "speedup": 1.2073, "tokens": 576}

# What `yggc compile --calib --temp 0.8 --opt O2` wrote before plans had a version: every record, in file order.
CALIBRATED_V1 = {
    "depth": 3, "width": 2, "verify": 5, "source": "calibration",
    "objective": estimate(3, 2, 5, 2.5), "best_unpruned": estimate(3, 2, 6, 2.6, 5.0, 1.3),
    "candidates": [estimate(3, 2, 5, 2.5), estimate(2, 2, 4, 2.1, 3.5, 1.4)],
    "sampling": {"depth": 2, "width": 2, "verify": 3, "source": "calibration", "objective": estimate(2, 2, 3),
                 "best_unpruned": estimate(2, 2, 4), "candidates": [estimate(2, 2, 3)], "temperature": 0.8,
                 "host_ms_per_step": {"1": 0.05, "2": 0.0812}, "rank_acceptance": [0.61, 0.22, 0.1, 0.04],
                 "decoded": {**DECODED, "speedup": 0.93}, "speculate": False},
    "measured": {"iteration_ms": 6.1, "verifier_step_ms": 5.2, "speedup": 1.3},
    "decoded": DECODED, "speculate": True,
    "estimate_off": "the plan was estimated at 1.50x and decoded at 1.21x the verifier alone",
    "schedule": {**stage("sequential", "shared", True),
                 "timeline": [{"stage": "head", "resource": "cores", "start_ms": 0.0, "end_ms": 1.0},
                              {"stage": "verify", "resource": "cores", "start_ms": 1.0, "end_ms": 6.25}],
                 "best_estimated": stage("aot_head", "split", False),
                 "runners_up": [stage("aot_head", "split", False), stage("sequential", "shared", True)]},
    "adaptive": {"width": 2, "shapes": [[1, 2, 2], [2, 2, 4], [3, 2, 5]], "n_trees": 120, "used": True,
                 "held_out_tokens_per_ms": {"adaptive": 0.41, "best_constant": 0.38, "oracle": 0.5},
                 "best_constant": [3, 2, 5], "iteration_ms": [3.1, 4.7, 6.25], "n_features": 9, "hidden": 32},
}
# `yggc compile --depth 2 --width 2`: the shape and its stage plan only.
FIXED_V1 = {"depth": 2, "width": 2, "verify": 4, "source": "compile flags",
            "schedule": {**stage("sequential", "shared", True, per_token=False), "timeline": [],
                         "best_estimated": stage("aot_head", "split", False, per_token=False), "runners_up": []}}


@pytest.mark.parametrize("old", [CALIBRATED_V1, FIXED_V1], ids=["calibrated", "fixed"])
def test_a_plan_without_a_version_loads_and_writes_back_the_same_json(old):
    plan = BundlePlan.from_json(json.loads(json.dumps(old)))
    assert plan.schema_version == 1 == PLAN_VERSION
    written = plan.to_json()
    assert list(written) == ["schema_version", *old]  # the version first, then the same keys in the same order
    assert {k: v for k, v in written.items() if k != "schema_version"} == old
    assert json.dumps(written) == json.dumps({"schema_version": 1, **old})  # nested records keep their order too


def test_round_trip_dataclass_json_dataclass():
    plan = BundlePlan.from_json(CALIBRATED_V1)
    again = BundlePlan.from_json(json.loads(json.dumps(plan.to_json())))
    assert again == plan
    assert plan.shape == TreeShape(3, 2, 5) and plan.speculate and plan.objective.tokens_per_iter == 2.5
    assert plan.sampling == SamplingPlan.from_json(CALIBRATED_V1["sampling"]) and not plan.sampling.speculate
    assert plan.sampling.host_ms_per_step == {1: 0.05, 2: 0.0812} and plan.sampling.rank_acceptance[0] == 0.61
    assert plan.adaptive.shapes[-1] == plan.adaptive.best_constant == TreeShape(3, 2, 5)
    assert plan.schedule.executed.variant == "sequential" and plan.schedule.timeline[1].stage == "verify"
    with_suffix = {**CALIBRATED_V1, "decoded_with_suffix": {**DECODED, "speedup": 1.31}}
    plan = BundlePlan.from_json(json.loads(json.dumps(with_suffix)))
    assert plan.decoded_with_suffix.speedup == 1.31 and plan.to_json() == {"schema_version": 1, **with_suffix}
    minimal = BundlePlan(TreeShape(1, 1, 1))
    assert minimal.to_json() == {"schema_version": PLAN_VERSION, "depth": 1, "width": 1, "verify": 1,
                                 "source": "compile flags"}
    assert BundlePlan.from_json(minimal.to_json()) == minimal


def test_speculation_off_is_written_even_without_a_decode_check():
    off = BundlePlan(TreeShape(2, 2, 3), speculate=False)
    assert off.to_json()["speculate"] is False and BundlePlan.from_json(off.to_json()) == off
    unused = AdaptivePlan(False, "per-iteration shapes need --opt O2 and a free depth")
    assert unused.to_json() == {"used": False, "reason": unused.reason}
    assert AdaptivePlan.from_json(unused.to_json()) == unused


def test_a_newer_plan_version_is_one_line_naming_it_and_the_fix(tmp_path):
    newer = {"schema_version": PLAN_VERSION + 1, **FIXED_V1}
    with pytest.raises(YggcError) as e:
        BundlePlan.from_json(newer)
    msg = str(e.value)
    assert "\n" not in msg and f"schema_version {PLAN_VERSION + 1}" in msg and f"reads ({PLAN_VERSION})" in msg
    assert "re-run `yggc compile`" in msg and "upgrade yggc" in msg
    (tmp_path / "plan.json").write_text(json.dumps(newer))
    with pytest.raises(YggcError, match=f"plan.json has schema_version {PLAN_VERSION + 1}, newer than"):
        read_plan(tmp_path)


@pytest.mark.parametrize("text,needle", [
    (json.dumps({**FIXED_V1, "schema_version": "1"}), "is not a yggc plan (schema_version '1')"),
    (json.dumps({"stages": []}), "is not a plan this yggc reads (KeyError: 'depth')"),
    (json.dumps({**CALIBRATED_V1, "measured": {"speedup": 1.0}}), "is not a plan this yggc reads (TypeError"),
    ('{"depth": 2, ', "is not readable JSON"),
])
def test_a_damaged_plan_is_one_line(tmp_path, text, needle):
    (tmp_path / "plan.json").write_text(text)
    with pytest.raises(YggcError) as e:
        read_plan(tmp_path)
    assert needle in str(e.value) and "\n" not in str(e.value) and "yggc compile" in str(e.value)


def test_a_bundle_without_a_plan(tmp_path):
    with pytest.raises(YggcError, match="has no plan.json; re-run `yggc compile`"):
        read_plan(tmp_path)
