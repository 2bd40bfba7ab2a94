"""Literal unit tests of the permit pool and draw leases (FIFO, head-only partial grants, block rules)."""

import pytest

from platoon.policy.permits import DrawLease, GrantPermit, PermitPool


def lease(seq, size, *, rolling=True, active=True):
    return DrawLease((1, seq), size, rolling=rolling, active=active, task_id=f"t{seq}")


def test_whole_lease_waits_for_all_its_permits_and_nothing_overtakes_it():
    pool = PermitPool(4)
    a, b, c = lease(0, 3, rolling=False), lease(1, 3, rolling=False), lease(2, 1, rolling=False)
    pool.reserve(a, now=0.0)
    assert a.startable and pool.free == 1
    pool.reserve(b, now=0.0)
    pool.reserve(c, now=0.0)
    # b needs 3 and only 1 is free: it gets nothing (whole), and c may not overtake it
    assert b.granted == 0 and c.granted == 0 and pool.free == 1
    pool.release(a, now=1.0)
    assert b.startable and c.startable and pool.free == 0


def test_rolling_lease_starts_on_its_first_permit_and_grows_as_permits_free():
    pool = PermitPool(2)
    a = lease(0, 2)
    pool.reserve(a, now=0.0)
    b = lease(1, 3)
    pool.reserve(b, now=0.0)
    assert not b.startable
    assert pool.enter_block(a, 0, now=0.0) == GrantPermit((1, 0), 0, 0.0, True)
    assert pool.enter_block(a, 1, now=0.0) == GrantPermit((1, 0), 1, 0.0, True)
    assert pool.exit_block(a, 0, now=2.0) == []  # b is granted the permit; none of its blocks waits yet
    assert b.startable and b.granted == 1
    assert pool.enter_block(b, 0, now=2.0).held
    assert pool.enter_block(b, 1, now=2.5) is None  # waits FIFO
    assert pool.enter_block(b, 2, now=3.0) is None
    assert pool.exit_block(a, 1, now=4.0) == [GrantPermit((1, 1), 1, 1.5, True)]
    pool.release(a, now=4.0)
    assert pool.free == 0 and pool.capacity == pool.free + b.holding


def test_block_index_rules_hold_under_both_settings():
    for active in (True, False):
        pool = PermitPool(4)
        a = lease(0, 2, active=active, rolling=active)
        pool.reserve(a, now=0.0)
        with pytest.raises(IndexError, match="outside its draw's lease, of size 2"):
            pool.enter_block(a, 2, now=0.0)
        pool.enter_block(a, 1, now=0.0)
        with pytest.raises(RuntimeError, match="entered a second lease block"):
            pool.enter_block(a, 1, now=0.0)


def test_inactive_lease_blocks_hold_nothing_and_permits_come_back_at_release():
    pool = PermitPool(4)
    a = lease(0, 4, rolling=False, active=False)
    pool.reserve(a, now=0.0)
    g = pool.enter_block(a, 0, now=0.0)
    assert g == GrantPermit((1, 0), 0, 0.0, False)
    assert pool.exit_block(a, 0, now=1.0) == [] and pool.free == 0
    pool.release(a, now=2.0)
    assert pool.free == 4
    assert pool.release(a, now=3.0) == [] and pool.free == 4  # a second release is a no-op


def test_cancelled_wait_frees_its_index_and_passes_the_permit_on():
    pool = PermitPool(1)
    a = lease(0, 3)
    pool.reserve(a, now=0.0)
    pool.enter_block(a, 0, now=0.0)
    assert pool.enter_block(a, 1, now=0.0) is None
    assert pool.enter_block(a, 2, now=0.0) is None
    pool.cancel_block(a, 1)
    assert pool.exit_block(a, 0, now=1.0) == [GrantPermit((1, 0), 2, 1.0, True)]
    assert pool.enter_block(a, 1, now=1.0) is None  # index 1 never ran: it may enter again


def test_resize_gives_back_spare_permits_and_requeues_at_the_front():
    pool = PermitPool(8)
    a = lease(0, 8, rolling=False)
    pool.reserve(a, now=0.0)
    assert a.granted == 8
    pool.resize(a, 4, now=0.0)
    assert a.holding == 4 and pool.free == 4
    b = lease(1, 4, rolling=False)
    pool.reserve(b, now=0.0)
    pool.resize(a, 6, now=0.0)
    assert a.holding == 4 and a in pool.queue and not pool.free


def test_state_round_trips():
    pool = PermitPool(3)
    a, b = lease(0, 2), lease(1, 3)
    pool.reserve(a, now=0.0)
    pool.reserve(b, now=0.0)
    pool.enter_block(b, 0, now=0.0)
    pool.enter_block(b, 1, now=0.5)
    twin_a, twin_b = DrawLease.from_state(a.state_dict()), DrawLease.from_state(b.state_dict())
    twin = PermitPool(3)
    twin.load_queue(pool.state_dict(), {(1, 0): twin_a, (1, 1): twin_b})
    assert twin.state_dict() == pool.state_dict()
    assert twin_b.state_dict() == b.state_dict()
    assert pool.release(a, now=1.0) == twin.release(twin_a, now=1.0)
