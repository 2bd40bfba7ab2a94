"""The SimPy runtime: drives the policy layer's dispatcher on simulated time and writes a run directory.

Thin by rule: the dispatch policy is ``platoon.policy``'s; this module feeds it events with ``now=env.now``, carries
out its decisions, re-arms its deadline and writes what it asks to be written. What it owns is the *work*:

- ``StartGroup`` -> a group whose members enter their lease blocks in order (``on_block_entered``);
- ``GrantPermit`` -> a rollout: its outcome is decided now (``platoon.sim.workload``, its task's pass rate now), it
  takes a start slot (``train.max_starting_rollouts``), starts up (shared capacity: ``platoon.sim.startups``), makes
  its first model call (the slot comes back), runs, and ends: ``on_block_exited``, after its background teardown under
  ``permit_release: rollout`` (the dispatcher's 60 s wait is its deadline). A rollout that raises fails its group,
  which cancels its other rollouts; a straggler policy (``train.straggler``) cuts the late ones;
- all members done -> ``on_group_finished(key, GroupOutput)``: verdict ``trained`` when its valid members mix passes
  and failures, else ``uniform``; one datum per valid member (``None`` when a rollout raised);
- the trainer: ``take_step`` at each settle until a step is complete, train ``step_s + per_datum_s x datums``,
  ``commit_step``, log the step's metrics, publish after ``publish_s``, ``publish``.

**Every pending event is a timer record** ``(seq, time, kind, payload)`` pushed on SimPy's queue at its absolute
time (``_Env.at``), never a suspended generator: a checkpoint (taken right after a step's metrics, when every
per-step window is fresh) saves the records, and a restore pushes them back in ``seq`` order, so SimPy processes
same-time events in the same order and the resumed run is the uninterrupted one, event for event. A timer that
is cancelled is dropped from the registry and its SimPy event does nothing when it fires.

Checkpoints, exact resume and the step's ``sim/...`` metrics are in ``platoon.sim.run`` (the run directory side).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from typing import Any

import simpy
from simpy.events import NORMAL

from platoon.config.models import RunConfig
from platoon.policy.assemble import Policy
from platoon.policy.dispatcher import StartGroup, StepPhase
from platoon.policy.outputs import GroupOutput
from platoon.policy.permits import GrantPermit
from platoon.policy.start_limit import SlotGranted, StartLimit, start_timer_s
from platoon.policy.stats import MemberResult
from platoon.sim.metrics import Window
from platoon.sim.records import (
    DONE,
    RUN,
    SLOT,
    STARTUP,
    TEARDOWN,
    WAIT,
    SimGroup,
    SimMember,
    load_start_limit,
    start_limit_state,
)
from platoon.sim.setup import SimTasks
from platoon.sim.startups import StartupServer


class SimulationStalled(RuntimeError):
    """The simulated run cannot go on: no event is left and the plan is not done."""


class _Env(simpy.Environment):
    """SimPy's environment with one addition: an event at an absolute time (``now + delay`` can round, and a
    restored timer must fire at the very time it was set for)."""

    def at(self, t: float, callback: Callable[[simpy.Event], None]) -> None:
        event = simpy.Event(self)
        event._ok = True
        event._value = None
        event.callbacks.append(callback)
        heapq.heappush(self._queue, (t, NORMAL, next(self._eid), event))


class SimRuntime:
    """One simulated run's event loop (see the module docstring). ``on_step(step, now)`` is called after each step's
    metrics; ``write_step(step, now, trained)`` and ``finish(now)`` are the run directory's hooks."""

    def __init__(self, cfg: RunConfig, tasks: SimTasks, policy: Policy, *, now: float = 0.0) -> None:
        self.cfg, self.tasks, self.policy = cfg, tasks, policy
        self.d = policy.dispatcher
        self.learner = tasks.learner
        self.env = _Env(initial_time=now)
        self.seed = cfg.train.seed
        self.active = cfg.train.permit_release == "rollout"
        self.wait_s = self.d.config.teardown_wait_s
        self.trainer_cfg = cfg.sim.trainer
        self.thresholds = [self.d.pool.entries[e.name].success_threshold if e.name in self.d.pool.entries else 1.0
                           for e in cfg.environments]
        self.model_calls = [s.rollout.model_calls for s in tasks.sims]
        strag = cfg.train.straggler
        self.straggler_s = strag.timeout_s
        self.quorum = strag.quorum
        limit = cfg.train.max_starting_rollouts
        self.start_limit = (StartLimit(limit, timer_s=start_timer_s(cfg.train.workflow_config
                                                                     .worker_startup_budget_seconds))
                            if limit is not None else None)
        capacity = cfg.sim.rollout.startup_capacity
        self.startups = StartupServer(capacity) if capacity is not None else None
        self.groups: dict[tuple[int, int], SimGroup] = {}
        self.timers: dict[int, tuple[float, str, tuple]] = {}
        self.seq = 0
        self.version = self.d.version
        self.trainer = "wait"
        self.step = None  # the TrainStep being trained
        self.armed: dict[str, tuple[int, float] | None] = {"dl": None, "slot": None, "ps": None}
        self.window = Window(now)
        self.done = False
        self.begun = False
        self._stop = simpy.Event(self.env)
        self.on_step: Callable[[int, float], None] | None = None
        self.write_step: Callable[[Any, float], None] | None = None
        self.finish: Callable[[float], None] | None = None
        self._handlers = {"up": self._t_up, "ps": self._t_ps, "run": self._t_run, "err": self._t_err,
                          "td": self._t_td, "mdone": self._t_mdone, "cut": self._t_cut, "dl": self._t_dl,
                          "slot": self._t_slot, "train": self._t_train, "pub": self._t_pub}

    @property
    def now(self) -> float:
        return self.env._now  # the simulated clock (SimPy's own field: its property is one call more per read)

    # ------------------------------------------------------------------------------------------------ timers
    def _at(self, t: float, kind: str, payload: tuple = ()) -> int:
        self.seq += 1
        seq = self.seq
        self.timers[seq] = (t, kind, payload)
        self.env.at(t, lambda _ev, s=seq: self._fire(s))
        return seq

    def _push(self, seq: int, t: float, kind: str, payload: tuple) -> None:
        """Re-arm a saved timer under its own seq (restore)."""
        self.timers[seq] = (t, kind, payload)
        self.env.at(t, lambda _ev, s=seq: self._fire(s))

    def _cancel(self, seq: int | None) -> None:
        if seq is not None:
            self.timers.pop(seq, None)

    def _fire(self, seq: int) -> None:
        entry = self.timers.pop(seq, None)
        if entry is not None:
            self._handlers[entry[1]](*entry[2])

    # -------------------------------------------------------------------------------------------- decisions
    def _carry(self, decisions: list) -> None:
        """Carry out the dispatcher's (and the start limit's) decisions, in order."""
        if not decisions:
            return
        queue = deque(decisions)
        while queue:
            dec = queue.popleft()
            if isinstance(dec, GrantPermit):
                self._granted(dec)
            elif isinstance(dec, StartGroup):
                queue.extend(self._start_group(dec))
            elif isinstance(dec, SlotGranted):
                s, q, i = dec.key
                g = self.groups[(s, q)]
                self._start_up(g, i, g.members[i])
            else:
                raise TypeError(f"the simulator cannot carry out {dec!r}")

    def _start_group(self, dec: StartGroup) -> list:
        row = dec.row_index
        entry = self.tasks.row_entry[row]
        g = SimGroup(dec.key, row, dec.task_id, entry, dec.group_size, self.now,
                     [SimMember() for _ in range(dec.group_size)], dec.group_size)
        self.groups[dec.key] = g
        out: list = []
        for i in range(dec.group_size):
            out += self.d.on_block_entered(dec.key, i, now=self.now)
        return out

    def _draws(self, g: SimGroup):
        if g.draws is None:
            g.draws = self.tasks.workloads[g.entry].group(self.seed, g.key, g.size, self.learner.length[g.row])
        return g.draws

    def _granted(self, dec: GrantPermit) -> None:
        g = self.groups.get(dec.key)
        if g is None or g.members[dec.index].phase != WAIT:
            raise RuntimeError(f"GrantPermit for rollout {dec.index} of group {dec.key}, which does not wait")
        m = g.members[dec.index]
        now = self.now
        m.granted, m.version, m.busy = now, self.version, True
        self.window.busy(+1, now)
        m.out = self._draws(g).member(dec.index, self.learner.pass_rate(g.row))
        m.phase = SLOT
        if self.start_limit is None:
            self._start_up(g, dec.index, m)
            return
        if self.start_limit.request((*g.key, dec.index), now=now):
            self._start_up(g, dec.index, m)
        self._arm_slot()

    def _start_up(self, g: SimGroup, i: int, m: SimMember) -> None:
        now = self.now
        m.phase, m.started, m.ran = STARTUP, now, True
        if g.quorum_t is not None:
            self._arm_cut(g, i, m)
        work = m.out.first_call_s
        if work <= 0:
            self._first_call(g, i, m)
        elif self.startups is not None:
            self.startups.add((*g.key, i), work, now=now)
            self._arm_ps()
        else:
            m.timer = self._at(now + work, "up", (*g.key, i))

    def _first_call(self, g: SimGroup, i: int, m: SimMember) -> None:
        now = self.now
        m.phase = RUN
        if self.start_limit is not None:
            self._carry(self.start_limit.release((*g.key, i), "first_call", now=now))
            self._arm_slot()
        o = m.out
        if o.error_at_s is not None:
            m.timer = self._at(now + o.error_at_s, "err", (*g.key, i))
        else:
            m.timer = self._at(now + o.run_s, "run", (*g.key, i))

    # -------------------------------------------------------------------------------------------- rollouts
    def _t_up(self, s: int, q: int, i: int) -> None:
        g = self.groups[(s, q)]
        g.members[i].timer = None
        self._first_call(g, i, g.members[i])

    def _t_ps(self) -> None:
        self.armed["ps"] = None
        for s, q, i in self.startups.pop_finished(now=self.now):
            g = self.groups[(s, q)]
            self._first_call(g, i, g.members[i])
        self._arm_ps()

    def _t_run(self, s: int, q: int, i: int) -> None:
        self._rollout_end(s, q, i, raised=False)

    def _t_err(self, s: int, q: int, i: int) -> None:
        self._rollout_end(s, q, i, raised=True)

    def _rollout_end(self, s: int, q: int, i: int, *, raised: bool) -> None:
        g = self.groups[(s, q)]
        m = g.members[i]
        now = self.now
        m.timer = None
        if m.cut is not None:
            self._cancel(m.cut)
            m.cut = None
        self.window.rollouts += 1
        if self.start_limit is not None:
            self._carry(self.start_limit.release((s, q, i), "end", now=now))
            self._arm_slot()
        o = m.out
        if raised:
            m.result = self._result(g, m, outcome="error", disposition="error")
            g.failed = True
            self._exit(g, i, m)
            self._fail_group(g)
            return
        m.result = self._result(g, m, outcome="pass" if o.passed else "fail", disposition="completed")
        m.phase = TEARDOWN  # ended: no longer a straggler the quorum below could cut
        g.finished += 1
        if self.straggler_s is not None:
            self._check_quorum(g)
        if self.active and o.teardown_s > 0:
            self._carry(self.d.on_block_exited(g.key, i, now=now, teardowns_pending=True))
            self._arm_deadline()
            if o.teardown_s < self.wait_s:
                m.timer = self._at(now + o.teardown_s, "td", (s, q, i))
            else:
                m.timer = self._at(now + self.wait_s, "mdone", (s, q, i))
        else:
            self._exit(g, i, m)

    def _result(self, g: SimGroup, m: SimMember, *, outcome: str, disposition: str) -> MemberResult:
        o = m.out
        ok = disposition == "completed" and o.valid
        reward = (1.0 if o.passed else 0.0) if ok else None
        return MemberResult(reward=reward, scored=reward, valid=ok, outcome=outcome if ok or outcome == "error"
                            else ("invalid" if disposition == "completed" else "none"),
                            disposition=disposition, steps=self.model_calls[g.entry],
                            seconds=self.now - m.started if m.started is not None else 0.0,
                            versions={"main": (m.version, m.version)})

    def _t_td(self, s: int, q: int, i: int) -> None:
        g = self.groups[(s, q)]
        m = g.members[i]
        m.timer = None
        self._carry(self.d.on_teardowns_done(g.key, i, now=self.now))
        self._done(g, i, m)

    def _t_mdone(self, s: int, q: int, i: int) -> None:
        """The teardown outlived the permit's wait: the dispatcher's deadline gives the permit back (and warns)."""
        g = self.groups[(s, q)]
        m = g.members[i]
        m.timer = None
        due = self.d.next_deadline()
        if due is not None and due <= self.now:
            self._carry(self.d.on_deadline(now=self.now))
        self._done(g, i, m)

    def _exit(self, g: SimGroup, i: int, m: SimMember) -> None:
        """Member ``i``'s block exits now (its permit comes back under rollout); it is done."""
        self._carry(self.d.on_block_exited(g.key, i, now=self.now))
        self._done(g, i, m)

    def _done(self, g: SimGroup, i: int, m: SimMember) -> None:
        m.phase = DONE
        if m.busy:
            m.busy = False
            self.window.busy(-1, self.now)
        g.pending -= 1
        if g.pending == 0:
            self._finish_group(g)

    def _cancel_member(self, g: SimGroup, i: int, m: SimMember, disposition: str) -> None:
        """Cancel member ``i`` (its group failed, or the straggler policy cut it); a waiting one never ran."""
        now = self.now
        self._cancel(m.cut)
        m.cut = None
        key3 = (*g.key, i)
        if m.phase == WAIT:
            self._carry(self.d.on_block_cancelled(g.key, i, now=now))
            m.result = MemberResult(outcome="none", disposition=disposition)
            self._done(g, i, m)
            return
        if m.phase == TEARDOWN:  # a cancellation ends the wait, not the teardown; the rollout keeps its outcome
            self._cancel(m.timer)
            m.timer = None
            self._carry(self.d.on_teardowns_done(g.key, i, now=now))
            self._done(g, i, m)
            return
        if m.phase == SLOT and self.start_limit is not None:
            self._carry(self.start_limit.cancel(key3, now=now))
        elif m.phase in (STARTUP, RUN):
            if m.phase == STARTUP and self.startups is not None and self.startups.cancel(key3, now=now):
                self._arm_ps()
            self._cancel(m.timer)
            m.timer = None
            if self.start_limit is not None:
                self._carry(self.start_limit.release(key3, "cancelled", now=now))
            self.window.wasted["cancelled"] += 1
        self._arm_slot()
        m.result = MemberResult(outcome="none", disposition=disposition, steps=None,
                                seconds=now - m.started if m.started is not None else None,
                                versions={"main": (m.version, m.version)} if m.granted is not None else {})
        self._exit(g, i, m)

    def _fail_group(self, g: SimGroup) -> None:
        """A rollout raised: the group cancels its other rollouts (those waiting for a permit first, so that no
        permit a cancelled one gives back is handed to them) and fails once they have unwound."""
        order = sorted(range(g.size), key=lambda j: g.members[j].phase != WAIT)
        for j in order:
            m = g.members[j]
            if m.phase != DONE and g.key in self.groups:
                self._cancel_member(g, j, m, "cancelled")

    # ------------------------------------------------------------------------------------------- stragglers
    def _check_quorum(self, g: SimGroup) -> None:
        if self.straggler_s is None or g.quorum_t is not None:
            return
        quorum = self.quorum or max(g.size - 1, 1)
        if g.finished < quorum or g.pending <= 0:
            return
        g.quorum_t = self.now
        for i, m in enumerate(g.members):
            if m.phase in (STARTUP, RUN):
                self._arm_cut(g, i, m)

    def _arm_cut(self, g: SimGroup, i: int, m: SimMember) -> None:
        """Member ``i``'s straggler deadline: ``quorum time + timeout + its start delay - the least start delay``
        (all at once when every member started without waiting: semantics 4.7)."""
        started = [x.started - g.created for x in g.members if x.started is not None]
        offset = (m.started - g.created) - min(started)
        m.cut = self._at(g.quorum_t + self.straggler_s + offset, "cut", (*g.key, i))

    def _t_cut(self, s: int, q: int, i: int) -> None:
        g = self.groups[(s, q)]
        m = g.members[i]
        m.cut = None
        if m.phase in (STARTUP, RUN):
            self._cancel_member(g, i, m, "straggler_killed")

    # --------------------------------------------------------------------------------------------- groups
    def _finish_group(self, g: SimGroup) -> None:
        del self.groups[g.key]
        ran = sum(1 for m in g.members if m.ran and m.result is not None and m.result.disposition != "cancelled"
                  and m.result.disposition != "straggler_killed")
        if g.failed:
            output = None
            self.window.wasted["failed"] += ran
        else:
            members = tuple(m.result for m in g.members)
            threshold = self.thresholds[g.entry]
            valid = [r for r in members if r.valid]
            passes = sum(1 for r in valid if r.passes(threshold))
            verdict = "trained" if 0 < passes < len(valid) else "uniform"
            datums = tuple((i, r.reward) for i, r in enumerate(members) if r.valid)
            output = GroupOutput(verdict, members, datums)
        decisions = self.d.on_group_finished(g.key, output, now=self.now)
        if output is not None and g.key not in self.d.outstanding:
            self.window.wasted["rejected"] += ran
        self._carry(decisions)
        self._try_step()

    # -------------------------------------------------------------------------------------------- trainer
    def _try_step(self) -> None:
        if self.trainer != "wait" or self.d.phase is not StepPhase.ASSEMBLING:
            return
        step = self.d.take_step(now=self.now)
        self._carry(self.d.poll(now=self.now))  # a dequeue can free a horizon place under an admission rule
        if step is None:
            return
        self.window.trainer_busy(self.now)
        self.trainer, self.step = "train", step
        t = self.trainer_cfg
        self._at(self.now + t.step_s + t.per_datum_s * len(step.datums), "train")

    def _t_train(self) -> None:
        now = self.now
        step, self.step = self.step, None
        self.d.commit_step(now=now)
        rows = [self.d.pool.first_index(g.task_id) for g in step.groups
                if g.output is not None and g.output.verdict == "trained"]
        self.learner.trained([r for r in rows if r is not None])
        self.window.wasted["stale"] += sum(len(g.record.members) for g in step.stale)
        self.trainer = "publish"
        self._at(now + self.trainer_cfg.publish_s, "pub")
        if self.write_step is not None:
            self.write_step(step, now)
        if self.on_step is not None:
            self.on_step(step.step, now)

    def _t_pub(self) -> None:
        self.learner.publish()
        self.version += 1
        self._carry(self.d.publish(now=self.now))
        if self.d.phase is StepPhase.FINISHED:
            self.trainer = "done"
            self.done = True
            if self.finish is not None:
                self.finish(self.now)
            self._stop.succeed()
            return
        self.trainer = "wait"
        self.window.trainer_idle(self.now)
        self._try_step()

    # ------------------------------------------------------------------------------------------ deadlines
    def _arm(self, name: str, due: float | None, kind: str) -> None:
        armed = self.armed[name]
        if due is None or (armed is not None and armed[1] <= due and armed[0] in self.timers):
            return
        if armed is not None:
            self._cancel(armed[0])
        self.armed[name] = (self._at(due, kind), due)

    def _arm_deadline(self) -> None:
        self._arm("dl", self.d.next_deadline(), "dl")

    def _arm_slot(self) -> None:
        if self.start_limit is not None:
            self._arm("slot", self.start_limit.next_deadline(), "slot")

    def _arm_ps(self) -> None:
        armed = self.armed["ps"]
        if armed is not None:
            self._cancel(armed[0])
            self.armed["ps"] = None
        due = self.startups.next_finish()
        if due is not None:
            self.armed["ps"] = (self._at(due, "ps"), due)

    def _t_dl(self) -> None:
        self.armed["dl"] = None
        self._carry(self.d.on_deadline(now=self.now))
        self._arm_deadline()

    def _t_slot(self) -> None:
        self.armed["slot"] = None
        self._carry(self.start_limit.on_deadline(now=self.now))
        self._arm_slot()

    # ------------------------------------------------------------------------------------------------ run
    def begin(self) -> None:
        """A new run: the dispatcher starts and the trainer waits for its first step."""
        self.begun = True
        self._carry(self.d.start(now=self.now))
        self._try_step()

    def run(self, until: float | None = None) -> bool:
        """Run until the plan is done (True), or until simulated time ``until`` (False: stopped there)."""
        if self.done or (until is not None and until <= self.now):
            return self.done
        try:
            self.env.run(until=self._stop if until is None else until)
        except RuntimeError as exc:
            if "No scheduled events left" not in str(exc):
                raise
            raise SimulationStalled(
                f"the simulated run stalled at step {self.d.step} (t={self.now:.1f}s): nothing is running and "
                f"no step can complete ({len(self.groups)} groups in flight, trainer {self.trainer})") from None
        return self.done

    # ------------------------------------------------------------------------------------------- state
    def state_dict(self) -> dict:
        """The runtime's own state (``sim-<step>.json``): timers, groups in flight, trainer, learner, servers."""
        return {
            "format": 1,
            "now": self.now,
            "version": self.version,
            "seq": self.seq,
            "timers": [[s, t, k, list(p)] for s, (t, k, p) in sorted(self.timers.items())],
            "armed": {k: (None if v is None else [v[0], v[1]]) for k, v in self.armed.items()},
            "groups": [g.to_json() for g in self.groups.values()],
            "trainer": self.trainer,
            "begun": self.begun,
            "learner": self.learner.state_dict(),
            "startups": None if self.startups is None else self.startups.state_dict(),
            "start_limit": None if self.start_limit is None else start_limit_state(self.start_limit),
            "window": self.window.state_dict(),
        }

    def load_state_dict(self, s: dict) -> None:
        """Restore what ``state_dict`` saved into this fresh runtime, whose environment starts at ``s["now"]``."""
        if s.get("format") != 1:
            raise ValueError(f"simulator state format {s.get('format')!r} is not 1")
        self.version, self.seq, self.trainer, self.begun = s["version"], s["seq"], s["trainer"], s["begun"]
        self.armed = {k: (None if v is None else (v[0], v[1])) for k, v in s["armed"].items()}
        self.groups = {}
        for gj in s["groups"]:
            g = SimGroup.from_json(gj)
            self.groups[g.key] = g
        self.learner.load_state_dict(s["learner"])
        if self.startups is not None and s["startups"] is not None:
            self.startups.load_state_dict(s["startups"])
        if self.start_limit is not None and s["start_limit"] is not None:
            load_start_limit(self.start_limit, s["start_limit"])
        self.window.load_state_dict(s["window"])
        for seq, t, kind, payload in s["timers"]:
            self._push(seq, t, kind, tuple(payload))


__all__ = ["SimRuntime", "SimulationStalled"]
