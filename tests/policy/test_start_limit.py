"""StartLimit at literal times: FIFO grants, cancellation, releases, the timer, warnings and metrics."""

from __future__ import annotations

import re

import pytest
from config_kit import schema_config

from platoon.policy.start_limit import (
    PREFIX,
    SlotGranted,
    SlotState,
    StartLimit,
    StartLimitError,
    announcement,
    start_timer_s,
)


def test_timer_is_the_startup_budget_plus_300():
    assert start_timer_s() == 600.0
    assert start_timer_s(120) == 420.0


def test_free_slot_is_granted_at_once_and_the_rest_wait_first_come_first_served():
    lim = StartLimit(2, timer_s=600.0)
    now = 0.0
    assert lim.request("a", now=now) is True
    assert lim.request("b", now=now) is True
    now += 0.5
    assert lim.request("c", now=now) is False
    now += 0.5
    assert lim.request("d", now=now) is False
    assert lim.waiting() == ("c", "d")
    assert lim.free == 0
    now += 1.0  # 2.0
    assert lim.release("b", "first_call", now=now) == [SlotGranted("c", 1.5)]
    assert lim.state("b") is SlotState.RELEASED
    assert lim.state("c") is SlotState.HOLDING
    now += 0.5  # 2.5
    assert lim.release("a", "end", now=now) == [SlotGranted("d", 1.5)]
    assert lim.state("a") is SlotState.ABSENT
    assert lim.free == 0


def test_a_newcomer_never_overtakes_a_waiter():
    lim = StartLimit(1, timer_s=600.0)
    now = 0.0
    assert lim.request("a", now=now)
    assert not lim.request("b", now=now)
    now += 1.0
    # "a" leaves and frees the slot, which "b" takes before "c" asks.
    assert lim.release("a", "end", now=now) == [SlotGranted("b", 1.0)]
    assert not lim.request("c", now=now)
    assert lim.waiting() == ("c",)


def test_each_slot_comes_back_once():
    lim = StartLimit(1, timer_s=600.0)
    now = 0.0
    assert lim.request("a", now=now)
    assert not lim.request("b", now=now)
    now += 0.5
    assert lim.release("a", "first_call", now=now) == [SlotGranted("b", 0.5)]
    # The block's end, and a first call signalled late from another thread, give nothing back again.
    assert lim.release("a", "first_call", now=now) == []
    assert lim.release("a", "end", now=now) == []
    assert lim.release("a", "first_call", now=now) == []
    assert lim.free == 0
    assert lim.metrics(now=now)[PREFIX + "releases/first_call"] == 1.0


def test_a_cancelled_waiter_takes_nothing():
    lim = StartLimit(1, timer_s=600.0)
    now = 0.0
    lim.request("a", now=now)
    lim.request("b", now=now)
    lim.request("c", now=now)
    now += 0.5
    assert lim.cancel("b", now=now) == []
    assert lim.waiting() == ("c",)
    now += 0.5
    assert lim.release("a", "end", now=now) == [SlotGranted("c", 1.0)]
    m = lim.metrics(now=now)
    assert m[PREFIX + "releases/cancelled"] == 0.0
    assert m[PREFIX + "wait_seconds_max"] == 1.0


def test_a_slot_granted_at_the_instant_of_cancellation_passes_on():
    lim = StartLimit(1, timer_s=600.0)
    now = 0.0
    lim.request("a", now=now)
    lim.request("b", now=now)
    lim.request("c", now=now)
    now += 2.0
    assert lim.release("a", "end", now=now) == [SlotGranted("b", 2.0)]
    # "b"'s waiter was cancelled before it resumed: its slot goes to "c", and "b" took nothing.
    assert lim.cancel("b", now=now) == [SlotGranted("c", 2.0)]
    assert lim.state("b") is SlotState.ABSENT
    m = lim.metrics(now=now)
    assert m[PREFIX + "releases/end"] == 1.0
    assert m[PREFIX + "releases/cancelled"] == 0.0
    # Taken: "a" (0.0) and "c" (2.0); "b"'s grant was undone.
    assert m[PREFIX + "wait_seconds_p50"] == 1.0
    assert m[PREFIX + "wait_seconds_max"] == 2.0


def test_a_held_slot_cancelled_with_its_block_counts_as_cancelled():
    lim = StartLimit(1, timer_s=600.0)
    now = 0.0
    lim.request("a", now=now)
    lim.request("b", now=now)
    now += 1.0
    assert lim.release("a", "cancelled", now=now) == [SlotGranted("b", 1.0)]
    assert lim.metrics(now=now)[PREFIX + "releases/cancelled"] == 1.0


