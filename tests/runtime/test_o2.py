"""--opt O2: one frozen package per model serves every width, each row's logits are bit-identical whatever
the width and the cache view, and tree decoding through it equals the bundle's own AR decoding exactly."""

import re

import pytest
import torch
from checkpoints import write_checkpoint
from fused_verify import fused_verify_calls
from trees import CyclingPolicy
from yggc.passes import tied_head
from yggc.passes.calibrate import CalibrationSpec
from yggc.passes.pipeline import CompileJob, compile_bundle

from yggc.artifacts import kernel_ops
from yggc.artifacts.cache_layout import causal_rows
from yggc.artifacts.constants_map import constants_path
from yggc.errors import YggcError
from yggc.plan.shape import TreeShape
from yggc.runtime import Runtime

pytestmark = pytest.mark.slow  # compiles bundles: scheduled first (tests/conftest.py)

SHAPES = (TreeShape(3, 2, 5), TreeShape(4, 1, 4), TreeShape(2, 3, 6), TreeShape(3, 2, 3), TreeShape(1, 4, 4))


@pytest.fixture(scope="module")
def pair_dirs(tmp_path_factory):
    """Tied heads (embedding = LM head), a vocabulary that is not a multiple of the head kernel's 16 columns."""
    root = tmp_path_factory.mktemp("o2pair")
    v = write_checkpoint(root / "v", "qwen2_bias", seed=21)
    return v, write_checkpoint(root / "d", "qwen2_bias", seed=22, base=v, noise=0.03)


@pytest.fixture(scope="module")
def o2_bundle(pair_dirs, tmp_path_factory):
    """bf16 (where rounding differences are large enough to flip greedy tokens if rows were not invariant),
    calibrated at width 2 for depths 1..4, so the depth predictor is trained too. Both models' tied tables
    are held once, read by the tied-head kernel, on every CPU (on AVX2 that is the default)."""
    root = tmp_path_factory.mktemp("o2")
    (root / "calib.txt").write_text(" ".join(str(i % 97) for i in range(3000)))
    calib = CalibrationSpec((root / "calib.txt",), n_prompts=4, prompt_tokens=16, new_tokens=40, max_depth=4,
                            widths=(2,))
    logged = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tied_head, "kernel_is_fastest", lambda: True)
        compile_bundle(CompileJob(*pair_dirs, root / "bundle", None, dtype=torch.bfloat16, max_seq=128,
                                  profile_repeats=2, opt="O2", calib=calib), log=logged.append)
    (root / "compile.log").write_text("\n".join(logged))
    return root / "bundle"


def test_the_compile_counts_each_pass_once_and_ends_at_its_total(o2_bundle):
    lines = (o2_bundle.parent / "compile.log").read_text().splitlines()
    counts = [(int(m[1]), int(m[2])) for line in lines if (m := re.match(r"yggc compile: \[(\d+)/(\d+)\] ", line))]
    total = counts[-1][1]
    assert {t for _, t in counts} == {total} and [n for n, _ in counts] == sorted(n for n, _ in counts)
    assert sorted({n for n, _ in counts}) == list(range(1, total + 1))  # every pass says at least one line
    assert lines[-2].startswith(f"yggc compile: [{total}/{total}] wrote the bundle")


def rows_at_widths(model, tokens: torch.Tensor, n: int, widths, view: int) -> dict[int, torch.Tensor]:
    """Logits of tokens[n : n+w] fed at once after the prefix tokens[:n], for each width w."""
    pos = torch.arange(n)
    model(tokens[:n], pos, pos, causal_rows(pos, view))
    out = {}
    for w in widths:
        slots = n + torch.arange(w)
        out[w] = model(tokens[n:n + w], slots, slots, causal_rows(slots, view)).clone()
    return out


def assert_rows_invariant(model, widths: tuple[int, ...], views: tuple[int, int]) -> None:
    tokens = torch.randint(1, 300, (40,), generator=torch.Generator().manual_seed(3))
    short, long = (rows_at_widths(model, tokens, 20, widths, view) for view in views)
    for w in widths:
        assert torch.equal(short[w], short[widths[-1]][:w]), f"width {w} changed a row's logits"
        assert torch.equal(long[w], short[w]), f"the cache view changed width {w}'s logits"


