"""The asyncio runtime of the live backend: an executor of the policy layer's driver on the event loop's clock.

What this module owns: the adapter between the driver and the live I/O, nothing that decides. It reports what
happened as events (``driver.handle(event, now=)``, on the run's clock: ``clock_start_s + loop.time() - t0``, so that
a resumed start's ``time`` goes on from its checkpoint's; docs/run-directory.md), carries out the decisions in one
``match`` (``assert_never`` ends it: mypy proves it exhaustive), asks ``driver.poll`` whenever nothing of the cycle
waits to be carried out, keeps one ``loop.call_at`` timer at ``next_deadline()``, and hands the cycle's writes and
the outbox to its run session (``platoon.runs.session``). Who carries out what:

- ``StartGroup`` -> the group's task (``platoon.live.rollouts.group_tasks``): the workflow's ``arun_episode(row)``
  with the group's lease in its context; its end -> ``GroupFinished`` with what it returned, raised, or that it was
  cancelled;
- the other rollout decisions -> the lease host (``platoon.live.rollouts.lease_host``), where every lease's blocks wait;
- the cycle's decisions -> the trainer task, one at a time, in order: ``SaveCheckpoint`` (sealed at once; the
  trainer's state and the files written off the loop), ``Evaluate`` (a plain ``evaluate()`` off the loop, an
  ``async evaluate(slots)`` on it, taking start slots in scope ``eval``), ``Train`` (off the loop, while rollouts go
  on; an ``async def train_step`` is awaited), ``WriteRow``, ``Publish``, ``Finish``; ``Abort`` raises
  ``RuntimeStalled``. The first draws wait for the toolchains being staged (``staging``). The trainer's and the
  model service's spans go to the trace (``rollout_trace.TrainerTrack``).
"""
from __future__ import annotations

import asyncio
import inspect
import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, assert_never

from platoon.live.launch.errors import TrainError
from platoon.live.rollouts.group_tasks import GroupTasks
from platoon.live.rollouts.lease_host import EvalSlots, LeaseHost
from platoon.live.rollouts.rollout_trace import TrainerTrack
from platoon.live.training.checkpoint import TRAINER_FILE, LiveRunDir
from platoon.live.training.datums import datum_tokens, step_datums
from platoon.policy import (
    Abort,
    AwaitTeardowns,
    CancelRollout,
    CycleDecision,
    Decision,
    Driver,
    EndTeardownWait,
    Evaluate,
    Evaluated,
    Event,
    Finish,
    GrantPermit,
    Publish,
    Published,
    RunStarted,
    SaveCheckpoint,
    SlotGranted,
    StartGroup,
    StepTrained,
    TimerFired,
    Train,
    TrainStep,
    WriteRow,
)
from platoon.runs.session import RunSession, python_log
from platoon.runs.trace import TraceWriter
from platoon.runs.trackers import Trackers

__all__ = ["LiveRuntime", "RuntimeStalled"]
Logger = Callable[[str, str], None]


class RuntimeStalled(TrainError):
    """The driver aborted the run (``Abort``): nothing runs, nothing is due and no step can complete, or groups
    failed in a row (exit 1, with the driver's reason)."""


