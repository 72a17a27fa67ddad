"""Suffix branches beside a drafter model's stay lossless: greedy output equals the verifier's autoregressive output
token for token for both drafter kinds (fp32 and bf16), paths through suffix drafts leave the drafter's cache as if it
had decoded them, and sampled output follows the verifier's distribution."""
import math

import pytest
import torch
from checkpoints import CONFIGS, write_checkpoint
from decoder_kinds import VOCAB
from fused_verify import PATHS, use_tree_path
from test_speculative import N_SAMPLES, assert_greedy_equal, chi2_pvalue, decode, exact_two, first_two_after_root
from test_suffix_drafter import repeating_prompt
from yggc.graphs import load_model

from yggc.artifacts.cache_layout import CacheLayout, prefill
from yggc.plan.shape import TreeShape
from yggc.runtime import drafters
from yggc.runtime.autoregressive import PREFILL_CHUNK, AutoregressiveDecoder
from yggc.runtime.drafters import speculative_decoder
from yggc.runtime.drafters.suffix_branches import ranked_values, with_suffix_branches
from yggc.runtime.drafters.suffix_proposer import SuffixDrafter
from yggc.tree.prune import rank_nodes
from yggc.tree.sampling import SamplingParams
from yggc.tree.token_tree import TokenTree

# (model tree D, W, V), (suffix tokens per branch, branches, nodes added)
SHAPES = [((1, 2, 2), (6, 2, 8)), ((3, 2, 5), (4, 1, 4)), ((2, 1, 2), (3, 3, 6))]
LAYOUT = CacheLayout(192)


@pytest.fixture(scope="module")
def pair_paths(ckpt_root):
    """name -> (verifier, drafter) checkpoint folders; the drafter is the verifier plus noise."""
    out = {}
    for i, name in enumerate(sorted(CONFIGS)):
        v = ckpt_root / name if (ckpt_root / name).exists() else write_checkpoint(ckpt_root / name, name, seed=i)
        d = ckpt_root / f"{name}_drafter"
        if not d.exists():
            write_checkpoint(d, name, seed=100 + i, base=v, noise=0.03)
        out[name] = v, d
    return out


def hybrid(dec, branches):
    return with_suffix_branches(dec, SuffixDrafter(min_n=1), TreeShape(*branches), min_chance=0.05)


def check_greedy(make_decoder, verifier, prompt, n=60, shapes=SHAPES) -> int:
    """Asserts greedy equality with AR at every shape (assert_greedy_equal: a first difference only where the
    verifier's top two logits tie) -> iterations that accepted more tokens than the model's tree is deep (paths
    through suffix drafts)."""
    ref = decode(AutoregressiveDecoder(verifier, LAYOUT), prompt, n=n)
    beyond_model = 0
    for shape, branches in shapes:
        dec = hybrid(make_decoder(TreeShape(*shape)), branches)
        verified, score, ops = [], dec.score_draft, dec.verify_point_mass_ops  # nodes each verifier call checked
        dec.score_draft = lambda draft, n, score=score, verified=verified: (  # the host rule: kept ids less the root
            out := score(draft, n), verified.append(len(out[0]) - 1))[0]
        dec.verify_point_mass_ops = lambda draft, n, ops=ops, verified=verified, dec=dec: (  # the tree ops: V handed in
            verified.append(draft.n_verified(dec.shape.verify)), ops(draft, n))[1]
        assert_greedy_equal(decode(dec, prompt, n=n), ref, verifier, LAYOUT, prompt, f"{shape} {branches}")
        st = dec.stats
        assert st.n_generated == n and sum(st.accepted_lengths) == st.n_accept
        assert st.n_drafted == sum(verified) >= st.n_accept  # the acceptance rate counts what was verified
        assert st.n_generated == 1 + st.n_accept + st.n_iterations or st.stop_reason == "max tokens"
        beyond_model += sum(k > shape[0] for k in st.accepted_lengths)
    return beyond_model


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_standalone_drafter_with_branches_equals_autoregressive(pair_paths, name, dtype, path, monkeypatch):
    use_tree_path(monkeypatch, path)
    v, d = pair_paths[name]
    verifier, drafter = (load_model(p, LAYOUT.n_slots).to(dtype) for p in (v, d))
    prompt = repeating_prompt(verifier.cfg.vocab_size, seed=len(name))
    check_greedy(lambda shape: speculative_decoder(verifier, drafter, LAYOUT, shape), verifier, prompt)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_eagle3_head_with_branches_equals_autoregressive(decoders, ckpt_root, dtype, path, monkeypatch):
    use_tree_path(monkeypatch, path)
    root = ckpt_root / "kinds"  # written by the decoders fixture
    verifier, head = drafters.load_pair(root / "v", root / "head", dtype, LAYOUT.max_seq)
    prompt = repeating_prompt(VOCAB, seed=3)
    beyond_model = check_greedy(lambda shape: drafters.speculative_decoder(verifier.graph, head.graph, LAYOUT, shape),
                                verifier.graph, prompt)
    assert beyond_model > 0, "no path went through the suffix drafts"


