"""`yggc bench --json-schema FILE`: the TPOT of a bundle's answers under a JSON schema beside free answers to the
same chat prompts, requests interleaved (what structured output costs: grammar masks on every verified row,
drafts grown under the grammar, the verify glue on the host)."""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass

from ..runtime.constraint import GrammarSpec
from ..runtime.runtime import Runtime

ROLES = ("a chess player", "a nurse", "a software engineer", "a gardener", "a retired teacher", "a chef", "a pilot",
         "a student of physics", "a carpenter", "a marathon runner")
PLACES = ("Lisbon", "Osaka", "a small village in Norway", "Nairobi", "Montreal")


def json_requests() -> list[str]:
    """50 chat requests for a JSON record (ROLES x PLACES): the default prompts of `yggc bench --json-schema`."""
    return [f"Make up {role} who lives in {place} and describe them as a JSON record." for role in ROLES
            for place in PLACES]


@dataclass(frozen=True)
class ModeTimes:
    mode: str               # "free" or "json_schema"
    tpot_ms: float          # median over prompts and repeats
    tokens_per_call: float  # median accepted tokens per verify call, the bonus included
    valid: int              # answers that stopped at EOS (json_schema: and parse as a JSON object)
    answers: int


def schema_tpot(rt: Runtime, prompts: list[str], schema: str, n_new: int, repeats: int) -> list[ModeTimes]:
    modes = {"free": None, "json_schema": GrammarSpec("json_schema", schema)}
    samples: dict[str, list] = {mode: [] for mode in modes}
    for text in prompts:
        messages = [{"role": "user", "content": text}]
        rt.generate(messages=messages, max_new_tokens=8)  # warm-up
        for _ in range(repeats):
            for mode, grammar in modes.items():
                out = rt.generate(messages=messages, max_new_tokens=n_new, grammar=grammar, prompt_cache=False)
                st = out.stats
                samples[mode].append((st.tpot_ms, (st.n_accept + st.n_iterations) / max(st.n_iterations, 1),
                                      st.stop_reason == "eos" and (grammar is None or is_object(out.text))))
    return [ModeTimes(mode, statistics.median(s[0] for s in rows), statistics.median(s[1] for s in rows),
                      sum(s[2] for s in rows), len(rows)) for mode, rows in samples.items()]


def is_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def schema_table(times: list[ModeTimes]) -> str:
    lines = ["| answers | TPOT (ms) | tokens per verify call | complete (JSON: valid) |", "|---|---|---|---|"]
    lines += [f"| {t.mode} | {t.tpot_ms:.2f} | {t.tokens_per_call:.2f} | {t.valid}/{t.answers} |" for t in times]
    lines.append(f"json_schema / free TPOT: {times[1].tpot_ms / times[0].tpot_ms:.3f}")
    return "\n".join(lines)
