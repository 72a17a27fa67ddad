"""Tree speculative decoding is lossless: greedy output equals the verifier's autoregressive output
token for token, and sampled output follows the verifier's distribution."""
import itertools

import pytest
import torch
from checkpoints import CONFIGS, write_checkpoint
from scipy.stats import chisquare
from trees import CyclingPolicy
from yggc.graphs import load_model

from yggc.artifacts.cache_layout import CacheLayout, causal_rows
from yggc.plan.shape import TreeShape
from yggc.runtime.autoregressive import AutoregressiveDecoder, StopPolicy
from yggc.runtime.drafters import speculative_decoder
from yggc.tree.sampling import SamplingParams, target_probs

SHAPES = [(1, 1, 1), (4, 1, 4), (6, 1, 3), (3, 2, 6), (4, 3, 7), (5, 4, 20), (2, 4, 3)]  # (D, W, V)
N_NEW = 40
N_SAMPLES = 2000  # per sampling test; a 5% bias fails at this size (test_sampling_test_has_power)


@pytest.fixture(scope="module")
def pairs(ckpt_root):
    """name -> (verifier, drafter) graphs; the drafter is the verifier plus noise, so acceptance is partial."""
    out = {}
    layout = CacheLayout(160)
    for i, name in enumerate(sorted(CONFIGS)):
        v = ckpt_root / name if (ckpt_root / name).exists() else write_checkpoint(ckpt_root / name, name, seed=i)
        d = write_checkpoint(ckpt_root / f"{name}_drafter", name, seed=100 + i, base=v, noise=0.03)
        out[name] = (load_model(v, layout.n_slots), load_model(d, layout.n_slots))
    return out, layout


def decode(decoder, prompt, n=N_NEW, params=SamplingParams()):
    return [t for chunk in decoder.stream(prompt, n, params) for t in chunk]


def logit_gap_at(model, layout, seq, pos):
    """Top-2 gap of the verifier's logits predicting seq[pos] (for reporting near-ties)."""
    s = torch.arange(pos)
    logits = model(torch.tensor(seq[:pos]), s, s, causal_rows(s, layout.n_slots))[-1]
    top = logits.topk(2).values
    return float(top[0] - top[1])


def assert_greedy_equal(got: list[int], ref: list[int], verifier, layout, prompt: list[int], label: str) -> None:
    """got equals the verifier's AR output ref, or first differs where the verifier's top two logits tie (an eager
    kernel's last bit then picks either; the compiled packages are batch-invariant and tested for plain equality)."""
    if got == ref:
        return
    pos = next(i for i, (a, b) in enumerate(zip(got, ref)) if a != b)
    with torch.inference_mode():
        gap = logit_gap_at(verifier, layout, prompt + ref, len(prompt) + pos)
    assert gap < 1e-5, f"{label}: diverged at {pos}, logit gap {gap:.3g} is no near-tie"


@pytest.mark.parametrize("name", sorted(CONFIGS)[:2])
def test_per_iteration_shapes_keep_greedy_output(pairs, name, tree_code):
    models, layout = pairs
    verifier, drafter = models[name]
    shapes = [TreeShape(*s) for s in SHAPES]
    prompt = torch.randint(1, verifier.cfg.vocab_size, (9,), generator=torch.Generator().manual_seed(3)).tolist()
    ref = decode(AutoregressiveDecoder(verifier, layout), prompt)
    policy = CyclingPolicy(shapes)
    dec = speculative_decoder(verifier, drafter, layout, shapes[0], policy=policy)
    assert decode(dec, prompt) == ref
    assert len(policy.seen) == len(shapes)  # every shape drafted at least once, switching every iteration
    assert all(f.shape == (9,) and torch.isfinite(f).all() for f in policy.features)
    assert len(decode(dec, prompt, params=SamplingParams(temperature=1.0, seed=0))) == N_NEW  # no policy at T > 0


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_greedy_equals_autoregressive(pairs, name):
    models, layout = pairs
    verifier, drafter = models[name]
    vocab = verifier.cfg.vocab_size
    for seed in range(2):
        prompt = torch.randint(1, vocab, (7 + 5 * seed,), generator=torch.Generator().manual_seed(seed)).tolist()
        ref = decode(AutoregressiveDecoder(verifier, layout), prompt)
        for shape in SHAPES:
            dec = speculative_decoder(verifier, drafter, layout, TreeShape(*shape))
            assert_greedy_equal(decode(dec, prompt), ref, verifier, layout, prompt, f"{name} {shape}")
            st = dec.stats
            assert st.n_generated == N_NEW and sum(st.accepted_lengths) == st.n_accept
            assert st.n_generated == 1 + st.n_accept + st.n_iterations or st.stop_reason == "max tokens"


