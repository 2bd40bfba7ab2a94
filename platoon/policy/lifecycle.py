"""A rollout's life, as one transition table: every state a member of a group passes through, each legal move, and
the rule that guards it.

What this module owns (docs/architecture.md, "A rollout's life"): the table both runtimes' rollouts follow, beside
the step cycle's (``platoon.policy.cycle``), in the same style. The parts that keep each rule answer *when* a move
happens; this table says *which* moves exist, so an event out of order raises ``LifecycleError`` naming the member,
the event and its state, in either runtime.

```
WAITING_PERMIT --permit_granted (permits)--> WAITING_SLOT --slot_granted (start slots)--> WAITING_LAUNCH
WAITING_LAUNCH --launch_admitted (launch gate)--> STARTING --first_call--> RUNNING
STARTING | RUNNING --finished | raised--> TEARING_DOWN --torn_down | teardown_wait_over--> ENDED
any state but ENDED --cancelled (failure: the group's others; stragglers: a running member)--> CANCELLED
```

- ``WAITING_PERMIT``: its group was drawn and its block entered; it waits for one of ``max_concurrent_rollouts``
  (``platoon.policy.permits``; under ``permit_release: group`` its group's lease holds them all).
- ``WAITING_SLOT``: it holds its permit and waits for one of ``max_starting_rollouts`` (``platoon.policy.start_limit``;
  without a limit the slot is granted at once).
- ``WAITING_LAUNCH``: it waits for the launch gate (``platoon.policy.launch_gate``: groups launching at once, the
  node's memory); a runtime that launches no worker (in process) admits it at once.
- ``STARTING``: its worker, sandbox and harness start; the straggler rule counts it as running
  (``platoon.policy.members``), from the delay it waited. ``first_call``: its first model call gives its start slot
  back.
- ``RUNNING``: it calls the model and its environment until it ``finished`` or ``raised`` (the failure rule then
  cancels its group's others, those waiting for a permit first).
- ``TEARING_DOWN``: its rollout ended; under ``permit_release: rollout`` its permit waits for its background
  teardowns (``torn_down``), at most ``TEARDOWN_WAIT_S`` (``teardown_wait_over``: the permit comes back, with a warning).
- ``ENDED`` and ``CANCELLED`` are final. A member's *disposition* (``MemberResult.disposition``) says how it ended:
  ``completed``, ``error``, ``cancelled`` or ``straggler_killed``; its group's fate is the draw's
  (``platoon.policy.records.FATES``).

Events about a member already cancelled change nothing (the cancellation may not have reached it yet): ``advance``
returns CANCELLED for them rather than raising.
"""

from __future__ import annotations

from enum import Enum


class LifecycleError(RuntimeError):
    """An event a rollout cannot take in its state."""


class RolloutState(Enum):
    WAITING_PERMIT = "waiting"
    WAITING_SLOT = "waiting_slot"
    WAITING_LAUNCH = "waiting_launch"
    STARTING = "starting"
    RUNNING = "running"
    TEARING_DOWN = "ended"
    ENDED = "exited"
    CANCELLED = "cancelled"


class RolloutEvent(Enum):
    PERMIT_GRANTED = "permit_granted"
    SLOT_GRANTED = "slot_granted"
    LAUNCH_ADMITTED = "launch_admitted"
    FIRST_CALL = "first_call"
    FINISHED = "finished"
    RAISED = "raised"
    TORN_DOWN = "torn_down"
    TEARDOWN_WAIT_OVER = "teardown_wait_over"
    CANCELLED = "cancelled"


S, E = RolloutState, RolloutEvent

#: ``(state, event) -> (state, the rule that guards the move)``: every legal move of a rollout.
TRANSITIONS: dict[tuple[RolloutState, RolloutEvent], tuple[RolloutState, str]] = {
    (S.WAITING_PERMIT, E.PERMIT_GRANTED): (S.WAITING_SLOT, "permits: a permit is free (platoon.policy.permits)"),
    (S.WAITING_SLOT, E.SLOT_GRANTED): (S.WAITING_LAUNCH, "start slots: fewer than max_starting_rollouts start "
                                                         "(platoon.policy.start_limit)"),
    (S.WAITING_LAUNCH, E.LAUNCH_ADMITTED): (S.STARTING, "launch gate: groups launching and the node's memory "
                                                        "(platoon.policy.launch_gate)"),
    (S.STARTING, E.FIRST_CALL): (S.RUNNING, "its first model call gives its start slot back"),
    (S.STARTING, E.FINISHED): (S.TEARING_DOWN, "it ended before any model call"),
    (S.STARTING, E.RAISED): (S.TEARING_DOWN, "failure: its group's others are cancelled (platoon.policy.members)"),
    (S.RUNNING, E.FINISHED): (S.TEARING_DOWN, "its rollout ran to its end"),
    (S.RUNNING, E.RAISED): (S.TEARING_DOWN, "failure: its group's others are cancelled (platoon.policy.members)"),
    (S.TEARING_DOWN, E.TORN_DOWN): (S.ENDED, "its background teardowns ended: its permit comes back"),
    (S.TEARING_DOWN, E.TEARDOWN_WAIT_OVER): (S.ENDED, "its teardowns outlasted TEARDOWN_WAIT_S: its permit comes "
                                                      "back, with a warning"),
    **{(state, E.CANCELLED): (S.CANCELLED, "a failing group's others, a straggler past its deadline, a stop")
       for state in (S.WAITING_PERMIT, S.WAITING_SLOT, S.WAITING_LAUNCH, S.STARTING, S.RUNNING, S.TEARING_DOWN)},
}

#: States in which a member's rollout has begun and not ended (the straggler rule's "running").
ACTIVE = frozenset({S.STARTING, S.RUNNING})
#: States in which a member waits to begin.
WAITING = frozenset({S.WAITING_PERMIT, S.WAITING_SLOT, S.WAITING_LAUNCH})
#: States from which a member can still be cancelled.
OPEN = frozenset(state for state, event in TRANSITIONS if event is E.CANCELLED)
FINAL = frozenset({S.ENDED, S.CANCELLED})

#: The moves a member makes at once where a runtime has nothing to wait for: from a granted permit to its rollout's
#: start (no start limit, no launch gate), as one step.
TO_START = (E.SLOT_GRANTED, E.LAUNCH_ADMITTED)


def advance(state: RolloutState, event: RolloutEvent, where: str = "a rollout") -> RolloutState:
    """The state ``event`` leads ``state`` to; a cancelled member stays cancelled; any other move that is not in
    ``TRANSITIONS`` raises ``LifecycleError`` naming ``where`` (e.g. "member 3 of group (0, 2)"), the event and the
    state."""
    move = TRANSITIONS.get((state, event))
    if move is not None:
        return move[0]
    if state is S.CANCELLED:
        return state
    raise LifecycleError(f"{event.value}: {where} is {state.name.lower()}, which has no such move")


def path(*events: RolloutEvent, start: RolloutState = S.WAITING_PERMIT) -> RolloutState:
    """Where ``events`` lead from ``start``, each checked by ``advance``."""
    state = start
    for event in events:
        state = advance(state, event)
    return state


def table() -> list[tuple[str, str, str, str]]:
    """The table as rows of ``(state, event, next state, rule)``, in declaration order (for docs and tests)."""
    return [(s.name, e.value, to.name, rule) for (s, e), (to, rule) in TRANSITIONS.items()]


__all__ = ["ACTIVE", "FINAL", "LifecycleError", "OPEN", "RolloutEvent", "RolloutState", "TO_START", "TRANSITIONS",
           "WAITING", "advance", "path", "table"]
