"""Plain-data records of the simulator's work in flight: groups and their members.

Everything here round-trips through JSON exactly (floats are written as Python's shortest repr), so that a
checkpoint's ``sim-<step>.json`` restores the groups in flight as they stood.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from platoon.policy.stats import MemberResult
from platoon.sim.workload import GroupDraws, MemberOutcome


class Phase(Enum):
    """Where a member stands: waiting for its permit, for a start slot, starting up (up to its first model call),
    running, waiting for its teardown (its permit held), done."""

    WAIT = "wait"
    SLOT = "slot"
    STARTUP = "startup"
    RUN = "run"
    TEARDOWN = "teardown"
    DONE = "done"


@dataclass(slots=True)
class SimMember:
    """One member of a group in flight. ``out`` is decided when its permit is granted; ``timer`` is the seq of the
    pending timer that ends its phase."""

    phase: Phase = Phase.WAIT
    granted: float | None = None
    started: float | None = None
    version: int = 0
    out: MemberOutcome | None = None
    timer: int | None = None
    result: MemberResult | None = None

    def to_json(self) -> list:
        o = self.out
        return [self.phase.value, self.granted, self.started, self.version,
                None if o is None else [o.passed, o.valid, o.first_call_s, o.run_s, o.error_at_s, o.teardown_s],
                self.timer, None if self.result is None else self.result.to_json()]

    @classmethod
    def from_json(cls, d: list) -> SimMember:
        phase, granted, started, version, out, timer, result = d
        return cls(Phase(phase), granted, started, version, None if out is None else MemberOutcome(*out), timer,
                   None if result is None else MemberResult.from_json(result))


@dataclass(slots=True)
class SimGroup:
    """A group in flight: its draw and its members."""

    key: tuple[int, int]
    row: int
    task_id: str
    entry: int
    size: int
    created: float
    members: list[SimMember]
    pending: int
    failed: bool = False
    draws: GroupDraws | None = field(default=None)

    def to_json(self) -> list:
        return [list(self.key), self.row, self.task_id, self.entry, self.size, self.created,
                [m.to_json() for m in self.members], self.pending, self.failed]

    @classmethod
    def from_json(cls, d: list) -> SimGroup:
        key, row, task_id, entry, size, created, members, pending, failed = d
        return cls(tuple(key), row, task_id, entry, size, created, [SimMember.from_json(m) for m in members],
                   pending, failed)


__all__ = ["Phase", "SimGroup", "SimMember"]
