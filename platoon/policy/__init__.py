"""The policy layer's public face: what a runtime, a run session or a façade may use.

Sans-I/O (docs/architecture.md): nothing here reads a clock, opens a file, awaits, reads the environment or loads a
plug-in: a run's task samplers and admission rules arrive resolved (``SamplerSpec``, ``ResolvedRule``; found by
``platoon.components``). A runtime builds the layer of one start with ``platoon.components.build_policy`` (which
resolves them and calls ``assemble_policy``) and drives its ``Driver``: it reports events (``platoon.policy.events``,
the union ``Event``) to ``Driver.handle(event, now=)``, carries out the decisions (``Decision``, a closed union)
they answer (``StartGroup``, ``GrantPermit``, ``SlotGranted``, ``CancelRollout``, ``AwaitTeardowns``,
``EndTeardownWait``) and those of the step cycle that ``Driver.poll`` answers (``SaveCheckpoint``, ``Evaluate``,
``Train``, ``WriteRow``, ``Publish``, ``Finish``, ``Abort``), and writes the driver's outbox through its run session.
Modules outside ``platoon/policy`` import from here, not from the modules behind it (``tests/test_layering.py``).
"""

from platoon.policy.admission import (
    CORE_RULES,
    Admission,
    AdmissionCheckContext,
    AdmissionRule,
    AdmissionSet,
    AdmissionSetup,
    AdmitAll,
    GroupAdmission,
    Informative,
    ResolvedRule,
    accept_answer,
)
from platoon.policy.assemble import (
    PolicyLayer,
    assemble_policy,
)
from platoon.policy.cycle import (
    CYCLE_DECISIONS,
    Abort,
    CycleError,
    CycleState,
    Evaluate,
    Finish,
    Publish,
    SaveCheckpoint,
    Train,
    WriteRow,
)
from platoon.policy.decisions import (
    DECISIONS,
    ROLLOUT_DECISIONS,
    AwaitTeardowns,
    CycleDecision,
    Decision,
    EndTeardownWait,
    RolloutDecision,
)
from platoon.policy.dispatcher import (
    StartGroup,
)
from platoon.policy.driver import (
    BLOCKED_WORDS,
    DRIVER_STATE_FORMAT,
    Driver,
    Outbox,
    Schedule,
)
from platoon.policy.events import (
    EVENTS,
    BlockCancelled,
    BlockEntered,
    BlockExited,
    Evaluated,
    Event,
    GroupEntered,
    GroupFinished,
    LaunchAdmitted,
    MemberCancelled,
    MemberEnded,
    MemberExited,
    MemberStarted,
    Published,
    RunStarted,
    SlotReleased,
    SlotRequested,
    SlotWaitCancelled,
    StepTrained,
    TeardownsEnded,
    TimerFired,
)
from platoon.policy.launch_gate import (
    ESTIMATE_BYTES,
    NO_MEMORY,
    LaunchRules,
    LaunchVerdict,
    MemoryReadings,
    reserve_for,
)
from platoon.policy.members import (
    CANCELLED,
    STRAGGLER_KILLED,
    CancelRollout,
    MemberWatch,
    cancel_order,
)
from platoon.policy.outputs import (
    GroupOutput,
    Key,
    TrainStep,
    group_output,
    member_rows,
)
from platoon.policy.permits import (
    GrantPermit,
)
from platoon.policy.pool import (
    DEFAULT_LABEL_COLUMN,
    EntrySpec,
    TaskPool,
    TaskRow,
    label_value,
    pool_task_id,
)
from platoon.policy.routing_ids import (
    RoutingIdWatch,
)
from platoon.policy.samplers.answers import (
    accept,
    check_json,
)
from platoon.policy.samplers.base import (
    Draw,
    EntryInfo,
    Row,
    Sampler,
    SamplerContext,
    SamplerSetup,
    Slot,
    TaskSampler,
    TaskStatsView,
    decision_key,
)
from platoon.policy.samplers.core import (
    CORE_CLASSES as CORE_SAMPLER_CLASSES,
)
from platoon.policy.samplers.core import (
    class_ref,
)
from platoon.policy.samplers.member import (
    Member,
    SamplerSpec,
)
from platoon.policy.samplers.metrics import (
    clean_metrics,
)
from platoon.policy.samplers.runtime import (
    Measure,
    SamplerSet,
)
from platoon.policy.samplers.uniform import (
    UniformSampler,
)
from platoon.policy.samplers.weighted import (
    WeightedSampler,
)
from platoon.policy.start_limit import (
    SlotGranted,
)
from platoon.policy.stats import (
    VERDICTS,
    GroupRecord,
    GroupTotals,
    MemberResult,
    TaskCounts,
    TaskStats,
    TaskStatsStore,
    informative_at,
    pass_at,
)
from platoon.policy.task_table import (
    SORTS,
    TASK_COLUMNS,
    show_table,
    sort_rows,
    store_from_snapshot,
    task_rows,
)
from platoon.policy.verdict import (
    rewards_differ,
)
from platoon.policy.workflow_flags import (
    gives_verdicts,
    runs_rollouts_on_lease,
)

