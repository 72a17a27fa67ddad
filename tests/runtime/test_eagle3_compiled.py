"""Bundles with an EAGLE-3 head: the fused draft phase (head step + tree steps + growth; O1 and O2) and the verify
phase (handing the accepted path's features over; O1) are compiled, and decoding stays lossless."""
import json
import shutil

import pytest
import torch
from checkpoints import write_checkpoint
from fused_verify import fused_verify_calls
from yggc.graphs import load_model
from yggc.graphs.eagle3_checkpoint import (
    EMBEDDING_ONLY,
    FUSION_ONLY,
    PACKED_EMBEDDING,
    head_base_config,
    load_eagle3,
    new_eagle3,
    read_embedding,
    save_eagle3,
)
from yggc.graphs.packed_table import pack_table
from yggc.passes import contention, tied_head
from yggc.passes.calibrate import CalibrationSpec
from yggc.passes.pipeline import CompileJob, compile_bundle

from yggc.artifacts.cache_inputs import HeadBucket
from yggc.artifacts.cache_layout import causal_rows
from yggc.artifacts.constants_map import SUFFIX as CONSTANTS_SUFFIX
from yggc.cli.main import main
from yggc.errors import YggcError
from yggc.plan.shape import TreeShape
from yggc.runtime import Runtime
from yggc.runtime.drafters.eagle3_proposer import Eagle3Proposer
from yggc.tree.sampling import SamplingParams

pytestmark = pytest.mark.slow  # compiles bundles: scheduled first (tests/conftest.py)

SHAPE = TreeShape(3, 2, 4)


@pytest.fixture(scope="module")
def pair_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("e3pair")
    v = write_checkpoint(root / "v", "tiny_vocab_tied", seed=5)  # tied: in bf16 the head shares the packed table
    head = new_eagle3(v, torch.arange(8), 2, seed=5, init_std=0.3)
    return v, save_eagle3(head, head_base_config(v), root / "head")


def tokens(dec, prompt, n):
    return [t for c in dec.stream(prompt, n, SamplingParams()) for t in c]


