"""Properties of the driver's step cycle (platoon/policy/cycle.py): a state machine drives a ``Driver`` built by
``build_policy`` through whole runs, its rules a runtime's events (members entering, starting, ending, raising,
exiting with teardowns, deadlines, cancellations, groups finishing every way, the trainer carrying out the cycle's
decisions), and every invariant is read off the decisions the driver answers (``driver_model.Runtime``)."""

from __future__ import annotations

import math

from driver_model import ORDER, Runtime, build_driver, expected_order, overrides, tokens
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from platoon.policy import Evaluate, Publish, SaveCheckpoint, Train

LIVE = ("new", "wait", "slotq", "up", "run", "teardown", "late")


class CycleMachine(RuleBasedStateMachine):
    """A run of 2..3 steps over 6 tasks in groups of 2 (batches of 2) under every schedule and permit rule."""

    @initialize(steps=st.integers(1, 3), permits=st.integers(2, 5), release=st.sampled_from(["rollout", "group"]),
                staleness=st.sampled_from([None, 0, 1]), slots=st.sampled_from([None, None, 1, 2]),
                eval_every=st.sampled_from([None, 1, 2]), at_start=st.booleans(),
                ck_every=st.sampled_from([None, 1, 2]), recovery=st.sampled_from([None, 1]),
                straggler=st.sampled_from([None, None, 1.0]), at_once=st.booleans())
    def setup(self, at_once, **kw):
        self.kw = kw
        self.layer = build_driver(overrides(**kw))
        self.rt = Runtime(self.layer, enter_at_once=at_once)
        self.drawn: dict = {}
        self.fates: dict = {}
        self.rt.carry(self.rt.driver.start(now=0.0))

    # -- what the docs say is due
    def eval_due(self, step: int) -> bool:
        steps, every = self.kw["steps"], self.kw["eval_every"]
        if step == 0:
            return self.kw["at_start"]
        return every is not None and (step == steps or step % every == 0)

    def checkpoint_due(self, done: int) -> bool:
        every, recovery = self.kw["ck_every"], self.kw["recovery"]
        return done == self.kw["steps"] or (every is not None and done % every == 0) or (
            recovery is not None and done % recovery == 0)

    def running(self) -> bool:
        return self.rt.finished is False and self.rt.aborted is None

    # -- rules: a runtime's events
    @precondition(lambda self: self.rt.members("new"))
    @rule(data=st.data(), dt=st.sampled_from([0.0, 0.5]))
    def enter(self, data, dt):
        """A member enters its block (a late one, after its group finished, runs on no permit)."""
        key, i = data.draw(st.sampled_from(self.rt.members("new")))
        self.rt.tick(dt)
        self.rt.enter(key, i)

    @precondition(lambda self: self.rt.members("up"))
    @rule(data=st.data(), dt=st.sampled_from([0.0, 0.5]))
    def first_call(self, data, dt):
        key, i = data.draw(st.sampled_from(self.rt.members("up")))
        self.rt.tick(dt)
        self.rt.first_call(key, i)

    @precondition(lambda self: self.rt.members("up", "run"))
    @rule(data=st.data(), dt=st.sampled_from([0.0, 0.5, 3.0]), passed=st.booleans(), teardowns=st.booleans(),
          combined=st.booleans())
    def end(self, data, dt, passed, teardowns, combined):
        """A member's rollout ends and its block exits, with or without teardowns left running."""
        key, i = data.draw(st.sampled_from(self.rt.members("up", "run")))
        self.rt.tick(dt)
        self.rt.end(key, i, passed=passed, teardowns=teardowns, combined=combined)

    @precondition(lambda self: self.rt.members("up", "run"))
    @rule(data=st.data(), dt=st.sampled_from([0.0, 0.5]))
    def raises(self, data, dt):
        """A member's rollout raises: its group's others are cancelled (``CancelRollout``) and carried out."""
        key, i = data.draw(st.sampled_from(self.rt.members("up", "run")))
        self.rt.tick(dt)
        self.rt.raise_(key, i)

    @precondition(lambda self: self.rt.members("teardown"))
    @rule(data=st.data(), dt=st.sampled_from([0.0, 0.5]))
    def teardowns_done(self, data, dt):
        key, i = data.draw(st.sampled_from(self.rt.members("teardown")))
        self.rt.tick(dt)
        self.rt.teardowns_done(key, i)

    @precondition(lambda self: self.rt.members("late"))
    @rule(data=st.data())
    def late_exit(self, data):
        key, i = data.draw(st.sampled_from(self.rt.members("late")))
        self.rt.late_exit(key, i)
        self.rt.forget_done()

    @rule(dt=st.sampled_from([None, 0.5, 3.0]))
    def time_passes(self, dt):
        """Time passes by ``dt``, or (None) to the driver's next deadline, and every deadline due fires (straggler
        cuts, teardown waits, start slots' timers)."""
        if dt is None:
            self.rt.deadline()
            return
        self.rt.tick(dt)
        due = self.rt.driver.next_deadline()
        if due is not None and due <= self.rt.now:
            self.rt.carry(self.rt.driver.on_deadline(now=self.rt.now))

    @precondition(lambda self: self.rt.settleable())
    @rule(data=st.data(), how=st.sampled_from(["output", "output", "output", "none", "error", "cancelled", "other"]))
    def settle(self, data, how):
        """A group whose members are all done returns: its output, or it failed in one of the ways a workflow can."""
        self.rt.finish_group(data.draw(st.sampled_from(self.rt.settleable())), how)

    def early(self) -> list:
        return [k for k, g in self.rt.groups.items() if not g.finished and
                all(m.phase in ("new", "wait", "done") for m in g.members) and
                any(m.phase != "done" for m in g.members)]

    @precondition(lambda self: self.early())
    @rule(data=st.data(), how=st.sampled_from(["cancelled", "error", "output"]))
    def finish_early(self, data, how):
        """A group returns while some of its blocks wait for a permit or have not entered: those run late, on none."""
        self.rt.finish_group(data.draw(st.sampled_from(self.early())), how)

    @precondition(lambda self: self.rt.pending is not None)
    @rule(dt=st.sampled_from([0.0, 0.5]), metrics=st.sampled_from([None, {}, {"pass_at_1": 0.25}]),
          loss=st.sampled_from([1.0, math.nan]))
    def trainer(self, dt, metrics, loss):
        """The cycle decision being carried out is done: ``on_evaluated``, ``on_trained`` or ``on_published``."""
        self.rt.tick(dt)
        self.rt.complete(eval_metrics=metrics, trainer={"loss": loss}, runtime={"sim/x": 1.0})

    # -- invariants
    @invariant()
    def permits_within_budget(self):
        assert self.rt.permits_held(self.kw["release"]) <= self.kw["permits"]

    @invariant()
    def the_cycle_keeps_its_order(self):
        """The cycle's decisions so far begin the run's exact sequence; a Train's and a Publish's step numbers,
        a checkpoint's ``done`` and ``permanent``, and the rows' steps are the ones due."""
        got = tokens(self.rt.cycle)
        if self.rt.aborted is not None:
            got = got[:-1]
        want = expected_order(self.kw["steps"], eval_due=self.eval_due, checkpoint_due=self.checkpoint_due,
                              final_row=self.rt.final_row)
        assert want.startswith(got), f"cycle {got!r} is not a prefix of {want!r}"
        if self.rt.finished:
            assert got == want and ORDER.fullmatch(got)
        trains = [d.step for d in self.rt.cycle if isinstance(d, Train)]
        assert [s.step for s in trains] == list(range(len(trains)))
        evals = [d for d in self.rt.cycle if isinstance(d, Evaluate)]
        assert [e.step for e in evals] == [s for s in range(self.kw["steps"] + 1) if self.eval_due(s)][:len(evals)]
        assert all(e.final == (e.step == self.kw["steps"]) for e in evals)
        saves = [d for d in self.rt.cycle if isinstance(d, SaveCheckpoint)]
        dones = [0] + [s for s in range(1, self.kw["steps"] + 1) if self.checkpoint_due(s)]
        assert [s.done for s in saves] == dones[:len(saves)]
        every = self.kw["ck_every"]
        assert all(s.permanent == (s.done in (0, self.kw["steps"]) or (every is not None and s.done % every == 0))
                   for s in saves)
        assert all(set(s.files) >= {f"driver-{s.name}.json", f"tasks/dispatch-{s.name}.json"} for s in saves)
        steps = [r["step"] for r in self.rt.rows]
        assert steps == sorted(set(steps))
        assert steps == list(range(len(steps))) or (self.rt.finished and steps[-1] == self.kw["steps"])
        versions = [d.version for d in self.rt.cycle if isinstance(d, Publish)]
        assert versions == sorted(versions)

    @invariant()
    def rows_hold_no_non_finite_number(self):
        for row in self.rt.rows:
            assert all(not (isinstance(v, float) and not math.isfinite(v)) for v in row.values()), row
            assert all(k.startswith(("trainer/", "eval/")) for k in row if k.startswith(("loss", "pass_at_1")))

    @invariant()
    def trained_groups_keep_the_staleness_bound(self):
        bound = self.kw["staleness"]
        for dec in self.rt.cycle:
            if not isinstance(dec, Train) or bound is None:
                continue
            step = dec.step
            for g in step.groups:
                oldest = min((m.versions["main"][0] for m in g.output.members if "main" in m.versions), default=None)
                if oldest is not None:
                    assert step.version - oldest <= bound, f"group {g.key} trained {step.version - oldest} stale"

    @invariant()
    def one_fate_per_draw(self):
        self.rt.outbox()
        for e in self.rt.events:
            key = (e.get("start"), e.get("seq"))
            if e["event"] == "draw":
                assert key not in self.drawn, f"{key} drawn twice"
                self.drawn[key] = e
            elif e["event"] == "fate":
                assert key in self.drawn, f"a fate for {key}, never drawn"
                assert key not in self.fates, f"{key} got a second fate"
                self.fates[key] = e["fate"]
        self.rt.events.clear()

    @invariant()
    def no_abort_while_something_can_progress(self):
        if self.rt.aborted is None:
            return
        assert self.rt.pending is None
        assert not [k for k, g in self.rt.groups.items() if not g.finished], "aborted with a group running"
        assert self.rt.driver.next_deadline() is None
        raise AssertionError(f"a run that can complete aborted: {self.rt.aborted}")

    def teardown(self):
        """Drain: every rollout runs to its end and the trainer carries out every decision: the run finishes its
        plan with the cycle's whole order, and every draw ends with exactly one fate."""
        if not hasattr(self, "rt"):
            return
        for _ in range(2000):
            if not self.rt.drain_once():
                break
        self.no_abort_while_something_can_progress()
        assert self.rt.finished, f"the run stopped at step {self.rt.driver.steps_done}: {tokens(self.rt.cycle)}"
        self.the_cycle_keeps_its_order()
        self.one_fate_per_draw()
        outstanding = {tuple(o[:2]) for o in self.rt.driver.dispatcher.state_dict()["outstanding"]}
        assert set(self.drawn) - set(self.fates) == outstanding
        assert not outstanding & set(self.fates)


CycleMachine.TestCase.settings = settings(max_examples=30, stateful_step_count=60, deadline=None,
                                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_cycle_machine = CycleMachine.TestCase
