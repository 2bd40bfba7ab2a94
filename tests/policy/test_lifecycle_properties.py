"""Properties of a rollout's life (``platoon.policy.lifecycle`` as ``MemberWatch`` keeps it): a state machine feeds a
watch of two groups random interleavings of a runtime's events (permits, slots, launches, starts, first calls, ends,
raises, exits, cancellations, straggler deadlines) and holds it against a naive model written from the table alone.

Invariants:
- every member is where the table's moves put it (the model applies ``TRANSITIONS`` and nothing else);
- an event the table has no move for raises ``LifecycleError``, and changes nothing;
- a member that raised leaves no other member of its group open: each is cancelled once, those waiting for a permit
  first, and ends with exactly one final state (ended or cancelled);
- a straggler cut reaches only a member whose rollout is active (starting or running), never before its deadline;
- a snapshot restored into a twin answers every later event as the original does.

Planted bugs it catches (``test_the_machine_catches_a_planted_bug``): a start that skips the permit (a member
waiting for its permit starts running); a failure that forgets the members waiting for their permit; a cancellation
that reaches a member already ended; an exit that leaves a member open; a deadline armed for a member that has not
started.
"""

from __future__ import annotations

import heapq

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from platoon.policy.lifecycle import (
    ACTIVE,
    FINAL,
    OPEN,
    TRANSITIONS,
    LifecycleError,
    RolloutEvent,
    RolloutState,
)
from platoon.policy.members import CANCELLED, STRAGGLER_KILLED, MemberWatch

S, E = RolloutState, RolloutEvent
KEYS = ((0, 0), (0, 1))
SIZE = 3


class Model:
    """What the table alone says: each member's state, moved only by ``TRANSITIONS``."""

    def __init__(self) -> None:
        self.states = {(k, i): S.WAITING_PERMIT for k in KEYS for i in range(SIZE)}

    def can(self, m, event: RolloutEvent) -> bool:
        return (self.states[m], event) in TRANSITIONS or self.states[m] is S.CANCELLED

    def move(self, m, event: RolloutEvent) -> None:
        if self.states[m] is not S.CANCELLED:
            self.states[m] = TRANSITIONS[(self.states[m], event)][0]


def lifecycle_machine(watch_class: type[MemberWatch] = MemberWatch) -> type[RuleBasedStateMachine]:
    """The state machine over a watch of ``watch_class`` (a planted bug's subclass, or the real one)."""

    class LifecycleMachine(RuleBasedStateMachine):
        @initialize(timeout=st.sampled_from([None, 1.0, 3.0]))
        def setup(self, timeout):
            self.watch = watch_class(timeout_s=timeout, quorum=None)
            for k in KEYS:
                self.watch.open(k, SIZE)
            self.model = Model()
            self.now = 0.0
            self.cancels: list = []

        def members(self, *states: RolloutState) -> list:
            return [m for m, s in self.model.states.items() if s in states]

        def apply(self, m, event: RolloutEvent, call) -> list:
            """Feed ``call`` for member ``m`` as ``event``; the model moves (or expects a refusal) by the table."""
            before = dict(self.model.states)
            if not self.model.can(m, event):
                with pytest.raises(LifecycleError):
                    call()
                assert self.model.states == before
                return []
            answer = call() or []
            self.model.move(m, event)
            return answer

        def cancelled(self, answer: list) -> None:
            for c in answer:
                m = (c.key, c.index)
                assert self.model.states[m] in OPEN, f"cancelled {m} in {self.model.states[m]}"
                self.model.states[m] = S.CANCELLED
                self.cancels.append(c)

        @rule(data=st.data())
        def grant(self, data):
            m = data.draw(st.sampled_from(sorted(self.model.states)))
            self.apply(m, E.PERMIT_GRANTED, lambda: self.watch.on_granted(*m))

        @precondition(lambda self: self.members(S.WAITING_SLOT))
        @rule(data=st.data())
        def slot(self, data):
            m = data.draw(st.sampled_from(self.members(S.WAITING_SLOT)))
            self.apply(m, E.SLOT_GRANTED, lambda: self.watch.on_slot_granted(*m))

        @precondition(lambda self: self.members(S.WAITING_LAUNCH))
        @rule(data=st.data())
        def launch(self, data):
            m = data.draw(st.sampled_from(self.members(S.WAITING_LAUNCH)))
            self.apply(m, E.LAUNCH_ADMITTED, lambda: self.watch.on_launch_admitted(*m))

        @precondition(lambda self: self.members(S.WAITING_SLOT, S.WAITING_LAUNCH))
        @rule(data=st.data(), delay=st.sampled_from([0.0, 0.5, 2.0]))
        def start(self, data, delay):
            """A runtime that says nothing of slots or launches starts a member once it holds its permit."""
            m = data.draw(st.sampled_from(self.members(S.WAITING_SLOT, S.WAITING_LAUNCH)))
            self.watch.on_started(*m, now=self.now, delay_s=delay)
            if self.model.states[m] is S.WAITING_SLOT:
                self.model.move(m, E.SLOT_GRANTED)
            self.model.move(m, E.LAUNCH_ADMITTED)

        @precondition(lambda self: self.members(S.STARTING))
        @rule(data=st.data())
        def first_call(self, data):
            m = data.draw(st.sampled_from(self.members(S.STARTING)))
            self.apply(m, E.FIRST_CALL, lambda: self.watch.on_first_call(*m))

        @precondition(lambda self: self.members(S.STARTING, S.RUNNING))
        @rule(data=st.data(), raised=st.booleans(), dt=st.sampled_from([0.0, 0.5, 1.5]))
        def end(self, data, raised, dt):
            m = data.draw(st.sampled_from(self.members(S.STARTING, S.RUNNING)))
            self.now += dt
            answer = self.apply(m, E.RAISED if raised else E.FINISHED,
                                lambda: self.watch.on_ended(*m, now=self.now, raised=raised))
            if raised:
                key = m[0]
                others = [(key, i) for i in range(SIZE) if i != m[1] and self.model.states[(key, i)] in OPEN]
                waiting = sorted(i for (k, i) in others if self.model.states[(k, i)] is S.WAITING_PERMIT)
                assert [c.index for c in answer] == waiting + sorted(i for _, i in others if i not in waiting)
                assert all(c.reason == CANCELLED for c in answer)
            else:
                assert answer == []
            self.cancelled(answer)

        @precondition(lambda self: self.members(S.TEARING_DOWN))
        @rule(data=st.data())
        def exit(self, data):
            m = data.draw(st.sampled_from(self.members(S.TEARING_DOWN)))
            self.watch.on_exited(*m)
            self.model.move(m, E.TORN_DOWN)

        @rule(data=st.data())
        def runtime_cancels(self, data):
            """The runtime cancelled a member wherever it stood (its group was cancelled, a stop)."""
            m = data.draw(st.sampled_from(sorted(self.model.states)))
            self.watch.on_cancelled(*m)
            if self.model.states[m] in OPEN:
                self.model.states[m] = S.CANCELLED

        @rule(dt=st.sampled_from([0.5, 1.0, 4.0]))
        def time_passes(self, dt):
            self.now += dt
            due = self.watch.next_deadline()
            cuts = self.watch.on_deadline(now=self.now)
            if cuts:
                assert due is not None and due <= self.now
            for c in cuts:
                assert c.reason == STRAGGLER_KILLED
                assert self.model.states[(c.key, c.index)] in ACTIVE, "a cut reached a member not active"
            self.cancelled(cuts)

        @rule()
        def twin_answers_alike(self):
            twin = watch_class(timeout_s=self.watch.timeout_s)
            twin.load_state_dict(self.watch.state_dict())
            assert twin.state_dict() == self.watch.state_dict()
            assert twin.next_deadline() == self.watch.next_deadline()
            later = self.now + 10.0
            assert twin.on_deadline(now=later) == self.watch.on_deadline(now=later)
            self.watch = twin  # the deadlines fired in both: carry on with the twin, the model moved as they cut
            for k in KEYS:
                for i in range(SIZE):
                    state = twin.state(k, i)
                    if state is S.CANCELLED and self.model.states[(k, i)] in ACTIVE:
                        self.model.states[(k, i)] = S.CANCELLED

        @invariant()
        def every_member_is_where_the_table_puts_it(self):
            if not hasattr(self, "watch"):
                return
            for (k, i), state in self.model.states.items():
                assert self.watch.state(k, i) is state, f"member {i} of {k}: {self.watch.state(k, i)} vs {state}"

        @invariant()
        def a_group_that_raised_keeps_no_open_member(self):
            if not hasattr(self, "watch"):
                return
            for k in KEYS:
                states = [self.model.states[(k, i)] for i in range(SIZE)]
                if any(c.key == k and c.reason == CANCELLED for c in self.cancels):
                    assert all(s in FINAL or s is S.TEARING_DOWN for s in states)

    return LifecycleMachine


