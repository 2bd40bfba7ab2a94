"""The start limit: at most N rollouts setting up at once (``train.max_starting_rollouts``, experimental).

What this module owns: the slots of one start of training, shared by the training and the evaluation workflow's
rollouts, first come, first served (docs/start-limit.md). A ``GroupRolloutWorkflow`` member asks for a slot inside its
lease block, once it holds its permit, and gives it back at the first of: its first model call (``first_call``),
the normal end of its block (``end``), a cancellation of its block (``cancelled``), or ``timer_s`` after it took the
slot (``timer``; ``worker_startup_budget_seconds + 300`` s, see ``start_timer_s``).

Rules it keeps:

- FIFO, no overtaking: a request is granted at once, without yielding and with a wait of exactly 0.0, only when a
  slot is free and nobody waits; otherwise it queues, and the calls that free slots return ``SlotGranted`` for the
  keys they grant, in queue order.
- A waiter that is cancelled takes nothing; a slot granted at the instant of cancellation (granted, but the waiter
  never resumed) passes on to the next waiter and is not counted as taken.
- Each slot comes back once. Later releases of the same key are no-ops: a rollout's first model call is signalled
  from another thread and can arrive after its slot came back on the timer or after its block ended.
- Every key moves through a transition table (``_TRANSITIONS``); an event that has no row for the key's state raises
  ``StartLimitError`` naming both.
- Time never goes backwards; ``limit=None`` (the default of the config) changes nothing: every request is granted at
  once and nothing is counted.

Metrics are kept per scope (``"train"`` or ``"eval"``, named by the request) under the relative names
``rollout_client/start_limit/...`` (`ScopeWindow`, ``platoon.policy.start_scope``, integrates and reports them); the
runtime logs each scope's under its own tracker. Warnings are per start.
"""

from __future__ import annotations

import enum
import math
from collections import OrderedDict, deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from platoon.policy.start_scope import PREFIX, RELEASE_REASONS, ScopeWindow

TIMER_MARGIN_S = 300.0
"""Seconds the timer adds to ``worker_startup_budget_seconds``."""
MOSTLY_WHOLE_MIN_RELEASES = 32
"""Non-cancelled releases needed before the run judges whether the limit bounds whole rollouts."""


def start_timer_s(worker_startup_budget_seconds: float = 300.0) -> float:
    """The timer after which a slot without a model call comes back: the startup budget plus 300 s."""
    return float(worker_startup_budget_seconds) + TIMER_MARGIN_S


class StartLimitError(RuntimeError):
    """An event the start limit cannot take in the key's state (names both)."""


@dataclass(frozen=True)
class SlotGranted:
    """Decision: the waiting ``key`` now holds a start slot; it waited ``waited_s`` seconds for it. ``key`` is the
    key as asked: from the driver, a member's ``(step, seq, index)`` (``("eval", number, index)`` for an evaluation's
    rollout); any hashable from a ``StartLimit`` used alone."""

    key: Any
    waited_s: float


class SlotState(enum.Enum):
    ABSENT = "absent"  # never asked, or done with (its block ended)
    WAITING = "waiting"
    HOLDING = "holding"
    RELEASED = "released"  # its slot came back, its block still runs


class SlotEvent(enum.Enum):
    REQUEST = "request"
    GRANT = "grant"
    CANCEL = "cancel"
    FIRST_CALL = "first_call"
    END = "end"
    CANCELLED = "cancelled"
    TIMER = "timer"


S, E = SlotState, SlotEvent
_TRANSITIONS: dict[tuple[SlotState, SlotEvent], SlotState] = {
    (S.ABSENT, E.REQUEST): S.WAITING,  # granted at once is WAITING then GRANT in one call
    (S.WAITING, E.GRANT): S.HOLDING,
    (S.WAITING, E.CANCEL): S.ABSENT,
    (S.HOLDING, E.CANCEL): S.ABSENT,  # granted at the instant of cancellation: passes on
    (S.HOLDING, E.FIRST_CALL): S.RELEASED,
    (S.HOLDING, E.TIMER): S.RELEASED,
    (S.HOLDING, E.END): S.ABSENT,
    (S.HOLDING, E.CANCELLED): S.ABSENT,
    (S.RELEASED, E.FIRST_CALL): S.RELEASED,  # no-op: the slot came back already
    (S.RELEASED, E.END): S.ABSENT,  # no-op for the slot; the block is done
    (S.RELEASED, E.CANCELLED): S.ABSENT,
    (S.ABSENT, E.FIRST_CALL): S.ABSENT,  # a first call signalled after its block ended
}
del S, E


