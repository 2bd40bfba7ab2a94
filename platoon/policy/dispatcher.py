"""The dispatcher: when each group starts, on which permits, and which settled groups a step trains.

This is the heart of the policy layer; the driver (``platoon.policy.driver``) holds it for both runtimes. It is
sans-I/O: every handler takes ``now=`` and returns decisions (``StartGroup``, ``GrantPermit``); the trainer asks
``take_step(now=)`` for a ``TrainStep``. Rules it keeps (docs/dispatch.md), with the two ideas it leans on in
modules of their own:

- **Drawing.** A static run sampler decides position ``n`` as soon as a group may start (its draw waits for permits);
  an adaptive one (and an adaptive entry's *token*) is asked only once the permits are held, among the tasks whose
  label has room. One start is pending at a time and nothing overtakes it: permits are FIFO.
- **The horizon** (``platoon.policy.horizon``): the plan and ``max_staleness`` bound what may start; a step is
  complete at ``B`` groups (or, under a rule, ``B`` admitted or the cap counted); the stale filter at dequeue.
- **The mixture** (``platoon.policy.mixture``): labels at their limit, and the draws and tokens waiting for room.
- **Admission** (rule mode). A rejected group gets its fate at settle, with the outstanding draw removed in the same
  call; what it does to the horizon is the horizon's.

State transitions of the step cycle: ASSEMBLING --take_step--> TRAINING --commit_step--> COMMITTED --publish-->
ASSEMBLING (or FINISHED after the last step). A call in the wrong phase raises, naming the call and the phase.
Its state is written and read by ``platoon.policy.dispatch_state`` (``state_dict``/``load_state_dict``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from platoon.policy import dispatch_state
from platoon.policy.admission import AdmissionSet, carries_datums, step_cap
from platoon.policy.dispatch_metrics import (
    DispatchGauges,
    StaleWatch,
    batch_kind_metrics,
    censoring_metrics,
    short_step_warning,
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
from platoon.policy.horizon import Horizon
from platoon.policy.mixture import Mixture
from platoon.policy.outputs import GroupOutput, Key, SettledGroup, SettledKind, TrainStep, draw_order
from platoon.policy.permits import DrawLease, GrantPermit, PermitPool
from platoon.policy.pool import TaskPool, TaskRow
from platoon.policy.recorder import StatsRecorder
from platoon.policy.samplers.base import TaskStatsView
from platoon.policy.samplers.runtime import Bound, SamplerSet, Token
from platoon.policy.stats import GroupRecord
from platoon.policy.task_table import task_metrics

ROLLOUT_NOTICE = (
    "Each rollout returns its permit as it ends (train.permit_release: rollout); a group's rollouts {how}"
)


_TRANSITIONS = {
    ("take_step", StepPhase.ASSEMBLING): StepPhase.TRAINING,
    ("commit_step", StepPhase.TRAINING): StepPhase.COMMITTED,
    ("publish", StepPhase.COMMITTED): StepPhase.ASSEMBLING,
}


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
        waits = self.teardowns.get(key, {})
        if waits.pop(index, None) is None:
            return []
        if not waits:
            self.teardowns.pop(key, None)
        return self._exit_block(self._lease(key, "on_teardowns_done"), index, now)

    def next_deadline(self) -> float | None:
        """The earliest teardown deadline, or None."""
        if not self.teardowns:
            return None
        return min((t for waits in self.teardowns.values() for t in waits.values()), default=None)

    def on_deadline(self, *, now: float) -> list[DispatchDecision]:
        """Return the permits whose teardowns outlasted their wait, with a warning each."""
        self._tick(now)
        decisions: list[DispatchDecision] = []
        for key in list(self.teardowns):
            for index, due in list(self.teardowns[key].items()):
                if due <= now:
                    draw, lease = self.running[key]
                    self._warnings.append(
                        f"Rollout {index} of task {draw.task_id} returns its permit with its teardowns still "
                        f"running after {self.config.teardown_wait_s:g}s")
                    del self.teardowns[key][index]
                    decisions += self._exit_block(lease, index, now)
            if not self.teardowns[key]:
                del self.teardowns[key]
        return decisions

    def on_group_finished(self, key: Key, output: GroupOutput | None, *, now: float) -> list[DispatchDecision]:
        """The group's workflow returned ``output`` (None: it raised). Settle, admit, release its lease."""
        self._tick(now)
        if key not in self.running:
            raise RuntimeError(f"on_group_finished: group {key} is not running")
        draw, lease = self.running.pop(key)
        self.teardowns.pop(key, None)
        record = self._record(draw, output)
        self.recorder.settle(record)
        granted = self._granted(self.permits.release(lease, now=now), now)
        self.gauges.group_ended(lease, now=now)
        self.mixture.release_label(draw.label)
        item = SettledGroup(draw.key, draw.task_id, draw.entry, draw.position, output, record,
                            kind=SettledKind.FAILED if output is None else SettledKind.ADMITTED)
        if self.admission is not None:
            item = self._admit(item, draw)
        if item is not None:
            self.queue.append(item)
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
        self._expect("take_step")
        while self.queue and not self.horizon.step_complete():
            self._dequeue(self.queue.popleft())
        if not self.horizon.step_complete():
            return None
        self.phase = _TRANSITIONS["take_step", self.phase]
        by_kind: dict[str, list[SettledGroup]] = {"admitted": [], "stale": [], "failed": [], "marker": []}
        for item in self.step_items:
            by_kind[item.kind].append(item)
        admitted = draw_order(by_kind["admitted"])
        return TrainStep(self.step, self.version, admitted, draw_order(by_kind["stale"]),
                         draw_order(by_kind["failed"]), draw_order(by_kind["marker"]),
                         self.samplers.loss_weights([g.record for g in admitted]))

    def commit_step(self, *, now: float) -> None:
        """The update is done: give the dequeued groups their fates and feed the statistics (in draw order)."""
        self._tick(now)
        self._expect("commit_step")
        self.phase = _TRANSITIONS["commit_step", self.phase]
        consumed, stale = 0, 0
        for item in sorted(self.step_items, key=lambda g: g.key):
            if item.kind == "marker":
                continue
            fate = {"admitted": "consumed", "stale": "stale", "failed": "failed"}[item.kind]
            self.recorder.fate(*item.key, fate, task_id=item.task_id)
            self.outstanding.pop(item.key, None)
            consumed += 1
            stale += item.kind == "stale"
            if self.admission is not None:
                self.admission.note(item.kind, label=item.entry, reason=item.reason,
                                    informative=item.record.verdict == "trained" if item.output is not None else None)
        self.samplers.note_consumed([g.record for g in self.step_items
                                     if g.kind == "admitted" or (g.kind == "marker" and g.output is not None)])
        warning = self.stale_watch.note_step(consumed, stale, self.gauges.last_blocked,
                                             self.config.max_staleness)
        if warning:
            self._warnings.append(warning)
        if self.admission is not None:
            short = short_step_warning(self.step_items, step=self.step, admitted=self.horizon.step_admitted,
                                       counted=self.horizon.step_counted, batch_size=self.config.batch_size,
                                       version=self.version)
            if short is not None:
                self._warn_once(f"{short[0]}_step", short[1])
        self.recorder.flush()

    @property
    def next_version(self) -> int:
        """The policy version the next step trains from: one more than ``version`` once a step that updates the
        policy is taken; a step that trains no group, or only groups whose advantages are all 0 (under a loss that
        is zero there), takes no optimizer update, so the version stays."""
        trains = self.phase in (StepPhase.TRAINING, StepPhase.COMMITTED) and any(
            self._updates(item) for item in self.step_items)
        return self.version + trains

    def _updates(self, item: SettledGroup) -> bool:
        """Whether an item of the step gives the update a nonzero objective (``DispatchConfig``)."""
        if item.kind != SettledKind.ADMITTED or item.output is None:
            return False
        verdict = item.output.verdict
        return verdict == "trained" or (self.config.uniform_groups_update and verdict == "uniform")

    def publish(self, *, now: float) -> list[DispatchDecision]:
        """New weights are live: the version moves on (unless the step trained no group: in-flight groups do not age
        without an update) and the next step begins (or the run is done)."""
        self._tick(now)
        self._expect("publish")
        self.version = self.next_version
        self.step += 1
        self.horizon.published()
        self.step_items = []
        if self.step >= self.config.steps:
            self.phase = StepPhase.FINISHED
            return []
        self.phase = _TRANSITIONS["publish", self.phase]
        return self._dispatch(now)

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
        metrics = self.gauges.read(now=now, groups_in_flight=len(self.running))
        metrics.update(batch_kind_metrics(self.step_items, self.threshold))
        if self.config.straggler_policy:
            metrics.update(censoring_metrics(self.step_items, self.threshold))
        metrics["train/sampler/skipped_slots"] = float(self.skipped_slots)
        self.skipped_slots = 0
        metrics.update(self.mixture.row_metrics(self.skipped_rows))
        self.skipped_rows = {}
        for entry, queue in self.mixture.tokens.items():
            waiting = len(queue) + (self.pending is not None and self.pending.token is not None
                                    and self.pending.token.entry == entry)
            metrics[f"train/sampler/environment/{entry.replace('/', '--')}/tokens"] = float(waiting)
        view = self.recorder.view(self.version)
        metrics.update(self.samplers.metrics(view))
        if not self.recorder.stopped:
            metrics.update(task_metrics(self.recorder.store, self.version))
        if self.admission is not None:
            draws = metrics.get("train/sampler/draws")
            metrics.update(self.admission.metrics(draws=draws))
            metrics["train/admission/counted"] = float(self.horizon.step_counted)
            metrics["train/admission/short"] = float(self.horizon.step_admitted < self.config.batch_size)
        metrics["train/dispatch/groups_in_flight"] = float(len(self.running))
        metrics["train/policy_version"] = float(self.version)
        return metrics

    # --------------------------------------------------------------------------------------------- internals
    def _tick(self, now: float) -> None:
        if now < self.now:
            raise ValueError(f"time went backwards: now={now} after {self.now}")
        self.now = now

    def _expect(self, call: str) -> None:
        """Refuse ``call`` unless the transition table has it leave the current phase."""
        if (call, self.phase) not in _TRANSITIONS:
            needs = " or ".join(p.value for c, p in _TRANSITIONS if c == call)
            raise RuntimeError(f"{call}: the dispatcher is {self.phase.value}, not {needs}")

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
            self._draw_static(now, decisions)

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

    def _draw_static(self, now: float, decisions: list[DispatchDecision]) -> None:
        position = self.next_position
        self.next_position += 1
        answer = self.samplers.static_decision(position)
        if isinstance(answer, Token):
            if not self.mixture.tokens_waiting(answer.entry) and self.mixture.entry_can_start(answer.entry):
                self._start_token(answer, now, decisions)
            elif not self.mixture.park_token(answer):
                self._skip_slot(position, answer.entry, "backlog")
            return
        draw = self.bind(answer, position)
        if self.mixture.has_room(draw.label):
            self._start_draw(draw, now, decisions)
        elif not self.mixture.park_draw(draw):
            self.outstanding.pop(draw.key)
            self.recorder.fate(*draw.key, "skipped", task_id=draw.task_id)
            self.skipped_rows[draw.label] = self.skipped_rows.get(draw.label, 0) + 1
            self._warn_once(f"skip:{draw.label}", f"label {draw.label}'s backlog is full: skipping drawn rows "
                                                  "(counted in train/batch/skipped_rows)")

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
            draw = self._adaptive(pending, now)
            if draw is None:
                self.permits.release(pending.lease, now=now)
                self.horizon.released()
                if pending.token is not None:
                    self.mixture.requeue_token(pending.token)
                self.pending = None
                return None
        self.pending = None
        draw.started_at = now
        self.running[draw.key] = (draw, pending.lease)
        self.gauges.group_started(now=now)
        return StartGroup(draw.key, draw.task_id, draw.entry, draw.row, draw.group_size, draw.version, draw.position,
                          self.pool[draw.row])

    def _adaptive(self, pending: PendingStart, now: float) -> BoundDraw | None:
        entry = pending.token.entry if pending.token is not None else None
        size = pending.lease.size
        room = {}

        def eligible(task_id: str) -> bool:
            row = self.pool.rows[self.pool.first_index(task_id)]
            if row.label not in room:
                room[row.label] = self.mixture.has_room(row.label)
            return room[row.label] and row.group_size <= size

        self.recorder.flush()
        bound = self.samplers.adaptive_decision(entry, eligible=eligible, view=self.recorder.view(self.version),
                                                step=self.step, version=self.version, max_group_size=size,
                                                fallback_slot=pending.token is not None and pending.token.fallback)
        if bound is None:
            return None
        if pending.token is not None:
            position = pending.token.position
        else:
            position = self.next_position
            self.next_position += 1
        draw = self.bind(bound, position)
        pending.lease.key, pending.lease.task_id = draw.key, draw.task_id
        if draw.group_size != size:
            self._granted(self.permits.resize(pending.lease, draw.group_size, now=now), now)
        self.mixture.take_label(draw.label)
        return draw

    def bind(self, bound: Bound, position: int) -> BoundDraw:
        """A decision's row becomes draw ``(start, next_seq)`` at ``position``: outstanding, and recorded."""
        row: TaskRow = bound.row
        key = (self.start_number, self.next_seq)
        self.next_seq += 1
        draw = BoundDraw(key, row.index, row.task_id, row.entry, row.label, position, row.group_size, self.version,
                     bound.sampler, bound.reason, bound.score)
        self.outstanding[key] = draw
        self.recorder.draw(*key, row.task_id, position, version=self.version, sampler=bound.sampler,
                           reason=bound.reason, score=bound.score)
        return draw

    def _new_lease(self, size: int, draw: BoundDraw | None = None) -> DrawLease:
        key = draw.key if draw is not None else (self.start_number, self.next_seq)
        return DrawLease(key, size, rolling=self.rolling, active=self.active_lease,
                         task_id=draw.task_id if draw is not None else "")

    def _largest_group(self) -> int:
        return max(e.group_size for e in self.pool.entries.values())

    def _skip_slot(self, position: int, entry: str, why: str) -> None:
        self.skipped_slots += 1
        self._events.append({"event": "slot_skipped", "start": self.start_number, "position": position,
                             "entry": entry, "why": why})
        self._warn_once(f"slot:{entry}", f"environment {entry}'s token queue is full: skipping its slots")

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self.said:
            self.said.add(key)
            self._warnings.append(message)

    # -- settling and dequeuing
    def _record(self, draw: BoundDraw, output: GroupOutput | None) -> GroupRecord:
        return GroupRecord(
            start=draw.key[0], seq=draw.key[1], task_id=draw.task_id, entry=draw.entry,
            labels={} if draw.label is None else {self.pool.label_column: draw.label},
            harness=None, group_size=draw.group_size, sampler=draw.sampler, reason=draw.reason,
            score=draw.score, position=draw.position, drawn_at={"main": draw.version},
            members=tuple(output.members) if output is not None else (),
            verdict="failed" if output is None else (output.verdict if isinstance(output.verdict, str)
                                                     else "unknown"))

    def _admit(self, item: SettledGroup, draw: BoundDraw) -> SettledGroup | None:
        assert self.admission is not None
        view = TaskStatsView(self.recorder.peek_store(), self.version, live=not self.recorder.stopped)
        verdict, rule = self.admission.decide(item.record if item.output is not None else None, view,
                                              entry=draw.entry)
        if verdict.admit:
            return SettledGroup(item.key, item.task_id, item.entry, item.position, item.output, item.record,
                                SettledKind.ADMITTED, verdict.reason)
        held = not carries_datums(item.output)
        fate = "failed" if item.output is None else "rejected"
        self.recorder.fate(*draw.key, fate, task_id=draw.task_id, rule=rule, admission=verdict.reason)
        self.outstanding.pop(draw.key, None)
        if item.output is not None:
            self.admission.note("rejected", label=draw.entry, reason=verdict.reason,
                                informative=item.record.verdict == "trained")
        else:
            self.admission.note("failed", label=draw.entry, reason=verdict.reason, informative=None)
        emptied = None if item.output is None else GroupOutput(item.output.verdict, item.output.members, ())
        self.horizon.rejected(held=held)
        return SettledGroup(item.key, item.task_id, item.entry, item.position, emptied, item.record, SettledKind.MARKER,
                            verdict.reason, self.step, held)

    def _dequeue(self, item: SettledGroup) -> None:
        kind = item.kind
        if kind == SettledKind.ADMITTED and self.horizon.is_stale(item, version=self.version):
            kind = SettledKind.STALE
        item = SettledGroup(item.key, item.task_id, item.entry, item.position, item.output, item.record, kind,
                            item.reason, item.window, item.held)
        self.horizon.dequeued(item, step=self.step)
        self.step_items.append(item)


__all__ = ["DispatchDecision", "Dispatcher", "DispatchConfig", "TEARDOWN_WAIT_S", "StartGroup", "GrantPermit",
           "TrainStep", "StepPhase", "dispatch_config"]
