"""Core's samplers: uniform passes, weighted shares, and pass_rate's filters, cap, exploration and state."""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from platoon.config.components import PassRateOptions
from platoon.policy.samplers.base import (
    Draw,
    EntryInfo,
    Row,
    SamplerContext,
    SamplerSetup,
    Slot,
    TaskStatsView,
    decision_key,
)
from platoon.policy.samplers.pass_rate import PassRateSampler
from platoon.policy.samplers.uniform import UniformSampler
from platoon.policy.samplers.weighted import WeightedSampler
from platoon.policy.stats import GroupRecord, MemberResult, TaskStatsStore, informative_at


def setup(ids, *, level="run", entry=None, entries=None, seed=0, name="s") -> SamplerSetup:
    if entries is None:
        entries = {
            "e": EntryInfo(group_size=4, name="e", weight=1.0, seed=seed, index=0, task_ids=tuple(ids))
        }
    return SamplerSetup(
        name=name, level=level, entry=entry, task_ids=tuple(ids), entries=entries, batch_size=4, seed=seed
    )


def ctx(s: SamplerSetup, decision: int, *, stats=None, eligible=None) -> SamplerContext:
    eligible = eligible or (lambda t: True)
    return SamplerContext(
        task_ids=s.task_ids,
        entry=s.entry,
        decision=decision,
        key=decision_key(s.seed, s.name, decision),
        eligible=eligible,
        stats=stats,
    )


def test_decision_key():
    digest = hashlib.sha256(b"7:pass_rate@hard:12").digest()
    assert decision_key(7, "pass_rate@hard", 12) == int.from_bytes(digest[:16], "big")
    assert decision_key(7, "pass_rate@hard", 12) < 2**128


def test_a_draw_takes_what_it_is_given_and_the_runtime_judges_it():
    """As in 0.4.0: a bad reason or score is refused where the answer is accepted, not in the sampler's next."""
    assert Draw("t", reason="").reason == ""
    assert Draw("t", score=float("nan")).task_id == "t"
    assert Draw("t", "x" * 64, 1).score == 1


# ----------------------------------------------------------------------------------------------- uniform


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 40), passes=st.integers(1, 3), level=st.sampled_from(["run", "entry"]))
def test_uniform_visits_every_row_exactly_once_per_pass(n, passes, level):
    ids = [f"t{i % max(1, n - 2)}" for i in range(n)]  # ids may repeat: rows are drawn one by one
    s = setup(ids, level=level, entry="e" if level == "entry" else None)
    sampler = UniformSampler(s, None)
    for p in range(passes):
        rows = [sampler.next(ctx(s, p * n + i)).index for i in range(n)]
        assert sorted(rows) == list(range(n))


def test_uniform_seeds():
    ids = [f"t{i}" for i in range(10)]
    entries = {
        "a": EntryInfo(4, name="a", seed=3, index=0, task_ids=tuple(ids)),
        "b": EntryInfo(4, name="b", seed=5, index=1, task_ids=tuple(ids)),
    }
    run = setup(ids, entries=entries)
    order = np.random.default_rng(42 + 101).permutation(10).tolist()
    assert [UniformSampler(run).next(ctx(run, 10 + i)).index for i in range(10)] == order
    entry_b = setup(ids, level="entry", entry="b", entries=entries, name="uniform@b")
    expected = list(range(10))
    random.Random(5 + 10007 + 101 * 2).shuffle(expected)
    sampler = UniformSampler(entry_b)
    assert [sampler.next(ctx(entry_b, 20 + i)).index for i in range(10)] == expected
    assert sampler.next(ctx(entry_b, 3)).index == sampler.next(ctx(entry_b, 3)).index  # any order of asking
    with pytest.raises(ValueError):
        UniformSampler(setup([]))


# ----------------------------------------------------------------------------------------------- weighted