@pytest.fixture(scope="module")
def bundles(pair_dirs, tmp_path_factory):
    """bundles(dtype) -> the pair's O2 bundle at SHAPE, compiled once for the module."""
    made = {}

    def get(dtype: torch.dtype):
        if dtype not in made:
            out = tmp_path_factory.mktemp("e3bundle") / "bundle"
            with pytest.MonkeyPatch.context() as mp:  # the tied-head kernel on any CPU (the default on AVX2)
                mp.setattr(tied_head, "kernel_is_fastest", lambda: True)
                compile_bundle(CompileJob(*pair_dirs, out, SHAPE, dtype=dtype, max_seq=96, profile_repeats=2,
                                          opt="O2"), log=lambda m: None)
            made[dtype] = out
        return made[dtype]

    return get


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_eagle3_decoding_is_lossless(pair_dirs, bundles, dtype):
    """O2: one verifier package that also returns the features, the head's own package fed the gathered
    embedding rows, eager phases around them; the verifier's weights live only in its package (the bundle keeps
    its token embedding alone, for the head: in bf16 as the packed table the verifier's package takes as an
    input, one tensor for both); AR runs the same batch-invariant kernels, so it is the reference in bf16 too.
    O1 (the fused draft and verify phases): test_calibrated_eagle3_bundle below."""
    out = bundles(dtype)
    stored = sorted(f.relative_to(out).as_posix() for f in out.rglob("*.safetensors")
                    if not f.name.endswith(CONSTANTS_SUFFIX))  # the packages' constants aside
    embed = read_embedding(pair_dirs[0]).to(dtype)
    rt = Runtime.load(out)
    verifier = rt.compiled["verifier"].any_width
    if dtype == torch.float32:  # the package holds its own table; the bundle keeps the rows for the head
        assert stored == [f"drafter/{FUSION_ONLY}", f"verifier/{EMBEDDING_ONLY}"]  # no checkpoint of either
        assert torch.equal(read_embedding(out / "verifier"), embed)
        assert verifier.caches == tuple(rt.verifier.graph.cache_tensors())
    else:  # one copy: the bundle's packed table, bound to the head and passed to the verifier's package
        assert stored == [f"drafter/{FUSION_ONLY}", f"verifier/{PACKED_EMBEDDING}"]
        table = rt.drafter.graph.embed.packed
        assert torch.equal(table, pack_table(embed, tied_head.table_columns())) and verifier.caches[-1] is table
        assert not any("embed" in name for name in verifier.runner.get_constant_fqns())
    assert rt.manifest.extra["drafter"] == {"kind": "eagle3", "feature_layers": [0, 1, 1]}
    assert rt.verifier.graph.caches()[0].k.dtype == dtype and rt.drafter.graph.caches()[0].k.dtype == dtype
    tree = rt.decoder(speculative=True)
    assert isinstance(tree.proposer, Eagle3Proposer)
    assert rt.compiled["verifier"].features and not rt.verifier.graph.has_weights
    # the draft phase is one package: the head's layer frozen in, its caches and the verifier's table passed in
    phase = rt.draft_runners[(SHAPE.depth, SHAPE.width)]
    embed = rt.drafter.graph.embed
    table = embed.weight if dtype == torch.float32 else embed.packed
    assert tree.proposer.phases.run is phase and phase.caches[-1] is table
    assert phase.caches[:-1] == tuple(rt.drafter.graph.cache_tensors())
    assert not any(part in name for name in phase.runner.get_constant_fqns() for part in ("embed", "fc_"))
    head = rt.compiled["drafter"]  # the head's own package at every width, without the verifier's embedding
    own = load_eagle3(pair_dirs[1], pair_dirs[0], 2, dtype)  # the head's checkpoint
    assert torch.equal(head.graph.fc.weight, own.fc.weight) and torch.equal(head.graph.draft_ids, own.draft_ids)
    # the verifier's package runs the head's fc: its features come out fused, as fc of the eager verifier's taps
    assert rt.verifier.graph.feature_fc is head.graph.fc and tree.proposer.fused
    reference = load_model(pair_dirs[0], rt.verifier.layout.n_slots, dtype)
    reference.feature_layers = own.eagle.feature_layers
    pos = torch.arange(5)
    mask = causal_rows(pos, rt.verifier.layout.view(5))
    _, fused = rt.compiled["verifier"].forward_features(torch.tensor([3, 1, 4, 1, 5]), pos, pos, mask)
    _, taps = reference.forward_features(torch.tensor([3, 1, 4, 1, 5]), pos, pos, mask)
    tol = {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 3e-2, "rtol": 3e-2}
    torch.testing.assert_close(fused, own.fuse(taps), **tol)
    assert not head.graph.has_weights and head.graph.lm_head.weight.is_meta  # the rest only in its package
    assert tree.drafter is head and isinstance(head.any_width, HeadBucket)
    assert not any("embed" in name for name in head.any_width.runner.get_constant_fqns())
    ref_dec, fused = rt.decoder(speculative=False), fused_verify_calls(rt)
    for seed in range(3):
        prompt = torch.randint(1, 8, (6 + 7 * seed,), generator=torch.Generator().manual_seed(seed)).tolist()
        assert tokens(tree, prompt, 40) == tokens(ref_dec, prompt, 40)
        assert tree.stats.n_accept > 0
    assert fused and all(fused)  # the verify phase in one call, the features' path rows handed over
    # sampled trees draft through the head's package too (its checkpoint beyond fc is not in the bundle)
    sampled = SamplingParams(temperature=1.0, top_p=0.9, seed=7)
    runs = [[t for c in tree.stream(prompt, 24, sampled) for t in c] for _ in range(2)]
    assert runs[0] == runs[1] and len(runs[0]) == 24  # seeded runs repeat


