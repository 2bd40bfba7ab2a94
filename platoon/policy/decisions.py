"""The decisions: the closed set of what the driver tells a runtime to do.

What this module owns: the union ``Decision`` of every frozen decision type that ``Driver.handle`` and
``Driver.poll`` answer, and the two decisions of the driver's own member rules (``AwaitTeardowns``,
``EndTeardownWait``). Each other decision is defined beside the rule that makes it, and re-exported here:

- about rollouts (``RolloutDecision``): ``StartGroup`` (``platoon.policy.dispatcher``), ``GrantPermit``
  (``platoon.policy.permits``), ``SlotGranted`` (``platoon.policy.start_limit``), ``CancelRollout``
  (``platoon.policy.members``), ``AwaitTeardowns`` and ``EndTeardownWait`` (here);
- of the step cycle (``CycleDecision``, ``platoon.policy.cycle``): ``SaveCheckpoint``, ``Evaluate``, ``Train``,
  ``WriteRow``, ``Publish``, ``Finish``, ``Abort``.

Rules it keeps: the set is closed. Every runtime carries decisions out in one ``match`` whose last case is
``case _: assert_never(decision)``, so that a type checker proves each runtime handles every member of the union
(``tests/test_decisions_exhaustive.py`` runs mypy on them, and plants a decision none handles to see it fail).
To add a decision: define it as a frozen dataclass beside the rule that makes it (an imperative name), add it to
``RolloutDecision`` or ``CycleDecision``, return it from the driver, and add a case to each runtime's ``match``
(``platoon.sim.runtime``, ``platoon.live.runtime``); mypy names every runtime that lacks one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias, get_args

from platoon.policy.cycle import (
    CYCLE_DECISIONS,
    Abort,
    CycleDecision,
    Evaluate,
    Finish,
    Publish,
    SaveCheckpoint,
    Train,
    WriteRow,
)
from platoon.policy.dispatcher import StartGroup
from platoon.policy.members import CancelRollout
from platoon.policy.outputs import Key
from platoon.policy.permits import GrantPermit
from platoon.policy.start_limit import SlotGranted


@dataclass(frozen=True)
class AwaitTeardowns:
    """Decision: member ``index`` of ``key`` ended with background teardowns running: its permit and its block wait
    for them, until ``TeardownsEnded`` or an ``EndTeardownWait`` (the dispatcher's ``teardown_wait_s``)."""

    key: Key
    index: int


@dataclass(frozen=True)
class EndTeardownWait:
    """Decision: member ``index``'s teardowns outlasted their wait: its permit came back (with a warning) and its
    block is done; the teardowns run on."""

    key: Key
    index: int


#: Decisions about rollouts: what the event handlers answer.
RolloutDecision: TypeAlias = StartGroup | GrantPermit | SlotGranted | CancelRollout | AwaitTeardowns | EndTeardownWait
#: Every decision a runtime carries out.
Decision: TypeAlias = RolloutDecision | CycleDecision
#: The union's members, for runtime checks (a test feeds one of each to every runtime).
DECISIONS: tuple[type, ...] = get_args(Decision)
ROLLOUT_DECISIONS: tuple[type, ...] = get_args(RolloutDecision)

__all__ = ["Abort", "AwaitTeardowns", "CYCLE_DECISIONS", "CancelRollout", "CycleDecision", "DECISIONS", "Decision",
           "EndTeardownWait", "Evaluate", "Finish", "GrantPermit", "Publish", "ROLLOUT_DECISIONS", "RolloutDecision",
           "SaveCheckpoint", "SlotGranted", "StartGroup", "Train", "WriteRow"]
