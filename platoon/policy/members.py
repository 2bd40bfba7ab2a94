"""A group's members as the failure and straggler rules see them: who to cancel, in what order, and when.

What this module owns (docs/dispatch.md, "Members, failures and stragglers"): the rules that decide, for every
group in flight, which of its rollouts a runtime must cancel. It is sans-I/O like the rest of the policy layer: it
is told what happened, with ``now=``, and answers ``CancelRollout`` decisions; its timers are read through
``next_deadline()`` and fired by ``on_deadline(now=)`` (the driver merges them with the dispatcher's and the start
limit's).

Rules it keeps:

- **A member's life** is the rollout lifecycle table's (``platoon.policy.lifecycle``): waiting for its permit,
  for a start slot, for the launch gate; starting (its rollout began: ``on_started`` with its start delay, the
  seconds it waited for its permit and slot), running (its first model call), tearing down (its rollout ran to its
  end or raised; its block may still wait for teardowns), ended (its block is done), or cancelled. A move the table
  does not have raises ``LifecycleError`` naming the member, the event and its state, except that events about a
  member already cancelled change nothing: the cancellation may not have reached it yet. A runtime that says
  nothing of a member's slot or launch (in process, no start limit) starts it from where it stands, through the
  table's moves (``TO_START``); one that does not report its members at all (a workflow of its own) ends them the
  same way.
- **Failure.** When a member raises, every other member whose block is not done is cancelled once (reason
  ``cancelled``): those still waiting for their permit first, then the rest in index order, so that no permit a
  cancelled rollout gives back is handed to a member about to be cancelled. Cancelling a member that has ended ends
  its wait for teardowns, and it keeps its outcome. The group fails once they have unwound.
- **Stragglers** (the group's ``timeout_s`` set: each group takes its policy when it opens, from ``policies(entry,
  label)``, else the watch's own ``timeout_s``/``quorum``). The quorum is ``min(quorum or max(size - 1, 1), size)`` members ended. At the
  time the quorum is reached, ``quorum_t``, each running member ``i`` gets the deadline
  ``quorum_t + timeout_s + (delay_i - least delay among the members that started)``; a member that starts later
  gets its own then. With every member started at once (all delays 0.0) that is one deadline for all,
  ``timeout_s`` after the quorum. A running member past its deadline is cut (reason ``straggler_killed``) alone;
  the first cut of a group warns once.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

from platoon.policy.lifecycle import (
    ACTIVE,
    OPEN,
    TO_START,
    LifecycleError,
    RolloutEvent,
    RolloutState,
    advance,
)

Key = tuple[int, int]
S, E = RolloutState, RolloutEvent
MemberState = RolloutState
"""A member's state is its rollout's (the name the driver and the tests read)."""
MemberError = LifecycleError
"""An event a member cannot take in its state: the lifecycle's error (a group not open, or no such member, too)."""

CANCELLED = "cancelled"
STRAGGLER_KILLED = "straggler_killed"


_OLD_VALUES = {"granted": S.WAITING_SLOT}
"""A state value of a checkpoint written before the lifecycle table, and the state it stands for now."""


@dataclass(frozen=True)
class CancelRollout:
    """Decision: cancel member ``index`` of group ``key``; ``reason`` is its disposition (``cancelled`` when its
    group failed, ``straggler_killed`` when it ran past its straggler deadline)."""

    key: Key
    index: int
    reason: str


@dataclass
class _Group:
    size: int
    states: list[MemberState]
    delays: dict[int, float] = field(default_factory=dict)
    deadlines: dict[int, float] = field(default_factory=dict)
    ended: int = 0
    quorum_t: float | None = None
    warned: bool = False
    timeout_s: float | None = None
    quorum: int | None = None

    def to_json(self) -> list:
        return [self.size, [s.value for s in self.states], [[i, d] for i, d in sorted(self.delays.items())],
                [[i, t] for i, t in sorted(self.deadlines.items())], self.ended, self.quorum_t, self.warned,
                self.timeout_s, self.quorum]

    @classmethod
    def from_json(cls, d: list) -> _Group:
        size, states, delays, deadlines, ended, quorum_t, warned, timeout_s, quorum = d
        return cls(size, [_OLD_VALUES.get(s) or MemberState(s) for s in states], {int(i): x for i, x in delays},
                   {int(i): t for i, t in deadlines}, ended, quorum_t, warned, timeout_s, quorum)


