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

Rules about members kept here rather than in a runtime: whether a block's permit waits for its teardowns (under
``permit_release: rollout`` only, while it holds one), what a cancelled member's end means in each phase
(``on_member_cancelled``), a block that enters after its group's draw was released (it runs on no permit, with a
warning once per group), the fate of a workflow that returns no ``GroupOutput`` or is cancelled, and the count of
blocks running at once for the over-budget warning.

(About 625 lines, past the ~450 of one idea a module: it is one idea, every event of a start routed to the part that
keeps its rule and every answer given in order; the cycle's states are ``platoon.policy.cycle``'s and the member
rules ``platoon.policy.members``', and splitting the routing further would scatter one call's answer over modules.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, assert_never, cast

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
from platoon.policy.decisions import AwaitTeardowns, Decision, EndTeardownWait
from platoon.policy.dispatch_records import StepPhase
from platoon.policy.dispatch_state import STATE_FORMAT
from platoon.policy.dispatcher import Dispatcher, StartGroup
from platoon.policy.failures import FAILED_GROUPS_LIMIT, FailureStreak, failure_words
from platoon.policy.members import CANCELLED, STRAGGLER_KILLED, CancelRollout, MemberState, MemberWatch
from platoon.policy.outputs import GroupOutput, Key
from platoon.policy.over_budget import OverBudgetWatch
from platoon.policy.permits import GrantPermit
from platoon.policy.run_metrics import StepWindow, batch_metrics
from platoon.policy.start_limit import SlotGranted, SlotState, StartLimit, announcement

C = CycleState
DRIVER_STATE_FORMAT = 2
BLOCKED_WORDS = {"permits": "every permit is held", "horizon": "the horizon (max_staleness) has no room",
                 "labels": "every label is at its limit", "plan": "the plan has no more groups to draw",
                 "sampler": "the sampler declined to draw"}


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


class Driver:
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
        self._blocks = 0  # member blocks running now (on a permit or, late, on none)
        self._blocks_max = 0  # their most at once since the last step's row
        self._over_budget = OverBudgetWatch(dispatcher.config.max_concurrent_rollouts)
        self._late: set[Key] = set()  # groups whose late blocks were warned about
        self._released: dict[Key, tuple[str, set[int]]] = {}  # finished groups' blocks that never entered, by task
        self._infos: list[str] = []
        self._warnings: list[str] = []
        self._failures = FailureStreak(limit=max(FAILED_GROUPS_LIMIT, 2 * dispatcher.config.batch_size))

    # ------------------------------------------------------------------------------------------- inspection
    @property
    def phase(self) -> StepPhase:
        return self.dispatcher.phase

    @property
    def finished(self) -> bool:
        """The cycle is done: the plan's steps, the final evaluation and the end were answered."""
        return self.cycle.state is C.FINISHED

    @property
    def steps(self) -> int:
        return self.dispatcher.config.steps

    @property
    def steps_done(self) -> int:
        return self.dispatcher.step

    def eval_due(self, step: int) -> bool:
        """Evaluate the policy that step ``step`` trains from; ``step == steps``: the final policy, evaluated after
        the last step whenever evaluation is on; step 0 under ``eval.at_start``."""
        return self.schedule.eval_due(step, self.steps)

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

    def poll(self, *, now: float) -> list[Decision]:
        """The cycle's decisions due now (``platoon.policy.cycle``), in order; [] while the runtime's work is what
        the cycle waits for. Cheap when nothing is due: a runtime asks after every event it carried out."""
        state = self.cycle.state
        if state is C.WAITING and self._failures.broken():
            return [Abort(self._failures.reason(self.dispatcher.step), cause="failures")]
        if state is C.WAITING:
            return self._take_step(now) if self.cycle.wake else []
        handler = _POLLS.get(state)
        return handler(self, now) if handler is not None else []

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
        peak = max(float(row.get("rollout_client/rollouts_in_flight_max", 0.0)), float(self._blocks_max))
        self._blocks_max = self._blocks
        if (warning := self._over_budget.note(peak, step=step.step)) is not None:
            self._warnings.append(warning)
        self._row = step_row(step.step, now, row)
        return []

    def on_published(self, *, now: float) -> list[Decision]:
        """The weights ``Publish`` named are live: the next step begins (or the run's end does)."""
        self.cycle.go("on_published")
        self.cycle.step = None
        self.window.trainer_idle(now=now)
        decisions = self._seen(self.dispatcher.publish(now=now), now)
        if self.dispatcher.phase is StepPhase.FINISHED:
            self.cycle.state = C.FINAL
        self.cycle.wake = True
        return decisions

    # ----------------------------------------------------------------------------------------------- events
    def on_block_entered(self, key: Key, index: int, *, now: float) -> list[Decision]:
        """Member ``index`` entered its lease block: its ``GrantPermit`` now or later. A block of a group whose
        draw was released already runs at once on no permit, with a warning once per group."""
        if key not in self.dispatcher.running:
            task, left = self._released.get(key, (str(key), set()))
            left.discard(index)
            if not left:
                self._released.pop(key, None)
            return self._seen([self._late_grant(key, index, task)], now)
        return self._seen(self.dispatcher.on_block_entered(key, index, now=now), now)

    def on_group_entered(self, key: Key, size: int, *, now: float) -> list[Decision]:
        """Members ``0..size-1`` of a started group entered their lease blocks at once, in index order: what
        ``on_block_entered`` answers for each in turn, in one call (a runtime whose members all enter together)."""
        return self._seen(self.dispatcher.on_group_entered(key, size, now=now), now)

    def on_block_cancelled(self, key: Key, index: int, *, now: float) -> list[Decision]:
        """A member's wait for its permit was cancelled: it never ran."""
        self.members.on_cancelled(key, index)
        return self._seen(self.dispatcher.on_block_cancelled(key, index, now=now), now)

    def on_block_exited(self, key: Key, index: int, *, now: float, teardowns: bool = False) -> list[Decision]:
        """Member ``index``'s block exited (``teardowns``: with background teardowns still running). Its permit
        comes back, or, under ``permit_release: rollout`` while it holds one, waits for them (``AwaitTeardowns``)."""
        self._blocks -= 1
        if key not in self.dispatcher.running:
            return []  # a late block, on no permit
        waits = teardowns and self._holds_permit(key, index)
        if not waits:
            self.members.on_exited(key, index)
        decisions: Sequence[Decision] = self.dispatcher.on_block_exited(key, index, now=now, teardowns_pending=waits)
        if waits:
            decisions = [*decisions, AwaitTeardowns(key, index)]
        return self._seen(decisions, now)

    def on_teardowns_done(self, key: Key, index: int, *, now: float) -> list[Decision]:
        self.members.on_exited(key, index)
        return self._seen(self.dispatcher.on_teardowns_done(key, index, now=now), now)

    def request_slot(self, key: Key, index: int, *, now: float, scope: str = "train") -> bool:
        """Member ``index`` holds its permit and asks for a start slot: True when it has one now (else a
        ``SlotGranted`` comes later). Always True without a limit."""
        if self.start_limit is None:
            return True
        granted = self.start_limit.request((*key, index), now=now, scope=scope)
        if granted and key in self.members.groups:
            self.members.on_slot_granted(key, index)
        return granted

    def on_slot_cancelled(self, key: Key, index: int, *, now: float) -> list[Decision]:
        """A member's wait for its start slot was cancelled."""
        if self.start_limit is None:
            return []
        return self._seen(self.start_limit.cancel((*key, index), now=now), now)

    def release_slot(self, key: Key, index: int, reason: str, *, now: float) -> list[Decision]:
        """Member ``index`` gives its slot back: ``first_call``, ``end`` or ``cancelled`` (later calls: no-ops).
        A first call moves a training member on to running, with a start limit or without."""
        if reason == "first_call":
            self.members.on_first_call(key, index)
        if self.start_limit is None:
            return []
        return self._seen(self.start_limit.release((*key, index), reason, now=now), now)

    def on_member_started(self, key: Key, index: int, *, now: float, delay_s: float) -> list[Decision]:
        """Member ``index`` began its rollout after waiting ``delay_s`` for its permit and slot."""
        self.members.on_started(key, index, now=now, delay_s=delay_s)
        return []

    def on_member_ended(self, key: Key, index: int, *, now: float, raised: bool = False) -> list[Decision]:
        """Member ``index``'s rollout ran to its end (``raised``: with an exception): the cancellations that
        follow (a failing group's others, in the order they must be cancelled)."""
        cancels = self.members.on_ended(key, index, now=now, raised=raised)
        if self.members.state(key, index) is MemberState.TEARING_DOWN:
            self.window.rollout_ended()
        return self._seen(cancels, now)

    def on_member_exited(self, key: Key, index: int, *, now: float, teardowns: bool = False) -> list[Decision]:
        """Member ``index``'s rollout ran to its normal end and its block exits (``teardowns``: with background
        teardowns running): what ``on_member_ended`` then ``on_block_exited`` answer, in one call."""
        if teardowns and self._holds_permit(key, index):
            return self.on_member_ended(key, index, now=now) + self.on_block_exited(key, index, now=now,
                                                                                   teardowns=True)
        self._blocks -= 1
        if self.members.on_ended_and_exited(key, index, now=now):
            self.window.rollout_ended()
        return self._seen(self.dispatcher.on_block_exited(key, index, now=now), now)

    def on_member_cancelled(self, key: Key, index: int, *, now: float) -> list[Decision]:
        """A ``CancelRollout`` stopped member ``index`` wherever it stood: the events that stand for that in its
        phase (a wait for its permit cancelled; its wait for teardowns ended; its wait for a start slot cancelled,
        or its slot given back, and its block exited)."""
        if self._waits_for_permit(key, index):
            return self.on_block_cancelled(key, index, now=now)
        if index in self.dispatcher.teardowns.get(key, ()):
            return self.on_teardowns_done(key, index, now=now)
        limit = self.start_limit
        decisions: list[Decision] = []
        if limit is not None and limit.state((*key, index)) is SlotState.WAITING:
            decisions += self.on_slot_cancelled(key, index, now=now)
        else:
            decisions += self.release_slot(key, index, "cancelled", now=now)
        return decisions + self.on_block_exited(key, index, now=now)

    def on_group_finished(self, key: Key, result: object, *, now: float, error: BaseException | None = None,
                          cancelled: bool = False, warn: bool = True) -> list[Decision]:
        """The group's workflow returned ``result`` (None: it failed). It counts as failed when it raised
        ``error``, was ``cancelled`` or returned anything but a ``GroupOutput``, with a warning that says which
        (``warn=False``: a failure the runtime made up on purpose, the simulator's ``error_rate``, is not said; it
        counts toward the failure streak all the same). Settle it and release its lease; blocks of it still waiting
        for a permit run late, on none."""
        output = result if isinstance(result, GroupOutput) and error is None and not cancelled else None
        draw = self.dispatcher.running[key][0] if key in self.dispatcher.running else None
        task = draw.task_id if draw is not None else "?"
        if cancelled:
            self._warnings.append(f"group {key} (task {task}) was cancelled: it counts as failed")
        elif error is not None:
            failure = failure_words(key, task, draw.entry if draw is not None else None, error)
            if warn:
                self._warnings.append(failure)
            self._failures.failed(failure)
        elif result is not None and output is None:
            self._warnings.append(f"the workflow of group {key} (task {task}) returned {type(result).__name__}, "
                                  "not a GroupOutput: the group counts as failed")
        waiting = self._waiting_blocks(key)
        if key in self.dispatcher.running and (never := set(range(self.dispatcher.running[key][1].size))
                                               - self.dispatcher.running[key][1].used - set(waiting)):
            self._released[key] = (task, never)  # blocks that may still enter, late: their warning names the task
        if output is not None:
            self._failures.succeeded()
        ran = self.members.ran(key)
        self.members.close(key)
        decisions = self.dispatcher.on_group_finished(key, output, now=now)
        if output is None:
            self.window.waste("failed", ran)
        elif not self.dispatcher.is_outstanding(key):
            self.window.waste("rejected", ran)
        self.cycle.wake = True
        return self._seen(decisions + [self._late_grant(key, i, task) for i in waiting], now)

    # ----------------------------------------------------------------------------------------------- timers
    def next_deadline(self) -> float | None:
        """The earliest of the dispatcher's, the start limit's and the straggler deadlines, or None."""
        due = self.dispatcher.next_deadline()  # asked after every event: no list built, most answers are None
        for t in (self.members.next_deadline(),
                  self.start_limit.next_deadline() if self.start_limit is not None else None):
            if t is not None and (due is None or t < due):
                due = t
        return due

    def on_deadline(self, *, now: float) -> list[Decision]:
        """Fire every deadline that has come: teardown waits, start slots' timers, straggler cuts."""
        decisions: list[Decision] = []
        d = self.dispatcher
        if (due := d.next_deadline()) is not None and due <= now:
            over = [EndTeardownWait(k, i) for k, waits in d.teardowns.items() for i, t in waits.items() if t <= now]
            decisions += d.on_deadline(now=now)
            decisions += over
        if self.start_limit is not None and (due := self.start_limit.next_deadline()) is not None and due <= now:
            decisions += self.start_limit.on_deadline(now=now)
        decisions += self.members.on_deadline(now=now)
        return self._seen(decisions, now)

    # ------------------------------------------------------------------------------------------------ outbox
    def take_outbox(self) -> Outbox:
        """Events, infos and warnings of every part since the last call."""
        d = self.dispatcher
        warnings = d.take_warnings() + d.recorder.take_warnings() + d.samplers.take_warnings()
        if self.start_limit is not None:
            warnings += self.start_limit.take_warnings()
        warnings += self.members.take_warnings()
        warnings, self._warnings = self._warnings + warnings, []
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

    # ------------------------------------------------------------------------------------------- the polls
    def _launch(self, now: float) -> list[Decision]:
        """The launch save, before this start draws (none when every step is done: only the end is left)."""
        if self.dispatcher.step >= self.steps:
            self.cycle.state = C.FINAL
            return self.poll(now=now)
        self.cycle.state = C.STARTING
        done = self.dispatcher.step
        return [self._checkpoint(done, permanent=done == 0)]

    def _begin(self, now: float) -> list[Decision]:
        """The dispatcher starts: the config's warnings, the start limit's announcement, the first draws."""
        self._warnings += self.config_warnings
        if self.start_limit is not None:
            d = self.dispatcher
            for level, message in announcement(
                    self.start_limit.limit, group_workflow=self.group_workflow,
                    largest_group_size=max(e.group_size for e in d.pool.entries.values()),
                    concurrent_rollouts=d.config.max_concurrent_rollouts + self.eval_rollouts):
                (self._warnings if level == "warning" else self._infos).append(message)
        checkpoint, state_lost = self._start_args
        self.cycle.state, self.cycle.wake = C.WAITING, True
        decisions = self._seen(self.dispatcher.start(now=now, checkpoint=checkpoint, state_lost=state_lost), now)
        return decisions or self._take_step(now)  # nothing started: a stall is said at once

    def _take_step(self, now: float) -> list[Decision]:
        """A group settled or a step published: the step once its batch is complete, and the starts its dequeues
        allow (the step's own decision comes on the next poll); a stall when nothing can ever complete it."""
        self.cycle.wake = False
        d = self.dispatcher
        step = d.take_step(now=now)
        if step is not None:
            self.window.trainer_busy(now=now)
            self.cycle.step, self.cycle.state = step, C.STEP_READY
        decisions = self._seen(d.poll(now=now), now)
        if step is not None and not decisions:  # no starts to carry out first
            return self._step_ready(now)
        if step is None and not decisions and not d.running and self.next_deadline() is None:
            return [Abort(self._stall_reason())]
        return decisions

    def _step_ready(self, now: float) -> list[Decision]:
        step = self.cycle.step
        assert step is not None
        if self.eval_due(step.step):
            self.cycle.state = C.EVALUATING
            return [Evaluate(step.step)]
        self.cycle.state = C.TRAINING
        return [Train(step)]

    def _evaluated(self, now: float) -> list[Decision]:
        assert self.cycle.step is not None
        self.cycle.state = C.TRAINING
        return [Train(self.cycle.step)]

    def _committed(self, now: float) -> list[Decision]:
        """The committed step's row, its checkpoint when due (captured with its publish due), its publish."""
        assert self._row is not None and self.cycle.step is not None
        decisions: list[Decision] = [WriteRow(self._row)]
        self._row = None
        done = self.cycle.step.step + 1
        due, permanent = self.schedule.checkpoint_due(done, self.steps)
        self.cycle.state = C.PUBLISH_DUE
        if due:
            decisions.append(self._checkpoint(done, permanent=permanent))
        return decisions + self._publish(now)

    def _publish(self, now: float) -> list[Decision]:
        self.cycle.state = C.PUBLISHING
        return [Publish(self.dispatcher.next_version)]

    def _final(self, now: float) -> list[Decision]:
        if self.eval_due(self.steps):
            self.cycle.state = C.FINAL_EVALUATING
            return [Evaluate(self.steps, final=True)]
        self.cycle.state = C.FINAL_EVALUATED
        return self._end(now)

    def _end(self, now: float) -> list[Decision]:
        row = self.cycle.eval_metrics
        self.cycle.eval_metrics, self.cycle.state = {}, C.FINISHED
        end = Finish(self.steps, self.dispatcher.start_number)
        return [WriteRow(step_row(self.steps, now, row)), end] if row else [end]

    # ------------------------------------------------------------------------------------------- internals
    def _checkpoint(self, done: int, *, permanent: bool) -> SaveCheckpoint:
        """Full checkpoint ``done`` captured now (docs/run-directory.md): the dispatch state, the statistics'
        snapshot (while the recorder keeps one) and the driver's own state; the row names them with their formats
        and this start. A runtime adds its own files, a run session the ``logs``."""
        d = self.dispatcher
        name = f"{done:06d}"
        # Apply the held settles first: the samplers observe them (an adaptive sampler's state may hold what it
        # learned from them, pass_rate's drift model does), so their states and the snapshot tell of the same groups.
        d.recorder.flush()
        start = d.start_number
        dispatch_file = f"tasks/dispatch-{name}.json"
        files: dict[str, object] = {dispatch_file: d.state_dict(), f"driver-{name}.json": self.state_dict()}
        row: dict[str, Any] = {"batch": done, "policy_version": d.next_version, "runtime": self.runtime,
                               "start": start,
                               "dispatch": {"file": dispatch_file, "format": STATE_FORMAT, "start": start}}
        snapshot = d.recorder.snapshot(columns=True)  # columnar: a runs layer writes it as .npz
        if snapshot is not None:
            state_file = f"tasks/state-{name}.npz"
            files[state_file] = snapshot
            row["tasks"] = {"file": state_file, "format": snapshot["format"], "start": start}
        if d.admission is not None:
            row["next_position"] = d.next_position
        return SaveCheckpoint(name, done, files, row, permanent)

    def _stall_reason(self) -> str:
        d = self.dispatcher
        reason = d.gauges.blocked.reason
        why = BLOCKED_WORDS.get(reason, "nothing holds it back, yet none is drawn") if reason else "none is drawn"
        return (f"the run stalled at step {d.step}: no group runs and no step can complete ({len(d.queue)} settled "
                f"groups queued, {d.horizon.pipeline} in the pipeline, {self.steps} steps planned); no group can "
                f"start: {why}")

    def _holds_permit(self, key: Key, index: int) -> bool:
        running = self.dispatcher.running.get(key)
        return running is not None and self.dispatcher.active_lease and index in running[1].holding_blocks

    def _waits_for_permit(self, key: Key, index: int) -> bool:
        running = self.dispatcher.running.get(key)
        return running is not None and any(i == index for i, _ in running[1].waiting)

    def _waiting_blocks(self, key: Key) -> list[int]:
        running = self.dispatcher.running.get(key)
        return [] if running is None else [i for i, _ in running[1].waiting]

    def _late_grant(self, key: Key, index: int, task: str) -> GrantPermit:
        if key not in self._late:
            self._late.add(key)
            self._warnings.append(f"a rollout of task {task} (group {key}) ran after its group's draw was "
                                  "released: it runs on no permit, so more rollouts can run than the budget")
        return GrantPermit(key, index, 0.0, False)

    def _seen(self, decisions: Sequence[Decision], now: float) -> list[Decision]:
        """Note what the decisions change for the members (groups opened, permits granted, blocks running).
        ``decisions``: a fresh list of one part's decisions (of a narrower type), answered as it is."""
        if not decisions:  # most calls: nothing to note
            return cast("list[Decision]", decisions)
        for dec in decisions:
            if isinstance(dec, GrantPermit):
                self._blocks += 1
                if self._blocks > self._blocks_max:
                    self._blocks_max = self._blocks
                if dec.held or dec.key in self.dispatcher.running:
                    self.members.on_granted(dec.key, dec.index)
            elif isinstance(dec, StartGroup):
                self.members.open(dec.key, dec.group_size, entry=dec.entry,
                                  label=dec.row.label)
            elif isinstance(dec, SlotGranted) and (group := dec.key[:2]) in self.members.groups:
                self.members.on_slot_granted(group, dec.key[2])  # a training member's (evaluation's are not here)
        return cast("list[Decision]", decisions)


_POLLS = {C.LAUNCHING: Driver._launch, C.STARTING: Driver._begin, C.STEP_READY: Driver._step_ready,
          C.EVALUATED: Driver._evaluated, C.COMMITTED: Driver._committed, C.PUBLISH_DUE: Driver._publish,
          C.FINAL: Driver._final, C.FINAL_EVALUATED: Driver._end}


__all__ = ["Abort", "AwaitTeardowns", "CancelRollout", "CycleError", "Decision", "Driver", "EndTeardownWait", "Evaluate",
           "Finish", "Outbox", "Publish", "SaveCheckpoint", "Schedule", "SlotGranted", "Train", "WriteRow"]
