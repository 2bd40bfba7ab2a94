"""The dispatcher: when each group starts, on which permits, and which settled groups a step trains.

This is the heart of the policy layer; the driver (``platoon.policy.driver``) holds it for both runtimes. It is
sans-I/O: every handler takes ``now=`` and returns decisions (``StartGroup``, ``GrantPermit``); the trainer asks
``take_step(now=)`` for a ``TrainStep``. It owns the state (its fields are what ``platoon.policy.dispatch_state``
writes and reads: ``state_dict``/``load_state_dict``) and decides *when* a group starts; each other idea lives in a
module of its own, which the dispatcher calls with itself (docs/dispatch.md):

- **Starting** (here). One start is pending at a time and nothing overtakes it: permits are FIFO. A group may start
  when the horizon has room (the places held for waiting labels counted) and some label has room; a waiting draw or
  token with room starts before a new draw. The blocked reason is set for the time until the next change.
- **The lease** (here, on ``platoon.policy.permits``): a group's permits, granted block by block, go back as its
  rollouts end (or all at once with the group), and a smaller adaptive group gives back what it does not use.
- **Drawing** (``platoon.policy.drawing``): static draws at once, adaptive ones once the permits are held; binding.
- **The horizon** (``platoon.policy.horizon``) and **the mixture** (``platoon.policy.mixture``): the plan,
  ``max_staleness`` and the cap bound what may start; labels at their limit, and the draws and tokens waiting.
- **Settling** (``platoon.policy.settle``): a group's record, its admission verdict and fate, its place in the queue.
- **Step assembly** (``platoon.policy.step_assembly``): the step phases (a call in the wrong phase raises), what a
  step takes, the fates at commit, the version.
- **Teardown waits** (``platoon.policy.teardown_waits``) and **the step's metrics**
  (``platoon.policy.dispatch_metrics``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from platoon.policy import dispatch_state, step_assembly, teardown_waits
from platoon.policy.admission import AdmissionSet, step_cap
from platoon.policy.dispatch_metrics import (
    DispatchGauges,
    StaleWatch,
    step_metrics,
)
from platoon.policy.dispatch_records import (
    TEARDOWN_WAIT_S,
    BoundDraw,
    DispatchConfig,
    PendingKind,
    PendingStart,
    StepPhase,
    dispatch_config,
)
from platoon.policy.drawing import adaptive_draw, bind, draw_static
from platoon.policy.horizon import Horizon
from platoon.policy.mixture import Mixture
from platoon.policy.outputs import GroupOutput, Key, SettledGroup, TrainStep
from platoon.policy.permits import DrawLease, GrantPermit, PermitPool
from platoon.policy.pool import TaskPool, TaskRow
from platoon.policy.recorder import StatsRecorder
from platoon.policy.samplers.runtime import Bound, SamplerSet, Token
from platoon.policy.settle import group_record, queue_settled

ROLLOUT_NOTICE = (
    "Each rollout returns its permit as it ends (train.permit_release: rollout); a group's rollouts {how}"
)


@dataclass(frozen=True)
class StartGroup:
    """Decision: start the workflow of group ``key`` on ``task_id`` (its members enter their lease blocks); the
    pool's ``row`` (index ``row_index``), the draw's ``position`` in the run's order (by which a trace samples)."""

    key: Key
    task_id: str
    entry: str | None
    row_index: int
    group_size: int
    version: int
    position: int
    row: TaskRow = field(compare=False, repr=False)


#: What the dispatcher's events answer (a part of ``platoon.policy.decisions.Decision``).
DispatchDecision = StartGroup | GrantPermit


