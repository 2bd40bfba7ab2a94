"""The SimPy runtime: drives the policy layer's driver on simulated time.

Thin by rule: every rule is ``platoon.policy``'s (the driver: dispatch, start slots, a failing group's cancel order,
straggler deadlines, the step cycle, the group verdict). This module tells the driver what happened, with
``now=``, carries out its decisions, keeps one timer at the driver's ``next_deadline()``, and hands each committed
step to its run directory (``platoon.sim.run``). What it owns is the simulated *work*:

- ``StartGroup`` -> a group whose members enter their lease blocks in order;
- ``GrantPermit`` -> a rollout: its outcome is decided now (``platoon.sim.workload``, its task's pass rate now), it
  asks for a start slot, starts up (shared capacity: ``platoon.sim.startups``), makes its first model call (the
  slot comes back), runs, and ends, after its background teardown under ``permit_release: rollout``. It runs for its
  drawn duration, or, in turns mode, turn by turn: each model call queued at the batching model service
  (``platoon.sim.service``), then its environment step; its time limit (``timeout_s``) is a timer of its own there;
- ``SlotGranted`` -> the member starts up; ``CancelRollout`` -> the member stops where it stands (leaving the
  service's queue);
- all members done -> the group's output (``group_verdict``) to ``on_group_finished``;
- the trainer: an evaluation the schedule has before a step (and after the last) takes ``eval_s``, a step
  ``step_s + per_datum_s x datums`` of work (slowed while the model service runs a batch, ``service_slowdown``),
  its publish ``publish_s``;
- ``trace.json`` (``trace``: the writer ``platoon.sim.run`` attaches): the trainer's and the service's spans, and
  those of the rollouts of the groups the writer ``wants()``, each on its lane (kept in the member's record).

**Every pending event is a timer record** ``(seq, time, kind, payload)`` in a registry, each scheduled on SimPy as
a ``Timeout`` whose callback fires it; a cancelled timer is dropped from the registry and its timeout does nothing.
Handlers read the timer's own time (``now``), never SimPy's clock, so a checkpoint (the registry, taken after a
step's metrics) pushed back in ``seq`` order replays the uninterrupted run event for event, even where
``time - now + now`` rounds.

(About 480 lines, past the ~300 of a pure adapter: the simulated work itself lives here, each member's phases from
permit to teardown and their spans, beside the adapter of the driver. Two parts are mixed in from modules of their
own: turns mode with the model service (``platoon.sim.service``) and the trainer (``platoon.sim.trainer``); the
shared start-up capacity is ``platoon.sim.startups``.)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import simpy

from platoon.config.models import RunConfig
from platoon.policy.assemble import Policy
from platoon.policy.dispatcher import StartGroup
from platoon.policy.driver import StepReport
from platoon.policy.members import CancelRollout
from platoon.policy.outputs import GroupOutput, TrainStep
from platoon.policy.permits import GrantPermit
from platoon.policy.start_limit import SlotGranted
from platoon.policy.stats import MemberResult
from platoon.policy.verdict import DATUM_VERDICTS, group_verdict
from platoon.runs.trace import TraceWriter, rollout_status
from platoon.sim.records import Phase, SimGroup, SimMember, Timer
from platoon.sim.service import ModelService, TurnsMixin
from platoon.sim.setup import SimTasks
from platoon.sim.startups import StartupServer
from platoon.sim.trainer import Trainer, TrainerMixin, Training
from platoon.sim.workload import MemberOutcome


class SimulationStalled(RuntimeError):
    """The simulated run cannot go on: no event is left and the plan is not done."""


class SimRuntime(TurnsMixin, TrainerMixin):
    """One simulated run's event loop (see the module docstring). ``write_step(report, now)`` and ``finish(now)``
    are the run directory's hooks."""

    def __init__(self, cfg: RunConfig, tasks: SimTasks, policy: Policy, *, now: float = 0.0) -> None:
        self.cfg, self.tasks = cfg, tasks
        self.driver = policy.driver
        self.pool = policy.pool
        self.learner = tasks.learner
        self.env = simpy.Environment(initial_time=now)
        self.now = now
        self.seed = cfg.train.seed
        self.active = cfg.train.permit_release == "rollout"
        self.slots = policy.driver.start_limit is not None  # else no start-slot call can answer anything
        self.wait_s = policy.dispatcher.config.teardown_wait_s
        self.trainer_cfg = cfg.sim.trainer
        self.min_successful = cfg.train.workflow_config.min_successful_group_size
        self.model_calls = [s.rollout.model_calls for s in tasks.sims]
        self.timeouts = [s.rollout.timeout_s for s in tasks.sims]
        capacity = cfg.sim.rollout.startup_capacity
        self.startups = StartupServer(capacity) if capacity is not None else None
        turns = any(s.rollout.turns is not None for s in tasks.sims)
        self.service = ModelService(cfg.sim.service) if turns else None
        self.trace: TraceWriter | None = None
        self._trace_state: dict | None = None  # a checkpoint's, for the writer attach_trace gets
        self.groups: dict[tuple[int, int], SimGroup] = {}
        self.timers: dict[int, tuple[float, Timer, tuple]] = {}
        self.seq = 0
        self.version = policy.dispatcher.version
        self.trainer = Trainer.WAITING
        self.trainer_since = now  # when the trainer's current span (eval, train, publish) began
        self.step: TrainStep | None = None
        self.training: Training | None = None  # the step in training: its work left and rate (sim.trainer)
        self.armed: dict[str, tuple[int, float] | None] = {"deadline": None, "startups": None}
        self.done = False
        self.begun = False
        self.rollouts = 0  # permits granted in this process (a benchmark's count; not part of the state)
        self._stop = self.env.event()
        self.write_step: Callable[[StepReport, float], None] | None = None
        self.finish: Callable[[float], None] | None = None
        self._handlers = {Timer.STARTED_UP: self._t_started_up, Timer.STARTUPS_DONE: self._t_startups_done,
                          Timer.ROLLOUT_ENDED: self._t_rollout_ended, Timer.ROLLOUT_RAISED: self._t_rollout_raised,
                          Timer.TEARDOWN_ENDED: self._t_teardown_ended,
                          Timer.TEARDOWN_OUTLASTED: self._t_teardown_outlasted, Timer.DEADLINE: self._t_deadline,
                          Timer.TRAINED: self._t_trained, Timer.PUBLISHED: self._t_published,
                          Timer.EVALUATED: self._t_evaluated, Timer.BATCH_DONE: self._t_batch_done,
                          Timer.SERVICE_FREE: self._t_service_free,
                          Timer.ENV_STEPPED: self._t_env_stepped, Timer.TIMED_OUT: self._t_timed_out}

    def attach_trace(self, writer: TraceWriter) -> None:
        """Write spans to ``writer`` (its lanes and named tracks as the checkpoint this runtime loaded left them)."""
        if self._trace_state is not None:
            writer.load_state_dict(self._trace_state)
        self.trace = writer if writer.stopped is None else None

    # ------------------------------------------------------------------------------------------------ timers
    def _at(self, t: float, kind: Timer, payload: tuple = ()) -> int:
        self.seq += 1
        self._schedule(self.seq, t, kind, payload)
        return self.seq

    def _schedule(self, seq: int, t: float, kind: Timer, payload: tuple) -> None:
        self.timers[seq] = (t, kind, payload)
        delay = t - self.env.now
        # the timeout carries its seq as its value: one bound callback for all, no closure a timer
        self.env.timeout(delay if delay > 0.0 else 0.0, seq).callbacks.append(self._fire)

    def _cancel(self, seq: int | None) -> None:
        if seq is not None:
            self.timers.pop(seq, None)

    def _fire(self, ev: simpy.Timeout) -> None:
        """The timeout of timer ``ev.value`` came: its handler runs at the timer's own time (nothing if cancelled)."""
        entry = self.timers.pop(ev.value, None)
        if entry is None:
            return
        t, kind, payload = entry
        if t > self.now:
            self.now = t
        self._handlers[kind](*payload)
        self._arm_deadline()

    def _arm_deadline(self) -> None:
        """Keep one timer at the driver's next deadline (an earlier one that finds nothing due re-arms)."""
        due = self.driver.next_deadline()
        armed = self.armed["deadline"]
        if due is None or (armed is not None and armed[1] <= due and armed[0] in self.timers):
            return
        if armed is not None:
            self._cancel(armed[0])
        self.armed["deadline"] = (self._at(due, Timer.DEADLINE), due)

    def _t_deadline(self) -> None:
        self.armed["deadline"] = None
        self._carry(self.driver.on_deadline(now=self.now))

    # -------------------------------------------------------------------------------------------- decisions
    def _carry(self, decisions: list) -> None:
        """Carry out the driver's decisions, in order (those they lead to after them)."""
        if not decisions:  # most calls: nothing to carry out
            return
        queue = deque(decisions)
        while queue:
            dec = queue.popleft()
            if isinstance(dec, GrantPermit):
                self._granted(dec)  # what a grant leads to it carries out itself
            elif isinstance(dec, StartGroup):
                queue.extend(self._start_group(dec))
            elif isinstance(dec, SlotGranted):
                s, q, i = dec.key
                self._start_up(self.groups[(s, q)], i)
            elif isinstance(dec, CancelRollout):
                g = self.groups.get(dec.key)
                if g is not None:
                    self._cancel_member(g, dec.index, dec.reason)
            else:
                raise TypeError(f"the simulator cannot carry out {dec!r}")

    def _start_group(self, dec: StartGroup) -> list:
        entry = self.tasks.row_entry[dec.row_index]
        g = SimGroup(dec.key, dec.row_index, dec.task_id, entry, dec.group_size, self.now,
                     [SimMember() for _ in range(dec.group_size)], dec.group_size)
        self.groups[dec.key] = g
        if self.trace is not None and self.trace.wants(self._position(dec.key)):
            for m in g.members:
                m.lane = self.trace.open_lane()
        return self.driver.on_group_entered(dec.key, dec.group_size, now=self.now)

    def _position(self, key: tuple[int, int]) -> int:
        """The draw position of group ``key`` (by which ``trace.group_every`` samples); its seq if not known."""
        draw = self.driver.dispatcher.outstanding.get(key)
        return draw.position if draw is not None else key[1]

    def _span(self, m: SimMember, name: str, start: float, **args) -> None:
        """A span of traced member ``m`` (``m.lane`` set) from ``start`` to now."""
        assert self.trace is not None and m.lane is not None
        self.trace.span(name, m.lane, start, self.now, **args)

    def _granted(self, dec: GrantPermit) -> None:
        g = self.groups.get(dec.key)
        if g is None or g.members[dec.index].phase is not Phase.WAIT:
            raise RuntimeError(f"GrantPermit for rollout {dec.index} of group {dec.key}, which does not wait")
        m = g.members[dec.index]
        m.granted, m.version = self.now, self.version
        self.rollouts += 1
        if m.lane is not None and self.now > g.created:  # no span for a wait of no time
            self._span(m, "permit_wait", g.created)
        if g.draws is None:
            g.draws = self.tasks.workloads[g.entry].group(self.seed, g.key, g.size, self.learner.length[g.row])
        m.out = g.draws.member(dec.index, self.learner.pass_rate(g.row))
        m.phase = Phase.SLOT
        if not self.slots or self.driver.request_slot(g.key, dec.index, now=self.now):
            self._start_up(g, dec.index)

    # -------------------------------------------------------------------------------------------- rollouts
    def _start_up(self, g: SimGroup, i: int) -> None:
        m = g.members[i]
        m.phase, m.started = Phase.STARTUP, self.now
        self.driver.on_member_started(g.key, i, now=self.now, delay_s=self.now - g.created)
        work = m.out.first_call_s
        if work <= 0:
            self._first_call(g, i)
        elif self.startups is not None:
            self.startups.add((*g.key, i), work, now=self.now)
            self._arm_startups()
        else:
            m.timer = self._at(self.now + work, Timer.STARTED_UP, (*g.key, i))

    def _first_call(self, g: SimGroup, i: int) -> None:
        m = g.members[i]
        m.phase = Phase.RUN
        if m.lane is not None and self.now > m.started:  # no span for a start-up of no time
            self._span(m, "startup", m.started)
        if self.slots:
            self._carry(self.driver.release_slot(g.key, i, "first_call", now=self.now))
        o = m.out
        if o.turns:
            limit = self.timeouts[g.entry]
            if limit is not None:
                m.deadline = self._at(self.now + limit, Timer.TIMED_OUT, (*g.key, i))
            self._call(g, i)
        elif o.error_at_s is not None:
            m.timer = self._at(self.now + o.error_at_s, Timer.ROLLOUT_RAISED, (*g.key, i))
        else:
            m.timer = self._at(self.now + o.run_s, Timer.ROLLOUT_ENDED, (*g.key, i))

    def _t_started_up(self, s: int, q: int, i: int) -> None:
        g = self.groups[(s, q)]
        g.members[i].timer = None
        self._first_call(g, i)

    def _t_startups_done(self) -> None:
        self.armed["startups"] = None
        for s, q, i in self.startups.pop_finished(now=self.now):
            self._first_call(self.groups[(s, q)], i)
        self._arm_startups()

    def _arm_startups(self) -> None:
        armed = self.armed["startups"]
        if armed is not None:
            self._cancel(armed[0])
            self.armed["startups"] = None
        due = self.startups.next_finish()
        if due is not None:
            self.armed["startups"] = (self._at(due, Timer.STARTUPS_DONE), due)

    # -------------------------------------------------------------------------------------------- endings
    def _t_rollout_ended(self, s: int, q: int, i: int) -> None:
        g = self.groups[(s, q)]
        g.members[i].timer = None
        self._ended(g, i)

    def _ended(self, g: SimGroup, i: int) -> None:
        """Member ``i``'s rollout ended (``m.out.passed`` says how); its teardown, if any, follows."""
        s, q = g.key
        m = g.members[i]
        if m.deadline is not None:
            self._cancel(m.deadline)
            m.deadline = None
        if self.slots:
            self._carry(self.driver.release_slot(g.key, i, "end", now=self.now))
        m.result = self._result(g, i, outcome="pass" if m.out.passed else "fail", disposition="completed")
        m.phase, m.since = Phase.TEARDOWN, self.now
        if not (self.active and m.out.teardown_s > 0):  # its block exits now: one call for the end and the exit
            self._carry(self.driver.on_member_exited(g.key, i, now=self.now))
            self._done(g, i)
            return
        self._carry(self.driver.on_member_ended(g.key, i, now=self.now))
        if m.phase is not Phase.TEARDOWN:
            return  # the driver's decisions ended it already
        self._carry(self.driver.on_block_exited(g.key, i, now=self.now, teardowns_pending=True))
        if m.out.teardown_s < self.wait_s:
            m.timer = self._at(self.now + m.out.teardown_s, Timer.TEARDOWN_ENDED, (s, q, i))
        else:
            m.timer = self._at(self.now + self.wait_s, Timer.TEARDOWN_OUTLASTED, (s, q, i))

    def _t_rollout_raised(self, s: int, q: int, i: int) -> None:
        g = self.groups[(s, q)]
        g.members[i].timer = None
        self._raised(g, i)

    def _raised(self, g: SimGroup, i: int) -> None:
        """A rollout raised: its group fails, and the driver's decisions cancel the others once it has exited."""
        self._cancel(g.members[i].deadline)
        g.members[i].deadline = None
        self._carry(self.driver.release_slot(g.key, i, "end", now=self.now))
        g.members[i].result = self._result(g, i, outcome="error", disposition="error")
        g.failed = True
        cancels = self.driver.on_member_ended(g.key, i, now=self.now, raised=True)
        self._exit(g, i)
        self._carry(cancels)

    def member_reward(self, g: SimGroup, index: int, out: MemberOutcome) -> float:
        """The reward of a valid member: 1.0 when it passed, else 0.0 (a subclass may grade it)."""
        return 1.0 if out.passed else 0.0

    def _result(self, g: SimGroup, i: int, *, outcome: str, disposition: str) -> MemberResult:
        m = g.members[i]
        ok = disposition == "completed" and m.out.valid
        reward = self.member_reward(g, i, m.out) if ok else None
        return MemberResult.quick(reward=reward, scored=reward, valid=ok, outcome=outcome if ok or outcome == "error"
                                  else "invalid", disposition=disposition,
                                  steps=m.turn if m.out.turns else self.model_calls[g.entry],
                                  seconds=self.now - m.started, versions={"main": (m.version, m.version)})

    def _t_teardown_ended(self, s: int, q: int, i: int) -> None:
        g = self.groups[(s, q)]
        g.members[i].timer = None
        if g.members[i].lane is not None:
            self._span(g.members[i], "teardown", g.members[i].since)
        self._carry(self.driver.on_teardowns_done(g.key, i, now=self.now))
        self._done(g, i)

    def _t_teardown_outlasted(self, s: int, q: int, i: int) -> None:
        """The teardown outlived the permit's wait: the driver's deadline (due now) gives the permit back, warning."""
        g = self.groups[(s, q)]
        g.members[i].timer = None
        if g.members[i].lane is not None:
            self._span(g.members[i], "teardown", g.members[i].since)
        due = self.driver.next_deadline()
        if due is not None and due <= self.now:
            self._carry(self.driver.on_deadline(now=self.now))
        self._done(g, i)

    def _exit(self, g: SimGroup, i: int) -> None:
        """Member ``i``'s block exits now (its permit comes back under rollout); it is done."""
        self._carry(self.driver.on_block_exited(g.key, i, now=self.now))
        self._done(g, i)

    def _done(self, g: SimGroup, i: int) -> None:
        m = g.members[i]
        m.phase = Phase.DONE
        if m.lane is not None:
            self._rollout_span(g, i)
        g.pending -= 1
        if g.pending == 0:
            self._finish_group(g)

    def _rollout_span(self, g: SimGroup, i: int) -> None:
        """The span over traced member ``i``'s whole lane, from entering its block to done; its lane comes back."""
        m, r = g.members[i], g.members[i].result
        self._span(m, "rollout", g.created, task_id=g.task_id, group=list(g.key), member=i, version=m.version,
                   turns=r.steps, reward=r.reward, passed=r.outcome == "pass", status=rollout_status(r.disposition))
        self.trace.close_lane(m.lane)
        m.lane = None

    def _cancel_member(self, g: SimGroup, i: int, reason: str) -> None:
        """Stop member ``i`` where it stands; ``reason`` is its disposition. One that had ended keeps its outcome."""
        m, now, key = g.members[i], self.now, g.key
        if m.phase is Phase.DONE:
            return
        if m.phase is Phase.WAIT:
            if m.lane is not None and self.now > g.created:
                self._span(m, "permit_wait", g.created)
            m.result = MemberResult(outcome="none", disposition=reason)
            self._carry(self.driver.on_block_cancelled(key, i, now=now))
            self._done(g, i)
            return
        if m.phase is Phase.TEARDOWN:  # a cancellation ends the wait, not the teardown
            self._cancel(m.timer)
            m.timer = None
            if m.lane is not None:
                self._span(m, "teardown", m.since)
            self._carry(self.driver.on_teardowns_done(key, i, now=now))
            self._done(g, i)
            return
        if m.phase is Phase.SLOT:
            self._carry(self.driver.on_slot_cancelled(key, i, now=now))
        elif m.phase is Phase.RUN and m.out.turns:
            self._stop_turn(g, i)
            self._cancel(m.deadline)
            m.deadline = None
            self._carry(self.driver.release_slot(key, i, "cancelled", now=now))
        else:
            if m.phase is Phase.STARTUP and self.startups is not None and self.startups.cancel((*key, i), now=now):
                self._arm_startups()
            self._cancel(m.timer)
            m.timer = None
            self._carry(self.driver.release_slot(key, i, "cancelled", now=now))
        m.result = MemberResult(outcome="none", disposition=reason, steps=m.turn if m.out.turns else None,
                                seconds=now - m.started if m.started is not None else None,
                                versions={"main": (m.version, m.version)})
        self._exit(g, i)

    # --------------------------------------------------------------------------------------------- groups
    def _finish_group(self, g: SimGroup) -> None:
        del self.groups[g.key]
        output = None
        if not g.failed:
            members = tuple(m.result for m in g.members)
            verdict = group_verdict(members, min_successful=self.min_successful)
            datums = tuple((i, r.reward) for i, r in enumerate(members) if r.valid) if verdict in DATUM_VERDICTS else ()
            output = GroupOutput(verdict, members, datums)
        self._carry(self.driver.on_group_finished(g.key, output, now=self.now))
        self._try_step()

    # ------------------------------------------------------------------------------------------------ run
    def begin(self) -> None:
        """A new run: the driver starts and the trainer waits for its first step."""
        self.begun = True
        self._carry(self.driver.start(now=self.now))
        self._try_step()
        self._arm_deadline()

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
                f"the simulated run stalled at step {self.driver.dispatcher.step} (t={self.now:.1f}s): nothing is "
                f"running and no step can complete ({len(self.groups)} groups in flight, trainer "
                f"{self.trainer.value})") from None
        if until is not None and not self.done:
            self.now = max(self.now, until)
        return self.done

    # ------------------------------------------------------------------------------------------- state
    def state_dict(self) -> dict:
        """The runtime's own state (``sim-<step>.json``): timers, groups in flight, trainer, learner, servers, and
        the trace writer's lanes (``TraceWriter.state_dict``). The run takes it between steps (after a step's
        metrics), where no step trains (``training`` None); it is kept whole all the same."""
        return {
            "format": 2,
            "now": self.now,
            "version": self.version,
            "seq": self.seq,
            "timers": [[s, t, k.value, list(p)] for s, (t, k, p) in sorted(self.timers.items())],
            "armed": {k: (None if v is None else [v[0], v[1]]) for k, v in self.armed.items()},
            "groups": [g.to_json() for g in self.groups.values()],
            "trainer": self.trainer.value,
            "trainer_since": self.trainer_since,
            "training": None if self.training is None else self.training.to_json(),
            "begun": self.begun,
            "learner": self.learner.state_dict(),
            "startups": None if self.startups is None else self.startups.state_dict(),
            "service": None if self.service is None else self.service.state_dict(),
            "trace": None if self.trace is None else self.trace.state_dict(),
        }

    def load_state_dict(self, s: dict) -> None:
        """Restore what ``state_dict`` saved into this fresh runtime, whose environment starts at ``s["now"]``."""
        if s.get("format") != 2:
            raise ValueError(f"simulator state format {s.get('format')!r} is not 2")
        self.now, self.version, self.seq, self.begun = s["now"], s["version"], s["seq"], s["begun"]
        self.trainer = Trainer(s["trainer"])
        self.trainer_since = s.get("trainer_since", self.now)  # absent in a checkpoint before the trace
        # absent in a checkpoint from before service_slowdown, whose runs have none: nothing re-arms their step
        self.training = None if s.get("training") is None else Training.from_json(s["training"])
        self.armed = {k: (None if v is None else (v[0], v[1])) for k, v in s["armed"].items()}
        self.groups = {}
        for gj in s["groups"]:
            g = SimGroup.from_json(gj)
            self.groups[g.key] = g
        self.learner.load_state_dict(s["learner"])
        if self.startups is not None and s["startups"] is not None:
            self.startups.load_state_dict(s["startups"])
        if self.service is not None and s.get("service") is not None:
            self.service.load_state_dict(s["service"])
        self._trace_state = s.get("trace")
        for seq, t, kind, payload in s["timers"]:
            self._schedule(seq, t, Timer(kind), tuple(payload))
        self._arm_deadline()  # as the handler that the checkpoint interrupted would have, on its way out


__all__ = ["SimRuntime", "SimulationStalled", "Timer", "Trainer"]
