"""The events: the closed set of what a runtime reports to the driver.

What this module owns: one frozen type for each thing that happens in a run that the policy layer must hear of, and
their union ``Event``. A runtime reports each with ``Driver.handle(event, now=t)`` and carries out the decisions it
answers (``platoon.policy.decisions``); the driver routes each type, in one ``match`` that ends in
``assert_never``, to the handler that keeps its rule (``Driver.on_<event>``). Between events a runtime asks
``Driver.poll(now=)`` for the step cycle's decisions due; that is a question, not an event.

Rules it keeps: names are past tense; every field is data the runtime observed, never a decision; a member is
``(key, index)``, ``key`` its group's ``(step, seq)`` (an evaluation's start slot: ``("eval", number)``). The set is
closed: to add an event, define it here, add it to ``Event``, add its case to ``Driver.handle`` (mypy proves the
``match`` exhaustive: ``tests/test_decisions_exhaustive.py``) and report it from each runtime.

What each stands for, and the driver's handler it reaches:

- the run: ``RunStarted`` (this start of the run begins: ``start``); ``TimerFired`` (the runtime's one timer,
  armed at ``next_deadline()``: ``on_deadline``);
- a group: ``GroupEntered`` (its members entered their lease blocks at once: ``on_group_entered``);
  ``GroupFinished`` (its workflow returned, raised or was cancelled: ``on_group_finished``);
- a member's block (its permit): ``BlockEntered``, ``BlockCancelled`` (its wait for a permit was cancelled),
  ``BlockExited`` (with teardowns still running or not), ``TeardownsEnded``;
- a member's start slot (``train.max_starting_rollouts``): ``SlotRequested`` (answered with a ``SlotGranted`` at
  once when one is free, or later), ``SlotWaitCancelled``, ``SlotReleased`` (``first_call``: the rollout issued its
  first model call; ``end``; ``cancelled``);
- a member's worker launch (``rollout_isolation: process``): ``LaunchAdmitted`` (the launch gate let it start:
  ``on_launch_admitted``);
- a member's rollout: ``MemberStarted``, ``MemberEnded`` (ran to its end, or raised), ``MemberExited`` (ran to its
  normal end and its block exited, in one event), ``MemberCancelled`` (a ``CancelRollout`` stopped it);
- the trainer: ``Evaluated``, ``StepTrained``, ``Published``.

Not events (yet): a checkpoint written (``SaveCheckpoint`` needs no answer: the cycle goes on at its poll) and a
worker's or service's failure (it reaches the policy as its group's ``GroupFinished`` with ``error``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias, get_args

from platoon.policy.outputs import Key


# ------------------------------------------------------------------------------------------------------ the run
@dataclass(frozen=True, slots=True)
class RunStarted:
    """This start of the run begins (``checkpoint``: the one a resume loaded; ``state_lost``: what of it did not
    read)."""

    checkpoint: str | None = None
    state_lost: str | None = None


@dataclass(frozen=True, slots=True)
class TimerFired:
    """The runtime's timer, armed at ``Driver.next_deadline()``, fired: every deadline that has come is due."""


# ------------------------------------------------------------------------------------------------------ groups
@dataclass(frozen=True, slots=True)
class GroupEntered:
    """Members ``0..size-1`` of a started group entered their lease blocks at once, in index order."""

    key: Key
    size: int


@dataclass(frozen=True, slots=True)
class GroupFinished:
    """The group's workflow returned ``result`` (None: it failed), raised ``error``, or was ``cancelled``;
    ``warn=False``: a failure the runtime made up on purpose (the simulator's ``error_rate``) is not warned about."""

    key: Key
    result: object
    error: BaseException | None = None
    cancelled: bool = False
    warn: bool = True


# ------------------------------------------------------------------------------------------------------ blocks
@dataclass(frozen=True, slots=True)
class BlockEntered:
    """Member ``index`` entered its lease block: it waits for its ``GrantPermit``."""

    key: Key
    index: int


