"""Per-request decoding statistics, printed llama.cpp-style or as JSON."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class DecodeStats:
    n_prompt: int = 0
    n_cached: int = 0  # prompt tokens whose K/V an earlier request left in the cache (not prefilled again)
    n_generated: int = 0
    prefill_s: float = 0.0  # prompt processing up to and including the first new token
    decode_s: float = 0.0  # everything after the first new token
    stop_reason: str = ""
    # speculative decoding (vLLM conventions: mean accepted length counts the bonus token)
    n_iterations: int = 0
    n_drafted: int = 0
    n_accept: int = 0
    accepted_per_depth: list[int] = field(default_factory=list)
    drafted_per_depth: list[int] = field(default_factory=list)
    accepted_lengths: list[int] = field(default_factory=list)  # per iteration, drafts accepted

    @property
    def tpot_ms(self) -> float:
        steps = self.n_generated - 1
        return 1000.0 * self.decode_s / steps if steps > 0 else 0.0

    def summary(self) -> dict:
        d = asdict(self)
        d["tpot_ms"] = round(self.tpot_ms, 4)
        d["tokens_per_s"] = round(1000.0 / self.tpot_ms, 3) if self.tpot_ms > 0 else 0.0
        if self.n_iterations:
            d["acceptance_rate"] = self.n_accept / self.n_drafted if self.n_drafted else 0.0
            d["mean_accepted_length"] = (self.n_accept + self.n_iterations) / self.n_iterations
            d["per_depth_acceptance"] = [
                a / n if n else 0.0 for a, n in zip(self.accepted_per_depth, self.drafted_per_depth)
            ]
        return d

    def log_lines(self) -> list[str]:
        lines = [
            f"prompt eval: {self.n_prompt} tokens{f' ({self.n_cached} cached)' if self.n_cached else ''}, "
            f"{1000 * self.prefill_s:.2f} ms (incl. first token)",
            f"       eval: {self.n_generated} tokens, {self.tpot_ms:.3f} ms per token "
            f"({1000.0 / self.tpot_ms if self.tpot_ms else 0.0:.2f} tokens per second)",
        ]
        if self.n_iterations:
            s = self.summary()
            lines.append(
                f"speculative: {self.n_iterations} iterations, {self.n_accept}/{self.n_drafted} drafts accepted "
                f"({100 * s['acceptance_rate']:.1f}%), mean accepted length {s['mean_accepted_length']:.3f}"
            )
        lines.append(f"stopped: {self.stop_reason}")
        return lines