@pytest.mark.parametrize("path", PATHS)
def test_paths_through_suffix_drafts_are_caught_up(pair_paths, path, monkeypatch):
    """A looping verifier: whole suffix branches are accepted past a 1-deep model tree, and the drafter's cache,
    fed the tokens it never drafted, holds what a prefill of the text gives."""
    use_tree_path(monkeypatch, path)
    v, d = pair_paths["qwen2_bias"]
    verifier, drafter = load_model(v, LAYOUT.n_slots), load_model(d, LAYOUT.n_slots)
    prompt = [5, 6, 7]
    ref = decode(AutoregressiveDecoder(verifier, LAYOUT), prompt, n=120)
    dec = hybrid(speculative_decoder(verifier, drafter, LAYOUT, TreeShape(1, 2, 2)), (6, 2, 8))
    assert decode(dec, prompt, n=120) == ref
    assert sum(k > 1 for k in dec.stats.accepted_lengths) > 5
    covered = dec.drafter_covered  # the drafter's slots 0..covered-1 are exact
    fresh = load_model(d, LAYOUT.n_slots)
    with torch.inference_mode():
        prefill(fresh, (prompt + ref)[:covered], 0, LAYOUT, PREFILL_CHUNK)
    for got, want in zip(drafter.caches(), fresh.caches()):
        torch.testing.assert_close(got.k[:, :covered], want.k[:, :covered], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(got.v[:, :covered], want.v[:, :covered], atol=1e-5, rtol=1e-4)


def test_branches_are_priced_by_measured_acceptance(pair_paths):
    """A branch whose matches keep failing stops being verified; one that keeps being accepted stays."""
    v, d = pair_paths["qwen2_bias"]
    verifier, drafter = load_model(v, LAYOUT.n_slots), load_model(d, LAYOUT.n_slots)
    dec = hybrid(speculative_decoder(verifier, drafter, LAYOUT, TreeShape(1, 2, 2)), (4, 1, 4))
    decode(dec, [5, 6, 7], n=100)
    rates = dec.proposer.suffix.rates
    assert sum(map(sum, rates.tried.values())) > 0
    for match in rates.tried:
        assert 0.0 < rates.rate(match) < 1.0 and 0.0 < rates.rate(match, later=True) < 1.0


# the text ends 2 3: suffix branches 4 2 3 .. and 1 2 3 .. (the greedy tree, point-mass rule); or no repeat (the
# model's sampled tree and its rule)
@pytest.mark.parametrize("params, prompt", [(SamplingParams(temperature=1.0), [2, 3, 4, 2, 3, 1, 2]),
                                            (SamplingParams(0.7, top_p=0.9), [1, 5, 2])])
def test_sampling_matches_verifier_distribution(tiny_pair, params, prompt):
    verifier, drafter, layout = tiny_pair
    root = 3
    dec = with_suffix_branches(speculative_decoder(verifier, drafter, layout, TreeShape(2, 2, 3)),
                               SuffixDrafter(), TreeShape(3, 2, 4), min_chance=0.05)
    counts = first_two_after_root(dec, prompt, root, params, N_SAMPLES, lambda: dec.proposer.suffix.restart(prompt))
    p_value = chi2_pvalue(counts, exact_two(verifier, layout, prompt + [root], params))
    assert p_value > 1e-3, f"emitted tokens do not follow the verifier (p={p_value:.2g})"
    assert dec.stats.n_accept > 0


def test_ranked_values_follow_the_pruning_order():
    parents, depth = [-1, 0, 0, 1, 1, 2, 3], [0, 1, 1, 2, 2, 2, 3]
    cum = [0.0, -0.2, -0.9, -0.4, -1.5, -0.95, -0.1]  # node 6 above its parent: valued as its parent
    tree = TokenTree(torch.arange(7), torch.tensor(parents), torch.tensor(depth), torch.tensor(cum), 7)
    order = rank_nodes(tree).tolist()
    key = {1: -0.2, 2: -0.9, 3: -0.4, 4: -1.5, 5: -0.95, 6: -0.4}
    assert ranked_values(parents, depth, cum) == pytest.approx([math.exp(key[i]) for i in order])


def test_a_profiled_cost_verifies_only_what_pays(pair_paths):
    """With rows priced dear the drafts verify nothing (each iteration one verifier row), with rows free the most;
    the output is the verifier's either way."""
    v, d = pair_paths["qwen2_bias"]
    verifier, drafter = load_model(v, LAYOUT.n_slots), load_model(d, LAYOUT.n_slots)
    prompt = [5, 6, 7]
    ref = decode(AutoregressiveDecoder(verifier, LAYOUT), prompt, n=80)
    accepted = {}
    for label, cost in (("dear", lambda r: 10.0 * (1 + r)), ("free", lambda r: 10.0)):
        dec = with_suffix_branches(speculative_decoder(verifier, drafter, LAYOUT, TreeShape(1, 2, 2)),
                                   SuffixDrafter(min_n=1), TreeShape(6, 2, 8), 0.05, iteration_ms=cost)
        assert decode(dec, prompt, n=80) == ref, label
        accepted[label] = dec.stats.n_accept
    assert accepted["dear"] == 0 < accepted["free"]


def test_a_greedy_request_gets_suffix_branches_by_default(demo_runtime):
    """Runtime.request_decoder: greedy requests draft the suffix branches beside the plan's tree unless told not to,
    sampled ones only when told; generate's default equals the verifier alone."""
    from yggc.runtime.drafters.suffix_branches import branches_by_default, has_suffix_branches

    assert branches_by_default("cpu", 1, sampling=False)
    assert not any((branches_by_default("cuda", 1, False), branches_by_default("cpu", 2, False),
                    branches_by_default("cpu", 1, True)))
    rt = demo_runtime
    assert has_suffix_branches(rt.request_decoder(sampling=False))
    assert not has_suffix_branches(rt.request_decoder(sampling=False, suffix_branches=False))
    assert not has_suffix_branches(rt.request_decoder(sampling=True))
    assert has_suffix_branches(rt.request_decoder(sampling=True, suffix_branches=True))
    prompt = "def add(a, b):\n    return a + b\n\ndef add(a, b):\n"
    out = rt.generate(prompt, 40)
    assert out.tokens == rt.generate(prompt, 40, decoder=rt.decoder(speculative=False)).tokens
    assert out.stats.n_accept > 0