def assert_weights_beside(package, weights: int) -> None:
    """The package is code (the kernels and the wrapper, a few MB whatever the weights); its constants file holds
    each weight once, plus the small constants (norms, RoPE tables) and each constant's padding to 64 bytes."""
    beside = constants_path(package)
    assert package.stat().st_size < 4e6 < weights, (package.stat().st_size, weights)
    assert weights < beside.stat().st_size < weights + 5e5, (beside.stat().st_size, weights)


@torch.inference_mode()
def test_float32_package_holds_each_weight_once_shares_the_cache_and_keeps_rows_invariant(tmp_path):
    """The packed GEMM copies replace the checkpoint's weights (KV caches are inputs, not constants), the
    frozen weights compute what the model computes, and each row is bit-identical whatever the width."""
    from yggc.graphs import load_model
    from yggc.passes.lower import lower_model

    from yggc.artifacts.buckets import load_forward_bucket

    src = write_checkpoint(tmp_path / "wide", "llama_wide_vocab")
    graph, ref = load_model(src, 65), load_model(src, 65)  # float32: packed in its own dtype on every ISA
    weights = sum(p.numel() * p.element_size() for p in graph.parameters())
    package = lower_model(graph, 16, 64, tmp_path / "wide.pt2")
    assert_weights_beside(package, weights)
    runner = load_forward_bucket(package, graph, "O2")
    for i, tok in enumerate([3, 1, 4, 1, 5, 9]):
        s = torch.tensor([i])
        args = (torch.tensor([tok]), s.clone(), s.clone(), causal_rows(s, 64))
        assert (runner(*args) - ref(*args)).abs().max().item() < 1e-4  # the frozen weights are the model's
    assert torch.allclose(graph.caches()[0].k[:, :6], ref.caches()[0].k[:, :6], atol=1e-4)  # the shared cache
    assert_rows_invariant(runner, (1, 2, 3, 4, 5, 8, 13, 16), (40, 64))  # 20 cached + 16 rows fit both views


@torch.inference_mode()
def test_bf16_package_holds_a_tied_table_once(tmp_path, monkeypatch):
    """A tied embedding/LM head table (8.4 MB here, above the package's code) is stored once: the embedding
    rows are gathered from the blocks the head kernel reads. The package computes what the model computes."""
    from yggc.graphs import load_model
    from yggc.passes.lower import lower_model

    from yggc.artifacts.buckets import load_forward_bucket

    monkeypatch.setattr(tied_head, "kernel_is_fastest", lambda: True)
    src = write_checkpoint(tmp_path / "tied", "llama_wide_tied")
    graph, ref = (load_model(src, 33, dtype=torch.bfloat16) for _ in range(2))
    weights = sum(p.numel() * p.element_size() for p in graph.parameters())  # the tied table counted once
    package = lower_model(graph, 4, 32, tmp_path / "tied.pt2")
    assert_weights_beside(package, weights)
    runner = load_forward_bucket(package, graph, "O2")
    for i, tok in enumerate([3, 16383, 4, 1, 5, 9]):
        s = torch.tensor([i])
        args = (torch.tensor([tok]), s.clone(), s.clone(), causal_rows(s, 32))
        got, want = runner(*args), ref(*args)
        tol = 0.05 * want.abs().max().item()  # bf16 GEMMs, differently blocked; bf16 attention weights
        assert (got - want).abs().max().item() < tol
        assert want[0, got.argmax()] > want.max() - tol  # the package's top token is the reference's, up to a near-tie


@torch.inference_mode()
def test_rows_are_bit_identical_across_widths_and_views(o2_bundle):
    rt = Runtime.load(o2_bundle)
    verifier = rt.compiled["verifier"]
    assert len(verifier.packages) == 1  # every width through the one package
    assert_rows_invariant(verifier, (1, 2, 3, 4, 5, 8, 13, 16), (64, 128))


