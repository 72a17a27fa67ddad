"""Suffix-match drafting: continuations of the text's own repeats, drafted without a model.

Text repeats its prompt and itself (code, quotes, lists, rewrites). Like llama.cpp's lookup decoding and vLLM's
n-gram proposer, `SuffixIndex` finds the longest suffix of the tokens so far (prompt and output, at most
`max_n` and at least `min_n` tokens) that also ends earlier in them, and proposes what followed that earlier
occurrence. Several earlier occurrences followed by different tokens give several branches (most recent
first), so the proposals form a small tree. `MatchRates` keeps how often a proposal from a match of each length
was accepted: what a tree mixing suffix branches with a drafter's would price them at.

The index grows with the text: `extend` adds the n-grams that end at each new token (O(max_n) per token),
`propose` looks up at most max_n - min_n + 1 suffixes, so a proposal costs microseconds at any length.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Proposal:
    """One branch: `tokens` followed an earlier occurrence of the text's last `match` tokens."""

    match: int
    tokens: tuple[int, ...]


class SuffixIndex:
    """Every n-gram (min_n <= n <= max_n) of a growing token sequence -> where it ends, oldest first."""

    def __init__(self, min_n: int = 2, max_n: int = 8):
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
        self.min_n, self.max_n = min_n, max_n
        self.tokens: list[int] = []
        self.ends: dict[tuple[int, ...], list[int]] = defaultdict(list)

    def extend(self, tokens: Iterable[int]) -> None:
        """Append `tokens` to the text and index the n-grams ending at each."""
        for t in tokens:
            self.tokens.append(int(t))
            end = len(self.tokens) - 1
            for n in range(self.min_n, min(self.max_n, end + 1) + 1):
                self.ends[tuple(self.tokens[end - n + 1:end + 1])].append(end)

    def truncate(self, length: int) -> None:
        """Forget the tokens from `length` on (a rejected tail, or a new request sharing only a prefix)."""
        while len(self.tokens) > length:
            end = len(self.tokens) - 1
            for n in range(self.min_n, min(self.max_n, end + 1) + 1):
                key = tuple(self.tokens[end - n + 1:end + 1])
                self.ends[key].pop()
                if not self.ends[key]:
                    del self.ends[key]
            self.tokens.pop()

    def propose(self, max_tokens: int, branches: int = 1) -> list[Proposal]:
        """Up to `branches` continuations of the longest suffix that ends earlier too, each of up to `max_tokens`
        tokens, the most recent occurrence first; distinct first tokens only (one branch per next token). A
        continuation that reaches the end of the text goes on copying what it has proposed (an overlapping copy,
        as in LZ77), so a loop of period p is proposed for as long as asked."""
        last = len(self.tokens) - 1
        for n in range(min(self.max_n, last), self.min_n - 1, -1):  # an earlier occurrence needs n <= last
            earlier = self.ends.get(tuple(self.tokens[last - n + 1:]), [])[:-1]  # the last one is the suffix
            if earlier:
                return self._continuations(n, earlier, max_tokens, branches)
        return []

    def _continuations(self, n: int, earlier: list[int], max_tokens: int, branches: int) -> list[Proposal]:
        out, firsts = [], set()
        for end in reversed(earlier):
            follow = tuple(overlapping_copy(self.tokens, end + 1, max_tokens))
            if follow[0] not in firsts:
                firsts.add(follow[0])
                out.append(Proposal(n, follow))
                if len(out) == branches:
                    break
        return out


def overlapping_copy(tokens: list[int], start: int, count: int) -> list[int]:
    """`count` tokens copied from `start` on, as if each copied token were appended to `tokens` first."""
    out = []
    for i in range(count):
        src = start + i
        out.append(tokens[src] if src < len(tokens) else out[src - len(tokens)])
    return out


class MatchRates:
    """How often proposals from a match of each length were accepted: the first token, and each later one given the
    one before it was (a copy that starts right tends to go on right, so depth i is priced first * later^(i-1),
    not rate^i); each with a prior of `prior` accepted in `weight` tries, so an unseen length is priced by the prior."""

    def __init__(self, prior: float = 0.5, weight: float = 2.0):
        self.prior, self.weight = prior, weight
        self.tried: dict[int, list[int]] = defaultdict(lambda: [0, 0])  # match -> [first tokens, later tokens]
        self.accepted: dict[int, list[int]] = defaultdict(lambda: [0, 0])

    def record(self, match: int, proposed: int, accepted: int) -> None:
        """A proposal of `proposed` tokens from a match of `match` tokens had its first `accepted` accepted: each
        token up to the first rejected one was tried (the ones after it never were)."""
        if proposed == 0:
            return
        self.tried[match][0] += 1
        self.accepted[match][0] += accepted > 0
        if accepted:
            self.tried[match][1] += min(proposed - 1, accepted)
            self.accepted[match][1] += accepted - 1

    def record_outcome(self, proposals: list[Proposal], committed: list[int]) -> None:
        """What each proposal would have had accepted, verified or not: its tokens up to the first that differs from
        the tokens committed after it (the verifier's choices), as far as those reach."""
        for proposal in proposals:
            known = min(len(proposal.tokens), len(committed))
            run = 0
            while run < known and proposal.tokens[run] == committed[run]:
                run += 1
            self.record(proposal.match, known, run)

    def rate(self, match: int, later: bool = False) -> float:
        """Estimated chance that a match of this length has its first proposed token accepted (later=True: a later
        token, given the one before it was)."""
        i = int(later)
        return (self.accepted[match][i] + self.prior * self.weight) / (self.tried[match][i] + self.weight)

    def chance(self, match: int, depth: int) -> float:
        """Estimated chance that a proposal from a match of this length is accepted up to its depth-th token."""
        return self.rate(match) * self.rate(match, later=True) ** (depth - 1)
