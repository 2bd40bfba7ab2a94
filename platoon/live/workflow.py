"""``GroupRolloutWorkflow``: one training group's rollouts, each in a block of its group's lease, and its output.

What this module owns: how a group's members run and end, and what the group hands back (a ``GroupOutput``: its
verdict, one ``MemberResult`` per member, the datums a step trains). Rules it keeps (semantics 4.5-4.7):

- ``arun_episode(row)`` runs the group (``_run_group_rollouts``), each member in ``_run_group_member(row, i)``, which
  runs ``arun_episode_single`` for member ``i`` inside ``async with rollout_lease().rollout(i)`` with the lease
  cleared for the rollout itself. ``runs_rollouts_on_lease = True`` (rolling starts) and ``gives_verdicts = True``;
  a subclass that overrides one of the three methods reads as False unless it declares the flag
  (``platoon.policy.workflow_flags``: read it with ``workflow_runs_on_lease``).
- **Failure.** When one member raises, every other member is cancelled once (those still waiting for a permit first,
  so that no permit a cancelled rollout gives back is handed to them), and the group raises the first exception
  once all of them have unwound. **Cancellation** of the group likewise returns only once every member has unwound.
  A member's retry stays inside its block: a second block for an index raises RuntimeError.
- **Stragglers** (``straggler_timeout_s`` set). The group waits for ``quorum`` finished members (default
  ``max(group_size - 1, 1)``). If every member took its permit without yielding (every start delay exactly 0.0),
  one deadline holds for all, ``timeout`` after the quorum; otherwise member ``i``'s deadline is
  ``quorum_time + timeout + (delay_i - min(delays of started members))``, fixed when it starts, and a member not
  started yet cannot pass it. A member past its deadline is cancelled alone, reported as ``straggler_killed`` with
  no result; the first such cut warns once per group.
- **Verdict.** ``trained`` when the valid members' rewards differ, ``uniform`` when they scored alike (or none is
  valid). Advantages are group-normalised over the valid members (``platoon.live.datums``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

from platoon.live.datums import Trajectory, group_advantages, member_fields, trajectory_datums
from platoon.live.envs.play import play_episode
from platoon.live.lease import first_model_call, no_lease, rollout_lease
from platoon.live.model import derive_seed
from platoon.policy.outputs import GroupOutput
from platoon.policy.stats import MemberResult
from platoon.policy.workflow_flags import gives_verdicts, runs_rollouts_on_lease

log = logging.getLogger("platoon.live")

UNIFORM_TOLERANCE = 1e-9

__all__ = ["GroupRolloutWorkflow", "GroupRow", "Rollout", "workflow_gives_verdicts", "workflow_runs_on_lease"]


@dataclass(frozen=True)
class GroupRow:
    """What a workflow is asked to run: one draw of a task (``member`` set: one rollout of it)."""

    key: tuple[int, int]
    task_id: str
    entry: str | None
    group_size: int
    version: int = 0
    row_index: int = 0
    data: Mapping[str, Any] = field(default_factory=dict, compare=False)
    member: int | None = None


@dataclass(frozen=True)
class Rollout:
    """One finished rollout: its trajectory (turns and score). ``member()`` gives its ``MemberResult``, ``datums(a)``
    its datums at the group's advantage ``a``."""

    trajectory: Trajectory

    @property
    def reward(self) -> float:
        return float(self.trajectory.reward)

    def member(self) -> MemberResult:
        return MemberResult(**member_fields(self.trajectory))

    def datums(self, advantage: float) -> list[dict]:
        return [dict(d) for d in trajectory_datums(self.trajectory, advantage)]


def workflow_runs_on_lease(cls: type) -> bool:
    """The ``runs_rollouts_on_lease`` flag of workflow class ``cls`` by the MRO ownership rule."""
    return runs_rollouts_on_lease(cls, base=GroupRolloutWorkflow)


def workflow_gives_verdicts(cls: type) -> bool:
    return gives_verdicts(cls, base=GroupRolloutWorkflow)