@settings(max_examples=40, deadline=None)
@given(weights=st.lists(st.floats(0.1, 10), min_size=1, max_size=5), n=st.integers(1, 300))
def test_weighted_gives_each_entry_its_share(weights, n):
    entries = {
        f"e{i}": EntryInfo(4, name=f"e{i}", weight=w, index=i, task_ids=("t",)) for i, w in enumerate(weights)
    }
    s = setup(["t"], entries=entries)
    sampler = WeightedSampler(s)
    counts = Counter(sampler.next(ctx(s, d)).entry for d in range(n))
    # largest credit first: the chosen credit is above 0 before its -1 (the credits sum to 1 then), so no credit
    # falls to -1 (no entry gets a whole slot ahead of its share), and as they sum to 0, none exceeds k - 1
    for i, w in enumerate(weights):
        ahead = counts[f"e{i}"] - n * w / sum(weights)
        assert -(len(weights) - 1) - 1e-9 <= ahead < 1.0 + 1e-9
    fresh = WeightedSampler(s)
    assert fresh.next(ctx(s, n - 1)) == sampler.next(ctx(s, n - 1))  # a function of the decision alone


def test_weighted_equal_weights_rotate_and_tasks_weight():
    entries = {
        "a": EntryInfo(4, name="a", weight=1.0, index=0, task_ids=("t",)),
        "b": EntryInfo(4, name="b", weight=1.0, index=1, task_ids=("u",)),
    }
    s = setup(["t", "u"], entries=entries)
    assert [WeightedSampler(s).next(ctx(s, d)).entry for d in range(4)] == ["a", "b", "a", "b"]
    assert isinstance(WeightedSampler(s).next(ctx(s, 0)), Slot)
    with pytest.raises(ValueError):
        WeightedSampler(setup([], entries={}))


# ----------------------------------------------------------------------------------------------- pass_rate


def rate_store(ids, rates, *, groups=3, size=4, version=0, nostreak=()) -> TaskStatsStore:
    """A store where task i settled ``groups`` groups of ``size`` with ``round(rate * size)`` passes each."""
    st_ = TaskStatsStore([(t, "e", "L") for t in ids], {"e": (size, 1.0)})
    seq = 0
    for t, rate in zip(ids, rates, strict=True):
        for _ in range(groups if t not in nostreak else 0):
            k = round(rate * size)
            members = tuple(
                MemberResult(scored=float(i < k), valid=True, versions={"main": (version, version)})
                for i in range(size)
            )
            st_.settle(
                GroupRecord(
                    1, seq, t, entry="e", members=members, verdict="trained" if 0 < k < size else "uniform"
                )
            )
            seq += 1
        for _ in range(3 if t in nostreak else 0):
            st_.settle(GroupRecord(1, seq, t, entry="e", verdict="failed"))
            seq += 1
    return st_


def make(ids, options=None, **kw) -> tuple[PassRateSampler, SamplerSetup]:
    s = setup(ids, name="pass_rate", **kw)
    return PassRateSampler(s, PassRateOptions(**(options or {}))), s


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_window_cap_holds_unless_every_eligible_task_reached_it(data):
    n = data.draw(st.integers(2, 8))
    cap = data.draw(st.integers(1, 3))
    ids = [f"t{i}" for i in range(n)]
    sampler, s = make(
        ids, {"max_draws_per_epoch": cap, "explore": data.draw(st.sampled_from([0.0, 0.5, 1.0]))}
    )
    view = TaskStatsView(rate_store(ids, [0.5] * n), 0)
    window: Counter = Counter()
    for d in range(3 * n):
        if d % n == 0:
            window.clear()
        allowed = set(data.draw(st.sets(st.sampled_from(ids), min_size=1)))
        answer = sampler.next(ctx(s, d, stats=view, eligible=allowed.__contains__))
        assert answer.task_id in allowed
        if any(window[t] < cap for t in allowed):
            assert window[answer.task_id] < cap
        window[answer.task_id] += 1


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_outstanding_limit_and_waiting_for_a_first_result(data):
    n = data.draw(st.integers(2, 8))
    limit = data.draw(st.integers(1, 2))
    ids = [f"t{i}" for i in range(n)]
    seen = data.draw(st.sets(st.sampled_from(ids)))
    store_ = TaskStatsStore([(t, "e", "L") for t in ids], {"e": (4, 1.0)})
    for seq, t in enumerate(sorted(seen)):
        store_.settle(
            GroupRecord(
                1,
                seq,
                t,
                entry="e",
                verdict="trained",
                members=(MemberResult(scored=1.0, valid=True), MemberResult(scored=0.0, valid=True)),
            )
        )
    sampler, s = make(ids, {"max_outstanding_per_task": limit, "max_draws_per_epoch": None})
    view = TaskStatsView(store_, 0)
    for d in range(2 * n):
        counts = {t: store_.counts(t) for t in ids}
        free = [t for t in ids if not (counts[t].outstanding and not counts[t].groups)]
        under = [t for t in free if counts[t].outstanding < limit]
        answer = sampler.next(ctx(s, d, stats=view))
        if under:
            assert answer.task_id in under
        elif free:  # the limit would leave nothing: the fewest outstanding
            assert counts[answer.task_id].outstanding == min(counts[t].outstanding for t in free)
        store_.draw(2, d, answer.task_id, d)


