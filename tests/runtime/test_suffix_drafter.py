"""Suffix drafting is lossless: greedy output equals the verifier's autoregressive output token for token (fp32 and
bf16, every config), and sampled output follows the verifier's distribution."""
import pytest
import torch
from checkpoints import CONFIGS, write_checkpoint
from fused_verify import PATHS, use_tree_path
from test_speculative import N_SAMPLES, chi2_pvalue, decode, exact_two, first_two_after_root
from yggc.graphs import load_model

from yggc.artifacts.cache_layout import CacheLayout
from yggc.plan.shape import TreeShape
from yggc.runtime.autoregressive import AutoregressiveDecoder
from yggc.runtime.drafters.suffix_proposer import SuffixDrafter, SuffixProposer
from yggc.runtime.speculative import SpeculativeDecoder
from yggc.tree.sampling import SamplingParams

SHAPES = [(1, 1, 1), (4, 1, 4), (6, 3, 8), (3, 2, 4)]  # (tokens per branch, branches, verified nodes)


def repeating_prompt(vocab: int, seed: int) -> list[int]:
    """A random phrase said three times with a twist, so suffix matches exist from the first iteration."""
    g = torch.Generator().manual_seed(seed)
    phrase = torch.randint(1, vocab, (6,), generator=g).tolist()
    return phrase + [1] + phrase + [2] + phrase


@pytest.fixture(scope="module")
def verifiers(ckpt_root):
    layout = CacheLayout(160)
    out = {}
    for i, name in enumerate(sorted(CONFIGS)):
        path = ckpt_root / name if (ckpt_root / name).exists() else write_checkpoint(ckpt_root / name, name, seed=i)
        out[name] = path
    return out, layout


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_greedy_equals_autoregressive(verifiers, name, dtype, path, monkeypatch):
    use_tree_path(monkeypatch, path)
    paths, layout = verifiers
    verifier = load_model(paths[name], layout.n_slots).to(dtype)
    prompt = repeating_prompt(verifier.cfg.vocab_size, seed=len(name))
    ref = decode(AutoregressiveDecoder(verifier, layout), prompt, n=60)
    for shape in SHAPES:
        dec = SpeculativeDecoder(SuffixProposer(verifier, SuffixDrafter(), layout, TreeShape(*shape)))
        assert decode(dec, prompt, n=60) == ref, f"{name} {dtype} {shape}"
        st = dec.stats
        assert st.n_generated == 60 and sum(st.accepted_lengths) == st.n_accept
        assert st.n_generated == 1 + st.n_accept + st.n_iterations or st.stop_reason == "max tokens"


@pytest.mark.parametrize("path", PATHS)
def test_a_looping_verifier_is_drafted_whole_and_rates_are_recorded(verifiers, path, monkeypatch):
    """Greedy random models fall into loops: once the loop is in the text, whole branches are accepted, and long
    matches prove more reliable than short ones."""
    use_tree_path(monkeypatch, path)
    paths, layout = verifiers
    verifier = load_model(paths["qwen2_bias"], layout.n_slots)
    prompt = [5, 6, 7]
    ref = decode(AutoregressiveDecoder(verifier, layout), prompt, n=120)
    dec = SpeculativeDecoder(SuffixProposer(verifier, SuffixDrafter(max_n=8), layout, TreeShape(4, 2, 8)))
    assert decode(dec, prompt, n=120) == ref
    assert dec.stats.accepted_lengths[-4:] == [4] * 4  # the tail loops: every branch taken whole
    rates = dec.proposer.suffix.rates
    assert rates.rate(8, later=True) > 0.9 and rates.chance(8, 4) > 0.75 > 0.25 > rates.chance(2, 4)


def test_no_repeats_is_plain_decoding(verifiers):
    paths, layout = verifiers
    verifier = load_model(paths["qwen2_bias"], layout.n_slots)
    prompt = [11, 12, 13, 14]
    dec = SpeculativeDecoder(SuffixProposer(verifier, SuffixDrafter(min_n=8, max_n=8), layout, TreeShape(3, 2, 5)))
    assert decode(dec, prompt, n=10) == decode(AutoregressiveDecoder(verifier, layout), prompt, n=10)
    assert dec.stats.n_accept == 0 and dec.stats.n_iterations == 9  # one verifier row per iteration


@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0), SamplingParams(0.7, top_p=0.9)])
def test_sampling_matches_verifier_distribution(tiny_pair, params):
    verifier, _, layout = tiny_pair
    prompt, root = [2, 3, 4, 2, 3, 1, 2], 3  # the text ends 2 3: two branches, 4 2 3 .. and 1 2 3 ..
    dec = SpeculativeDecoder(SuffixProposer(verifier, SuffixDrafter(), layout, TreeShape(3, 2, 6)))
    counts = first_two_after_root(dec, prompt, root, params, N_SAMPLES, lambda: dec.proposer.suffix.restart(prompt))
    p_value = chi2_pvalue(counts, exact_two(verifier, layout, prompt + [root], params))
    assert p_value > 1e-3, f"emitted tokens do not follow the verifier (p={p_value:.2g})"
    assert dec.stats.n_accept > 0
