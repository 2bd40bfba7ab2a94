"""The rollouts' events: what a runtime reports of a group's members, answered for the driver.

What this module owns (docs/architecture.md, "The driver"): the events of a started group and its members, from the
first lease block entered to the group's end: blocks entered, cancelled and exited, teardowns, start slots (asked,
cancelled, given back), members started, ended, exited and cancelled, the group finished, and the deadlines of
rollouts (teardown waits, start slots' timers, straggler cuts). ``RolloutEvents`` routes each to the part that keeps
its rule (the ``Dispatcher``'s permits and settles, the ``StartLimit``'s slots, the ``MemberWatch``'s lifecycle and
cancel order, the ``FailureStreak``) and notes what the answers change for the members (``seen``). The ``Driver``
(``platoon.policy.driver``) owns one and hands it its parts; its ``handle`` routes these events here.

Rules kept here rather than in a runtime: whether a block's permit waits for its teardowns (under
``permit_release: rollout`` only, while it holds one), what a cancelled member's end means in each phase
(``on_member_cancelled``), a block that enters after its group's draw was released (it runs on no permit, with a
warning once per group), the fate of a workflow that returns no ``GroupOutput`` or is cancelled, and the count of
blocks running at once for the over-budget warning (``blocks``, ``blocks_max``: the driver reads them into a row).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from platoon.policy.cycle import Cycle
from platoon.policy.decisions import AwaitTeardowns, Decision, EndTeardownWait
from platoon.policy.dispatcher import Dispatcher, StartGroup
from platoon.policy.failures import FailureStreak, failure_words
from platoon.policy.members import MemberState, MemberWatch
from platoon.policy.outputs import GroupOutput, Key
from platoon.policy.permits import GrantPermit
from platoon.policy.run_metrics import StepWindow
from platoon.policy.start_limit import SlotGranted, SlotState, StartLimit


class RolloutEvents:
    """See the module docstring. The parts are the driver's own, shared: ``warnings`` is its outbox's list (a
    warning said here keeps its place among the driver's), ``cycle`` is woken when a group settles."""

    def __init__(self, dispatcher: Dispatcher, *, members: MemberWatch, window: StepWindow,
                 start_limit: StartLimit | None, failures: FailureStreak, cycle: Cycle, warnings: list[str]) -> None:
        self.dispatcher = dispatcher
        self.members = members
        self.window = window
        self.start_limit = start_limit
        self.cycle = cycle
        self._failures = failures
        self._warnings = warnings
        self.blocks = 0  # member blocks running now (on a permit or, late, on none)
        self.blocks_max = 0  # their most at once since the last step's row
        self._late: set[Key] = set()  # groups whose late blocks were warned about
        self._released: dict[Key, tuple[str, set[int]]] = {}  # finished groups' blocks that never entered, by task

    def on_block_entered(self, key: Key, index: int, *, now: float) -> list[Decision]:
        """Member ``index`` entered its lease block: its ``GrantPermit`` now or later. A block of a group whose
        draw was released already runs at once on no permit, with a warning once per group."""
        if key not in self.dispatcher.running:
            task, left = self._released.get(key, (str(key), set()))
            left.discard(index)
            if not left:
                self._released.pop(key, None)
            return self.seen([self._late_grant(key, index, task)], now)
        return self.seen(self.dispatcher.on_block_entered(key, index, now=now), now)

    def on_group_entered(self, key: Key, size: int, *, now: float) -> list[Decision]:
        """Members ``0..size-1`` of a started group entered their lease blocks at once, in index order: what
        ``on_block_entered`` answers for each in turn, in one call (a runtime whose members all enter together)."""
        return self.seen(self.dispatcher.on_group_entered(key, size, now=now), now)

    def on_block_cancelled(self, key: Key, index: int, *, now: float) -> list[Decision]:
        """A member's wait for its permit was cancelled: it never ran."""
        self.members.on_cancelled(key, index)
        return self.seen(self.dispatcher.on_block_cancelled(key, index, now=now), now)

    def on_block_exited(self, key: Key, index: int, *, now: float, teardowns: bool = False) -> list[Decision]:
        """Member ``index``'s block exited (``teardowns``: with background teardowns still running). Its permit
        comes back, or, under ``permit_release: rollout`` while it holds one, waits for them (``AwaitTeardowns``)."""
        self.blocks -= 1
        if key not in self.dispatcher.running:
            return []  # a late block, on no permit
        waits = teardowns and self._holds_permit(key, index)
        if not waits:
            self.members.on_exited(key, index)
        decisions: Sequence[Decision] = self.dispatcher.on_block_exited(key, index, now=now, teardowns_pending=waits)
        if waits:
            decisions = [*decisions, AwaitTeardowns(key, index)]
        return self.seen(decisions, now)

    def on_teardowns_done(self, key: Key, index: int, *, now: float) -> list[Decision]:
        self.members.on_exited(key, index)
        return self.seen(self.dispatcher.on_teardowns_done(key, index, now=now), now)

    def request_slot(self, key: Key, index: int, *, now: float, scope: str = "train") -> bool:
        """Member ``index`` holds its permit and asks for a start slot: True when it has one now (else a
        ``SlotGranted`` comes later). Always True without a limit."""
        if self.start_limit is None:
            return True
        granted = self.start_limit.request((*key, index), now=now, scope=scope)
        if granted and key in self.members.groups:
            self.members.on_slot_granted(key, index)
        return granted

    def on_slot_cancelled(self, key: Key, index: int, *, now: float) -> list[Decision]:
        """A member's wait for its start slot was cancelled."""
        if self.start_limit is None:
            return []
        return self.seen(self.start_limit.cancel((*key, index), now=now), now)

    def release_slot(self, key: Key, index: int, reason: str, *, now: float) -> list[Decision]:
        """Member ``index`` gives its slot back: ``first_call``, ``end`` or ``cancelled`` (later calls: no-ops).
        A first call moves a training member on to running, with a start limit or without."""
        if reason == "first_call":
            self.members.on_first_call(key, index)
        if self.start_limit is None:
            return []
        return self.seen(self.start_limit.release((*key, index), reason, now=now), now)

    def on_launch_admitted(self, key: Key, index: int, *, now: float) -> list[Decision]:
        """The launch gate let a training member's worker start: it moves on to starting. Without a start limit
        nothing reported its slot (``request_slot`` answers True and moves nothing): it takes its slot here first."""
        if key in self.members.groups:  # a training member's (evaluation's are not here)
            if self.start_limit is None:
                self.members.on_slot_granted(key, index)
            self.members.on_launch_admitted(key, index)
        return []

    def on_member_started(self, key: Key, index: int, *, now: float, delay_s: float) -> list[Decision]:
        """Member ``index`` began its rollout after waiting ``delay_s`` for its permit and slot."""
        self.members.on_started(key, index, now=now, delay_s=delay_s)
        return []

    def on_member_ended(self, key: Key, index: int, *, now: float, raised: bool = False) -> list[Decision]:
        """Member ``index``'s rollout ran to its end (``raised``: with an exception): the cancellations that
        follow (a failing group's others, in the order they must be cancelled)."""
        cancels = self.members.on_ended(key, index, now=now, raised=raised)
        if self.members.state(key, index) is MemberState.TEARING_DOWN:
            self.window.rollout_ended()
        return self.seen(cancels, now)

    def on_member_exited(self, key: Key, index: int, *, now: float, teardowns: bool = False) -> list[Decision]:
        """Member ``index``'s rollout ran to its normal end and its block exits (``teardowns``: with background
        teardowns running): what ``on_member_ended`` then ``on_block_exited`` answer, in one call."""
        if teardowns and self._holds_permit(key, index):
            return self.on_member_ended(key, index, now=now) + self.on_block_exited(key, index, now=now,
                                                                                   teardowns=True)
        self.blocks -= 1
        if self.members.on_ended_and_exited(key, index, now=now):
            self.window.rollout_ended()
        return self.seen(self.dispatcher.on_block_exited(key, index, now=now), now)

    def on_member_cancelled(self, key: Key, index: int, *, now: float) -> list[Decision]:
        """A ``CancelRollout`` stopped member ``index`` wherever it stood: the events that stand for that in its
        phase (a wait for its permit cancelled; its wait for teardowns ended; its wait for a start slot cancelled,
        or its slot given back, and its block exited)."""
        if self._waits_for_permit(key, index):
            return self.on_block_cancelled(key, index, now=now)
        if index in self.dispatcher.teardowns.get(key, ()):
            return self.on_teardowns_done(key, index, now=now)
        limit = self.start_limit
        decisions: list[Decision] = []
        if limit is not None and limit.state((*key, index)) is SlotState.WAITING:
            decisions += self.on_slot_cancelled(key, index, now=now)
        else:
            decisions += self.release_slot(key, index, "cancelled", now=now)
        return decisions + self.on_block_exited(key, index, now=now)

    def on_group_finished(self, key: Key, result: object, *, now: float, error: BaseException | None = None,
                          cancelled: bool = False, warn: bool = True) -> list[Decision]:
        """The group's workflow returned ``result`` (None: it failed). It counts as failed when it raised
        ``error``, was ``cancelled`` or returned anything but a ``GroupOutput``, with a warning that says which
        (``warn=False``: a failure the runtime made up on purpose, the simulator's ``error_rate``, is not said; it
        counts toward the failure streak all the same). Settle it and release its lease; blocks of it still waiting
        for a permit run late, on none."""
        output = result if isinstance(result, GroupOutput) and error is None and not cancelled else None
        draw = self.dispatcher.running[key][0] if key in self.dispatcher.running else None
        task = draw.task_id if draw is not None else "?"
        if cancelled:
            self._warnings.append(f"group {key} (task {task}) was cancelled: it counts as failed")
        elif error is not None:
            failure = failure_words(key, task, draw.entry if draw is not None else None, error)
            if warn:
                self._warnings.append(failure)
            self._failures.failed(failure)
        elif result is not None and output is None:
            self._warnings.append(f"the workflow of group {key} (task {task}) returned {type(result).__name__}, "
                                  "not a GroupOutput: the group counts as failed")
        waiting = self._waiting_blocks(key)
        if key in self.dispatcher.running and (never := set(range(self.dispatcher.running[key][1].size))
                                               - self.dispatcher.running[key][1].used - set(waiting)):
            self._released[key] = (task, never)  # blocks that may still enter, late: their warning names the task
        if output is not None:
            self._failures.succeeded()
        ran = self.members.ran(key)
        self.members.close(key)
        decisions = self.dispatcher.on_group_finished(key, output, now=now)
        if output is None:
            self.window.waste("failed", ran)
        elif not self.dispatcher.is_outstanding(key):
            self.window.waste("rejected", ran)
        self.cycle.wake = True
        return self.seen(decisions + [self._late_grant(key, i, task) for i in waiting], now)


    def on_deadline(self, *, now: float) -> list[Decision]:
        """Fire every deadline that has come: teardown waits, start slots' timers, straggler cuts."""
        decisions: list[Decision] = []
        d = self.dispatcher
        if (due := d.next_deadline()) is not None and due <= now:
            over = [EndTeardownWait(k, i) for k, waits in d.teardowns.items() for i, t in waits.items() if t <= now]
            decisions += d.on_deadline(now=now)
            decisions += over
        if self.start_limit is not None and (due := self.start_limit.next_deadline()) is not None and due <= now:
            decisions += self.start_limit.on_deadline(now=now)
        decisions += self.members.on_deadline(now=now)
        return self.seen(decisions, now)


    def _holds_permit(self, key: Key, index: int) -> bool:
        running = self.dispatcher.running.get(key)
        return running is not None and self.dispatcher.active_lease and index in running[1].holding_blocks

    def _waits_for_permit(self, key: Key, index: int) -> bool:
        running = self.dispatcher.running.get(key)
        return running is not None and any(i == index for i, _ in running[1].waiting)

    def _waiting_blocks(self, key: Key) -> list[int]:
        running = self.dispatcher.running.get(key)
        return [] if running is None else [i for i, _ in running[1].waiting]

    def _late_grant(self, key: Key, index: int, task: str) -> GrantPermit:
        if key not in self._late:
            self._late.add(key)
            self._warnings.append(f"a rollout of task {task} (group {key}) ran after its group's draw was "
                                  "released: it runs on no permit, so more rollouts can run than the budget")
        return GrantPermit(key, index, 0.0, False)

    def seen(self, decisions: Sequence[Decision], now: float) -> list[Decision]:
        """Note what the decisions change for the members (groups opened, permits granted, blocks running).
        ``decisions``: a fresh list of one part's decisions (of a narrower type), answered as it is."""
        if not decisions:  # most calls: nothing to note
            return cast("list[Decision]", decisions)
        for dec in decisions:
            if isinstance(dec, GrantPermit):
                self.blocks += 1
                if self.blocks > self.blocks_max:
                    self.blocks_max = self.blocks
                if dec.held or dec.key in self.dispatcher.running:
                    self.members.on_granted(dec.key, dec.index)
            elif isinstance(dec, StartGroup):
                self.members.open(dec.key, dec.group_size, entry=dec.entry,
                                  label=dec.row.label)
            elif isinstance(dec, SlotGranted) and (group := dec.key[:2]) in self.members.groups:
                self.members.on_slot_granted(group, dec.key[2])  # a training member's (evaluation's are not here)
        return cast("list[Decision]", decisions)