@dataclass
class _Key:
    state: SlotState
    scope: str
    asked_at: float


class StartLimit:
    """At most ``limit`` rollouts starting at once; ``limit=None`` grants everything and counts nothing.

    ``timer_s`` is how long a slot may be held without a model call before it comes back (``start_timer_s``).
    """

    def __init__(self, limit: int | None, *, timer_s: float) -> None:
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ValueError(
                f"train.max_starting_rollouts must be an integer of at least 1, or null, got {limit!r}"
            )
        if isinstance(timer_s, bool) or not isinstance(timer_s, int | float) or not math.isfinite(timer_s):
            raise ValueError(f"timer_s must be a finite number of seconds, got {timer_s!r}")
        if timer_s <= 0:
            raise ValueError(f"timer_s must be positive, got {timer_s!r}")
        self.limit = limit
        self.timer_s = float(timer_s)
        self._free = limit if limit is not None else 0
        self._keys: dict[Hashable, _Key] = {}
        self._queue: deque[Hashable] = deque()
        # Grant times never decrease and the timer is one constant, so grant order is deadline order.
        self._deadlines: OrderedDict[Hashable, float] = OrderedDict()
        self._scopes: dict[str, ScopeWindow] = {}
        self._now: float | None = None
        self._released_total = 0
        self._released_whole = 0
        self._warned_timer = False
        self._warned_whole = False
        self._warnings: list[str] = []

    # -- inspection ------------------------------------------------------------------------------------------

    @property
    def free(self) -> int:
        """Slots free now (0 when there is no limit, which keeps none)."""
        return self._free

    def state(self, key: Hashable) -> SlotState:
        """Where ``key`` stands: absent, waiting, holding, or released (its slot came back, its block runs on)."""
        entry = self._keys.get(key)
        return entry.state if entry is not None else SlotState.ABSENT

    def waiting(self) -> tuple[Hashable, ...]:
        """The waiting keys, first come first."""
        return tuple(self._queue)

    # -- events ----------------------------------------------------------------------------------------------

    def request(self, key: Hashable, *, now: float, scope: str = "train") -> bool:
        """A rollout asks for a start slot. True: it holds one now, having waited exactly 0.0 s.

        False: it waits; a later ``release``, ``cancel`` or ``on_deadline`` returns its ``SlotGranted``.
        """
        self._tick(now, "request")
        if self.limit is None:
            return True
        self._step(key, SlotEvent.REQUEST)
        entry = _Key(SlotState.WAITING, scope, now)
        self._keys[key] = entry
        sc = self._scope(scope)
        sc.advance(now)
        sc.asked = True
        if self._free > 0 and not self._queue:
            self._grant(key, now)
            return True
        self._queue.append(key)
        sc.waiting += 1
        return False

    def cancel(self, key: Hashable, *, now: float) -> list[SlotGranted]:
        """The wait of ``key`` was cancelled: it takes nothing. If its slot had been granted at that instant (the
        waiter never resumed), the slot passes on to the next waiters, whose grants are returned."""
        self._tick(now, "cancel")
        if self.limit is None:
            return []
        entry = self._keys.get(key)
        state = entry.state if entry is not None else SlotState.ABSENT
        self._check(key, state, SlotEvent.CANCEL)
        assert entry is not None
        sc = self._scope(entry.scope)
        sc.advance(now)
        del self._keys[key]
        if state is SlotState.WAITING:
            self._queue.remove(key)
            sc.waiting -= 1
            return []
        # Granted but never taken up: undo the grant, so it counts neither as taken nor as a release.
        sc.starting -= 1
        self._deadlines.pop(key, None)
        for i in range(len(sc.waits) - 1, -1, -1):
            if sc.waits[i][0] == key:
                del sc.waits[i]
                break
        self._free += 1
        return self._grant_waiters(now)

    def release(self, key: Hashable, reason: str, *, now: float) -> list[SlotGranted]:
        """``key``'s slot comes back for ``reason`` (``first_call``, ``end`` or ``cancelled``); returns the grants
        it makes. Only the first release of a slot counts; ``end`` and ``cancelled`` also close the key."""
        self._tick(now, "release")
        if reason not in ("first_call", "end", "cancelled"):
            raise ValueError(f"release reason must be first_call, end or cancelled, got {reason!r}")
        if self.limit is None:
            return []
        event = SlotEvent(reason)
        entry = self._keys.get(key)
        state = entry.state if entry is not None else SlotState.ABSENT
        new = self._check(key, state, event)
        if entry is None:
            return []
        if new is SlotState.ABSENT:
            del self._keys[key]
        else:
            entry.state = new
        if state is not SlotState.HOLDING:
            return []
        self._give_back(key, entry.scope, reason, now)
        return self._grant_waiters(now)

    def next_deadline(self) -> float | None:
        """When the oldest held slot comes back on its timer, or None when no slot is held."""
        for deadline in self._deadlines.values():
            return deadline
        return None

    def on_deadline(self, *, now: float) -> list[SlotGranted]:
        """Give back every slot whose timer has run out by ``now`` (reason ``timer``); returns the grants made."""
        self._tick(now, "on_deadline")
        expired = []
        while self._deadlines:
            key, deadline = next(iter(self._deadlines.items()))
            if deadline > now:
                break
            expired.append(key)
            entry = self._keys[key]
            entry.state = self._check(key, entry.state, SlotEvent.TIMER)
            self._give_back(key, entry.scope, "timer", now)
        return self._grant_waiters(now) if expired else []

    # -- outputs ---------------------------------------------------------------------------------------------

    def take_warnings(self) -> list[str]:
        """Warnings since the last call, each given once per start."""
        out, self._warnings = self._warnings, []
        return out

    def metrics(self, *, now: float, scope: str = "train") -> dict[str, float]:
        """``rollout_client/start_limit/*`` of ``scope`` since the last read, then reset.

        Empty until a rollout of the scope has asked for a slot. ``starting_mean`` and ``waiting_mean`` are
        time-weighted over the window (the level at ``now`` when the window has no length); the four release counts
        are always present; ``wait_seconds_{p50,p90,max}`` (linear interpolation between order statistics) only
        when a slot was taken in the window.
        """
        self._tick(now, "metrics")
        sc = self._scopes.get(scope)
        if sc is None or not sc.asked:
            return {}
        return sc.read(now)

    # -- state ---------------------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """The JSON-safe state (keys are written as lists, so a key must be a tuple of JSON-safe values)."""
        return {
            "free": self._free,
            "keys": [[list(k), e.state.value, e.scope, e.asked_at] for k, e in self._keys.items()],
            "queue": [list(k) for k in self._queue],
            "deadlines": [[list(k), t] for k, t in self._deadlines.items()],
            "scopes": {name: sc.saved() for name, sc in self._scopes.items()},
            "now": self._now, "released_total": self._released_total, "released_whole": self._released_whole,
            "warned_timer": self._warned_timer, "warned_whole": self._warned_whole,
        }

    def load_state_dict(self, state: dict) -> None:
        """Make this limit equal to the one whose ``state_dict`` is ``state`` (keys come back as tuples)."""
        self._free = state["free"]
        self._keys = {tuple(k): _Key(SlotState(st), scope, asked) for k, st, scope, asked in state["keys"]}
        self._queue = deque(tuple(k) for k in state["queue"])
        self._deadlines = OrderedDict((tuple(k), t) for k, t in state["deadlines"])
        self._scopes = {name: ScopeWindow.from_saved(saved) for name, saved in state["scopes"].items()}
        self._now = state["now"]
        self._released_total, self._released_whole = state["released_total"], state["released_whole"]
        self._warned_timer, self._warned_whole = state["warned_timer"], state["warned_whole"]

    # -- internals -------------------------------------------------------------------------------------------

    def _tick(self, now: float, event: str) -> None:
        if self._now is not None and now < self._now:
            raise ValueError(f"start limit: {event} at now={now!r} is before the last event at {self._now!r}")
        self._now = now

    def _scope(self, scope: str) -> ScopeWindow:
        sc = self._scopes.get(scope)
        if sc is None:
            sc = self._scopes[scope] = ScopeWindow()
        return sc

    def _check(self, key: Hashable, state: SlotState, event: SlotEvent) -> SlotState:
        new = _TRANSITIONS.get((state, event))
        if new is None:
            raise StartLimitError(
                f"start limit: event {event.value!r} for rollout {key!r} in state {state.value!r}"
            )
        return new

    def _step(self, key: Hashable, event: SlotEvent) -> SlotState:
        entry = self._keys.get(key)
        return self._check(key, entry.state if entry is not None else SlotState.ABSENT, event)

    def _grant(self, key: Hashable, now: float) -> float:
        entry = self._keys[key]
        entry.state = self._check(key, entry.state, SlotEvent.GRANT)
        self._free -= 1
        self._deadlines[key] = now + self.timer_s
        waited = now - entry.asked_at
        sc = self._scope(entry.scope)
        sc.starting += 1
        sc.waits.append((key, waited))
        return waited

    def _grant_waiters(self, now: float) -> list[SlotGranted]:
        granted = []
        while self._free > 0 and self._queue:
            key = self._queue.popleft()
            sc = self._scope(self._keys[key].scope)
            sc.advance(now)
            sc.waiting -= 1
            granted.append(SlotGranted(key, self._grant(key, now)))
        return granted

    def _give_back(self, key: Hashable, scope: str, reason: str, now: float) -> None:
        sc = self._scope(scope)
        sc.advance(now)
        sc.starting -= 1
        sc.releases[reason] += 1
        self._deadlines.pop(key, None)
        self._free += 1
        if reason == "cancelled":
            return
        self._released_total += 1
        if reason in ("end", "timer"):
            self._released_whole += 1
        if reason == "timer" and not self._warned_timer:
            self._warned_timer = True
            self._warnings.append(
                f"a start slot (train.max_starting_rollouts) came back on its {self.timer_s:g} s timer: rollout "
                f"{key!r} made no model call in that time after taking it. Its harness may make no model call "
                "through the gateway, or its start-up takes longer than worker_startup_budget_seconds + 300 s"
            )
        if (
            not self._warned_whole
            and self._released_total >= MOSTLY_WHOLE_MIN_RELEASES
            and 2 * self._released_whole > self._released_total
        ):
            self._warned_whole = True
            self._warnings.append(
                f"{self._released_whole} of {self._released_total} start slots (train.max_starting_rollouts) came "
                "back only at their rollout's end or on their timer, not at a first model call: for this workload "
                "the limit bounds whole rollouts, not their start-ups. Raise it, or set it to null"
            )


