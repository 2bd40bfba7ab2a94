"""Properties of the dispatcher: permit conservation, the horizon, rollout/group parity, completion-order
independence, and exact twins restored from a snapshot taken at any point (Hypothesis state machine)."""

import json

from dispatch_harness import Script, build, outcome, output_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from platoon.policy.dispatch_state import restore_exact, state_dict
from platoon.policy.dispatcher import StartGroup, StepPhase
from platoon.policy.permits import GrantPermit

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


class DispatcherMachine(RuleBasedStateMachine):
    """Random interleavings of block entries, rollout ends (with teardowns), failures, cancellations, deadlines,
    steps and snapshots. A twin restored from the last snapshot is fed every later event and must decide alike."""

    @initialize(release=st.sampled_from(["rollout", "group"]), k=st.sampled_from([0, 1, 2, None]),
                permits=st.integers(2, 12), sampler=st.sampled_from(["auto", "pass_rate"]),
                admission=st.sampled_from(["all", "informative"]), seed=st.integers(0, 9))
    def setup(self, release, k, permits, sampler, admission, seed):
        self.kw = dict(permit_release=release, max_staleness=k, permits=permits, sampler=sampler,
                       admission=admission, seed=seed, group_size=2, batch_size=2, steps=6, tasks=8)
        self.seed = seed
        self.now = 0.0
        self.d = build(**self.kw)
        self.twin = None
        self.groups = {}  # key -> {"size", "task", "entered", "running", "waiting", "done", "passes"}
        self.training = False
        self.apply(lambda d: d.start(now=self.now))

    # -- plumbing
    def apply(self, call):
        out = call(self.d)
        if self.twin is not None:
            assert call(self.twin) == out, "a twin restored from a snapshot decided otherwise"
        for dec in out if isinstance(out, list) else []:
            if isinstance(dec, StartGroup):
                self.groups[dec.key] = {"size": dec.group_size, "task": dec.task_id, "entered": 0,
                                        "running": [], "waiting": [], "teardown": [], "passes": {}}
            elif isinstance(dec, GrantPermit):
                g = self.groups[dec.key]
                g["waiting"].remove(dec.index)
                g["running"].append(dec.index)
        return out

    def enter(self, key, index):
        g = self.groups[key]
        g["waiting"].append(index)
        g["entered"] += 1
        self.apply(lambda d: d.on_block_entered(key, index, now=self.now))

    def live(self, what):
        return [k for k, g in self.groups.items() if g[what]]

    # -- rules
    @rule(dt=st.sampled_from([0.0, 0.5, 3.0]))
    def tick(self, dt):
        self.now += dt

    @precondition(lambda self: any(g["entered"] < g["size"] for g in self.groups.values()))
    @rule(data=st.data())
    def enter_block(self, data):
        key = data.draw(st.sampled_from([k for k, g in self.groups.items() if g["entered"] < g["size"]]))
        self.enter(key, self.groups[key]["entered"])

    @precondition(lambda self: self.live("running"))
    @rule(data=st.data(), teardown=st.booleans())
    def end_rollout(self, data, teardown):
        key = data.draw(st.sampled_from(self.live("running")))
        g = self.groups[key]
        index = data.draw(st.sampled_from(g["running"]))
        g["running"].remove(index)
        g["passes"][index] = outcome(self.seed, key, index, g["task"])[1]
        if teardown:
            g["teardown"].append(index)
        self.apply(lambda d: d.on_block_exited(key, index, now=self.now, teardowns_pending=teardown))

    @precondition(lambda self: self.live("teardown"))
    @rule(data=st.data())
    def teardown_done(self, data):
        key = data.draw(st.sampled_from(self.live("teardown")))
        index = self.groups[key]["teardown"].pop(0)
        self.apply(lambda d: d.on_teardowns_done(key, index, now=self.now))

    @precondition(lambda self: self.d.next_deadline() is not None)
    @rule()
    def deadline(self):
        self.now = max(self.now, self.d.next_deadline())
        for g in self.groups.values():
            g["teardown"].clear()
        self.apply(lambda d: d.on_deadline(now=self.now))

    @precondition(lambda self: any(len(g["passes"]) == g["size"] for g in self.groups.values()))
    @rule(data=st.data())
    def settle(self, data):
        key = data.draw(st.sampled_from([k for k, g in self.groups.items() if len(g["passes"]) == g["size"]]))
        g = self.groups.pop(key)
        passes = [g["passes"][i] for i in range(g["size"])]
        self.apply(lambda d: d.on_group_finished(key, output_of(g["task"], passes, 0), now=self.now))

    @precondition(lambda self: self.groups)
    @rule(data=st.data())
    def fail_or_cancel(self, data):
        """A member raises (or the group is cancelled): waiting blocks are cancelled, running ones unwind."""
        key = data.draw(st.sampled_from(list(self.groups)))
        g = self.groups.pop(key)
        for index in list(g["waiting"]):
            self.apply(lambda d, i=index: d.on_block_cancelled(key, i, now=self.now))
        for index in list(g["running"]):
            self.apply(lambda d, i=index: d.on_block_exited(key, i, now=self.now))
        self.apply(lambda d: d.on_group_finished(key, None, now=self.now))

    @precondition(lambda self: self.d.phase is not StepPhase.FINISHED)
    @rule()
    def train(self):
        if self.d.phase is StepPhase.ASSEMBLING:
            step = self.apply(lambda d: d.take_step(now=self.now))
            self.apply(lambda d: d.poll(now=self.now))
            if step is None:
                return
        self.apply(lambda d: d.commit_step(now=self.now))
        # step metrics are windows read at step ends (where runtimes checkpoint): decisions must match, and the
        # metrics of a window that a snapshot cut may not
        for d in (self.d, self.twin) if self.twin is not None else (self.d,):
            d.step_metrics(now=self.now)
        self.apply(lambda d: d.publish(now=self.now))

    @rule()
    def snapshot(self):
        stats = self.d.recorder.snapshot()
        state = json.loads(json.dumps(state_dict(self.d)))
        twin = build(**self.kw)
        twin.recorder.load_snapshot(json.loads(json.dumps(stats)))
        restore_exact(twin, state)
        restored = json.loads(json.dumps(state_dict(twin)))
        assert restored == state, diff_paths(restored, state)
        self.twin = twin

    # -- invariants
    @invariant()
    def permits_are_conserved(self):
        d = self.d
        leases = [lease for _, lease in d.running.values()] + ([d.pending.lease] if d.pending else [])
        assert 0 <= d.permits.free <= d.permits.capacity
        assert d.permits.free + sum(le.holding for le in leases) == d.permits.capacity

    @invariant()
    def the_horizon_holds(self):
        d, k, B = self.d, self.kw["max_staleness"], self.kw["batch_size"]
        if k is not None:
            assert d.pipeline + d.admitted <= (k + 1) * B
        assert d.pipeline + d.admitted <= (d.config.steps - min(d.step, d.config.steps - 1)) * B + B


DispatcherMachine.TestCase.settings = settings(max_examples=80, stateful_step_count=40, deadline=None,
                                               suppress_health_check=[HealthCheck.too_slow])
test_dispatcher_machine = DispatcherMachine.TestCase
