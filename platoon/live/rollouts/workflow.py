"""``GroupRolloutWorkflow``: one training group's rollouts, each in a block of its group's lease, and its output.

What this module owns: how a group's members run, and what the group hands back (a ``GroupOutput``: its verdict,
one ``MemberResult`` per member, the datums a step trains). The rules that decide which members are cancelled, and
when, are the policy layer's (``platoon.policy.members``, docs/live-runtime.md); the group verdict is
``platoon.policy.verdict.group_verdict``. This module only reports and obeys:

- ``arun_episode(row)`` runs the group (``_run_group_rollouts``), each member in ``_run_group_member(row, i)``, which
  runs ``arun_episode_single`` for member ``i`` inside ``async with rollout_lease().rollout(i)`` with the lease
  cleared for the rollout itself. ``runs_rollouts_on_lease = True`` (rolling starts) and ``gives_verdicts = True``;
  a subclass that overrides one of the three methods reads as False unless it declares the flag
  (``platoon.policy.workflow_flags``: read it with ``workflow_runs_on_lease``).
- Each member reports to its group's host (the runtime in a training draw, else ``LocalMembers``) when its rollout
  starts, with its start delay (the seconds it waited for its permit and start slot), and when it ends or raises;
  the host cancels the members the rules name. A member cut as a straggler is reported as ``straggler_killed``
  with no result.
- **Failure.** The group raises the first exception a member raised, once every member has unwound.
  **Cancellation** of the group cancels its members (those still waiting for a permit first) and returns only once
  every member has unwound. A member's retry stays inside its block: a second block for an index raises
  RuntimeError.
- **Routing ids.** Each rollout that ends counts its model calls and those whose ``Sample`` had a routing id; the
  workflow's ``RoutingIdWatch`` (``platoon.policy.routing_ids``) says what to warn of, through ``warn``, and
  ``step_metrics()`` gives ``train/rollout_worker_routing_id_coverage``.
- **Tracing.** A traced rollout (``platoon.live.rollouts.rollout_trace``) gets a ``model_call`` span per sample, an
  ``env_step`` span per step (``play_episode``), and its reward and success on its ``rollout`` span.
- Advantages are each valid member's reward minus the group's baseline over the valid members
  (``leave_one_out_baseline``: the others' mean; ``platoon.live.training.datums``); a group with fewer valid members
  than ``min_successful_group_size`` hands back no datums (verdict ``below_min``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

from platoon.live.agent.harness import Limits, default_renderer
from platoon.live.envs.play import play_episode
from platoon.live.inference.model import derive_seed
from platoon.live.inference.service import rollout_session
from platoon.live.rollouts import rollout_trace
from platoon.live.rollouts.lease import LocalMembers, MembersHost, first_model_call, no_lease, rollout_lease
from platoon.live.training.datums import Trajectory, group_advantages, member_fields, trajectory_datums
from platoon.policy import (
    STRAGGLER_KILLED,
    GroupOutput,
    MemberResult,
    MemberWatch,
    RoutingIdWatch,
    cancel_order,
    gives_verdicts,
    group_output,
    runs_rollouts_on_lease,
)

log = logging.getLogger("platoon.live")

__all__ = ["GroupRolloutWorkflow", "GroupRow", "Rollout", "workflow_gives_verdicts", "workflow_runs_on_lease"]


@dataclass(frozen=True)
class GroupRow:
    """What a workflow is asked to run: one draw of a task (``member`` set: one rollout of it). ``task_id`` is the
    pool's id (``<entry>::<id>`` in a mixture, as events and logs name it); ``env_task_id`` the environment's own,
    the one to ask ``env.task`` for (None reads as ``task_id``)."""

    key: tuple[int, int]
    task_id: str
    entry: str | None
    group_size: int
    version: int = 0
    row_index: int = 0
    data: Mapping[str, Any] = field(default_factory=dict, compare=False)
    member: int | None = None
    env_task_id: str | None = None

    def __post_init__(self) -> None:
        if self.env_task_id is None:
            object.__setattr__(self, "env_task_id", self.task_id)


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
    """A running group's members as its host sees them: who started, the first exception raised."""

    def __init__(self, host: MembersHost, key: tuple[int, int]) -> None:
        self.host, self.key = host, key
        self.started: set[int] = set()
        self.error: BaseException | None = None

    def member_started(self, index: int, delay_s: float) -> None:
        self.started.add(index)
        self.host.member_started(self.key, index, float(delay_s))

    def member_ended(self, index: int, error: BaseException | None = None) -> None:
        if error is not None and self.error is None:
            self.error = error
        self.host.member_ended(self.key, index, error is not None)


_GROUP: ContextVar[_Group | None] = ContextVar("platoon_group", default=None)


