"""EasySpec drafting stays lossless: greedy output equals the verifier's autoregressive output, sampled
output follows the verifier's distribution, and after each bonus calibration the drafter's K/V equal an
exact sequential pass over the committed tokens."""
import pytest
import torch
from checkpoints import write_checkpoint
from test_speculative import N_SAMPLES, chi2_pvalue, decode, exact_two, first_two_after_root
from yggc.graphs import load_model
from yggc.graphs.fuzzy import FuzzyDrafter, fuzzy_groups

from yggc.artifacts.cache_layout import CacheLayout, prefill
from yggc.plan.shape import TreeShape
from yggc.runtime.autoregressive import AutoregressiveDecoder, StopPolicy
from yggc.runtime.drafters.fuzzy_proposer import FuzzyProposer
from yggc.runtime.speculative import SpeculativeDecoder
from yggc.tree.sampling import SamplingParams

LAYOUT = CacheLayout(160)
SETS = {"llama_deep": [(2, "inner"), (3, "inner"), (3, "all")], "qwen2_bias": [(2, "all"), (3, "all")]}


@pytest.fixture(scope="module")
def deep_pairs(checkpoint, ckpt_root):
    out = {}
    for name in SETS:
        v = checkpoint(name)
        d = write_checkpoint(ckpt_root / f"{name}_fuzzy_drafter", name, seed=7, base=v, noise=0.03)
        out[name] = (load_model(v, LAYOUT.n_slots), load_model(d, LAYOUT.n_slots), d)
    return out


def fuzzy_decoder(verifier, drafter, shape, size, span) -> SpeculativeDecoder:
    sets = fuzzy_groups(drafter.cfg.n_layers, size, span)
    assert sets  # something runs fuzzily
    return SpeculativeDecoder(FuzzyProposer(verifier, drafter, LAYOUT, TreeShape(*shape), FuzzyDrafter(drafter, sets)))


@pytest.mark.parametrize("name", sorted(SETS))
@pytest.mark.parametrize("shape", [(1, 1, 1), (4, 1, 4), (3, 2, 6), (5, 3, 9)])
def test_greedy_equals_autoregressive(deep_pairs, name, shape):
    verifier, drafter, _ = deep_pairs[name]
    prompt = torch.randint(1, 290, (11,), generator=torch.Generator().manual_seed(3)).tolist()
    ref = decode(AutoregressiveDecoder(verifier, LAYOUT), prompt)
    for size, span in SETS[name]:
        dec = fuzzy_decoder(verifier, drafter, shape, size, span)
        assert decode(dec, prompt) == ref, (size, span)
        assert dec.stats.n_accept > 0


@pytest.mark.parametrize("name", sorted(SETS))
def test_bonus_calibration_leaves_the_exact_drafter_cache(deep_pairs, name):
    """After every iteration's head step, the drafter's K/V of all committed tokens up to the root equal a
    fresh drafter's sequential prefill of them: no fuzzy entry survives its iteration."""
    verifier, drafter, path = deep_pairs[name]
    exact = load_model(path, LAYOUT.n_slots)
    size, span = SETS[name][-1]
    dec = fuzzy_decoder(verifier, drafter, (4, 2, 6), size, span)
    params, stop, gen = SamplingParams(), StopPolicy(200, (), LAYOUT), torch.Generator()
    committed = torch.randint(1, 290, (9,), generator=torch.Generator().manual_seed(4)).tolist()
    with torch.inference_mode():
        logits = dec.proposer.prefill(committed, 0)
        n, pending = len(committed), [int(logits.argmax())]
        committed += pending
        checked = 0
        while len(committed) < 60:
            root_slot = n
            new, n, pending = dec.iterate(n, pending, params, gen, stop)
            prefill(exact, committed[:root_slot + 1], 0, LAYOUT, 8)
            for fz, ex in zip(drafter.caches(), exact.caches()):
                for got, want in ((fz.k, ex.k), (fz.v, ex.v)):
                    assert torch.allclose(got[:, :root_slot + 1], want[:, :root_slot + 1], atol=1e-5)
            checked += int(len(new) > 1)
            committed += new
    assert checked > 3  # iterations that accepted drafts, so their fuzzy K/V had to be replaced


@pytest.mark.parametrize("shape,tree_rule", [((3, 2, 6), "rrs"), ((3, 1, 3), "rrs"), ((2, 3, 4), "point-mass")])
def test_sampling_matches_verifier_distribution(tiny_pair, shape, tree_rule):
    verifier, drafter, layout = tiny_pair
    params, prompt, root = SamplingParams(temperature=1.0), [1, 5, 2], 3
    proposer = FuzzyProposer(verifier, drafter, layout, TreeShape(*shape), FuzzyDrafter(drafter, ((0, 1),)))
    dec = SpeculativeDecoder(proposer, tree_rule=tree_rule)
    counts = first_two_after_root(dec, prompt, root, params, N_SAMPLES)
    p_value = chi2_pvalue(counts, exact_two(verifier, layout, prompt + [root], params))
    assert p_value > 1e-3, f"emitted tokens do not follow the verifier (p={p_value:.2g})"
    assert dec.stats.n_accept > 0
