"""The rollout lanes of a live run's ``trace.json`` (docs/run-directory.md, "trace.json").

What this module owns: the spans of one traced rollout, on a lane of its own. The runtime decides per group whether
its rollouts are traced (``TraceWriter.wants(position)``) and gives a traced group's lease a ``GroupTrace``; each
member's lease block (``platoon.live.rollouts.lease``) then takes a ``RolloutTrace`` when it asks for its permit and
puts it in this module's context variable for its body, where the points a rollout passes report to it:

- the block: ``permit_wait`` (asked -> granted), and ``rollout`` over the whole when it exits, with ``task_id``,
  ``group`` (its key as a list), ``member``, ``version`` (the group's draw), ``turns``, ``reward``, ``passed`` and
  ``status`` (``ok``, ``failed``, ``cancelled``), and, for a rollout on a Ray actor, its ``node`` and ``actor``
  (``ran_on``);
- ``first_model_call()``: ``startup``, from the permit up to the first model call;
- the workflow's model-call wrapper: ``model_call`` per call (``batch``: the sequences of the batch it rode in, when
  the service says); ``play_episode``: ``env_step`` per step; ``background_teardown``: ``teardown``;
- the workflow, once the rollout returned: its reward and success (``note_result``).

A rollout's lane is given back once its ``rollout`` span and every teardown it started have ended, so no two
rollouts' spans share a lane at once. An untraced rollout costs one context-variable read at each of those points.
Everything here runs on the event loop's thread (the writer is single-threaded).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from platoon.runs.trace import SERVICE, TRAINER, TraceWriter

__all__ = ["GroupTrace", "RolloutTrace", "TrainerTrack", "current", "note_result"]

_TRACE: ContextVar[RolloutTrace | None] = ContextVar("platoon_rollout_trace", default=None)


def current() -> RolloutTrace | None:
    """The trace of the rollout running in this context (None: untraced, or outside a block)."""
    return _TRACE.get()


def use(trace: Any) -> Any:
    """Make ``trace`` the context's rollout trace (a rollout worker's stand-in, ``platoon.live.workers.worker``);
    returns the reset token."""
    return _TRACE.set(trace)


def reset(token: Any) -> None:
    """Undo ``RolloutTrace.token()`` (a block's exit; one closed outside its task's context is left alone)."""
    try:
        _TRACE.reset(token)
    except ValueError:
        pass


def note_result(result: Any) -> None:
    """The rollout of this context returned ``result`` (a ``Rollout``): its reward and success go on its span."""
    trace = _TRACE.get()
    if trace is not None:
        trace.outcome(result)


class GroupTrace:
    """What the rollouts of one traced group share: the writer, the run's clock, and the group's identity."""

    def __init__(self, writer: TraceWriter, clock: Callable[[], float], *, task_id: str, key: tuple[int, int],
                 version: int) -> None:
        self.writer, self.clock = writer, clock
        self.task_id, self.key, self.version = task_id, key, version

    def member(self, index: int) -> RolloutTrace:
        """The trace of member ``index``, asking for its permit now (it takes a lane)."""
        return RolloutTrace(self, index)


class RolloutTrace:
    """The spans of one traced rollout (see the module docstring)."""

    def __init__(self, group: GroupTrace, member: int) -> None:
        self.group, self.member = group, member
        self.writer, self.clock = group.writer, group.clock
        self.lane = self.writer.open_lane()
        self.asked = self.clock()
        self.granted: float | None = None
        self.started = False  # its first model call was made
        self.turns = 0
        self.steps_seen: int | None = None  # the turns of the trajectory it returned, for a workflow that samples
        self.reward: float | None = None    # without the model-call wrapper
        self.passed = False
        self._teardowns = 0
        self._ended = False
        self.host: dict[str, str] = {}  # where it ran, when not here (a Ray actor: its node and name)

    def _span(self, name: str, start: float, end: float, **args: Any) -> None:
        self.writer.span(name, self.lane, start, end, **args)

    # --- what the block and the rollout report ------------------------------------------------------------
    def token(self) -> Any:
        """Make this the context's rollout trace (the block's body); returns the reset token."""
        return _TRACE.set(self)

    def permit_granted(self) -> None:
        self.granted = self.clock()
        self._span("permit_wait", self.asked, self.granted)

    def first_model_call(self) -> None:
        if not self.started and self.granted is not None:
            self.started = True
            self._span("startup", self.granted, self.clock())

    def model_call(self, start: float, batch: int = 0, server: int | None = None, concurrency: float = 0.0) -> None:
        """A model call that began at ``start`` returned now; ``batch``: its batch's sequences (0: not known);
        ``server`` and ``concurrency``: the inference server that answered and its mean requests in flight."""
        self.turns += 1
        args: dict[str, Any] = {"batch": batch} if batch > 0 else {}
        if server is not None:
            args.update(server=server, concurrency=round(concurrency, 4))
        self._span("model_call", start, self.clock(), **args)

    def env_step(self, start: float, end: float | None = None) -> None:
        """A step that began at ``start`` ended at ``end`` (None: now; a rollout worker's step: when it said)."""
        self._span("env_step", start, self.clock() if end is None else end)

    def ran_on(self, **where: str) -> None:
        """The rollout runs elsewhere (``node=``, ``actor=``): its ``rollout`` span says where."""
        self.host = dict(where)

    def on_actor(self, track: str, start: float) -> None:
        """The rollout held a Ray actor from ``start`` to now: an ``on_actor`` span on the actor's own track."""
        self.writer.span("on_actor", track, start, self.clock(), task_id=self.group.task_id, group=list(self.group.key),
                         member=self.member)

    def outcome(self, result: Any) -> None:
        trajectory = getattr(result, "trajectory", None)
        if trajectory is None:
            return
        reward = float(trajectory.reward)
        self.reward = reward if math.isfinite(reward) else None
        self.passed = bool(trajectory.success)
        self.steps_seen = len(trajectory.turns)

    def teardown(self, task: asyncio.Future) -> None:
        """A background teardown started now; its span is written when it ends, and the lane waits for it."""
        start = self.clock()
        self._teardowns += 1

        def done(_task: asyncio.Future) -> None:
            self._teardowns -= 1
            self._span("teardown", start, self.clock())
            self._release()

        task.add_done_callback(done)

    def end(self, status: str) -> None:
        """The rollout's block exited (``ok``, ``failed`` or ``cancelled``): its ``rollout`` span."""
        if self._ended:
            return
        self._ended = True
        g = self.group
        turns = self.turns if self.turns or self.steps_seen is None else self.steps_seen
        self._span("rollout", self.asked, self.clock(), task_id=g.task_id, group=list(g.key), member=self.member,
                   version=g.version, turns=turns, reward=self.reward if status == "ok" else None,
                   passed=self.passed and status == "ok", status=status, **self.host)
        self._release()

    def _release(self) -> None:
        if self._ended and self._teardowns == 0 and self.lane >= 0:
            self.writer.close_lane(self.lane)
            self.lane = -1


def status_of(exc_type: type | None) -> str:
    """A block's exit as a rollout's ``status``."""
    if exc_type is None:
        return "ok"
    return "cancelled" if issubclass(exc_type, asyncio.CancelledError) else "failed"


class TrainerTrack:
    """The trainer's spans (``train``, ``publish``, ``eval``) of a live run's trace, and the model service's
    ``batch`` spans when it can be observed (``observe_batches``: timed in its worker on ``thread_clock``, a
    thread-safe reading of the run's clock, written on the loop). ``trace`` None: nothing is written."""

    def __init__(self, trace: TraceWriter | None, now: Callable[[], float], thread_clock: Callable[[], float]) -> None:
        self.trace, self.now, self.thread_clock = trace, now, thread_clock

    def span(self, name: str, began: float, *, track: str = TRAINER, **args: Any) -> None:
        """A span from ``began`` to now on ``track`` (the trainer's, or the model service's)."""
        if self.trace is not None:
            self.trace.span(name, track, began, self.now(), **args)

    def published(self, began: float, version: int, pause_s: float | None = None) -> None:
        """The ``publish`` span from ``began``, and, when an inference engine's servers paused for it (``pause_s``,
        its last part), the ``pause`` span on the model service's track."""
        self.span("publish", began, version=version)
        if pause_s is not None:
            self.span("pause", self.now() - pause_s, track=SERVICE, version=version)

    def observe(self, service: Any, on: bool = True) -> None:
        """Write ``service``'s batches (``on`` False: stop)."""
        observe = getattr(service, "observe_batches", None)
        if observe is not None and self.trace is not None:
            observe(self._on_batch if on else None, self.thread_clock)

    def _on_batch(self, span: Any) -> None:
        if self.trace is not None:
            self.trace.span("batch", SERVICE, span.start_s, span.end_s, size=span.size,
                            prompt_tokens=span.prompt_tokens, new_tokens=span.new_tokens)
