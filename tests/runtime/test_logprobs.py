"""Each emitted token's log-probability (and the top alternatives) equals the verifier's log-softmax recomputed
over the whole sequence in one causal forward: plain AR, tree decoding with either drafter kind, greedy and
sampled, and through the fallback steps at the end of the context."""
import pytest
import torch
from decoder_kinds import KINDS, VOCAB

from yggc.artifacts.cache_layout import causal_rows
from yggc.runtime import prompt_cache
from yggc.runtime.logprobs import token_logprobs
from yggc.tree.sampling import SamplingParams


def recomputed(verifier, layout, prompt: list[int], out: list[int]) -> torch.Tensor:
    """log-softmax [len(out), vocab] of the verifier's rows that predict `out`, in one forward from slot 0."""
    seq = prompt + out
    pos = torch.arange(len(seq) - 1)
    with torch.inference_mode():
        logits = verifier(torch.tensor(seq[:-1]), pos, pos, causal_rows(pos, layout.view(len(seq))))
    prompt_cache.forget(verifier)  # its cache now holds this forward's rows
    return torch.log_softmax(logits[len(prompt) - 1:].float(), -1)


def decode_with_logprobs(dec, prompt, n, params, top_n):
    dec.top_logprobs = top_n
    out, lps = [], []
    try:
        for chunk in dec.stream(prompt, n, params):
            out += chunk
            if top_n is not None:
                assert [lp.token for lp in dec.chunk_logprobs] == chunk  # one per yielded token, in order
                lps += dec.chunk_logprobs
    finally:
        dec.top_logprobs = None
    return out, lps


def assert_match(lps, ref: torch.Tensor, top_n: int):
    for i, lp in enumerate(lps):
        assert lp.logprob == pytest.approx(ref[i, lp.token].item(), abs=1e-4)
        values, ids = ref[i].topk(top_n)
        assert [t for t, _ in lp.top] == ids.tolist() or torch.allclose(values[:-1], values[1:])  # ties aside
        assert [v for _, v in lp.top] == pytest.approx(values.tolist(), abs=1e-4)


@pytest.mark.parametrize("temperature", [0.0, 0.9])
@pytest.mark.parametrize("kind", KINDS)
def test_logprobs_equal_a_recomputation(decoders, kind, temperature):
    dec = decoders[kind]
    verifier = getattr(dec, "verifier", getattr(dec, "model", None))
    prompt = torch.randint(1, VOCAB, (13,), generator=torch.Generator().manual_seed(2)).tolist()
    params = SamplingParams(temperature=temperature, seed=4)
    out, lps = decode_with_logprobs(dec, prompt, 30, params, 3)
    assert len(lps) == len(out) == 30 and all(len(lp.top) == 3 for lp in lps)
    if kind != "ar":
        assert dec.stats.n_accept > 0  # tokens accepted from trees are scored too
    assert_match(lps, recomputed(verifier, dec.layout, prompt, out), 3)
    assert decode_with_logprobs(dec, prompt, 30, params, None) == (out, [])  # asking changes no token


def test_the_fallback_steps_at_a_full_context_are_scored_too(decoders):
    dec = decoders["llama"]
    prompt = torch.randint(1, VOCAB, (240,), generator=torch.Generator().manual_seed(3)).tolist()
    out, lps = decode_with_logprobs(dec, prompt, 40, SamplingParams(), 0)
    assert dec.stats.stop_reason.startswith("kv cache full") and len(out) == 256 - 240 + 1  # the last needs no slot
    assert all(lp.top == () for lp in lps)
    assert_match(lps, recomputed(dec.verifier, dec.layout, prompt, out), 0)


def test_token_logprobs_of_hand_logits():
    logits = torch.tensor([[0.0, 1.0, 2.0, -1.0], [3.0, 0.0, 0.0, 0.0]])
    a, b = token_logprobs(logits, [2, 1], 2, vocab=3)  # the fourth column is padding past the vocabulary
    assert a.logprob == pytest.approx(2 - torch.logsumexp(torch.tensor([0.0, 1.0, 2.0]), 0).item())
    assert [t for t, _ in a.top] == [2, 1] and [t for t, _ in b.top][0] == 0
    assert b.logprob == pytest.approx(-torch.logsumexp(torch.tensor([3.0, 0.0, 0.0]), 0).item())
