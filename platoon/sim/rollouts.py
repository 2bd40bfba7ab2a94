"""The simulated rollouts: each group's members, phase by phase, from their permit to their teardown.

What this module owns: the simulator's *work* for the rollout decisions the driver answers (``platoon.sim.runtime``
hands them over); every rule about them is the driver's:

- ``StartGroup`` -> a group whose members enter their lease blocks in order;
- ``GrantPermit`` -> a rollout: its outcome is decided now (``platoon.sim.workload``, its task's pass rate now), it
  asks for a start slot, starts up (shared capacity: ``platoon.sim.startups``), makes its first model call (the
  slot comes back), runs, and ends. It runs for its drawn duration, or, in turns mode, turn by turn: each model call
  queued at the batching model service (``platoon.sim.service``), or under ``train.inference.engine: vllm`` at its
  rollout's server (``platoon.sim.servers``), then its environment step; its time limit (``timeout_s``) is a timer
  of its own there;
- ``SlotGranted`` -> the member starts up (under ``rollout_isolation: process``, once the launch gate admits its
  worker's launch: see below); ``CancelRollout`` -> the member stops where it stands (leaving the
  service's queue), and the driver hears of it (``MemberCancelled``: what that means in its phase is the
  driver's); ``AwaitTeardowns`` -> its teardown runs, its permit held, until it ends or ``EndTeardownWait``;
- all members done -> the group's output (``platoon.policy.outputs.group_output``) in a ``GroupFinished``; a
  group one of whose rollouts raised (``error_rate``) is reported failed with a ``RolloutRaised`` as its error, as
  the live runtime reports a workflow that raised, so that groups failing in a row stop the run as live
  (``platoon.policy.failures``), without a warning per group (a chosen rate of failures is no news);
- the launch gate (``train.workflow_config.rollout_isolation: process``): ``platoon.policy.launch_gate``'s
  ``LaunchRules`` with the config's start method, floor, soft limit and ``worker_launch_concurrent_groups``, and
  ``wait_limit_s`` = ``worker_startup_budget_seconds``. A member whose rollout began (after its permit and start
  slot) asks it before its start-up work; held, it waits in FIFO order, looked at again whenever a launch ends (a
  start-up reached its first model call, or its member was cancelled during it) and at its wait's limit (a timer:
  it then goes ahead, with the gate's warning, as live's does). The simulator models no node memory: it reads
  ``NO_MEMORY`` and keeps no reserve, so only the group rule holds a launch. Each admission is reported to the
  driver (``LaunchAdmitted``, then ``MemberStarted`` with the delay up to the rollout's beginning, as live reports
  it); the gate's warnings go to the run's log (``log``) at once, as live's do;
- the spans of the rollouts of traced groups (``trace.wants`` their draw position), each on its lane (kept in the
  member's record): ``permit_wait``, ``launch_wait`` (at the launch gate), ``startup``, ``model_call``,
  ``env_step``, ``teardown``, ``rollout``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from platoon.config.models import RunConfig
from platoon.policy import (
    NO_MEMORY,
    BlockExited,
    CancelRollout,
    Decision,
    Driver,
    GrantPermit,
    GroupEntered,
    GroupFinished,
    LaunchAdmitted,
    LaunchRules,
    MemberCancelled,
    MemberEnded,
    MemberExited,
    MemberResult,
    MemberStarted,
    SlotReleased,
    SlotRequested,
    StartGroup,
    TeardownsEnded,
    group_output,
)
from platoon.runs.trace import SERVICE, TraceWriter, rollout_status
from platoon.sim.clock import TimerClock
from platoon.sim.records import Phase, SimGroup, SimMember, Timer
from platoon.sim.servers import Deployment
from platoon.sim.service import ModelService
from platoon.sim.setup import SimTasks
from platoon.sim.startups import StartupServer
from platoon.sim.workload import MemberOutcome

Carry = Callable[[Sequence[Decision]], None]
Log = Callable[[str, str], None]


class RolloutRaised(RuntimeError):
    """The error a simulated rollout raises (``sim.rollout.error_rate``): its group's failure, in the driver's words
    (``platoon.policy.failures.failure_words``) and, once groups failed in a row, in the run's stop."""

    @classmethod
    def of(cls, member: int, rate: float) -> RolloutRaised:
        return cls(f"rollout {member} raised, as sim.rollout.error_rate ({rate}) has it")