def test_drafts_get_accepted(pairs):
    """The noisy drafter agrees often enough that deep acceptance (and the lagging-drafter path) is exercised."""
    models, layout = pairs
    verifier, drafter = models["llama_gqa"]
    dec = speculative_decoder(verifier, drafter, layout, TreeShape(4, 1, 4))
    decode(dec, [3, 1, 4, 1, 5, 9, 2, 6])
    assert max(dec.stats.accepted_lengths) == 4  # a leaf the drafter never ran on was accepted
    assert dec.stats.summary()["mean_accepted_length"] > 2.0


def test_identical_drafter_accepts_everything(pairs):
    models, layout = pairs
    verifier, _ = models["qwen2_bias"]
    dec = speculative_decoder(verifier, verifier, layout, TreeShape(3, 1, 3))
    got = decode(dec, [7, 8, 9], n=33)
    assert got == decode(AutoregressiveDecoder(verifier, layout), [7, 8, 9], n=33)
    assert dec.stats.accepted_lengths[:-1] == [3] * (len(dec.stats.accepted_lengths) - 1)


def test_tree_near_kv_capacity_falls_back_to_single_steps(pairs):
    models, _ = pairs
    verifier, drafter = models["llama_gqa"]
    layout = CacheLayout(40)
    v2, d2 = (load_model_like(m, layout) for m in (verifier, drafter))
    prompt = list(range(1, 11))
    ref = decode(AutoregressiveDecoder(v2, layout), prompt, n=100)
    dec = speculative_decoder(v2, d2, layout, TreeShape(4, 4, 16))
    assert decode(dec, prompt, n=100) == ref
    assert "kv cache full" in dec.stats.stop_reason and len(ref) == 31


def load_model_like(model, layout):
    from yggc.graphs import LlamaGraph

    m = LlamaGraph(model.cfg, layout.n_slots)
    m.load_state_dict(model.state_dict(), strict=False)
    if model.cfg.tie_word_embeddings:
        m.lm_head.weight = m.embed.weight
    return m.eval().requires_grad_(False)


# -- sampling: the emitted tokens follow the verifier's distribution ------------------------------------

def exact_next(verifier, layout, seq, params):
    s = torch.arange(len(seq))
    return target_probs(verifier(torch.tensor(seq), s, s, causal_rows(s, layout.n_slots))[-1], params).double()


def exact_two(verifier, layout, context, params):
    """Exact joint distribution [vocab * vocab] of the two tokens that follow `context`."""
    with torch.inference_mode():
        p1 = exact_next(verifier, layout, context, params)
        return torch.stack([p1[t] * exact_next(verifier, layout, context + [t], params)
                            for t in range(p1.shape[0])]).flatten()


def chi2_pvalue(counts, probs):
    """Goodness of fit of counts to probs, with cells expecting < 5 lumped together."""
    n = counts.sum()
    keep = probs * n >= 5
    obs, exp = counts[keep], probs[keep] * n
    if float(probs[~keep].sum()) > 0:
        obs = torch.cat([obs, counts[~keep].sum().view(1)])
        exp = torch.cat([exp, probs[~keep].sum().view(1) * n])
    return chisquare(obs.numpy(), exp.numpy() * float(obs.sum() / exp.sum()))[1]


