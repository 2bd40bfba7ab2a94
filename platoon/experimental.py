"""platoon's experimental public API: task samplers of your own, and (below) group admission and rollout leases.

Everything here may change between minor releases; the names are the contract a plug-in is written against.

Task samplers: a sampler is a class derived from `Sampler` (also `TaskSampler`), registered with
``@task_sampler(name, options=...)`` from an environment entry's package or named as ``module:Class``. It is built
as ``Class(setup: SamplerSetup, options)`` and asked ``next(ctx: SamplerContext)`` for each decision; it answers a
`Draw` (or a pool task id), a `Slot` (a static run sampler with ``entry_slots``), or None when nothing is eligible.
An adaptive one reads the per-task statistics through ``ctx.stats`` (a `TaskStatsView`): `TaskCounts`, `TaskStats`,
`GroupTotals`, and the settled `GroupRecord` with its `MemberResult` members. ``platoon.testing.check_task_sampler``
checks a sampler against the contract.
"""

from platoon.config.registry import task_sampler
from platoon.policy.samplers.base import (
    Draw,
    EntryInfo,
    Sampler,
    SamplerContext,
    SamplerSetup,
    Slot,
    TaskSampler,
    TaskStatsView,
    decision_key,
)
from platoon.policy.stats import GroupRecord, GroupTotals, MemberResult, TaskCounts, TaskStats

__all__ = [
    # -- task samplers
    "Draw",
    "EntryInfo",
    "GroupRecord",
    "GroupTotals",
    "MemberResult",
    "Sampler",
    "SamplerContext",
    "SamplerSetup",
    "Slot",
    "TaskCounts",
    "TaskSampler",
    "TaskStats",
    "TaskStatsView",
    "decision_key",
    "task_sampler",
]

# -- group admission ------------------------------------------------------------------------------------------------
# (reserved: the admission API — group_admission, the rule base class and its verdict type — is added here, and its
#  names appended to __all__)

# -- rollout leases -------------------------------------------------------------------------------------------------
# (reserved: rollout_lease() and RolloutLease are added here, and their names appended to __all__)
