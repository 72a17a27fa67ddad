"""tools/bench_step_floor.py: rounds are grouped into thirds by their floor, and each third's row holds the medians of
the floor, T(W), T(W) - floor and the ratios over those rounds."""
from __future__ import annotations

import bench_step_floor as tool


def test_rounds_are_grouped_by_floor_and_summarised_by_medians():
    # a step of fixed work c = 1.5 ms above a floor that moves from 4 to 12 ms; T(8) adds 2 ms of arithmetic
    floors = [4.0, 12.0, 8.0, 5.0, 11.0, 7.0, 6.0, 10.0, 9.0]
    rounds = [{"floor": f, 1: f + 1.5, 8: f + 3.5} for f in floors]
    header, rule, fastest, middle, slowest = tool.summary(rounds, [1, 8])
    assert header.split(" | ")[1:4] == ["floor ms", "T(1)", "T(8)"]
    assert rule.count("---") == 1 + 7
    cells = [[c.strip() for c in row.strip("| ").split(" | ")] for row in (fastest, middle, slowest)]
    assert [c[0] for c in cells] == ["fastest third (3)", "middle third (3)", "slowest third (3)"]
    assert [c[1] for c in cells] == ["5.00", "8.00", "11.00"]  # the median floor of 4-6, 7-9, 10-12
    assert all(c[4:6] == ["1.50", "3.50"] for c in cells)  # T(W) - floor stays put while the floor moves
    assert [c[6] for c in cells] == ["1.30", "1.19", "1.14"]  # T(1) / floor: 6.5 / 5, 9.5 / 8, 12.5 / 11
    assert [c[7] for c in cells] == ["1.31", "1.21", "1.16"]  # T(8) / T(1): 8.5 / 6.5, 11.5 / 9.5, 14.5 / 12.5