def test_the_draft_phase_package_grows_the_eager_phases_tree(bundles):
    """O2's draft phase package (head step, tree steps and growth in one call) drafts the tree the eager phase
    around the head's package drafts from the same pending pairs, and writes the same K/V into the head's cache."""
    rt = Runtime.load(bundles(torch.float32))
    tree = rt.decoder(speculative=True)
    assert tree.proposer.phases.run is not tree.proposer.phases.module
    beside = rt.decoder(speculative=True, compiled_draft=False)  # what `yggc bench --shapes` runs beside it
    assert beside.proposer.phases.run is beside.proposer.phases.module
    for seed in range(3):
        prompt = torch.randint(1, 8, (5 + 6 * seed,), generator=torch.Generator().manual_seed(seed)).tolist()
        tree.proposer.prefill(prompt, 0)
        inputs = tree.proposer.phase_inputs([prompt[-1]], len(prompt))
        compiled = tree.proposer.phases.run(*inputs)
        cache = [t.clone() for t in rt.drafter.graph.cache_tensors()]
        eager = tree.proposer.phases.module(*inputs)
        for name, a, b in zip(("tokens", "parents", "depth"), compiled, eager):
            assert torch.equal(a, b), name
        torch.testing.assert_close(compiled[3], eager[3], atol=1e-5, rtol=1e-5)  # cum_logp
        for a, b in zip(cache, rt.drafter.graph.cache_tensors()):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_o2_calibration_times_the_glue_drafting_through_a_phase_package(tmp_path):
    """At O2 calibration prices the host glue from the phases timed whole at a probe shape; with a head they draft
    through a draft phase package lowered for the probe, as the runtime will, so the glue is not an eager phase's.
    The chosen shape decodes what the bundle's compiled AR decodes."""
    v = write_checkpoint(tmp_path / "v", "llama_gqa", seed=2)
    head = new_eagle3(v, torch.arange(0, 300, 3), 2, seed=2, init_std=0.3)
    pair = (v, save_eagle3(head, head_base_config(v), tmp_path / "head"))
    calib = tmp_path / "calib.txt"
    calib.write_text("a b c d e f g h a b c d " * 20)
    spec = CalibrationSpec((calib,), n_prompts=2, prompt_tokens=12, new_tokens=16, max_depth=2, widths=(2,),
                           probe=False)
    lines, out = [], tmp_path / "bundle"
    compile_bundle(CompileJob(*pair, out, None, max_seq=96, profile_repeats=1, opt="O2", calib=spec),
                   log=lines.append)
    assert any("timed the phases at D=2 W=2 V=3 for the host glue, drafting through a draft phase package" in line
               for line in lines)
    assert len(json.loads((out / "calibration.json").read_text())["glue_ms"]) == 2
    rt = Runtime.load(out)
    prompt = [11, 42, 7, 250, 3, 99]
    assert tokens(rt.decoder(speculative=True), prompt, 24) == tokens(rt.decoder(speculative=False), prompt, 24)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_suffix_branches_beside_the_head_package_are_lossless(bundles, dtype):
    """Paths through suffix branches hand the head more pairs than a head step takes: the rest go through its
    package first (Eagle3Proposer.catch_up); the output stays compiled AR's."""
    rt = Runtime.load(bundles(dtype))
    tree, ref_dec = rt.decoder(speculative=True, suffix_branches=True), rt.decoder(speculative=False)
    caught_up = 0
    for seed in range(3):
        prompt = torch.randint(1, 8, (6 + 7 * seed,), generator=torch.Generator().manual_seed(seed)).tolist()
        assert tokens(tree, prompt, 40) == tokens(ref_dec, prompt, 40)
        caught_up += sum(k > SHAPE.depth for k in tree.stats.accepted_lengths)
    assert caught_up > 0


def test_manifest_must_match_the_head(bundles, tmp_path):
    out = tmp_path / "bundle"
    shutil.copytree(bundles(torch.float32), out)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["extra"]["drafter"] = {"kind": "llama"}
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(YggcError, match="records drafter {'kind': 'llama'}, its drafter/ folder holds"):
        Runtime.load(out)


class BusyOnce:
    """contention.CpuWatch stand-in: the first profile saw other programs take a core, the retry a quiet machine."""

    calls = 0

    def __init__(self):
        type(self).calls += 1
        self.load = 1.0 if type(self).calls == 1 else 0.0

    def stop(self):
        from yggc.passes.contention import CpuUse

        return CpuUse(1.0, 0.0, self.load)


