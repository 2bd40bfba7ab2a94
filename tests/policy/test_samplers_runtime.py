"""SamplerSet: resolution, static and adaptive decisions, fallback, counts, metrics, state and exact resume."""

from __future__ import annotations

import json
import math
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from platoon.components import resolve_samplers, sampler_set
from platoon.policy.pool import EntrySpec, TaskPool
from platoon.policy.recorder import StatsRecorder
from platoon.policy.samplers.base import Draw, Sampler, SamplerError, Slot, decision_key
from platoon.policy.samplers.member import SamplerSpec
from platoon.policy.samplers.runtime import Bound, SamplerSet, Token
from platoon.policy.samplers.uniform import UniformSampler
from platoon.policy.samplers.weighted import WeightedSampler
from platoon.policy.stats import GroupRecord, MemberResult

HERE = __name__


def pool(a: int = 6, b: int = 4, *, b_name: str = "b") -> TaskPool:
    return TaskPool.from_entries(
        [
            EntrySpec(
                "a",
                [f"a{i}" for i in range(a)],
                4,
                1.0,
                3,
                label=["x" if i % 2 == 0 else "w" for i in range(a)],
            ),
            EntrySpec(b_name, [f"b{i}" for i in range(b)], 8, 2.0, 5, label="y"),
        ],
        label_column="label",
    )


def sset(p=None, run="auto", run_options=None, entries=None, **kw) -> SamplerSet:
    return sampler_set(
        p or pool(),
        run_sampler=run,
        run_options=run_options or {},
        entry_samplers=entries or {},
        batch_size=4,
        seed=kw.pop("seed", 0),
        **kw,
    )


def test_the_set_takes_resolved_samplers_and_refuses_ones_that_do_not_fit():
    """The policy layer receives classes and parsed options (platoon.components resolves them): an entry's own sampler
    exactly when the run's hands slots, never one that hands slots itself."""
    p = pool()
    run, entries = resolve_samplers(p.entries, run_sampler="auto", run_options={}, entry_samplers={"b": ("uniform", {})})
    assert run == SamplerSpec("auto", WeightedSampler, {}) and set(entries) == {"a", "b"}
    sset = SamplerSet(p, run=run, entries=entries, batch_size=4, seed=0)
    assert sset.run_class is WeightedSampler and sset.entry_sampler_name("b") == "uniform@b"
    with pytest.raises(ValueError, match="'auto' hands slots: its entries' samplers are \\['a', 'b'\\], not \\[\\]"):
        SamplerSet(p, run=run, entries={}, batch_size=4, seed=0)
    uniform = SamplerSpec("uniform", UniformSampler, {})
    with pytest.raises(ValueError, match="'uniform' hands no slots"):
        SamplerSet(p, run=uniform, entries={"a": uniform}, batch_size=4, seed=0)
    with pytest.raises(ValueError, match=r"environments\[a\].task_sampler 'auto' hands slots; an entry's cannot"):
        SamplerSet(p, run=run, entries={"a": run, "b": uniform}, batch_size=4, seed=0)


def yes(_task: str) -> bool:
    return True


# ----------------------------------------------------------------------------------------------- plug-ins


class Raising(Sampler):
    adaptive = True

    def next(self, ctx):
        raise RuntimeError("boom")


class NoneWhileEligible(Sampler):
    adaptive = True

    def next(self, ctx):
        return None


class Refusing(Sampler):
    def next(self, ctx):
        return "not-a-task" if ctx.decision % 2 else Draw(ctx.task_ids[0], "custom")


class SlotRaising(Sampler):
    entry_slots = True

    def next(self, ctx):
        raise RuntimeError("no slot today")


class Chatty(Sampler):
    def next(self, ctx):
        return Draw(ctx.task_ids[ctx.decision % len(ctx.task_ids)], f"r{ctx.decision}")

    def metrics(self, stats):
        return {"fine": 1.0, "draws": 3.0, "draws/x": 1.0}


class NaNMetrics(Chatty):
    def metrics(self, stats):
        return {"bad": math.nan}


class Observer(Sampler):
    adaptive = True

    def __init__(self, setup, options):
        super().__init__(setup, options)
        self.seen: list[tuple[int, int]] = []

    def next(self, ctx):
        return next(t for t in ctx.task_ids if ctx.eligible(t))

    def observe(self, group):
        self.seen.append(group.key)
        if group.seq == 3:
            raise ValueError("cannot digest seq 3")


# ----------------------------------------------------------------------------------------------- resolution


