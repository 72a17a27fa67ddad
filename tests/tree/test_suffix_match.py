"""Suffix-match proposals against a brute-force search over the text, and the per-length acceptance rates."""
import random

import pytest

from yggc.tree.suffix_match import MatchRates, Proposal, SuffixIndex, overlapping_copy


def brute_force(tokens: list[int], min_n: int, max_n: int, max_tokens: int, branches: int) -> list[Proposal]:
    """The longest suffix (min_n..max_n tokens) that also ends at an earlier position e; what followed each such
    position, most recent first, one branch per distinct next token. Past the text's end the text repeats with
    period last - e (the match says the text from e on repeats the text from `last` on)."""
    last = len(tokens) - 1
    for n in range(max_n, min_n - 1, -1):
        if n > last:
            continue
        suffix = tokens[last - n + 1:]
        ends = [e for e in range(n - 1, last) if tokens[e - n + 1:e + 1] == suffix]
        if not ends:
            continue
        out, seen = [], set()
        for e in reversed(ends):
            grown = list(tokens)
            while len(grown) < e + 1 + max_tokens:  # what follows, copied on past the end
                grown.append(grown[len(grown) - (last - e)])
            follow = tuple(grown[e + 1:e + 1 + max_tokens])
            if follow[0] not in seen and len(out) < branches:
                seen.add(follow[0])
                out.append(Proposal(n, follow))
        return out
    return []


def index_of(tokens, min_n=2, max_n=8) -> SuffixIndex:
    index = SuffixIndex(min_n, max_n)
    index.extend(tokens)
    return index


@pytest.mark.parametrize("seed", range(40))
def test_proposals_equal_a_brute_force_search(seed):
    rng = random.Random(seed)
    alphabet, length = rng.choice([2, 3, 5, 20]), rng.randrange(0, 120)
    tokens = [rng.randrange(alphabet) for _ in range(length)]
    min_n = rng.randint(1, 3)
    max_n = rng.randint(min_n, 6)
    max_tokens, branches = rng.randint(1, 6), rng.randint(1, 4)
    index = SuffixIndex(min_n, max_n)
    for i, t in enumerate(tokens):  # grown token by token, checked at every length
        index.extend([t])
        assert index.propose(max_tokens, branches) == brute_force(tokens[:i + 1], min_n, max_n, max_tokens, branches)


def test_empty_and_unrepeated_text_propose_nothing():
    assert index_of([]).propose(4) == []
    assert index_of([7]).propose(4) == []
    assert index_of(list(range(50))).propose(4) == []


def test_the_longest_match_wins_and_its_continuation_is_exact():
    text = [1, 2, 3, 9, 5, 2, 3, 8, 1, 2, 3]  # suffix 1 2 3 ends at 2; 2 3 alone also ends at 6
    assert index_of(text).propose(3, branches=4) == [Proposal(3, (9, 5, 2))]


def test_a_match_at_the_very_end_copies_on_past_the_text():
    assert index_of([4, 4, 4, 4]).propose(5) == [Proposal(3, (4, 4, 4, 4, 4))]  # a loop of one token
    assert index_of([1, 2, 1, 2]).propose(5) == [Proposal(2, (1, 2, 1, 2, 1))]
    assert index_of([5, 6, 7, 5, 6, 7, 5, 6]).propose(4) == [Proposal(5, (7, 5, 6, 7))]
    assert overlapping_copy([9, 8, 7], 1, 5) == [8, 7, 8, 7, 8]


def test_branches_are_distinct_next_tokens_most_recent_first():
    text = [1, 2, 3, 1, 2, 4, 1, 2, 3, 1, 2]
    assert index_of(text, max_n=2).propose(2, branches=3) == [Proposal(2, (3, 1)), Proposal(2, (4, 1))]


def test_min_n_bounds_the_match():
    assert index_of([3, 1, 4, 1], min_n=2).propose(2) == []
    assert index_of([3, 1, 4, 1], min_n=1).propose(2) == [Proposal(1, (4, 1))]


def test_truncate_equals_an_index_of_the_prefix():
    rng = random.Random(0)
    tokens = [rng.randrange(3) for _ in range(80)]
    index = index_of(tokens)
    for cut in (79, 60, 33, 5, 0):
        index.truncate(cut)
        fresh = index_of(tokens[:cut])
        assert index.tokens == fresh.tokens and dict(index.ends) == dict(fresh.ends)
        assert index.propose(4, 3) == fresh.propose(4, 3)


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError, match="need 1 <= min_n <= max_n"):
        SuffixIndex(3, 2)


def test_match_rates_count_tokens_up_to_the_first_rejection():
    rates = MatchRates(prior=0.5, weight=2.0)
    assert rates.rate(4) == 0.5  # unseen: the prior
    rates.record(4, proposed=5, accepted=5)  # all 5 tried and accepted
    rates.record(4, proposed=5, accepted=1)  # the first accepted, the second tried and rejected
    rates.record(4, proposed=3, accepted=0)  # the first rejected: the later ones never tried
    assert rates.tried[4] == [3, 5] and rates.accepted[4] == [2, 4]
    assert rates.rate(4) == pytest.approx((2 + 1) / (3 + 2))
    assert rates.rate(4, later=True) == pytest.approx((4 + 1) / (5 + 2))
    assert rates.chance(4, 3) == pytest.approx(rates.rate(4) * rates.rate(4, later=True) ** 2)
    assert rates.rate(2) == rates.rate(2, later=True) == 0.5


def test_outcomes_count_what_the_verifier_committed_verified_or_not():
    rates = MatchRates()
    proposals = [Proposal(3, (7, 8, 9)), Proposal(3, (7, 5)), Proposal(2, (4,)), Proposal(5, (7, 8, 9, 1))]
    rates.record_outcome(proposals, [7, 8])  # what was committed after the proposals' root: only 2 tokens known
    # (7, 8, 9): 2 known, both right; (7, 5): right then wrong; (4,): wrong; (7, 8, 9, 1): 2 known, both right
    assert rates.tried[3] == [2, 2] and rates.accepted[3] == [2, 1]
    assert rates.tried[2] == [1, 0] and rates.accepted[2] == [0, 0]
    assert rates.tried[5] == [1, 1] and rates.accepted[5] == [1, 1]
