"""The policy layer's public face: what a runtime, a run session or a façade may use.

Sans-I/O (docs/architecture.md): nothing here reads a clock, opens a file or awaits. A runtime builds the layer of
one start with ``build_policy`` and drives its ``Driver``: it feeds events with ``now=``, carries out the decisions
they answer (``StartGroup``, ``GrantPermit``, ``SlotGranted``, ``CancelRollout``, ``AwaitTeardowns``,
``EndTeardownWait``) and those of the step cycle that ``Driver.poll`` answers (``SaveCheckpoint``, ``Evaluate``,
``Train``, ``WriteRow``, ``Publish``, ``Finish``, ``Abort``), and writes the driver's outbox through its run session.
Modules outside ``platoon/policy`` import from here, not from the modules behind it (``tests/test_layering.py``).
"""

from platoon.policy.assemble import PolicyLayer, build_policy
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
from platoon.policy.dispatcher import StartGroup
from platoon.policy.driver import AwaitTeardowns, Driver, EndTeardownWait, Outbox, Schedule
from platoon.policy.members import CANCELLED, STRAGGLER_KILLED, CancelRollout
from platoon.policy.outputs import GroupOutput, Key, TrainStep, group_output
from platoon.policy.permits import GrantPermit
from platoon.policy.pool import TaskPool, TaskRow
from platoon.policy.start_limit import SlotGranted
from platoon.policy.stats import MemberResult

__all__ = [
    "Abort", "AwaitTeardowns", "CANCELLED", "CYCLE_DECISIONS", "CancelRollout", "CycleError", "CycleState", "Driver",
    "EndTeardownWait", "Evaluate", "Finish", "GrantPermit", "GroupOutput", "Key", "MemberResult", "Outbox",
    "PolicyLayer", "Publish", "STRAGGLER_KILLED", "SaveCheckpoint", "Schedule", "SlotGranted", "StartGroup", "TaskPool",
    "TaskRow", "Train", "TrainStep", "WriteRow", "build_policy", "group_output",
]
