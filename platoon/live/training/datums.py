"""What a rollout leaves behind (``Turn``, ``Trajectory``) and what a step trains (``Datum``), built per group.

A **datum** is one training sequence, JSON-safe (it travels in ``GroupOutput.datums``, checkpoints and event logs):

```
{"tokens":   [int, ...],    # the whole context: prompt, the agent's tokens and the environment's answers
 "mask":     [0 | 1, ...],  # 1 where the agent sampled the token (the tokens the loss trains)
 "logprobs": [float, ...],  # the sampling log-probability of each masked token, 0.0 elsewhere
 "advantage": float,        # the advantage of the rollout it came from: its reward minus the group's baseline
 "version":  int}           # the oldest policy version that sampled any of its tokens
```

Rules it keeps:
- **Advantages** (0.4.0's): ``A_i = r_i - mean(r)`` over the group's scored rollouts, no division by their spread;
  with ``leave_one_out`` the baseline is the mean of the *other* scored rollouts (one scored rollout alone: 0). A
  group whose rewards are all equal (to 1e-9) gets exactly 0 for every member, and its verdict is ``uniform``; any
  other group's is ``trained``, unless it has fewer than ``min_successful`` scored rollouts (``below_min``: no
  datums; ``platoon.policy.verdict``).
- A multi-turn rollout is one datum when each turn's prompt extends the previous turn's prompt and tokens (the
  runtime appends the environment's answer to the context); a turn that does not starts a new datum.
- A rollout's ``MemberResult`` carries its reward (trained) and its success flag (``scored`` 1.0 or 0.0 with
  ``flag=True``, so a member passes exactly when the environment said success), its turns, tokens and the span of
  versions its tokens were sampled at (``versions["main"] = (oldest, newest)``, which the staleness filter reads).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from platoon.policy import MemberResult, rewards_differ
from platoon.policy import group_output as assemble

__all__ = [
    "Datum",
    "Trajectory",
    "Turn",
    "check_datum",
    "group_advantages",
    "group_datums",
    "group_output",
    "member_fields",
    "step_datums",
    "trajectory_datums",
]

class Datum(TypedDict):
    tokens: list[int]
    mask: list[int]
    logprobs: list[float]
    advantage: float
    version: int


@dataclass(frozen=True)
class Turn:
    """One model call of a rollout: the context it saw, the tokens it sampled, their log-probabilities, and the
    policy version that sampled them."""

    prompt: tuple[int, ...]
    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]
    version: int

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.logprobs):
            raise ValueError(f"a turn has {len(self.tokens)} tokens but {len(self.logprobs)} log-probabilities")


@dataclass(frozen=True)
class Trajectory:
    """One finished rollout: its turns and the environment's score (reward in [0, 1], success flag)."""

    task_id: str
    turns: tuple[Turn, ...]
    reward: float
    success: bool
    seconds: float | None = None

    @property
    def steps(self) -> int:
        return len(self.turns)

    @property
    def output_tokens(self) -> int:
        return sum(len(t.tokens) for t in self.turns)

    @property
    def versions(self) -> tuple[int, int] | None:
        """``(oldest, newest)`` policy version of its turns, or None without turns."""
        if not self.turns:
            return None
        vs = [t.version for t in self.turns]
        return min(vs), max(vs)


def group_advantages(rewards: Sequence[float], *, leave_one_out: bool = False) -> list[float]:
    """``r - mean(rewards)`` (``leave_one_out``: ``r`` minus the mean of the others), or all zeros when the rewards
    are equal (see the module's doc)."""
    if not rewards_differ(rewards):
        return [0.0] * len(rewards)
    n, total = len(rewards), sum(rewards)
    if leave_one_out:
        return [r - (total - r) / (n - 1) for r in rewards]
    return [r - total / n for r in rewards]


def trajectory_datums(trajectory: Trajectory, advantage: float) -> list[Datum]:
    """The datums of one rollout (one per run of turns that extend each other's context)."""
    out: list[Datum] = []
    tokens: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    version: int | None = None
    for turn in trajectory.turns:
        prompt = list(turn.prompt)
        if tokens and prompt[: len(tokens)] == tokens:
            extra = prompt[len(tokens):]
        else:
            if tokens:
                out.append(_datum(tokens, mask, logprobs, advantage, version))
            tokens, mask, logprobs, version = [], [], [], None
            extra = prompt
        tokens += extra + list(turn.tokens)
        mask += [0] * len(extra) + [1] * len(turn.tokens)
        logprobs += [0.0] * len(extra) + [float(x) for x in turn.logprobs]
        version = turn.version if version is None else min(version, turn.version)
    if tokens:
        out.append(_datum(tokens, mask, logprobs, advantage, version))
    return out


