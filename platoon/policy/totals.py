"""Totals over settled groups: of the run, an entry, a label, a task; and the per-task reads built from them.

What this module owns: ``GroupTotals`` (the counts one settled group adds, and their JSON form in a statistics
snapshot), ``TaskRecord`` (what the store keeps of a task beyond its array fields, with its limits ``MEANS``,
``HISTORY`` and ``NO_EVIDENCE_LIMIT``), ``TaskStats`` (a task's totals with its streaks, draws, fates, history and
means: the full read, a copy), and the cheap reads ``TaskCounts`` and ``TaskCountArrays``. The store
(``platoon.policy.stats``) keeps them.

Rules it keeps:
- evidence is dated by a group's oldest datum version (the ``version`` given to ``add``), never by when it settled;
- invalid members are censored from everything except the ``groups`` count;
- a snapshot's totals with a kind this version does not know are a ValueError, not silently dropped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from platoon.policy.records import FATES, KINDS, DecayedCounts, DecayedMean, GroupRecord, GroupSummary

NO_EVIDENCE_LIMIT = 3
"""A task whose last 3 groups had no valid member is "without evidence" (pass_rate reaches it by exploring only)."""
HISTORY = 8
"""How many newest group summaries each task keeps."""
MEANS = ("steps", "output_tokens", "seconds", "reward")
"""The decayed per-task means, by name."""


class SettleCounts(NamedTuple):
    """What one settled group adds to any totals, at one success threshold (`GroupTotals.add`)."""

    valid: int
    passes: int
    reported: int
    rewards: tuple[float, ...]
    kind: str | None

    @classmethod
    def of(cls, record: GroupRecord, threshold: float) -> SettleCounts:
        members = record.members
        valid = sum(1 for m in members if m.valid)
        passes = sum(1 for m in members if m.passes(threshold))
        if record.verdict == "trained":
            kind: str | None = "informative"
        elif record.verdict != "uniform":
            kind = None
        elif valid > 0 and passes == valid:
            kind = "all_pass"
        elif valid > 0 and passes == 0:
            kind = "all_fail"
        else:
            kind = "uniform_mixed"
        rewards = tuple(m.reward for m in members if m.valid and m.reward is not None)
        return cls(valid, passes, 1 if members else 0, rewards, kind)


@dataclass
class GroupTotals:
    """Counts over settled groups (of the run, an entry, a label or a task).

    Per record, with the entry's success threshold and ``v = record.oldest_version()``: ``groups += 1``;
    ``reported_groups += 1`` if it has members; ``attempts += valid``; ``passes += passes(threshold)``;
    ``reward_sum +=`` the rewards of valid members; its kind's counter ``+= 1``; and, when ``valid > 0`` and ``v``
    is not None, ``decayed.add(passes, valid - passes, v)``.
    """

    groups: int = 0
    reported_groups: int = 0
    attempts: int = 0
    passes: int = 0
    reward_sum: float = 0.0
    informative_groups: int = 0
    all_pass_groups: int = 0
    all_fail_groups: int = 0
    uniform_mixed_groups: int = 0
    decayed: DecayedCounts = field(default_factory=DecayedCounts)

    def evidence(self, *, now: float) -> tuple[float, float]:
        """The decayed ``(passes, fails)`` read at version ``now``."""
        return self.decayed.read(now)

    def add(self, record: GroupRecord, threshold: float, version: int | None) -> None:
        self.add_counts(SettleCounts.of(record, threshold), version)

    def add_counts(self, c: SettleCounts, version: int | None) -> None:
        """``add`` with the record's counts taken once (a settle adds one record to several totals)."""
        valid, passes = c.valid, c.passes
        self.groups += 1
        self.reported_groups += c.reported
        self.attempts += valid
        self.passes += passes
        for reward in c.rewards:  # one at a time, in member order: the float sum of ``add`` exactly
            self.reward_sum += reward
        if c.kind is not None:
            name = f"{c.kind}_groups"
            setattr(self, name, getattr(self, name) + 1)
        if valid > 0 and version is not None:
            self.decayed.add(passes, valid - passes, version)

    def kinds(self) -> dict[str, int]:
        return {k: getattr(self, f"{k}_groups") for k in sorted(KINDS)}

    def copy(self) -> GroupTotals:
        return GroupTotals(**{k: getattr(self, k) for k in TOTAL_FIELDS}, decayed=self.decayed.copy())

    def to_json(self) -> dict[str, Any]:
        return {
            "groups": self.groups,
            "reported": self.reported_groups,
            "attempts": self.attempts,
            "passes": self.passes,
            "reward_sum": self.reward_sum,
            "kinds": self.kinds(),
            "evidence": self.decayed.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GroupTotals:
        kinds = data.get("kinds") or {}
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown group kinds {sorted(unknown)}")
        return cls(
            groups=int(data["groups"]),
            reported_groups=int(data["reported"]),
            attempts=int(data["attempts"]),
            passes=int(data["passes"]),
            reward_sum=float(data["reward_sum"]),
            **{f"{k}_groups": int(kinds.get(k, 0)) for k in KINDS},
            decayed=DecayedCounts.from_json(data["evidence"]),
        )


TOTAL_FIELDS = (
    "groups",
    "reported_groups",
    "attempts",
    "passes",
    "reward_sum",
    "informative_groups",
    "all_pass_groups",
    "all_fail_groups",
    "uniform_mixed_groups",
)
"""The count fields of ``GroupTotals``, all but ``decayed``, in order (a copy or a ``TaskStats`` is built from them)."""


class TaskRecord:
    """What the store keeps of a task beyond its array fields; built on the task's first settle, draw or fate."""

    __slots__ = ("totals", "means", "history", "fates")

    def __init__(self) -> None:
        self.totals = GroupTotals()
        self.means = {name: DecayedMean() for name in MEANS}
        self.history: deque[GroupSummary] = deque(maxlen=HISTORY)
        self.fates = dict.fromkeys(FATES, 0)


@dataclass
class TaskStats(GroupTotals):
    """A task's totals plus its streaks, draws, fates, history (oldest first) and decayed means; a copy."""

    task_id: str = ""
    entry: str | None = None
    label: str | None = None
    uniform_streak: int = 0
    no_evidence_streak: int = 0
    outstanding: int = 0
    drawn: int = 0
    fates: dict[str, int] = field(default_factory=dict)
    history: tuple[GroupSummary, ...] = ()
    means: dict[str, DecayedMean] = field(default_factory=dict)

    def metric(self, name: str, *, now: float | None = None) -> float | None:
        """The decayed mean of ``name`` (one of ``platoon.policy.stats.MEANS``); decay scales total and weight
        alike, so ``now`` is moot."""
        mean = self.means.get(name)
        return None if mean is None else mean.mean()


class TaskCounts(NamedTuple):
    """The cheap per-task read (`TaskStatsView.counts`); ``evidence_version`` is None before any evidence."""

    groups: int
    outstanding: int
    drawn: int
    uniform_streak: int
    no_evidence_streak: int
    evidence_version: int | None


class TaskCountArrays(NamedTuple):
    """`TaskCounts` of many tasks at once, as read-only numpy arrays (``evidence_version`` NaN where None)."""

    groups: np.ndarray
    outstanding: np.ndarray
    drawn: np.ndarray
    uniform_streak: np.ndarray
    no_evidence_streak: np.ndarray
    evidence_version: np.ndarray
