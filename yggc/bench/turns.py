"""`yggc bench --turns`: a chat's next turn through one bundle, its time to first token with the prompt cache (the
turns before reused) beside a cold prefill of the whole conversation, calls interleaved."""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..errors import YggcError
from ..runtime.runtime import Runtime

FOLLOW_UPS = ("Thanks. Now explain that again in two short sentences.", "Can you give one more example?",
              "What could go wrong with that?", "How would you test it?", "Summarise everything so far.")
MAX_TURNS = 40


@dataclass(frozen=True)
class TurnTimes:
    prompt_tokens: int  # of the timed turn
    cached_tokens: int  # of them reused from the turn before
    cold_ms: float      # median time to the first token, prefilling everything
    warm_ms: float      # median time to the first token right after the turn before

    @property
    def ratio(self) -> float:
        return self.warm_ms / self.cold_ms


def first_token_ms(rt: Runtime, messages: list[dict[str, str]], cached: bool) -> tuple[float, list[int]]:
    out = rt.generate(messages=messages, max_new_tokens=1, prompt_cache=cached)
    return 1000 * out.stats.prefill_s, out.tokens


def conversation(rt: Runtime, question: str, n_new: int, min_tokens: int) -> list[dict[str, str]]:
    """A chat opened by `question`, answered (n_new tokens at most) and followed up turn by turn until its prompt
    holds min_tokens; it ends with a user turn (the one to time)."""
    messages = [{"role": "user", "content": question}]
    for turn in range(MAX_TURNS):
        answer = rt.generate(messages=messages, max_new_tokens=n_new, prompt_cache=False).text
        messages += [{"role": "assistant", "content": answer},
                     {"role": "user", "content": FOLLOW_UPS[turn % len(FOLLOW_UPS)]}]
        if len(rt.encode(messages=messages)) >= min_tokens:
            return messages
    raise YggcError(f"{MAX_TURNS} turns of the chat hold fewer than {min_tokens} tokens; lower --turn-tokens")


def last_turn(rt: Runtime, messages: list[dict[str, str]], n_new: int, repeats: int) -> TurnTimes:
    """Time the chat's last turn to its first token cold and right after the turn before it (which leaves its K/V),
    `repeats` each, alternating."""
    before = messages[:-2]  # the conversation up to the previous user turn, whose answer the model writes again
    cold, warm = [], []
    for _ in range(repeats):
        ms, cold_token = first_token_ms(rt, messages, cached=False)
        cold.append(ms)
        rt.generate(messages=before, max_new_tokens=n_new, prompt_cache=False)
        ms, warm_token = first_token_ms(rt, messages, cached=True)
        warm.append(ms)
        if warm_token != cold_token:
            raise YggcError(f"the cached turn began with token {warm_token}, a cold one with {cold_token}")
    return TurnTimes(rt.last_stats.n_prompt, rt.last_stats.n_cached, statistics.median(cold), statistics.median(warm))


def second_turn(rt: Runtime, question: str, n_new: int, repeats: int, min_tokens: int = 0) -> TurnTimes:
    """A chat of at least min_tokens (else two user turns) opened by `question`: its last turn timed (last_turn)."""
    return last_turn(rt, conversation(rt, question, n_new, min_tokens), n_new, repeats)


def turns_table(times: list[TurnTimes]) -> str:
    lines = ["| timed turn's prompt tokens | cached | TTFT cold (ms) | TTFT cached (ms) | cached / cold |", "|---|---|---|---|---|"]
    lines += [f"| {t.prompt_tokens} | {t.cached_tokens} | {t.cold_ms:.1f} | {t.warm_ms:.1f} | {t.ratio:.3f} |"
              for t in times]
    lines.append(f"median cached / cold: {statistics.median(t.ratio for t in times):.3f}")
    return "\n".join(lines)