def _datum(tokens: list[int], mask: list[int], logprobs: list[float], advantage: float,
           version: int | None) -> Datum:
    return Datum(tokens=list(tokens), mask=list(mask), logprobs=list(logprobs), advantage=float(advantage),
                 version=int(version or 0))


def group_datums(trajectories: Sequence[Trajectory], *, leave_one_out: bool = False) -> list[Datum]:
    """Every datum of a group, in member order, with its rollout's advantage."""
    advantages = group_advantages([t.reward for t in trajectories], leave_one_out=leave_one_out)
    return [d for t, a in zip(trajectories, advantages, strict=True) for d in trajectory_datums(t, a)]


def check_datum(datum: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming what is wrong with a datum (lengths, mask values, a masked first token)."""
    missing = {"tokens", "mask", "logprobs", "advantage", "version"} - set(datum)
    if missing:
        raise ValueError(f"a datum lacks {', '.join(sorted(missing))}")
    n = len(datum["tokens"])
    if len(datum["mask"]) != n or len(datum["logprobs"]) != n:
        raise ValueError(f"a datum's tokens ({n}), mask ({len(datum['mask'])}) and logprobs "
                         f"({len(datum['logprobs'])}) must have one entry each")
    if any(m not in (0, 1) for m in datum["mask"]):
        raise ValueError("a datum's mask holds only 0 and 1")
    if n and datum["mask"][0]:
        raise ValueError("a datum's first token has no context to be sampled from: its mask must be 0")
    if not math.isfinite(float(datum["advantage"])):
        raise ValueError(f"a datum's advantage must be finite, got {datum['advantage']!r}")


def member_fields(trajectory: Trajectory | None, *, outcome: str = "scored",
                  disposition: str = "completed") -> dict[str, Any]:
    """The fields of a rollout's ``MemberResult`` (see the module's doc); None: a rollout without a result."""
    if trajectory is None:
        return {"reward": None, "scored": None, "valid": False, "outcome": outcome, "disposition": disposition,
                "reward_key": None, "steps": None, "output_tokens": None, "seconds": None, "versions": {},
                "flag": False}
    span = trajectory.versions
    return {"reward": float(trajectory.reward), "scored": 1.0 if trajectory.success else 0.0, "valid": True,
            "outcome": "scored", "disposition": disposition, "reward_key": None, "steps": trajectory.steps,
            "output_tokens": trajectory.output_tokens, "seconds": trajectory.seconds,
            "versions": {} if span is None else {"main": span}, "flag": True}


def step_datums(step: Any) -> list[Any]:
    """A ``TrainStep``'s datums, in group order, each group's advantages multiplied by its loss weight
    (``step.group_weights()``: the drawing sampler's importance weight, 1 unless a sampler weighs its draws). Scaling
    the advantage scales that group's policy-gradient term, clipped or not, and leaves its sign alone."""
    out: list[Any] = []
    for group, weight in zip(step.groups, step.group_weights(), strict=True):
        if group.output is None:
            continue
        if weight == 1.0:
            out.extend(group.output.datums)
        else:
            out.extend({**d, "advantage": float(d["advantage"]) * weight} for d in group.output.datums)
    return out


def datum_tokens(datums: Sequence[Any]) -> int:
    """The tokens a step trains: the length of each datum's ``tokens`` (a datum without them counts 0)."""
    return sum(len(d["tokens"]) for d in datums if isinstance(d, Mapping) and "tokens" in d)


def group_output(trajectories: Sequence[Trajectory], *, leave_one_out: bool = False,
                 min_successful: int = 1) -> Any:
    """A group's ``GroupOutput``: its verdict, one ``MemberResult`` per rollout, and its datums (none unless the
    verdict is ``trained`` or ``uniform``)."""
    return assemble(tuple(MemberResult(**member_fields(t)) for t in trajectories), min_successful=min_successful,
                    datums=lambda: group_datums(trajectories, leave_one_out=leave_one_out))