class _Group:
    """A running group's members as the straggler policy sees them."""

    def __init__(self, size: int, created: float) -> None:
        self.created = created
        self.delays: dict[int, float] = {}
        self.waiting: set[int] = set(range(size))
        self.killed: set[int] = set()
        self.changed = asyncio.Event()

    def started(self, index: int, delay: float) -> None:
        self.waiting.discard(index)
        self.delays[index] = float(delay)
        self.changed.set()

    def together(self) -> bool:
        return not self.waiting and all(d == 0.0 for d in self.delays.values())


_GROUP: ContextVar[_Group | None] = ContextVar("platoon_group", default=None)


class GroupRolloutWorkflow:
    """Runs one training group's rollouts (see the module docstring).

    ``envs`` maps each entry's name to its environment; ``service`` is the model service rollouts sample from
    (``await service.sample(context, max_new_tokens=, temperature=, seed=)``). ``seed`` is the run's: member ``i`` of
    group ``key`` samples with seeds derived from ``(seed, key, i)``, so a rollout samples the same tokens whatever
    the order it runs in.
    """

    runs_rollouts_on_lease = True
    gives_verdicts = True

    def __init__(self, envs: Mapping[str, Any] | None = None, service: Any = None, *, seed: int = 0,
                 temperature: float = 1.0, max_new_tokens: int | None = None,
                 straggler_timeout_s: float | None = None, quorum: int | None = None,
                 warn: Callable[[str], None] | None = None) -> None:
        self.envs = dict(envs or {})
        self.service = service
        self.seed = seed
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self.straggler_timeout_s = straggler_timeout_s
        self.quorum = quorum
        self.warn = warn or log.warning

    # ------------------------------------------------------------------------------------------------ a group
    async def arun_episode(self, row: GroupRow) -> GroupOutput:
        """Run the group of ``row``; its output (raises when a member raised, after all have unwound)."""
        rollouts = await self._run_group_rollouts(row)
        return self.group_output(rollouts)

    async def _run_group_rollouts(self, row: GroupRow) -> list[Rollout | None]:
        """Every member's rollout, in member order (None: cut as a straggler)."""
        loop = asyncio.get_running_loop()
        group = _Group(row.group_size, loop.time())
        token = _GROUP.set(group)
        try:
            tasks = [asyncio.ensure_future(self._run_group_member(row, i)) for i in range(row.group_size)]
        finally:
            _GROUP.reset(token)
        try:
            if self.straggler_timeout_s is None:
                await self._wait_all(tasks)
            else:
                await self._wait_stragglers(tasks, group, row)
        except BaseException:
            await _unwind(tasks, group)
            raise
        return [None if t.cancelled() else t.result() for t in tasks]

    async def _run_group_member(self, row: GroupRow, index: int) -> Rollout:
        """Member ``index``: its rollout inside its block of the group's lease, the lease cleared for the rollout."""
        lease = rollout_lease()
        async with lease.rollout(index) as waited_s, lease.start_slot(index) as slot_waited_s:
            group = _GROUP.get()
            if group is not None:
                group.started(index, waited_s + slot_waited_s)
            with no_lease():
                return await self.arun_episode_single(replace(row, member=index))

    async def arun_episode_single(self, row: GroupRow) -> Rollout:
        """One rollout (member ``row.member``): a multi-turn episode of the entry's environment played with the
        model service."""
        env = self.envs[row.entry]
        task = env.task(row.task_id)
        seed = derive_seed(self.seed, row.key[0], row.key[1], row.member)
        trajectory = await play_episode(_FirstCall(self.service), env, task, temperature=self.temperature,
                                        seed=seed, max_new_tokens=self.max_new_tokens)
        return Rollout(trajectory)

    # ------------------------------------------------------------------------------------------------ output
    def group_output(self, rollouts: Sequence[Rollout | None]) -> GroupOutput:
        """The group's verdict, members and datums (advantages normalised over the valid members)."""
        valid = [r for r in rollouts if r is not None]
        rewards = [r.reward for r in valid]
        advantages = iter(group_advantages(rewards))
        members: list[MemberResult] = []
        datums: list[dict] = []
        for r in rollouts:
            if r is None:
                members.append(MemberResult(outcome="none", disposition="straggler_killed"))
                continue
            members.append(r.member())
            datums += r.datums(next(advantages))
        verdict = "trained" if rewards and max(rewards) - min(rewards) > UNIFORM_TOLERANCE else "uniform"
        return GroupOutput(verdict, tuple(members), tuple(datums))

    # -------------------------------------------------------------------------------------------- waiting
    @staticmethod
    async def _wait_all(tasks: list[asyncio.Future]) -> None:
        """Like gather, but the first exception ends the wait (the caller unwinds the rest)."""
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        _raise_first(tasks, done)

    async def _wait_stragglers(self, tasks: list[asyncio.Future], group: _Group, row: GroupRow) -> None:
        """Wait for the quorum, then cut each member still running past its own deadline (semantics 4.7)."""
        loop = asyncio.get_running_loop()
        size = len(tasks)
        quorum = min(self.quorum or max(size - 1, 1), size)
        timeout = float(self.straggler_timeout_s or 0.0)
        while True:
            finished = [t for t in tasks if t.done()]
            _raise_first(tasks, finished)
            if len(finished) >= quorum or len(finished) == size:
                break
            await asyncio.wait([t for t in tasks if not t.done()], return_when=asyncio.FIRST_COMPLETED)
        if all(t.done() for t in tasks):
            return
        quorum_t = loop.time()
        single = group.together()
        warned = False
        while True:
            pending = {t for t in tasks if not t.done()}
            live = [i for i, t in enumerate(tasks) if t in pending and i not in group.killed]
            if not pending:
                break
            now = loop.time()
            due: dict[int, float] = {}
            if live:
                least = min(group.delays.values()) if group.delays else 0.0
                for i in live:
                    if i in group.delays:
                        due[i] = quorum_t + timeout + (0.0 if single else group.delays[i] - least)
            for i, t_due in due.items():
                if t_due <= now:
                    group.killed.add(i)
                    tasks[i].cancel()
                    if not warned:
                        warned = True
                        self.warn(f"task {row.task_id}: rollout {i} of group {row.key} ran past its straggler "
                                  f"deadline ({timeout:g}s after the quorum of {quorum}); cutting it")
            nxt = [t_due for i, t_due in due.items() if i not in group.killed]
            group.changed.clear()
            waiter = asyncio.ensure_future(group.changed.wait())
            try:
                done, _ = await asyncio.wait(
                    [*pending, waiter], timeout=(min(nxt) - now) if nxt else None,
                    return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
            failed = [t for t in done if t is not waiter and tasks.index(t) not in group.killed]
            _raise_first(tasks, failed)


class _FirstCall:
    """A model service seen by one rollout: its first ``sample`` also signals the rollout's first model call."""

    def __init__(self, service: Any) -> None:
        self._service = service
        self._called = False

    async def sample(self, *args: Any, **kwargs: Any) -> Any:
        if not self._called:
            self._called = True
            first_model_call()
        return await self._service.sample(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._service, name)


def _raise_first(tasks: list[asyncio.Future], done: Any) -> None:
    """Raise the exception of the lowest-index member among ``done`` that raised (a cancelled member counts)."""
    for t in tasks:
        if t in done and t.done():
            if t.cancelled():
                raise asyncio.CancelledError(f"rollout {tasks.index(t)} was cancelled")
            exc = t.exception()
            if exc is not None:
                raise exc


async def _unwind(tasks: list[asyncio.Future], group: _Group) -> None:
    """Cancel every member not done (those waiting for a permit first) once, and wait until all have unwound,
    whatever cancels this wait meanwhile."""
    order = sorted(range(len(tasks)), key=lambda i: i not in group.waiting)
    for i in order:
        if not tasks[i].done():
            tasks[i].cancel()
    again = False
    while not all(t.done() for t in tasks):
        try:
            await asyncio.wait([t for t in tasks if not t.done()])
        except asyncio.CancelledError:
            again = True
    for t in tasks:  # retrieve, so that asyncio does not log them as never retrieved
        if not t.cancelled():
            t.exception()
    if again:
        raise asyncio.CancelledError()
