"""Plain-data records of the simulator's work in flight (groups and their members), and the start limit's state.

Everything here round-trips through JSON exactly (floats are written as Python's shortest repr), so that a
checkpoint's ``sim-<step>.json`` restores the groups in flight as they stood.

``StartLimit`` (``platoon.policy.start_limit``) has no ``state_dict`` of its own; ``start_limit_state`` and
``load_start_limit`` read and write its fields here, so that a run under ``train.max_starting_rollouts`` resumes
exactly. They are the one place that knows those fields.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

from platoon.policy.start_limit import SlotState, StartLimit, _Key, _Scope
from platoon.policy.stats import MemberResult
from platoon.sim.workload import GroupDraws, Member

# member phases
WAIT, SLOT, STARTUP, RUN, TEARDOWN, DONE = "wait", "slot", "startup", "run", "teardown", "done"


@dataclass(slots=True)
class SimMember:
    """One member of a group in flight. ``out`` is decided when its permit is granted; ``timer`` and ``cut`` are the
    seqs of its pending timers (its phase's end, its straggler deadline)."""

    phase: str = WAIT
    granted: float | None = None
    started: float | None = None
    version: int = 0
    out: Member | None = None
    timer: int | None = None
    cut: int | None = None
    result: MemberResult | None = None
    busy: bool = False
    ran: bool = False

    def to_json(self) -> list:
        o = self.out
        return [self.phase, self.granted, self.started, self.version,
                None if o is None else [o.passed, o.valid, o.first_call_s, o.run_s, o.error_at_s, o.teardown_s],
                self.timer, self.cut, None if self.result is None else self.result.to_json(), self.busy, self.ran]

    @classmethod
    def from_json(cls, d: list) -> SimMember:
        phase, granted, started, version, out, timer, cut, result, busy, ran = d
        return cls(phase, granted, started, version, None if out is None else Member(*out), timer, cut,
                   None if result is None else MemberResult.from_json(result), busy, ran)


@dataclass(slots=True)
class SimGroup:
    """A group in flight: its draw, its members, and what the straggler policy knows of it."""

    key: tuple[int, int]
    row: int
    task_id: str
    entry: int
    size: int
    created: float
    members: list[SimMember]
    pending: int
    finished: int = 0
    failed: bool = False
    quorum_t: float | None = None
    draws: GroupDraws | None = field(default=None)

    def to_json(self) -> list:
        return [list(self.key), self.row, self.task_id, self.entry, self.size, self.created,
                [m.to_json() for m in self.members], self.pending, self.finished, self.failed, self.quorum_t]

    @classmethod
    def from_json(cls, d: list) -> SimGroup:
        key, row, task_id, entry, size, created, members, pending, finished, failed, quorum_t = d
        return cls(tuple(key), row, task_id, entry, size, created, [SimMember.from_json(m) for m in members],
                   pending, finished, failed, quorum_t)


def _key(k: list) -> tuple:
    return tuple(k)


def start_limit_state(sl: StartLimit) -> dict:
    """The JSON-safe state of ``sl`` (keys are ``(start, seq, index)`` tuples)."""
    return {
        "free": sl._free,
        "keys": [[list(k), e.state.value, e.scope, e.asked_at] for k, e in sl._keys.items()],
        "queue": [list(k) for k in sl._queue],
        "deadlines": [[list(k), t] for k, t in sl._deadlines.items()],
        "scopes": {name: [sc.asked, sc.starting, sc.waiting, sc.window_start, sc.last_t, sc.starting_area,
                          sc.waiting_area, dict(sc.releases), [[list(k), w] for k, w in sc.waits]]
                   for name, sc in sl._scopes.items()},
        "now": sl._now, "released_total": sl._released_total, "released_whole": sl._released_whole,
        "warned_timer": sl._warned_timer, "warned_whole": sl._warned_whole,
    }


def load_start_limit(sl: StartLimit, s: dict) -> None:
    """Make the fresh ``sl`` equal to the one ``start_limit_state`` read."""
    sl._free = s["free"]
    sl._keys = {_key(k): _Key(SlotState(state), scope, asked) for k, state, scope, asked in s["keys"]}
    sl._queue = deque(_key(k) for k in s["queue"])
    sl._deadlines = OrderedDict((_key(k), t) for k, t in s["deadlines"])
    sl._scopes = {}
    for name, (asked, starting, waiting, ws, last, sa, wa, releases, waits) in s["scopes"].items():
        sl._scopes[name] = _Scope(asked, starting, waiting, ws, last, sa, wa, dict(releases),
                                  [(_key(k), w) for k, w in waits])
    sl._now = s["now"]
    sl._released_total, sl._released_whole = s["released_total"], s["released_whole"]
    sl._warned_timer, sl._warned_whole = s["warned_timer"], s["warned_whole"]


__all__ = ["DONE", "RUN", "SLOT", "STARTUP", "TEARDOWN", "WAIT", "SimGroup", "SimMember", "load_start_limit",
           "start_limit_state"]
