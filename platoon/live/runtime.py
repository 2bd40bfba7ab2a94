"""The asyncio runtime of the live backend: drives the policy layer's driver on the event loop's clock.

Thin by rule: every rule is ``platoon.policy``'s (the driver: dispatch, start slots, a failing group's cancel order,
straggler deadlines, the step cycle, the metrics). This module tells the driver what happened, with ``now`` on the
run's clock (``clock_start_s + loop.time() - t0``: a first start's clock begins at 0, a resumed one's at the clock
its checkpoint recorded, so ``metrics.jsonl``'s ``time`` never drops; docs/run-directory.md), carries out its
decisions, keeps one ``loop.call_at`` timer at its ``next_deadline()``, and writes what its outbox holds. What it
owns is the I/O:

- ``StartGroup`` -> a task running the workflow's ``arun_episode(row)`` with the group's lease in its context
  (``platoon.live.lease``); its end -> ``on_group_finished(key, output)`` (None when the workflow raised);
- the lease host: a block entered waits for its ``GrantPermit``, a member waits for its ``SlotGranted``, members
  report their start and end, and ``CancelRollout`` cancels the member's task;
- the trainer task: ``take_step`` (woken at each settle), the update **off the event loop**
  (``asyncio.to_thread``; an ``async def train_step`` is awaited) while rollouts go on, ``finish_step``, the metrics
  row, a full checkpoint when due (the driver's row, plus ``clock_s``, the run's clock at the capture, and ``logs``),
  the new weights published to the model service, ``publish``;
- ``eval/pass@1`` (``evaluate``) before the steps the driver says (``eval_due``) and once more for the final policy
  (a row ``{"step": steps, ...}``): a plain ``evaluate()`` off the loop, an ``async`` ``evaluate(slots)`` on it,
  its rollouts taking start slots of the run's start limit in scope ``eval`` (``_EvalSlots``), so that training's
  and evaluation's rollouts share them; evaluation's ``eval/rollout_client/start_limit/...`` join its metrics;
- the start: no rollout before the toolchains being staged are (``staging``: ``platoon.live.toolchain``);
- each step's row also has the workflow's own metrics (``step_metrics()``: its routing ids' coverage), and the
  over-budget warning, once per start, when more rollouts ran at once than ``max_concurrent_rollouts``
  (``platoon.policy.over_budget``; the blocks this runtime saw running count too, late ones on no permit included);
- the run's timeline (``trace``, a ``TraceWriter`` on ``trace.json``; docs/run-directory.md), every span on the run's
  clock: ``train`` (``step``, ``datums``, ``tokens``), ``publish`` (``version``) and ``eval`` (``step``) on the
  trainer's track; the model service's ``batch`` spans when it can be observed (``observe_batches``: timed in its
  worker on a thread-safe reading of the same clock, written here on the loop); and the rollout lanes of the groups
  whose draw position the writer wants (``platoon.live.rollout_trace``, through the group's lease). The writer is
  flushed before each checkpoint measures the logs and closed at the end.

(About 400 lines, past the ~300 of a pure adapter: it is also the lease host, whose waits for permits and start
slots must turn a cancellation at any instant into the right driver event.)
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from platoon.live.checkpoint import TRAINER_FILE, LiveRunDir
from platoon.live.lease import RolloutLease, set_lease
from platoon.live.rollout_trace import GroupTrace
from platoon.live.workflow import GroupRow
from platoon.policy.dispatcher import StartGroup
from platoon.policy.driver import Driver
from platoon.policy.members import CancelRollout
from platoon.policy.outputs import GroupOutput, TrainStep
from platoon.policy.over_budget import OverBudgetWatch
from platoon.policy.permits import GrantPermit
from platoon.policy.start_limit import SlotGranted
from platoon.runs import checkpoint_name, metrics_row
from platoon.runs.kept import add_kept_file
from platoon.runs.trace import SERVICE, TRAINER, TraceWriter

log = logging.getLogger("platoon.live")
Logger = Callable[[str, str], None]
Key = tuple[int, int]

__all__ = ["LiveRuntime", "RuntimeStalled"]


class RuntimeStalled(RuntimeError):
    """Nothing runs, nothing is due, and the trainer waits for a step that cannot complete."""


def _default_log(level: str, message: str) -> None:
    log.log(logging.WARNING if level == "warning" else logging.INFO, message)


class LiveRuntime:
    """One start of a live run (see the module docstring).

    ``workflow`` has ``async arun_episode(row: GroupRow) -> GroupOutput``; ``trainer`` has
    ``train_step(datums, version=) -> metrics`` (plain or ``async``), ``policy_state_dict()`` and ``state_dict()``;
    ``service`` has ``publish(weights, version)`` (plain or awaitable). ``run_dir`` None keeps events and metrics
    in memory (``events``, ``rows``) and writes no checkpoint. ``evaluate()`` returns the ``eval/...`` metrics of
    the trainer's current policy; it runs off the loop (an ``async def evaluate(slots)`` runs on it, its rollouts
    taking start slots through ``slots``, a ``platoon.live.evaluate.EvalSlots``). ``trainer_state()`` returns the bytes of ``trainer.pt``.
    ``clock_start_s`` is the run's clock when this start begins: 0 for a new run, the checkpoint's ``clock_s`` for a
    resumed one, whose policy must be built with its clock there (``build_policy(now=)``). ``state_lost`` names what
    of its checkpoint's state a resumed start could not read (its ``start`` event carries it). A start whose
    dispatcher has done every step already (a resume of a run killed between its last checkpoint and its end) only
    writes the end: the final evaluation. A start that reaches the end records it (``mark_finished``). ``trace``: the
    writer of the run's timeline (None: no trace), which this start closes when it ends. ``staging``: the toolchains
    being staged (``platoon.live.toolchain.Staging``), which no rollout starts before (None: none).
    """

    def __init__(self, driver: Driver, workflow: Any, trainer: Any, service: Any, *,
                 run_dir: LiveRunDir | None = None, evaluate: Callable[[], Mapping[str, float]] | None = None,
                 trainer_state: Callable[[], bytes] | None = None, log: Logger | None = None,
                 on_step: Callable[[dict], None] | None = None, checkpoint_name: str | None = None,
                 clock_start_s: float = 0.0, state_lost: str | None = None,
                 trace: TraceWriter | None = None, staging: Any = None) -> None:
        if not (math.isfinite(clock_start_s) and clock_start_s >= 0):
            raise ValueError(f"clock_start_s must be a finite number of seconds, at least 0, got {clock_start_s!r}")
        self.driver = driver
        self.workflow, self.trainer, self.service = workflow, trainer, service
        self.run_dir = run_dir
        self.evaluate, self.trainer_state = evaluate, trainer_state
        self.log = log or _default_log
        self.on_step = on_step
        self.resumed_from = checkpoint_name
        self.state_lost = state_lost
        self.clock_start_s = float(clock_start_s)
        self.trace = trace
        self.staging = staging
        self.events: list[dict] = []
        self.rows: list[dict] = []
        self.trained: list[TrainStep] = []
        self.groups: dict[Key, asyncio.Task] = {}
        self._permit_waiters: dict[tuple[Key, int], asyncio.Future] = {}
        self._slot_waiters: dict[tuple[Key, int], asyncio.Future] = {}
        self._members: dict[Key, list[asyncio.Future]] = {}
        self._running_blocks: set[tuple[Key, int]] = set()
        self._late_warned: set[Key] = set()
        self._in_blocks: set[tuple[Key, int]] = set()  # blocks running, on a permit or (late) on none
        self._in_blocks_max = 0  # their most at once since the last step's row
        self._over_budget = OverBudgetWatch(driver.dispatcher.config.max_concurrent_rollouts)
        self._evaluations = 0
        self._armed: tuple[float, asyncio.TimerHandle] | None = None
        self._settled: asyncio.Event | None = None
        self._fatal: BaseException | None = None
        self._stopping = False
        self._now = self.clock_start_s
        self._t0 = 0.0  # the loop's time when this start began, at clock_start_s on the run's clock
        self.loop: asyncio.AbstractEventLoop | None = None

    def now(self) -> float:
        """The run's clock: ``clock_start_s`` plus the seconds since this start began, never going backwards."""
        assert self.loop is not None
        self._now = max(self._now, self.clock_start_s + (self.loop.time() - self._t0))
        return self._now

    # -------------------------------------------------------------------------------------------------- run
    async def run(self) -> None:
        """Run this start to the end of the plan (``driver.steps``)."""
        self.loop = asyncio.get_running_loop()
        self._t0 = self.loop.time()
        self._settled = asyncio.Event()
        self._observe_service(self._on_batch if self.trace is not None else None)
        workers = getattr(self.workflow, "rollout_workers", None)  # rollout_isolation: process (platoon.live.workers)
        if workers is not None:
            workers.attach_log(self.log)
        try:
            if self.driver.dispatcher.step < self.driver.steps:
                decisions = self.driver.start(now=self.clock_start_s, checkpoint=self.resumed_from,
                                              state_lost=self.state_lost)
                self._drain()
                if self.run_dir is not None:
                    step = self.driver.dispatcher.step  # the launch save: a start that dies resumes here
                    await self._checkpoint(step, permanent=step == 0)
                await self._staged()
                self._carry(decisions)
                self._rearm()
                await self._train_loop()
            steps = self.driver.steps
            if self.evaluate is not None and self.driver.eval_due(steps):
                await self._staged()
                self._write_row(steps, self.now(), await self._evaluate(steps))
            if self.run_dir is not None:
                self.run_dir.mark_finished(steps, self.driver.dispatcher.start_number)
        finally:
            await self._shutdown()

    async def _staged(self) -> None:
        """Wait for the toolchains staged since the run opened (``platoon.live.toolchain.Staging.wait``: at most
        ten minutes; a stop cancels it) before any rollout, training's or evaluation's, starts."""
        if self.staging is not None:
            await self.staging.wait()
            self.staging = None

    async def _shutdown(self) -> None:
        self._stopping = True
        if self._armed is not None:
            self._armed[1].cancel()
        tasks = list(self.groups.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        workers = getattr(self.workflow, "rollout_workers", None)
        if workers is not None:
            await workers.aclose()
        self._drain()
        if self.run_dir is not None:
            self.run_dir.close()
        close = getattr(self.service, "aclose", None)
        if close is not None:
            await close()
        if self.trace is not None:
            self._observe_service(None)
            self.trace.close()

    # ------------------------------------------------------------------------------------------------ trace
    def _observe_service(self, on_batch: Callable[..., None] | None) -> None:
        observe = getattr(self.service, "observe_batches", None)
        if observe is not None:
            observe(on_batch, self._thread_clock)

    def _thread_clock(self) -> float:
        """The run's clock read from any thread (the model service's worker): ``now()`` without its guard against
        going backwards, which only the loop's thread may update."""
        assert self.loop is not None
        return self.clock_start_s + (self.loop.time() - self._t0)

    def _on_batch(self, span: Any) -> None:
        if self.trace is not None:
            self.trace.span("batch", SERVICE, span.start_s, span.end_s, size=span.size,
                            prompt_tokens=span.prompt_tokens, new_tokens=span.new_tokens)

    def _trainer_span(self, name: str, began: float, **args: Any) -> None:
        if self.trace is not None:
            self.trace.span(name, TRAINER, began, self.now(), **args)

    def _group_trace(self, dec: StartGroup) -> GroupTrace | None:
        """The trace of group ``dec``'s rollouts when the writer wants its draw position, else None."""
        if self.trace is None:
            return None
        running = self.driver.dispatcher.running.get(dec.key)
        if running is None or not self.trace.wants(running[0].position):
            return None
        return GroupTrace(self.trace, self.now, task_id=dec.task_id, key=dec.key, version=dec.version)

    # ----------------------------------------------------------------------------------------------- driver
    def _feed(self, handler: Callable[..., list], *args: Any, **kwargs: Any) -> None:
        """Call a driver handler at ``now``, carry out its decisions, drain its outbox, re-arm its deadline."""
        self._carry(handler(*args, now=self.now(), **kwargs))
        self._drain()
        self._rearm()

    def _carry(self, decisions: list) -> None:
        for dec in decisions:
            if isinstance(dec, GrantPermit):
                self._resolve(self._permit_waiters, (dec.key, dec.index), dec, "GrantPermit")
                self._running_blocks.add((dec.key, dec.index))
            elif isinstance(dec, StartGroup):
                self._start_group(dec)
            elif isinstance(dec, SlotGranted):
                s, q, i = dec.key
                self._resolve(self._slot_waiters, ((s, q), i), dec, "SlotGranted")
            elif isinstance(dec, CancelRollout):
                members = self._members.get(dec.key)
                if members is not None and not members[dec.index].done():
                    members[dec.index].cancel(dec.reason)
            else:
                raise TypeError(f"the live runtime cannot carry out {dec!r}")

    @staticmethod
    def _resolve(waiters: dict, key: tuple, dec: Any, what: str) -> None:
        fut = waiters.pop(key, None)
        if fut is None:
            raise RuntimeError(f"{what} for rollout {key[1]} of group {key[0]}, which does not wait")
        if not fut.done():
            fut.set_result(dec)

    def _drain(self) -> None:
        out = self.driver.take_outbox()
        if self.run_dir is not None:
            self.run_dir.write_events(out.events)
        else:
            self.events.extend(out.events)
        for message in out.infos:
            self.log("info", message)
        for message in out.warnings:
            self.log("warning", message)

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
        self._guarded(self.driver.on_deadline)

    def _guarded(self, handler: Callable[..., list], *args: Any, **kwargs: Any) -> None:
        """``_feed`` from a callback: a failure is a bug of the runtime or the policy, and ends the run with it."""
        try:
            self._feed(handler, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001
            if self._fatal is None:
                self._fatal = exc
            if self._settled is not None:
                self._settled.set()

    # ----------------------------------------------------------------------------------------------- groups
    def _start_group(self, dec: StartGroup) -> None:
        assert self.loop is not None
        rows = self.driver.dispatcher.pool.rows
        pool_row = rows[dec.row_index] if 0 <= dec.row_index < len(rows) else None
        data = pool_row.data if pool_row is not None else {}
        env_id = pool_row.env_task_id if pool_row is not None else None
        row = GroupRow(dec.key, dec.task_id, dec.entry, dec.group_size, dec.version, dec.row_index, data,
                       env_task_id=env_id)
        context = contextvars.copy_context()
        context.run(set_lease, RolloutLease(self, dec.key, dec.group_size, self._group_trace(dec)))
        self.groups[dec.key] = self.loop.create_task(self._run_group(row), context=context)

    async def _run_group(self, row: GroupRow) -> None:
        key = row.key
        output: GroupOutput | None = None
        try:
            result = await self.workflow.arun_episode(row)
            if isinstance(result, GroupOutput):
                output = result
            else:
                self.log("warning", f"the workflow of group {key} (task {row.task_id}) returned "
                                    f"{type(result).__name__}, not a GroupOutput: the group counts as failed")
        except asyncio.CancelledError:
            if self._stopping:
                raise
            self.log("warning", f"group {key} (task {row.task_id}) was cancelled: it counts as failed")
        except Exception as exc:  # noqa: BLE001 - a group that raises fails; the run goes on
            self.log("warning", f"group {key} (task {row.task_id}) failed: {type(exc).__name__}: {exc}")
        self.groups.pop(key, None)
        self._members.pop(key, None)
        if self._stopping:
            return
        self._guarded(self.driver.on_group_finished, key, output)
        for (k, index), fut in list(self._permit_waiters.items()):
            if k == key:  # blocks of a workflow whose tasks outlived it: they run on no permit
                del self._permit_waiters[(k, index)]
                self._warn_late(key, row.task_id)
                if not fut.done():
                    fut.set_result(GrantPermit(key, index, 0.0, False))
        assert self._settled is not None
        self._settled.set()

    def _warn_late(self, key: Key, task_id: str) -> None:
        if key not in self._late_warned:
            self._late_warned.add(key)
            self.log("warning", f"a rollout of task {task_id} (group {key}) ran after its group's draw was "
                                "released: it runs on no permit, so more rollouts can run than the budget")

    # ------------------------------------------------------------------------------------------- lease host
    @property
    def teardown_wait_s(self) -> float:
        return self.driver.dispatcher.config.teardown_wait_s

    def register_members(self, key: Key, tasks: list[asyncio.Future]) -> None:
        """The tasks of group ``key``'s members, which ``CancelRollout`` cancels."""
        self._members[key] = tasks

    async def enter_block(self, key: Key, index: int) -> float:
        """A member's block is entered (``platoon.live.lease``): wait for its permit; the seconds waited."""
        if key not in self.driver.dispatcher.running:
            self._warn_late(key, str(key))
            waited = 0.0
        else:
            waited = await self._wait(self._permit_waiters, (key, index), self.driver.on_block_entered,
                                      self.driver.on_block_cancelled,
                                      granted_back=lambda: self.exit_block(key, index, []))
        self._in_blocks.add((key, index))
        self._in_blocks_max = max(self._in_blocks_max, len(self._in_blocks))
        return waited

    async def _wait(self, waiters: dict, k: tuple, ask: Callable[..., list], cancelled: Callable[..., list], *,
                    granted_back: Callable[[], Any]) -> float:
        """Ask the driver for what ``k`` waits for (a permit or a slot) and wait for its decision; a wait that is
        cancelled tells the driver, and what was granted at the instant of cancellation goes back."""
        assert self.loop is not None
        fut = self.loop.create_future()
        waiters[k] = fut
        try:
            self._feed(ask, *k)
            decision = fut.result() if fut.done() else await fut
        except asyncio.CancelledError:
            granted = waiters.pop(k, None) is not fut or (fut.done() and not fut.cancelled())
            if not self._stopping:
                if granted:
                    granted_back()
                else:
                    self._feed(cancelled, *k)
            raise
        except BaseException:
            waiters.pop(k, None)
            raise
        return decision.waited_s

    def exit_block(self, key: Key, index: int, teardowns: list[asyncio.Task]) -> bool:
        """A member's block exited; ``teardowns`` still running hold its permit until they end (True: the block
        waits for them)."""
        k = (key, index)
        self._in_blocks.discard(k)
        if k not in self._running_blocks:
            return False  # a block that ran on no permit after its draw was released
        self._running_blocks.discard(k)
        if self._stopping:
            return False
        pending = bool(teardowns) and self.driver.dispatcher.config.permit_release == "rollout"
        self._feed(self.driver.on_block_exited, key, index, teardowns_pending=pending)
        if not pending:
            return False
        waiting = asyncio.gather(*teardowns, return_exceptions=True)
        waiting.add_done_callback(lambda _f: None if self._stopping else
                                  self._guarded(self.driver.on_teardowns_done, key, index))
        return True

    async def take_slot(self, key: Key, index: int, scope: str = "train") -> float:
        """Take a start slot for member ``index`` (``train.max_starting_rollouts``; ``scope`` ``eval`` for an
        evaluation's rollout); the seconds waited."""
        if self.driver.request_slot(key, index, now=self.now(), scope=scope):
            self._rearm()
            return 0.0
        k = (key, index)
        assert self.loop is not None
        fut = self.loop.create_future()
        self._slot_waiters[k] = fut
        try:
            return (await fut).waited_s
        except asyncio.CancelledError:
            self._slot_waiters.pop(k, None)
            if not self._stopping:  # a slot granted at the instant of cancellation passes on
                self._feed(self.driver.on_slot_cancelled, key, index)
            raise

    def release_slot(self, key: Key, index: int, reason: str) -> None:
        if not self._stopping:
            self._feed(self.driver.release_slot, key, index, reason)

    def member_started(self, key: Key, index: int, delay_s: float) -> None:
        if not self._stopping and key in self.groups:
            self._feed(self.driver.on_member_started, key, index, delay_s=delay_s)

    def member_ended(self, key: Key, index: int, raised: bool) -> None:
        if not self._stopping and key in self.groups:
            self._feed(self.driver.on_member_ended, key, index, raised=raised)

    # ---------------------------------------------------------------------------------------------- trainer
    async def _train_loop(self) -> None:
        driver = self.driver
        assert self._settled is not None
        while not driver.finished:
            if self._fatal is not None:
                raise self._fatal
            self._settled.clear()
            step, decisions = driver.take_step(now=self.now())
            self._carry(decisions)
            self._drain()
            self._rearm()
            if step is None:
                if not self.groups and driver.next_deadline() is None:
                    d = driver.dispatcher
                    raise RuntimeStalled(
                        f"the run stalled at step {d.step}: no group runs and no step can complete "
                        f"({len(d.queue)} settled groups queued, {d.horizon.pipeline} in the pipeline)")
                await self._settled.wait()
                continue
            await self._train(step)
        if self._fatal is not None:
            raise self._fatal

    async def _train(self, step: TrainStep) -> None:
        row: dict[str, Any] = {}
        if self.evaluate is not None and self.driver.eval_due(step.step):
            row.update(await self._evaluate(step.step))
        fn = self.trainer.train_step
        datums = step.datums
        began = self.now()
        if inspect.iscoroutinefunction(fn):
            metrics = await fn(datums, version=step.version)
        else:
            metrics = await asyncio.to_thread(fn, datums, version=step.version)
        if self.trace is not None:
            self._trainer_span("train", began, step=step.step, datums=len(datums), tokens=_tokens(datums))
        self.trained.append(step)
        row.update({f"trainer/{k}": v for k, v in (metrics or {}).items()})
        workflow_metrics = getattr(self.workflow, "step_metrics", None)
        if workflow_metrics is not None:
            row.update(workflow_metrics())
        report = self.driver.finish_step(step, now=self.now(), metrics=row)
        self._note_in_flight(step.step, report.metrics)
        self._drain()
        self._write_row(step.step, self.now(), report.metrics)
        if self.run_dir is not None and report.checkpoint_due:
            await self._checkpoint(report.done, report.permanent)
        began = self.now()
        await self._publish(report.version)
        self._trainer_span("publish", began, version=report.version)
        self._feed(self.driver.publish)

    async def _evaluate(self, step: int) -> dict[str, Any]:
        """The ``eval/...`` metrics of the policy step ``step`` trains from: an ``async`` ``evaluate(slots)`` runs its
        rollouts on the loop, their start slots the run's (scope ``eval``, ``_EvalSlots``); a plain ``evaluate()``
        runs off the loop. Evaluation's start-limit metrics are added as ``eval/rollout_client/start_limit/...``."""
        assert self.evaluate is not None
        began = self.now()
        if inspect.iscoroutinefunction(self.evaluate):
            self._evaluations += 1
            metrics = dict(await self.evaluate(_EvalSlots(self, self._evaluations)))
        else:
            metrics = dict(await asyncio.to_thread(self.evaluate))
        self._trainer_span("eval", began, step=step)
        limit = self.driver.start_limit
        if limit is not None:
            metrics.update({f"eval/{k}": v for k, v in limit.metrics(now=self.now(), scope="eval").items()})
        self._drain()
        return metrics

    def _note_in_flight(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Warn (once per start) when more rollouts ran at once in the step than ``max_concurrent_rollouts``: by the
        dispatcher's count, or by the blocks this runtime saw running (late ones, on no permit, included)."""
        peak = max(float(metrics.get("rollout_client/rollouts_in_flight_max", 0.0)), float(self._in_blocks_max))
        self._in_blocks_max = len(self._in_blocks)
        warning = self._over_budget.note(peak, step=step)
        if warning is not None:
            self.log("warning", warning)

    def _write_row(self, step: int, now: float, metrics: dict) -> None:
        clean = {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in metrics.items()}
        row = metrics_row(step, now, clean)
        if self.run_dir is not None:
            self.run_dir.write_metrics(row)
        self.rows.append(row)
        if self.on_step is not None:
            self.on_step(row)

    async def _publish(self, version: int) -> None:
        getter = getattr(self.trainer, "policy_state_dict", None)
        weights = await asyncio.to_thread(getter) if getter is not None else None
        result = self.service.publish(weights, version)
        if inspect.isawaitable(result):
            await result

    async def _checkpoint(self, done: int, permanent: bool = False) -> None:
        """Capture the state now (on the loop, between two driver calls) and write it off the loop."""
        assert self.run_dir is not None
        data = await asyncio.to_thread(self.trainer_state) if self.trainer_state is not None else None
        files, row = self.driver.checkpoint(checkpoint_name(done), done)
        add_kept_file(files, row, checkpoint_name(done))
        row["clock_s"] = self.now()  # at or after every row and event logged so far: a resume's clock goes on here
        if data is not None:
            files[TRAINER_FILE] = data
        self._drain()
        if self.trace is not None:
            self.trace.flush()  # whole lines, before the lengths: a resume cuts the trace back to this point
        row["logs"] = self.run_dir.log_lengths()
        await asyncio.to_thread(self.run_dir.save, done, files, row, permanent)


class _EvalSlots:
    """The start slots of evaluation ``number``'s rollouts (``platoon.live.evaluate.EvalSlots``): rollout ``index``
    takes key ``("eval", number, index)`` of the run's start limit in scope ``eval``."""

    def __init__(self, runtime: LiveRuntime, number: int) -> None:
        self._runtime = runtime
        self._key = ("eval", number)

    async def take(self, index: int) -> float:
        return await self._runtime.take_slot(self._key, index, scope="eval")  # type: ignore[arg-type]

    def release(self, index: int, reason: str) -> None:
        self._runtime.release_slot(self._key, index, reason)  # type: ignore[arg-type]

    def warn(self, message: str) -> None:
        self._runtime.log("warning", message)


def _tokens(datums: Sequence[Any]) -> int:
    """The tokens a step trains: the length of each datum's ``tokens`` (a datum without them counts 0)."""
    return sum(len(d["tokens"]) for d in datums if isinstance(d, Mapping) and "tokens" in d)