class LiveRuntime:
    """One start of a live run (see the module docstring). ``workflow.arun_episode(row)`` -> GroupOutput;
    ``trainer.train_step(datums, version=)`` -> metrics (plain or ``async``), ``policy_state_dict()``;
    ``service.publish(weights, version)`` (plain or awaitable). ``run_dir`` None keeps rows and events in memory
    (``rows``, ``events``); ``evaluate()``: the ``eval/...`` metrics of the current policy; ``trainer_state()``: the
    bytes of ``trainer.pt``; ``clock_start_s``: the run's clock as this start begins; ``state_lost``: what of its
    checkpoint did not read; ``trace``: the timeline's writer (None: none); ``staging``: toolchains being staged;
    ``activity(description)``: a context showing long work; ``trackers``: where rows also go (``platoon.runs``)."""

    def __init__(self, driver: Driver, workflow: Any, trainer: Any, service: Any, *,
                 run_dir: LiveRunDir | None = None, evaluate: Callable[..., Any] | None = None,
                 trainer_state: Callable[[], bytes] | None = None, log: Logger | None = None,
                 on_step: Callable[[dict], None] | None = None, checkpoint_name: str | None = None,
                 clock_start_s: float = 0.0, state_lost: str | None = None,
                 trace: TraceWriter | None = None, staging: Any = None, activity: Any = None,
                 trackers: Trackers | None = None) -> None:
        if not (math.isfinite(clock_start_s) and clock_start_s >= 0):
            raise ValueError(f"clock_start_s must be a finite number of seconds, at least 0, got {clock_start_s!r}")
        self.driver, self.evaluate, self.trainer_state = driver, evaluate, trainer_state
        self.workflow, self.trainer, self.service, self.run_dir = workflow, trainer, service, run_dir
        self.log = log or python_log("platoon.live")
        self.session = RunSession(run_dir.rd if run_dir is not None else None, log=self.log,
                                  keep=run_dir.keep if run_dir is not None else None, trace=trace, on_row=on_step,
                                  trackers=trackers)
        self.resumed_from, self.state_lost, self.clock_start_s = checkpoint_name, state_lost, float(clock_start_s)
        self.trace, self.staging, self.activity = trace, staging, activity
        self.track = TrainerTrack(trace, self.now, self._thread_clock)
        self.trained: list[TrainStep] = []
        self.group_tasks = GroupTasks(workflow, trace=trace, now=self.now, finished=self._guarded,
                                      stopping=lambda: self._stopping)
        self.groups = self.group_tasks.tasks  # the running groups' tasks, by key
        self.host = LeaseHost(driver, feed=self._feed, rearm=self._rearm, now=self.now,
                              stopping=lambda: self._stopping, groups=lambda: self.groups)
        self._cycle: deque[CycleDecision] = deque()  # the cycle's decisions, for the trainer task in order
        self._executing, self._evaluations = False, 0
        self._armed: tuple[float, asyncio.TimerHandle] | None = None
        self._wake: asyncio.Event | None = None
        self._fatal: BaseException | None = None
        self._stopping = False
        self._now = self.clock_start_s
        self._t0 = 0.0  # the loop's time when this start began, at clock_start_s on the run's clock
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def rows(self) -> list[dict]:
        return self.session.rows

    @property
    def events(self) -> list[dict]:
        return self.session.events

    def now(self) -> float:
        """The run's clock: ``clock_start_s`` plus the seconds since this start began, never going backwards."""
        assert self.loop is not None
        self._now = max(self._now, self.clock_start_s + (self.loop.time() - self._t0))
        return self._now

    # -------------------------------------------------------------------------------------------------- run
    async def run(self) -> None:
        """Run this start to its end (``Finish``)."""
        self.loop = asyncio.get_running_loop()
        self._t0 = self.loop.time()
        self._wake = asyncio.Event()
        self.track.observe(self.service)
        workers = getattr(self.workflow, "rollout_workers", None)  # rollout_isolation: process (platoon.live.workers)
        if workers is not None:
            workers.attach_log(self.log)
        try:
            start = getattr(self.service, "start", None)  # an engine with servers of its own brings them up first
            if start is not None:
                await start(self.run_dir.path / "inference" if self.run_dir is not None else None, log=self.log,
                            activity=self.activity)
            self._t0 = self.loop.time()  # the run's clock starts once its servers are up: start-up is no step's
            self._feed(RunStarted(self.resumed_from, self.state_lost))
            await self._trainer_task()
        finally:
            await self._shutdown()

    async def _trainer_task(self) -> None:
        """Carry out the cycle's decisions one at a time, until ``Finish``."""
        assert self._wake is not None
        while True:
            while not self._cycle:
                if self._fatal is not None:
                    raise self._fatal
                self._wake.clear()
                await self._wake.wait()
            dec = self._cycle.popleft()
            self._executing = True
            try:
                if await self._carry_cycle(dec):
                    return
            finally:
                self._executing = False
            if self._fatal is not None:
                raise self._fatal
            if not self._cycle:
                await self._staged()  # the first draws wait for the toolchains; later ones find it done
                self._pump()

    async def _staged(self) -> None:
        """Wait for the toolchains staged since the run opened (at most ten minutes; a stop cancels it)."""
        if self.staging is not None:
            await self.staging.wait()
            self.staging = None

    async def _shutdown(self) -> None:
        self._stopping = True
        if self._armed is not None:
            self._armed[1].cancel()
        await self.group_tasks.cancel_all()
        workers = getattr(self.workflow, "rollout_workers", None)
        if workers is not None:
            await workers.aclose()
        self.session.drain(self.driver.take_outbox())
        self.session.close()
        close = getattr(self.service, "aclose", None)
        if close is not None:
            await close()
        self.track.observe(self.service, on=False)

    # ----------------------------------------------------------------------------------------------- driver
    def _feed(self, event: Event) -> None:
        """Report ``event`` to the driver at ``now`` and carry out what it answers, then what the cycle has due while
        nothing of it waits for the trainer task; drain the outbox, re-arm the deadline."""
        self._carry(self.driver.handle(event, now=self.now()))
        self._pump()

    def _pump(self) -> None:
        """Carry out what the cycle has due while nothing of it waits for the trainer task; drain, re-arm."""
        while not self._cycle and not self._executing and (more := self.driver.poll(now=self.now())):
            self._carry(more)
        self.session.drain(self.driver.take_outbox())
        self._rearm()

    def _carry(self, decisions: Sequence[Decision]) -> None:
        """Carry out each decision: the rollouts' at once (the lease host), the cycle's on the trainer task."""
        for dec in decisions:
            match dec:
                case GrantPermit(key=key, index=index):
                    self.host.granted(key, index, dec, "GrantPermit")
                case StartGroup():
                    self._start_group(dec)
                case SlotGranted(key=key):  # (step, seq, index), or ("eval", number, index)
                    self.host.granted(key[:2], key[2], dec, "SlotGranted")
                case CancelRollout(key=key, index=index, reason=reason):
                    self.host.cancel_member(key, index, reason)
                case AwaitTeardowns(key=key, index=index):
                    self.host.await_teardowns(key, index)
                case EndTeardownWait(key=key, index=index):
                    self.host.teardown_wait_over(key, index)
                case SaveCheckpoint() | Evaluate() | Train() | WriteRow() | Publish() | Finish() | Abort():
                    self._cycle.append(dec)
                    if self._wake is not None:
                        self._wake.set()
                case _:
                    assert_never(dec)

    def _rearm(self) -> None:
        if self._stopping or self.loop is None:
            return
        due = self.driver.next_deadline()
        if self._armed is not None and self._armed[0] == due:
            return
        if self._armed is not None:
            self._armed[1].cancel()
        self._armed = None if due is None else (
            due, self.loop.call_at(self._t0 + (due - self.clock_start_s), self._on_deadline, due))

    def _on_deadline(self, due: float) -> None:
        self._armed = None
        self._now = max(self.now(), due)  # a timer may fire a clock tick early
        self._guarded(TimerFired())

    def _guarded(self, event: Event) -> None:
        """``_feed`` from a callback: a failure is a bug of the runtime or the policy, and ends the run with it."""
        try:
            self._feed(event)
        except Exception as exc:  # noqa: BLE001
            if self._fatal is None:
                self._fatal = exc
            if self._wake is not None:
                self._wake.set()

    def _start_group(self, dec: StartGroup) -> None:
        assert self.loop is not None
        self.group_tasks.start(dec, self.host, self.loop)

    # ------------------------------------------------------------------------------------------------ cycle
    async def _carry_cycle(self, dec: CycleDecision) -> bool:
        """Carry out one of the cycle's decisions; True at ``Finish``."""
        match dec:
            case Train(step=step):
                await self._train(step)
            case Evaluate(step=step):
                metrics = await self._evaluate(step) if self.evaluate is not None else None
                self._feed(Evaluated(metrics))
            case WriteRow():
                self.session.write_row(dec, self.driver.take_outbox())
            case SaveCheckpoint():
                await self._checkpoint(dec)
            case Publish(version=version):
                await self._publish(version)
            case Finish():
                self.session.finish(dec, self.driver.take_outbox())
                return True
            case Abort(reason=reason):
                raise RuntimeStalled(reason)
            case _:
                assert_never(dec)
        return False

    async def _train(self, step: TrainStep) -> None:
        fn, datums, began = self.trainer.train_step, step_datums(step), self.now()
        if inspect.iscoroutinefunction(fn):
            metrics = await fn(datums, version=step.version)
        else:
            metrics = await asyncio.to_thread(fn, datums, version=step.version)
        self.track.span("train", began, step=step.step, datums=len(datums), tokens=datum_tokens(datums))
        self.trained.append(step)
        runtime = {k: v for source in (self.workflow, self.service)  # the workflow's and an inference engine's own
                   if (own := getattr(source, "step_metrics", None)) is not None for k, v in own().items()}
        self._feed(StepTrained(metrics, runtime or None))

    async def _evaluate(self, step: int) -> dict[str, Any]:
        """The ``eval/...`` metrics of the policy step ``step`` trains from."""
        assert self.evaluate is not None
        await self._staged()
        began = self.now()
        if inspect.iscoroutinefunction(self.evaluate):
            self._evaluations += 1
            metrics = dict(await self.evaluate(EvalSlots(self.host, self._evaluations, self.log)))
        else:
            metrics = dict(await asyncio.to_thread(self.evaluate))
        self.track.span("eval", began, step=step)
        return metrics

    async def _publish(self, version: int) -> None:
        began = self.now()
        getter = getattr(self.trainer, "policy_state_dict", None)
        weights = await asyncio.to_thread(getter) if getter is not None else None
        result = self.service.publish(weights, version)
        if inspect.isawaitable(result):
            await result
        self.track.published(began, version, getattr(self.service, "last_pause_s", None))
        self._feed(Published())

    async def _checkpoint(self, dec: SaveCheckpoint) -> None:
        """Seal the checkpoint now, on the loop (its log lengths match the state the driver captured), then write it
        and the trainer's state off the loop."""
        sealed = self.session.seal(dec, self.driver.take_outbox(), row={"clock_s": self.now()})
        if sealed is None:
            return
        data = await asyncio.to_thread(self.trainer_state) if self.trainer_state is not None else None
        await asyncio.to_thread(self.session.write, sealed, files={TRAINER_FILE: data} if data is not None else None)

    def _thread_clock(self) -> float:
        """The run's clock read from any thread (the model service's worker), without ``now()``'s guard."""
        assert self.loop is not None
        return self.clock_start_s + (self.loop.time() - self._t0)