class GroupRolloutWorkflow:
    """Runs one training group's rollouts (see the module docstring).

    ``envs`` maps each entry's name to its text environment; ``service`` is the model service rollouts sample from
    (``await service.sample(context, max_new_tokens=, temperature=, seed=, stop=)``). A member plays its episode
    through the tool-calling harness (``platoon.live.agent.harness``) with ``renderer`` (None: ``role_colon`` over
    the tiny tokenizer of the environments' words), each turn at most ``max_new_tokens`` tokens, at most
    ``max_turns`` turns, its context at most ``context_window`` tokens (None: no cap of that kind). ``seed`` is the
    run's: member ``i`` of group ``key`` samples with seeds derived from ``(seed, key, i)``, so a rollout samples the
    same tokens whatever the order it runs in.
    """

    runs_rollouts_on_lease = True
    gives_verdicts = True
    #: Where each member's rollout runs: None in this process, else a ``platoon.live.workers.WorkerPool``
    #: (``rollout_isolation: process``; ``build_live`` sets it), which runs ``arun_episode_single`` in a worker.
    rollout_workers: Any = None

    def __init__(self, envs: Mapping[str, Any] | None = None, service: Any = None, *, seed: int = 0,
                 temperature: float = 1.0, max_new_tokens: int | None = None,
                 straggler_timeout_s: float | None = None, quorum: int | None = None,
                 warn: Callable[[str], None] | None = None, leave_one_out_baseline: bool = False,
                 min_successful_group_size: int = 1, renderer: Any = None, max_turns: int | None = None,
                 context_window: int | None = None, step_timeout: float | None = None) -> None:
        self.envs = dict(envs or {})
        self.renderer = renderer if renderer is not None else default_renderer(self.envs.values())
        self.limits = Limits(max_new_tokens=max_new_tokens, max_turns=max_turns, context_window=context_window,
                             step_timeout=step_timeout)
        self.service = service
        self.seed = seed
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self.straggler_timeout_s = straggler_timeout_s
        self.quorum = quorum
        self.warn = warn or log.warning
        self.inform = log.info  # the run's info lines (platoon train points it at its console)
        self.leave_one_out_baseline = leave_one_out_baseline
        self.min_successful_group_size = min_successful_group_size
        self.routing = RoutingIdWatch("train")  # one per workflow, so per start of training

    # ------------------------------------------------------------------------------------------------ a group
    async def arun_episode(self, row: GroupRow) -> GroupOutput:
        """Run the group of ``row``; its output (raises when a member raised, after all have unwound)."""
        rollouts = await self._run_group_rollouts(row)
        return self.group_output(rollouts)

    async def _run_group_rollouts(self, row: GroupRow) -> list[Rollout | None]:
        """Every member's rollout, in member order (None: cut as a straggler)."""
        lease = rollout_lease()
        host = lease.members_host() if lease.active else None
        local = None
        if host is None:
            local = host = LocalMembers(MemberWatch(timeout_s=self.straggler_timeout_s, quorum=self.quorum))
        group = _Group(host, row.key)
        token = _GROUP.set(group)
        try:
            tasks = [asyncio.ensure_future(self._run_group_member(row, i)) for i in range(row.group_size)]
        finally:
            _GROUP.reset(token)
        host.register_members(row.key, tasks)
        try:
            await _until_unwound(tasks, group)
        finally:
            if local is not None:
                local.close(row.key)
        errors = [t.exception() for t in tasks if not t.cancelled()]  # retrieved, so asyncio never logs them
        if group.error is not None:
            raise group.error
        for error in errors:
            if error is not None:
                raise error
        return [None if t.cancelled() else t.result() for t in tasks]

    async def _run_group_member(self, row: GroupRow, index: int) -> Rollout:
        """Member ``index``: its rollout inside its block of the group's lease, the lease cleared for the rollout;
        its start and end (or exception) reported to its group's host."""
        group = _GROUP.get()
        lease = rollout_lease()
        try:
            async with lease.rollout(index) as waited_s, lease.start_slot(index) as slot_waited_s:
                if group is not None:
                    group.member_started(index, waited_s + slot_waited_s)
                try:
                    with no_lease():
                        result = await self._run_single(replace(row, member=index))
                    rollout_trace.note_result(result)
                except asyncio.CancelledError:
                    raise
                except BaseException as exc:
                    if group is not None:
                        group.member_ended(index, exc)  # before the block exits: its permit comes back after
                    raise
                if group is not None:
                    group.member_ended(index)
                return result
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # raised entering its block (a bad index): the group fails as well
            if group is not None and group.error is None:
                group.member_ended(index, exc)
            raise

    async def _run_single(self, row: GroupRow) -> Rollout:
        """``arun_episode_single(row)``, here or, under ``rollout_isolation: process``, in a rollout worker
        (``rollout_workers``, a ``platoon.live.workers.WorkerPool``)."""
        if self.rollout_workers is None:
            return await self.arun_episode_single(row)
        return await self.rollout_workers.run(self, row)

    async def arun_episode_single(self, row: GroupRow) -> Rollout:
        """One rollout (member ``row.member``): a multi-turn episode of the entry's environment played with the
        model service."""
        env = self.envs[row.entry]
        task = env.task(row.env_task_id)
        seed = derive_seed(self.seed, row.key[0], row.key[1], row.member)
        service = _FirstCall(self.service)
        trajectory = await play_episode(service, env, task, temperature=self.temperature,
                                        seed=seed, renderer=self.renderer, limits=self.limits)
        self.say(self.routing.rollout_ended(f"rollout {row.member} of task {row.task_id} (group {row.key})",
                                            calls=service.calls, present=service.routed))
        return Rollout(trajectory)

    def say(self, said: list[tuple[str, str]]) -> None:
        """Pass on ``(level, message)`` pairs (a ``RoutingIdWatch``'s): ``info`` to ``inform``, the rest to ``warn``."""
        for level, message in said:
            (self.inform if level == "info" else self.warn)(message)

    def step_metrics(self) -> dict[str, float]:
        """The workflow's own metrics since the last call (``train/rollout_worker_routing_id_coverage``; under
        ``rollout_isolation: ray`` the actor pool's per node), which the runtime adds to each step's row."""
        pool_metrics = getattr(self.rollout_workers, "metrics", None)
        return {**self.routing.metrics(), **(pool_metrics() if pool_metrics is not None else {})}

    # ------------------------------------------------------------------------------------------------ output
    def group_output(self, rollouts: Sequence[Rollout | None]) -> GroupOutput:
        """The group's verdict, members and datums (advantages over the valid members; none below the minimum)."""
        valid = [r for r in rollouts if r is not None]
        members = tuple(MemberResult(outcome="none", disposition=STRAGGLER_KILLED) if r is None else r.member()
                        for r in rollouts)

        def datums() -> list[Any]:
            advantages = group_advantages([r.reward for r in valid], leave_one_out=self.leave_one_out_baseline)
            return [d for r, a in zip(valid, advantages, strict=True) for d in r.datums(a)]

        return group_output(members, min_successful=self.min_successful_group_size, datums=datums)