@dataclass(frozen=True, slots=True)
class BlockCancelled:
    """Member ``index``'s wait for its permit was cancelled: it never ran."""

    key: Key
    index: int


@dataclass(frozen=True, slots=True)
class BlockExited:
    """Member ``index``'s block exited (``teardowns``: with background teardowns still running)."""

    key: Key
    index: int
    teardowns: bool = False


@dataclass(frozen=True, slots=True)
class TeardownsEnded:
    """The background teardowns an ``AwaitTeardowns`` waited for ended."""

    key: Key
    index: int


# ------------------------------------------------------------------------------------------------- start slots
@dataclass(frozen=True, slots=True)
class SlotRequested:
    """Member ``index`` holds its permit and asks for a start slot (``scope`` ``eval``: an evaluation's rollout)."""

    key: Key
    index: int
    scope: str = "train"


@dataclass(frozen=True, slots=True)
class SlotWaitCancelled:
    """Member ``index``'s wait for its start slot was cancelled."""

    key: Key
    index: int


@dataclass(frozen=True, slots=True)
class SlotReleased:
    """Member ``index`` gave its start slot back: it issued its ``first_call``, reached its ``end``, or was
    ``cancelled`` (later releases of the same slot: no-ops)."""

    key: Key
    index: int
    reason: str


# ------------------------------------------------------------------------------------------------------ launches
@dataclass(frozen=True, slots=True)
class LaunchAdmitted:
    """The launch gate (``platoon.policy.launch_gate``) let member ``index``'s worker start; reported before its
    ``MemberStarted``, which then finds it starting."""

    key: Key
    index: int


# ----------------------------------------------------------------------------------------------------- members
@dataclass(frozen=True, slots=True)
class MemberStarted:
    """Member ``index`` began its rollout after waiting ``delay_s`` for its permit and slot."""

    key: Key
    index: int
    delay_s: float


@dataclass(frozen=True, slots=True)
class MemberEnded:
    """Member ``index``'s rollout ran to its end (``raised``: with an exception); its block has not exited."""

    key: Key
    index: int
    raised: bool = False


@dataclass(frozen=True, slots=True)
class MemberExited:
    """Member ``index``'s rollout ran to its normal end and its block exited (``teardowns``: with background
    teardowns running): ``MemberEnded`` then ``BlockExited``, in one event."""

    key: Key
    index: int
    teardowns: bool = False


@dataclass(frozen=True, slots=True)
class MemberCancelled:
    """A ``CancelRollout`` stopped member ``index`` wherever it stood."""

    key: Key
    index: int


# ----------------------------------------------------------------------------------------------------- trainer
@dataclass(frozen=True, slots=True)
class Evaluated:
    """The evaluation an ``Evaluate`` asked for is done (``metrics``: held-out pass@1 and the like)."""

    metrics: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class StepTrained:
    """The update a ``Train`` asked for is done (``trainer``: the trainer's metrics; ``runtime``: the runtime's)."""

    trainer: Mapping[str, Any] | None = None
    runtime: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Published:
    """The weights a ``Publish`` named are live."""


#: Every event a runtime reports.
Event: TypeAlias = (RunStarted | TimerFired | GroupEntered | GroupFinished | BlockEntered | BlockCancelled
                    | BlockExited | TeardownsEnded | SlotRequested | SlotWaitCancelled | SlotReleased | LaunchAdmitted
                    | MemberStarted | MemberEnded | MemberExited | MemberCancelled | Evaluated | StepTrained | Published)
EVENTS: tuple[type, ...] = get_args(Event)

__all__ = ["BlockCancelled", "BlockEntered", "BlockExited", "EVENTS", "Evaluated", "Event", "GroupEntered",
           "GroupFinished", "LaunchAdmitted", "MemberCancelled", "MemberEnded", "MemberExited", "MemberStarted",
           "Published", "RunStarted", "SlotReleased", "SlotRequested", "SlotWaitCancelled", "StepTrained", "TeardownsEnded",
           "TimerFired"]
