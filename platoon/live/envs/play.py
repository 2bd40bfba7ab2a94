"""Playing episodes: against a model service, one rollout at a time (async), or against a policy, many in lockstep.

Both build the context the same way (the prompt, then each action followed by the environment's answer), so a
rollout is one datum (see ``platoon.live.datums``), and both derive turn t's sampling seed as
``derive_seed(seed, t)``, so a rollout played either way with the same seed and the same weights samples the same
tokens.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from platoon.live import rollout_trace
from platoon.live.datums import Trajectory, Turn
from platoon.live.envs.base import Environment, Task, astep
from platoon.live.model import derive_seed

__all__ = ["action_tokens", "play_batch", "play_episode"]


def action_tokens(task: Task, max_new_tokens: int | None) -> int:
    """Tokens to ask for one action: the task's ``max_action_tokens``, capped by the model's ``max_new_tokens``."""
    return task.max_action_tokens if max_new_tokens is None else max(1, min(task.max_action_tokens, max_new_tokens))


async def play_episode(service: Any, env: Environment, task: Task, *, temperature: float, seed: int,
                       max_new_tokens: int | None = None) -> Trajectory:
    """One rollout of ``task`` against a ``ModelService``: each turn awaits ``service.sample``, then the step.

    The trajectory records each turn's sampling version (a publish between turns shows as a span of versions).
    A step that raises propagates; cancellation propagates at the awaits. A traced rollout's steps are ``env_step``
    spans (``platoon.live.rollout_trace``).
    """
    started = time.monotonic()
    episode = env.episode(task)
    context = list(episode.reset())
    limit = action_tokens(task, max_new_tokens)
    turns: list[Turn] = []
    trace = rollout_trace.current()
    for t in range(task.max_turns):
        sample = await service.sample(context, max_new_tokens=limit, temperature=temperature,
                                      seed=derive_seed(seed, t))
        turns.append(Turn(tuple(context), tuple(sample.tokens), tuple(sample.logprobs), sample.version))
        if trace is None:
            step = await astep(episode, sample.tokens)
        else:
            began = trace.clock()
            step = await astep(episode, sample.tokens)
            trace.env_step(began)
        if step.done:
            break
        context += list(sample.tokens) + list(step.observation)
    else:
        raise RuntimeError(f"task {task.task_id!r} did not end within its max_turns ({task.max_turns})")
    outcome = episode.outcome()
    return Trajectory(task.task_id, tuple(turns), outcome.reward, outcome.success, time.monotonic() - started)


def play_batch(policy: Any, env: Environment, tasks: Sequence[Task], *, temperature: float, seeds: Sequence[int],
               version: int = 0, max_new_tokens: int | None = None) -> list[Trajectory]:
    """Play one rollout per task, all at once: each round samples the next action of every unfinished episode in
    one batched call of ``policy.sample``. For evaluation and synchronous training loops; environments whose
    steps return awaitables are not supported here (use ``play_episode``)."""
    if len(tasks) != len(seeds):
        raise ValueError(f"play_batch: {len(tasks)} tasks but {len(seeds)} seeds")
    episodes = [env.episode(task) for task in tasks]
    contexts = [list(e.reset()) for e in episodes]
    turns: list[list[Turn]] = [[] for _ in tasks]
    open_ = list(range(len(tasks)))
    limits = [action_tokens(task, max_new_tokens) for task in tasks]
    for t in range(max((task.max_turns for task in tasks), default=0)):
        if not open_:
            break
        gens = policy.sample([contexts[i] for i in open_], max_new_tokens=[limits[i] for i in open_],
                             temperature=temperature, seeds=[derive_seed(seeds[i], t) for i in open_])
        still = []
        for i, gen in zip(open_, gens, strict=True):
            turns[i].append(Turn(tuple(contexts[i]), gen.tokens, gen.logprobs, version))
            step = episodes[i].step(gen.tokens)
            if not step.done:
                contexts[i] += list(gen.tokens) + list(step.observation)
                if t + 1 >= tasks[i].max_turns:
                    raise RuntimeError(f"task {tasks[i].task_id!r} did not end within its max_turns")
                still.append(i)
        open_ = still
    out = []
    for task, episode, ts in zip(tasks, episodes, turns, strict=True):
        outcome = episode.outcome()
        out.append(Trajectory(task.task_id, tuple(ts), outcome.reward, outcome.success))
    return out
