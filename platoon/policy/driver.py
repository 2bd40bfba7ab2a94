"""The driver: one step cycle, one timer source and one outbox, for both runtimes.

What this module owns (docs/architecture.md, "The driver"): everything a runtime would otherwise decide itself. A
runtime (``platoon.sim``, ``platoon.live``) owns a clock and its I/O; it tells the driver what happened, with
``now=``, carries out the decisions it answers, re-arms one timer at ``next_deadline()``, and writes what
``take_outbox()`` hands it. The driver holds the policy layer of one start of a run:

- the ``Dispatcher`` (draws, permits, horizon, admission, steps);
- the ``StartLimit`` of ``train.max_starting_rollouts`` (or None);
- the ``MemberWatch``: a failing group's cancel order and the straggler deadlines (``platoon.policy.members``);
- the ``StepWindow`` and the batch metrics of ``platoon.policy.run_metrics``.

Decisions a runtime carries out, in the order given: ``StartGroup`` (start a group's workflow), ``GrantPermit``
(a member may run), ``SlotGranted`` (a member waiting for a start slot has one), ``CancelRollout`` (cancel a
member; its reason is its disposition).

The step cycle: ``take_step(now=)`` answers ``(TrainStep | None, decisions)`` (the decisions a dequeue unblocks);
the runtime trains the step, then ``finish_step(now=, metrics=)`` commits it and answers the step's metrics row and
whether a full checkpoint is due; ``checkpoint(name, done)`` gives its files and row, the same fields in both
runtimes; ``publish(now=)`` makes the new policy version live and answers what it lets start. The ``Schedule`` says when:
evaluation before step 0 under ``eval.at_start``, before steps ``every, 2 every, ...`` and once more at the end
(``eval_due``); a checkpoint after every ``checkpoint.every``-th step (kept for good), every ``recovery_every``-th
(pruned to the newest few) and after the last (``StepReport.checkpoint_due``, ``.permanent``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from platoon.policy.dispatch_records import StepPhase
from platoon.policy.dispatch_state import STATE_FORMAT
from platoon.policy.dispatcher import Dispatcher, StartGroup
from platoon.policy.members import CANCELLED, STRAGGLER_KILLED, CancelRollout, MemberState, MemberWatch
from platoon.policy.outputs import GroupOutput, Key, TrainStep
from platoon.policy.permits import GrantPermit
from platoon.policy.run_metrics import StepWindow, batch_metrics
from platoon.policy.start_limit import SlotGranted, StartLimit, announcement

DRIVER_STATE_FORMAT = 1


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


@dataclass(frozen=True)
class StepReport:
    """A committed step: its metrics row (without ``step``/``time``), the steps done, whether to checkpoint, and
    the policy version to publish (``step.version + 1``, or ``step.version`` when the step trained no group)."""

    step: TrainStep
    metrics: dict[str, float]
    done: int
    checkpoint_due: bool
    version: int
    permanent: bool = False
    """The due checkpoint is kept for good (``checkpoint.every``, or the final one)."""


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
        self.eval_rollouts = eval_rollouts  # evaluation's rollouts at once, which take start slots too (live)
        self.members = members if members is not None else MemberWatch()
        self.schedule = schedule if schedule is not None else Schedule()
        self.runtime = runtime
        self.window = StepWindow(dispatcher.now)
        self.config_warnings = config_warnings
        self._infos: list[str] = []
        self._warnings: list[str] = []

    # ------------------------------------------------------------------------------------------- inspection
    @property
    def phase(self) -> StepPhase:
        return self.dispatcher.phase

    @property
    def finished(self) -> bool:
        return self.dispatcher.phase is StepPhase.FINISHED

    @property
    def steps(self) -> int:
        return self.dispatcher.config.steps

    def eval_due(self, step: int) -> bool:
        """Evaluate the policy that step ``step`` trains from; ``step == steps``: the final policy, evaluated after
        the last step whenever evaluation is on; step 0 under ``eval.at_start``."""
        return self.schedule.eval_due(step, self.steps)

    # ----------------------------------------------------------------------------------------------- events
    def start(self, *, now: float, checkpoint: str | None = None, state_lost: str | None = None) -> list[Any]:
        """The start begins (``checkpoint``: the one a resume loaded); it repeats the config's warnings and
        announces the start limit, if any (docs/start-limit.md)."""
        self._warnings += self.config_warnings
        if self.start_limit is not None:
            d = self.dispatcher
            for level, message in announcement(
                    self.start_limit.limit, group_workflow=self.group_workflow,
                    largest_group_size=max(e.group_size for e in d.pool.entries.values()),
                    concurrent_rollouts=d.config.max_concurrent_rollouts + self.eval_rollouts):
                (self._warnings if level == "warning" else self._infos).append(message)
        return self._seen(self.dispatcher.start(now=now, checkpoint=checkpoint, state_lost=state_lost), now)

    def on_block_entered(self, key: Key, index: int, *, now: float) -> list[Any]:
        return self._seen(self.dispatcher.on_block_entered(key, index, now=now), now)

    def on_group_entered(self, key: Key, size: int, *, now: float) -> list[Any]:
        """Members ``0..size-1`` of a started group entered their lease blocks at once, in index order: what
        ``on_block_entered`` answers for each in turn, in one call (a runtime whose members all enter together)."""
        return self._seen(self.dispatcher.on_group_entered(key, size, now=now), now)

    def on_block_cancelled(self, key: Key, index: int, *, now: float) -> list[Any]:
        """A member's wait for its permit was cancelled: it never ran."""
        self.members.on_cancelled(key, index)
        return self._seen(self.dispatcher.on_block_cancelled(key, index, now=now), now)

    def on_block_exited(self, key: Key, index: int, *, now: float, teardowns_pending: bool = False) -> list[Any]:
        if not teardowns_pending:
            self.members.on_exited(key, index)
        return self._seen(self.dispatcher.on_block_exited(key, index, now=now,
                                                          teardowns_pending=teardowns_pending), now)

    def on_teardowns_done(self, key: Key, index: int, *, now: float) -> list[Any]:
        self.members.on_exited(key, index)
        return self._seen(self.dispatcher.on_teardowns_done(key, index, now=now), now)

    def request_slot(self, key: Key, index: int, *, now: float, scope: str = "train") -> bool:
        """Member ``index`` holds its permit and asks for a start slot: True when it has one now (else a
        ``SlotGranted`` comes later). Always True without a limit."""
        if self.start_limit is None:
            return True
        return self.start_limit.request((*key, index), now=now, scope=scope)

    def on_slot_cancelled(self, key: Key, index: int, *, now: float) -> list[Any]:
        """A member's wait for its start slot was cancelled."""
        if self.start_limit is None:
            return []
        return self._seen(self.start_limit.cancel((*key, index), now=now), now)

    def release_slot(self, key: Key, index: int, reason: str, *, now: float) -> list[Any]:
        """Member ``index`` gives its slot back: ``first_call``, ``end`` or ``cancelled`` (later calls: no-ops)."""
        if self.start_limit is None:
            return []
        return self._seen(self.start_limit.release((*key, index), reason, now=now), now)

    def on_member_started(self, key: Key, index: int, *, now: float, delay_s: float) -> list[Any]:
        """Member ``index`` began its rollout after waiting ``delay_s`` for its permit and slot."""
        self.members.on_started(key, index, now=now, delay_s=delay_s)
        return []

    def on_member_ended(self, key: Key, index: int, *, now: float, raised: bool = False) -> list[Any]:
        """Member ``index``'s rollout ran to its end (``raised``: with an exception): the cancellations that
        follow (a failing group's others, in the order they must be cancelled)."""
        cancels = self.members.on_ended(key, index, now=now, raised=raised)
        if self.members.state(key, index) is MemberState.ENDED:
            self.window.rollout_ended()
        return self._seen(cancels, now)

    def on_member_exited(self, key: Key, index: int, *, now: float) -> list[Any]:
        """Member ``index``'s rollout ran to its normal end and its block exits at once (no teardown waits): what
        ``on_member_ended`` then ``on_block_exited`` answer, in one call (the first answers nothing here)."""
        if self.members.on_ended_and_exited(key, index, now=now):
            self.window.rollout_ended()
        return self._seen(self.dispatcher.on_block_exited(key, index, now=now), now)

    def on_group_finished(self, key: Key, output: GroupOutput | None, *, now: float) -> list[Any]:
        """The group's workflow returned ``output`` (None: it raised): settle it and release its lease."""
        ran = self.members.ran(key)
        self.members.close(key)
        decisions = self.dispatcher.on_group_finished(key, output, now=now)
        if output is None:
            self.window.waste("failed", ran)
        elif not self.dispatcher.is_outstanding(key):
            self.window.waste("rejected", ran)
        return self._seen(decisions, now)

    # ----------------------------------------------------------------------------------------------- timers
    def next_deadline(self) -> float | None:
        """The earliest of the dispatcher's, the start limit's and the straggler deadlines, or None."""
        due = self.dispatcher.next_deadline()  # asked after every event: no list built, most answers are None
        for t in (self.members.next_deadline(),
                  self.start_limit.next_deadline() if self.start_limit is not None else None):
            if t is not None and (due is None or t < due):
                due = t
        return due

    def on_deadline(self, *, now: float) -> list[Any]:
        """Fire every deadline that has come: teardown waits, start slots' timers, straggler cuts."""
        decisions: list[Any] = []
        if (due := self.dispatcher.next_deadline()) is not None and due <= now:
            decisions += self.dispatcher.on_deadline(now=now)
        if self.start_limit is not None and (due := self.start_limit.next_deadline()) is not None and due <= now:
            decisions += self.start_limit.on_deadline(now=now)
        decisions += self.members.on_deadline(now=now)
        return self._seen(decisions, now)

    # ------------------------------------------------------------------------------------------- step cycle
    def take_step(self, *, now: float) -> tuple[TrainStep | None, list[Any]]:
        """The step to train once its batch is complete (else None), and the starts its dequeues allow."""
        step = self.dispatcher.take_step(now=now)
        if step is not None:
            self.window.trainer_busy(now=now)
        return step, self._seen(self.dispatcher.poll(now=now), now)

    def finish_step(self, step: TrainStep, *, now: float, metrics: Mapping[str, float] | None = None) -> StepReport:
        """The update of ``step`` is done: commit it and answer its metrics row (``metrics``: the runtime's own,
        such as ``trainer/*`` and ``eval/*``) and whether a full checkpoint is due."""
        d = self.dispatcher
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
        row.update(metrics or {})
        done = step.step + 1
        due, permanent = self.schedule.checkpoint_due(done, self.steps)
        return StepReport(step, row, done, due, d.next_version, permanent)

    def publish(self, *, now: float) -> list[Any]:
        """The new weights are live: the next step begins (or the run is finished)."""
        self.window.trainer_idle(now=now)
        return self._seen(self.dispatcher.publish(now=now), now)

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

    # -------------------------------------------------------------------------------------------- checkpoints
    def checkpoint(self, name: str, done: int) -> tuple[dict[str, object], dict[str, Any]]:
        """The files and row of the full checkpoint ``name`` of ``done`` steps, captured now (docs/run-directory.md):
        the dispatch state, the statistics' snapshot (while the recorder keeps one) and the driver's own state;
        the row names them with their formats and this start. A runtime adds its own files and ``logs``."""
        d = self.dispatcher
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
        return files, row

    def state_dict(self) -> dict[str, Any]:
        """The driver's own state (the dispatcher's is in the dispatch state): start limit, members, window."""
        return {"format": DRIVER_STATE_FORMAT,
                "start_limit": None if self.start_limit is None else self.start_limit.state_dict(),
                "members": self.members.state_dict(), "window": self.window.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` saved (an exact resume; the dispatcher is restored from its own state)."""
        if state.get("format") != DRIVER_STATE_FORMAT:
            raise ValueError(f"driver state format {state.get('format')!r} is not {DRIVER_STATE_FORMAT}")
        if self.start_limit is not None and state["start_limit"] is not None:
            self.start_limit.load_state_dict(state["start_limit"])
        self.members.load_state_dict(state["members"])
        self.window.load_state_dict(state["window"])

    # ------------------------------------------------------------------------------------------- internals
    def _seen(self, decisions: list[Any], now: float) -> list[Any]:
        """Note what the decisions change for the members (groups opened, permits granted)."""
        if not decisions:  # most calls: nothing to note
            return decisions
        for dec in decisions:
            if isinstance(dec, GrantPermit):
                self.members.on_granted(dec.key, dec.index)
            elif isinstance(dec, StartGroup):
                self.members.open(dec.key, dec.group_size, entry=dec.entry,
                                  label=self.dispatcher.pool[dec.row_index].label)
        return decisions


__all__ = ["CancelRollout", "Driver", "Outbox", "SlotGranted", "StepReport"]