def test_the_timer_gives_slots_back_in_grant_order_and_warns_once():
    lim = StartLimit(2, timer_s=10.0)
    now = 0.0
    assert lim.next_deadline() is None
    lim.request("a", now=now)
    now += 1.0
    lim.request("b", now=now)
    lim.request("c", now=now)
    assert lim.next_deadline() == 10.0
    now = 9.5
    assert lim.on_deadline(now=now) == []
    now = 10.0
    assert lim.on_deadline(now=now) == [SlotGranted("c", 9.0)]
    assert lim.state("a") is SlotState.RELEASED
    assert lim.next_deadline() == 11.0
    [warning] = lim.take_warnings()
    assert "came back on its 10 s timer" in warning and "'a'" in warning
    now = 11.0
    assert lim.on_deadline(now=now) == []
    assert lim.take_warnings() == []  # once per start
    assert lim.next_deadline() == 20.0  # "c", granted at 10.0
    # The late first call and the end of "a" change nothing.
    assert lim.release("a", "first_call", now=now) == []
    assert lim.release("a", "end", now=now) == []
    assert lim.free == 1
    m = lim.metrics(now=now)
    assert m[PREFIX + "releases/timer"] == 2.0


def test_a_slot_released_before_its_timer_drops_its_deadline():
    lim = StartLimit(1, timer_s=10.0)
    now = 0.0
    lim.request("a", now=now)
    now += 3.0
    lim.release("a", "first_call", now=now)
    assert lim.next_deadline() is None
    assert lim.on_deadline(now=100.0) == []


def test_mostly_whole_rollouts_warns_once_after_32_releases():
    lim = StartLimit(1, timer_s=600.0)
    now = 0.0
    # 16 first calls and 16 ends: exactly half, no warning.
    for i in range(32):
        lim.request(i, now=now)
        now += 0.5
        lim.release(i, "first_call" if i % 2 else "end", now=now)
    lim.request("x", now=now)
    lim.release("x", "cancelled", now=now)  # cancelled ones do not count
    assert lim.take_warnings() == []
    lim.request(32, now=now)
    lim.release(32, "end", now=now)  # 17 of 33
    [warning] = lim.take_warnings()
    assert warning.startswith("17 of 33 start slots")
    lim.request(33, now=now)
    lim.release(33, "end", now=now)
    assert lim.take_warnings() == []


def test_few_releases_never_warn_even_if_all_end():
    lim = StartLimit(1, timer_s=600.0)
    now = 0.0
    for i in range(31):
        lim.request(i, now=now)
        lim.release(i, "end", now=now)
    assert lim.take_warnings() == []


def test_metrics_time_weighted_and_reset_after_reading():
    lim = StartLimit(1, timer_s=600.0)
    now = 0.0
    assert lim.metrics(now=now) == {}  # nobody asked yet
    lim.request("a", now=now)  # starting 1 from 0.0
    now += 1.0
    lim.request("b", now=now)  # waiting 1 from 1.0
    now += 1.0
    lim.release("a", "first_call", now=now)  # b granted at 2.0 after 1.0
    now += 2.0  # 4.0
    m = lim.metrics(now=now)
    assert m == {
        PREFIX + "starting_mean": 1.0,
        PREFIX + "waiting_mean": 0.25,
        PREFIX + "releases/first_call": 1.0,
        PREFIX + "releases/end": 0.0,
        PREFIX + "releases/timer": 0.0,
        PREFIX + "releases/cancelled": 0.0,
        PREFIX + "wait_seconds_p50": 0.5,
        PREFIX + "wait_seconds_p90": 0.9,
        PREFIX + "wait_seconds_max": 1.0,
    }
    now += 4.0  # 8.0
    lim.release("b", "end", now=now)
    now += 4.0  # 12.0
    m = lim.metrics(now=now)
    assert m == {
        PREFIX + "starting_mean": 0.5,
        PREFIX + "waiting_mean": 0.0,
        PREFIX + "releases/first_call": 0.0,
        PREFIX + "releases/end": 1.0,
        PREFIX + "releases/timer": 0.0,
        PREFIX + "releases/cancelled": 0.0,
    }


def test_metrics_of_a_zero_length_window_read_the_level():
    lim = StartLimit(1, timer_s=600.0)
    lim.request("a", now=5.0)
    lim.request("b", now=5.0)
    m = lim.metrics(now=5.0)
    assert m[PREFIX + "starting_mean"] == 1.0
    assert m[PREFIX + "waiting_mean"] == 1.0


def test_scopes_share_slots_and_keep_their_own_metrics():
    lim = StartLimit(1, timer_s=600.0)
    now = 0.0
    lim.request("t", now=now)
    assert lim.request("e", now=now, scope="eval") is False
    now += 2.0
    assert lim.release("t", "first_call", now=now) == [SlotGranted("e", 2.0)]
    train = lim.metrics(now=now)
    ev = lim.metrics(now=now, scope="eval")
    assert train[PREFIX + "starting_mean"] == 1.0
    assert train[PREFIX + "waiting_mean"] == 0.0
    assert train[PREFIX + "wait_seconds_max"] == 0.0
    assert ev[PREFIX + "starting_mean"] == 0.0
    assert ev[PREFIX + "waiting_mean"] == 1.0
    assert ev[PREFIX + "wait_seconds_max"] == 2.0


