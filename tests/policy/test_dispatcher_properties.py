"""Properties of the dispatcher: rollout/group parity, completion-order independence, and a spec-level state machine
(permits, the horizon, staleness, start slots, label limits, one fate per draw, exact twins restored from a snapshot
taken at any point), whose invariants are read off the decisions and events the policy objects hand out."""

import copy
import json
import math
from collections import Counter
from dataclasses import dataclass, field

import pytest
from dispatch_harness import Script, build
from dispatch_spec import ExpectedStep, FateLedger, Settled, SlotModel, StepModel, datums_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from platoon.components import admission_set, sampler_set
from platoon.policy.dispatch_state import restore_exact, state_dict
from platoon.policy.dispatcher import DispatchConfig, Dispatcher, StartGroup
from platoon.policy.outputs import GroupOutput
from platoon.policy.permits import GrantPermit
from platoon.policy.pool import EntrySpec, TaskPool
from platoon.policy.recorder import StatsRecorder
from platoon.policy.start_limit import StartLimit
from platoon.policy.stats import MemberResult

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def datums_per_step(script):
    return [[d for g in step.groups for d in g.output.datums] for step in script.steps]


@FAST
@given(seed=st.integers(0, 50), group_size=st.integers(2, 5), batch_size=st.integers(1, 4),
       steps=st.integers(1, 4), sampler=st.sampled_from(["auto", "pass_rate"]))
def test_rollout_and_group_train_the_same_datums_at_max_staleness_0(seed, group_size, batch_size, steps, sampler):
    runs = [Script(build(permit_release=mode, max_staleness=0, group_size=group_size, batch_size=batch_size,
                         steps=steps, seed=seed, sampler=sampler), seed=seed).run()
            for mode in ("rollout", "group")]
    assert datums_per_step(runs[0]) == datums_per_step(runs[1])
    assert len(runs[0].steps) == steps


@FAST
@given(seed=st.integers(0, 50), perm_seed=st.integers(0, 1000),
       sampler_admission=st.sampled_from([("auto", "all"), ("pass_rate", "all"), ("auto", "informative")]))
def test_completion_order_changes_no_draw(seed, perm_seed, sampler_admission):
    """Permuting when rollouts finish (same outcomes) changes no draw and no trained datum. (An adaptive sampler
    beside a refilling admission rule is left out on purpose: a refill decides mid-step, so *which* groups have
    settled by then depends on timing; the statistics it reads still apply them in draw order.)"""
    import random

    sampler, admission = sampler_admission

    def permuted(key, index, task):
        return random.Random(f"{perm_seed}:{key}:{index}").uniform(0.1, 5.0)

    a = Script(build(max_staleness=0, seed=seed, sampler=sampler, admission=admission, steps=4), seed=seed).run()
    b = Script(build(max_staleness=0, seed=seed, sampler=sampler, admission=admission, steps=4), seed=seed,
               duration=permuted).run()
    draws = [[(e["task_id"], e["position"], e["reason"]) for e in s.d.take_events() if e["event"] == "draw"]
             for s in (a, b)]
    assert draws[0] == draws[1]
    assert datums_per_step(a) == datums_per_step(b)


def diff_paths(x, y, path=""):
    if isinstance(x, dict) and isinstance(y, dict):
        return [p for k in sorted(set(x) | set(y), key=str) for p in diff_paths(x.get(k), y.get(k), f"{path}.{k}")]
    return [] if x == y else [f"{path}: {x!r} != {y!r}"]


# -- the spec-level state machine ------------------------------------------------------------------------------------
# Two environments of different group sizes whose rows carry a label in the pool's label column (one row none),
# label limits, samplers static or adaptive (pass_rate for one environment under weighted, or for the run), both
# admission modes, both permit releases, and a start limit whose slots members take after their permits.

LABEL_COLUMN = "tier"
ENTRIES = [EntrySpec("a", ["a0", "a1", "a2", "a3"], 2, label=["x", "y", "x", "y"]),
           EntrySpec("b", ["b0", "b1", "b2"], 3, label=["y", None, "z"])]
STEPS = 6
TIMER_S = 5.0  # the start limit's timer (start_timer_s gives 600 s in a run)
TEARDOWN_WAIT_S = 4.0
SAMPLING = {"static": ("weighted", {}), "pass_rate@a": ("weighted", {"a": ("pass_rate", {})}),
            "pass_rate": ("pass_rate", {})}
