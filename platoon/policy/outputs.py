"""What a group's workflow hands back, and what the dispatcher hands the trainer.

``GroupOutput`` is the runtime-neutral result of one group: its verdict (``trained`` when its rollouts mixed, ``uniform``
when they scored alike, ...), one ``MemberResult`` per rollout, and the datums a step would train (opaque to the
policy layer, JSON-safe; the simulator's are small tuples, the live backend's are token ids and log-probabilities).
A workflow that raised is ``None``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from platoon.policy.stats import GroupRecord, MemberResult
from platoon.policy.verdict import DATUM_VERDICTS, group_verdict

Key = tuple[int, int]


@dataclass(frozen=True)
class GroupOutput:
    verdict: str
    members: tuple[MemberResult, ...] = ()
    datums: tuple[Any, ...] = ()

    def __len__(self) -> int:
        return len(self.datums)

    def to_json(self) -> dict:
        """The members as columns (a list per field of `MemberResult.to_json`): a checkpoint holds every settled
        group of its step, and naming each field once a group, not once a rollout, makes it about a third the size."""
        rows = [m.to_json() for m in self.members]
        columns = {k: [r[k] for r in rows] for k in rows[0]} if rows else {}
        return {"verdict": self.verdict, "members": columns, "datums": list(self.datums)}

    @classmethod
    def from_json(cls, data: dict) -> GroupOutput:
        """Reads `to_json`'s form, or an older release's (``members`` a list of `MemberResult.to_json` dicts)."""
        return cls(data["verdict"], tuple(MemberResult.from_json(m) for m in member_rows(data["members"])),
                   tuple(_tuplify(d) for d in data["datums"]))


def group_output(members: Sequence[MemberResult], *, min_successful: int = 1,
                 datums: Callable[[], Iterable[Any]] = tuple) -> GroupOutput:
    """A settled group's output, one rule for every runtime: its verdict (``group_verdict``), its members, and
    ``datums()`` when the verdict hands datums to a step (``DATUM_VERDICTS``); otherwise none, and ``datums`` is not
    called."""
    members = tuple(members)
    verdict = group_verdict(members, min_successful=min_successful)
    return GroupOutput(verdict, members, tuple(datums()) if verdict in DATUM_VERDICTS else ())


def member_rows(members: dict[str, list] | list[dict]) -> list[dict]:
    """A group output's JSON ``members`` as one `MemberResult.to_json` dict per member, from either form: columns
    (`GroupOutput.to_json`) or a list of dicts (an older release's)."""
    if isinstance(members, dict):
        n = len(next(iter(members.values()), ()))
        return [{k: column[i] for k, column in members.items()} for i in range(n)]
    return list(members)


def _tuplify(value: Any) -> Any:
    """JSON turns tuples into lists; datums are compared after a round trip, so give tuples back."""
    return tuple(_tuplify(v) for v in value) if isinstance(value, list) else value


class SettledKind(StrEnum):
    """What a settled group is to a step: trained (admitted), dropped as stale, failed, or a rule's marker."""

    ADMITTED = "admitted"
    STALE = "stale"
    FAILED = "failed"
    MARKER = "marker"


@dataclass(frozen=True)
class SettledGroup:
    """A settled group as a step sees it: its draw, its output (None: the workflow failed) and its record."""

    key: Key
    task_id: str
    entry: str | None
    position: int
    output: GroupOutput | None
    record: GroupRecord
    kind: SettledKind = SettledKind.ADMITTED
    reason: str | None = None  # the admission rule's reason (rejections and admits under a rule)
    window: int = 0  # the step during which it was rejected (markers)
    held: bool = False  # a marker that keeps its horizon place until a step takes it

    def to_json(self) -> dict:
        return {"key": list(self.key), "task_id": self.task_id, "entry": self.entry, "position": self.position,
                "output": None if self.output is None else self.output.to_json(),
                "record": self.record.to_json(), "kind": self.kind, "reason": self.reason,
                "window": self.window, "held": self.held}

    @classmethod
    def from_json(cls, d: dict) -> SettledGroup:
        return cls(tuple(d["key"]), d["task_id"], d["entry"], d["position"],
                   None if d["output"] is None else GroupOutput.from_json(d["output"]),
                   GroupRecord.from_json(d["record"]), SettledKind(d["kind"]), d["reason"], d["window"], d["held"])


@dataclass(frozen=True)
class TrainStep:
    """Decision: train step ``step`` on ``groups`` (admitted, not stale, in draw order) at policy ``version``.
    ``weights``: each group's loss weight, in the order of ``groups`` (the drawing samplers' importance weights,
    `SamplerSet.loss_weights`); ``()``: every group weighs 1."""

    step: int
    version: int
    groups: tuple[SettledGroup, ...]
    stale: tuple[SettledGroup, ...] = field(default=())
    failed: tuple[SettledGroup, ...] = field(default=())
    markers: tuple[SettledGroup, ...] = field(default=())
    weights: tuple[float, ...] = field(default=())

    @property
    def datums(self) -> list[Any]:
        return [d for g in self.groups if g.output is not None for d in g.output.datums]

    def group_weights(self) -> tuple[float, ...]:
        """One loss weight per group of ``groups`` (1 each without ``weights``)."""
        return self.weights or (1.0,) * len(self.groups)


def draw_order(groups: Sequence[SettledGroup]) -> tuple[SettledGroup, ...]:
    return tuple(sorted(groups, key=lambda g: g.key))
