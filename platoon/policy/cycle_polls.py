"""The driver's polls: what each state of the step cycle answers when the driver is polled in it.

What this module owns (docs/architecture.md, "The driver and the step cycle"): the cycle's table is
``platoon.policy.cycle``'s (its states and the events that move them); here is what ``Driver.poll`` answers in each
state that has work of its own: the launch save (``_launch``), the start (``_begin``: the config's warnings, the start
limit's announcement, the first draws), the step once its batch is complete (``_take_step``) or the stall when nothing
can complete it (``_stall_reason``), its evaluation and training (``_step_ready``, ``_evaluated``), the committed
step's row, checkpoint and publish (``_committed``, ``_publish``), the final evaluation and the end (``_final``,
``_end``), and the checkpoint's payload (``_checkpoint``). ``CyclePolls`` is the ``Driver``'s base: the polls read and
move the driver's own state (its cycle, dispatcher, schedule, outbox lists and the committed step's row), which its
attributes below name; the table ``POLLS`` maps a state to its poll.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from platoon.policy.cycle import (
    Abort,
    Cycle,
    CycleState,
    Evaluate,
    Finish,
    Publish,
    SaveCheckpoint,
    Train,
    WriteRow,
    step_row,
)
from platoon.policy.decisions import Decision
from platoon.policy.dispatch_state import STATE_FORMAT
from platoon.policy.dispatcher import Dispatcher
from platoon.policy.failures import FailureStreak
from platoon.policy.run_metrics import StepWindow
from platoon.policy.start_limit import StartLimit, announcement

if TYPE_CHECKING:
    from platoon.policy.driver import Schedule
    from platoon.policy.rollout_events import RolloutEvents

C = CycleState
BLOCKED_WORDS = {"permits": "every permit is held", "horizon": "the horizon (max_staleness) has no room",
                 "labels": "every label is at its limit", "plan": "the plan has no more groups to draw",
                 "sampler": "the sampler declined to draw"}


class CyclePolls:
    """The driver's polls (see the module docstring); the attributes are the ``Driver``'s, set in its ``__init__``."""

    dispatcher: Dispatcher
    cycle: Cycle
    schedule: Schedule
    window: StepWindow
    start_limit: StartLimit | None
    rollouts: RolloutEvents
    runtime: str
    group_workflow: bool
    eval_rollouts: int
    config_warnings: tuple[str, ...]
    _start_args: tuple[str | None, str | None]
    _row: dict[str, Any] | None
    _infos: list[str]
    _warnings: list[str]
    _failures: FailureStreak

    @property
    def steps(self) -> int:
        return self.dispatcher.config.steps

    def eval_due(self, step: int) -> bool:
        """Evaluate the policy that step ``step`` trains from; ``step == steps``: the final policy, evaluated after
        the last step whenever evaluation is on; step 0 under ``eval.at_start``."""
        return self.schedule.eval_due(step, self.steps)

    def poll(self, *, now: float) -> list[Decision]:
        """The cycle's decisions due now (``platoon.policy.cycle``), in order; [] while the runtime's work is what
        the cycle waits for. Cheap when nothing is due: a runtime asks after every event it carried out."""
        state = self.cycle.state
        if state is C.WAITING and self._failures.broken():
            return [Abort(self._failures.reason(self.dispatcher.step), cause="failures")]
        if state is C.WAITING:
            return self._take_step(now) if self.cycle.wake else []
        handler = POLLS.get(state)
        return handler(self, now) if handler is not None else []

    def next_deadline(self) -> float | None:
        raise NotImplementedError  # the Driver's

    def state_dict(self) -> dict[str, Any]:
        raise NotImplementedError  # the Driver's

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
        decisions = self.rollouts.seen(self.dispatcher.start(now=now, checkpoint=checkpoint, state_lost=state_lost), now)
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
        decisions = self.rollouts.seen(d.poll(now=now), now)
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


POLLS: dict[CycleState, Callable[[CyclePolls, float], list[Decision]]] = {
    C.LAUNCHING: CyclePolls._launch, C.STARTING: CyclePolls._begin, C.STEP_READY: CyclePolls._step_ready,
    C.EVALUATED: CyclePolls._evaluated, C.COMMITTED: CyclePolls._committed, C.PUBLISH_DUE: CyclePolls._publish,
    C.FINAL: CyclePolls._final, C.FINAL_EVALUATED: CyclePolls._end}