class _FirstCall:
    """A model service seen by one rollout: its first ``sample`` also signals the rollout's first model call
    (``on_first_call``; a rollout worker's calls are served with a no-op, since the worker signals its own), and a
    traced rollout's calls are ``model_call`` spans (``batch`` from the ``Sample``'s ``batch_size`` when it has one)."""

    def __init__(self, service: Any, on_first_call: Callable[[], None] = first_model_call) -> None:
        self._service = service
        self._on_first_call = on_first_call
        self.calls = 0
        self.routed = 0  # calls whose sample came with a routing id

    async def sample(self, *args: Any, **kwargs: Any) -> Any:
        return await self._made(lambda: self._service.sample(*args, **kwargs))

    async def sample_placed(self, post: Any, **kwargs: Any) -> Any:
        """A rollout worker's call that it posts to an inference server itself (``platoon.live.inference.direct``):
        counted, kept on the rollout's server and traced as ``sample`` is; its value a ``Placement``."""
        return await self._made(lambda: self._service.sample_placed(post, **kwargs))

    async def _made(self, call: Callable[[], Any]) -> Any:
        if self.calls == 0:
            self._on_first_call()
        self.calls += 1
        trace = rollout_trace.current()
        session = rollout_session.set(self)  # this rollout's calls: one server across its turns
        try:
            if trace is None:
                sample = await call()
            else:
                start = trace.clock()
                sample = await call()
                trace.model_call(start, getattr(sample, "batch_size", 0), getattr(sample, "server", None),
                                 getattr(sample, "concurrency", 0.0))
        finally:
            rollout_session.reset(session)
        self.routed += getattr(sample, "routing_id", None) is not None
        return sample

    def __getattr__(self, name: str) -> Any:
        return getattr(self._service, name)


async def _until_unwound(tasks: list[asyncio.Future], group: _Group) -> None:
    """Wait until every member is done. Cancelled meanwhile: cancel every member not done once (those not started
    yet first) and wait until all have unwound, whatever cancels this wait meanwhile, then raise CancelledError."""
    try:
        await asyncio.wait(tasks)
        return
    except asyncio.CancelledError:
        pass
    for i in cancel_order(set(range(len(tasks))) - group.started, list(range(len(tasks)))):
        if not tasks[i].done():
            tasks[i].cancel()
    while not all(t.done() for t in tasks):
        try:
            await asyncio.wait([t for t in tasks if not t.done()])
        except asyncio.CancelledError:
            pass
    for t in tasks:  # retrieve, so that asyncio does not log them as never retrieved
        if not t.cancelled():
            t.exception()
    raise asyncio.CancelledError()
