"""platoon's experimental public API: task samplers and group admission rules of your own, and rollout leases.

Everything here may change between minor releases; the names are the contract a plug-in is written against.

Task samplers: a sampler is a class derived from `Sampler` (also `TaskSampler`), registered with
``@task_sampler(name, options=...)`` from an environment entry's package or named as ``module:Class``. It is built
as ``Class(setup: SamplerSetup, options)`` and asked ``next(ctx: SamplerContext)`` for each decision; it answers a
`Draw` (or a pool task id), a `Slot` (a static run sampler with ``entry_slots``), or None when nothing is eligible.
An adaptive one reads the per-task statistics through ``ctx.stats`` (a `TaskStatsView`): `TaskCounts`, `TaskStats`,
`GroupTotals`, and the settled `GroupRecord` with its `MemberResult` members. ``platoon.testing.check_task_sampler``
checks a sampler against the contract.
"""

from platoon.config.registry import group_admission, task_sampler
from platoon.live.lease import RolloutLease, rollout_lease
from platoon.policy.admission import (
    Admission,
    AdmissionCheckContext,
    AdmissionRule,
    AdmissionSetup,
    AdmitAll,
    GroupAdmission,
    Informative,
)
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
    # -- group admission: a rule derives from AdmissionRule, registers with @group_admission(name, options=...) or
    #    is named as module:Class; admit(group, stats) answers an Admission (or a bool)
    "Admission",
    "AdmissionCheckContext",
    "AdmissionRule",
    "AdmissionSetup",
    "AdmitAll",
    "GroupAdmission",
    "Informative",
    "group_admission",
    # -- rollout leases: `async with rollout_lease().rollout(i):` runs rollout i of a draw on a permit of its own
    "RolloutLease",
    "rollout_lease",
]

