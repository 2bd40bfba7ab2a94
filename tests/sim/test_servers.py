"""The simulated vLLM deployment (``platoon.sim.servers``): continuous batching at each server, the router, weight
updates under ``abort`` and ``keep``, at literal times."""

from __future__ import annotations

import pytest

from platoon.config.sim import SimServiceConfig
from platoon.sim.clock import TimerClock
from platoon.sim.servers import Deployment


class Bench:
    """A deployment on its own clock; ``at(t, fn)`` runs ``fn`` at simulated time ``t``; ``answers`` lists each
    answer as ``(time, key, server, concurrency)``."""

    def __init__(self, *, servers: int = 1, in_flight: str = "abort", now: float = 0.0, **service) -> None:
        self.clock = TimerClock(now=now)
        self.answers: list[tuple[float, tuple, int, float]] = []
        self.d = Deployment(SimServiceConfig(**service), servers=servers, in_flight=in_flight, clock=self.clock,
                            answered=lambda key, server, c: self.answers.append((self.clock.now, key, server, c)),
                            changed=lambda: None)

    def at(self, t: float, fn) -> None:
        def fire(_event) -> None:
            self.clock.now = t
            fn()

        self.clock.env.timeout(t - self.clock.env.now).callbacks.append(fire)

    def run(self) -> list[tuple[float, tuple, int, float]]:
        self.clock.run(until=1e6)
        return self.answers


def key(n: int) -> tuple[int, int, int]:
    return (0, 0, n)


def test_a_request_alone_takes_base_plus_per_sequence_and_n_together_end_together():
    b = Bench(base_s=1.0, per_sequence_s=0.5)
    b.at(0.0, lambda: b.d.request(key(0)))
    b.at(10.0, lambda: [b.d.request(key(n)) for n in (1, 2, 3)])
    answers = b.run()
    assert [(t, k[2]) for t, k, _, _ in answers] == [(1.5, 0), (12.5, 1), (12.5, 2), (12.5, 3)]
    assert [c for *_, c in answers] == pytest.approx([1.0, 3.0, 3.0, 3.0])


def test_a_request_that_joins_a_running_one_slows_it_as_continuous_batching_does():
    """base 1, per 1: alone a request takes 2 s. B joins at 0.5, when A has done a quarter: both then progress at
    1/3 a second, A ends 2.25 s later (2.75), B has then done 0.75 and ends alone 0.5 s after (3.25)."""
    b = Bench(base_s=1.0, per_sequence_s=1.0)
    b.at(0.0, lambda: b.d.request(key(0)))
    b.at(0.5, lambda: b.d.request(key(1)))
    answers = b.run()
    assert [t for t, *_ in answers] == pytest.approx([2.75, 3.25])
    assert answers[0][3] == pytest.approx((0.5 * 1 + 2.25 * 2) / 2.75)  # the time-average of the load it saw


def test_past_max_batch_a_request_waits_for_a_running_one_to_end():
    b = Bench(base_s=1.0, per_sequence_s=0.0, max_batch=2)
    b.at(0.0, lambda: [b.d.request(key(n)) for n in range(3)])
    assert [(t, k[2]) for t, k, _, _ in b.run()] == [(1.0, 0), (1.0, 1), (2.0, 2)]


def test_a_withdrawn_request_leaves_its_place_to_the_next():
    b = Bench(base_s=1.0, per_sequence_s=0.0, max_batch=1)
    b.at(0.0, lambda: [b.d.request(key(n)) for n in range(2)])
    b.at(0.5, lambda: b.d.withdraw(key(0)))
    assert [(t, k[2]) for t, k, _, _ in b.run()] == [(1.5, 1)]


def test_a_rollout_keeps_its_server_and_a_new_one_goes_to_the_least_loaded():
    b = Bench(servers=3, base_s=1.0, per_sequence_s=0.0)
    b.at(0.0, lambda: [b.d.request(key(n)) for n in range(4)])  # 0, 1, 2 on servers 0, 1, 2; 3 on server 0
    b.at(0.5, lambda: b.d.request((1, 0, 0)))  # server 0 has 2 in flight: the new rollout goes to 1
    b.at(2.0, lambda: b.d.request(key(2)))  # its next turn: back on server 2, whatever its load
    b.at(2.0, lambda: b.d.forget(key(1)))
    b.at(2.0, lambda: b.d.request(key(1)))  # a new rollout of that member: the least loaded (0, with fewest so far)
    servers = {(round(t, 6), k): s for t, k, s, _ in b.run()}
    assert servers[(1.0, key(0))] == 0 and servers[(1.0, key(3))] == 0
    assert servers[(1.5, (1, 0, 0))] == 1
    assert servers[(3.0, key(2))] == 2
    assert servers[(3.0, key(1))] == 0


@pytest.mark.parametrize(("in_flight", "ends", "resent"), [("keep", 3.0, 0), ("abort", 4.0, 1)])
def test_a_weight_update_stops_the_servers_and_abort_starts_their_requests_over(in_flight, ends, resent):
    """A 2 s request from 0, a pause from 1 to 2: kept, it goes on where it stood (ends 3); aborted, it is sent
    again at the resume (ends 4). A request made during the pause waits for the resume."""
    b = Bench(in_flight=in_flight, base_s=2.0, per_sequence_s=0.0)
    b.at(0.0, lambda: b.d.request(key(0)))
    b.at(1.0, b.d.pause)
    b.at(1.5, lambda: b.d.request(key(1)))
    b.at(2.0, lambda: b.d.resume(1.2))
    answers = b.run()
    assert {k[2]: t for t, k, _, _ in answers} == pytest.approx({0: ends, 1: 4.0})
    metrics = b.d.take_metrics()
    assert metrics["inference/resent"] == resent
    assert metrics["inference/requests"] == 2
    assert metrics["inference/weight_sync_s"] == 1.2
    assert metrics["inference/paused_share"] == pytest.approx(1.0 / 4.0)


def test_the_state_round_trips_to_the_same_answers():
    def bench() -> Bench:
        b = Bench(servers=2, base_s=1.0, per_sequence_s=0.3, max_batch=2)
        b.at(0.0, lambda: [b.d.request(key(n)) for n in range(5)])
        return b

    whole = bench().run()
    half = bench()
    half.clock.run(until=1.1)
    state, clock_state, answered = half.d.state_dict(), half.clock.state_dict(), list(half.answers)
    fresh = Bench(servers=2, base_s=1.0, per_sequence_s=0.3, max_batch=2, now=1.1)
    fresh.d.load_state_dict(state)
    fresh.clock.load_state_dict(clock_state)
    assert answered + fresh.run() == whole
