"""The group verdict: what a settled group's rollouts say about whether it trains anything.

One definition for every runtime, checker and test (docs/group-admission.md): a group whose valid members' rewards
differ carries signal (``trained``: its group-normalised advantages are not all zero); one whose valid members scored
alike trains nothing (``uniform``: all passed, all failed, or the same graded reward); a group without a valid member
(every rollout invalid, errored or cut as a straggler) is ``no_completed_root``. A workflow that raised has no output
and its record's verdict is ``failed`` (``platoon.policy.records``).

Rewards are compared with a tolerance of ``UNIFORM_TOLERANCE``, so that a graded reward that differs only in float
rounding reads as alike, as the trainer's advantages do (``platoon.live.datums.group_advantages``).
"""

from __future__ import annotations

from collections.abc import Sequence

from platoon.policy.records import MemberResult

UNIFORM_TOLERANCE = 1e-9


def rewards_differ(rewards: Sequence[float]) -> bool:
    """True when the largest and smallest reward differ by more than ``UNIFORM_TOLERANCE``."""
    return bool(rewards) and max(rewards) - min(rewards) > UNIFORM_TOLERANCE


def group_verdict(members: Sequence[MemberResult]) -> str:
    """``trained``, ``uniform`` or ``no_completed_root`` for a group's member results (see the module docstring).

    A valid member without a reward counts as reward 0.0 (it was valid but scored nothing)."""
    rewards = [float(m.reward) if m.reward is not None else 0.0 for m in members if m.valid]
    if not rewards:
        return "no_completed_root"
    return "trained" if rewards_differ(rewards) else "uniform"


__all__ = ["UNIFORM_TOLERANCE", "group_verdict", "rewards_differ"]