def test_auto_is_uniform_for_one_plain_entry_else_weighted():
    one = TaskPool.from_entries([EntrySpec("a", ["t0", "t1"], 4)])
    s = sset(one)
    assert s.run_class is UniformSampler and s.run_name == "auto"
    assert s.static_decision(0).sampler == "auto"
    assert sset(one, entries={"a": ("pass_rate", {})}).run_class is WeightedSampler
    assert sset().run_class is WeightedSampler


def test_static_decisions_fill_static_slots_and_hand_tokens_to_adaptive_entries():
    s = sset(entries={"b": ("pass_rate", {})})
    answers = [s.static_decision(p) for p in range(9)]
    tokens = [a for a in answers if isinstance(a, Token)]
    bounds = [a for a in answers if isinstance(a, Bound)]
    assert len(tokens) == 6 and len(bounds) == 3  # weights 1 : 2
    assert all(t.entry == "b" and not t.fallback for t in tokens)
    assert [t.position for t in tokens] == [p for p, a in enumerate(answers) if isinstance(a, Token)]
    assert all(b.sampler == "uniform@a" and b.reason == "order" and b.row.entry == "a" for b in bounds)
    assert s.decisions() == {"auto": 9, "uniform@a": 3, "pass_rate@b": 0}
    assert s.entry_adaptive("b") and not s.entry_adaptive("a")
    with pytest.raises(SamplerError):
        s.adaptive_decision("a", eligible=yes, view=None, step=0, version=0)


def test_adaptive_decisions_respect_eligibility_and_do_not_count_nothing():
    p = pool()
    rec = StatsRecorder.for_pool(p)
    s = sset(p, run="pass_rate")
    assert s.run_adaptive
    with pytest.raises(SamplerError):
        s.static_decision(0)
    asked: list[str] = []

    def only_x(task_id: str) -> bool:
        asked.append(task_id)
        return p.rows[p.first_index(task_id)].label == "x"

    for _ in range(6):
        b = s.adaptive_decision(None, eligible=only_x, view=rec.view(0), step=0, version=0)
        assert b.row.label == "x" and b.sampler == "pass_rate"
    assert len(asked) == 6 * 3  # once per (label, group size) class a decision, not once per task
    assert (
        s.adaptive_decision(None, eligible=yes, view=rec.view(0), step=0, version=0, max_group_size=2) is None
    )
    assert s.adaptive_decision(None, eligible=lambda t: False, view=rec.view(0), step=0, version=0) is None
    assert s.decisions() == {"pass_rate": 6}
    b = s.adaptive_decision(None, eligible=yes, view=rec.view(0), step=0, version=0, max_group_size=4)
    assert b.row.entry == "a"


# ----------------------------------------------------------------------------------------------- fallback


def test_fallbacks_are_deterministic_from_the_key_and_counted():
    p = pool()
    rec = StatsRecorder.for_pool(p)
    runs = []
    for _ in range(2):
        s = sset(p, run=f"{HERE}:Raising")
        runs.append(
            [
                s.adaptive_decision(
                    None, eligible=lambda t: t.startswith("b"), view=rec.view(0), step=0, version=0
                )
                for _ in range(5)
            ]
        )
        warnings = s.take_warnings()
        assert len(warnings) == 1 and "raised RuntimeError: boom" in warnings[0]
    assert runs[0] == runs[1]
    assert all(b.reason == "fallback" and b.score is None and b.row.entry == "b" for b in runs[0])
    name = f"{HERE}:Raising"
    eligible_b = [r for r in p.rows if r.entry == "b"]
    assert runs[0][0].row == eligible_b[decision_key(0, name, 0) % 4]
    s = sset(p, run=f"{HERE}:NoneWhileEligible")
    assert s.adaptive_decision(None, eligible=yes, view=rec.view(0), step=0, version=0).reason == "fallback"
    assert "answered None while tasks were eligible" in s.take_warnings()[0]


def test_a_refused_static_answer_falls_back_to_key_modulo_rows():
    p = pool()
    s = sset(p, run="weighted", entries={"a": (f"{HERE}:Refusing", {})})
    bounds = [s.static_decision(pos) for pos in range(12)]
    a_bounds = [b for b in bounds if b.row.entry == "a"]
    assert [b.reason for b in a_bounds] == ["custom", "fallback", "custom", "fallback"]
    name = f"{HERE}:Refusing@a"
    assert a_bounds[1].row.index == decision_key(3, name, 1) % 6
    assert "not in its pool" in s.take_warnings()[0]


