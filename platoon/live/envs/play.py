"""Playing a text environment's episodes through the tool-calling harness (``platoon.live.agent.harness``): against a
model service, one rollout at a time (async: training), or against a policy, many in lockstep (evaluation).

Both derive turn t's sampling seed as ``derive_seed(seed, t)``, so a rollout played either way with the same seed and
the same weights samples the same tokens. ``renderer`` None is ``role_colon`` over the tiny tokenizer of the
environment's words (``default_renderer``), what the tiny model speaks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from platoon.live.agent.harness import Limits, default_renderer, play_text_batch, play_text_episode
from platoon.live.agent.renderer import Renderer
from platoon.live.envs.base import Task
from platoon.live.training.datums import Trajectory

__all__ = ["Limits", "play_batch", "play_episode"]


async def play_episode(service: Any, env: Any, task: Task, *, temperature: float, seed: int,
                       renderer: Renderer | None = None, limits: Limits = Limits()) -> Trajectory:
    """One rollout of ``task`` against a ``ModelService`` (``play_text_episode``)."""
    return await play_text_episode(service, env, task, renderer or default_renderer([env]), temperature=temperature,
                                   seed=seed, limits=limits)


def play_batch(policy: Any, env: Any, tasks: Sequence[Task], *, temperature: float, seeds: Sequence[int],
               version: int = 0, renderer: Renderer | None = None, limits: Limits = Limits()) -> list[Trajectory]:
    """One rollout per task, all at once, each round one batched ``policy.sample`` (``play_text_batch``)."""
    return play_text_batch(policy, env, tasks, renderer or default_renderer([env]), temperature=temperature,
                           seeds=seeds, version=version, limits=limits)