TestLifecycle = lifecycle_machine().TestCase
TestLifecycle.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                  suppress_health_check=[HealthCheck.too_slow])


# ----------------------------------------------------------------------------------------------- planted bugs
class StartsWithoutPermit(MemberWatch):
    def on_granted(self, key, index):
        super().on_granted(key, index)
        if index == 1:  # member 1 goes straight on to its rollout, as if its start needed no permit
            self.groups[key].states[index] = S.RUNNING


class ForgetsTheWaiting(MemberWatch):
    def _fail(self, key, g, raised):
        cancels = super()._fail(key, g, raised)
        kept = [c for c in cancels if c.index != min((c.index for c in cancels), default=-1)]
        return kept


class CancelsTheEnded(MemberWatch):
    def on_exited(self, key, index):
        super().on_exited(key, index)
        g = self.groups.get(key)
        if g is not None and g.states[index] is S.ENDED:
            g.states[index] = S.CANCELLED


class ExitLeavesOpen(MemberWatch):
    def on_exited(self, key, index):
        pass


class ArmsTheUnstarted(MemberWatch):
    def _current(self, due, key, index):
        g = self.groups.get(key)
        return g is not None and g.deadlines.get(index) == due

    def on_ended(self, key, index, *, now, raised=False):
        answer = super().on_ended(key, index, now=now, raised=raised)
        g = self.groups.get(key)
        if g is not None and g.quorum_t is not None:
            for i, state in enumerate(g.states):
                if state is S.WAITING_PERMIT and i not in g.deadlines:
                    g.deadlines[i] = now
                    heapq.heappush(self._heap, (now, key, i))
        return answer


@pytest.mark.parametrize("bug", [StartsWithoutPermit, ForgetsTheWaiting, CancelsTheEnded, ExitLeavesOpen,
                                 ArmsTheUnstarted], ids=lambda c: c.__name__)
def test_the_machine_catches_a_planted_bug(bug):
    with pytest.raises(Exception):  # noqa: B017, PT011 - any failed assertion or refusal the bug leads to
        run_state_machine_as_test(lifecycle_machine(bug), settings=settings(
            max_examples=1000, stateful_step_count=50, deadline=None, database=None, print_blob=False,
            phases=[Phase.generate], derandomize=True,  # the same examples each run; found is enough: no shrinking
            suppress_health_check=list(HealthCheck)))