__all__ = [
    "ESTIMATE_BYTES",
    "NO_MEMORY",
    "LaunchRules",
    "LaunchVerdict",
    "MemoryReadings",
    "reserve_for",
    "DECISIONS",
    "ROLLOUT_DECISIONS",
    "CycleDecision",
    "Decision",
    "RolloutDecision",
    "EVENTS",
    "BlockCancelled",
    "BlockEntered",
    "BlockExited",
    "Evaluated",
    "Event",
    "GroupEntered",
    "GroupFinished",
    "LaunchAdmitted",
    "MemberCancelled",
    "MemberEnded",
    "MemberExited",
    "MemberStarted",
    "Published",
    "RunStarted",
    "SlotReleased",
    "SlotRequested",
    "SlotWaitCancelled",
    "StepTrained",
    "TeardownsEnded",
    "TimerFired",
    "BLOCKED_WORDS",
    "DRIVER_STATE_FORMAT",
    "Abort",
    "accept",
    "accept_answer",
    "Admission",
    "AdmissionCheckContext",
    "AdmissionRule",
    "AdmissionSet",
    "AdmissionSetup",
    "AdmitAll",
    "AwaitTeardowns",
    "assemble_policy",
    "cancel_order",
    "CANCELLED",
    "CancelRollout",
    "check_json",
    "class_ref",
    "clean_metrics",
    "CORE_RULES",
    "CORE_SAMPLER_CLASSES",
    "CYCLE_DECISIONS",
    "CycleError",
    "CycleState",
    "decision_key",
    "DEFAULT_LABEL_COLUMN",
    "Draw",
    "Driver",
    "EndTeardownWait",
    "EntryInfo",
    "EntrySpec",
    "Evaluate",
    "Finish",
    "gives_verdicts",
    "GrantPermit",
    "group_output",
    "GroupAdmission",
    "GroupOutput",
    "GroupRecord",
    "GroupTotals",
    "Informative",
    "informative_at",
    "Key",
    "label_value",
    "Measure",
    "Member",
    "member_rows",
    "MemberResult",
    "MemberWatch",
    "Outbox",
    "pass_at",
    "PolicyLayer",
    "pool_task_id",
    "Publish",
    "ResolvedRule",
    "rewards_differ",
    "RoutingIdWatch",
    "Row",
    "runs_rollouts_on_lease",
    "Sampler",
    "SamplerContext",
    "SamplerSet",
    "SamplerSetup",
    "SamplerSpec",
    "SaveCheckpoint",
    "Schedule",
    "show_table",
    "Slot",
    "SlotGranted",
    "sort_rows",
    "SORTS",
    "StartGroup",
    "store_from_snapshot",
    "STRAGGLER_KILLED",
    "TASK_COLUMNS",
    "task_rows",
    "TaskCounts",
    "TaskPool",
    "TaskRow",
    "TaskSampler",
    "TaskStats",
    "TaskStatsStore",
    "TaskStatsView",
    "Train",
    "TrainStep",
    "UniformSampler",
    "VERDICTS",
    "WeightedSampler",
    "WriteRow",
]
