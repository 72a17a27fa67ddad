"""What each model's static KV cache holds between requests, so a follow-up prompt prefills only what is new.

A decoder notes, wherever it yields tokens, which tokens' K/V sit at slots 0..count-1 of each model's
cache (llama-server's cache_prompt, vLLM's prefix caching for one sequence). The next request that
asks for it starts its prefill after the longest common prefix of its prompt and that note; a multi-turn
chat then prefills only the new turn. Within an iteration no model writes below the noted count, and a
decoder drops the note before its prefill writes, so a close, an exception or another decoder on the same
models never leaves a note that overstates the cache.
"""
from __future__ import annotations

from dataclasses import dataclass

NOTE = "kv_prefix"  # the attribute a model (a graph or a bundle's compiled model) carries its note in


@dataclass(frozen=True)
class CachedPrefix:
    tokens: list[int]  # the request's sequence so far; it may grow past count, which the note never reads
    count: int         # slots 0..count-1 hold the K/V of tokens[:count]


def note(model, tokens: list[int], count: int) -> None:
    """Record that `model`'s cache holds tokens[:count] at slots 0..count-1."""
    setattr(model, NOTE, CachedPrefix(tokens, count))


def forget(model) -> None:
    """Before writing a model's cache where its note may point."""
    setattr(model, NOTE, None)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def reusable(model, prompt_ids: list[int], limit: int) -> int:
    """How many leading tokens of `prompt_ids` (at most `limit`) already have their K/V in `model`'s cache."""
    held: CachedPrefix | None = getattr(model, NOTE, None)
    if held is None:
        return 0
    return common_prefix(held.tokens[:min(held.count, limit)], prompt_ids[:limit])