def test_explore_takes_its_share_and_exploit_prefers_informative_tasks():
    ids = [f"t{i}" for i in range(50)]
    rates = [0.5 if i % 10 == 0 else (0.0 if i % 2 else 1.0) for i in range(50)]
    store_ = rate_store(ids, rates, groups=6)
    sampler, s = make(ids, {"max_draws_per_epoch": None})
    view = TaskStatsView(store_, 0)
    reasons: Counter = Counter()
    exploit_mixed = 0
    for d in range(2000):
        answer = sampler.next(ctx(s, d, stats=view))
        reasons[answer.reason] += 1
        if answer.reason == "exploit":
            exploit_mixed += rates[ids.index(answer.task_id)] == 0.5
        a, b = view.posterior(answer.task_id)
        assert answer.score == pytest.approx(informative_at(a, b, 4))
    assert abs(reasons["explore"] / 2000 - 0.2) < 0.04
    assert exploit_mixed / reasons["exploit"] > 0.9


def test_explore_draws_the_least_recently_drawn():
    ids = [f"t{i}" for i in range(6)]
    sampler, s = make(ids, {"explore": 1.0, "max_draws_per_epoch": None})
    view = TaskStatsView(rate_store(ids, [0.5] * 6), 0)
    first = [sampler.next(ctx(s, d, stats=view)).task_id for d in range(6)]
    assert sorted(first) == ids  # never drawn (-1) first
    assert [sampler.next(ctx(s, 6 + d, stats=view)).task_id for d in range(6)] == first


def test_tasks_without_evidence_are_reached_by_exploration_only():
    ids = [f"t{i}" for i in range(8)]
    blind = {"t0", "t1", "t2"}
    view = TaskStatsView(rate_store(ids, [0.5] * 8, nostreak=blind), 0)
    sampler, s = make(ids, {"max_draws_per_epoch": None})
    answers = [sampler.next(ctx(s, d, stats=view)) for d in range(300)]
    assert not any(a.task_id in blind for a in answers if a.reason == "exploit")
    assert any(a.task_id in blind for a in answers if a.reason == "explore")