def test_no_limit_grants_everything_and_counts_nothing():
    lim = StartLimit(None, timer_s=600.0)
    assert all(lim.request(i, now=0.0) for i in range(1000))
    assert lim.release(3, "end", now=1.0) == []
    assert lim.cancel(4, now=1.0) == []
    assert lim.next_deadline() is None
    assert lim.metrics(now=2.0) == {}


def test_illegal_events_name_the_event_and_state():
    lim = StartLimit(1, timer_s=600.0)
    lim.request("a", now=0.0)
    lim.request("b", now=0.0)
    with pytest.raises(StartLimitError, match=r"'request' for rollout 'a' in state 'holding'"):
        lim.request("a", now=0.0)
    with pytest.raises(StartLimitError, match=r"'end' for rollout 'b' in state 'waiting'"):
        lim.release("b", "end", now=0.0)
    with pytest.raises(StartLimitError, match=r"'cancel' for rollout 'zz' in state 'absent'"):
        lim.cancel("zz", now=0.0)
    with pytest.raises(StartLimitError, match=r"'end' for rollout 'zz' in state 'absent'"):
        lim.release("zz", "end", now=0.0)
    lim.release("a", "first_call", now=0.0)
    with pytest.raises(StartLimitError, match=r"'cancel' for rollout 'a' in state 'released'"):
        lim.cancel("a", now=0.0)
    with pytest.raises(ValueError, match="release reason"):
        lim.release("b", "timer", now=0.0)


def test_time_never_goes_backwards():
    lim = StartLimit(1, timer_s=600.0)
    lim.request("a", now=3.0)
    with pytest.raises(ValueError, match=r"release at now=2\.0 is before the last event at 3\.0"):
        lim.release("a", "end", now=2.0)


@pytest.mark.parametrize("limit", [0, -1, True, 1.5, "2"])
def test_bad_limits_are_refused(limit):
    with pytest.raises(ValueError, match="max_starting_rollouts"):
        StartLimit(limit, timer_s=600.0)


def test_announcement_lines():
    assert announcement(None, group_workflow=True, largest_group_size=8, concurrent_rollouts=64) == []
    assert announcement(16, group_workflow=True, largest_group_size=8, concurrent_rollouts=64) == [
        ("info", "At most 16 rollouts start at once (train.max_starting_rollouts, experimental)")
    ]
    lines = announcement(4, group_workflow=False, largest_group_size=8, concurrent_rollouts=4)
    assert [level for level, _ in lines] == ["info", "warning", "warning", "info"]
    assert "no effect on training" in lines[1][1]
    assert "below the largest group size (8)" in lines[2][1]
    assert "can never bind" in lines[3][1]


def test_the_guide_example_runs(capsys):
    from pathlib import Path

    doc = Path(__file__).resolve().parents[2] / "docs" / "start-limit.md"
    [example] = re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), flags=re.S)
    exec(compile(example, str(doc), "exec"), {"__name__": "guide_example"})
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("a start slot (train.max_starting_rollouts) came back on its")
    assert f"'{PREFIX}releases/timer': 1.0" in out[1]


def announced(overrides, **build):
    from platoon.components import build_policy
    from platoon.policy.pool import EntrySpec, TaskPool

    cfg = schema_config(["train.batch_size=2", "environments.0.workflow_config.group_size=4", *overrides])
    pool = TaskPool.from_entries([EntrySpec("default", ["a", "b", "c"], group_size=4)])
    driver = build_policy(cfg, pool, **build).driver
    driver.start(now=0.0)  # the launch save, then the start itself
    driver.poll(now=0.0)
    first, again = driver.take_outbox(), driver.take_outbox()
    assert again.infos == [] and again.warnings == []  # once per start
    return first


def test_each_start_of_training_announces_the_limit_through_the_outbox():
    out = announced(["train.max_starting_rollouts=2"], group_workflow=False)
    assert "At most 2 rollouts start at once (train.max_starting_rollouts, experimental)" in out.infos
    assert [w for w in out.warnings if "max_starting_rollouts" in w] == [
        "train.max_starting_rollouts has no effect on training: its workflow is not a GroupRolloutWorkflow, whose "
        "members alone take start slots",
        "train.max_starting_rollouts (2) is below the largest group size (4): a group's members start in waves, and "
        "each keeps its full straggler grace"]
    out = announced(["train.max_starting_rollouts=8"])  # the default budget, 2 x 4 rollouts, never binds it
    assert [m for m in out.infos if "max_starting_rollouts" in m] == [
        "At most 8 rollouts start at once (train.max_starting_rollouts, experimental)",
        "train.max_starting_rollouts (8) can never bind: it is at least the 8 rollouts that can run at once"]
    assert not [w for w in out.warnings if "max_starting_rollouts" in w]
    out = announced([])  # no limit, nothing said
    assert not [m for m in out.infos + out.warnings if "max_starting_rollouts" in m]
