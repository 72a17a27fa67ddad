"""`yggc bench --turns`: a chat's second turn through one bundle, its time to first token with the prompt cache
(the first turn's K/V reused) beside a cold prefill of the whole conversation, calls interleaved."""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..errors import YggcError
from ..runtime.runtime import Runtime

FOLLOW_UP = "Thanks. Now explain that again in two short sentences."


@dataclass(frozen=True)
class TurnTimes:
    prompt_tokens: int  # of the second turn
    cached_tokens: int  # of them reused from the first turn
    cold_ms: float      # median time to the first token, prefilling everything
    warm_ms: float      # median time to the first token right after the first turn

    @property
    def ratio(self) -> float:
        return self.warm_ms / self.cold_ms


def first_token_ms(rt: Runtime, messages: list[dict[str, str]], cached: bool) -> tuple[float, list[int]]:
    out = rt.generate(messages=messages, max_new_tokens=1, prompt_cache=cached)
    return 1000 * out.stats.prefill_s, out.tokens


def second_turn(rt: Runtime, question: str, n_new: int, repeats: int) -> TurnTimes:
    """Answer `question` (n_new tokens), then time the follow-up turn's first token cold and warm, `repeats` each."""
    first = [{"role": "user", "content": question}]
    answer = rt.generate(messages=first, max_new_tokens=n_new, prompt_cache=False).text
    turn = first + [{"role": "assistant", "content": answer}, {"role": "user", "content": FOLLOW_UP}]
    cold, warm = [], []
    for _ in range(repeats):
        ms, cold_token = first_token_ms(rt, turn, cached=False)
        cold.append(ms)
        rt.generate(messages=first, max_new_tokens=n_new, prompt_cache=False)  # the first turn, as a chat has it
        ms, warm_token = first_token_ms(rt, turn, cached=True)
        warm.append(ms)
        if warm_token != cold_token:
            raise YggcError(f"the cached second turn began with token {warm_token}, a cold one with {cold_token}")
    return TurnTimes(rt.last_stats.n_prompt, rt.last_stats.n_cached, statistics.median(cold), statistics.median(warm))


def turns_table(times: list[TurnTimes]) -> str:
    lines = ["| turn-2 prompt tokens | cached | TTFT cold (ms) | TTFT cached (ms) | cached / cold |", "|---|---|---|---|---|"]
    lines += [f"| {t.prompt_tokens} | {t.cached_tokens} | {t.cold_ms:.1f} | {t.warm_ms:.1f} | {t.ratio:.3f} |"
              for t in times]
    lines.append(f"median cached / cold: {statistics.median(t.ratio for t in times):.3f}")
    return "\n".join(lines)
