"""The lease face a workflow sees: ``rollout_lease()`` and ``async with rollout_lease().rollout(i) as waited_s:``.

What this module owns: the context variable that holds the lease of the training draw whose workflow is running, the
block a member's rollout runs in, and the background teardowns a block registers. The bookkeeping itself (which
index may enter, which permit goes where) is the dispatcher's (``platoon.policy.permits``); a block only asks the
runtime (its ``LeaseHost``), which feeds the dispatcher and answers when the block's ``GrantPermit`` comes back.

Rules it keeps (docs/dispatch.md, docs/live-runtime.md):

- The runtime sets the lease around a training group's ``arun_episode``; asyncio tasks the workflow creates inherit
  it, executor threads do not. Outside a training draw (an evaluation, a test, a direct call) ``rollout_lease()`` is
  the no-op lease: size 0, and every ``rollout(i)``, for any ``i``, enters at once, yields 0.0, holds nothing and
  never raises.
- Entering a block of a training draw asks the dispatcher (``on_block_entered``): an index outside the draw's size
  raises IndexError and a second block for an index RuntimeError, under either ``permit_release``. The block yields
  the seconds it waited for its permit (exactly 0.0 when one was free). A wait that is cancelled frees the index
  (``on_block_cancelled``); a permit granted at the instant of cancellation goes back at once.
- Exiting the block returns its permit (``on_block_exited``). Background teardowns registered in the block
  (``background_teardown``) that still run then hold the permit, ``teardowns_pending=True``, until they end
  (``on_teardowns_done``) or the dispatcher's 60 s wait runs out, and the block waits for them as long; a
  cancellation ends that wait (never the teardowns), and a rollout that had ended keeps its outcome. A block that
  holds no permit (``permit_release: group``) does not wait.
- A traced group's lease (``trace``, a ``platoon.live.rollouts.rollout_trace.GroupTrace``) gives each block a rollout
  lane of ``trace.json``: the block writes ``permit_wait`` and, when it exits (after its teardowns, when it waits for
  them), ``rollout``; the rollout's body sees the trace (``rollout_trace.current()``), so ``first_model_call`` writes
  ``startup`` and ``background_teardown`` ``teardown``. An untraced block costs one check.
- ``no_lease()`` clears the lease for a member's own rollout, so that a group that a rollout runs in turn sees the
  no-op lease and takes no permits of its own.
- A group's members report to their host when their rollout starts and ends (``members_host``): the runtime's
  driver answers with the cancellations its rules decide (a failing group's others, straggler cuts), which the host
  carries out on the member tasks the group registered. Outside a training draw, ``LocalMembers`` applies the same
  rules (``platoon.policy.members``) on the event loop's clock.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol

from platoon.live.rollouts import rollout_trace
from platoon.live.rollouts.rollout_trace import GroupTrace, RolloutTrace
from platoon.policy import CancelRollout, MemberWatch

Key = tuple[int, int]

__all__ = ["LeaseHost", "LocalMembers", "MembersHost", "RolloutLease", "background_teardown", "first_model_call", "no_lease", "rollout_lease",
           "rollout_scope"]


class LeaseHost(Protocol):
    """What a lease asks of its runtime (``platoon.live.runtime.LiveRuntime`` is one)."""

    async def enter_block(self, key: Key, index: int) -> float:
        """Feed ``on_block_entered`` and wait for the block's permit; the seconds waited. Raises what the
        dispatcher's lease bookkeeping raises (IndexError, RuntimeError)."""
        ...

    def exit_block(self, key: Key, index: int, teardowns: list[asyncio.Task]) -> asyncio.Future | None:
        """Feed ``on_block_exited`` (with ``teardowns`` still running); what the block waits for before it is done
        when the driver holds its permit for them (None: nothing)."""
        ...

    async def take_slot(self, key: Key, index: int) -> float:
        """Take a start slot (``train.max_starting_rollouts``) for member ``index``; the seconds waited (0.0 without
        a limit)."""
        ...

    def release_slot(self, key: Key, index: int, reason: str) -> None:
        """Give the member's slot back: ``first_call``, ``end`` or ``cancelled`` (once; later calls do nothing)."""
        ...


class MembersHost(Protocol):
    """Where a group's members report (the runtime in a training draw, else ``LocalMembers``)."""

    def register_members(self, key: Key, tasks: list[asyncio.Future]) -> None:
        """The member tasks a ``CancelRollout`` of group ``key`` cancels."""
        ...

    def member_started(self, key: Key, index: int, delay_s: float) -> None:
        ...

    def member_ended(self, key: Key, index: int, raised: bool) -> None:
        ...