Grade = Callable[[SimGroup, int, MemberOutcome], float]


class RolloutWork:
    """The groups in flight and their members' work (see the module docstring). ``carry`` carries out decisions;
    ``grade`` scores a valid member; ``version`` is the policy version live now; ``service_changed`` tells the
    trainer that the model service started or ended a batch (or the servers' load changed); ``log(level, message)``
    is the run's log (the launch gate's warnings)."""

    def __init__(self, cfg: RunConfig, tasks: SimTasks, driver: Driver, clock: TimerClock, *, carry: Carry,
                 grade: Grade, version: Callable[[], int], service_changed: Callable[[], None],
                 log: Log | None = None) -> None:
        self.driver, self.clock, self.carry, self.grade, self.version = driver, clock, carry, grade, version
        self.tasks, self.learner, self.seed = tasks, tasks.learner, cfg.train.seed
        self.service_changed = service_changed
        self.slots = driver.start_limit is not None  # else no start-slot call can answer anything
        self.min_successful = cfg.train.workflow_config.min_successful_group_size
        self.model_calls = [s.rollout.model_calls for s in tasks.sims]
        self.timeouts = [s.rollout.timeout_s for s in tasks.sims]
        self.error_rates = [s.rollout.error_rate for s in tasks.sims]
        capacity = cfg.sim.rollout.startup_capacity
        self.startups = StartupServer(capacity) if capacity is not None else None
        turns = any(s.rollout.turns is not None for s in tasks.sims)
        inference = cfg.train.inference
        vllm = turns and inference.engine == "vllm"
        self.service = ModelService(cfg.sim.service) if turns and not vllm else None
        self.servers = (Deployment(cfg.sim.service, servers=inference.server_count(), in_flight=inference.in_flight,
                                   clock=clock, answered=self._answered, changed=service_changed) if vllm else None)
        w = cfg.train.workflow_config
        self.gate = (LaunchRules(method=w.worker_start_method, floor_bytes=w.worker_mem_available_floor_bytes,
                                 rss_limit_bytes=w.worker_rss_soft_limit_bytes,
                                 concurrent_groups=w.worker_launch_concurrent_groups,
                                 wait_limit_s=w.worker_startup_budget_seconds, reserve_bytes=0)
                     if w.rollout_isolation == "process" and w.worker_launch_concurrent_groups else None)
        self.held: list[tuple[int, int, int]] = []  # members held at the launch gate, in the order they asked
        self.log: Log = log or (lambda level, message: None)
        self.trace: TraceWriter | None = None
        self.groups: dict[tuple[int, int], SimGroup] = {}
        self.startups_timer: tuple[int, float] | None = None
        self.rollouts = 0  # permits granted in this process (a benchmark's count; not part of the state)
        for kind, handler in ((Timer.STARTED_UP, self._t_started_up),
                              (Timer.LAUNCH_WAITED, self._t_launch_waited), (Timer.STARTUPS_DONE, self._t_startups_done),
                              (Timer.ROLLOUT_ENDED, self._t_rollout_ended), (Timer.ROLLOUT_RAISED, self._t_raised),
                              (Timer.TEARDOWN_ENDED, self._t_teardown_ended), (Timer.BATCH_DONE, self._t_batch_done),
                              (Timer.SERVICE_FREE, self._t_service_free), (Timer.ENV_STEPPED, self._t_env_stepped),
                              (Timer.TIMED_OUT, self._t_timed_out)):
            clock.on(kind, handler)

    # -------------------------------------------------------------------------------------------- decisions
    def start_group(self, dec: StartGroup) -> Sequence[Decision]:
        """Open the group; its members enter their blocks at once: what the driver answers to that."""
        entry = self.tasks.row_entry[dec.row_index]
        g = SimGroup(dec.key, dec.row_index, dec.task_id, entry, dec.group_size, self.clock.now,
                     [SimMember() for _ in range(dec.group_size)], dec.group_size)
        self.groups[dec.key] = g
        if self.trace is not None and self.trace.wants(dec.position):
            for m in g.members:
                m.lane = self.trace.open_lane()
        return self.driver.handle(GroupEntered(dec.key, dec.group_size), now=self.clock.now)

    def granted(self, dec: GrantPermit) -> Sequence[Decision]:
        """The member's rollout: its outcome now; it asks for a start slot and starts up once it has one. What the
        driver answers to the slot's request (its ``SlotGranted`` when one is free now) comes back, to carry out
        next."""
        g = self.groups.get(dec.key)
        if g is None or g.members[dec.index].phase is not Phase.WAIT:
            raise RuntimeError(f"GrantPermit for rollout {dec.index} of group {dec.key}, which does not wait")
        m = g.members[dec.index]
        m.granted, m.version = self.clock.now, self.version()
        self.rollouts += 1
        if m.lane is not None and self.clock.now > g.created:  # no span for a wait of no time
            self._span(m, "permit_wait", g.created)
        if g.draws is None:
            g.draws = self.tasks.workloads[g.entry].group(self.seed, g.key, g.size, self.learner.length[g.row])
        m.out = g.draws.member(dec.index, self.learner.pass_rate(g.row))
        m.phase = Phase.SLOT
        if self.slots:
            return self.driver.handle(SlotRequested(g.key, dec.index), now=self.clock.now)
        self.start_up(g, dec.index)
        return ()

    def slot_granted(self, key: tuple[int, int, int]) -> None:
        s, q, i = key
        self.start_up(self.groups[(s, q)], i)

    def await_teardowns(self, key: tuple[int, int], i: int) -> None:
        m = self.groups[key].members[i]
        m.timer = self.clock.at(self.clock.now + m.out.teardown_s, Timer.TEARDOWN_ENDED, (*key, i))

    def end_teardown_wait(self, key: tuple[int, int], i: int) -> None:
        """The teardown outlived the permit's wait (the permit came back): the member is done."""
        g = self.groups[key]
        m = g.members[i]
        self.clock.cancel(m.timer)
        m.timer = None
        if m.lane is not None:
            self._span(m, "teardown", m.since)
        self._done(g, i)

    # -------------------------------------------------------------------------------------------- starting
    def start_up(self, g: SimGroup, i: int) -> None:
        """Member ``i``'s rollout begins (its permit and start slot held): its start-up work, once the launch gate
        (if any) admits its worker's launch."""
        m = g.members[i]
        if self.gate is not None:
            m.phase, m.started = Phase.LAUNCH, self.clock.now
            m.since = m.started
            if not self._ask_gate(g, i, waited_s=0.0):
                m.timer = self.clock.at(self.clock.now + self.gate.wait_limit_s, Timer.LAUNCH_WAITED, (*g.key, i))
                self.held.append((*g.key, i))
            return
        m.phase, m.started = Phase.STARTUP, self.clock.now
        if started := self.driver.handle(MemberStarted(g.key, i, self.clock.now - g.created), now=self.clock.now):
            self.carry(started)  # the driver answers nothing to a start today
        self._start_work(g, i)

    def _start_work(self, g: SimGroup, i: int) -> None:
        """Member ``i``'s start-up work, up to its first model call."""
        m = g.members[i]
        work = m.out.first_call_s
        if work <= 0:
            self._first_call(g, i)
        elif self.startups is not None:
            self.startups.add((*g.key, i), work, now=self.clock.now)
            self._arm_startups()
        else:
            m.timer = self.clock.at(self.clock.now + work, Timer.STARTED_UP, (*g.key, i))

    # ---------------------------------------------------------------------------------------- launch gate
    def _ask_gate(self, g: SimGroup, i: int, *, waited_s: float) -> bool:
        """Member ``i`` (at the gate since ``m.since``, ``waited_s`` ago) asks the gate: admitted, it starts up
        (True); else it stays held. The gate's warning, if any, goes to the run's log."""
        verdict = self.gate.verdict(g.key, waited_s=waited_s, readings=NO_MEMORY)
        if verdict.warning is not None:
            self.log("warning", verdict.warning)
        if not verdict.admit:
            return False
        self.gate.admitted(g.key)
        m = g.members[i]
        self.clock.cancel(m.timer)
        m.timer = None
        if m.lane is not None and self.clock.now > m.since:  # no span for a wait of no time
            self._span(m, "launch_wait", m.since)
        m.phase, m.since = Phase.STARTUP, self.clock.now
        # the table's order: admitted (waiting_launch -> starting), then started, with the delay up to the
        # rollout's beginning (its permit and slot), as live reports it
        for event in (LaunchAdmitted(g.key, i), MemberStarted(g.key, i, m.started - g.created)):
            if answered := self.driver.handle(event, now=self.clock.now):
                self.carry(answered)  # the driver answers nothing to either today
        self._start_work(g, i)
        return True

    def _launch_ended(self, g: SimGroup) -> None:
        """A launch of ``g`` ended (its start-up reached its first model call, or its member was cancelled): the
        members held look again, in the order they asked."""
        self.gate.ended(g.key)
        if not self.held:
            return
        held, self.held = self.held, []
        for s, q, i in held:
            h = self.groups[(s, q)]
            if h.members[i].phase is not Phase.LAUNCH:
                continue  # cancelled while the held looked again
            if not self._ask_gate(h, i, waited_s=self.clock.now - h.members[i].since):
                self.held.append((s, q, i))

    def _t_launch_waited(self, s: int, q: int, i: int) -> None:
        """Member ``i``'s wait at the gate reached its limit: it goes ahead (the gate says so in a warning)."""
        g = self.groups[(s, q)]
        g.members[i].timer = None
        self.held.remove((s, q, i))
        # the timer fires at exactly since + wait_limit_s: the limit itself, not what float subtraction leaves
        admitted = self._ask_gate(g, i, waited_s=self.gate.wait_limit_s)
        assert admitted, "the launch gate holds no launch past its wait limit"

    def _first_call(self, g: SimGroup, i: int) -> None:
        m = g.members[i]
        m.phase = Phase.RUN
        if self.gate is not None:
            if m.lane is not None and self.clock.now > m.since:  # the start-up after the gate admitted it
                self._span(m, "startup", m.since)
            self._launch_ended(g)
        elif m.lane is not None and self.clock.now > m.started:  # no span for a start-up of no time
            self._span(m, "startup", m.started)
        if self.slots:
            self.carry(self.driver.handle(SlotReleased(g.key, i, "first_call"), now=self.clock.now))
        o = m.out
        if o.turns:
            limit = self.timeouts[g.entry]
            if limit is not None:
                m.deadline = self.clock.at(self.clock.now + limit, Timer.TIMED_OUT, (*g.key, i))
            self._call(g, i)
        elif o.error_at_s is not None:
            m.timer = self.clock.at(self.clock.now + o.error_at_s, Timer.ROLLOUT_RAISED, (*g.key, i))
        else:
            m.timer = self.clock.at(self.clock.now + o.run_s, Timer.ROLLOUT_ENDED, (*g.key, i))

    def _t_started_up(self, s: int, q: int, i: int) -> None:
        g = self.groups[(s, q)]
        g.members[i].timer = None
        self._first_call(g, i)

    def _t_startups_done(self) -> None:
        self.startups_timer = None
        for s, q, i in self.startups.pop_finished(now=self.clock.now):
            self._first_call(self.groups[(s, q)], i)
        self._arm_startups()

    def _arm_startups(self) -> None:
        if self.startups_timer is not None:
            self.clock.cancel(self.startups_timer[0])
            self.startups_timer = None
        due = self.startups.next_finish()
        if due is not None:
            self.startups_timer = (self.clock.at(due, Timer.STARTUPS_DONE), due)

    # ---------------------------------------------------------------------------------------------- turns
    def _call(self, g: SimGroup, i: int) -> None:
        """Member ``i`` makes its next model call: it joins the service's queue (or its server's)."""
        g.members[i].since = self.clock.now
        if self.servers is not None:
            self.servers.request((*g.key, i))
            return
        self.service.request((*g.key, i))
        self._serve()

    def _serve(self) -> None:
        """An idle service with calls queued starts its next batch."""
        ends = self.service.start(self.clock.now)
        if ends is not None:
            self.clock.at(ends, Timer.BATCH_DONE)
            self.service_changed()

    def _t_batch_done(self) -> None:
        svc = self.service
        if self.trace is not None:
            self.trace.span("batch", SERVICE, svc.started, self.clock.now, size=svc.size, prompt_tokens=0, new_tokens=0)
        while (key := svc.next_answer()) is not None:  # a member's answer may withdraw a later one (a cancel)
            self._answered(key)
        svc.finish()
        if svc.handoff_s > 0:
            svc.handing_off = True
            self.clock.at(self.clock.now + svc.handoff_s, Timer.SERVICE_FREE)
        else:
            self._serve()
        self.service_changed()  # idle now (or busy again at once: no change)

    def _t_service_free(self) -> None:
        self.service.handing_off = False
        self._serve()

    def _answered(self, key: tuple[int, int, int], server: int | None = None, concurrency: float = 0.0) -> None:
        """Member ``key``'s model call is answered (by ``server``, among ``concurrency`` requests in flight there on
        average): its environment step, if it takes any time, else its turn ends."""
        s, q, i = key
        g = self.groups[(s, q)]
        m = g.members[i]
        if m.lane is not None:
            if server is None:
                self._span(m, "model_call", m.since, turn=m.turn + 1)
            else:
                self._span(m, "model_call", m.since, turn=m.turn + 1, server=server,
                           concurrency=round(concurrency, 4))
        m.turn += 1
        step = m.out.env_steps[m.turn - 1] if m.out.env_steps else 0.0
        if step > 0:
            m.since = self.clock.now
            m.timer = self.clock.at(self.clock.now + step, Timer.ENV_STEPPED, key)
        else:
            self._turn_done(g, i)

    def _t_env_stepped(self, s: int, q: int, i: int) -> None:
        g = self.groups[(s, q)]
        m = g.members[i]
        m.timer = None
        if m.lane is not None:
            self._span(m, "env_step", m.since, turn=m.turn)
        self._turn_done(g, i)

    def _turn_done(self, g: SimGroup, i: int) -> None:
        m = g.members[i]
        if m.turn == m.out.error_turn:
            self._raised(g, i)
        elif m.turn >= m.out.turns:
            self._ended(g, i)
        else:
            self._call(g, i)

    def _t_timed_out(self, s: int, q: int, i: int) -> None:
        """The member's time limit: it stops its turn and ends, failing (as a duration cut at ``timeout_s``)."""
        g = self.groups[(s, q)]
        m = g.members[i]
        m.deadline = None
        self._stop_turn(g, i)
        m.out = m.out._replace(passed=False)
        self._ended(g, i)

    def _stop_turn(self, g: SimGroup, i: int) -> None:
        """Stop member ``i``'s turn where it stands: its environment step's timer, or its call at the service."""
        m = g.members[i]
        name = "model_call" if m.timer is None else "env_step"
        if m.timer is None:
            (self.servers or self.service).withdraw((*g.key, i))
        self.clock.cancel(m.timer)
        m.timer = None
        if m.lane is not None:
            self._span(m, name, m.since, turn=m.turn + (name == "model_call"))

    # --------------------------------------------------------------------------------------------- endings
    def _t_rollout_ended(self, s: int, q: int, i: int) -> None:
        g = self.groups[(s, q)]
        g.members[i].timer = None
        self._ended(g, i)

    def _ended(self, g: SimGroup, i: int) -> None:
        """Member ``i``'s rollout ended (``m.out.passed`` says how); its teardown, if the driver holds its permit
        for it (``AwaitTeardowns``), follows."""
        m = g.members[i]
        if m.deadline is not None:
            self.clock.cancel(m.deadline)
            m.deadline = None
        if self.slots:
            self.carry(self.driver.handle(SlotReleased(g.key, i, "end"), now=self.clock.now))
        m.result = self._result(g, i, outcome="pass" if m.out.passed else "fail", disposition="completed")
        m.phase, m.since = Phase.TEARDOWN, self.clock.now
        self.carry(self.driver.handle(MemberExited(g.key, i, m.out.teardown_s > 0), now=self.clock.now))
        if m.phase is Phase.TEARDOWN and m.timer is None:  # no teardown held its permit
            self._done(g, i)

    def _t_raised(self, s: int, q: int, i: int) -> None:
        """A rollout raised: its group fails, and the driver's decisions cancel the others once it has exited."""
        g = self.groups[(s, q)]
        g.members[i].timer = None
        self._raised(g, i)

    def _raised(self, g: SimGroup, i: int) -> None:
        self.clock.cancel(g.members[i].deadline)
        g.members[i].deadline = None
        self.carry(self.driver.handle(SlotReleased(g.key, i, "end"), now=self.clock.now))
        g.members[i].result = self._result(g, i, outcome="error", disposition="error")
        g.failed = True
        cancels = self.driver.handle(MemberEnded(g.key, i, raised=True), now=self.clock.now)
        self.carry(self.driver.handle(BlockExited(g.key, i), now=self.clock.now))
        self._done(g, i)
        self.carry(cancels)

    def _result(self, g: SimGroup, i: int, *, outcome: str, disposition: str) -> MemberResult:
        m = g.members[i]
        ok = disposition == "completed" and m.out.valid
        reward = self.grade(g, i, m.out) if ok else None
        return MemberResult.quick(reward=reward, scored=reward, valid=ok, outcome=outcome if ok or outcome == "error"
                                  else "invalid", disposition=disposition,
                                  steps=m.turn if m.out.turns else self.model_calls[g.entry],
                                  seconds=self.clock.now - m.started, versions={"main": (m.version, m.version)})

    def _t_teardown_ended(self, s: int, q: int, i: int) -> None:
        g = self.groups[(s, q)]
        g.members[i].timer = None
        if g.members[i].lane is not None:
            self._span(g.members[i], "teardown", g.members[i].since)
        self.carry(self.driver.handle(TeardownsEnded(g.key, i), now=self.clock.now))
        self._done(g, i)

    def cancel_member(self, dec: CancelRollout) -> None:
        """Stop member ``index`` where it stands (``reason``: its disposition); one that had ended keeps its
        outcome. The driver says what the cancellation means in the member's phase."""
        g = self.groups.get(dec.key)
        if g is None or g.members[dec.index].phase is Phase.DONE:
            return
        i, m, key = dec.index, g.members[dec.index], dec.key
        phase = m.phase
        if phase is Phase.WAIT:
            if m.lane is not None and self.clock.now > g.created:
                self._span(m, "permit_wait", g.created)
            m.result = MemberResult(outcome="none", disposition=dec.reason)
        elif phase is Phase.LAUNCH:  # held at the launch gate: it leaves the queue (its wait's timer goes below)
            if (*key, i) in self.held:  # (not there while the held look again: they skip it)
                self.held.remove((*key, i))
            if m.lane is not None and self.clock.now > m.since:
                self._span(m, "launch_wait", m.since)
        elif phase is Phase.TEARDOWN:  # a cancellation ends the wait, not the teardown
            self.clock.cancel(m.timer)
            m.timer = None
            if m.lane is not None:
                self._span(m, "teardown", m.since)
        else:
            if phase is Phase.RUN and m.out.turns:
                self._stop_turn(g, i)
                self.clock.cancel(m.deadline)
                m.deadline = None
            elif phase is Phase.STARTUP and self.startups is not None and self.startups.cancel((*key, i), now=self.clock.now):
                self._arm_startups()
            self.clock.cancel(m.timer)
            m.timer = None
            if phase is Phase.STARTUP and self.gate is not None:  # its launch ends: the held look again
                self._launch_ended(g)
            m.result = MemberResult(outcome="none", disposition=dec.reason, steps=m.turn if m.out.turns else None,
                                    seconds=self.clock.now - m.started if m.started is not None else None,
                                    versions={"main": (m.version, m.version)})
        self.carry(self.driver.handle(MemberCancelled(key, i), now=self.clock.now))
        self._done(g, i)

    # --------------------------------------------------------------------------------------------- groups
    def _done(self, g: SimGroup, i: int) -> None:
        m = g.members[i]
        m.phase = Phase.DONE
        if self.servers is not None:
            self.servers.forget((*g.key, i))
        if m.lane is not None:
            self._rollout_span(g, i)
        g.pending -= 1
        if g.pending == 0:
            self._finish_group(g)

    def _finish_group(self, g: SimGroup) -> None:
        del self.groups[g.key]
        if g.failed:  # the first member that raised names the failure (a checkpoint keeps the members' outcomes)
            raised = next(i for i, m in enumerate(g.members) if m.result is not None and m.result.outcome == "error")
            error = RolloutRaised.of(raised, self.error_rates[g.entry])
            self.carry(self.driver.handle(GroupFinished(g.key, None, error, warn=False), now=self.clock.now))
            return
        members = [m.result for m in g.members]
        output = group_output(members, min_successful=self.min_successful,
                              datums=lambda: ((i, r.reward) for i, r in enumerate(members) if r.valid))
        self.carry(self.driver.handle(GroupFinished(g.key, output), now=self.clock.now))

    # ---------------------------------------------------------------------------------------------- trace
    def _span(self, m: SimMember, name: str, start: float, **args) -> None:
        """A span of traced member ``m`` (``m.lane`` set) from ``start`` to now."""
        assert self.trace is not None and m.lane is not None
        self.trace.span(name, m.lane, start, self.clock.now, **args)

    def _rollout_span(self, g: SimGroup, i: int) -> None:
        """The span over traced member ``i``'s whole lane, from entering its block to done; its lane comes back."""
        m, r = g.members[i], g.members[i].result
        self._span(m, "rollout", g.created, task_id=g.task_id, group=list(g.key), member=i, version=m.version,
                   turns=r.steps, reward=r.reward, passed=r.outcome == "pass", status=rollout_status(r.disposition))
        self.trace.close_lane(m.lane)
        m.lane = None

    # ---------------------------------------------------------------------------------------------- state
    def state_dict(self) -> dict:
        return {"groups": [g.to_json() for g in self.groups.values()],
                "startups_timer": None if self.startups_timer is None else list(self.startups_timer),
                "startups": None if self.startups is None else self.startups.state_dict(),
                "service": None if self.service is None else self.service.state_dict(),
                "servers": None if self.servers is None else self.servers.state_dict(),
                "gate": None if self.gate is None else {**self.gate.state_dict(),
                                                        "held": [list(k) for k in self.held]}}

    def load_state_dict(self, s: dict) -> None:
        self.startups_timer = None if s["startups_timer"] is None else (s["startups_timer"][0], s["startups_timer"][1])
        self.groups = {}
        for gj in s["groups"]:
            g = SimGroup.from_json(gj)
            self.groups[g.key] = g
        if self.startups is not None and s["startups"] is not None:
            self.startups.load_state_dict(s["startups"])
        if self.service is not None and s.get("service") is not None:
            self.service.load_state_dict(s["service"])
        if self.servers is not None and s.get("servers") is not None:
            self.servers.load_state_dict(s["servers"])
        if self.gate is not None and s["gate"] is not None:
            self.gate.load_state_dict(s["gate"])
            self.held = [(k[0], k[1], k[2]) for k in s["gate"]["held"]]


__all__ = ["RolloutRaised", "RolloutWork"]
