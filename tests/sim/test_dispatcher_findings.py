"""Dispatcher behaviours the simulator exposed, each shown by driving the dispatcher alone (no SimPy).

Each test states what the release notes and docs/dispatch.md expect; all four were found by the simulator
and are fixed in the dispatcher (rollouts in flight counted under either setting and at releases; ``poll`` after
``take_step``; ``markers_now`` reset at ``publish``).
"""

from __future__ import annotations

import pytest

from platoon.components import admission_set, sampler_set
from platoon.policy.dispatcher import DispatchConfig, Dispatcher, StartGroup
from platoon.policy.outputs import GroupOutput
from platoon.policy.permits import GrantPermit
from platoon.policy.pool import EntrySpec, TaskPool
from platoon.policy.recorder import StatsRecorder
from platoon.policy.stats import MemberResult


def make(*, permits: int, group_size: int = 2, batch_size: int = 1, steps: int = 4, release: str = "rollout",
         max_staleness: int | None = 1, admission: str = "all") -> Dispatcher:
    pool = TaskPool.from_entries([EntrySpec("env", [f"t{i}" for i in range(8)], group_size)])
    samplers = sampler_set(pool, run_sampler="auto", run_options={}, entry_samplers={}, batch_size=batch_size,
                          seed=0)
    recorder = StatsRecorder.for_pool(pool)
    recorder.add_listener(samplers.observe)
    rules = admission_set(run_rule=admission, run_options={}, entry_rules={}, entries=pool.entries,
                         batch_size=batch_size)
    config = DispatchConfig(batch_size=batch_size, steps=steps, max_concurrent_rollouts=permits,
                            permit_release=release, max_staleness=max_staleness)
    return Dispatcher(config, pool, samplers, recorder, rules)


def output(passes: list[bool], version: int = 0) -> GroupOutput:
    members = tuple(MemberResult(reward=float(p), scored=float(p), valid=True, outcome="scored",
                                 versions={"main": (version, version)}) for p in passes)
    verdict = "trained" if 0 < sum(passes) < len(passes) else "uniform"
    return GroupOutput(verdict, members, tuple((i, float(p)) for i, p in enumerate(passes)))


def starts(decisions) -> list:
    return [d.key for d in decisions if isinstance(d, StartGroup)]


def enter_all(d: Dispatcher, key, size: int, now: float) -> list[GrantPermit]:
    out = []
    for i in range(size):
        out += d.on_block_entered(key, i, now=now)
    return out


def blocks_held(d: Dispatcher) -> int:
    return sum(len(lease.holding_blocks) for _, lease in d.running.values())


def test_group_release_counts_its_rollouts_in_flight():
    """Semantics 4.9: rollouts_in_flight counts running rollouts under either setting; under group the configured
    concurrency is min(budget, groups_at_once x G), so a run whose 4 rollouts all ran the whole step reads 1.0."""
    d = make(permits=4, batch_size=2, release="group", max_staleness=0)
    keys = starts(d.start(now=0.0))
    assert len(keys) == 2
    for key in keys:
        assert all(not g.held for g in enter_all(d, key, 2, 0.0))  # group: the blocks hold nothing themselves
    for key in keys:
        for i in range(2):
            d.on_block_exited(key, i, now=1.0)
        d.on_group_finished(key, output([True, False]), now=1.0)
    assert d.take_step(now=1.0) is not None
    d.commit_step(now=1.0)
    metrics = d.step_metrics(now=1.0)
    assert metrics["rollout_client/rollouts_in_flight_mean"] == pytest.approx(4.0)
    assert metrics["rollout_client/concurrency_achieved_fraction"] == pytest.approx(1.0)


def test_a_release_that_grants_blocks_counts_them():
    """The gauge of rollouts in flight must equal the blocks that hold a permit, after every call."""
    d = make(permits=3, max_staleness=None, steps=10)
    a, b = starts(d.start(now=0.0))  # A holds 2 permits, B 1 (rolling), a third draw waits for permits
    assert [g.index for g in enter_all(d, a, 2, 0.0)] == [0, 1]
    assert [g.index for g in enter_all(d, b, 2, 0.0)] == [0]  # B's member 1 waits
    d.on_block_cancelled(b, 1, now=1.0)  # B's member 1 never runs (its group is failing)
    c = starts(d.on_block_exited(a, 0, now=2.0))  # A's permit goes to B's lease, spare: B holds 2
    assert c == []
    c = starts(d.on_block_exited(b, 0, now=3.0))  # B's returned permit starts C (rolling, on one permit)
    assert len(c) == 1
    assert [g.index for g in enter_all(d, c[0], 2, 3.0)] == [0]  # C's member 1 waits
    grants = d.on_group_finished(b, None, now=4.0)  # B's spare permit comes back: C's member 1 gets it
    assert [(g.key, g.index, g.held) for g in grants if isinstance(g, GrantPermit)] == [(c[0], 1, True)]
    assert d.gauges.rollouts.value == blocks_held(d) == 3


def test_a_dequeue_that_frees_the_horizon_starts_a_group():
    """Semantics 5.1: a dequeue is a change that wakes the choose loop. Under a rule at max_staleness 0, a failed
    group keeps its place until a step takes its marker; once take_step has taken it, nothing runs and nothing
    will: the next group must start then."""
    d = make(permits=2, admission="informative", max_staleness=0, steps=3)
    (a,) = starts(d.start(now=0.0))
    enter_all(d, a, 2, 0.0)
    for i in range(2):
        d.on_block_exited(a, i, now=1.0)
    assert starts(d.on_group_finished(a, None, now=1.0)) == []  # its place is held: nothing else may start
    assert d.take_step(now=1.0) is None  # the marker is taken: the place is free, the step still needs a group
    assert d.horizon.room(d.step) is None  # room for another group ...
    assert starts(d.poll(now=1.0))  # ... so the poll after take_step starts one


def test_markers_of_an_earlier_step_stop_counting():
    """Semantics 9: markers from earlier steps never count toward the cap; markers_now is the current step's
    rejected groups not yet dequeued."""
    d = make(permits=4, admission="informative", max_staleness=1, steps=4)
    a, b = starts(d.start(now=0.0))
    for key in (a, b):
        enter_all(d, key, 2, 0.0)
    for i in range(2):
        d.on_block_exited(a, i, now=1.0)
    d.on_group_finished(a, output([True, False]), now=1.0)
    assert d.take_step(now=1.0) is not None  # step 0 trains A
    for i in range(2):
        d.on_block_exited(b, i, now=2.0)
    d.on_group_finished(b, output([True, True]), now=2.0)  # B is rejected while step 0 trains: a marker of step 0
    d.commit_step(now=3.0)
    d.step_metrics(now=3.0)
    d.publish(now=3.0)
    d.take_step(now=3.0)  # step 1 takes B's marker
    current = sum(1 for g in d.queue if g.kind == "marker" and not g.held and g.window == d.step)
    assert d.horizon.markers_now == current == 0
