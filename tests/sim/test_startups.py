"""The shared start-up capacity: processor sharing in virtual time."""

from __future__ import annotations

import pytest

from platoon.sim.startups import StartupServer


def drain(s: StartupServer) -> list[tuple[float, tuple]]:
    out = []
    while (t := s.next_finish()) is not None:
        out += [(t, k) for k in s.pop_finished(now=t)]
    return out


def test_no_capacity_runs_each_alone():
    s = StartupServer(None)
    for i, w in enumerate([5.0, 1.0, 3.0]):
        s.add((1, 0, i), w, now=0.0)
    assert drain(s) == [(1.0, (1, 0, 1)), (3.0, (1, 0, 2)), (5.0, (1, 0, 0))]


def test_beyond_capacity_they_share_it():
    s = StartupServer(2.0)
    for i in range(4):
        s.add((1, 0, i), 10.0, now=0.0)  # 4 jobs of 10 s on a capacity of 2: all end at 20 s
    done = drain(s)
    assert [k for _, k in done] == [(1, 0, i) for i in range(4)]
    assert [t for t, _ in done] == pytest.approx([20.0] * 4)


def test_arrivals_and_cancellations_change_the_rate():
    s = StartupServer(1.0)
    s.add(("a",), 10.0, now=0.0)
    s.add(("b",), 10.0, now=5.0)  # a has 5 left, now at half speed
    assert s.next_finish() == pytest.approx(15.0)
    assert s.cancel(("b",), now=7.0)  # a did 1 more, runs alone again: 4 left
    assert s.next_finish() == pytest.approx(11.0)
    assert not s.cancel(("b",), now=8.0)
    twin = StartupServer(1.0)
    twin.load_state_dict(s.state_dict())
    assert twin.next_finish() == s.next_finish()
    assert drain(twin) == drain(s)
