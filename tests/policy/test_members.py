"""The member watch at literal times: a failing group's cancel order and straggler deadlines (docs/dispatch.md)."""

from __future__ import annotations

import pytest

from platoon.policy.members import CANCELLED, STRAGGLER_KILLED, CancelRollout, MemberError, MemberWatch

K = (1, 0)


def opened(size=4, **kw) -> MemberWatch:
    w = MemberWatch(**kw)
    w.open(K, size)
    return w


def test_a_failure_cancels_the_waiting_members_first_then_by_index():
    w = opened()
    for i in (0, 2):
        w.on_granted(K, i)
        w.on_started(K, i, now=0.0, delay_s=0.0)
    assert w.on_ended(K, 2, now=1.0, raised=True) == [CancelRollout(K, 1, CANCELLED), CancelRollout(K, 3, CANCELLED),
                                                        CancelRollout(K, 0, CANCELLED)]
    assert w.take_running_cancelled() == 1


def test_an_ended_member_waiting_for_teardowns_is_cancelled_too_but_an_exited_one_is_not():
    w = opened(3)
    for i in range(3):
        w.on_granted(K, i)
        w.on_started(K, i, now=0.0, delay_s=0.0)
    w.on_ended(K, 0, now=1.0)
    w.on_ended(K, 1, now=1.0)
    w.on_exited(K, 1)
    assert w.on_ended(K, 2, now=2.0, raised=True) == [CancelRollout(K, 0, CANCELLED)]


def test_started_together_one_deadline_after_the_quorum():
    w = opened(timeout_s=2.0)
    for i in range(4):
        w.on_granted(K, i)
        w.on_started(K, i, now=0.0, delay_s=0.0)
    for i, t in ((0, 1.0), (1, 2.0)):
        w.on_ended(K, i, now=t)
    assert w.next_deadline() is None
    w.on_ended(K, 2, now=3.0)  # the quorum: 3 of 4
    assert w.next_deadline() == 5.0
    assert w.on_deadline(now=4.9) == []
    assert w.on_deadline(now=5.0) == [CancelRollout(K, 3, STRAGGLER_KILLED)]
    assert len(w.take_warnings()) == 1


def test_each_deadline_is_shifted_by_its_start_delay_and_fixed_when_it_starts():
    w = opened(timeout_s=2.0, quorum=1)
    w.on_granted(K, 0)
    w.on_started(K, 0, now=0.0, delay_s=0.0)
    w.on_granted(K, 1)
    w.on_started(K, 1, now=0.0, delay_s=0.0)
    w.on_ended(K, 0, now=1.0)  # quorum 1 at t=1
    assert w.next_deadline() == 3.0
    w.on_granted(K, 2)
    w.on_started(K, 2, now=3.0, delay_s=3.0)  # started after the quorum: 1 + 2 + (3 - 0)
    assert w.on_deadline(now=3.0) == [CancelRollout(K, 1, STRAGGLER_KILLED)]
    assert w.next_deadline() == 6.0
    assert w.on_deadline(now=6.0) == [CancelRollout(K, 2, STRAGGLER_KILLED)]
    assert len(w.take_warnings()) == 1  # once per group


def test_out_of_order_events_raise_and_a_cancelled_member_is_left_alone():
    w = opened(2)
    w.on_granted(K, 0)
    with pytest.raises(MemberError, match=r"permit_granted: member 0 of group \(1, 0\) is waiting_slot"):
        w.on_granted(K, 0)
    w.on_cancelled(K, 1)
    w.on_started(K, 1, now=1.0, delay_s=1.0)  # the cancellation has not reached it yet: ignored
    assert w.on_ended(K, 1, now=2.0, raised=True) == []


def test_state_round_trip_keeps_the_deadlines():
    w = opened(timeout_s=2.0)
    for i in range(4):
        w.on_granted(K, i)
        w.on_started(K, i, now=0.0, delay_s=float(i))
    for i in range(3):
        w.on_ended(K, i, now=1.0)
    twin = MemberWatch(timeout_s=2.0)
    twin.load_state_dict(w.state_dict())
    assert twin.next_deadline() == w.next_deadline() == 6.0
    assert twin.on_deadline(now=6.0) == w.on_deadline(now=6.0)


def cut_after_quorum(w: MemberWatch, key, **where) -> float | None:
    """Open group ``key`` of 2 under ``w`` (``entry=``/``label=``), member 0 ends at t=1: member 1's deadline."""
    w.open(key, 2, **where)
    for i in range(2):
        w.on_granted(key, i)
        w.on_started(key, i, now=0.0, delay_s=0.0)
    w.on_ended(key, 0, now=1.0)
    return w.groups[key].deadlines.get(1)


def test_each_group_takes_its_policy_from_its_entry_and_label_when_it_opens():
    table = {("e", "slow"): (2.0, 1), ("e", "e"): (5.0, 1), ("f", "fast"): (None, None)}
    w = MemberWatch(timeout_s=10.0, quorum=1, policies=lambda entry, label: table[entry, label])
    assert cut_after_quorum(w, (1, 0), entry="e", label="slow") == 3.0
    assert cut_after_quorum(w, (1, 1), entry="e") == 6.0  # no label: the entry's name is its label
    assert cut_after_quorum(w, (1, 2), entry="f", label="fast") is None  # a policy without a timeout: no cutoff
    assert cut_after_quorum(w, (1, 3)) == 11.0  # opened without an entry: the watch's own
    twin = MemberWatch()
    twin.load_state_dict(w.state_dict())  # each group's policy travels with it
    assert twin.next_deadline() == w.next_deadline() == 3.0
    assert twin.on_deadline(now=11.0) == w.on_deadline(now=11.0) == [
        CancelRollout((1, 0), 1, STRAGGLER_KILLED), CancelRollout((1, 1), 1, STRAGGLER_KILLED),
        CancelRollout((1, 3), 1, STRAGGLER_KILLED)]