class BadDraws(Sampler):
    """Answers Draws with a reason or a score that cannot be recorded, in turn with good ones."""

    BAD = ({"reason": ""}, {"reason": "x" * 65}, {"score": True}, {"score": float("nan")})

    def next(self, ctx):
        bad = self.BAD[ctx.decision // 2 % len(self.BAD)] if ctx.decision % 2 else {}
        return Draw(ctx.task_ids[0], **{"reason": "custom", **bad})


def test_an_unrecordable_reason_or_score_is_refused_by_the_runtime_not_in_next():
    p = pool()
    s = sset(p, run="weighted", entries={"a": (f"{HERE}:BadDraws", {})})
    a_bounds = [b for b in (s.static_decision(pos) for pos in range(24)) if b.row.entry == "a"]
    assert [b.reason for b in a_bounds] == ["custom", "fallback"] * 4
    (warning,) = s.take_warnings()  # logged once per sampler and kind
    assert f"task sampler {HERE}:BadDraws@a: answered Draw(task_id='a::a0', reason=''" in warning
    assert "a draw's reason is a non-empty string of at most 64 characters" in warning and "falling back" in warning


def test_a_failing_slot_sampler_falls_back_by_weight_and_the_draw_is_the_runs():
    p = pool()
    rec = StatsRecorder.for_pool(p)
    s = sset(p, run=f"{HERE}:SlotRaising", entries={"b": ("pass_rate", {})})
    answers = [s.static_decision(pos) for pos in range(30)]
    share_b = sum(isinstance(a, Token) for a in answers) / 30
    assert 0.45 < share_b < 0.9  # b weighs 2 of 3
    assert all(a.fallback for a in answers if isinstance(a, Token))
    assert all(
        a.sampler == f"{HERE}:SlotRaising" and a.reason == "fallback" for a in answers if isinstance(a, Bound)
    )
    b = s.adaptive_decision("b", eligible=yes, view=rec.view(0), step=0, version=0, fallback_slot=True)
    assert (b.sampler, b.reason, b.score) == (f"{HERE}:SlotRaising", "fallback", None)


def test_a_core_samplers_failure_stops_the_run():
    s = sset()
    s.sampler("auto").next = lambda ctx: Slot("nowhere")
    with pytest.raises(SamplerError, match="auto failed at decision 0"):
        s.static_decision(0)


# ----------------------------------------------------------------------------------------------- metrics


def test_metrics_names_reasons_and_the_samplers_own():
    p = pool(b_name="b/c")

    def measure(fn, arg):  # a runtime that measures each decision at 1 ms
        try:
            return fn(arg), None, 0.001
        except Exception as exc:  # noqa: BLE001
            return None, exc, 0.001

    s = sset(p, entries={"a": (f"{HERE}:Chatty", {})}, measure=measure)
    for pos in range(60):
        s.static_decision(pos)
    s.note_reissue("uniform@b/c")
    m = s.metrics(None)
    ea, eb = "train/sampler/environment/a/", "train/sampler/environment/b--c/"
    assert m["train/sampler/draws"] == 61 and m[f"{ea}draws"] == 20 and m[f"{eb}draws"] == 41
    assert m[f"{eb}draws/order"] == 40 and m[f"{eb}draws/reissue"] == 1
    assert sum(1 for k in m if k.startswith(f"{ea}draws/r")) == 16 and m[f"{ea}draws/other"] == 4
    assert m[f"{ea}fine"] == 1.0 and f"{ea}draws/x" not in m and m[f"{ea}draws"] == 20
    assert m["train/sampler/decision_ms"] == pytest.approx(1.0) and m[
        f"{ea}decision_ms_max"
    ] == pytest.approx(1.0)
    assert any("reserved keys ['draws', 'draws/x']" in w for w in s.take_warnings())
    again = s.metrics(None)
    assert again["train/sampler/draws"] == 0 and f"{ea}draws" not in again  # reset per step


def test_non_finite_metrics_are_dropped_and_consumed_groups_feed_the_shares():
    s = sset(entries={"a": (f"{HERE}:NaNMetrics", {})})
    records = [
        GroupRecord(
            1,
            i,
            "a::a0",
            entry="a",
            sampler=f"{HERE}:NaNMetrics@a",
            score=0.5 + 0.1 * i,
            verdict="trained" if i else "uniform",
        )
        for i in range(3)
    ]
    records.append(GroupRecord(1, 9, "b::b0", entry="b", sampler="uniform@b", verdict="trained"))
    s.note_consumed(records)
    m = s.metrics(None)
    ea = "train/sampler/environment/a/"
    assert not any(k.endswith("bad") for k in m)
    assert m[f"{ea}predicted_informative"] == pytest.approx(0.6) and m[
        f"{ea}informative_share"
    ] == pytest.approx(2 / 3)
    assert m["train/sampler/informative_share"] == 0.75
    assert m["train/sampler/environment/b/informative_share"] == 1.0
    assert any("not a finite number" in w for w in s.take_warnings())


def test_observe_forwards_the_pools_records_in_draw_order():
    p = pool()
    rec = StatsRecorder.for_pool(p)
    s = sset(p, entries={"b": (f"{HERE}:Observer", {})})
    rec.add_listener(s.observe)
    for seq in (4, 3, 1, 0):
        rec.settle(
            GroupRecord(1, seq, "b::b0" if seq != 1 else "a::a0", entry="b" if seq != 1 else "a", verdict="failed")
        )
    rec.flush()
    assert s.sampler(f"{HERE}:Observer@b").seen == [(1, 0), (1, 3), (1, 4)]
    assert "cannot digest seq 3" in s.take_warnings()[0]


# ----------------------------------------------------------------------------------------------- state


def outcome(task_id: str, key: tuple[int, int], size: int) -> tuple[MemberResult, ...]:
    rate = (int(task_id.partition("::")[2][1:]) % 5) / 4  # a mixture's id: <entry>::<letter><number>
    rng = random.Random(f"{task_id}:{key}")
    return tuple(
        MemberResult(scored=float(rng.random() < rate), valid=True, versions={"main": (key[1] // 4,) * 2})
        for _ in range(size)
    )


class Loop:
    """Draws with a SamplerSet, records with a StatsRecorder, settles the oldest draws, as a runtime would."""

    def __init__(self, s: SamplerSet, rec: StatsRecorder):
        self.s, self.rec = s, rec
        self.position = 0
        self.seq = 0
        self.open: list[tuple[tuple[int, int], Bound]] = []
        self.trace: list[tuple] = []

    def bind(self, b: Bound) -> None:
        key = (1, self.seq)
        self.seq += 1
        self.rec.draw(
            *key,
            b.row.task_id,
            self.position,
            version=self.seq // 4,
            sampler=b.sampler,
            reason=b.reason,
            score=b.score,
        )
        self.open.append((key, b))
        self.trace.append((b.row.index, b.sampler, b.reason, b.score))

    def settle(self, order: list[int] | None = None, count: int = 2) -> None:
        done, self.open = self.open[:count], self.open[count:]
        for i in order or range(len(done)):
            if i < len(done):
                key, b = done[i]
                members = outcome(b.row.task_id, key, b.row.group_size)
                passes = sum(m.scored for m in members)
                self.rec.settle(
                    GroupRecord(
                        *key,
                        b.row.task_id,
                        entry=b.row.entry,
                        sampler=b.sampler,
                        members=members,
                        verdict="trained" if 0 < passes < len(members) else "uniform",
                        drawn_at={"main": key[1] // 4},
                    )
                )
                self.rec.fate(*key, "consumed")

    def step(self, order=None) -> None:
        s = self.s
        if s.run_adaptive:
            b = s.adaptive_decision(
                None, eligible=yes, view=self.rec.view(self.seq // 4), step=0, version=self.seq // 4
            )
            self.position += 1
        else:
            b = s.static_decision(self.position)
            self.position += 1
            if isinstance(b, Token):
                b = s.adaptive_decision(
                    b.entry, eligible=yes, view=self.rec.view(self.seq // 4), step=0, version=self.seq // 4
                )
        self.bind(b)
        if len(self.open) > 4:
            self.settle(order)

    def twin(self) -> Loop:
        s2 = sset(self.s.pool, run=self.s.run_name, entries=self._entries)
        rec2 = StatsRecorder.for_pool(self.s.pool)
        rec2.load_snapshot(self.rec.snapshot())
        assert s2.restore(self.s.state_dict(), self.position) == []
        t = Loop(s2, rec2)
        t.position, t.seq, t.open, t._entries = self.position, self.seq, list(self.open), self._entries
        return t


def make_loop(run: str, entries: dict) -> Loop:
    p = pool(8, 6)
    loop = Loop(sset(p, run=run, entries=entries), StatsRecorder.for_pool(p))
    loop._entries = entries
    return loop


CONFIGS = [("pass_rate", {}), ("auto", {"b": ("pass_rate", {"explore": 0.5})}), ("weighted", {})]


@settings(max_examples=20, deadline=None)
@given(config=st.sampled_from(CONFIGS), at=st.integers(0, 40), more=st.integers(1, 25))
def test_save_and_restore_at_any_decision_continues_identically(config, at, more):
    loop = make_loop(*config)
    for _ in range(at):
        loop.step()
    twin = loop.twin()
    for _ in range(more):
        loop.step()
        twin.step()
    assert twin.trace == loop.trace[at:]
    assert twin.s.decisions() == loop.s.decisions()


@settings(max_examples=20, deadline=None)
@given(st.data())
def test_draws_do_not_depend_on_the_order_groups_complete_in(data):
    config = data.draw(st.sampled_from(CONFIGS[:2]))
    runs = []
    for permute in (False, True):
        loop = make_loop(*config)
        for _ in range(30):
            order = data.draw(st.permutations(range(2))) if permute else None
            loop.step(order)
        runs.append((loop.trace, json.dumps(loop.rec.snapshot(), sort_keys=True)))
    assert runs[0] == runs[1]


def test_restore_refuses_records_that_do_not_fit_and_replays_static_counts():
    loop = make_loop("auto", {"b": ("pass_rate", {})})
    for _ in range(17):
        loop.step()
    state = loop.s.state_dict()
    assert set(state) == {"run", "entries"} and state["run"]["class"].endswith(":WeightedSampler")
    fresh = sset(loop.s.pool, entries={"b": ("pass_rate", {})})
    bad = {
        **state,
        "entries": {
            "a": {**state["entries"]["a"], "class": "x:Y"},
            "b": {**state["entries"]["b"], "state": {"window": "soon"}},
        },
    }
    warnings = fresh.restore(bad, 17)
    assert len(warnings) == 2 and "does not fit" in warnings[0] and "load_state_dict raised" in warnings[1]
    assert fresh.decisions() == {"auto": 17, "uniform@a": loop.s.decisions()["uniform@a"], "pass_rate@b": 0}
    one = sset(loop.s.pool, entries={"b": ("pass_rate", {})})
    assert one.restore(None, 17) == [] and one.decisions() == fresh.decisions()
    assert one.static_decision(20) and one.decisions()["auto"] == 21  # a jump re-syncs the counts


def test_restore_static_tokens_decides_them_again():
    s = sset()
    answers = [s.static_decision(p) for p in range(6)]
    b_positions = [p for p, a in enumerate(answers) if a.row.entry == "b"]
    twin = sset()
    twin.restore(s.state_dict(), 6)
    redone = twin.restore_static_tokens("b", b_positions, {b_positions[0]})
    assert [r.row for r in redone] == [answers[p].row for p in b_positions]
    assert redone[0].reason == "fallback" and redone[0].sampler == "auto" and redone[1].sampler == "uniform@b"


def test_state_dict_leaves_out_a_state_that_is_not_json():
    class Unsaveable(Sampler):
        def next(self, ctx):
            return Draw(ctx.task_ids[0])

        def state_dict(self):
            return {1: "int key"}

    s = sset()
    member = s._entries["a"]
    member.sampler = Unsaveable(member.setup, None)
    rec = s.state_dict()["entries"]["a"]
    assert "state" not in rec and "non-string key" in s.take_warnings()[0]
    assert Counter(s.component_records()[1]["environments"]) == Counter(["a", "b"])


def test_the_runs_seed_enters_every_samplers_decision_keys():
    """``train.seed`` plus, at entry level, the entry's seed, plus the options' seed (docs/task-samplers.md)."""
    s = sset(run="weighted", entries={"a": ("pass_rate", {"seed": 2}), "b": ("pass_rate", {})}, seed=11)
    assert s.sampler("pass_rate@a").setup.seed == 11 + 3 + 2  # entry a's seed is 3
    assert s.sampler("pass_rate@b").setup.seed == 11 + 5
    assert sset(run="pass_rate", run_options={"seed": 2}, seed=11).sampler().setup.seed == 13

    def draws(seed):
        t = sset(run="weighted", entries={"a": ("pass_rate", {})}, seed=seed)
        view = StatsRecorder.for_pool(t.pool).view(0)
        return [t.adaptive_decision("a", eligible=yes, view=view, step=0, version=0).row.task_id for _ in range(6)]

    assert draws(0) == draws(0) and draws(0) != draws(1)
