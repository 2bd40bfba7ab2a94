"""Per-task statistics: records, decay, totals, the store's routing, its posterior and its vectorised reads."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from platoon.policy.stats import (
    FATES,
    DecayedCounts,
    DecayedMean,
    GroupRecord,
    MemberResult,
    TaskStatsStore,
    band,
    decay,
    informative_at,
    pass_at,
)


def member(
    score: float | None, *, valid: bool | None = None, version: int | None = None, **kw
) -> MemberResult:
    versions = {"main": (version, version)} if version is not None else {}
    valid = score is not None if valid is None else valid
    return MemberResult(reward=score, scored=score, valid=valid, versions=versions, **kw)


def group(
    task: str,
    seq: int,
    scores,
    *,
    entry: str | None = "e",
    verdict: str | None = None,
    version: int = 0,
    start: int = 1,
) -> GroupRecord:
    members = tuple(member(s, version=version) for s in scores)
    if verdict is None:
        verdict = "trained" if len(set(scores)) > 1 else "uniform"
    return GroupRecord(
        start=start,
        seq=seq,
        task_id=task,
        entry=entry,
        members=members,
        verdict=verdict,
        drawn_at={"main": version},
    )


def store(n: int = 4, **kw) -> TaskStatsStore:
    tasks = [(f"t{i}", "e" if i < n - 1 else "f", "L" if i % 2 == 0 else "M") for i in range(n)]
    return TaskStatsStore(tasks, {"e": (4, 0.5), "f": (8, 1.0)}, **kw)


# ----------------------------------------------------------------------------------------------- records


def test_member_passes_at_threshold_and_flag_fixes_it_at_one():
    assert member(0.5).passes(0.5) and not member(0.4).passes(0.5)
    assert not member(None).passes(0.0)
    assert not member(1.0, valid=False).passes(0.5)
    assert not member(0.7, flag=True).passes(0.5)
    assert member(1.0, flag=True).passes(0.5)


def test_group_record_derived_values():
    g = GroupRecord(
        start=1,
        seq=0,
        task_id="t",
        members=(member(1.0, version=5), member(0.0, version=3), member(None, valid=False, version=1)),
        verdict="trained",
        drawn_at={"main": 7},
    )
    assert g.valid == 2 and g.passes(1.0) == 1
    assert g.oldest_version() == 1  # any member's span counts, valid or not
    assert g.kind(1.0) == "informative"
    assert GroupRecord(1, 0, "t", drawn_at={"main": 7}).oldest_version() == 7
    assert GroupRecord(1, 0, "t").oldest_version() is None


@pytest.mark.parametrize(
    ("scores", "valid", "kind"),
    [
        ((1.0, 1.0), (True, True), "all_pass"),
        ((0.0, 0.0), (True, True), "all_fail"),
        ((1.0, None), (True, False), "all_pass"),
        ((None, None), (False, False), "uniform_mixed"),
    ],
)
def test_kind_of_uniform_groups(scores, valid, kind):
    g = GroupRecord(
        1,
        0,
        "t",
        members=tuple(member(s, valid=v) for s, v in zip(scores, valid, strict=True)),
        verdict="uniform",
    )
    assert g.kind(1.0) == kind
    assert GroupRecord(1, 0, "t", verdict="failed").kind(1.0) is None


records = st.builds(
    GroupRecord,
    start=st.integers(1, 5),
    seq=st.integers(0, 1000),
    task_id=st.text(min_size=1, max_size=8),
    entry=st.none() | st.sampled_from(["a", "b/c"]),
    labels=st.dictionaries(st.just("label"), st.text(max_size=3)),
    group_size=st.integers(0, 8),
    sampler=st.sampled_from(["auto", "pass_rate@a"]),
    reason=st.sampled_from(["order", "exploit"]),
    score=st.none() | st.floats(0, 1),
    position=st.none() | st.integers(0, 100),
    drawn_at=st.fixed_dictionaries({"main": st.integers(0, 50)}),
    members=st.lists(
        st.builds(
            MemberResult,
            reward=st.none() | st.floats(-1, 1),
            scored=st.none() | st.floats(0, 1),
            valid=st.booleans(),
            steps=st.none() | st.integers(0, 9),
            versions=st.dictionaries(st.just("main"), st.tuples(st.integers(0, 9), st.integers(0, 9))),
            flag=st.booleans(),
        ),
        max_size=4,
    ).map(tuple),
    verdict=st.sampled_from(["trained", "uniform", "failed", "unknown"]),
)


@settings(max_examples=60, deadline=None)
@given(records)
def test_group_record_json_round_trip(record):
    assert GroupRecord.from_json(record.to_json()) == record


# ----------------------------------------------------------------------------------------------- decay


def test_decay_halves_every_32_versions_and_never_amplifies():
    assert decay(32) == 0.5 and decay(64) == 0.25
    assert decay(0) == decay(-5) == 1.0
    assert decay(10, None) == 1.0


def test_decayed_counts_add_newer_and_older_evidence():
    d = DecayedCounts()
    assert d.read(10) == (0.0, 0.0)
    d.add(2, 1, 10)
    d.add(1, 0, 42)  # newer: the stored counts age 32 versions first
    assert (d.passes, d.fails, d.version) == (2.0, 0.5, 42)
    d.add(4, 4, 10)  # older: discounted, the version stays
    assert (d.passes, d.fails, d.version) == (4.0, 2.5, 42)
    assert d.read(74) == (2.0, 1.25)
    assert d.read(0) == (4.0, 2.5)  # reading "before" the evidence does not amplify it
    assert DecayedCounts.from_json(d.to_json()) == d


def test_decayed_mean():
    m = DecayedMean()
    assert m.mean() is None
    m.add_value(2.0, 0)
    m.add_value(4.0, 32)
    assert m.mean() == pytest.approx((2.0 * 0.5 + 4.0) / 1.5)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(st.floats(-1e6, 1e6) | st.integers(0, 1000), max_size=6), st.integers(0, 80)),
                max_size=6))
def test_decayed_mean_add_values_is_add_value_of_each(batches):
    """A settle's batched add equals one ``add_value`` a value, float for float (newer, same and older versions:
    an ``is`` of the equality would be float rounding, so the reprs are compared)."""
    one, batched = DecayedMean(), DecayedMean()
    for values, version in batches:
        for value in values:
            one.add_value(value, version)
        batched.add_values(values, version)
        assert repr(batched) == repr(one)


# ----------------------------------------------------------------------------------------------- formulas


def beta_integral(a: float, b: float, f) -> float:
    """``E[f(p)]`` for p ~ Beta(a, b), by the trapezoid rule on ``x = (1 - cos(pi u)) / 2``, which crowds the grid
    at both ends, where the density of a small a or b is steep."""
    u = np.linspace(0.0, 1.0, 100_001)
    x = (1.0 - np.cos(np.pi * u)) / 2.0
    dx = np.pi / 2.0 * np.sin(np.pi * u)
    inside = (x > 0) & (
        x < 1
    )  # the ends weigh nothing: dx vanishes faster than the density grows (a, b > 1/2)
    xi = np.where(inside, x, 0.5)
    logpdf = (
        (a - 1) * np.log(xi)
        + (b - 1) * np.log1p(-xi)
        - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))
    )
    integrand = np.where(inside, np.exp(logpdf) * dx, 0.0) * f(x)
    return float(np.trapezoid(integrand, u))


@settings(max_examples=25, deadline=None)
@given(a=st.floats(0.75, 30.0), b=st.floats(0.75, 30.0), k=st.integers(1, 16))
def test_pass_at_and_informative_at_match_numeric_integration(a, b, k):
    assert pass_at(a, b, k) == pytest.approx(beta_integral(a, b, lambda p: 1 - (1 - p) ** k), abs=1e-6)
    expected = beta_integral(a, b, lambda p: 1 - p**k - (1 - p) ** k)
    assert informative_at(a, b, k) == pytest.approx(max(0.0, expected), abs=1e-6)


def test_formula_edges():
    assert pass_at(2.0, 3.0, 1) == pytest.approx(0.4)
    assert pass_at(2.0, 3.0, 0) == 0.0
    assert informative_at(2.0, 3.0, 1) == 0.0
    a, b = np.array([1.0, 2.0]), np.array([1.0, 5.0])
    assert np.allclose(informative_at(a, b, 4), [informative_at(1.0, 1.0, 4), informative_at(2.0, 5.0, 4)])


@pytest.mark.parametrize(
    ("rate", "name"),
    [
        (0.05, "zero"),
        (0.06, "low"),
        (0.2, "low"),
        (0.5, "mid"),
        (0.8, "high"),
        (0.949, "high"),
        (0.95, "solved"),
    ],
)
def test_band(rate, name):
    assert band(rate) == name


# ----------------------------------------------------------------------------------------------- the store


def test_settle_routes_to_task_entry_label_and_run():
    s = store()
    s.settle(group("t0", 0, [1.0, 0.0, 0.5, None], version=3))  # entry e: threshold 0.5
    s.settle(group("elsewhere", 1, [1.0]))  # outside the pool: run totals only
    t = s.task("t0")
    assert (t.groups, t.attempts, t.passes, t.informative_groups) == (1, 3, 2, 1)
    assert s.entry_totals["e"].groups == 1 and s.entry_totals["f"].groups == 0
    assert s.label_totals["L"].groups == 1 and s.label_totals["M"].groups == 0
    assert s.run.groups == 2 and s.run.passes == 3
    assert t.decayed.to_json() == [2.0, 1.0, 3]
    assert t.history[0].version == 3 and t.history[0].valid == 3 and t.history[0].passes == 2


def test_invalid_members_are_censored_but_the_group_counts():
    s = store()
    g = GroupRecord(
        1,
        0,
        "t0",
        entry="e",
        members=(member(1.0, valid=False, version=2),),
        verdict="uniform",
        drawn_at={"main": 2},
    )
    s.settle(g)
    t = s.task("t0")
    assert (t.groups, t.reported_groups, t.attempts, t.passes) == (1, 1, 0, 0)
    assert t.decayed.version is None
    assert s.counts("t0").no_evidence_streak == 1


def test_streaks_move_only_with_members_or_a_verdict():
    s = store()
    s.settle(group("t0", 0, [1.0, 1.0], verdict="uniform"))
    s.settle(group("t0", 1, [0.0, 0.0], verdict="uniform"))
    assert s.counts("t0").uniform_streak == 2
    s.settle(GroupRecord(1, 2, "t0", entry="e", verdict="unknown"))  # a plain list: no streak moves
    assert s.counts("t0").uniform_streak == 2 and s.counts("t0").no_evidence_streak == 0
    for seq in (3, 4, 5):
        s.settle(GroupRecord(1, seq, "t0", entry="e", verdict="failed"))  # a failed group: no evidence
    c = s.counts("t0")
    assert c.uniform_streak == 0 and c.no_evidence_streak == 3
    s.settle(group("t0", 6, [1.0, 0.0]))
    assert s.counts("t0").no_evidence_streak == 0


def test_history_keeps_the_newest_eight():
    s = store()
    for seq in range(11):
        s.settle(group("t0", seq, [1.0, 0.0], version=seq))
    assert [h.seq for h in s.task("t0").history] == list(range(3, 11))


def test_draws_fates_reissue_and_loss():
    s = store()
    s.draw(1, 0, "t0", 0)
    s.draw(1, 1, "t1", 1)
    s.draw(1, 2, "t0", 2)
    with pytest.raises(ValueError):
        s.draw(1, 0, "t2", 3)
    assert s.counts("t0").drawn == 2 and s.counts("t0").outstanding == 2
    assert s.reissue((1, 1), (2, 0)) and not s.reissue((1, 1), (2, 1))
    s.fate(1, 0, "consumed")
    s.fate(9, 9, "skipped", task_id="t2")  # not outstanding: the task is named
    with pytest.raises(ValueError, match="unknown fate"):
        s.fate(1, 2, "eaten")
    assert s.lose_outstanding() == [(1, 2, "t0"), (2, 0, "t1")]
    t0, t1, t2 = (s.task(t) for t in ("t0", "t1", "t2"))
    assert t0.fates == {**dict.fromkeys(FATES, 0), "consumed": 1, "lost": 1} and t0.outstanding == 0
    assert t1.fates["lost"] == 1 and t1.drawn == 1  # a reissue is not a second draw
    assert t2.fates["skipped"] == 1 and t2.drawn == 0
    assert s.outstanding_draws() == []


def test_posterior_prior_centre_from_entry_evidence_and_its_cache():
    s = store()
    assert s.posterior("t0", 0) == (1.0, 1.0)  # no evidence anywhere: m = 1/2
    s.settle(group("t0", 0, [1.0, 1.0, 1.0, 0.0], version=0))
    # entry e: P, F = 3, 1 -> m = 4/6; task t1 has no evidence of its own
    assert s.posterior("t1", 0) == pytest.approx((2 * 4 / 6, 2 * 2 / 6))
    assert s.posterior("t0", 0) == pytest.approx((2 * 4 / 6 + 3, 2 * 2 / 6 + 1))
    # 32 versions later the evidence weighs half, in the task's counts and in the entry's prior centre
    m = (1 + 1.5) / (2 + 2.0)
    assert s.posterior("t0", 32) == pytest.approx((2 * m + 1.5, 2 * (1 - m) + 0.5))
    assert s.posterior("t3", 0) == (1.0, 1.0)  # entry f has no evidence
    s.settle(group("t1", 1, [0.0, 0.0], version=0))  # a settle clears the cached centre
    assert s.posterior("t2", 0) == pytest.approx((2 * 4 / 8, 2 * 4 / 8))


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 5),
            st.lists(st.sampled_from([0.0, 1.0, None]), min_size=1, max_size=4),
            st.integers(0, 60),
        ),
        max_size=25,
    ),
    st.integers(0, 100),
)
def test_array_reads_equal_the_per_task_reads(settles, now):
    s = store(6)
    for seq, (task, scores, version) in enumerate(settles):
        s.settle(
            GroupRecord(
                1,
                seq,
                f"t{task}",
                entry="e" if task < 5 else "f",
                verdict="uniform",
                members=tuple(member(x, valid=x is not None, version=version) for x in scores),
                drawn_at={"main": version},
            )
        )
    ids = s.ids
    a, b = s.posterior_arrays(ids, now)
    assert [(x, y) for x, y in zip(a.tolist(), b.tolist(), strict=True)] == [s.posterior(t, now) for t in ids]
    sub = np.array([4, 1])
    a2, b2 = s.posterior_arrays(ids, now, sub)
    assert a2.tolist() == [a[4], a[1]] and b2.tolist() == [b[4], b[1]]
    counts = s.count_arrays(ids)
    for i, t in enumerate(ids):
        c = s.counts(t)
        assert (counts.groups[i], counts.no_evidence_streak[i], counts.uniform_streak[i]) == (
            c.groups,
            c.no_evidence_streak,
            c.uniform_streak,
        )
    assert not counts.groups.flags.writeable


def test_array_reads_of_ids_outside_the_store():
    s = store()
    s.draw(1, 0, "t1", 0)
    ids = ("t1", "nope", "t0")
    c = s.count_arrays(ids)
    assert c.outstanding.tolist() == [1, 0, 0] and math.isnan(c.evidence_version[1])
    a, b = s.posterior_arrays(ids, 0)
    assert (a[1], b[1]) == (1.0, 1.0)
    assert isinstance(s.positions(s.ids[1:3]), slice)


def test_snapshot_round_trip_drops_tasks_that_left():
    s = store()
    s.settle(group("t0", 0, [1.0, 0.0], version=1))
    s.settle(group("t2", 1, [0.0, 0.0], version=2))
    s.draw(1, 2, "t2", 5)
    s.fate(1, 2, "stale")
    s.draw(1, 3, "t0", 6)
    data = s.to_json()
    twin = store()
    twin.load_json(data)
    assert twin.to_json() == data
    other = TaskStatsStore([("t0", "e", "L"), ("new", "e", "L")], {"e": (4, 0.5)})
    other.load_json(data)
    assert other.task("t0").groups == 1 and other.task("new").groups == 0
    assert "t2" not in other.to_json()["tasks"] and "f" not in other.entry_totals
    assert other.outstanding_draws() == [(1, 3, "t0", 6)]
    with pytest.raises(ValueError, match="malformed"):
        other.load_json({"run": {}})
    assert other.task("t0").groups == 1  # a failed load changes nothing
