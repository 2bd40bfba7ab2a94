"""Plain records of the dispatcher: its settings, the step cycle's phases, bound draws, and the one pending start.

They live apart from ``platoon.policy.dispatcher`` so that its serialiser (``platoon.policy.dispatch_state``) can
read and rebuild them without importing the dispatcher itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from platoon.config.effective import any_straggler_policy, max_concurrent_rollouts
from platoon.config.losses import zero_at_zero_advantages
from platoon.policy.outputs import Key
from platoon.policy.permits import DrawLease
from platoon.policy.samplers.runtime import Token

TEARDOWN_WAIT_S = 60.0


@dataclass(frozen=True)
class DispatchConfig:
    """The run's dispatch settings (built from the config by ``dispatch_config``)."""

    batch_size: int
    steps: int
    max_concurrent_rollouts: int
    permit_release: str = "rollout"
    max_staleness: int | None = 1
    entry_staleness: Mapping[str, int | None] = field(default_factory=dict)
    max_groups_per_step: float = 3.0
    label_limits: Mapping[str, int] = field(default_factory=dict)
    teardown_wait_s: float = TEARDOWN_WAIT_S
    straggler_policy: bool = False  # a straggler timeout applies: log what it censors (train/batch/censoring/*)
    uniform_groups_update: bool = False
    """A step of only uniform groups (every advantage 0) still makes an update: the loss has a term that does not
    depend on the advantage (kl_coef, entropy_coef). Without one such a step takes no update (0.4.0's rule)."""

    def __post_init__(self) -> None:
        if self.permit_release not in ("rollout", "group"):
            raise ValueError(f"permit_release must be rollout or group, got {self.permit_release!r}")


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


def dispatch_config(cfg: Any, steps: int) -> DispatchConfig:
    """The dispatch settings of a ``RunConfig`` planned for ``steps`` steps."""
    train = cfg.train
    return DispatchConfig(
        batch_size=train.batch_size, steps=steps, max_concurrent_rollouts=max_concurrent_rollouts(cfg),
        permit_release=train.permit_release, max_staleness=train.max_staleness,
        entry_staleness={e.label: e.max_staleness for e in cfg.environments if e.max_staleness is not None},
        max_groups_per_step=train.refill.max_groups_per_step,
        label_limits=dict(train.rollout_group_limits),
        straggler_policy=any_straggler_policy(cfg),
        uniform_groups_update=not zero_at_zero_advantages(train.loss_fn_config))


__all__ = ["TEARDOWN_WAIT_S", "BoundDraw", "DispatchConfig", "PendingKind", "PendingStart", "StepPhase",
           "dispatch_config"]
