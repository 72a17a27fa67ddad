"""Server counters in the Prometheus text format (version 0.0.4), written by hand: a handful of lines.

Latencies are summaries (sum, count, and quantiles over the last WINDOW requests); the accepted
length is a histogram of the tokens each draft-verify iteration commits (accepted drafts plus the
verifier's own token: vLLM's "mean accepted length" convention), so 1 means every draft was rejected.
"""
from __future__ import annotations

import threading
from collections import deque

WINDOW = 1000
QUANTILES = (0.5, 0.9, 0.99)
OUTCOMES = ("completed", "cancelled", "failed")


class Summary:
    def __init__(self) -> None:
        self.total, self.count, self.recent = 0.0, 0, deque(maxlen=WINDOW)

    def observe(self, value: float) -> None:
        self.total += value
        self.count += 1
        self.recent.append(value)

    def lines(self, name: str) -> list[str]:
        ordered = sorted(self.recent)
        out = [f'{name}{{quantile="{q}"}} {ordered[min(len(ordered) - 1, int(q * len(ordered)))]:.6g}'
               for q in QUANTILES if ordered]
        return out + [f"{name}_sum {self.total:.6g}", f"{name}_count {self.count}"]


class Metrics:
    """Thread-safe: the worker records, the /metrics handler renders."""

    def __init__(self, max_accepted: int):
        self.lock = threading.Lock()
        self.requests = dict.fromkeys(OUTCOMES, 0)
        self.rejected = self.prompt_tokens = self.generated_tokens = 0
        self.ttft, self.tpot = Summary(), Summary()
        self.accepted = [0] * (max_accepted + 1)  # index k: iterations that committed k tokens (k >= 1)
        self.accepted_overflow = 0  # iterations that committed more than max_accepted (another tree shape)
        self.accepted_sum = 0

    def reject(self) -> None:
        with self.lock:
            self.rejected += 1

    def record(self, outcome: str, n_prompt: int, n_generated: int, ttft_s: float | None, tpot_s: float | None,
               accepted_lengths: list[int]) -> None:
        """One request that reached the decoder; accepted_lengths: drafts accepted per iteration."""
        with self.lock:
            self.requests[outcome] += 1
            self.prompt_tokens += n_prompt
            self.generated_tokens += n_generated
            if ttft_s is not None:
                self.ttft.observe(ttft_s)
            if tpot_s is not None:
                self.tpot.observe(tpot_s)
            for k in accepted_lengths:
                self.accepted_sum += k + 1
                if k + 1 < len(self.accepted):
                    self.accepted[k + 1] += 1
                else:
                    self.accepted_overflow += 1

    def render(self, queue_depth: int, decoding: bool) -> str:
        """The /metrics page."""
        with self.lock:
            out = [*metric("yggc_requests_total", "counter", "Requests that reached the decoder, by outcome.",
                           [f'yggc_requests_total{{outcome="{o}"}} {n}' for o, n in self.requests.items()]),
                   *metric("yggc_requests_rejected_total", "counter", "Requests refused with 429: the queue was full.",
                           [f"yggc_requests_rejected_total {self.rejected}"]),
                   *metric("yggc_queue_depth", "gauge", "Requests waiting for the decoder.",
                           [f"yggc_queue_depth {queue_depth}"]),
                   *metric("yggc_decoding", "gauge", "Requests decoding now (0 or 1).", [f"yggc_decoding {int(decoding)}"]),
                   *metric("yggc_prompt_tokens_total", "counter", "Prompt tokens of decoded requests.",
                           [f"yggc_prompt_tokens_total {self.prompt_tokens}"]),
                   *metric("yggc_generated_tokens_total", "counter", "Tokens decoded (cancelled requests included).",
                           [f"yggc_generated_tokens_total {self.generated_tokens}"]),
                   *metric("yggc_time_to_first_token_seconds", "summary",
                           "From the request's arrival in the queue to its first token.",
                           self.ttft.lines("yggc_time_to_first_token_seconds")),
                   *metric("yggc_time_per_output_token_seconds", "summary",
                           "Decode time per token after the first (TPOT), per request.",
                           self.tpot.lines("yggc_time_per_output_token_seconds")),
                   *metric("yggc_accepted_length", "histogram",
                           "Tokens committed per draft-verify iteration (accepted drafts + 1).", self.histogram())]
        return "\n".join(out) + "\n"

    def histogram(self) -> list[str]:
        name, cumulative, lines = "yggc_accepted_length", 0, []
        for k in range(1, len(self.accepted)):
            cumulative += self.accepted[k]
            lines.append(f'{name}_bucket{{le="{k}"}} {cumulative}')
        count = cumulative + self.accepted_overflow
        return lines + [f'{name}_bucket{{le="+Inf"}} {count}', f"{name}_sum {self.accepted_sum}", f"{name}_count {count}"]


def metric(name: str, kind: str, help_text: str, samples: list[str]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]