def test_calibrated_eagle3_bundle(tmp_path, capsys, monkeypatch):
    """--calib with a head: its eager steps are profiled, the calibration text decoded with head trees, a shape
    chosen from those trees, and the chosen shape's phases decode losslessly. O1 (CompileJob's default; the CUDA
    one) in bf16 end to end: weights, KV caches, the fused draft and verify phases. Compiled and eager bf16
    kernels round differently, so the bundle's own compiled AR is the reference (O1 in float32 against eager
    decoding: test_compiled.py)."""
    v = write_checkpoint(tmp_path / "v", "llama_gqa", seed=2)  # a verifier with a tokenizer for the text
    head = new_eagle3(v, torch.arange(0, 300, 3), 2, seed=2, init_std=0.3)
    pair = (v, save_eagle3(head, head_base_config(v), tmp_path / "head"))
    calib = tmp_path / "calib.txt"
    calib.write_text("a b c d e f g h a b c d " * 20)
    spec = CalibrationSpec((calib,), n_prompts=2, prompt_tokens=12, new_tokens=16, max_depth=3, widths=(1, 2),
                           probe=False)  # the verifier's probe widths: two O1 packages fewer
    out = tmp_path / "bundle"
    monkeypatch.setattr(contention, "CpuWatch", BusyOnce)  # profiled twice: the head's steps, timed once, stay
    compile_bundle(CompileJob(*pair, out, None, dtype=torch.bfloat16, max_seq=128, profile_repeats=1, calib=spec),
                   log=lambda m: None)
    profile = json.loads((out / "profile.json").read_text())
    assert set(profile["models"]["drafter"]["bucket_ms"]) == {"1", "4", "8"} and BusyOnce.calls == 2
    assert "contention" not in profile  # the retry found the machine quiet
    record = json.loads((out / "calibration.json").read_text())
    assert set(record["n_trees"]) == {"1", "2"} and all(n > 0 for n in record["n_trees"].values())
    plan = json.loads((out / "plan.json").read_text())
    shape = TreeShape(plan["depth"], plan["width"], plan["verify"])
    assert shape.depth <= 3 and shape.width in (1, 2)
    assert main(["inspect", str(out)]) == 0
    assert "drafter: EAGLE-3 head over the verifier's layers [0, 1, 1]" in capsys.readouterr().out
    rt = Runtime.load(out)
    assert rt.verifier.graph.embed.weight.dtype == torch.bfloat16 == rt.drafter.graph.caches()[0].k.dtype
    assert set(rt.draft_runners) == {(shape.depth, shape.width)}
    assert set(rt.verify_runners) == {(shape.depth, shape.width, shape.verify)}
    tree = rt.decoder(speculative=True)
    assert tree.proposer.phases.run is rt.draft_runners[(shape.depth, shape.width)]
    prompt = [11, 42, 7, 250, 3, 99]
    assert tokens(tree, prompt, 30) == tokens(rt.decoder(speculative=False), prompt, 30)


def test_per_iteration_shapes_through_the_head_package_equal_compiled_ar(bundles):
    """At O2 the models' packages take any width, so the depth predictor may switch the head's shape every
    iteration: a shape whose draft phase the bundle compiled drafts through that package, the others eagerly
    around the head's; output equals the bundle's AR through the same kernels."""
    from trees import CyclingPolicy

    rt = Runtime.load(bundles(torch.bfloat16))
    shapes = (TreeShape(3, 2, 5), TreeShape(1, 2, 2), TreeShape(4, 1, 4), TreeShape(2, 3, 6), TreeShape(1, 1, 1))
    ref_dec = rt.decoder(speculative=False)
    rt.policy = CyclingPolicy(shapes)
    tree = rt.decoder(speculative=True)
    assert tree.policy is rt.policy
    for seed in range(2):
        prompt = torch.randint(1, 8, (6 + 7 * seed,), generator=torch.Generator().manual_seed(seed)).tolist()
        assert tokens(tree, prompt, 40) == tokens(ref_dec, prompt, 40)
    assert rt.policy.seen == set(shapes) and tree.stats.n_accept > 0
    built = tree.proposer.phases.built  # shape -> (draft module, its runner)
    compiled = {s for s in shapes if built[s][1] is not built[s][0]}
    assert compiled == {TreeShape(3, 2, 5)} and built[TreeShape(3, 2, 5)][1] is rt.draft_runners[(3, 2)]


@pytest.mark.parametrize("speculative", [True, False])
def test_a_follow_up_turn_reuses_the_caches_and_equals_a_cold_start(bundles, speculative):
    from test_prompt_cache import follow_up_equals_cold

    rt = Runtime.load(bundles(torch.bfloat16))
    prompt, extra = (torch.randint(1, 8, (k,), generator=torch.Generator().manual_seed(k)).tolist() for k in (21, 5))
    assert follow_up_equals_cold(rt, prompt, extra, speculative) >= len(prompt)
