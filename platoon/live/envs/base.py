"""What every environment shares: a task (``Task``) and a finished episode's grade (``Outcome``).

The environment protocol itself is ``platoon.live.envs.text`` (an instruction, tools, a grade); the built-in
``number_search`` implements it, and ``platoon.live.envs.resolve.resolve_environment`` turns an entry's ``env`` and
``service_kwargs`` into an instance. (Environments once spoke in token ids of their own vocabulary; the text
protocol replaced that, so that one environment serves the tiny model and a chat model alike.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Outcome", "Task"]


@dataclass(frozen=True)
class Task:
    """One task of an environment.

    ``columns`` are JSON-safe facts about the task (the pool's columns: ``train.label_by`` may name one, and
    reports group by them); ``max_turns`` bounds the episode's turns (assistant messages); ``max_action_tokens`` is
    how many tokens one assistant message may take (the harness asks the model for at most that, and at most
    ``rollout_config.inference_params.max_completion_tokens``).
    """

    task_id: str
    split: str
    columns: Mapping[str, Any] = field(default_factory=dict)
    max_turns: int = 1
    max_action_tokens: int = 1


@dataclass(frozen=True)
class Outcome:
    """A finished episode's score: ``reward`` in [0, 1], ``success`` the environment's pass flag."""

    reward: float
    success: bool
    info: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.reward <= 1.0:
            raise ValueError(f"an outcome's reward must lie in [0, 1], got {self.reward!r}")
