"""A sparse (Qwen2-MoE: routed experts, a gated shared expert, a dense layer) verifier through an O2 bundle:
its experts are torch.cond branches inside the one compiled package, tree decoding through it equals the
bundle's own AR decoding token for token, and the profile fits the MoESD cost model with its expert counts."""
import json

import pytest
import torch
from checkpoints import write_checkpoint
from yggc.passes.pipeline import CompileJob, compile_bundle

from yggc.artifacts.cache_layout import causal_rows
from yggc.plan.shape import TreeShape
from yggc.runtime import Runtime

pytestmark = pytest.mark.slow  # compiles bundles: scheduled first (tests/conftest.py)

SHAPE = TreeShape(3, 2, 5)


@pytest.fixture(scope="module")
def moe_bundle(tmp_path_factory):
    root = tmp_path_factory.mktemp("moe")
    v = write_checkpoint(root / "v", "qwen2_moe_two_layers", seed=31)  # experts, shared expert, a dense layer
    d = write_checkpoint(root / "d", "qwen2_moe_two_layers", seed=32, base=v, noise=0.03)
    out = root / "bundle"
    compile_bundle(CompileJob(v, d, out, SHAPE, max_seq=128, profile_repeats=2, opt="O2"), log=lambda m: None)
    return out, v


@torch.inference_mode()
def test_compiled_moe_logits_match_the_eager_graph(moe_bundle):
    from yggc.graphs import load_model

    rt = Runtime.load(moe_bundle[0])
    eager = load_model(moe_bundle[1], rt.verifier.graph.n_slots)
    ids = torch.randint(1, 310, (12,), generator=torch.Generator().manual_seed(0))
    pos = torch.arange(12)
    got = rt.compiled["verifier"](ids, pos, pos.clone(), causal_rows(pos, 64))
    want = eager(ids, pos, pos.clone(), causal_rows(pos, 64))
    assert (got - want).abs().max().item() < 1e-4


def test_tree_decoding_through_compiled_experts_equals_ar(moe_bundle):
    rt = Runtime.load(moe_bundle[0])
    for seed in range(2):
        prompt = torch.randint(1, 310, (6 + 9 * seed,), generator=torch.Generator().manual_seed(seed)).tolist()
        ref = rt.generate(prompt, 40, decoder=rt.decoder(speculative=False)).tokens
        for shape in (SHAPE, TreeShape(4, 1, 4), TreeShape(2, 3, 6)):
            assert rt.generate(prompt, 40, decoder=rt.decoder(shape=shape)).tokens == ref, (seed, shape)
    assert rt.last_stats.summary()["mean_accepted_length"] > 1.0  # the noisy drafter's tokens are accepted


def test_profile_fits_the_expert_cost_model(moe_bundle):
    from yggc.passes.profile import PACKAGE_EVERY_WIDTH, PACKAGE_PROBE_WIDTHS

    from yggc.plan.cost_model import CostCurve

    bundle = moe_bundle[0]
    profile = json.loads((bundle / "profile.json").read_text())
    verifier = profile["models"]["verifier"]
    curve = CostCurve(**verifier["cost_curve"])
    assert (curve.n_experts, curve.top_k) == (5, 2)
    assert profile["models"]["drafter"]["cost_curve"]["n_experts"] == 5  # the noisy copy is sparse too
    widths = {int(w) for w in verifier["bucket_ms"]}
    package = json.loads((bundle / "manifest.json").read_text())["extra"]["package_width"]
    assert {w for w in PACKAGE_PROBE_WIDTHS if w <= package} <= widths  # the curve's bends are timed
    assert set(range(1, min(package, PACKAGE_EVERY_WIDTH) + 1)) <= widths  # and every width a small tree verifies


def test_profile_command_prints_the_expert_terms_and_target_efficiency(moe_bundle, capsys):
    from yggc.cli.main import main

    assert main(["profile", str(moe_bundle[0])]) == 0
    out = capsys.readouterr().out
    assert "N(W) = 5 (1 - (1 - 2/5)^W) activated experts" in out
    assert "verifier: W | measured ms | fitted ms | target efficiency T(1)/T(W)" in out
