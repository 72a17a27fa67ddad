"""Stop strings over streamed text: however the text is split, the released text is the text before
the first stop string (and nothing of the stop string itself is ever sent)."""
import random

import pytest

from yggc.serve.stop import StopMatcher


def released(pieces: list[str], stops: tuple[str, ...]) -> tuple[str, bool]:
    m = StopMatcher(stops)
    out = "".join(m.push(p) for p in pieces)
    return out + m.flush(), m.stopped


def reference(text: str, stops: tuple[str, ...]) -> tuple[str, bool]:
    hits = [text.find(s) for s in stops if s in text]
    return (text[:min(hits)], True) if hits else (text, False)


@pytest.mark.parametrize("seed", range(200))
def test_any_split_releases_the_text_before_the_first_stop(seed):
    rng = random.Random(seed)
    text = "".join(rng.choice("ab\n ") for _ in range(rng.randint(0, 30)))
    stops = tuple("".join(rng.choice("ab\n") for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 3)))
    cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(0, 8))))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
    assert released(pieces, stops) == reference(text, stops)


def test_a_possible_stop_prefix_is_held_back_until_resolved():
    m = StopMatcher(("\n\n",))
    assert m.push("a\n") == "a"
    assert m.push("b") == "\nb"
    assert m.push("\n") == "" and m.push("\nc") == "" and m.stopped
    assert StopMatcher(()).push("x\n") == "x\n"
