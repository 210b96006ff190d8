"""The idle-gap timelines the insertion schedulers share (``placer.solve.heuristics.common``)."""

from __future__ import annotations

from placer.solve.heuristics.common import Timeline, earliest_slot


def test_timeline_keeps_gaps_and_fills_them():
    line = Timeline()
    line.insert(2.0, 4.0)  # idle [0, 2), busy until 4
    assert (line.gs, line.ge, line.tail) == ([0.0], [2.0], 4.0)
    assert line.earliest(0.0, 1.0) == 0.0  # fits the gap
    assert line.earliest(1.5, 0.5) == 1.5
    assert line.earliest(0.0, 3.0) == 4.0  # too long for the gap: after the tail
    line.insert(0.5, 1.0)  # splits the gap in two
    assert (line.gs, line.ge) == ([0.0, 1.0], [0.5, 2.0])
    assert line.earliest(0.2, 0.5) == 1.0
    line.insert(3.0, 3.0)  # zero-length slots occupy nothing
    assert (line.gs, line.ge, line.tail) == ([0.0, 1.0], [0.5, 2.0], 4.0)


def test_earliest_slot_is_the_first_start_free_on_every_timeline():
    a, b = Timeline(), Timeline()
    a.insert(0.0, 2.0)  # a: busy [0, 2)
    b.insert(2.0, 4.0)  # b: idle [0, 2), busy [2, 4)
    assert earliest_slot([a, b], (0,), 0.0, 1.0) == 2.0
    assert earliest_slot([a, b], (1,), 0.0, 1.0) == 0.0
    assert earliest_slot([a, b], (0, 1), 0.0, 1.0) == 4.0  # a frees at 2, b is busy until 4
