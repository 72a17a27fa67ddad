"""Plain autoregressive decoding on the static graph: the baseline every speculative path must equal."""
from __future__ import annotations

import time
from collections.abc import Iterator

import torch

from ..artifacts.cache_layout import CacheLayout, causal_rows, prefill
from ..errors import YggcError
from ..tree.sampling import SamplingParams, next_token
from . import prompt_cache
from .constraint import Constraint
from .loading import device_scope, model_device
from .logprobs import TokenLogprob, token_logprobs
from .stats import DecodeStats

PREFILL_CHUNK = 32


def check_prompt(prompt_ids: list[int], layout: CacheLayout, vocab_size: int) -> None:
    if not prompt_ids:
        raise YggcError("the prompt is empty; give some text with -p or token ids with --prompt-ids")
    if len(prompt_ids) >= layout.max_seq:
        raise YggcError(
            f"the prompt has {len(prompt_ids)} tokens but the context holds {layout.max_seq}; "
            "shorten the prompt or raise --max-seq"
        )
    bad = [t for t in prompt_ids if not 0 <= t < vocab_size]
    if bad:
        raise YggcError(f"prompt token id {bad[0]} is outside the vocabulary (0..{vocab_size - 1})")


class StopPolicy:
    """Decides when a request ends: EOS, the token budget, or a full KV cache."""

    def __init__(self, max_new_tokens: int, eos_ids: tuple[int, ...], layout: CacheLayout):
        self.max_new, self.eos, self.layout = max_new_tokens, set(eos_ids), layout

    def clip(self, new_tokens: list[int], n_generated: int) -> tuple[list[int], str]:
        """Cut a batch of accepted tokens at EOS / the budget; returns (kept, stop reason or '')."""
        kept = []
        for t in new_tokens:
            kept.append(t)
            if t in self.eos:
                return kept, "eos"
            if n_generated + len(kept) >= self.max_new:
                return kept, "max tokens"
        return kept, ""

    def kv_full(self, n_committed: int, needed: int) -> str:
        if n_committed + needed > self.layout.max_seq:
            return f"kv cache full (max_seq={self.layout.max_seq}; raise --max-seq for longer outputs)"
        return ""


class AutoregressiveDecoder:
    """Plain decoding with one model (the baseline every speculative path must equal): chunked prefill, then one
    token per call."""

    def __init__(self, model, layout: CacheLayout):
        self.model, self.layout = model, layout
        self.device = model_device(model)
        self.stats = DecodeStats()
        self.top_logprobs: int | None = None  # set: each chunk's tokens get their log-probabilities (logprobs.py)
        self.chunk_logprobs: list[TokenLogprob] = []  # of the tokens yielded last
        self.constraint: Constraint | None = None  # set: a grammar masks every step's logits (constraint.py)

    def step(self, token: int, n: int) -> torch.Tensor:
        """Feed `token` at slot n -> logits [V] of the next token."""
        with device_scope(self.device):
            slot = torch.tensor([n])
            return self.model(torch.tensor([token]), slot, slot, causal_rows(slot, self.layout.view(n + 1)))[0]

    @torch.inference_mode()
    def stream(self, prompt_ids: list[int], max_new_tokens: int, params: SamplingParams,
               eos_ids: tuple[int, ...] = (), reuse: bool = False) -> Iterator[list[int]]:
        """Yields the generated tokens one at a time (as 1-element lists); fills self.stats. reuse=True starts
        the prefill after the prompt's longest prefix already in the cache (runtime/prompt_cache.py)."""
        check_prompt(prompt_ids, self.layout, self.model.cfg.vocab_size)
        stop, gen = StopPolicy(max_new_tokens, eos_ids, self.layout), params.generator(self.device)
        start = prompt_cache.reusable(self.model, prompt_ids, len(prompt_ids) - 1) if reuse else 0
        st = self.stats = DecodeStats(n_prompt=len(prompt_ids), n_cached=start)
        t0 = time.perf_counter()
        prompt_cache.forget(self.model)
        with device_scope(self.device):
            logits = prefill(self.model, prompt_ids[start:], start, self.layout, PREFILL_CHUNK)
        seq = list(prompt_ids)
        n = len(seq)
        while max_new_tokens > 0:
            choice = logits if self.constraint is None else self.constraint.mask(logits)
            kept, st.stop_reason = stop.clip([next_token(choice, params, gen)], st.n_generated)
            st.n_generated += 1
            if st.n_generated == 1:
                st.prefill_s = time.perf_counter() - t0
                t0 = time.perf_counter()
            if self.top_logprobs is not None:
                self.chunk_logprobs = token_logprobs(logits[None], kept, self.top_logprobs, self.model.cfg.vocab_size)
            seq += kept
            if self.constraint is not None:
                self.constraint.commit(kept)
            prompt_cache.note(self.model, seq, n)  # the cache holds all but the token just chosen
            yield kept
            st.stop_reason = st.stop_reason or stop.kv_full(n, 1)
            if st.stop_reason:
                break
            logits = self.step(kept[0], n)
            n += 1
        st.decode_s = time.perf_counter() - t0 if st.n_generated > 1 else 0.0
        st.stop_reason = st.stop_reason or "max tokens"
