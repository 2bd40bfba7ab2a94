"""The asyncio runtime of the live backend: drives the policy layer's dispatcher on the event loop's clock.

Thin by rule: the dispatch policy is ``platoon.policy``'s. This module feeds the dispatcher events with
``now = loop.time() - start`` (seconds since this start of the run), carries out its decisions as asyncio tasks,
re-arms its deadline with ``loop.call_at``, and writes what it asks to be written:

- ``StartGroup`` -> a task running the workflow's ``arun_episode(row)`` with the group's lease in its context
  (``platoon.live.lease``); its end -> ``on_group_finished(key, output)`` (None when the workflow raised);
- a lease block entered -> ``on_block_entered``; the block goes on when its ``GrantPermit`` comes back (now, or from
  a later call); a cancelled wait -> ``on_block_cancelled``; its exit -> ``on_block_exited`` (teardowns still running
  hold the permit until ``on_teardowns_done`` or the dispatcher's deadline);
- ``train.max_starting_rollouts``: a ``StartLimit`` whose slots the workflow's members take inside their blocks;
- the trainer task: ``take_step`` (woken at each settle) and ``poll`` (a dequeue may free a place), the update **off the event loop** (``asyncio.to_thread``;
  an ``async def train_step`` is awaited), so rollouts go on while it trains, as far as the horizon lets them;
  ``commit_step``; the step's metrics row; a full checkpoint every ``train.checkpoint_every`` steps and at the
  end; the new weights published to the model service; ``publish``.

Every dispatcher call is followed by a drain of its outboxes: events to ``tasks/events.jsonl`` as they come,
warnings and infos to the log. ``eval/pass@1`` (held-out, the policy the step trains from) is measured before
steps 0, ``eval_every``, ... and once more for the final policy (a row ``{"step": steps, ...}``).

Metrics of its own, beside the dispatcher's and the trainer's (``trainer/<name>``): ``live/permit_busy_share``
(rollouts running, time-weighted, over ``max_concurrent_rollouts``: under ``group`` too, where a group holds its
permits while only some of its rollouts still run), ``live/trainer_idle_share``, ``live/rollouts``, and the trained
groups' ``train/reward_mean``, ``train/pass_rate``, ``train/informative_share``, ``train/staleness_mean``.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

from platoon.live.checkpoint import LiveRunDir, checkpoint_payload
from platoon.live.lease import RolloutLease, set_lease
from platoon.live.workflow import GroupRow
from platoon.policy.dispatcher import Dispatcher, StartGroup, StepPhase
from platoon.policy.outputs import GroupOutput, TrainStep
from platoon.policy.permits import GrantPermit
from platoon.policy.start_limit import SlotGranted, StartLimit
from platoon.policy.timeweighted import TimeWeighted
from platoon.runs import metrics_row

log = logging.getLogger("platoon.live")
Logger = Callable[[str, str], None]
Key = tuple[int, int]

__all__ = ["LiveRuntime", "RuntimeStalled"]


class RuntimeStalled(RuntimeError):
    """Nothing runs, nothing is due, and the trainer waits for a step that cannot complete."""


def _default_log(level: str, message: str) -> None:
    log.log(logging.WARNING if level == "warning" else logging.INFO, message)


class _Window:
    """Running sums of one step's window: rollouts at work, the trainer's idle time, rollouts ended."""

    def __init__(self) -> None:
        self.busy = TimeWeighted()
        self.total_busy = TimeWeighted()
        self.idle_since: float | None = 0.0
        self.idle = 0.0
        self.start = 0.0
        self.rollouts = 0

    def rollout(self, delta: int, now: float) -> None:
        self.busy.add(delta, now=now)
        self.total_busy.add(delta, now=now)
        if delta < 0:
            self.rollouts += 1

    def read(self, now: float, permits: int) -> dict[str, float]:
        busy, _ = self.busy.read(now=now)
        span = now - self.start
        idle = self.idle + (now - self.idle_since if self.idle_since is not None else 0.0)
        out = {"live/permit_busy_share": busy / permits,
               "live/trainer_idle_share": idle / span if span > 0 else 0.0,
               "live/rollouts": float(self.rollouts)}
        self.start, self.idle, self.rollouts = now, 0.0, 0
        if self.idle_since is not None:
            self.idle_since = now
        return out


class LiveRuntime:
    """One start of a live run (see the module docstring).

    ``workflow`` has ``async arun_episode(row: GroupRow) -> GroupOutput``; ``trainer`` has
    ``train_step(datums, version=) -> metrics`` (plain or ``async``), ``policy_state_dict()`` and ``state_dict()``;
    ``service`` has ``publish(weights, version)`` (plain or awaitable). ``run_dir`` None keeps events and metrics
    in memory (``events``, ``rows``) and writes no checkpoint. ``evaluate()`` returns the ``eval/...`` metrics of
    the trainer's current policy; it runs off the loop. ``trainer_state()`` returns the bytes of ``trainer.pt``.
    """

    def __init__(self, dispatcher: Dispatcher, workflow: Any, trainer: Any, service: Any, *,
                 run_dir: LiveRunDir | None = None, eval_every: int | None = None, checkpoint_every: int | None = None,
                 evaluate: Callable[[], Mapping[str, float]] | None = None,
                 trainer_state: Callable[[], bytes] | None = None, start_limit: StartLimit | None = None,
                 log: Logger | None = None, on_step: Callable[[dict], None] | None = None,
                 checkpoint_name: str | None = None) -> None:
        self.d = dispatcher
        self.workflow, self.trainer, self.service = workflow, trainer, service
        self.run_dir = run_dir
        self.eval_every, self.checkpoint_every = eval_every, checkpoint_every
        self.evaluate, self.trainer_state = evaluate, trainer_state
        self.start_limit = start_limit
        self.log = log or _default_log
        self.on_step = on_step
        self.resumed_from = checkpoint_name
        self.events: list[dict] = []
        self.rows: list[dict] = []
        self.trained: list[TrainStep] = []
        self.groups: dict[Key, asyncio.Task] = {}
        self._waiters: dict[tuple[Key, int], asyncio.Future] = {}
        self._granted_cancelled: set[tuple[Key, int]] = set()
        self._slot_waiters: dict[tuple[int, int, int], asyncio.Future] = {}
        self._running_blocks: set[tuple[Key, int]] = set()
        self._held_blocks: set[tuple[Key, int]] = set()
        self._late_warned: set[Key] = set()
        self._armed: dict[str, tuple[float, asyncio.TimerHandle] | None] = {"dispatch": None, "slots": None}
        self._window = _Window()
        self._settled: asyncio.Event | None = None
        self._fatal: BaseException | None = None
        self._stopping = False
        self._now = 0.0
        self._t0 = 0.0
        self.loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------------------------------------ clock
    def now(self) -> float:
        """Seconds since this start began, never going backwards."""
        assert self.loop is not None
        self._now = max(self._now, self.loop.time() - self._t0)
        return self._now

    # -------------------------------------------------------------------------------------------------- run
    async def run(self) -> None:
        """Run this start to the end of the plan (``train.steps``)."""
        self.loop = asyncio.get_running_loop()
        self._t0 = self.loop.time()
        self._settled = asyncio.Event()
        self._window = _Window()
        try:
            decisions = self.d.start(now=0.0, checkpoint=self.resumed_from)
            self._drain()
            if self.run_dir is not None:
                await self._checkpoint(self.d.step)  # the launch save: a start that dies later resumes from here
            self._carry(decisions)
            self._rearm()
            await self._train_loop()
            if self.evaluate is not None and self.eval_every is not None:
                metrics = await asyncio.to_thread(self.evaluate)
                self._write_row(self.d.config.steps, self.now(), dict(metrics))
        finally:
            await self._shutdown()

    async def _shutdown(self) -> None:
        self._stopping = True
        for armed in self._armed.values():
            if armed is not None:
                armed[1].cancel()
        tasks = list(self.groups.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._drain()
        if self.run_dir is not None:
            self.run_dir.close()
        close = getattr(self.service, "aclose", None)
        if close is not None:
            await close()

    def busy_share(self) -> float:
        """Rollouts at work over ``max_concurrent_rollouts``, time-weighted over the whole start so far."""
        mean, _ = self._window.total_busy.read(now=self.now())
        return mean / self.d.config.max_concurrent_rollouts

    # ------------------------------------------------------------------------------------------- dispatcher
    def _feed(self, handler: Callable[..., list], *args: Any, **kwargs: Any) -> None:
        """Call a dispatcher handler at ``now``, carry out its decisions, drain its outboxes, re-arm deadlines."""
        decisions = handler(*args, now=self.now(), **kwargs)
        self._carry(decisions)
        self._drain()
        self._rearm()

    def _carry(self, decisions: list) -> None:
        for dec in decisions:
            if isinstance(dec, GrantPermit):
                self._grant(dec)
            elif isinstance(dec, StartGroup):
                self._start_group(dec)
            elif isinstance(dec, SlotGranted):
                self._slot_granted(dec)
            else:
                raise TypeError(f"the live runtime cannot carry out {dec!r}")

    def _drain(self) -> None:
        events = self.d.take_events()
        if self.run_dir is not None:
            self.run_dir.write_events(events)
        else:
            self.events.extend(events)
        for message in self.d.take_infos():
            self.log("info", message)
        warnings = self.d.take_warnings() + self.d.recorder.take_warnings() + self.d.samplers.take_warnings()
        if self.start_limit is not None:
            warnings += self.start_limit.take_warnings()
        for message in warnings:
            self.log("warning", message)

    def _rearm(self) -> None:
        if self._stopping or self.loop is None:
            return
        sources = {"dispatch": self.d.next_deadline,
                   "slots": self.start_limit.next_deadline if self.start_limit is not None else (lambda: None)}
        for name, next_deadline in sources.items():
            due = next_deadline()
            armed = self._armed[name]
            if armed is not None and armed[0] == due:
                continue
            if armed is not None:
                armed[1].cancel()
            self._armed[name] = None
            if due is not None:
                handle = self.loop.call_at(self._t0 + due, self._on_deadline, name, due)
                self._armed[name] = (due, handle)

    def _on_deadline(self, name: str, due: float) -> None:
        self._armed[name] = None
        self._now = max(self.now(), due)  # a timer may fire a clock tick early
        try:
            if name == "dispatch":
                self._feed(self.d.on_deadline)
            else:
                assert self.start_limit is not None
                self._feed(self.start_limit.on_deadline)
        except Exception as exc:  # noqa: BLE001 - a bug of the runtime or the policy: end the run with it
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        if self._fatal is None:
            self._fatal = exc
        if self._settled is not None:
            self._settled.set()

    # ----------------------------------------------------------------------------------------------- groups
    def _start_group(self, dec: StartGroup) -> None:
        assert self.loop is not None
        data = self.d.pool.rows[dec.row_index].data if 0 <= dec.row_index < len(self.d.pool.rows) else {}
        row = GroupRow(dec.key, dec.task_id, dec.entry, dec.group_size, dec.version, dec.row_index, data)
        context = contextvars.copy_context()
        context.run(set_lease, RolloutLease(self, dec.key, dec.group_size))
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
        if self._stopping:
            return
        try:
            self._feed(self.d.on_group_finished, key, output)
            for (k, index), fut in list(self._waiters.items()):
                if k == key:  # blocks of a workflow whose tasks outlived it: they run on no permit
                    del self._waiters[(k, index)]
                    self._warn_late(key, row.task_id)
                    if not fut.done():
                        fut.set_result(GrantPermit(key, index, 0.0, False))
        except Exception as exc:  # noqa: BLE001
            self._fail(exc)
        assert self._settled is not None
        self._settled.set()

    def _warn_late(self, key: Key, task_id: str) -> None:
        if key not in self._late_warned:
            self._late_warned.add(key)
            self.log("warning", f"a rollout of task {task_id} (group {key}) ran after its group's draw was "
                                "released: it runs on no permit, so more rollouts can run than the budget")

    # ------------------------------------------------------------------------------------------- lease host
    async def enter_block(self, key: Key, index: int) -> float:
        """A member's block is entered (``platoon.live.lease``): wait for its permit; the seconds waited."""
        if key not in self.d.running:
            self._warn_late(key, str(key))
            return 0.0
        assert self.loop is not None
        k = (key, index)
        fut = self.loop.create_future()
        self._waiters[k] = fut
        try:
            self._feed(self.d.on_block_entered, key, index)
        except BaseException:
            if self._waiters.get(k) is fut:
                del self._waiters[k]
            raise
        try:
            grant = fut.result() if fut.done() else await fut
        except asyncio.CancelledError:
            granted = k in self._granted_cancelled or (fut.done() and not fut.cancelled())
            self._granted_cancelled.discard(k)
            self._waiters.pop(k, None)
            if not self._stopping:
                if granted:  # granted at the instant of cancellation: the permit goes back at once
                    self.exit_block(key, index, [])
                else:
                    self._feed(self.d.on_block_cancelled, key, index)
            raise
        return grant.waited_s

    def _grant(self, dec: GrantPermit) -> None:
        k = (dec.key, dec.index)
        fut = self._waiters.pop(k, None)
        if fut is None:
            raise RuntimeError(f"GrantPermit for rollout {dec.index} of group {dec.key}, which does not wait")
        self._running_blocks.add(k)
        if dec.held:
            self._held_blocks.add(k)
        self._window.rollout(+1, self.now())
        if fut.cancelled():
            self._granted_cancelled.add(k)
        else:
            fut.set_result(dec)

    @property
    def teardown_wait_s(self) -> float:
        return self.d.config.teardown_wait_s

    def exit_block(self, key: Key, index: int, teardowns: list[asyncio.Task]) -> bool:
        """A member's block exited; ``teardowns`` still running hold its permit until they end (True: the block
        waits for them)."""
        k = (key, index)
        if k not in self._running_blocks:
            return False  # a block that ran on no permit after its draw was released
        self._running_blocks.discard(k)
        held = k in self._held_blocks
        self._held_blocks.discard(k)
        self._window.rollout(-1, self.now())
        if self._stopping:
            return False
        if not teardowns or not held:
            self._feed(self.d.on_block_exited, key, index)
            return False
        self._feed(self.d.on_block_exited, key, index, teardowns_pending=True)
        waiting = asyncio.gather(*teardowns, return_exceptions=True)
        waiting.add_done_callback(lambda _f: self._teardowns_done(key, index))
        return True

    def _teardowns_done(self, key: Key, index: int) -> None:
        if self._stopping:
            return
        try:
            self._feed(self.d.on_teardowns_done, key, index)
        except Exception as exc:  # noqa: BLE001
            self._fail(exc)

    async def take_slot(self, key: Key, index: int) -> float:
        if self.start_limit is None:
            return 0.0
        assert self.loop is not None
        k3 = (key[0], key[1], index)
        if self.start_limit.request(k3, now=self.now(), scope="train"):
            self._rearm()
            return 0.0
        fut = self.loop.create_future()
        self._slot_waiters[k3] = fut
        try:
            granted = await fut
        except asyncio.CancelledError:
            self._slot_waiters.pop(k3, None)
            if not self._stopping:
                self._feed(self.start_limit.cancel, k3)
            raise
        return granted.waited_s

    def _slot_granted(self, dec: SlotGranted) -> None:
        fut = self._slot_waiters.pop(dec.key, None)  # type: ignore[arg-type]
        if fut is not None and not fut.done():
            fut.set_result(dec)

    def release_slot(self, key: Key, index: int, reason: str) -> None:
        if self.start_limit is None or self._stopping:
            return
        self._feed(self.start_limit.release, (key[0], key[1], index), reason)

    # ---------------------------------------------------------------------------------------------- trainer
    async def _train_loop(self) -> None:
        d = self.d
        assert self._settled is not None
        while d.phase is not StepPhase.FINISHED:
            if self._fatal is not None:
                raise self._fatal
            self._settled.clear()
            step = d.take_step(now=self.now())
            self._drain()
            self._feed(d.poll)  # a dequeue can free a horizon place under an admission rule
            if step is None:
                if not self.groups and d.next_deadline() is None and (
                        self.start_limit is None or self.start_limit.next_deadline() is None):
                    raise RuntimeStalled(
                        f"the run stalled at step {d.step}: no group runs and no step can complete "
                        f"({len(d.queue)} settled groups queued, {d.pipeline} in the pipeline)")
                await self._settled.wait()
                continue
            await self._train(step)
        if self._fatal is not None:
            raise self._fatal

    async def _train(self, step: TrainStep) -> None:
        d = self.d
        row: dict[str, Any] = {}
        if self.evaluate is not None and self.eval_every is not None and step.step % self.eval_every == 0:
            row.update(await asyncio.to_thread(self.evaluate))
        now = self.now()
        if self._window.idle_since is not None:
            self._window.idle += now - self._window.idle_since
            self._window.idle_since = None
        fn = self.trainer.train_step
        if inspect.iscoroutinefunction(fn):
            metrics = await fn(step.datums, version=step.version)
        else:
            metrics = await asyncio.to_thread(fn, step.datums, version=step.version)
        self.trained.append(step)
        d.commit_step(now=self.now())
        self._drain()
        now = self.now()
        out = d.step_metrics(now=now)
        out.update(self._window.read(now, d.config.max_concurrent_rollouts))
        out.update(self._batch_metrics(step))
        out.update({f"trainer/{k}": v for k, v in (metrics or {}).items()})
        if self.start_limit is not None:
            out.update(self.start_limit.metrics(now=now, scope="train"))
        out.update(row)
        self._drain()
        self._write_row(step.step, now, out)
        done = step.step + 1
        if self.run_dir is not None and self.checkpoint_every is not None and (
                done % self.checkpoint_every == 0 or done == d.config.steps):
            await self._checkpoint(done)
        await self._publish(step.version + 1)
        self._window.idle_since = self.now()
        self._feed(d.publish)

    def _write_row(self, step: int, now: float, metrics: dict) -> None:
        clean = {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in metrics.items()}
        row = metrics_row(step, now, clean)
        if self.run_dir is not None:
            self.run_dir.write_metrics(row)
        self.rows.append(row)
        if self.on_step is not None:
            self.on_step(row)

    def _batch_metrics(self, step: TrainStep) -> dict[str, float]:
        """Reward, pass rate, informative share and staleness of the groups the step trained."""
        rewards: list[float] = []
        passes = 0
        valid = 0
        lags: list[int] = []
        for g in step.groups:
            entry = self.d.pool.entries.get(g.entry) if g.entry is not None else None
            threshold = entry.success_threshold if entry is not None else 1.0
            for m in g.record.members:
                if m.valid:
                    valid += 1
                    passes += m.passes(threshold)
                    if m.reward is not None:
                        rewards.append(float(m.reward))
            oldest = g.record.oldest_version()
            if oldest is not None:
                lags.append(step.version - oldest)
        groups = len(step.groups)
        informative = sum(1 for g in step.groups if g.output is not None and g.output.verdict == "trained")
        return {"train/reward_mean": sum(rewards) / len(rewards) if rewards else 0.0,
                "train/pass_rate": passes / valid if valid else 0.0,
                "train/informative_share": informative / groups if groups else 0.0,
                "train/staleness_mean": sum(lags) / len(lags) if lags else 0.0}

    async def _publish(self, version: int) -> None:
        getter = getattr(self.trainer, "policy_state_dict", None)
        weights = await asyncio.to_thread(getter) if getter is not None else None
        result = self.service.publish(weights, version)
        if inspect.isawaitable(result):
            await result

    async def _checkpoint(self, done: int) -> None:
        """Capture the state now (on the loop, between two dispatcher calls) and write it off the loop."""
        assert self.run_dir is not None
        data = await asyncio.to_thread(self.trainer_state) if self.trainer_state is not None else None
        files, row = checkpoint_payload(self.d, done, data)
        self._drain()
        row["logs"] = self.run_dir.log_lengths()
        await asyncio.to_thread(self.run_dir.save, done, files, row)
