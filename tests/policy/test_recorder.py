"""The recorder: settled records held and applied in draw order, events with the fields of 1.9, snapshots."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from platoon.policy.pool import EntrySpec, TaskPool
from platoon.policy.recorder import StatsRecorder
from platoon.policy.stats import GroupRecord, MemberResult


def pool() -> TaskPool:
    return TaskPool.from_entries(
        [EntrySpec("a", ["t0", "t1", "t2"], 2, 1.0, 0, 0.5), EntrySpec("b", ["u0", "u1"], 4, 1.0, 0)]
    )


def record(seq: int, task: str, passes: int, size: int = 2, version: int = 0, start: int = 1) -> GroupRecord:
    members = tuple(
        MemberResult(
            reward=float(i < passes),
            scored=float(i < passes),
            valid=True,
            versions={"main": (version, version + 1)},
        )
        for i in range(size)
    )
    verdict = "trained" if 0 < passes < size else "uniform"
    return GroupRecord(
        start=start,
        seq=seq,
        task_id=task,
        entry="a" if task.startswith("a::") else "b",
        members=members,
        verdict=verdict,
        drawn_at={"main": version},
        position=seq,
    )


TASKS = ["a::t0", "a::t1", "a::t2", "b::u0", "b::u1"]


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_statistics_do_not_depend_on_completion_order(data):
    n = data.draw(st.integers(1, 24))
    groups = [
        record(seq, TASKS[(seq * 7) % 5], data.draw(st.integers(0, 2)), version=seq // 3) for seq in range(n)
    ]
    cuts = sorted(data.draw(st.sets(st.integers(1, n), max_size=4)) | {n})

    def run(permute: bool) -> tuple[str, list[tuple[int, int]]]:
        rec = StatsRecorder.for_pool(pool())
        seen: list[tuple[int, int]] = []
        rec.add_listener(lambda r: seen.append(r.key))
        lo = 0
        for hi in cuts:
            batch = groups[lo:hi]
            if permute:
                batch = data.draw(st.permutations(batch))
            for g in batch:
                rec.settle(g)
            rec.flush()
            lo = hi
        return json.dumps(rec.snapshot(), sort_keys=True), seen

    in_order, permuted = run(False), run(True)
    assert in_order == permuted
    assert permuted[1] == sorted(permuted[1])


def test_settles_are_held_until_a_flush_point():
    rec = StatsRecorder.for_pool(pool())
    rec.draw(1, 0, "a::t0", 0, version=0, sampler="auto", reason="order")
    rec.settle(record(0, "a::t0", 1))
    assert rec.held == 1 and rec.peek_store().counts("a::t0").groups == 0
    assert rec.peek_store().counts("a::t0").outstanding == 1
    rec.fate(1, 0, "consumed")  # fates act at once, without a flush
    assert rec.peek_store().counts("a::t0").outstanding == 0 and rec.held == 1
    assert rec.store.counts("a::t0").groups == 1 and rec.held == 0
    rec.settle(record(1, "a::t1", 2))
    assert rec.view(0).counts("a::t1").groups == 1  # a view flushes too


def test_events_carry_exactly_the_fields_of_the_log():
    rec = StatsRecorder.for_pool(pool())
    rec.draw(1, 0, "a::t0", 3, version=2, sampler="pass_rate@a", reason="exploit", score=0.5)
    rec.draw(1, 1, "b::u0", 4, version=2, sampler="auto", reason="order")
    rec.settle(record(0, "a::t0", 1, version=2))
    rec.fate(1, 0, "rejected", rule="informative", admission="uniform")
    assert rec.reissue((1, 1), (2, 0), version=3, sampler="auto")
    assert not rec.reissue((1, 1), (2, 1), version=3, sampler="auto")
    rec.lose_outstanding()
    assert rec.take_events() == [
        {
            "event": "draw",
            "start": 1,
            "seq": 0,
            "task_id": "a::t0",
            "position": 3,
            "version": 2,
            "sampler": "pass_rate@a",
            "reason": "exploit",
            "score": 0.5,
        },
        {
            "event": "draw",
            "start": 1,
            "seq": 1,
            "task_id": "b::u0",
            "position": 4,
            "version": 2,
            "sampler": "auto",
            "reason": "order",
        },
        {
            "event": "settle",
            "start": 1,
            "seq": 0,
            "task_id": "a::t0",
            "verdict": "trained",
            "valid": 2,
            "passes": 1,
            "version": 2,
        },
        {
            "event": "fate",
            "start": 1,
            "seq": 0,
            "fate": "rejected",
            "rule": "informative",
            "admission": "uniform",
        },
        {
            "event": "draw",
            "start": 2,
            "seq": 0,
            "task_id": "b::u0",
            "position": 4,
            "version": 3,
            "sampler": "auto",
            "reason": "reissue",
            "reissues": [1, 1],
        },
        {"event": "fate", "start": 2, "seq": 0, "fate": "lost"},
    ]
    assert rec.take_events() == []
    u0 = rec.store.task("b::u0")
    assert u0.drawn == 1 and u0.fates["lost"] == 1


def test_settle_event_counts_passes_at_the_entry_threshold():
    rec = StatsRecorder.for_pool(pool())
    g = GroupRecord(
        1,
        0,
        "a::t0",
        entry="a",
        verdict="trained",
        members=(MemberResult(scored=0.6, valid=True), MemberResult(scored=0.4, valid=True)),
    )
    rec.settle(g)
    assert rec.take_events()[0]["passes"] == 1  # entry a's threshold is 0.5
    with pytest.raises(ValueError, match="unknown fate"):
        rec.fate(1, 0, "vanished")


def test_snapshot_round_trip_and_format():
    rec = StatsRecorder.for_pool(pool(), start=2)
    rec.draw(2, 0, "a::t0", 0, version=0, sampler="auto", reason="order")
    rec.draw(2, 1, "a::t1", 1, version=0, sampler="auto", reason="order")
    rec.settle(record(0, "a::t0", 1, start=2))
    snap = rec.snapshot()
    assert snap["format"] == 1 and snap["start"] == 2 and snap["next_seq"] == 2
    assert snap["outstanding"] == [[2, 0, "a::t0", 0], [2, 1, "a::t1", 1]]
    assert snap["tasks"]["a::t0"]["groups"] == 1
    json.dumps(snap, allow_nan=False)
    twin = StatsRecorder.for_pool(pool(), start=3)
    twin.settle(record(5, "b::u0", 0))
    twin.load_snapshot(json.loads(json.dumps(snap)))
    assert twin.held == 0
    assert {k: v for k, v in twin.snapshot().items() if k not in ("start", "next_seq")} == {
        k: v for k, v in snap.items() if k not in ("start", "next_seq")
    }
    with pytest.raises(ValueError, match="format"):
        twin.load_snapshot({**snap, "format": 2})


def test_a_failure_inside_stops_the_statistics_but_not_the_caller():
    rec = StatsRecorder.for_pool(pool())
    rec.settle(record(0, "a::t0", 1))

    def broken(_record):
        raise RuntimeError("disk on fire")

    rec.peek_store().settle = broken  # type: ignore[method-assign]
    rec.flush()
    assert rec.stopped and rec.held == 0
    assert "stopped" in rec.take_warnings()[0]
    assert rec.snapshot() is None
    assert not rec.view(3).live
    rec.settle(record(1, "a::t1", 1))
    rec.draw(1, 5, "a::t1", 5, version=0, sampler="auto", reason="order")
    assert rec.held == 0


def test_a_listener_that_raises_is_reported_and_ignored():
    rec = StatsRecorder.for_pool(pool())
    calls = []
    rec.add_listener(lambda r: 1 / 0)
    rec.add_listener(lambda r: calls.append(r.seq))
    rec.settle(record(1, "a::t1", 1))
    rec.settle(record(0, "a::t0", 1))
    rec.flush()
    assert calls == [0, 1] and not rec.stopped
    assert all("ZeroDivisionError" in w for w in rec.take_warnings())


def test_a_view_of_statistics_that_never_started_is_empty():
    rec = StatsRecorder.for_pool(pool())
    rec.settle(record(0, "a::t0", 1))
    view = rec.view(4, live=False)
    assert not view.live and view.counts("a::t0").groups == 0 and view.now == 4
