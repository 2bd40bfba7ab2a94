"""Held-out pass@1 of a policy on an environment's split, with a Wilson confidence interval.

pass@1 is the share of episodes whose outcome says success, one sampled rollout each (at ``temperature``, 1.0 by
default: the policy as it is trained, not its greedy decoding). ``n`` episodes go round the split's tasks in a
seeded order (``eval_plan``), so that every task is played ``n // len(split)`` or one more times and the same
``(n, seed)`` plays the same episodes with the same sampling seeds.

Two ways to play them, with the same outcomes (sampling is a function of each request's seed, not of its batch):
``evaluate`` plays them in lockstep batches on a ``PolicyModel`` (``platoon eval``); ``evaluate_rollouts`` plays each as a
rollout against a model service, at most ``concurrency`` at once (evaluation during ``platoon train``): each takes a
start slot of the run's start limit once it may run, scope ``eval``, and gives it back at its first model call or
its end (``EvalSlots``; docs/start-limit.md), and its routing ids are counted (``platoon.policy.routing_ids``).
Under ``rollout_isolation: process`` each of those rollouts plays in a rollout worker (``workers``, a
``platoon.live.workers.WorkerPool``; ``EvalEpisode``), its slot, cancellation and routing ids kept here as in
process, so the outcomes are the same.
"""

from __future__ import annotations

import asyncio
import math
import pickle
import random
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from platoon.live.envs.play import Limits, play_batch, play_episode
from platoon.live.inference.model import derive_seed
from platoon.live.rollouts.workflow import _FirstCall
from platoon.policy import RoutingIdWatch

__all__ = ["EvalEpisode", "EvalResult", "EvalSlots", "eval_plan", "evaluate", "evaluate_rollouts", "wilson_interval"]


class EvalResult(NamedTuple):
    pass_at_1: float
    ci_low: float
    ci_high: float
    by_task: Mapping[str, tuple[int, int]] = {}  # task id -> (passes, episodes)


def _result(plan: Sequence[tuple[str, int]], wins: Sequence[bool]) -> EvalResult:
    """pass@1 with its Wilson interval and each task's passes and episodes, from the plan's outcomes in order."""
    by_task: dict[str, list[int]] = {}
    for (task_id, _), won in zip(plan, wins, strict=True):
        counts = by_task.setdefault(task_id, [0, 0])
        counts[0] += bool(won)
        counts[1] += 1
    successes = sum(bool(w) for w in wins)
    low, high = wilson_interval(successes, len(plan))
    return EvalResult(successes / len(plan), low, high, {t: (p, k) for t, (p, k) in by_task.items()})


