"""The environment protocol: tasks listed per split, and multi-turn episodes scored at their end.

An environment speaks in token ids of its own vocabulary (``vocab``: the text of each id, so that the built-in tiny
model can be sized for it and a trajectory can be printed). An episode is an object of its own, so that many
rollouts of one environment run at once:

```
episode = env.episode(task)          # one rollout of one task
obs = episode.reset()                # the first observation: the prompt's token ids
while True:
    step = episode.step(action)      # the agent's tokens -> the environment's answer
    if step.done:
        break
    obs = step.observation
outcome = episode.outcome()          # reward in [0, 1] and success: the rollout's score
```

Rules it keeps:
- ``task_ids(split)`` lists a split's tasks in a fixed order; an unknown split raises ``KeyError`` naming the known;
  an optional ``eval_split`` attribute names the split evaluation lists by default (else ``eval``);
- ``task(task_id)`` rebuilds the same ``Task`` every time (a resume, a worker, an evaluation ask again);
- ``step`` may return a ``Step`` or an awaitable of one (an environment that does I/O); a runtime calls it through
  ``astep``. The built-in's steps are pure and microseconds long, so they run on the event loop;
- ``outcome()`` is asked only after a step said ``done``; it raises ``RuntimeError`` before;
- ``outcome().reward`` is in [0, 1] and ``success`` is the environment's own pass flag (it fills
  ``MemberResult.scored``/``flag``); a partial-credit reward below 1 may go with ``success=False``.

Environments plug in by name (``@environment("name")`` from ``platoon.config.registry``) or as ``module:Class``;
``platoon.live.envs.resolve.resolve_environment`` turns an entry's ``env`` and ``service_kwargs`` into an instance.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "Environment",
    "Episode",
    "Outcome",
    "Step",
    "Task",
    "astep",
]


@dataclass(frozen=True)
class Task:
    """One task of an environment.

    ``columns`` are JSON-safe facts about the task (the pool's columns: ``train.label_by`` may name one, and
    reports group by them); ``max_turns`` bounds the episode's steps; ``max_action_tokens`` is how many tokens one
    action may take (a runtime asks the model for ``min(model.max_new_tokens, max_action_tokens)``).
    """

    task_id: str
    split: str
    columns: Mapping[str, Any] = field(default_factory=dict)
    max_turns: int = 1
    max_action_tokens: int = 1


@dataclass(frozen=True)
class Step:
    """The environment's answer to one action. ``reward`` is this step's share (informational: the rollout is
    scored by ``Episode.outcome``); ``observation`` is empty when ``done``."""

    observation: tuple[int, ...]
    reward: float
    done: bool
    info: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    """A finished episode's score: ``reward`` in [0, 1], ``success`` the environment's pass flag."""

    reward: float
    success: bool
    info: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.reward <= 1.0:
            raise ValueError(f"an outcome's reward must lie in [0, 1], got {self.reward!r}")


@runtime_checkable
class Episode(Protocol):
    """One rollout of one task (see the module's doc for the order of calls)."""

    def reset(self) -> Sequence[int]:
        """The first observation (the prompt's token ids). Called once, first."""
        ...

    def step(self, action: Sequence[int]) -> Step | Awaitable[Step]:
        """Answer the agent's tokens. After a step with ``done`` the episode takes no more steps."""
        ...

    def outcome(self) -> Outcome:
        """The score, once a step has said ``done``."""
        ...


@runtime_checkable
class Environment(Protocol):
    """Tasks per split, and episodes over them, in token ids of ``vocab``."""

    vocab: tuple[str, ...]
    """The text of each token id; ``len(vocab)`` is the vocabulary's size."""
    max_context_tokens: int
    """No episode's context (prompt, actions and observations) grows past this many tokens."""

    def task_ids(self, split: str) -> list[str]:
        ...

    def task(self, task_id: str) -> Task:
        ...

    def episode(self, task: Task) -> Episode:
        ...


async def astep(episode: Episode, action: Sequence[int]) -> Step:
    """``episode.step(action)``, awaited when the environment answers with an awaitable."""
    result = episode.step(action)
    if inspect.isawaitable(result):
        result = await result
    return result