def announcement(
    limit: int | None,
    *,
    group_workflow: bool,
    largest_group_size: int,
    concurrent_rollouts: int,
) -> list[tuple[str, str]]:
    """The lines a start of training logs about the limit, as ``(level, message)`` with level info or warning.

    ``group_workflow``: the training workflow is a GroupRolloutWorkflow (only its members take slots);
    ``concurrent_rollouts``: the train and eval ``max_concurrent_rollouts`` summed.
    """
    if limit is None:
        return []
    lines = [("info", f"At most {limit} rollouts start at once (train.max_starting_rollouts, experimental)")]
    if not group_workflow:
        lines.append(
            (
                "warning",
                "train.max_starting_rollouts has no effect on training: its workflow is not a GroupRolloutWorkflow, "
                "whose members alone take start slots",
            )
        )
    if limit < largest_group_size:
        lines.append(
            (
                "warning",
                f"train.max_starting_rollouts ({limit}) is below the largest group size ({largest_group_size}): a "
                "group's members start in waves, and each keeps its full straggler grace",
            )
        )
    if limit >= concurrent_rollouts:
        lines.append(
            (
                "info",
                f"train.max_starting_rollouts ({limit}) can never bind: it is at least the {concurrent_rollouts} "
                "rollouts that can run at once",
            )
        )
    return lines


__all__ = ["PREFIX", "RELEASE_REASONS", "SlotGranted", "SlotState", "StartLimit", "StartLimitError", "announcement",
           "start_timer_s"]  # PREFIX, RELEASE_REASONS: start_scope's, named here too
