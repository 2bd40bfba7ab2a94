"""The driver: one step cycle, one timer source and one outbox, for every runtime.

What this module owns (docs/architecture.md, "The driver"): everything a runtime would otherwise decide itself. A
runtime (``platoon.sim``, ``platoon.live``) owns a clock and its I/O; it reports what happened as an event
(``platoon.policy.events``) to ``handle(event, now=)``, carries out the decisions it answers
(``platoon.policy.decisions``: one closed union), asks ``poll(now=)`` whenever it has nothing left to carry out,
re-arms one timer at ``next_deadline()``, and hands ``take_outbox()`` to its run session. The driver holds the
policy layer of one start of a run:

- the ``Dispatcher`` (draws, permits, horizon, admission, steps);
- the ``Cycle`` (``platoon.policy.cycle``): launch save, evaluate, train, row, checkpoint, publish, final
  evaluation, end, and stall detection;
- the ``StartLimit`` of ``train.max_starting_rollouts`` (or None);
- the ``MemberWatch``: a failing group's cancel order and the straggler deadlines (``platoon.policy.members``);
- the ``StepWindow`` and the batch metrics of ``platoon.policy.run_metrics``;
- the ``FailureStreak`` (``platoon.policy.failures``): groups that fail in a row stop the run (``Abort``).

Decisions about rollouts, answered by the event handlers: ``StartGroup`` (start a group's workflow), ``GrantPermit``
(a member may run; ``held`` False for a block of a group whose draw was released, which runs on no permit),
``SlotGranted`` (a member waiting for a start slot has one), ``CancelRollout`` (cancel a member; its reason is its
disposition), ``AwaitTeardowns`` (a member's permit and block wait for its background teardowns) and
``EndTeardownWait`` (they outlasted the wait: the block is done).
Decisions of the cycle, answered by ``poll``: see ``platoon.policy.cycle``.

Where each idea lives: this module is the entry (``handle``'s one ``match``, ending in ``assert_never``: mypy proves
every event routed), the cycle's own events (start, evaluated, trained, published), the merged timers, the outbox and
the driver's checkpointed state. The rollouts' events and their rules about members are
``platoon.policy.rollout_events``' (``RolloutEvents``, which the driver owns and whose handlers it exposes under
their own names); what each state of the cycle answers when polled is ``platoon.policy.cycle_polls``'
(``CyclePolls``, the driver's base); the cycle's table is ``platoon.policy.cycle``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, assert_never

from platoon.policy import events as ev
from platoon.policy.cycle import (
    Abort,
    Cycle,
    CycleError,
    CycleState,
    Evaluate,
    Finish,
    Publish,
    SaveCheckpoint,
    Train,
    WriteRow,
    prefixed,
    step_row,
)
from platoon.policy.cycle_polls import BLOCKED_WORDS, CyclePolls
from platoon.policy.decisions import AwaitTeardowns, Decision, EndTeardownWait
from platoon.policy.dispatch_records import StepPhase
from platoon.policy.dispatcher import Dispatcher
from platoon.policy.failures import FAILED_GROUPS_LIMIT, FailureStreak
from platoon.policy.members import CANCELLED, STRAGGLER_KILLED, CancelRollout, MemberWatch
from platoon.policy.over_budget import OverBudgetWatch
from platoon.policy.rollout_events import RolloutEvents
from platoon.policy.run_metrics import StepWindow, batch_metrics
from platoon.policy.start_limit import SlotGranted, StartLimit

C = CycleState
DRIVER_STATE_FORMAT = 2


@dataclass(frozen=True)
class Schedule:
    """When a run evaluates and checkpoints, in steps (None: never); built by ``platoon.policy.assemble``."""

    eval_every: int | None = None
    eval_at_start: bool = False
    checkpoint_every: int | None = None
    """Checkpoints kept for good."""
    recovery_every: int | None = None
    """Checkpoints a resume starts from, the oldest pruned."""

    def eval_due(self, step: int, steps: int) -> bool:
        if step == 0:
            return self.eval_at_start
        return self.eval_every is not None and (step == steps or step % self.eval_every == 0)

    def checkpoint_due(self, done: int, steps: int) -> tuple[bool, bool]:
        """``(due, permanent)`` after ``done`` steps: the final checkpoint and ``checkpoint_every``'s are permanent."""
        permanent = done == steps or (self.checkpoint_every is not None and done % self.checkpoint_every == 0)
        recovery = self.recovery_every is not None and done % self.recovery_every == 0
        return permanent or recovery, permanent


