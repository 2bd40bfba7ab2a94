"""platoon's experimental public API: task samplers and group admission rules of your own, and rollout leases.

Everything here may change between minor releases; the names are the contract a plug-in is written against.

Task samplers: a sampler is a class derived from `Sampler`, or any class of the runtime-checkable `TaskSampler`
protocol (a duck-typed one passes ``isinstance(x, TaskSampler)``), registered with
``@task_sampler(name, options=...)`` from an environment entry's package or named as ``module:Class``. It is built
as ``Class(setup: SamplerSetup, options)`` and asked ``next(ctx: SamplerContext)`` for each decision; it answers a
`Draw` (or a pool task id), a `Slot` (a static run sampler with ``entry_slots``), or None when nothing is eligible.
An adaptive one reads the per-task statistics through ``ctx.stats`` (a `TaskStatsView`): `TaskCounts`, `TaskStats`,
`GroupTotals`, and the settled `GroupRecord` with its `MemberResult` members; `TaskStatsStore` builds the statistics a
test reads through a view, and `pass_at` / `informative_at` are the posterior formulas. A sampler's load-time
``check(options, ctx)`` sees a `SamplerCheckContext`. ``platoon.testing.check_task_sampler`` checks a sampler against
the contract.

Every name platoon 0.4.0's ``platoon.experimental`` exports is here under the same name; `AdmitAll`, `Informative`,
`TaskCounts` and `decision_key` are this project's additions.
"""

from platoon.config.registry import group_admission, task_sampler
from platoon.config.resolve import SamplerCheckContext
from platoon.live.rollouts.lease import RolloutLease, rollout_lease
from platoon.policy import (
    Admission,
    AdmissionCheckContext,
    AdmissionRule,
    AdmissionSetup,
    AdmitAll,
    Draw,
    EntryInfo,
    GroupAdmission,
    GroupRecord,
    GroupTotals,
    Informative,
    MemberResult,
    Sampler,
    SamplerContext,
    SamplerSetup,
    Slot,
    TaskCounts,
    TaskSampler,
    TaskStats,
    TaskStatsStore,
    TaskStatsView,
    decision_key,
    informative_at,
    pass_at,
)

__all__ = [
    # -- task samplers
    "Draw",
    "EntryInfo",
    "GroupRecord",
    "GroupTotals",
    "MemberResult",
    "Sampler",
    "SamplerCheckContext",
    "SamplerContext",
    "SamplerSetup",
    "Slot",
    "TaskCounts",
    "TaskSampler",
    "TaskStats",
    "TaskStatsStore",
    "TaskStatsView",
    "decision_key",
    "informative_at",
    "pass_at",
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

