"""profile.json through Profile, its one reader and writer: a bundle written before phase_shape and
phase_calls_ms were recorded loads, reads typed, and saves back as the same bytes."""
import json

import pytest

from yggc.errors import YggcError
from yggc.plan.bundle_profile import ContextTimes, ModelTimes, PhaseTimes, Profile, iteration_cost
from yggc.plan.shape import TreeShape
from yggc.plan.stages import StageCosts

CURVE = {"t0_ms": 10.0, "knee": 8.0, "slope_ms": 1.0, "s": None, "n_experts": 0, "top_k": 0, "expert_ms": 0.0,
         "expert_slope_ms": 0.0, "row_tile": 0, "tile_ms": 0.0}
# an earlier bundle's profile.json: no phase_shape, no phase_calls_ms
OLD = {"schema": "yggc-profile/1", "context": 64,
       "models": {"verifier": {"bucket_ms": {"1": 10.5, "4": 11.25}, "cost_curve": CURVE},
                  "drafter": {"bucket_ms": {"1": 2.0}, "cost_curve": {**CURVE, "t0_ms": 2.0}}},
       "context_ms": {"contexts": [64, 127], "ms": {"1": [10.5, 12.0], "4": [11.25, 13.5]},
                      "attention_share": {"1": 0.2, "4": 0.25}},
       "host_ms": {"prune": 0.1, "tree_mask": 0.05, "accept_greedy": 0.2, "compact_kv": 0.3},
       "phase_ms": {"draft": 4.0, "verify": 13.0}}


def test_an_existing_bundles_profile_loads_typed_and_saves_as_the_same_file(tmp_path):
    text = json.dumps(OLD, indent=2)
    (tmp_path / "profile.json").write_text(text)
    profile = Profile.load(tmp_path)
    assert profile.context == 64 and profile.models["verifier"].bucket_ms == {1: 10.5, 4: 11.25}
    assert profile.models["verifier"].measured_curve()(4) == 11.25 and profile.models["drafter"].curve.t0_ms == 2.0
    assert profile.context_ms == ContextTimes((64, 127), {1: (10.5, 12.0), 4: (11.25, 13.5)}, {1: 0.2, 4: 0.25})
    assert profile.phase_ms == {"draft": 4.0, "verify": 13.0} and profile.phases is None  # no shape recorded
    assert profile.phase_calls_ms == {} and profile.fuzzy == {} and profile.core_groups is None
    assert profile.contention is None
    assert iteration_cost(profile)(3) == 4.0 + 0.65 + 11.25  # draft phase, host stages, the verifier at 4 rows
    assert StageCosts.from_profile(profile).glue_ms == (0.0, 0.0)  # no phase shape: no glue priced
    saved = {}
    profile.save(type("Writer", (), {"write_json": lambda self, rel, obj: saved.update({rel: obj})})())
    assert json.dumps(saved["profile.json"], indent=2) == text


def test_a_measured_profile_is_written_in_the_files_key_order():
    models = {"verifier": ModelTimes({1: 10.5, 4: 11.25}, CURVE)}
    context = ContextTimes((64, 127), {1: (10.5, 12.0)}, {1: 0.2})
    phases = PhaseTimes({"draft": 4.0, "verify": 13.0}, {"verifier": {1: 10.0, 4: 11.0}}, TreeShape(2, 2, 3))
    profile = Profile.measured(64, models, {"prune": 0.1}, context, phases)
    assert list(profile.raw) == ["schema", "context", "models", "context_ms", "host_ms", "phase_ms", "phase_calls_ms",
                                 "phase_shape"]
    assert profile.raw["phase_calls_ms"] == {"verifier": {"1": 10.0, "4": 11.0}}
    assert profile.raw["phase_shape"] == [2, 2, 3]
    assert Profile(json.loads(json.dumps(profile.raw))).phases == phases  # through the file and back
    busy = profile.with_contention({"other_cores": 1.2, "tries": 3})
    assert busy.contention == {"other_cores": 1.2, "tries": 3} and profile.contention is None


def test_a_bundle_without_a_profile_reads_empty_and_a_broken_one_says_so(tmp_path):
    assert not Profile.load(tmp_path) and iteration_cost(Profile.load(tmp_path)) is None
    (tmp_path / "profile.json").write_text("{")
    with pytest.raises(YggcError, match="profile.json is not valid JSON"):
        Profile.load(tmp_path)
