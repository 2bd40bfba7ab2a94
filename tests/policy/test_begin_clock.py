"""A start's clock may begin where a checkpoint's left off (``begin_clock``): the dispatcher's time and every
metrics window begin there, at literal times."""

from __future__ import annotations

import dispatch_harness
import pytest

from platoon.policy.assemble import begin_clock
from platoon.policy.dispatcher import StartGroup
from platoon.policy.driver import Driver


def test_the_windows_of_a_start_begin_at_its_clock():
    d = dispatch_harness.build(tasks=4, group_size=2, batch_size=2, steps=2)
    begin_clock(d, now=100.0)
    driver = Driver(d)
    now = 100.0
    driver.start(now=now)  # the launch save
    (first, *_) = [dec for dec in driver.poll(now=now) if isinstance(dec, StartGroup)]
    driver.on_block_entered(first.key, 0, now=now)
    driver.on_member_started(first.key, 0, now=now, delay_s=0.0)
    now += 2.0
    driver.on_member_ended(first.key, 0, now=now)
    driver.on_block_exited(first.key, 0, now=now)
    now += 2.0
    # one rollout in flight for 2 s of the 4 since the start began (not of the 104 since 0)
    assert d.gauges.read(now=now, groups_in_flight=len(d.running))["rollout_client/rollouts_in_flight_mean"] == 0.5
    assert driver.window.read(now=now)["train/rollouts_per_hour"] == 900.0


def test_a_clock_begins_no_earlier_than_the_dispatchers_time():
    d = dispatch_harness.build(tasks=4, group_size=2, batch_size=2, steps=2)
    begin_clock(d, now=100.0)
    with pytest.raises(ValueError, match="time went backwards"):
        begin_clock(d, now=50.0)
    driver = Driver(d)
    driver.start(now=99.0)  # the launch save reads no clock; the start itself does
    with pytest.raises(ValueError, match="time went backwards"):
        driver.poll(now=99.0)
