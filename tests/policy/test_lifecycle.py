"""The rollout lifecycle table (``platoon.policy.lifecycle``): the moves it has, the ones it refuses, and that the
table is closed (every state but the final ones has a way out, every state is reachable)."""

from __future__ import annotations

from pathlib import Path

import pytest
from dispatch_harness import build

from platoon.policy.driver import Driver
from platoon.policy.events import BlockEntered, MemberStarted, SlotReleased, SlotRequested
from platoon.policy.lifecycle import (
    ACTIVE,
    FINAL,
    OPEN,
    TRANSITIONS,
    LifecycleError,
    RolloutEvent,
    RolloutState,
    advance,
    path,
    table,
)
from platoon.policy.permits import GrantPermit
from platoon.policy.start_limit import SlotGranted, StartLimit

S, E = RolloutState, RolloutEvent


def test_a_rollout_goes_from_its_permit_to_its_end_in_order():
    assert path(E.PERMIT_GRANTED) is S.WAITING_SLOT
    assert path(E.PERMIT_GRANTED, E.SLOT_GRANTED) is S.WAITING_LAUNCH
    assert path(E.PERMIT_GRANTED, E.SLOT_GRANTED, E.LAUNCH_ADMITTED) is S.STARTING
    assert path(E.PERMIT_GRANTED, E.SLOT_GRANTED, E.LAUNCH_ADMITTED, E.FIRST_CALL, E.FINISHED, E.TORN_DOWN) is S.ENDED
    assert path(E.PERMIT_GRANTED, E.SLOT_GRANTED, E.LAUNCH_ADMITTED, E.RAISED, E.TEARDOWN_WAIT_OVER) is S.ENDED


def test_an_event_out_of_order_raises_naming_the_member_the_event_and_the_state():
    with pytest.raises(LifecycleError, match=r"first_call: member 2 of group \(0, 1\) is waiting_permit"):
        advance(S.WAITING_PERMIT, E.FIRST_CALL, "member 2 of group (0, 1)")
    with pytest.raises(LifecycleError, match="permit_granted: a rollout is running"):
        advance(S.RUNNING, E.PERMIT_GRANTED)
    with pytest.raises(LifecycleError):
        advance(S.ENDED, E.CANCELLED)  # an ended rollout has nothing left to cancel


def test_a_cancelled_member_stays_cancelled_whatever_it_reports_late():
    for event in E:
        assert advance(S.CANCELLED, event) is S.CANCELLED


def test_every_state_but_the_final_ones_can_be_cancelled_and_every_state_is_reachable():
    assert OPEN == set(S) - FINAL
    reached = {S.WAITING_PERMIT} | {to for to, _ in TRANSITIONS.values()}
    assert reached == set(S)
    assert ACTIVE == {S.STARTING, S.RUNNING}


def test_every_move_names_its_rule_and_the_table_lists_them_in_order():
    rows = table()
    assert len(rows) == len(TRANSITIONS)
    assert all(rule for *_, rule in rows)
    assert rows[0] == ("WAITING_PERMIT", "permit_granted", "WAITING_SLOT",
                       "permits: a permit is free (platoon.policy.permits)")


def test_the_driver_moves_a_member_through_its_slot_and_first_call():
    """Through the driver, with one start slot: permit -> waiting for its slot -> (slot) waiting for its launch ->
    (started) starting -> (first call) running; the second member waits for the slot the first holds until its first
    call gives it back."""
    driver = Driver(build(permits=8, group_size=2, batch_size=1), start_limit=StartLimit(1, timer_s=600.0))
    driver.start(now=0.0)
    key = next(iter(driver.dispatcher.running)) if driver.dispatcher.running else None
    while key is None:
        driver.poll(now=0.0)
        key = next(iter(driver.dispatcher.running), None)
    grants = [d for i in (0, 1) for d in driver.handle(BlockEntered(key, i), now=0.0) if isinstance(d, GrantPermit)]
    assert [g.index for g in grants] == [0, 1]
    assert driver.members.state(key, 0) is S.WAITING_SLOT
    assert driver.handle(SlotRequested(key, 0), now=0.0) == (SlotGranted((*key, 0), 0.0),)
    assert driver.members.state(key, 0) is S.WAITING_LAUNCH
    assert driver.handle(SlotRequested(key, 1), now=0.0) == ()  # the one slot is member 0's
    driver.handle(MemberStarted(key, 0, delay_s=0.0), now=0.0)
    assert driver.members.state(key, 0) is S.STARTING
    answer = driver.handle(SlotReleased(key, 0, "first_call"), now=1.0)
    assert driver.members.state(key, 0) is S.RUNNING
    assert [d for d in answer if isinstance(d, SlotGranted)] == [SlotGranted((*key, 1), 1.0)]
    assert driver.members.state(key, 1) is S.WAITING_LAUNCH


def test_the_architecture_page_shows_the_table_as_it_is():
    page = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text()
    for state, event, to, rule in table():
        assert f"| {state} | `{event}` | {to} | {rule} |" in page, (state, event)
