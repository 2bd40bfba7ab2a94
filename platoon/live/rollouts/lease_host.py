"""The lease host: where a training group's blocks, start slots and members meet the driver, on the event loop.

What this module owns (the face a workflow sees is ``platoon.live.rollouts.lease``): turning what a member's block does
at any instant — entering, waiting, being cancelled while it waits, exiting with teardowns still running — into the
event (``platoon.policy.events``) that says so, and waiting for the decision that answers it. Rules it keeps:

- A block entered reports ``BlockEntered`` and waits for its ``GrantPermit`` (one that enters after its group's
  draw was released gets one at once, on no permit: the driver's rule). A wait that is cancelled reports
  ``BlockCancelled``; a permit granted at the instant of cancellation goes back (the block exits at once).
- A start slot (``train.max_starting_rollouts``) is asked for with ``SlotRequested`` and waited for until its
  ``SlotGranted`` (at once when one is free); a wait that is cancelled reports ``SlotWaitCancelled``.
- A block that exits reports ``BlockExited``; when the driver holds its permit for its teardowns
  (``AwaitTeardowns``), the block waits until they end (``TeardownsEnded``) or the driver gives the permit back
  (``EndTeardownWait``).
- Members report their start and end; ``CancelRollout`` cancels the member's task with its reason.
- While the run stops (``stopping()``), nothing is fed: the driver is done with this start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from platoon.policy import (
    BlockCancelled,
    BlockEntered,
    BlockExited,
    Driver,
    Event,
    Key,
    MemberEnded,
    MemberStarted,
    SlotReleased,
    SlotRequested,
    SlotWaitCancelled,
    TeardownsEnded,
)

Feed = Callable[[Event], None]


class LeaseHost:
    """The driver's side of every training lease of one start (see the module docstring). ``feed(event)`` reports an
    event to the driver at the run's clock and carries out what it answers; ``now()`` is that clock."""

    def __init__(self, driver: Driver, *, feed: Feed, rearm: Callable[[], None], now: Callable[[], float],
                 stopping: Callable[[], bool], groups: Callable[[], Any]) -> None:
        self.driver, self._feed, self._rearm, self.now = driver, feed, rearm, now
        self.stopping, self._groups = stopping, groups
        self.permit_waiters: dict[tuple[Key, int], asyncio.Future] = {}
        self.slot_waiters: dict[tuple[Key, int], asyncio.Future] = {}
        self.teardown_waits: dict[tuple[Key, int], asyncio.Future] = {}
        self.members: dict[Key, list[asyncio.Future]] = {}

    # ---------------------------------------------------------------------------------- decisions carried out
    def granted(self, key: Key, index: int, decision: Any, what: str) -> None:
        """A ``GrantPermit`` or ``SlotGranted`` for the block or member that waits for it."""
        waiters = self.permit_waiters if what == "GrantPermit" else self.slot_waiters
        fut = waiters.pop((key, index), None)
        if fut is None:
            raise RuntimeError(f"{what} for rollout {index} of group {key}, which does not wait")
        if not fut.done():
            fut.set_result(decision)

    def cancel_member(self, key: Key, index: int, reason: str) -> None:
        members = self.members.get(key)
        if members is not None and not members[index].done():
            members[index].cancel(reason)

    def teardown_wait_over(self, key: Key, index: int) -> None:
        fut = self.teardown_waits.pop((key, index), None)
        if fut is not None and not fut.done():
            fut.set_result(None)

    def forget(self, key: Key) -> None:
        """Group ``key`` ended: its member tasks are no longer cancelled by decisions."""
        self.members.pop(key, None)

    # --------------------------------------------------------------------------------------- a block's events
    def register_members(self, key: Key, tasks: list[asyncio.Future]) -> None:
        """The tasks of group ``key``'s members, which ``CancelRollout`` cancels."""
        self.members[key] = tasks

    async def enter_block(self, key: Key, index: int) -> float:
        """A member's block is entered (``platoon.live.rollouts.lease``): wait for its permit; the seconds waited."""
        return await self._wait(self.permit_waiters, (key, index), BlockEntered(key, index),
                                BlockCancelled(key, index), granted_back=lambda: self.exit_block(key, index, []))

    async def take_slot(self, key: Key, index: int, scope: str = "train") -> float:
        """Take a start slot for member ``index`` (``scope`` ``eval`` for an evaluation's rollout); the seconds
        waited."""
        cancelled = SlotWaitCancelled(key, index)  # a slot granted at the instant of cancellation passes on
        return await self._wait(self.slot_waiters, (key, index), SlotRequested(key, index, scope), cancelled,
                                granted_back=lambda: self._feed(cancelled))

    def release_slot(self, key: Key, index: int, reason: str) -> None:
        if not self.stopping():
            self._feed(SlotReleased(key, index, reason))

    def exit_block(self, key: Key, index: int, teardowns: list[asyncio.Task]) -> asyncio.Future | None:
        """A member's block exited, ``teardowns`` still running; what the block waits for before it is done (None:
        nothing, its permit came back)."""
        if self.stopping():
            return None
        self._feed(BlockExited(key, index, bool(teardowns)))
        fut = self.teardown_waits.get((key, index))
        if fut is None:
            return None
        waiting = asyncio.gather(*teardowns, return_exceptions=True)
        waiting.add_done_callback(lambda _f: self._teardowns_done(key, index))
        return fut

    def await_teardowns(self, key: Key, index: int) -> None:
        """``AwaitTeardowns``: the block that is exiting waits for its teardowns (or ``EndTeardownWait``)."""
        self.teardown_waits[(key, index)] = asyncio.get_running_loop().create_future()

    def member_started(self, key: Key, index: int, delay_s: float) -> None:
        if not self.stopping() and key in self._groups():
            self._feed(MemberStarted(key, index, delay_s))

    def member_ended(self, key: Key, index: int, raised: bool) -> None:
        if not self.stopping() and key in self._groups():
            self._feed(MemberEnded(key, index, raised))

    # -------------------------------------------------------------------------------------------- internals
    def _teardowns_done(self, key: Key, index: int) -> None:
        if (key, index) in self.teardown_waits and not self.stopping():
            self._feed(TeardownsEnded(key, index))
        self.teardown_wait_over(key, index)

    async def _wait(self, waiters: dict, k: tuple, ask: Event, cancelled: Event, *,
                    granted_back: Callable[[], Any]) -> float:
        """Ask the driver for what ``k`` waits for (a permit or a slot) and wait for its decision; a wait that is
        cancelled tells the driver, and what was granted at the instant of cancellation goes back."""
        fut = asyncio.get_running_loop().create_future()
        waiters[k] = fut
        try:
            self._feed(ask)
            decision = fut.result() if fut.done() else await fut
        except asyncio.CancelledError:
            granted = waiters.pop(k, None) is not fut or (fut.done() and not fut.cancelled())
            if not self.stopping():
                if granted:
                    granted_back()
                else:
                    self._feed(cancelled)
            raise
        except BaseException:
            waiters.pop(k, None)
            raise
        return decision.waited_s


class EvalSlots:
    """The start slots of evaluation ``number``'s rollouts (``platoon.live.rollouts.evaluate.EvalSlots``): rollout
    ``index`` takes key ``("eval", number, index)`` of the run's start limit in scope ``eval``, through ``host``."""

    def __init__(self, host: LeaseHost, number: int, log: Callable[[str, str], None]) -> None:
        self._host, self._key, self._log = host, ("eval", number), log

    async def take(self, index: int) -> float:
        return await self._host.take_slot(self._key, index, scope="eval")  # type: ignore[arg-type]

    def release(self, index: int, reason: str) -> None:
        self._host.release_slot(self._key, index, reason)  # type: ignore[arg-type]

    def warn(self, message: str) -> None:
        self._log("warning", message)

    def inform(self, message: str) -> None:
        self._log("info", message)


__all__ = ["EvalSlots", "LeaseHost"]