@pytest.mark.parametrize("n", [300, 3000])
def test_candidates_bound_the_thompson_pool(n):
    ids = [f"t{i}" for i in range(n)]
    sampler, s = make(ids, {"candidates": 16, "explore": 0.0})
    view = TaskStatsView(rate_store(ids, [0.5] * n, groups=1), 0)
    allowed = set(ids[: n // 3])  # a third eligible: choice; all eligible: rejection sampling
    for d in range(40):
        elig = allowed.__contains__ if d % 2 else (lambda t: True)
        answer = sampler.next(ctx(s, d, stats=view, eligible=elig))
        assert answer.reason == "exploit" and (d % 2 == 0 or answer.task_id in allowed)


def test_without_live_statistics_it_explores_and_warns_once():
    ids = ["a", "b", "c"]
    sampler, s = make(ids)
    answers = [sampler.next(ctx(s, d)) for d in range(6)]
    assert {a.reason for a in answers} == {"explore"} and all(a.score is None for a in answers)
    assert len(sampler.__dict__["_platoon_warnings"]) == 1
    assert sampler.next(ctx(s, 6, eligible=lambda t: False)) is None


def test_state_round_trip_and_refusals():
    ids = [f"t{i}" for i in range(5)]
    sampler, s = make(ids)
    view = TaskStatsView(rate_store(ids, [0.5] * 5), 0)
    for d in range(12):
        sampler.next(ctx(s, d, stats=view))
    state = sampler.state_dict()
    assert state["window"] == 2 and sum(state["previous_window_draws"].values()) == 5
    twin, _ = make(ids)
    twin.load_state_dict(state)
    assert [twin.next(ctx(s, d, stats=view)) for d in range(12, 30)] == [
        sampler.next(ctx(s, d, stats=view)) for d in range(12, 30)
    ]
    moved, _ = make(["t0", "new"])
    moved.load_state_dict(state)
    assert set(moved.state_dict()["last_drawn"]) <= {"t0"}
    for bad in (
        {"window": 1},
        [],
        {**state, "window": -1},
        {**state, "window": True},
        {**state, "last_drawn": {"t0": "x"}},
        {**state, "window_draws": {"t0": -1}},
    ):
        with pytest.raises(ValueError):
            make(ids)[0].load_state_dict(bad)
    fresh, _ = make(ids)
    fresh.load_state_dict({})
    assert fresh.state_dict() == make(ids)[0].state_dict()


def test_metrics_cover_the_decisions_since_the_last_read():
    ids = [f"t{i}" for i in range(20)]
    sampler, s = make(ids, {"max_draws_per_epoch": 1})
    view = TaskStatsView(rate_store(ids, [0.5] * 20, version=0), 10)
    for d in range(10):
        sampler.next(ctx(s, d, stats=view, eligible=lambda t: t in ("t0", "t1", "t2", "t3")))
    top2 = sum(sorted(sampler.state_dict()["window_draws"].values())[-2:])
    m = sampler.metrics(view)
    assert m["eligible_share"] == pytest.approx(np.mean([4, 3, 2, 1] + [4] * 6) / 20)
    assert m["cap_lifted"] == pytest.approx(0.6)
    assert m["evidence_age"] == 10.0 and 0 < m["prior_share"] < 1
    assert m["top10_share"] == pytest.approx(top2 / 10)  # the top 2 of 20 tasks
    assert "eligible_share" not in sampler.metrics(view)


def test_check_refuses_groups_of_one():
    ctx_ = {"level": "run", "entry": None, "entries": {"a": {"group_size": 4}, "b": {"group_size": 1}}}
    with pytest.raises(ValueError, match=r"group of one.*environments\[b\]"):
        PassRateSampler.check(PassRateOptions(), ctx_)
    PassRateSampler.check(PassRateOptions(), {**ctx_, "level": "entry", "entry": "a"})


def test_a_row_answer_is_internal():
    assert Row(3).reason == "order"


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_pass_rate_restored_at_any_decision_answers_identically(data):
    n = data.draw(st.integers(2, 12))
    ids = [f"t{i}" for i in range(n)]
    options = {
        "explore": data.draw(st.sampled_from([0.0, 0.2, 1.0])),
        "max_draws_per_epoch": data.draw(st.sampled_from([None, 1, 3])),
        "candidates": data.draw(st.sampled_from([1, 4096])),
    }
    view = TaskStatsView(rate_store(ids, [i / n for i in range(n)], groups=2), 3)
    at, more = data.draw(st.integers(0, 3 * n)), data.draw(st.integers(1, 2 * n))
    allowed = [set(data.draw(st.sets(st.sampled_from(ids), min_size=1))) for _ in range(at + more)]
    sampler, s = make(ids, options)
    answers = [sampler.next(ctx(s, d, stats=view, eligible=allowed[d].__contains__)) for d in range(at)]
    twin, _ = make(ids, options)
    twin.load_state_dict(json.loads(json.dumps(sampler.state_dict())))
    for d in range(at, at + more):
        assert twin.next(ctx(s, d, stats=view, eligible=allowed[d].__contains__)) == sampler.next(
            ctx(s, d, stats=view, eligible=allowed[d].__contains__)
        )
    assert all(a.task_id in allowed[d] for d, a in enumerate(answers))