ADMISSION = {"all": ("all", {}), "informative": ("informative", {}), "informative@a": ("all", {"a": ("informative", None)})}


def build_spec(kw: dict) -> Dispatcher:
    pool = TaskPool.from_entries(ENTRIES, label_column=LABEL_COLUMN)
    config = DispatchConfig(batch_size=kw["batch_size"], steps=STEPS, max_concurrent_rollouts=kw["permits"],
                            permit_release=kw["release"], max_staleness=kw["k"],
                            entry_staleness={} if kw["bound_b"] is None else {"b": kw["bound_b"]},
                            max_groups_per_step=kw["m"], label_limits=kw["limits"], teardown_wait_s=TEARDOWN_WAIT_S,
                            uniform_groups_update=kw["uniform_updates"])
    run_sampler, entry_samplers = SAMPLING[kw["sampling"]]
    samplers = sampler_set(pool, run_sampler=run_sampler, run_options={}, entry_samplers=entry_samplers,
                          batch_size=kw["batch_size"], seed=kw["seed"])
    recorder = StatsRecorder.for_pool(pool)
    recorder.add_listener(samplers.observe)
    run_rule, entry_rules = ADMISSION[kw["admission"]]
    rules = admission_set(run_rule=run_rule, run_options={}, entry_rules=entry_rules, entries=pool.entries,
                         batch_size=kw["batch_size"], label_column=LABEL_COLUMN)
    return Dispatcher(config, pool, samplers, recorder, rules, rolling=kw["rolling"])


@dataclass
class Member:
    index: int
    phase: str = "new"  # new, wait (for its permit), slotq (for its slot), up (starting), run, teardown, late, done
    permit: str | None = None  # held, none (a grant that holds no permit), back
    slot: str | None = None  # held, back
    slot_via: str | None = None  # now (taken at once) or granted (SlotGranted)
    entered_at: float = 0.0
    version: int | None = None  # the policy version its rollout sampled
    passed: bool | None = None  # None: it has no result (cancelled, or raised)
    teardown_due: float | None = None


@dataclass
class Group:
    key: tuple[int, int]
    task_id: str
    entry: str
    label: str | None
    size: int
    version: int
    members: list[Member]
    waiting: list[Member] = field(default_factory=list)  # blocks waiting for a permit, in the order they entered
    granted_any: bool = False
    returned: int = 0


ENDED = ("teardown", "late", "done")