class MemberWatch:
    """The members of every group in flight (see the module docstring). ``timeout_s`` None: no straggler policy."""

    def __init__(self, *, timeout_s: float | None = None, quorum: int | None = None,
                 policies: Callable[[str, str], tuple[float | None, int | None]] | None = None) -> None:
        self.timeout_s = timeout_s
        self.quorum = quorum
        self.policies = policies
        self.groups: dict[Key, _Group] = {}
        self._heap: list[tuple[float, Key, int]] = []
        self._warnings: list[str] = []
        self._running_cancelled = 0

    # ------------------------------------------------------------------------------------------------ events
    def open(self, key: Key, size: int, *, entry: str | None = None, label: str | None = None) -> None:
        """Group ``key`` of ``size`` members started: every member waits for its permit. The group's straggler
        policy is ``policies(entry, label)`` when ``entry`` is given (``label`` None: the entry's name) and the watch has
        ``policies``, else the watch's own."""
        if key in self.groups:
            raise MemberError(f"group {key} is already open")
        timeout_s, quorum = self.timeout_s, self.quorum
        if self.policies is not None and entry is not None:
            timeout_s, quorum = self.policies(entry, label if label is not None else entry)
        self.groups[key] = _Group(size, [S.WAITING_PERMIT] * size, timeout_s=timeout_s, quorum=quorum)

    def close(self, key: Key) -> None:
        """Group ``key`` settled: forget it (its deadlines lapse)."""
        self.groups.pop(key, None)

    def on_granted(self, key: Key, index: int) -> None:
        """Member ``index`` holds its permit: it waits for a start slot."""
        g = self.groups.get(key)
        if g is not None and 0 <= index < g.size and g.states[index] is S.WAITING_PERMIT:  # the common case, no call
            g.states[index] = S.WAITING_SLOT
            return
        self._move(key, index, E.PERMIT_GRANTED)

    def on_slot_granted(self, key: Key, index: int) -> None:
        """Member ``index`` has its start slot: it waits for the launch gate."""
        self._move(key, index, E.SLOT_GRANTED)

    def on_launch_admitted(self, key: Key, index: int) -> None:
        """The launch gate let member ``index``'s worker start."""
        self._move(key, index, E.LAUNCH_ADMITTED)

    def on_started(self, key: Key, index: int, *, now: float, delay_s: float) -> None:
        """Member ``index`` began its rollout after waiting ``delay_s`` for its permit and start slot."""
        g = self.groups.get(key)
        if g is not None and 0 <= index < g.size and g.states[index] is S.WAITING_SLOT:  # the common case, no call
            g.states[index] = S.STARTING
        else:
            g = self._start(key, index)
            if g.states[index] is S.CANCELLED:
                return
            if g.states[index] is not S.STARTING:
                raise MemberError(f"started: member {index} of group {key} is {g.states[index].name.lower()}, "
                                  "which has no such move")
        g.delays[index] = float(delay_s)
        if g.quorum_t is not None:
            self._arm(key, g, index)

    def on_first_call(self, key: Key, index: int) -> None:
        """Member ``index`` issued its first model call (a later call, or one of a member not started: no move)."""
        g = self.groups.get(key)
        if g is not None and 0 <= index < g.size and g.states[index] is S.STARTING:
            g.states[index] = S.RUNNING

    def on_ended(self, key: Key, index: int, *, now: float, raised: bool = False) -> list[CancelRollout]:
        """Member ``index``'s rollout ended (``raised``: with an exception): the cancellations that follow."""
        g = self.groups.get(key)
        if g is not None and 0 <= index < g.size and g.states[index] in ACTIVE:  # the common case, no call
            g.states[index] = S.TEARING_DOWN
        else:
            g = self._start(key, index)
            g = self._move(key, index, E.RAISED if raised else E.FINISHED)
            if g.states[index] is S.CANCELLED:
                return []
        g.deadlines.pop(index, None)
        g.ended += 1
        if raised:
            return self._fail(key, g, index)
        if g.timeout_s is not None and g.quorum_t is None and g.ended >= self._quorum(g):
            g.quorum_t = now
            for i, state in enumerate(g.states):
                if state in ACTIVE:
                    self._arm(key, g, i)
        return []

    def on_ended_and_exited(self, key: Key, index: int, *, now: float) -> bool:
        """``on_ended`` (not raised) then ``on_exited``, in one call: whether the member had ended a running rollout
        (tearing down between the two), as a cancelled one has not."""
        self.on_ended(key, index, now=now)
        g = self.groups.get(key)
        ran = g is not None and g.states[index] is S.TEARING_DOWN
        self.on_exited(key, index)
        return ran

    def on_exited(self, key: Key, index: int) -> None:
        """Member ``index``'s block is done (its teardowns ended or its permit's wait for them ran out)."""
        g = self.groups.get(key)
        if g is None:
            return
        state = g.states[index]
        if state is S.TEARING_DOWN and 0 <= index:  # the common case, no call
            g.states[index] = S.ENDED
        elif state is not S.CANCELLED:  # a workflow may not report its members: it ends them from where they stand
            self._start(key, index)
            self._move(key, index, E.FINISHED)
            self._move(key, index, E.TORN_DOWN)

    def on_cancelled(self, key: Key, index: int) -> None:
        """Member ``index`` was cancelled by its runtime (its wait for a permit, as its group was cancelled)."""
        g = self.groups.get(key)
        if g is not None and g.states[index] in OPEN:
            g.states[index] = S.CANCELLED
            g.deadlines.pop(index, None)

    # ------------------------------------------------------------------------------------------------ timers
    def next_deadline(self) -> float | None:
        """The earliest straggler deadline of a running member, or None."""
        heap = self._heap
        while heap and not self._current(*heap[0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def on_deadline(self, *, now: float) -> list[CancelRollout]:
        """Cut every running member whose deadline has come, in deadline order."""
        cuts: list[CancelRollout] = []
        while (due := self.next_deadline()) is not None and due <= now:
            _, key, index = heapq.heappop(self._heap)
            g = self.groups[key]
            g.states[index] = S.CANCELLED
            self._running_cancelled += 1
            del g.deadlines[index]
            cuts.append(CancelRollout(key, index, STRAGGLER_KILLED))
            if not g.warned:
                g.warned = True
                self._warnings.append(
                    f"rollout {index} of group {key} ran past its straggler deadline ({g.timeout_s:g}s after the "
                    f"quorum of {self._quorum(g)}); cutting it")
        return cuts

    def state(self, key: Key, index: int) -> MemberState | None:
        """Where member ``index`` of the open group ``key`` stands (None: the group is not open)."""
        g = self.groups.get(key)
        return g.states[index] if g is not None else None

    def ran(self, key: Key) -> int:
        """How many members of the open group ``key`` ran to their end."""
        g = self.groups.get(key)
        return 0 if g is None else sum(s is S.TEARING_DOWN or s is S.ENDED for s in g.states)

    def take_running_cancelled(self) -> int:
        """Members this watch cancelled while their rollouts ran, since the last call."""
        n, self._running_cancelled = self._running_cancelled, 0
        return n

    def take_warnings(self) -> list[str]:
        warnings, self._warnings = self._warnings, []
        return warnings

    # ------------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        return {"groups": [[list(k), g.to_json()] for k, g in self.groups.items()],
                "running_cancelled": self._running_cancelled}

    def load_state_dict(self, state: dict) -> None:
        self.groups = {tuple(k): _Group.from_json(g) for k, g in state["groups"]}
        self._running_cancelled = int(state["running_cancelled"])
        self._heap = [(t, key, i) for key, g in self.groups.items() for i, t in g.deadlines.items()]
        heapq.heapify(self._heap)

    # -------------------------------------------------------------------------------------------- internals
    @staticmethod
    def _quorum(g: _Group) -> int:
        return min(g.quorum or max(g.size - 1, 1), g.size)

    def _move(self, key: Key, index: int, event: RolloutEvent) -> _Group:
        """Member ``index`` of ``key`` takes ``event``: the table's move (``platoon.policy.lifecycle.advance``)."""
        g = self.groups.get(key)
        if g is None:
            raise MemberError(f"{event.value}: group {key} is not open")
        if not 0 <= index < g.size:
            raise MemberError(f"{event.value}: group {key} has no member {index}")
        g.states[index] = advance(g.states[index], event, f"member {index} of group {key}")
        return g

    def _start(self, key: Key, index: int) -> _Group:
        """Member ``index`` began its rollout where its runtime said nothing of its permit, slot or launch: the
        table's moves from where it stands to starting (none for a member started or cancelled)."""
        g = self._group(key, index)
        if g.states[index] is S.WAITING_PERMIT:
            self._move(key, index, E.PERMIT_GRANTED)
        for event in TO_START:
            if g.states[index] is (S.WAITING_SLOT if event is E.SLOT_GRANTED else S.WAITING_LAUNCH):
                self._move(key, index, event)
        return g

    def _group(self, key: Key, index: int) -> _Group:
        g = self.groups.get(key)
        if g is None:
            raise MemberError(f"group {key} is not open")
        if not 0 <= index < g.size:
            raise MemberError(f"group {key} has no member {index}")
        return g

    def _arm(self, key: Key, g: _Group, index: int) -> None:
        assert g.timeout_s is not None and g.quorum_t is not None
        least = min(g.delays.values())
        due = g.quorum_t + g.timeout_s + (g.delays[index] - least)
        g.deadlines[index] = due
        heapq.heappush(self._heap, (due, key, index))

    def _current(self, due: float, key: Key, index: int) -> bool:
        g = self.groups.get(key)
        return g is not None and g.deadlines.get(index) == due and g.states[index] in ACTIVE

    def _fail(self, key: Key, g: _Group, raised: int) -> list[CancelRollout]:
        waiting = {i for i, s in enumerate(g.states) if s is S.WAITING_PERMIT}
        order = cancel_order(waiting, [i for i, s in enumerate(g.states) if s in OPEN and i != raised])
        for i in order:
            self._running_cancelled += g.states[i] in ACTIVE
            g.states[i] = S.CANCELLED
            g.deadlines.pop(i, None)
        return [CancelRollout(key, i, CANCELLED) for i in order]


def cancel_order(waiting: set[int], members: list[int]) -> list[int]:
    """The order to cancel ``members`` in: those still ``waiting`` for their permit first, then by index."""
    return sorted(members, key=lambda i: (i not in waiting, i))


__all__ = ["CANCELLED", "cancel_order", "STRAGGLER_KILLED", "CancelRollout", "MemberError", "MemberState", "MemberWatch"]