@torch.inference_mode()
def test_tree_rows_at_scattered_slots_equal_ar_steps_bit_for_bit(o2_bundle):
    """A chain verified in one call, its nodes at every other slot beside a sibling's, against AR steps
    that keep the same tokens at consecutive slots: the ancestors sit elsewhere, the logits may not move."""
    verifier = Runtime.load(o2_bundle).compiled["verifier"]
    n, w, view = 30, 9, 64
    tokens = torch.randint(1, 300, (n + w,), generator=torch.Generator().manual_seed(5))
    pos = torch.arange(n)
    verifier(tokens[:n], pos, pos.clone(), causal_rows(pos, view))
    chain, sibling = n + 2 * torch.arange(w), n + 2 * torch.arange(w) + 1
    rows = n + torch.arange(w)
    verifier(tokens[n:] + 1, rows.clone(), sibling, causal_rows(sibling, view))  # K/V the chain must not see
    mask = torch.zeros(w, view, dtype=torch.bool)
    mask[:, :n] = True
    for j in range(w):
        mask[j, chain[: j + 1]] = True
    tree = verifier(tokens[n:], rows.clone(), chain, mask).clone()
    for j in range(w):
        s = torch.tensor([n + j])
        step = verifier(tokens[n + j:n + j + 1], s, s.clone(), causal_rows(s, view))
        assert torch.equal(step[0], tree[j]), f"chain row {j} differs from its AR step"


def test_bundle_keeps_weights_in_the_packages_only(o2_bundle, pair_dirs):
    from yggc.bundle import model_hashes

    rt = Runtime.load(o2_bundle)
    checkpoints = [p for p in o2_bundle.rglob("*.safetensors") if p.name != "predictor.safetensors"]
    assert sorted(p.relative_to(o2_bundle).as_posix() for p in checkpoints) == [
        "artifacts/drafter.constants.safetensors", "artifacts/verifier.constants.safetensors"]  # the packages' own
    assert rt.manifest.models == {"verifier": model_hashes(pair_dirs[0]), "drafter": model_hashes(pair_dirs[1])}


def test_one_package_per_model_weights_once_eager_phases(o2_bundle):
    rt = Runtime.load(o2_bundle)
    files = {b.file for b in rt.manifest.buckets}
    assert files == {"artifacts/verifier.pt2", "artifacts/drafter.pt2"}
    assert {b.kind for b in rt.manifest.buckets} == {"forward"}  # no phase packages: no second weight copy
    assert not rt.draft_runners and not rt.verify_runners
    assert rt.verifier.graph.embed.weight.is_meta  # the weights live in the packages only, not twice in memory
    wide = rt.compiled["verifier"].package_width + 1  # no package takes it and there are no eager weights
    slots = torch.arange(wide)
    with pytest.raises(YggcError, match=f"width {wide} is not compiled into this bundle"):
        rt.compiled["verifier"](slots, slots, slots, causal_rows(slots, 128))


def test_tree_decoding_equals_compiled_ar_for_every_shape(o2_bundle):
    rt = Runtime.load(o2_bundle)
    ar = rt.decoder(speculative=False)
    fused = fused_verify_calls(rt)
    for seed in range(2):
        prompt = torch.randint(1, 301, (6 + 11 * seed,), generator=torch.Generator().manual_seed(seed)).tolist()
        ref = rt.generate(prompt, 40, decoder=ar).tokens
        for shape in SHAPES:
            assert rt.generate(prompt, 40, decoder=rt.decoder(shape=shape)).tokens == ref, shape
        phrase = prompt[:6]
        echo = phrase + [1] + phrase + [2] + phrase  # suffix branches from the first iteration
        assert (rt.generate(echo, 40, decoder=rt.decoder(shape=SHAPES[0], suffix_branches=True)).tokens
                == rt.generate(echo, 40, decoder=ar).tokens)
    assert fused and all(fused)  # prune, verifier, acceptance and K/V moves in one call each iteration


