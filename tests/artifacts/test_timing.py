"""yggc.artifacts.timing.steady_ms_each on a fake clock: the calls take turns, and each key's time is its best
round's median, so a slow spell in one round does not price one width above the others."""
import pytest

from yggc.artifacts import timing


def test_calls_take_turns_and_a_slow_round_is_dropped(monkeypatch):
    clock, calls = [0.0], []
    slow_calls = range(14, 20)  # timed calls 14..19 (the start of the second round) run 10x slower

    def fn(key: str, ms: float):
        def call():
            calls.append(key)
            timed = len(calls) - 6  # after 3 warm-up calls of each
            clock[0] += ms / 1000 * (10 if timed in slow_calls else 1)
        return call

    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])
    out = timing.steady_ms_each({"w1": fn("w1", 2.0), "w4": fn("w4", 3.0)}, repeats=12, rounds=3)
    assert calls[:6] == ["w1"] * 3 + ["w4"] * 3  # warm-up
    assert calls[6:] == ["w1", "w4"] * 12  # then one call of each in turn
    assert out == pytest.approx({"w1": 2.0, "w4": 3.0})
