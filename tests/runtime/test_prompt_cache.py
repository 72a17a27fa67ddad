"""A follow-up request prefills only what its prompt adds to what the caches hold (runtime/prompt_cache.py) and
decodes the same tokens as a cold start: plain AR, a standalone drafter and an EAGLE-3 head, greedy and seeded
sampling, after a finished, a closed or a diverging request."""
import pytest
import torch
from decoder_kinds import KINDS, VOCAB

from yggc.runtime import prompt_cache
from yggc.tree.sampling import SamplingParams


def decode(dec, prompt, reuse, n=24, params=SamplingParams()) -> list[int]:
    return [t for chunk in dec.stream(prompt, n, params, reuse=reuse) for t in chunk]


def prompt_of(seed: int, length: int) -> list[int]:
    return torch.randint(1, VOCAB, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_common_prefix_and_an_unnoted_model():
    assert prompt_cache.common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert prompt_cache.common_prefix([1, 2], [1, 2, 3]) == 2 and prompt_cache.common_prefix([], [1]) == 0
    model = torch.nn.Linear(1, 1)
    assert prompt_cache.reusable(model, [1, 2, 3], 2) == 0
    prompt_cache.note(model, [1, 2, 3, 4], 3)
    assert prompt_cache.reusable(model, [1, 2, 3, 9], 3) == 3
    assert prompt_cache.reusable(model, [1, 2, 3, 4, 5], 2) == 2  # never past the limit
    assert prompt_cache.reusable(model, [1, 2, 3, 4, 5], 9) == 3  # nor past what the cache holds
    prompt_cache.forget(model)
    assert prompt_cache.reusable(model, [1, 2, 3], 3) == 0


@pytest.mark.parametrize("kind", KINDS)
def test_a_follow_up_turn_prefills_only_the_new_tokens_and_equals_a_cold_start(decoders, kind):
    dec = decoders[kind]
    first = prompt_of(1, 19)
    answer = decode(dec, first, reuse=False)
    follow_up = first + answer + prompt_of(2, 7)
    cold = decode(dec, follow_up, reuse=False)
    assert dec.stats.n_cached == 0
    assert decode(dec, first, reuse=True) == answer  # the cache holds follow_up: a shorter prompt reuses it
    assert dec.stats.n_cached == len(first) - 1  # the last prompt token runs again, for its logits
    assert decode(dec, follow_up, reuse=True) == cold
    held = len(first) + len(answer) - 1  # every token but the last one chosen has its K/V in the verifier
    if kind == "ar":
        assert dec.stats.n_cached == held
    else:  # a tree may have accepted tokens past the last one kept; where the new turn starts with them, they count
        assert len(first) <= dec.stats.n_cached < len(follow_up)
    if kind != "ar":
        assert dec.stats.n_accept > 0
    diverging = follow_up[:11] + [follow_up[11] % (VOCAB - 1) + 1] + prompt_of(3, 9)  # token 11 differs
    cold = decode(dec, diverging, reuse=False)
    decode(dec, follow_up, reuse=False)
    assert decode(dec, diverging, reuse=True) == cold
    assert dec.stats.n_cached == (10 if kind == "eagle3" else 11)  # a head's row pairs a token with the next one


@pytest.mark.parametrize("kind", KINDS)
def test_a_closed_stream_leaves_a_true_note(decoders, kind):
    """A client that goes away mid-answer: the next turn reuses what the closed request left and is still exact."""
    dec = decoders[kind]
    first = prompt_of(4, 23)
    steps = dec.stream(first, 40, SamplingParams(), reuse=False)
    partial = next(steps) + next(steps) + next(steps)
    steps.close()
    follow_up = first + partial + prompt_of(5, 4)
    cached = decode(dec, follow_up, reuse=True)
    assert dec.stats.n_cached >= len(first)
    assert cached == decode(dec, follow_up, reuse=False)


@pytest.mark.parametrize("kind", KINDS)
def test_seeded_sampling_repeats_with_the_cache(decoders, kind):
    dec, params = decoders[kind], SamplingParams(temperature=0.8, top_p=0.95, seed=3)
    first = prompt_of(6, 17)
    follow_up = first + decode(dec, first, reuse=False, params=params) + prompt_of(7, 5)
    cold = decode(dec, follow_up, reuse=False, params=params)
    decode(dec, first, reuse=False, params=params)
    assert decode(dec, follow_up, reuse=True, params=params) == cold and dec.stats.n_cached >= len(first)


def test_each_model_keeps_its_own_note(decoders):
    """AR decoding writes the verifier's cache only: a tree request after it reuses what both caches still share."""
    ar, tree = decoders["ar"], decoders["llama"]
    a, b = prompt_of(8, 30), prompt_of(8, 30)[:12] + prompt_of(9, 20)
    decode(tree, a, reuse=False)  # both caches hold a
    decode(ar, b, reuse=False)  # the verifier now holds b; the drafter still a
    follow_up = a + prompt_of(10, 6)
    cached = decode(tree, follow_up, reuse=True)
    assert tree.stats.n_cached == 12  # where b leaves a, not where a's answer ends
    assert cached == decode(tree, follow_up, reuse=False)


def test_a_multi_turn_chat_through_the_runtime(demo_runtime):
    """Runtime.generate reuses the earlier turns by default; prompt_cache=False prefills everything."""
    rt = demo_runtime
    messages = [{"role": "user", "content": "Write a function that adds two numbers."}]
    answer = rt.generate(messages=messages, max_new_tokens=24, prompt_cache=False).text
    messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "Now make it subtract."}]
    cold = rt.generate(messages=messages, max_new_tokens=24, prompt_cache=False)
    assert rt.last_stats.n_cached == 0
    rt.generate(messages=messages[:1], max_new_tokens=24)
    warm = rt.generate(messages=messages, max_new_tokens=24)
    assert warm.tokens == cold.tokens
    assert warm.stats.n_cached >= len(rt.encode(messages=messages[:1]))  # at least the whole first turn


def follow_up_equals_cold(rt, prompt: list[int], extra: list[int], speculative: bool, n: int = 32) -> int:
    """Turn 1, then turn 2 = prompt + answer + extra through a bundle's Runtime, cold and after turn 1 again ->
    the warm turn's cached prompt tokens (the compiled tests call this with their bundles)."""
    dec = rt.decoder(speculative=speculative)
    answer = rt.generate(prompt, n, decoder=dec, prompt_cache=False).tokens
    follow_up = prompt + answer + extra
    cold = rt.generate(follow_up, n, decoder=dec, prompt_cache=False).tokens
    rt.generate(prompt, n, decoder=dec)
    warm = rt.generate(follow_up, n, decoder=dec)
    assert warm.tokens == cold
    if speculative:
        assert warm.stats.n_accept > 0
    return warm.stats.n_cached
