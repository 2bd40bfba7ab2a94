"""One settled group and its members, as the statistics take them in, and the decay of evidence over versions.

``MemberResult`` is one rollout's result (``valid`` members enter the baseline; invalid ones are censored),
``GroupRecord`` one settled group with its draw's provenance (which sampler drew it, why, at what score) and its
verdict; ``DecayedCounts`` and ``DecayedMean`` weigh evidence ``d`` versions old by ``2 ** (-d / 32)``, never more
than 1. ``platoon.policy.stats`` builds the per-task statistics on them and re-exports every name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from platoon.policy import frozen

MAIN = "main"
"""The only policy name of ``drawn_at`` and member ``versions``."""
FATES = ("consumed", "stale", "failed", "skipped", "lost", "rejected")
"""The fates of a draw, in column order (``rejected`` last, so that the older five keep their places)."""
HALF_LIFE_VERSIONS = 32.0
"""Evidence halves every 32 policy versions."""
KINDS = ("informative", "all_pass", "all_fail", "uniform_mixed")
"""Kinds of a settled group (`GroupRecord.kind`)."""
VERDICTS = (
    "trained",
    "uniform",
    "reward_key_mismatch",
    "no_results",
    "below_min",
    "no_completed_root",
    "no_datums",
    "failed",
    "unknown",
)


def decay(age: float, half_life: float | None = HALF_LIFE_VERSIONS) -> float:
    """Weight of evidence ``age`` versions old: ``2 ** (-age / half_life)``; 1 when ``age <= 0`` or no half-life."""
    if half_life is None or age <= 0:
        return 1.0
    return 2.0 ** (-age / half_life)


# --------------------------------------------------------------------------------------------------- records


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


@dataclass(frozen=True)
class MemberResult:
    """One rollout of a group.

    A member passes when it is ``valid``, ``scored`` is not None and ``scored >= threshold``, with the threshold
    fixed at 1.0 when ``flag`` (``scored`` is the rollout's own success flag). Invalid members are censored: neither
    a pass nor a failure. ``versions`` maps a policy name to the ``(oldest, newest)`` checkpoint versions that the
    member's datums sampled.
    """

    reward: float | None = None
    scored: float | None = None
    valid: bool = False
    outcome: str = "none"
    disposition: str = "completed"
    reward_key: str | None = None
    steps: int | None = None
    output_tokens: int | None = None
    seconds: float | None = None
    versions: Mapping[str, tuple[int, int]] = field(default_factory=dict, hash=False)
    flag: bool = False

    @classmethod
    def quick(cls, **fields: Any) -> MemberResult:
        """``MemberResult(**fields)`` (no check of the names), without the frozen dataclass's setattr per field: a
        simulator builds one for every rollout."""
        values = dict(_MEMBER_DEFAULTS)
        values.update(fields)
        if "versions" not in fields:
            values["versions"] = {}
        return frozen.build(cls, values)

    def passes(self, threshold: float) -> bool:
        if not self.valid or self.scored is None:
            return False
        return self.scored >= (1.0 if self.flag else threshold)

    def to_json(self) -> dict[str, Any]:
        return {
            "reward": self.reward,
            "scored": self.scored,
            "valid": self.valid,
            "outcome": self.outcome,
            "disposition": self.disposition,
            "reward_key": self.reward_key,
            "steps": self.steps,
            "output_tokens": self.output_tokens,
            "seconds": self.seconds,
            "versions": {k: [int(a), int(b)] for k, (a, b) in self.versions.items()},
            "flag": self.flag,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MemberResult:
        return cls(
            reward=_opt_float(data.get("reward")),
            scored=_opt_float(data.get("scored")),
            valid=bool(data.get("valid", False)),
            outcome=str(data.get("outcome", "none")),
            disposition=str(data.get("disposition", "completed")),
            reward_key=data.get("reward_key"),
            steps=_opt_int(data.get("steps")),
            output_tokens=_opt_int(data.get("output_tokens")),
            seconds=_opt_float(data.get("seconds")),
            versions={str(k): (int(v[0]), int(v[1])) for k, v in (data.get("versions") or {}).items()},
            flag=bool(data.get("flag", False)),
        )


_MEMBER_DEFAULTS = frozen.defaults(MemberResult)
_UNSET = object()


@dataclass(frozen=True)
class GroupRecord:
    """One settled group: who drew which task, why, and what its members scored.

    ``sampler`` is the qualified name of the sampler that chose the task (the run's as configured, or
    ``<sampler>@<entry>``); ``reason`` is ``order``, ``explore``, ``exploit``, ``fallback``, ``reissue`` or a custom
    sampler's own; ``score`` its score (pass_rate: the predicted chance the group trains). ``position`` is the place
    in the run's order (a reissued draw keeps it); ``drawn_at`` is ``{"main": version at draw}``.
    """

    start: int
    seq: int
    task_id: str
    entry: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    harness: str | None = None
    group_size: int = 0
    sampler: str = "auto"
    reason: str = "order"
    score: float | None = None
    position: int | None = None
    drawn_at: Mapping[str, int] = field(default_factory=dict, hash=False)
    members: tuple[MemberResult, ...] = ()
    verdict: str = "unknown"

    @property
    def key(self) -> tuple[int, int]:
        return (self.start, self.seq)

    @property
    def valid(self) -> int:
        """The number of valid members."""
        return sum(1 for m in self.members if m.valid)

    def passes(self, threshold: float) -> int:
        """The number of members that pass at ``threshold`` (see `MemberResult.passes`)."""
        return sum(1 for m in self.members if m.passes(threshold))

    def oldest_version(self) -> int | None:
        """The oldest ``main`` version any member's datums sampled; else ``drawn_at["main"]`` (or None)."""
        # Asked of every settled group by the horizon, the recorder, the store and the step's metrics: the record is
        # frozen, so the answer is kept in its __dict__ (not a field: equality, hash, repr and to_json ignore it).
        found = self.__dict__.get("_oldest_version", _UNSET)
        if found is _UNSET:
            spans = [m.versions[MAIN][0] for m in self.members if MAIN in m.versions]
            found = min(spans) if spans else self.drawn_at.get(MAIN)
            self.__dict__["_oldest_version"] = found
        return found

    def kind(self, threshold: float) -> str | None:
        """``trained`` -> informative; ``uniform`` -> all_pass / all_fail (valid > 0) or uniform_mixed; else None."""
        if self.verdict == "trained":
            return "informative"
        if self.verdict != "uniform":
            return None
        valid, passes = self.valid, self.passes(threshold)
        if valid > 0 and passes == valid:
            return "all_pass"
        if valid > 0 and passes == 0:
            return "all_fail"
        return "uniform_mixed"

    def to_json(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "seq": self.seq,
            "task_id": self.task_id,
            "entry": self.entry,
            "labels": dict(self.labels),
            "harness": self.harness,
            "group_size": self.group_size,
            "sampler": self.sampler,
            "reason": self.reason,
            "score": self.score,
            "position": self.position,
            "drawn_at": dict(self.drawn_at),
            "members": [m.to_json() for m in self.members],
            "verdict": self.verdict,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GroupRecord:
        return cls(
            start=int(data["start"]),
            seq=int(data["seq"]),
            task_id=str(data["task_id"]),
            entry=data.get("entry"),
            labels={str(k): str(v) for k, v in (data.get("labels") or {}).items()},
            harness=data.get("harness"),
            group_size=int(data.get("group_size", 0)),
            sampler=str(data.get("sampler", "auto")),
            reason=str(data.get("reason", "order")),
            score=_opt_float(data.get("score")),
            position=_opt_int(data.get("position")),
            drawn_at={str(k): int(v) for k, v in (data.get("drawn_at") or {}).items()},
            members=tuple(MemberResult.from_json(m) for m in data.get("members") or ()),
            verdict=str(data.get("verdict", "unknown")),
        )


class GroupSummary(NamedTuple):
    """A task's history item; ``version`` is the group's oldest version, ``seconds`` its slowest member's."""

    start: int
    seq: int
    version: int | None
    valid: int
    passes: int
    reward_mean: float | None
    verdict: str
    steps: float | None
    seconds: float | None


# --------------------------------------------------------------------------------------------------- decay


class DecayedCounts:
    """``(passes, fails)`` decayed by version: ``2 ** (-age / 32)`` per version of age.

    ``add(p, f, v)``: with no version yet or ``v >= version``, scale the stored counts by ``decay(v - version)``,
    add ``(p, f)``, set ``version = v``; otherwise (older evidence) add ``(p, f) * decay(version - v)`` and keep
    the version. ``read(now)`` is the counts times ``decay(now - version)``, ``(0, 0)`` without a version.
    JSON: ``[passes, fails, version]``.
    """

    __slots__ = ("passes", "fails", "version")

    def __init__(self, passes: float = 0.0, fails: float = 0.0, version: int | None = None) -> None:
        self.passes = float(passes)
        self.fails = float(fails)
        self.version = version

    def add(self, passes: float, fails: float, version: int) -> None:
        if version == self.version:  # the common case, same version: a weight of exactly 1.0, no power taken
            self.passes += passes
            self.fails += fails
            return
        if self.version is None or version >= self.version:
            w = 1.0 if self.version is None else decay(version - self.version)
            self.passes = self.passes * w + passes
            self.fails = self.fails * w + fails
            self.version = version
        else:
            w = decay(self.version - version)
            self.passes += passes * w
            self.fails += fails * w

    def read(self, now: float) -> tuple[float, float]:
        if self.version is None:
            return (0.0, 0.0)
        w = decay(now - self.version)
        return (self.passes * w, self.fails * w)

    def copy(self) -> DecayedCounts:
        return type(self)(self.passes, self.fails, self.version)

    def to_json(self) -> list[Any]:
        return [self.passes, self.fails, self.version]

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> DecayedCounts:
        if len(data) != 3:
            raise ValueError(f"decayed counts are [a, b, version], got {data!r}")
        a, b, v = data
        return cls(float(a), float(b), None if v is None else int(v))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DecayedCounts) and self.to_json() == other.to_json()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.passes!r}, {self.fails!r}, {self.version!r})"


class DecayedMean(DecayedCounts):
    """A decayed mean: ``(total, weight)`` kept like `DecayedCounts`; each value adds ``(value, 1.0)``.

    ``mean()`` is ``total / weight`` (None when the weight is 0); decay scales both alike. JSON:
    ``[total, weight, version]``.
    """

    __slots__ = ()

    def add_value(self, value: float, version: int) -> None:
        self.add(float(value), 1.0, version)

    def add_values(self, values: Sequence[float], version: int) -> None:
        """``add_value`` of each value, in order: the same float operations, with the same-version case (every value
        after the first, unless the evidence is older) summed in one loop (a settle adds each member's)."""
        if not values:
            return
        if version != self.version:
            self.add(float(values[0]), 1.0, version)
            if version != self.version:  # older evidence: each value is discounted on its own
                for value in values[1:]:
                    self.add(float(value), 1.0, version)
                return
            values = values[1:]
        total, weight = self.passes, self.fails
        for value in values:
            total += float(value)
            weight += 1.0
        self.passes, self.fails = total, weight

    def mean(self) -> float | None:
        return None if self.fails == 0 else self.passes / self.fails