def wilson_interval(successes: int, n: int, *, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (95% at z = 1.96); (0, 1) when ``n`` is 0.

    ``(p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)`` with ``p = successes / n``.
    """
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= successes <= n:
        raise ValueError(f"successes must lie in 0..{n}, got {successes}")
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def evaluate(model: Any, env: Any, tasks: str | Sequence[str], n: int, *, temperature: float = 1.0,
             seed: int = 0, batch_size: int = 256, renderer: Any = None, limits: Limits = Limits()) -> EvalResult:
    """pass@1 of ``model`` (a ``PolicyModel``) over ``n`` episodes of ``tasks`` (task ids, or a split's name), with its
    95% Wilson interval; played through the harness with ``renderer`` (None: ``role_colon`` over the tiny
    tokenizer of the environment's words) within ``limits``."""
    plan = eval_plan(env, tasks, n, seed)
    wins: list[bool] = []
    for start in range(0, n, batch_size):
        batch = plan[start:start + batch_size]
        trajectories = play_batch(model, env, [env.task(t) for t, _ in batch], temperature=temperature,
                                  seeds=[s for _, s in batch], renderer=renderer, limits=limits)
        wins += [t.success for t in trajectories]
    return _result(plan, wins)


def eval_plan(env: Any, tasks: str | Sequence[str], n: int, seed: int) -> list[tuple[str, int]]:
    """The ``n`` episodes of an evaluation: ``(task id, sampling seed)`` each, round the tasks in a seeded order."""
    if n < 1:
        raise ValueError(f"evaluate: n must be at least 1, got {n}")
    ids = env.task_ids(tasks) if isinstance(tasks, str) else list(tasks)
    if not ids:
        raise ValueError(f"evaluate: {tasks!r} holds no tasks")
    order = list(ids)
    random.Random(f"evaluate:{seed}").shuffle(order)
    return [(order[j % len(order)], derive_seed(seed, "evaluate", j)) for j in range(n)]


class EvalSlots(Protocol):
    """The start slots an evaluation's rollouts take (the live runtime's, scope ``eval``), and where it warns."""

    async def take(self, index: int) -> float:
        """Take a start slot for rollout ``index`` of this evaluation; the seconds waited."""
        ...

    def release(self, index: int, reason: str) -> None:
        """Give it back: ``first_call``, ``end`` or ``cancelled`` (once; later calls do nothing)."""
        ...

    def warn(self, message: str) -> None:
        ...

    def inform(self, message: str) -> None:
        ...


@dataclass(frozen=True)
class EvalEpisode:
    """One held-out episode played in a rollout worker (a ``platoon.live.workers.worker.Episode``): task ``task_id``
    of entry ``entry``'s environment, as ``play_episode`` plays it in process; ``renderer``: pickled (None: the
    default). Its value is the episode's ``Trajectory``."""

    entry: str
    task_id: str
    seed: int
    temperature: float
    renderer: bytes
    limits: Limits

    def start(self, envs: Mapping[str, Any], service: Any,
              warn: Callable[[str], None]) -> Coroutine[Any, Any, Any]:
        env = envs[self.entry]
        return play_episode(service, env, env.task(self.task_id), temperature=self.temperature, seed=self.seed,
                            renderer=pickle.loads(self.renderer), limits=self.limits)


async def evaluate_rollouts(service: Any, env: Any, tasks: str | Sequence[str], n: int, *,
                            temperature: float = 1.0, seed: int = 0, renderer: Any = None, limits: Limits = Limits(),
                            concurrency: int = 256, slots: EvalSlots | None = None, first_index: int = 0,
                            routing: RoutingIdWatch | None = None, workers: Any = None,
                            entry: str = "") -> EvalResult:
    """pass@1 over the same episodes as ``evaluate`` (the same ``renderer`` and ``limits``), each a rollout against
    ``service`` (see the module docstring);
    ``first_index``: the slot index of its first rollout (an evaluation of several entries numbers them on);
    ``workers``: a ``WorkerPool`` to play each rollout in (None: here), ``entry``: ``env``'s entry there (by which a
    worker builds it from its spec; one the pool has no spec of travels pickled)."""
    plan = eval_plan(env, tasks, n, seed)
    gate = asyncio.Semaphore(concurrency)
    warn: Callable[[str], None] = slots.warn if slots is not None else (lambda message: None)
    inform: Callable[[str], None] = slots.inform if slots is not None else (lambda message: None)
    sent_renderer = workers.pickled(renderer) if workers is not None else b""

    async def play(counted: _FirstCall, first_call: Callable[[], None], task_id: str, episode_seed: int) -> Any:
        if workers is None:
            return await play_episode(counted, env, env.task(task_id), temperature=temperature, seed=episode_seed,
                                      renderer=renderer, limits=limits)
        episode = EvalEpisode(entry, task_id, episode_seed, temperature, sent_renderer, limits)
        return await workers.run_job(episode, {entry: env}, counted, warn=warn, first_call=first_call)

    async def one(j: int, task_id: str, episode_seed: int) -> bool:
        index = first_index + j
        async with gate:
            if slots is not None:
                await slots.take(index)
            first_call = (lambda: slots.release(index, "first_call")) if slots else lambda: None
            counted = _FirstCall(service, first_call)
            try:
                trajectory = await play(counted, first_call, task_id, episode_seed)
            except BaseException as exc:
                if slots is not None:
                    slots.release(index, "cancelled" if isinstance(exc, asyncio.CancelledError) else "end")
                raise
            if slots is not None:
                slots.release(index, "end")
        if routing is not None:
            for level, message in routing.rollout_ended(f"rollout {index} (task {task_id})", calls=counted.calls,
                                                        present=counted.routed):
                (inform if level == "info" else warn)(message)
        return trajectory.success

    runs = [asyncio.ensure_future(one(j, t, s)) for j, (t, s) in enumerate(plan)]
    try:
        wins = await asyncio.gather(*runs)
    except BaseException:
        for run in runs:
            run.cancel()
        await asyncio.gather(*runs, return_exceptions=True)
        raise
    return _result(plan, wins)
