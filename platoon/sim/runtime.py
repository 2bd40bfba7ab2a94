"""The SimPy runtime: an executor of the policy layer's driver on simulated time.

What this module owns: the adapter between the driver and the simulated work, nothing that decides. It tells the
driver what happened, with ``now=``, carries out the decisions it answers, in order, asks ``driver.poll`` whenever it
has nothing left to carry out, keeps one timer at the driver's ``next_deadline()``, and hands the cycle's writes to
its run session (``platoon.runs.session``). The work lives in modules of its own:

- ``platoon.sim.clock``: every pending event is a timer record on SimPy, fired at its own time (exact resume);
- ``platoon.sim.rollouts``: the groups in flight, their members phase by phase, the model service in turns mode;
- ``platoon.sim.trainer``: evaluation, training and publishing on simulated time.

Decisions and who carries them out: ``StartGroup``, ``GrantPermit``, ``SlotGranted``, ``CancelRollout``,
``AwaitTeardowns``, ``EndTeardownWait`` -> the rollouts; ``Evaluate``, ``Train``, ``Publish`` -> the trainer;
``WriteRow``, ``SaveCheckpoint`` (with this runtime's own state, ``sim-<name>.json``), ``Finish`` -> the session;
``Abort`` -> ``SimulationStalled`` (exit 1; groups failed in a row: the driver's reason, word for word as the
live runtime says it), all in one ``match`` that a type checker proves exhaustive (``assert_never``). Decisions
that a decision leads to are carried out after the ones already queued (breadth first), as the driver's order of a
call's answers has it; a start slot granted at once is carried out next.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import assert_never

from platoon.config.models import RunConfig
from platoon.policy import (
    Abort,
    AwaitTeardowns,
    CancelRollout,
    Decision,
    EndTeardownWait,
    Evaluate,
    Finish,
    GrantPermit,
    PolicyLayer,
    Publish,
    RunStarted,
    SaveCheckpoint,
    SlotGranted,
    StartGroup,
    TimerFired,
    Train,
    WriteRow,
)
from platoon.runs.session import RunSession
from platoon.runs.trace import TraceWriter
from platoon.sim.clock import TimerClock
from platoon.sim.records import SimGroup, Timer
from platoon.sim.rollouts import RolloutWork
from platoon.sim.setup import SimTasks
from platoon.sim.trainer import SimTrainer
from platoon.sim.workload import MemberOutcome

STATE_FORMAT = 4


class SimulationStalled(RuntimeError):
    """The simulated run cannot go on: the driver says why (``Abort``), or no event is left."""


class SimRuntime:
    """One simulated run's event loop (see the module docstring). ``session`` carries out the cycle's writes (by
    default one that keeps rows and events in memory)."""

    def __init__(self, cfg: RunConfig, tasks: SimTasks, policy: PolicyLayer, *, now: float = 0.0) -> None:
        self.cfg, self.tasks = cfg, tasks
        self.driver = policy.driver
        self.clock = TimerClock(now=now)
        self.clock.on(Timer.DEADLINE, self._t_deadline)
        self.clock.after = self._arm_deadline
        self.work = RolloutWork(cfg, tasks, self.driver, self.clock, carry=self._carry, grade=self.member_reward,
                                version=lambda: self.trainer.version, service_changed=self._service_changed,
                                log=lambda level, message: self.session.log(level, message))
        self.trainer = SimTrainer(cfg, tasks.learner, tasks.pool, self.driver, self.clock, carry=self._carry,
                                  service=self.work.servers or self.work.service)
        self.session = RunSession(None, log=lambda level, message: None)
        self.armed: tuple[int, float] | None = None  # the deadline timer: its seq and time
        self.done = False
        self._trace_state: dict | None = None  # a checkpoint's, for the writer attach_trace gets
        self._stop = self.clock.env.event()

    # ---------------------------------------------------------------------------------------- what tests read
    @property
    def now(self) -> float:
        return self.clock.now

    @property
    def version(self) -> int:
        return self.trainer.version

    @property
    def groups(self) -> dict[tuple[int, int], SimGroup]:
        return self.work.groups

    @property
    def service(self):  # noqa: ANN201 - ModelService | None
        return self.work.service

    @property
    def rollouts(self) -> int:
        return self.work.rollouts

    def member_reward(self, g: SimGroup, index: int, out: MemberOutcome) -> float:
        """The reward of a valid member: 1.0 when it passed, else 0.0 (a subclass may grade it)."""
        return 1.0 if out.passed else 0.0

    def attach(self, session: RunSession) -> None:
        """Write through ``session``; its trace writer gets the lanes and tracks of the checkpoint loaded."""
        self.session = session
        writer: TraceWriter | None = session.trace
        if writer is not None and self._trace_state is not None:
            writer.load_state_dict(self._trace_state)
        trace = writer if writer is not None and writer.stopped is None else None
        self.work.trace = self.trainer.trace = trace

    # -------------------------------------------------------------------------------------------- decisions
    def _carry(self, decisions: Sequence[Decision]) -> None:
        """Carry out the driver's decisions, in order (those they lead to after them), then what its poll answers,
        until it answers nothing. One match, the most frequent decisions first (it tries its cases in turn)."""
        if not decisions:  # most calls: nothing to carry out, and the cycle has nothing due
            decisions = self.driver.poll(now=self.clock.now)
            if not decisions:
                return
        queue = deque(decisions)
        while True:
            while queue:
                dec = queue.popleft()
                match dec:
                    case GrantPermit():
                        if slot := self.work.granted(dec):  # a start slot free at once: the start-up comes next
                            queue.extendleft(reversed(slot))
                    case StartGroup():
                        queue.extend(self.work.start_group(dec))
                    case CancelRollout():
                        self.work.cancel_member(dec)
                    case SlotGranted():
                        self.work.slot_granted(dec.key)
                    case AwaitTeardowns():
                        self.work.await_teardowns(dec.key, dec.index)
                    case EndTeardownWait():
                        self.work.end_teardown_wait(dec.key, dec.index)
                    case Evaluate():
                        self.trainer.evaluate(dec)
                    case Train():
                        self.trainer.train(dec)
                    case Publish():
                        self.trainer.publish(dec)
                    case WriteRow():
                        self.session.write_row(dec, self.driver.take_outbox())
                    case SaveCheckpoint():
                        files = {f"sim-{dec.name}.json": self.state_dict()}
                        self.session.save(dec, self.driver.take_outbox(), files=files)
                    case Finish():
                        self.session.finish(dec, self.driver.take_outbox())
                        self.done = True
                        self._stop.succeed()
                    case Abort():
                        self.session.drain(self.driver.take_outbox())  # as live's shutdown writes them
                        # a stall says when, in simulated time; groups failed in a row: the driver's words, as live
                        raise SimulationStalled(dec.reason if dec.cause == "failures"
                                                else f"{dec.reason} (t={self.clock.now:.1f}s)")
                    case _:
                        assert_never(dec)
            more = self.driver.poll(now=self.clock.now)
            if not more:
                return
            queue.extend(more)

    def _service_changed(self) -> None:
        self.trainer.service_changed()

    # ----------------------------------------------------------------------------------------------- timers
    def _arm_deadline(self) -> None:
        """Keep one timer at the driver's next deadline (an earlier one that finds nothing due re-arms)."""
        due = self.driver.next_deadline()
        armed = self.armed
        if due is None or (armed is not None and armed[1] <= due and self.clock.pending(armed[0])):
            return
        if armed is not None:
            self.clock.cancel(armed[0])
        self.armed = (self.clock.at(due, Timer.DEADLINE), due)

    def _t_deadline(self) -> None:
        self.armed = None
        self._carry(self.driver.handle(TimerFired(), now=self.clock.now))

    # ------------------------------------------------------------------------------------------------ run
    def begin(self) -> None:
        """A new run: the driver starts (its launch save, then its first draws)."""
        self._carry(self.driver.handle(RunStarted(), now=self.clock.now))
        self._arm_deadline()

    def resume(self) -> None:
        """A restored run goes on: what the driver's restored cycle has due (a step's publish, or the start)."""
        self._carry([])
        self._arm_deadline()

    def run(self, until: float | None = None) -> bool:
        """Run until the plan is done (True), or until simulated time ``until`` (False: stopped there)."""
        if self.done or (until is not None and until <= self.clock.now):
            return self.done
        try:
            self.clock.run(until=self._stop if until is None else until)
        except RuntimeError as exc:
            if isinstance(exc, SimulationStalled) or "No scheduled events left" not in str(exc):
                raise
            raise SimulationStalled(f"the simulated run stalled at step {self.driver.steps_done} "
                                    f"(t={self.clock.now:.1f}s): no event is left") from None
        if until is not None and not self.done:
            self.clock.now = max(self.clock.now, until)
        return self.done

    # ------------------------------------------------------------------------------------------- state
    def state_dict(self) -> dict:
        """The runtime's own state (``sim-<step>.json``): timers, groups in flight, trainer, learner, servers, and
        the trace writer's lanes. The driver takes it at a checkpoint, where no step trains."""
        trace = self.work.trace
        return {"format": STATE_FORMAT, "now": self.clock.now, "version": self.trainer.version,
                **self.clock.state_dict(), "armed": None if self.armed is None else list(self.armed),
                **self.work.state_dict(), "trainer": self.trainer.state_dict(),
                "learner": self.tasks.learner.state_dict(),
                "trace": None if trace is None else trace.state_dict()}

    def load_state_dict(self, s: dict) -> None:
        """Restore what ``state_dict`` saved into this fresh runtime, whose clock starts at ``s["now"]``."""
        if s.get("format") != STATE_FORMAT:
            raise ValueError(f"simulator state format {s.get('format')!r} is not {STATE_FORMAT} (a checkpoint of "
                             "an earlier release: resume it with that release)")
        self.clock.now, self.trainer.version = s["now"], s["version"]
        self.armed = None if s["armed"] is None else (s["armed"][0], s["armed"][1])
        self.work.load_state_dict(s)
        self.trainer.load_state_dict(s["trainer"])
        self.tasks.learner.load_state_dict(s["learner"])
        self._trace_state = s.get("trace")
        self.clock.load_state_dict(s)


__all__ = ["SimRuntime", "SimulationStalled", "Timer"]