@pytest.mark.parametrize("path", ["two tree ops", "python"])
def test_verify_phase_without_the_one_call_equals_compiled_ar(o2_bundle, monkeypatch, path):
    """A runner without verify_tree (PackageRunnerV1, a library before V2) verifies through the tree ops around the
    verifier's package; a process without the tree ops in Python (tree/verify_host.py): the same tokens."""
    monkeypatch.setattr(kernel_ops, "package_runner", lambda: torch.classes.yggc.PackageRunnerV1)
    if path == "python":
        monkeypatch.setattr(kernel_ops, "has_tree_ops", lambda: False)
    rt = Runtime.load(o2_bundle)
    fused = fused_verify_calls(rt)
    prompt = torch.randint(1, 301, (9,), generator=torch.Generator().manual_seed(3)).tolist()
    ref = rt.generate(prompt, 40, decoder=rt.decoder(speculative=False)).tokens
    for shape in SHAPES:
        assert rt.generate(prompt, 40, decoder=rt.decoder(shape=shape)).tokens == ref, shape
    assert not any(fused) and (path == "python") == (not fused)


def test_per_iteration_shapes_through_the_packages_equal_compiled_ar(o2_bundle):
    rt = Runtime.load(o2_bundle)
    prompt = torch.randint(1, 301, (12,), generator=torch.Generator().manual_seed(5)).tolist()
    ref = rt.generate(prompt, 40, decoder=rt.decoder(speculative=False)).tokens
    rt.policy = CyclingPolicy(SHAPES)
    dec = rt.decoder(speculative=True)  # whatever the calibrated plan's verdict
    assert dec.policy is rt.policy and rt.generate(prompt, 40, decoder=dec).tokens == ref
    assert set(dec.verify_phases) == set(dec.proposer.phases.built) == {*SHAPES, rt.shape}  # the plan's shape too
    assert rt.decoder(speculative=True, adaptive=False).policy is None and rt.decoder(shape=SHAPES[1]).policy is None


def test_calibrated_o2_bundle_trains_and_loads_its_depth_predictor(o2_bundle):
    import json

    adaptive = json.loads((o2_bundle / "plan.json").read_text())["adaptive"]
    assert adaptive["width"] == 2 and [s[0] for s in adaptive["shapes"]] == [1, 2, 3, 4]
    assert adaptive["n_trees"] > 0
    assert set(adaptive["held_out_tokens_per_ms"]) == {"adaptive", "best_constant", "oracle"}
    assert adaptive["used"] == (o2_bundle / "predictor.safetensors").exists()
    rt = Runtime.load(o2_bundle)
    assert (rt.policy is not None) == adaptive["used"]
    if rt.policy is not None:
        assert [[s.depth, s.width, s.verify] for s in rt.policy.shapes] == adaptive["shapes"]
    prompt = list(range(5, 17))
    ref = rt.generate(prompt, 30, decoder=rt.decoder(speculative=False)).tokens
    assert rt.generate(prompt, 30, decoder=rt.decoder(speculative=True)).tokens == ref


def test_bench_of_a_weightless_bundle_asks_for_the_checkpoints(o2_bundle, capsys):
    from yggc.cli.main import main

    capsys.readouterr()
    code = main(["bench", "--bundle", str(o2_bundle), "--rows", "yggc-ar-compiled"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "Traceback" not in err[0], err
    assert "keeps the verifier's weights only in its compiled package" in err[0] and "-m VERIFIER -md DRAFTER" in err[0]


@pytest.mark.parametrize("speculative", [True, False])
def test_a_follow_up_turn_reuses_the_caches_and_equals_a_cold_start(o2_bundle, speculative):
    from test_prompt_cache import follow_up_equals_cold

    rt = Runtime.load(o2_bundle)
    prompt, extra = (torch.randint(1, rt.verifier.graph.cfg.vocab_size, (k,), generator=torch.Generator().manual_seed(k)).tolist() for k in (21, 5))
    assert follow_up_equals_cold(rt, prompt, extra, speculative) >= len(prompt)