class SpecMachine(RuleBasedStateMachine):
    """The dispatcher and the start limit driven by random interleavings of a runtime's events; every invariant is
    read off the decisions and events they hand out (docs/dispatch.md, docs/start-limit.md, docs/group-admission.md,
    docs/task-samplers.md), and a twin restored from the last snapshot must decide alike."""

    @initialize(release=st.sampled_from(["rollout", "rollout", "group"]), rolling=st.sampled_from([True, True, False]),
                k=st.sampled_from([0, 0, 1, 2, None]), batch_size=st.integers(1, 3), permits=st.integers(3, 7),
                sampling=st.sampled_from(sorted(SAMPLING)), admission=st.sampled_from(sorted(ADMISSION)),
                limits=st.dictionaries(st.sampled_from(["x", "y", "z"]), st.integers(1, 2)),
                slots=st.sampled_from([None, 1, 2, 3]), bound_b=st.sampled_from([None, 0]),
                m=st.sampled_from([1.0, 1.0, 1.5, 3.0]), seed=st.integers(0, 9), uniform_updates=st.booleans())
    def setup(self, **kw):
        self.kw = kw
        self.now = 0.0
        self.d = build_spec(kw)
        self.sl = StartLimit(kw["slots"], timer_s=TIMER_S)
        self.twin = self.twin_sl = None
        self.pool = TaskPool.from_entries(ENTRIES, label_column=LABEL_COLUMN)
        self.rule_mode = kw["admission"] != "all"
        B, m = kw["batch_size"], kw["m"]
        cap = max(B, math.ceil(round(m * B, 9)))  # docs/group-admission.md
        self.steps = StepModel(batch_size=B, steps=STEPS, cap=cap, rule_mode=self.rule_mode, bound=self.bound,
                               uniform_updates=kw["uniform_updates"])
        self.slots = SlotModel(kw["slots"], TIMER_S)
        self.ledger = FateLedger()
        self.groups: dict[tuple[int, int], Group] = {}
        self.calls = 0  # dispatcher calls since the last snapshot
        self.apply(lambda d: d.start(now=self.now))

    def bound(self, entry: str) -> int | None:
        own = self.kw["bound_b"] if entry == "b" else None
        return self.kw["k"] if own is None else own

    # -- plumbing: every call goes to the object and to its twin, and its decisions are carried out
    def apply(self, call):
        out = call(self.d)
        self.calls += 1
        events = self.d.take_events()
        warnings = self.d.take_warnings()
        if self.twin is not None:
            assert call(self.twin) == out, "a twin restored from a snapshot decided otherwise"
            assert self.twin.take_events() == events, "a twin restored from a snapshot wrote other events"
            assert self.twin.take_warnings() == warnings
        self.ledger.take(events)
        self.last_events = events
        for e in events:
            if e["event"] == "draw":
                assert e["version"] == self.steps.version, f"{e} is not drawn at the policy version"
        for dec in out if isinstance(out, list) else []:
            if isinstance(dec, StartGroup):
                self.started(dec)
            elif isinstance(dec, GrantPermit):
                self.granted(dec)
            else:
                raise AssertionError(f"the dispatcher decided {dec!r}")
        return out

    def apply_sl(self, call, expected):
        """A start-limit call whose answer the slot model predicts (a bool for a request, else the grants)."""
        out = call(self.sl)
        if self.twin_sl is not None:
            assert call(self.twin_sl) == out, "a start limit copied at the snapshot decided otherwise"
            self.twin_sl.take_warnings()
        self.sl.take_warnings()
        assert out == expected, f"start limit answered {out}, the docs say {expected}"
        for grant in out if isinstance(out, list) else []:
            s, q, i = grant.key
            m = self.groups[(s, q)].members[i]
            assert m.phase == "slotq", f"{grant} for a rollout that does not wait for a slot ({m.phase})"
            m.phase, m.slot, m.slot_via = "up", "held", "granted"
        return out

    def started(self, dec: StartGroup) -> None:
        draw = self.ledger.drawn.get(dec.key)
        assert draw is not None and draw["task_id"] == dec.task_id, f"{dec} without its draw event"
        assert dec.key not in self.ledger.fates, f"{dec} for a draw that already has its fate"
        row = self.pool.rows[dec.row_index]
        assert (row.task_id, row.entry, row.group_size) == (dec.task_id, dec.entry, dec.group_size)
        assert dec.version == draw["version"] <= self.steps.version
        self.groups[dec.key] = Group(dec.key, dec.task_id, row.entry, row.label, dec.group_size, dec.version,
                                     [Member(i) for i in range(dec.group_size)])
        self.steps.started()

    def granted(self, dec: GrantPermit) -> None:
        g = self.groups[dec.key]
        assert g.waiting, f"{dec} for a group none of whose blocks waits"
        m = g.waiting.pop(0)
        assert dec.index == m.index, f"{dec}: block {m.index} entered first, and permits go FIFO to blocks"
        assert dec.waited_s == self.now - m.entered_at
        assert dec.held is (self.kw["release"] == "rollout")
        g.granted_any = True
        m.permit = "held" if dec.held else "none"
        m.version = self.steps.version
        key3 = (*g.key, m.index)
        m.phase, m.slot = "slotq", None
        if self.apply_sl(lambda sl: sl.request(key3, now=self.now), self.slots.request(key3, self.now)):
            m.phase, m.slot, m.slot_via = "up", "held", "now"

    def members(self, *phases: str) -> list[tuple[tuple[int, int], int]]:
        return [(k, m.index) for k, g in self.groups.items() for m in g.members if m.phase in phases]

    def give_slot_back(self, g: Group, m: Member, reason: str) -> None:
        key3 = (*g.key, m.index)
        expected = self.slots.give_back(key3, self.now) if m.slot == "held" else []
        if m.slot == "held":
            m.slot = "back"
        self.apply_sl(lambda sl: sl.release(key3, reason, now=self.now), expected)

    def return_permit(self, g: Group, m: Member) -> None:
        if m.permit == "held":
            m.permit = "back"
            g.returned += 1

    def exit_block(self, g: Group, m: Member, teardown: bool = False) -> None:
        if teardown and m.permit == "held":
            m.phase, m.teardown_due = "teardown", self.now + TEARDOWN_WAIT_S
            assert self.apply(lambda d: d.on_block_exited(g.key, m.index, now=self.now,
                                                          teardowns_pending=True)) == []
        else:
            m.phase = "done"
            self.return_permit(g, m)
            self.apply(lambda d: d.on_block_exited(g.key, m.index, now=self.now, teardowns_pending=teardown))

    def cancel_member(self, g: Group, m: Member, undo_grant: bool, end_teardown: bool) -> None:
        """Cancel a member the way a runtime does (docs/start-limit.md: a waiter that is cancelled takes nothing; a
        slot granted at the instant of cancellation passes on)."""
        key3 = (*g.key, m.index)
        if m.phase == "new":
            m.phase = "done"
        elif m.phase == "wait":
            g.waiting.remove(m)
            m.phase = "done"
            assert self.apply(lambda d: d.on_block_cancelled(g.key, m.index, now=self.now)) == []
        elif m.phase == "slotq":
            self.slots.cancel_wait(key3)
            self.apply_sl(lambda sl: sl.cancel(key3, now=self.now), [])
            self.exit_block(g, m)
        elif m.phase in ("up", "run"):
            if m.phase == "up" and m.slot == "held" and m.slot_via == "granted" and undo_grant:
                m.slot = "back"
                self.apply_sl(lambda sl: sl.cancel(key3, now=self.now), self.slots.give_back(key3, self.now))
            else:
                self.give_slot_back(g, m, "cancelled")
            self.exit_block(g, m)
        elif m.phase == "teardown" and end_teardown:  # a cancellation ends the wait for the teardowns
            m.phase = "done"
            self.return_permit(g, m)
            self.apply(lambda d: d.on_teardowns_done(g.key, m.index, now=self.now))

    def cancel_rest(self, g: Group, data, waiting_first: bool) -> None:
        """Cancel every member that has not ended (those waiting for a permit first, or in index order); then the
        cancellation may end some teardown waits, or leave them to the group's end."""
        while True:
            left = [m for m in g.members if m.phase not in ENDED]
            if not left:
                break
            if waiting_first:
                left.sort(key=lambda m: m.phase != "wait")
            self.cancel_member(g, left[0], data.draw(st.booleans()), False)
        for m in g.members:
            if m.phase == "teardown":
                self.cancel_member(g, m, False, data.draw(st.booleans()))

    def finish(self, g: Group, output: GroupOutput | None) -> None:
        """The group's workflow returned (or raised): it settles, and its lease gives back every permit."""
        del self.groups[g.key]
        rejected = self.rule_mode and (output is None or (
            self.rule_of(g.entry) == "informative" and output.verdict != "trained"))
        self.apply(lambda d: d.on_group_finished(g.key, output, now=self.now))
        fates = [e for e in self.last_events if e["event"] == "fate" and (e["start"], e["seq"]) == g.key]
        if rejected:
            want = "failed" if output is None else "rejected"
            assert [e["fate"] for e in fates] == [want], f"group {g.key} settled with fates {fates}, not {want}"
            assert fates[0].get("rule") is not None
        else:
            assert fates == [], f"group {g.key} got a fate at settle: {fates}"
        datums = datums_of(output)
        versions = [mr.versions["main"][0] for mr in output.members if "main" in mr.versions] if output else []
        self.steps.settle(Settled(g.key, g.entry, "marker" if rejected else ("failed" if output is None else "admitted"),
                                  min(versions, default=g.version), datums, held=rejected and datums == 0,
                                  window=self.steps.step, verdict="failed" if output is None else output.verdict))

    def rule_of(self, entry: str) -> str:
        run_rule, entry_rules = ADMISSION[self.kw["admission"]]
        return (entry_rules.get(entry) or (run_rule,))[0]

    def output(self, g: Group, verdict_if_empty: str = "no_results") -> GroupOutput:
        members, datums = [], []
        for m in g.members:
            if m.passed is None:
                members.append(MemberResult(outcome="none", disposition="straggler_killed"))
                continue
            r = float(m.passed)
            members.append(MemberResult(reward=r, scored=r, valid=True, outcome="scored", disposition="completed",
                                        versions={"main": (m.version, m.version)}))
            datums.append((g.task_id, m.index, r))
        passes = [m.passed for m in g.members if m.passed is not None]
        verdict = verdict_if_empty if not passes else ("trained" if 0 < sum(passes) < len(passes) else "uniform")
        return GroupOutput(verdict, tuple(members), tuple(datums))

    # -- rules: a runtime's events
    @precondition(lambda self: self.members("new", "up", "run", "teardown", "late"))
    @rule(data=st.data(), dt=st.sampled_from([0.0, 0.0, 0.5, 3.0]), passed=st.booleans(), teardown=st.booleans(),
          call=st.booleans(), late_call=st.booleans())
    def advance(self, data, dt, passed, teardown, call, late_call):
        """Time passes and a member takes its next step: it enters its block; it makes its first model call (or ends
        without one); it ends, its teardowns perhaps keeping its permit a while; its teardowns finish. A first call
        signalled after the slot came back or after the block ended is a no-op (``late_call``)."""
        key, i = data.draw(st.sampled_from(self.members("new", "up", "run", "teardown", "late")))
        self.step_member(key, i, dt, passed, teardown, call, late_call)

    def step_member(self, key, i, dt, passed, teardown, call, late_call) -> None:
        self.now += dt
        g = self.groups[key]
        m = g.members[i]
        key3 = (*key, i)
        if m.phase == "new":
            m.phase, m.entered_at = "wait", self.now
            g.waiting.append(m)
            self.apply(lambda d: d.on_block_entered(key, i, now=self.now))
        elif m.phase == "up" and call:
            m.phase = "run"
            self.give_slot_back(g, m, "first_call")
            if late_call:
                self.apply_sl(lambda sl: sl.release(key3, "first_call", now=self.now), [])
        elif m.phase in ("up", "run"):
            self.give_slot_back(g, m, "end")
            m.passed = passed
            self.exit_block(g, m, teardown)
            if late_call:
                self.apply_sl(lambda sl: sl.release(key3, "first_call", now=self.now), [])
        else:
            late = m.phase == "late"
            m.phase = "done"
            self.return_permit(g, m)
            out = self.apply(lambda d: d.on_teardowns_done(key, i, now=self.now))
            if late:
                assert out == [], "a permit that came back at its deadline came back again"

    @precondition(lambda self: self.members("new", "up", "run", "teardown", "late"))
    @rule(data=st.data(), dt=st.sampled_from([0.0, 0.5]), waves=st.integers(1, 3),
          passed=st.lists(st.booleans(), min_size=3, max_size=3))
    def advance_group(self, data, dt, waves, passed):
        """Each member of one group takes its next step, ``waves`` times (as when its rollouts run alike)."""
        key, _ = data.draw(st.sampled_from(self.members("new", "up", "run", "teardown", "late")))
        for _ in range(waves):
            for m in list(self.groups[key].members):
                if m.phase in ("new", "up", "run", "teardown", "late"):
                    self.step_member(key, m.index, dt, passed[m.index], False, True, False)

    @precondition(lambda self: self.members("wait"))
    @rule(data=st.data())
    def cancel_wait(self, data):
        """One block's wait for its permit is cancelled: its index never ran and may enter again."""
        key, i = data.draw(st.sampled_from(self.members("wait")))
        g = self.groups[key]
        g.waiting.remove(g.members[i])
        g.members[i].phase = "new"
        assert self.apply(lambda d: d.on_block_cancelled(key, i, now=self.now)) == []

    def teardown_deadline(self) -> float | None:
        return min((m.teardown_due for g in self.groups.values() for m in g.members if m.phase == "teardown"),
                   default=None)

    @rule(dt=st.sampled_from([None, None, 0.5, 3.0]))
    def time_passes(self, dt):
        """Time passes by ``dt``, or (None) to the next deadline, and the deadlines due fire: teardowns that outlast
        their wait give their permits back, and start slots whose timer ran out come back."""
        due = min((t for t in (self.teardown_deadline(), self.slots.next_deadline()) if t is not None), default=None)
        self.now = max(self.now, due if due is not None else self.now) if dt is None else self.now + dt
        if (t := self.teardown_deadline()) is not None and t <= self.now:
            for g in list(self.groups.values()):
                for m in g.members:
                    if m.phase == "teardown" and m.teardown_due <= self.now:
                        m.phase = "late"
                        self.return_permit(g, m)
            self.apply(lambda d: d.on_deadline(now=self.now))
        if (t := self.slots.next_deadline()) is not None and t <= self.now:
            expired, grants = self.slots.on_deadline(self.now)
            for s, q, i in expired:
                self.groups[(s, q)].members[i].slot = "back"
            self.apply_sl(lambda sl: sl.on_deadline(now=self.now), grants)

    def settleable(self) -> list[tuple[int, int]]:
        return [k for k, g in self.groups.items() if all(m.phase in ENDED for m in g.members)]

    @precondition(lambda self: self.settleable())
    @rule(data=st.data())
    def settle(self, data):
        g = self.groups[data.draw(st.sampled_from(self.settleable()))]
        self.finish(g, self.output(g))

    @precondition(lambda self: self.members("wait", "slotq", "up", "run", "teardown", "late", "done"))
    @rule(data=st.data(), how=st.sampled_from(["raises", "cut", "cancelled", "empty"]), waiting_first=st.booleans())
    def group_ends_early(self, data, how, waiting_first):
        """A group ends before all its rollouts did. ``raises``: a rollout raises, and the group cancels the others
        (those waiting for a permit first, or in any order) and raises once they have unwound. ``cut``: the straggler
        policy cancels the members still running or waiting, and the group settles with the others' results (the
        cut ones count as killed, without datums). ``cancelled``: the group is cancelled and raises. ``empty``: it
        returns without a single valid result (no datums)."""
        key, _ = data.draw(st.sampled_from(self.members("wait", "slotq", "up", "run", "teardown", "late", "done")))
        g = self.groups[key]
        if how == "raises":
            starting = [m for m in g.members if m.phase in ("up", "run")]
            if starting:
                m = data.draw(st.sampled_from(starting))
                self.give_slot_back(g, m, "end")
                self.exit_block(g, m)
        self.cancel_rest(g, data, waiting_first)
        if how == "empty":
            for m in g.members:
                m.passed = None
        self.finish(g, self.output(g) if how in ("cut", "empty") else None)

    def out_of_phase(self) -> None:
        """The trainer's other calls raise, naming the call and the phase, and change nothing."""
        for call in ("take_step", "commit_step", "publish"):
            if call != {"assembling": "take_step", "training": "commit_step", "committed": "publish"}.get(
                    self.steps.phase):
                for d in (self.d, self.twin) if self.twin is not None else (self.d,):
                    with pytest.raises(RuntimeError, match=f"{call}: the dispatcher is {self.steps.phase}"):
                        getattr(d, call)(now=self.now)

    @precondition(lambda self: self.steps.phase in ("training", "committed") or (
        self.steps.phase == "assembling" and self.steps.queue))
    @rule()
    def trainer(self):
        """The trainer's next call: take a step (and poll), commit the step it trains, or publish the new policy."""
        self.out_of_phase()
        {"assembling": self.take_step, "training": self.commit_step, "committed": self.publish}[self.steps.phase]()

    def take_step(self):
        step = self.apply(lambda d: d.take_step(now=self.now))
        self.apply(lambda d: d.poll(now=self.now))
        want = self.steps.take()
        if want is None:
            assert step is None, f"step {step.step} closed early"
            return
        assert step is not None, f"step {want.step} should have closed: {want}"
        got = ExpectedStep(step.step, step.version, *(tuple(g.key for g in part) for part in
                                                       (step.groups, step.stale, step.failed, step.markers)))
        assert got == want
        for part, stale in ((step.groups, False), (step.stale, True)):
            for g in part:  # the versions are those its members' rollouts sampled (see granted)
                bound = self.bound(g.entry)
                oldest = min((mr.versions["main"][0] for mr in g.output.members if "main" in mr.versions),
                             default=None)
                if stale:
                    assert bound is not None and step.version - oldest > bound
                elif bound is not None and len(g.output):
                    assert step.version - oldest <= bound, f"group {g.key} trained {step.version - oldest} stale"

    def commit_step(self):
        self.apply(lambda d: d.commit_step(now=self.now))
        fates = sorted(((e["start"], e["seq"]), e["fate"]) for e in self.last_events if e["event"] == "fate")
        assert fates == self.steps.commit()
        for d in (self.d, self.twin) if self.twin is not None else (self.d,):
            d.step_metrics(now=self.now)

    def publish(self):
        self.steps.publish()  # first: the groups it starts are drawn at the new version
        self.apply(lambda d: d.publish(now=self.now))

    @precondition(lambda self: self.calls >= 8 or self.steps.phase == "finished")
    @rule()
    def snapshot(self):
        self.calls = 0
        stats = self.d.recorder.snapshot()
        state = json.loads(json.dumps(state_dict(self.d)))
        twin = build_spec(self.kw)
        twin.recorder.load_snapshot(json.loads(json.dumps(stats)))
        restore_exact(twin, state)
        restored = json.loads(json.dumps(state_dict(twin)))
        assert restored == state, diff_paths(restored, state)
        self.twin = twin
        self.twin_sl = copy.deepcopy(self.sl)  # the start limit has no state_dict: a runtime saves its fields

    # -- invariants, all from what was handed out
    @invariant()
    def permits_within_budget(self):
        """Permits granted and not yet given back never exceed max_concurrent_rollouts (docs/dispatch.md): under
        group a running group holds all its permits; a whole lease holds each until its block returns it; a rolling
        one holds what its blocks hold, and one permit before its first block gets one."""
        held = 0
        for g in self.groups.values():
            if self.kw["release"] == "group":
                held += g.size
            elif not self.kw["rolling"]:
                held += g.size - g.returned
            else:
                held += max(sum(m.permit == "held" for m in g.members), 0 if g.granted_any else 1)
        assert held <= self.kw["permits"]

    @invariant()
    def the_horizon_holds(self):
        k, B, open_ = self.kw["k"], self.kw["batch_size"], self.steps.open
        if k is not None:
            assert open_ <= (k + 1) * B, f"{open_} groups open, beyond (k + 1) x B = {(k + 1) * B}"
        if self.steps.phase != "finished":
            assert open_ <= (STEPS - self.steps.step + self.rule_mode) * B
        if k == 0 and self.rule_mode:
            assert self.steps.cap_load() <= self.steps.cap, "at k = 0 a group started past the step's cap"

    @invariant()
    def start_slots_within_the_limit(self):
        held = sum(m.slot == "held" for g in self.groups.values() for m in g.members)
        assert self.kw["slots"] is None or held <= self.kw["slots"]

    @invariant()
    def labels_within_their_limits(self):
        running = Counter(g.label for g in self.groups.values())
        for label, limit in self.kw["limits"].items():
            assert running[label] <= limit, f"{running[label]} groups of label {label} run, its limit is {limit}"

    @invariant()
    def deadlines_are_the_documented_ones(self):
        """The dispatcher's next deadline is the earliest teardown wait; the start limit's, the oldest slot's timer."""
        assert self.d.next_deadline() == self.teardown_deadline()
        assert self.sl.next_deadline() == self.slots.next_deadline()

    @invariant()
    def one_fate_per_draw(self):
        """The ledger refuses a second fate or a fate without a draw as the events come; no running group has one."""
        assert not set(self.ledger.fates) & set(self.groups), "a running group has its fate"

    def teardown(self):
        """Drain: every rollout runs to its end and the trainer takes every step: the run finishes its plan, and each
        draw ends with exactly one fate or is still outstanding in the checkpoint."""
        if not hasattr(self, "d"):
            return
        for _ in range(3000):
            if self.steps.phase == "finished":
                break
            self.drain_once()
        else:
            running = {k: [m.phase for m in g.members] for k, g in self.groups.items()}
            raise AssertionError(f"the run stalled at step {self.steps.step} ({self.steps.phase}); running: {running}")
        outstanding = {(s, q) for s, q, *_ in state_dict(self.d)["outstanding"]}
        assert self.ledger.unfated() == outstanding

    def drain_once(self) -> None:
        for key, g in self.groups.items():
            for m in g.members:
                if m.phase in ("new", "up", "run", "teardown", "late"):
                    self.step_member(key, m.index, 0.0, (m.index + key[1]) % 3 != 0, False, True, False)
                    return
        settled = self.settleable()
        if settled:
            g = self.groups[settled[0]]
            self.finish(g, self.output(g))
            return
        self.now += 0.5
        self.trainer()


SpecMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=60, deadline=None,
                                         suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_spec_machine = SpecMachine.TestCase
