"""Plain records of the dispatcher's state: the step cycle's phases, bound draws, and the one pending start.

They live apart from ``platoon.policy.dispatcher`` so that its serialiser (``platoon.policy.dispatch_state``) can
read and rebuild them without importing the dispatcher itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from platoon.policy.outputs import Key
from platoon.policy.permits import DrawLease
from platoon.policy.samplers.runtime import Token


class StepPhase(Enum):
    ASSEMBLING = "assembling"
    TRAINING = "training"
    COMMITTED = "committed"
    FINISHED = "finished"


class PendingKind(Enum):
    """What the pending start will start: a bound draw, an adaptive entry's token, or a run-level adaptive ask."""

    DRAW = "draw"
    TOKEN = "token"
    ASK = "ask"


@dataclass
class BoundDraw:
    """A bound draw: outstanding until a committed step takes it, or it is rejected or skipped."""

    key: Key
    row: int
    task_id: str
    entry: str | None
    label: str | None
    position: int
    group_size: int
    version: int
    sampler: str
    reason: str
    score: float | None
    started_at: float | None = None

    def to_json(self) -> list:
        return [list(self.key), self.row, self.task_id, self.entry, self.label, self.position, self.group_size,
                self.version, self.sampler, self.reason, self.score, self.started_at]

    @classmethod
    def from_json(cls, d: list) -> BoundDraw:
        return cls(tuple(d[0]), *d[1:])


@dataclass
class PendingStart:
    """The one start waiting for its permits: a bound draw, an adaptive entry's token, or a run-level ASK."""

    kind: PendingKind
    lease: DrawLease
    draw: BoundDraw | None = None
    token: Token | None = None


__all__ = ["BoundDraw", "PendingKind", "PendingStart", "StepPhase"]
