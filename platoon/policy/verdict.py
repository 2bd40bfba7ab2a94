"""The group verdict: what a settled group's rollouts say about whether it trains anything.

One definition for every runtime, checker and test (docs/group-admission.md): a group with fewer than
``min_successful`` valid members (``train.workflow_config.min_successful_group_size``, when above 1) trains no datum
(``below_min``); one without a valid member (every rollout invalid, errored or cut as a straggler) is
``no_completed_root``; otherwise a group whose valid members' rewards differ carries signal (``trained``: its
advantages, reward minus a baseline of the group's rewards, are not all zero) and one whose valid members scored
alike trains nothing (``uniform``: all passed, all failed, or the same graded reward). A workflow that raised has no
output and its record's verdict is ``failed`` (``platoon.policy.records``). A *valid* member is one that completed
with a score: only those count toward ``min_successful`` and enter the baseline. The order of the checks is 0.4.0's.

Rewards are compared with a tolerance of ``UNIFORM_TOLERANCE``, so that a graded reward that differs only in float
rounding reads as alike, as the trainer's advantages do (``platoon.live.training.datums.group_advantages``).
"""

from __future__ import annotations

from collections.abc import Sequence

from platoon.policy.records import MemberResult

UNIFORM_TOLERANCE = 1e-9
DATUM_VERDICTS = ("trained", "uniform")
"""The verdicts of a group that hands its datums to a step (a uniform group's advantages are all 0)."""


def rewards_differ(rewards: Sequence[float]) -> bool:
    """True when the largest and smallest reward differ by more than ``UNIFORM_TOLERANCE``."""
    return bool(rewards) and max(rewards) - min(rewards) > UNIFORM_TOLERANCE


def group_verdict(members: Sequence[MemberResult], *, min_successful: int = 1) -> str:
    """``below_min``, ``no_completed_root``, ``trained`` or ``uniform`` for a group's member results (see the module
    docstring).

    A valid member without a reward counts as reward 0.0 (it was valid but scored nothing)."""
    rewards = [float(m.reward) if m.reward is not None else 0.0 for m in members if m.valid]
    if min_successful > 1 and len(rewards) < min_successful:
        return "below_min"
    if not rewards:
        return "no_completed_root"
    return "trained" if rewards_differ(rewards) else "uniform"


__all__ = ["DATUM_VERDICTS", "UNIFORM_TOLERANCE", "group_verdict", "rewards_differ"]