class Dispatcher:
    """See the module docstring. ``rolling``: the training workflow runs its rollouts on the lease."""

    def __init__(self, config: DispatchConfig, pool: TaskPool, samplers: SamplerSet, recorder: StatsRecorder,
                 admission: AdmissionSet | None = None, *, rolling: bool = True, start: int = 1,
                 clock: Callable[[], float] | None = None) -> None:
        self.config, self.pool, self.samplers, self.recorder = config, pool, samplers, recorder
        self.admission = admission if admission is not None and admission.rule_mode else None
        self.start_number = start
        self.active_lease = config.permit_release == "rollout"
        self.rolling = rolling and self.active_lease
        self.permits = PermitPool(config.max_concurrent_rollouts)
        self.cap = step_cap(config.batch_size, config.max_groups_per_step)
        self.phase = StepPhase.ASSEMBLING
        self.step = 0
        self.version = 0
        self.next_seq = 0
        self.next_position = 0
        self.horizon = Horizon(batch_size=config.batch_size, steps=config.steps, max_staleness=config.max_staleness,
                               entry_staleness=config.entry_staleness, cap=self.cap,
                               rule_mode=self.admission is not None)
        self.mixture = Mixture(pool, config.label_limits, batch_size=config.batch_size)
        self.now = 0.0
        self.outstanding: dict[Key, BoundDraw] = {}
        self.running: dict[Key, tuple[BoundDraw, DrawLease]] = {}
        self.queue: deque[SettledGroup] = deque()
        self.step_items: list[SettledGroup] = []
        self.pending: PendingStart | None = None
        self.teardowns: dict[Key, dict[int, float]] = {}
        self.gauges = DispatchGauges(configured=self._configured_in_flight())
        self.stale_watch = StaleWatch()
        self.said: set[str] = set()
        self._events: list[dict] = []
        self._warnings: list[str] = []
        self._infos: list[str] = []
        self.skipped_slots = 0
        self.skipped_rows: dict[str | None, int] = {}  # drawn rows skipped by a full backlog since the last step

    # ----------------------------------------------------------------------------------------------- events
    def start(self, *, now: float, checkpoint: str | None = None,
              state_lost: str | None = None) -> list[DispatchDecision]:
        """The run begins (or resumes from ``checkpoint``): announce the permit mode, then draw and start what fits.
        ``state_lost`` names a problem that kept the checkpoint's dispatch state from being read."""
        self._tick(now)
        if self.active_lease:
            how = "start as permits free" if self.rolling else (
                "start together (its workflow sets no runs_rollouts_on_lease)")
            self._infos.append(ROLLOUT_NOTICE.format(how=how))
        self._events.append({"event": "start", "start": self.start_number, "batch": self.step,
                             "checkpoint": checkpoint, "state_lost": state_lost, "loaded": checkpoint})
        return self._dispatch(now)

    def on_block_entered(self, key: Key, index: int, *, now: float) -> list[GrantPermit]:
        """Member ``index`` of ``key`` entered its lease block: a ``GrantPermit`` now, or later from another call."""
        self._tick(now)
        lease = self._lease(key, "on_block_entered")
        grant = self.permits.enter_block(lease, index, now=now)
        return self._granted([grant], now) if grant is not None else []

    def on_group_entered(self, key: Key, size: int, *, now: float) -> list[GrantPermit]:
        """Members ``0..size-1`` of ``key`` entered their lease blocks at once, in index order: the grants that
        ``on_block_entered`` would answer for each in turn, in one call."""
        self._tick(now)
        lease = self._lease(key, "on_group_entered")
        grants = self.permits.enter_blocks(lease, size, now=now)
        return self._granted(grants, now) if grants else []

    def on_block_cancelled(self, key: Key, index: int, *, now: float) -> list[DispatchDecision]:
        """A member's wait for its permit was cancelled: its index never ran."""
        self._tick(now)
        self.permits.cancel_block(self._lease(key, "on_block_cancelled"), index)
        return []

    def on_block_exited(self, key: Key, index: int, *, now: float,
                        teardowns_pending: bool = False) -> list[DispatchDecision]:
        """Member ``index`` of ``key`` ended. With teardowns still running, its permit waits for
        ``on_teardowns_done`` or ``teardown_wait_s`` (a deadline), whichever comes first."""
        self._tick(now)
        lease = self._lease(key, "on_block_exited")
        if teardowns_pending and index in lease.holding_blocks and self.active_lease:
            self.teardowns.setdefault(key, {})[index] = now + self.config.teardown_wait_s
            return []
        return self._exit_block(lease, index, now)

    def on_teardowns_done(self, key: Key, index: int, *, now: float) -> list[DispatchDecision]:
        self._tick(now)
        if not teardown_waits.end(self.teardowns, key, index):
            return []
        return self._exit_block(self._lease(key, "on_teardowns_done"), index, now)

    def next_deadline(self) -> float | None:
        """The earliest teardown deadline, or None."""
        return teardown_waits.next_deadline(self.teardowns)

    def on_deadline(self, *, now: float) -> list[DispatchDecision]:
        """Return the permits whose teardowns outlasted their wait, with a warning each."""
        self._tick(now)
        decisions: list[DispatchDecision] = []
        for key, index in teardown_waits.overdue(self.teardowns, now):
            draw, lease = self.running[key]
            self._warnings.append(teardown_waits.overdue_warning(index, draw.task_id, self.config.teardown_wait_s))
            decisions += self._exit_block(lease, index, now)
        return decisions

    def on_group_finished(self, key: Key, output: GroupOutput | None, *, now: float) -> list[DispatchDecision]:
        """The group's workflow returned ``output`` (None: it raised). Settle, admit, release its lease."""
        self._tick(now)
        if key not in self.running:
            raise RuntimeError(f"on_group_finished: group {key} is not running")
        draw, lease = self.running.pop(key)
        self.teardowns.pop(key, None)
        record = group_record(draw, output, self.pool.label_column)
        self.recorder.settle(record)
        granted = self._granted(self.permits.release(lease, now=now), now)
        self.gauges.group_ended(lease, now=now)
        self.mixture.release_label(draw.label)
        queue_settled(self, draw, output, record)
        return granted + self._dispatch(now)

    # ------------------------------------------------------------------------------------------------ steps
    def poll(self, *, now: float) -> list[DispatchDecision]:
        """Start whatever may start now. A runtime calls it after ``take_step``, whose dequeues can free horizon
        places under an admission rule (stale, failed and held groups give theirs back when a step takes them)."""
        self._tick(now)
        return self._dispatch(now)

    def take_step(self, *, now: float) -> TrainStep | None:
        """Dequeue settled groups toward the current step; the ``TrainStep`` once its batch is complete.
        Follow it with ``poll(now=)``: a dequeue may let another group start."""
        self._tick(now)
        return step_assembly.take_step(self)

    def commit_step(self, *, now: float) -> None:
        """The update is done: give the dequeued groups their fates and feed the statistics (in draw order)."""
        self._tick(now)
        step_assembly.commit_step(self)

    @property
    def next_version(self) -> int:
        """The policy version the next step trains from: one more than ``version`` once a step that updates the
        policy is taken; a step that trains no group, or only groups whose advantages are all 0 (under a loss that
        is zero there), takes no optimizer update, so the version stays."""
        return step_assembly.next_version(self)

    def publish(self, *, now: float) -> list[DispatchDecision]:
        """New weights are live: the version moves on (unless the step trained no group: in-flight groups do not age
        without an update) and the next step begins (or the run is done)."""
        self._tick(now)
        return self._dispatch(now) if step_assembly.publish(self) else []

    # ---------------------------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """The JSON-safe format-2 dispatch state, with the ``exact`` section (docs/run-directory.md)."""
        return dispatch_state.state_dict(self)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Make this freshly built dispatcher equal to the one that wrote ``state`` (an exact restore)."""
        dispatch_state.restore_exact(self, state)

    def is_outstanding(self, key: Key) -> bool:
        """True while draw ``key`` waits for its fate (False once rejected, skipped or given its step's fate)."""
        return key in self.outstanding

    def emit(self, event: dict) -> None:
        """Add ``event`` to the outbox of ``tasks/events.jsonl`` (``take_events``)."""
        self._events.append(event)

    def warn(self, message: str) -> None:
        """Add ``message`` to the outbox of warnings (``take_warnings``)."""
        self._warnings.append(message)

    def warn_once(self, key: str, message: str) -> None:
        """``warn`` with ``message`` the first time ``key`` comes, never again in this run (``said`` holds the keys)."""
        if key not in self.said:
            self.said.add(key)
            self._warnings.append(message)

    # ------------------------------------------------------------------------------------------- outboxes
    def take_events(self) -> list[dict]:
        """Events for ``tasks/events.jsonl`` since the last call (the statistics' and the dispatcher's own)."""
        self._events.extend(self.recorder.take_events())
        events, self._events = self._events, []
        return events

    def take_warnings(self) -> list[str]:
        extra = self.admission.take_warnings() if self.admission is not None else []
        warnings, self._warnings = self._warnings + extra, []
        return warnings

    def take_infos(self) -> list[str]:
        infos, self._infos = self._infos, []
        return infos

    def step_metrics(self, *, now: float) -> dict[str, float]:
        """The metrics of the step just committed (call between ``commit_step`` and ``publish``)."""
        self._tick(now)
        return step_metrics(self, now)

    # --------------------------------------------------------------------------------------------- internals
    def _tick(self, now: float) -> None:
        if now < self.now:
            raise ValueError(f"time went backwards: now={now} after {self.now}")
        self.now = now

    def _lease(self, key: Key, call: str) -> DrawLease:
        if key not in self.running:
            raise RuntimeError(f"{call}: group {key} is not running")
        return self.running[key][1]

    def _configured_in_flight(self) -> int:
        budget = self.config.max_concurrent_rollouts
        if self.config.permit_release == "rollout":
            return budget
        sizes = [row.group_size for row in self.pool.rows] or [1]
        return min(budget, max(1, budget // min(sizes)) * max(sizes))

    def _exit_block(self, lease: DrawLease, index: int, now: float) -> list[DispatchDecision]:
        grants = self.permits.exit_block(lease, index, now=now)
        self.gauges.rollout_ended(now=now)  # every exit is a rollout that ran (a waiting block is cancelled)
        return self._granted(grants, now) + self._dispatch(now)

    def _granted(self, grants: list[GrantPermit], now: float) -> list[GrantPermit]:
        """Count each granted block as a rollout in flight (under either setting) and note the permits held."""
        self.gauges.granted(len(grants), self.permits.held, now=now)
        return grants

    # -- entries
    def threshold(self, entry: str | None) -> float:
        """The success threshold of ``entry`` (1.0 for an unknown one)."""
        info = self.pool.entries.get(entry) if entry is not None else None
        return info.success_threshold if info is not None else 1.0

    # -- the choose loop
    def _dispatch(self, now: float) -> list[DispatchDecision]:
        """Start every group that may start now; set the blocked reason for the time until the next change."""
        decisions: list[DispatchDecision] = []
        if self.phase is StepPhase.FINISHED:
            self.gauges.blocked.set("plan", now=now)
            return decisions
        while True:
            if self.pending is not None:
                if not self.pending.lease.startable:
                    self.gauges.blocked.set("permits", now=now)
                    return decisions
                started = self._finish_pending(now)
                if started is None:
                    self.gauges.blocked.set("sampler", now=now)
                    return decisions
                decisions.append(started)
                continue
            room = self.horizon.room(self.step)
            if room is None and self._start_waiting(now, decisions):
                continue
            held = self.mixture.held(self.config.max_staleness)
            reason = self.horizon.room(self.step, held=held) if held else room  # held 0: the same question
            if reason is not None:
                self.gauges.blocked.set(reason, now=now)
                return decisions
            if not self.mixture.any_room():
                self.gauges.blocked.set("labels", now=now)
                return decisions
            if self.samplers.run_adaptive:
                self._reserve(PendingStart(PendingKind.ASK, self._new_lease(self._largest_group())), now, decisions)
                continue
            answer = draw_static(self)
            if isinstance(answer, Token):
                self._start_token(answer, now, decisions)
            elif answer is not None:
                self._start_draw(answer, now, decisions)

    def _start_waiting(self, now: float, decisions: list[DispatchDecision]) -> bool:
        """Start the waiting draw or token with the smallest ticket whose label/entry can start, and for which the
        horizon has room (the places held for its labels released for it); True if one did. The caller has found
        that the horizon has room with no places held."""
        k = self.config.max_staleness
        waiting = self.mixture.pop_next(
            lambda labels: self.horizon.room(self.step, held=self.mixture.held(k, release=labels)) is None)
        if waiting is None:
            return False
        if isinstance(waiting, Token):
            self._start_token(waiting, now, decisions)
        else:
            self._start_draw(waiting, now, decisions)
        return True

    def _start_draw(self, draw: BoundDraw, now: float, decisions: list[DispatchDecision]) -> None:
        self.mixture.take_label(draw.label)
        self._reserve(PendingStart(PendingKind.DRAW, self._new_lease(draw.group_size, draw), draw=draw), now,
                      decisions)

    def _start_token(self, token: Token, now: float, decisions: list[DispatchDecision]) -> None:
        lease = self._new_lease(self.pool.entries[token.entry].group_size)
        self._reserve(PendingStart(PendingKind.TOKEN, lease, token=token), now, decisions)

    def _reserve(self, pending: PendingStart, now: float, decisions: list[DispatchDecision]) -> None:
        self.horizon.reserved()
        self.pending = pending
        decisions += self._granted(self.permits.reserve(pending.lease, now=now), now)

    def _finish_pending(self, now: float) -> StartGroup | None:
        """The pending start holds its permits: bind an adaptive decision if needed, then start the group."""
        pending = self.pending
        assert pending is not None
        draw = pending.draw
        if draw is None:
            size = pending.lease.size
            draw = adaptive_draw(self, pending)
            if draw is None:
                self.permits.release(pending.lease, now=now)
                self.horizon.released()
                if pending.token is not None:
                    self.mixture.requeue_token(pending.token)
                self.pending = None
                return None
            if draw.group_size != size:  # a smaller group gives back the permits it does not use
                self._granted(self.permits.resize(pending.lease, draw.group_size, now=now), now)
        self.pending = None
        draw.started_at = now
        self.running[draw.key] = (draw, pending.lease)
        self.gauges.group_started(now=now)
        return StartGroup(draw.key, draw.task_id, draw.entry, draw.row, draw.group_size, draw.version, draw.position,
                          self.pool[draw.row])

    def bind(self, bound: Bound, position: int) -> BoundDraw:
        """A decision's row becomes draw ``(start, next_seq)`` at ``position``: outstanding, and recorded."""
        return bind(self, bound, position)

    def _new_lease(self, size: int, draw: BoundDraw | None = None) -> DrawLease:
        key = draw.key if draw is not None else (self.start_number, self.next_seq)
        return DrawLease(key, size, rolling=self.rolling, active=self.active_lease,
                         task_id=draw.task_id if draw is not None else "")

    def _largest_group(self) -> int:
        return max(e.group_size for e in self.pool.entries.values())


__all__ = ["DispatchDecision", "Dispatcher", "DispatchConfig", "TEARDOWN_WAIT_S", "StartGroup", "GrantPermit",
           "TrainStep", "StepPhase", "dispatch_config"]