class LocalMembers:
    """The members' rules of ``platoon.policy.members`` for a group outside a training draw, on the loop's clock."""

    def __init__(self, watch: MemberWatch) -> None:
        self.watch = watch
        self.loop = asyncio.get_running_loop()
        self.t0 = self.loop.time()
        self.tasks: dict[Key, list[asyncio.Future]] = {}
        self._timer: asyncio.TimerHandle | None = None

    def now(self) -> float:
        return self.loop.time() - self.t0

    def register_members(self, key: Key, tasks: list[asyncio.Future]) -> None:
        self.tasks[key] = tasks
        self.watch.open(key, len(tasks))
        for i in range(len(tasks)):
            self.watch.on_granted(key, i)  # no permits here: every member holds its (absent) permit at once

    def member_started(self, key: Key, index: int, delay_s: float) -> None:
        self.watch.on_started(key, index, now=self.now(), delay_s=delay_s)
        self._rearm()

    def member_ended(self, key: Key, index: int, raised: bool) -> None:
        self._carry(self.watch.on_ended(key, index, now=self.now(), raised=raised))
        self._rearm()

    def close(self, key: Key) -> None:
        self.watch.close(key)
        self.tasks.pop(key, None)
        if self._timer is not None:
            self._timer.cancel()

    def _carry(self, cancels: list[CancelRollout]) -> None:
        for c in cancels:
            task = self.tasks[c.key][c.index]
            if not task.done():
                task.cancel(c.reason)

    def _rearm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        due = self.watch.next_deadline()
        self._timer = None if due is None else self.loop.call_at(self.t0 + due, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._carry(self.watch.on_deadline(now=max(self.now(), self.watch.next_deadline() or 0.0)))
        self._rearm()


_LEASE: ContextVar[RolloutLease | None] = ContextVar("platoon_rollout_lease", default=None)
_TEARDOWNS: ContextVar[list[asyncio.Task] | None] = ContextVar("platoon_block_teardowns", default=None)
_FIRST_CALL: ContextVar[Callable[[], None] | None] = ContextVar("platoon_first_call", default=None)


class RolloutLease:
    """The permits of one training draw, or (``host`` None) the no-op lease. Use ``rollout_lease()``. ``trace``: the
    draw's rollouts are traced (see the module docstring)."""

    def __init__(self, host: LeaseHost | None = None, key: Key | None = None, size: int = 0,
                 trace: GroupTrace | None = None) -> None:
        self._host = host
        self.key = key
        self.size = size if host is not None else 0
        self.trace = trace if host is not None else None

    @property
    def active(self) -> bool:
        """False for the no-op lease (outside a training draw)."""
        return self._host is not None

    def rollout(self, index: int) -> _Block:
        """The block member ``index`` runs its rollout in: ``async with lease.rollout(i) as waited_s: ...``."""
        if self._host is not None:
            index = operator.index(index)
        return _Block(self, index)

    def start_slot(self, index: int) -> _Slot:
        """The start slot member ``index`` takes inside its block, once it holds its permit
        (``train.max_starting_rollouts``): ``async with lease.start_slot(i) as waited_s``. The slot comes back at the
        rollout's first model call (``first_model_call``), at the block's end, or when it is cancelled; the no-op
        lease takes none."""
        return _Slot(self, index)

    def members_host(self) -> MembersHost | None:
        """The host a training draw's members report to (None for the no-op lease)."""
        return self._host  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"RolloutLease(key={self.key}, size={self.size})" if self.active else "RolloutLease(no-op)"


NO_LEASE = RolloutLease()


class _Block:
    """One member's block; see the module docstring."""

    def __init__(self, lease: RolloutLease, index: int) -> None:
        self._lease = lease
        self._index = index
        self._teardowns: list[asyncio.Task] = []
        self._token = None
        self._trace: RolloutTrace | None = None
        self._trace_token = None
        self._entered = False

    async def __aenter__(self) -> float:
        host = self._lease._host
        if self._entered and host is not None:
            raise RuntimeError("a lease block is entered once; call lease.rollout(i) again for another")
        self._entered = True
        waited = 0.0
        if host is not None:
            assert self._lease.key is not None
            trace = self._trace = self._lease.trace.member(self._index) if self._lease.trace is not None else None
            try:
                waited = await host.enter_block(self._lease.key, self._index)
            except BaseException as exc:
                if trace is not None:  # it never ran: its wait and a rollout that ended in it
                    trace.permit_granted()
                    trace.end(rollout_trace.status_of(type(exc)))
                raise
            if trace is not None:
                trace.permit_granted()
                self._trace_token = trace.token()
        self._token = _TEARDOWNS.set(self._teardowns)
        return waited

    async def __aexit__(self, exc_type: type | None, *exc_info: object) -> None:
        if self._token is not None:
            try:
                _TEARDOWNS.reset(self._token)
            except ValueError:  # closed by the garbage collector outside its task's context
                pass
            self._token = None
        if self._trace_token is not None:
            rollout_trace.reset(self._trace_token)
            self._trace_token = None
        try:
            await self._exit(exc_type)
        finally:
            if self._trace is not None:
                self._trace.end(rollout_trace.status_of(exc_type))

    async def _exit(self, exc_type: type | None) -> None:
        host = self._lease._host
        if host is None:
            return
        assert self._lease.key is not None
        pending = [t for t in self._teardowns if not t.done()]
        wait = host.exit_block(self._lease.key, self._index, pending)
        if wait is None:
            return
        try:
            await asyncio.wait([wait])
        except asyncio.CancelledError:
            # A cancellation ends the wait, not the teardowns; a rollout that had ended keeps its outcome.
            if exc_type is not None:
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()


class _Slot:
    def __init__(self, lease: RolloutLease, index: int) -> None:
        self._lease = lease
        self._index = index
        self._token = None

    def _release(self, reason: str) -> None:
        host = self._lease._host
        if host is not None:
            assert self._lease.key is not None
            host.release_slot(self._lease.key, self._index, reason)

    async def __aenter__(self) -> float:
        host = self._lease._host
        if host is None:
            return 0.0
        assert self._lease.key is not None
        waited = await host.take_slot(self._lease.key, self._index)
        self._token = _FIRST_CALL.set(lambda: self._release("first_call"))
        return waited

    async def __aexit__(self, exc_type: type | None, *exc_info: object) -> None:
        if self._token is None:
            return
        _FIRST_CALL.reset(self._token)
        self._token = None
        self._release("cancelled" if exc_type is not None and issubclass(exc_type, asyncio.CancelledError)
                      else "end")


def first_model_call() -> None:
    """Signal that this rollout issued its first model call: its start slot, if it holds one, comes back."""
    callback = _FIRST_CALL.get()
    if callback is not None:
        callback()
    trace = rollout_trace.current()
    if trace is not None:
        trace.first_model_call()


@contextmanager
def rollout_scope(first_call: Callable[[], None], teardowns: list[asyncio.Task]) -> Iterator[None]:
    """Run a rollout outside any block, as a rollout worker does (``platoon.live.workers``): its first model call
    calls ``first_call`` and its background teardowns collect in ``teardowns`` (the trainer's block waits for them
    through the worker)."""
    first = _FIRST_CALL.set(first_call)
    scope = _TEARDOWNS.set(teardowns)
    try:
        yield
    finally:
        _TEARDOWNS.reset(scope)
        _FIRST_CALL.reset(first)


def rollout_lease() -> RolloutLease:
    """The lease of the training draw whose workflow runs in this context, else the no-op lease."""
    lease = _LEASE.get()
    return lease if lease is not None else NO_LEASE


def set_lease(lease: RolloutLease | None) -> Any:
    """Set the context's lease (the runtime, around a group's ``arun_episode``); returns the reset token."""
    return _LEASE.set(lease)


@contextmanager
def no_lease() -> Iterator[None]:
    """Run the body with the no-op lease (a member's own rollout)."""
    token = _LEASE.set(None)
    try:
        yield
    finally:
        _LEASE.reset(token)


def background_teardown(aw: Awaitable[Any] | Coroutine[Any, Any, Any]) -> asyncio.Task:
    """Finish ``aw`` (a sandbox's or an env session's teardown) in the background, as a task.

    Inside a lease block the block's permit waits for it (at most the dispatcher's teardown wait); the teardown is
    never cancelled by its block, whatever ends the block. Outside a block it simply runs.
    """
    task = asyncio.ensure_future(aw)
    scope = _TEARDOWNS.get()
    if scope is not None:
        scope.append(task)
        trace = rollout_trace.current()
        if trace is not None:
            trace.teardown(task)
    return task
