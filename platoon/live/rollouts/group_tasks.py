"""A training group's task on the event loop: what the live runtime does with a ``StartGroup``.

What this module owns: running a started group's workflow (``workflow.arun_episode(row)``) in a task of its own, with
the group's lease in its context (``platoon.live.rollouts.lease``: its blocks meet the driver at the lease host), and
reporting its end as ``GroupFinished`` with what it returned, raised, or that it was cancelled. Rules it keeps: a
group that raises fails and the run goes on; a cancellation while the run stops is the stop's, not the group's (it
is not reported: the driver is done with this start); a group's end is reported through ``finished``, which the
runtime guards (a failure there ends the run).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import Any

from platoon.live.rollouts.lease import RolloutLease, set_lease
from platoon.live.rollouts.lease_host import LeaseHost
from platoon.live.rollouts.rollout_trace import GroupTrace
from platoon.live.rollouts.workflow import GroupRow
from platoon.policy import Event, GroupFinished, Key, StartGroup
from platoon.runs.trace import TraceWriter


class GroupTasks:
    """The running groups' tasks, by key (``tasks``: the lease host reads them to cancel a member's group).
    ``finished(event)``: reports a group's ``GroupFinished``; ``stopping()``: the run is stopping."""

    def __init__(self, workflow: Any, *, trace: TraceWriter | None, now: Callable[[], float],
                 finished: Callable[[Event], None], stopping: Callable[[], bool]) -> None:
        self.workflow, self.trace, self.now, self.finished, self.stopping = workflow, trace, now, finished, stopping
        self.tasks: dict[Key, asyncio.Task] = {}

    def start(self, dec: StartGroup, host: LeaseHost, loop: asyncio.AbstractEventLoop) -> None:
        """Start the group ``dec`` names: its workflow in a task, its lease (on ``host``) in the task's context."""
        row = GroupRow(dec.key, dec.task_id, dec.entry, dec.group_size, dec.version, dec.row_index, dec.row.data,
                       env_task_id=dec.row.env_task_id)
        trace = (GroupTrace(self.trace, self.now, task_id=dec.task_id, key=dec.key, version=dec.version)
                 if self.trace is not None and self.trace.wants(dec.position) else None)
        context = contextvars.copy_context()
        context.run(set_lease, RolloutLease(host, dec.key, dec.group_size, trace))
        self.tasks[dec.key] = loop.create_task(self._run(row, host), context=context)

    async def cancel_all(self) -> None:
        """Cancel every group still running and wait for their ends (the run stops)."""
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, row: GroupRow, host: LeaseHost) -> None:
        key = row.key
        result: Any = None
        error: BaseException | None = None
        cancelled = False
        try:
            result = await self.workflow.arun_episode(row)
        except asyncio.CancelledError:
            if self.stopping():
                raise
            cancelled = True
        except Exception as exc:  # noqa: BLE001 - a group that raises fails; the run goes on
            error = exc
        self.tasks.pop(key, None)
        host.forget(key)
        if not self.stopping():
            self.finished(GroupFinished(key, result, error, cancelled))