@dataclass(frozen=True)
class Outbox:
    """What a runtime writes: events for ``tasks/events.jsonl``, and lines for its log."""

    events: list[dict] = field(default_factory=list)
    infos: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class Driver(CyclePolls):
    """See the module docstring. ``runtime`` (``sim`` or ``live``) is recorded in checkpoint rows;
    ``group_workflow``: the training workflow is a GroupRolloutWorkflow, whose members alone take start slots;
    ``config_warnings``: what ``config validate`` warns of this run's config, logged at each start;
    ``eval_rollouts``: evaluation's rollouts at once that take start slots beside training's (live evaluation's),
    which the start limit's announcement counts among the rollouts that can run at once."""

    def __init__(self, dispatcher: Dispatcher, *, start_limit: StartLimit | None = None,
                 members: MemberWatch | None = None, schedule: Schedule | None = None,
                 runtime: str = "sim", group_workflow: bool = True,
                 config_warnings: tuple[str, ...] = (), eval_rollouts: int = 0) -> None:
        self.dispatcher = dispatcher
        self.start_limit = start_limit
        self.group_workflow = group_workflow
        self.eval_rollouts = eval_rollouts
        self.members = members if members is not None else MemberWatch()
        self.schedule = schedule if schedule is not None else Schedule()
        self.runtime = runtime
        self.window = StepWindow(dispatcher.now)
        self.cycle = Cycle()
        self.config_warnings = config_warnings
        self._start_args: tuple[str | None, str | None] = (None, None)
        self._row: dict[str, Any] | None = None  # the committed step's row, until its poll answers it
        self._over_budget = OverBudgetWatch(dispatcher.config.max_concurrent_rollouts)
        self._infos: list[str] = []
        self._warnings: list[str] = []  # one list, shared with the rollouts' events: warnings keep their order
        self._failures = FailureStreak(limit=max(FAILED_GROUPS_LIMIT, 2 * dispatcher.config.batch_size))
        self.rollouts = r = RolloutEvents(dispatcher, members=self.members, window=self.window,
                                          start_limit=start_limit, failures=self._failures, cycle=self.cycle,
                                          warnings=self._warnings)
        # The rollouts' events are answered by ``r``; bound here as the driver's own, so that ``handle`` and a
        # caller reach each handler in one call (the simulator's hot path) under the names they always had.
        self.on_block_entered, self.on_group_entered, self.on_block_cancelled = (
            r.on_block_entered, r.on_group_entered, r.on_block_cancelled)
        self.on_block_exited, self.on_teardowns_done, self.on_group_finished = (
            r.on_block_exited, r.on_teardowns_done, r.on_group_finished)
        self.request_slot, self.on_slot_cancelled, self.release_slot, self.on_launch_admitted = (
            r.request_slot, r.on_slot_cancelled, r.release_slot, r.on_launch_admitted)
        self.on_member_started, self.on_member_ended, self.on_member_exited, self.on_member_cancelled = (
            r.on_member_started, r.on_member_ended, r.on_member_exited, r.on_member_cancelled)
        self.on_deadline = r.on_deadline

    # ------------------------------------------------------------------------------------------- inspection
    @property
    def phase(self) -> StepPhase:
        return self.dispatcher.phase

    @property
    def finished(self) -> bool:
        """The cycle is done: the plan's steps, the final evaluation and the end were answered."""
        return self.cycle.state is C.FINISHED

    @property
    def steps_done(self) -> int:
        return self.dispatcher.step

    # ---------------------------------------------------------------------------------------------- the entry
    def handle(self, event: ev.Event, *, now: float) -> tuple[Decision, ...]:
        """What a runtime reports (``platoon.policy.events``), routed to the handler that keeps its rule: the
        decisions to carry out, in order. A ``SlotRequested`` that finds a free slot is answered with its
        ``SlotGranted`` at once. (On the simulator's hot path: the cases run from the most frequent event down, as a
        match tries them in turn, and read fields off the event, which costs half of a positional pattern.)"""
        e = event
        match e:
            case ev.MemberExited():
                out = self.on_member_exited(e.key, e.index, now=now, teardowns=e.teardowns)
            case ev.MemberStarted():
                out = self.on_member_started(e.key, e.index, now=now, delay_s=e.delay_s)
            case ev.SlotReleased():
                out = self.release_slot(e.key, e.index, e.reason, now=now)
            case ev.SlotRequested():
                granted = self.request_slot(e.key, e.index, now=now, scope=e.scope)
                return (SlotGranted((*e.key, e.index), 0.0),) if granted else ()
            case ev.LaunchAdmitted():
                out = self.on_launch_admitted(e.key, e.index, now=now)
            case ev.GroupEntered():
                out = self.on_group_entered(e.key, e.size, now=now)
            case ev.GroupFinished():
                out = self.on_group_finished(e.key, e.result, now=now, error=e.error, cancelled=e.cancelled)
            case ev.TimerFired():
                out = self.on_deadline(now=now)
            case ev.BlockEntered():
                out = self.on_block_entered(e.key, e.index, now=now)
            case ev.BlockExited():
                out = self.on_block_exited(e.key, e.index, now=now, teardowns=e.teardowns)
            case ev.MemberEnded():
                out = self.on_member_ended(e.key, e.index, now=now, raised=e.raised)
            case ev.TeardownsEnded():
                out = self.on_teardowns_done(e.key, e.index, now=now)
            case ev.MemberCancelled():
                out = self.on_member_cancelled(e.key, e.index, now=now)
            case ev.BlockCancelled():
                out = self.on_block_cancelled(e.key, e.index, now=now)
            case ev.SlotWaitCancelled():
                out = self.on_slot_cancelled(e.key, e.index, now=now)
            case ev.Evaluated():
                out = self.on_evaluated(now=now, metrics=e.metrics)
            case ev.StepTrained():
                out = self.on_trained(now=now, trainer=e.trainer, runtime=e.runtime)
            case ev.Published():
                out = self.on_published(now=now)
            case ev.RunStarted():
                out = self.start(now=now, checkpoint=e.checkpoint, state_lost=e.state_lost)
            case _:
                assert_never(e)
        return tuple(out) if out else ()

    # ------------------------------------------------------------------------------------------------ cycle
    def start(self, *, now: float, checkpoint: str | None = None, state_lost: str | None = None) -> list[Decision]:
        """This start of the run begins (``checkpoint``: the one a resume loaded; ``state_lost``: what of it did not
        read): the cycle's first decisions (the launch save)."""
        self.cycle.expect(C.LAUNCHING, event="start")
        self._start_args = (checkpoint, state_lost)
        return self.poll(now=now)

    def on_evaluated(self, *, now: float, metrics: Mapping[str, Any] | None = None) -> list[Decision]:
        """The evaluation ``Evaluate`` asked for is done (``metrics``: held-out pass@1 and the like; ``eval/`` is
        added to a name without it, and the start limit's evaluation metrics join them)."""
        measured = prefixed("eval/", metrics)
        if self.start_limit is not None and metrics is not None:  # empty until an evaluation asked for a slot
            measured.update(prefixed("eval/", self.start_limit.metrics(now=now, scope="eval")))
        self.cycle.go("on_evaluated")
        self.cycle.eval_metrics = measured
        return []

    def on_trained(self, *, now: float, trainer: Mapping[str, Any] | None = None,
                   runtime: Mapping[str, Any] | None = None) -> list[Decision]:
        """The update of the step ``Train`` asked for is done: commit it. ``trainer``: the trainer's metrics (named
        ``trainer/...`` in the row); ``runtime``: the runtime's own, named as they are (``sim/...``, the workflow's)."""
        self.cycle.go("on_trained")
        step, d = self.cycle.step, self.dispatcher
        assert step is not None
        d.commit_step(now=now)
        self.window.waste("stale", sum(1 for g in step.stale for m in g.record.members  # a cut one counted as cut
                                       if m.disposition not in (CANCELLED, STRAGGLER_KILLED)))
        self.window.waste("cancelled", self.members.take_running_cancelled())
        row = d.step_metrics(now=now)
        row["rollout_client/permit_busy_share"] = (
            row["rollout_client/rollouts_in_flight_mean"] / d.config.max_concurrent_rollouts)
        row.update(self.window.read(now=now))
        row.update(batch_metrics(step, d.threshold, bound=d.config.max_staleness))
        if self.start_limit is not None:
            row.update(self.start_limit.metrics(now=now, scope="train"))
        row.update(runtime or {})
        row.update({f"trainer/{k}": v for k, v in (trainer or {}).items()})
        row.update(self.cycle.eval_metrics)
        self.cycle.eval_metrics = {}
        peak = max(float(row.get("rollout_client/rollouts_in_flight_max", 0.0)), float(self.rollouts.blocks_max))
        self.rollouts.blocks_max = self.rollouts.blocks
        if (warning := self._over_budget.note(peak, step=step.step)) is not None:
            self._warnings.append(warning)
        self._row = step_row(step.step, now, row)
        return []

    def on_published(self, *, now: float) -> list[Decision]:
        """The weights ``Publish`` named are live: the next step begins (or the run's end does)."""
        self.cycle.go("on_published")
        self.cycle.step = None
        self.window.trainer_idle(now=now)
        decisions = self.rollouts.seen(self.dispatcher.publish(now=now), now)
        if self.dispatcher.phase is StepPhase.FINISHED:
            self.cycle.state = C.FINAL
        self.cycle.wake = True
        return decisions

    # ----------------------------------------------------------------------------------------------- timers
    def next_deadline(self) -> float | None:
        """The earliest of the dispatcher's, the start limit's and the straggler deadlines, or None."""
        due = self.dispatcher.next_deadline()  # asked after every event: no list built, most answers are None
        for t in (self.members.next_deadline(),
                  self.start_limit.next_deadline() if self.start_limit is not None else None):
            if t is not None and (due is None or t < due):
                due = t
        return due

    # ------------------------------------------------------------------------------------------------ outbox
    def take_outbox(self) -> Outbox:
        """Events, infos and warnings of every part since the last call."""
        d = self.dispatcher
        warnings = d.take_warnings() + d.recorder.take_warnings() + d.samplers.take_warnings()
        if self.start_limit is not None:
            warnings += self.start_limit.take_warnings()
        warnings += self.members.take_warnings()
        warnings = self._warnings + warnings
        self._warnings.clear()
        infos, self._infos = self._infos + d.take_infos(), []
        return Outbox(d.take_events(), infos, warnings)

    # ------------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The driver's own state (the dispatcher's is in the dispatch state): cycle, start limit, members, window."""
        return {"format": DRIVER_STATE_FORMAT, "cycle": self.cycle.state_dict(),
                "start_limit": None if self.start_limit is None else self.start_limit.state_dict(),
                "members": self.members.state_dict(), "window": self.window.state_dict(),
                "failures": self._failures.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` saved (an exact resume; the dispatcher is restored from its own state)."""
        if state.get("format") != DRIVER_STATE_FORMAT:
            raise ValueError(f"driver state format {state.get('format')!r} is not {DRIVER_STATE_FORMAT}")
        self.cycle.load_state_dict(state["cycle"])
        if self.start_limit is not None and state["start_limit"] is not None:
            self.start_limit.load_state_dict(state["start_limit"])
        self.members.load_state_dict(state["members"])
        self.window.load_state_dict(state["window"])
        self._failures.load_state_dict(state.get("failures"))



__all__ = ["BLOCKED_WORDS", "Abort", "AwaitTeardowns", "CancelRollout", "CycleError", "Decision", "Driver", "EndTeardownWait", "Evaluate",
           "Finish", "Outbox", "Publish", "SaveCheckpoint", "Schedule", "SlotGranted", "Train", "WriteRow"]