def first_two_after_root(dec, prompt, root, params, n_samples, before_each=lambda: None):
    """Counts [vocab * vocab] of the two tokens emitted after `root` (prompt prefilled once by the decoder).

    Every iteration writes only slots >= len(prompt), so each sample restarts from the same state (a drafter
    with host-side state restores it in `before_each`)."""
    vocab = dec.vocab
    counts = torch.zeros(vocab * vocab, dtype=torch.float64)
    stop = StopPolicy(100, (), dec.layout)
    with torch.inference_mode():
        dec.proposer.prefill(prompt, 0)
        for seed in range(n_samples):
            before_each()
            gen = torch.Generator().manual_seed(seed)
            new, n, pending = dec.iterate(len(prompt), [root], params, gen, stop)
            if len(new) < 2:
                new += dec.iterate(n, pending, params, gen, stop)[0]
            counts[new[0] * vocab + new[1]] += 1
    return counts


T1 = SamplingParams(temperature=1.0)
SAMPLED = [((3, 2, 6), "block", "rrs", T1), ((3, 3, 5), "block", "rrs", SamplingParams(1.0, top_k=20, min_p=0.02)),
           ((2, 3, 4), "block", "point-mass", T1), ((3, 1, 3), "block", "rrs", T1), ((3, 1, 3), "token", "rrs", T1),
           ((3, 2, 5), "block", "traversal", SamplingParams(0.8, top_p=0.9)),  # top-p: tests/tree covers each rule
           ((3, 2, 2), "block", "rrs", T1)]  # pruned to a chain of first draws: verified as a chain


@pytest.mark.parametrize("shape,chain_rule,tree_rule,params", SAMPLED)
def test_sampling_matches_verifier_distribution(tiny_pair, shape, chain_rule, tree_rule, params):
    verifier, drafter, layout = tiny_pair
    prompt, root = [1, 5, 2], 3
    dec = speculative_decoder(verifier, drafter, layout, TreeShape(*shape), chain_rule=chain_rule, tree_rule=tree_rule)
    counts = first_two_after_root(dec, prompt, root, params, N_SAMPLES)
    p_value = chi2_pvalue(counts, exact_two(verifier, layout, prompt + [root], params))
    assert p_value > 1e-3, f"emitted tokens do not follow the verifier (p={p_value:.2g})"
    assert dec.stats.n_accept > 0  # drafts were accepted, not just residual samples


def test_sampling_test_has_power(tiny_pair):
    """The same test rejects a 5% bias (total variation 0.05: 5% of the mass moved to one outcome)."""
    verifier, _, layout = tiny_pair
    exact = exact_two(verifier, layout, [1, 5, 2, 3], SamplingParams(temperature=1.0))
    biased = 0.95 * exact
    biased[int(exact.argmax())] += 0.05
    draws = torch.multinomial(biased, N_SAMPLES, replacement=True, generator=torch.Generator().manual_seed(0))
    assert chi2_pvalue(torch.bincount(draws, minlength=exact.numel()).double(), exact) < 1e-3


def test_an_unknown_rule_is_one_clear_error(tiny_pair):
    from yggc.errors import YggcError

    verifier, drafter, layout = tiny_pair
    with pytest.raises(YggcError, match="trees rrs, traversal or point-mass"):
        speculative_decoder(verifier, drafter, layout, TreeShape(2, 2, 4), tree_rule="traverse")


def test_sampling_is_reproducible(tiny_pair):
    verifier, drafter, layout = tiny_pair
    dec = speculative_decoder(verifier, drafter, layout, TreeShape(3, 2, 5))
    runs = [decode(dec, [1, 2], n=12, params=SamplingParams(1.0, seed=s)) for s in (1, 1, 2)]
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_shape_validation():
    from yggc.errors import YggcError

    with pytest.raises(YggcError, match=r"--verify must be in 1..depth\*width = 6"):
        TreeShape.from_args(3, 2, 7)
    assert TreeShape.from_args(3, 2, None).verify == 6
    assert list(itertools.islice(SHAPES, 1))
