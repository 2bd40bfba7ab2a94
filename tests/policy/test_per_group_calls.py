"""The per-group shortcuts of the simulator's hot path answer and change exactly what the per-member calls they
stand for do (docs/architecture.md, "per-group shortcuts"), and the quickly built records equal the constructed
ones."""

from __future__ import annotations

from dispatch_harness import build

from platoon.policy import frozen
from platoon.policy.dispatcher import StartGroup
from platoon.policy.driver import Driver
from platoon.policy.members import MemberState, MemberWatch
from platoon.policy.permits import GrantPermit
from platoon.policy.stats import MemberResult


def twins(**kw) -> tuple[Driver, Driver]:
    """Two drivers in the same state, their first groups started."""
    a, b = Driver(build(**kw)), Driver(build(**kw))
    a.start(now=0.0), b.start(now=0.0)  # the launch saves
    started = [d for d in a.poll(now=0.0) if isinstance(d, StartGroup)]
    assert started and started == [d for d in b.poll(now=0.0) if isinstance(d, StartGroup)]
    return a, b


def same_state(a: Driver, b: Driver) -> None:
    assert a.dispatcher.state_dict() == b.dispatcher.state_dict()
    assert a.state_dict() == b.state_dict()


def test_a_group_entered_at_once_is_each_member_entered_in_turn():
    # 6 permits for groups of 4: the second group's last members wait for permits
    a, b = twins(permits=6, group_size=4, batch_size=2)
    for start in list(a.dispatcher.running):
        size = a.dispatcher.running[start][1].size
        one = a.on_group_entered(start, size, now=1.0)
        each = [x for i in range(size) for x in b.on_block_entered(start, i, now=1.0)]
        assert one == each
        same_state(a, b)
    assert any(len(a.dispatcher.running[k][1].waiting) for k in a.dispatcher.running)  # some members wait


def test_a_member_that_exits_as_it_ends_is_ended_then_exited():
    a, b = twins(permits=6, group_size=4, batch_size=2)
    for driver in (a, b):
        for k, (_, lease) in driver.dispatcher.running.items():
            driver.on_group_entered(k, lease.size, now=0.0)
    granted = [(k, i) for k, (_, lease) in a.dispatcher.running.items() for i in sorted(lease.holding_blocks)]
    for driver in (a, b):
        for k, i in granted:
            driver.on_member_started(k, i, now=0.5, delay_s=0.5)
    t = 1.0
    for k, i in granted:  # each exit hands its permit to a waiting member of the next group
        t += 1.0
        one = a.on_member_exited(k, i, now=t)
        each = b.on_member_ended(k, i, now=t) + b.on_block_exited(k, i, now=t)
        assert one == each
        assert any(isinstance(x, GrantPermit) for x in one) or not any(
            lease.waiting for _, lease in a.dispatcher.running.values())
        same_state(a, b)
    assert a.window.rollouts == b.window.rollouts == len(granted)


def test_the_member_watch_counts_only_a_member_that_ran_to_its_end():
    w = MemberWatch()
    w.open((1, 0), 2)
    for i in (0, 1):
        w.on_granted((1, 0), i)
        w.on_started((1, 0), i, now=0.0, delay_s=0.0)
    w.on_cancelled((1, 0), 1)
    assert w.on_ended_and_exited((1, 0), 0, now=1.0) is True
    assert w.state((1, 0), 0) is MemberState.ENDED
    assert w.on_ended_and_exited((1, 0), 1, now=1.0) is False  # cancelled: its end changes nothing
    assert w.state((1, 0), 1) is MemberState.CANCELLED


def test_quickly_built_records_equal_constructed_ones():
    fields = dict(reward=1.0, scored=1.0, valid=True, outcome="pass", steps=3, seconds=2.5, versions={"main": (4, 4)})
    quick, made = MemberResult.quick(**fields), MemberResult(**fields)
    assert quick == made and hash(quick) == hash(made) and repr(quick) == repr(made)
    assert quick.to_json() == made.to_json()
    assert MemberResult.quick() == MemberResult()
    assert MemberResult.quick().versions is not MemberResult.quick().versions  # a fresh dict each, as the factory's
    grant = frozen.build(GrantPermit, {"key": (1, 2), "index": 3, "waited_s": 0.5, "held": True})
    assert grant == GrantPermit((1, 2), 3, 0.5, True) and hash(grant) == hash(GrantPermit((1, 2), 3, 0.5, True))
