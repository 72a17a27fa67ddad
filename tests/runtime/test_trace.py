"""StageTrace: per-iteration medians and the Chrome trace, on an eager decoder (no timing asserted)."""
import torch

from yggc.artifacts.buckets import CompiledModel
from yggc.plan.bundle_plan import TimelineSlot
from yggc.plan.shape import TreeShape
from yggc.runtime import loading
from yggc.runtime.autoregressive import AutoregressiveDecoder
from yggc.runtime.drafters import load_pair, speculative_decoder
from yggc.tree.sampling import SamplingParams


def test_traced_decoding_is_unchanged_and_every_iteration_is_spanned():
    v, d = load_pair(*loading.demo_pair_dirs(), torch.float32, 128)
    verifier, drafter = CompiledModel(v.graph, {}), CompiledModel(d.graph, {})  # eager, but traced per call
    prompt = [3, 1, 4, 1, 5]
    ar = AutoregressiveDecoder(v.graph, v.layout)
    want = [t for c in ar.stream(prompt, 20, SamplingParams()) for t in c]
    dec = speculative_decoder(verifier, drafter, v.layout, TreeShape(3, 2, 4))
    trace = dec.enable_trace()
    got = [t for c in dec.stream(prompt, 20, SamplingParams()) for t in c]
    assert got == want
    rows = trace.per_iteration()
    assert len(rows) == dec.stats.n_iterations
    for r in rows:
        assert r["draft_ms"] + r["verify_ms"] <= r["iteration_ms"] + 1e-6
        assert 0 < r["model_ms"] <= r["iteration_ms"] and r["host_bubble_ms"] >= 0
        assert 0 <= r["draft_host_ms"] <= r["draft_ms"] and 0 <= r["verify_host_ms"] <= r["verify_ms"]
        # the phases' host time is part of the bubble (the rest: bookkeeping between and around the phases)
        assert r["draft_host_ms"] + r["verify_host_ms"] <= r["host_bubble_ms"] + 1e-6
        assert abs(r["host_share"] * r["iteration_ms"] - r["host_bubble_ms"]) < 1e-6
    first = next(s for s in trace.spans if s.track == "decode")
    per_call = [s.name for s in trace.spans if s.track == "models" and first.start_s <= s.start_s <= first.end_s]
    assert per_call == ["drafter W=2", "drafter W=2", "drafter W=2", "verifier W=5"]
    plan = (TimelineSlot("verify", "cores", 0.0, 1.0),)
    events = trace.chrome_trace(plan)["traceEvents"]
    assert sum(e["name"] == "verify" and e["pid"] == 2 for e in events) == len(rows)
