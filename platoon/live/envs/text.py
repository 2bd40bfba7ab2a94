"""The text environment protocol: an instruction, tools the agent calls, and a grade at the end.

An environment that speaks text gives each episode an instruction and a set of tools; the agent (a model through a
renderer and the tool-calling harness, ``platoon.live.agent``) answers with tool calls, and each call returns text.
Many rollouts of one environment run at once, so an episode is an object of its own:

```
episode = env.episode(task)            # one rollout of one task
instruction = episode.reset()          # the user's first message
tools = episode.tools                  # what the agent may call (a terminal tool ends the episode)
result = episode.call(ToolCall("craft", {"ingredients": {...}, "target": ["plank", 4]}))
...                                    # until a terminal tool, result.done, or the turn budget
outcome = episode.outcome()            # reward in [0, 1] and success
```

Rules it keeps:
- ``task_ids(split)`` lists a split's tasks in a fixed order (an unknown split raises ``KeyError`` naming the
  known); ``task(task_id)`` rebuilds the same ``Task`` (``platoon.live.envs.base``) every time (a resume, a worker,
  an evaluation ask again); an optional ``eval_split`` names the split evaluation lists by default (else ``eval``).
  A task's ``max_turns`` is the episode's turn budget (assistant messages), ``max_action_tokens`` the tokens one
  assistant message may take;
- an optional ``words`` attribute declares the words the environment writes (its instructions, its tools' and
  parameters' names, its answers, the names it expects back): the tiny model's tokenizer
  (``platoon.live.agent.tokenizer``) gives each one token, and spells anything else in bytes;
- ``reset()`` is called once, first, and returns the instruction;
- ``tools`` is fixed for the episode. Arguments are checked by the environment, not the harness: a call with a
  bad or missing argument, or of an unknown tool, returns a ``ToolResult`` whose text says what was wrong and
  changes nothing (``error=True``); it never raises for the agent's mistakes;
- ``call`` may return a ``ToolResult`` or an awaitable of one (an environment that does I/O); a runtime calls it
  through ``acall``, within ``rollout_config.step_timeout`` (``platoon.live.envs.deadline``). A call that raises
  (or runs past that limit) fails its rollout, and its group. After a call of a ``terminal`` tool, or a result
  with ``done``, the episode takes no more calls;
- ``outcome()`` may be asked once the episode has ended for any reason: a terminal tool, ``done``, the turn budget
  or the context running out. Its reward is in [0, 1], ``success`` the environment's own pass flag.

Environments plug in by name (``@environment("name")`` from ``platoon.config.registry``), as ``module:Class``, or
through an entry's ``package`` / an extension's entry point; ``is_text_environment`` tells an environment of this
protocol from anything else a name may resolve to.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from platoon.live.envs.base import Outcome, Task
from platoon.live.envs.deadline import blocking_deadline, tool_timeout

__all__ = [
    "TextEnvironment",
    "TextEpisode",
    "Tool",
    "ToolCall",
    "ToolResult",
    "acall",
    "is_text_environment",
]


@dataclass(frozen=True)
class Tool:
    """A tool the agent may call: ``parameters`` is the JSON schema (an ``object`` schema) of its arguments, as chat
    templates and tool-calling APIs take it. Calling a ``terminal`` tool ends the episode."""

    name: str
    description: str
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    terminal: bool = False

    def schema(self) -> dict[str, Any]:
        """The OpenAI-style function schema chat templates render: ``{"type": "function", "function": {...}}``."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": dict(self.parameters)}}


@dataclass(frozen=True)
class ToolCall:
    """One call the agent made: the tool's name and its arguments as parsed from the completion. ``id`` is the
    call's id where the renderer's format carries one."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True)
class ToolResult:
    """What a call returns: ``text`` for the model; ``content`` optional structured (JSON-safe) content for logs and
    graders; ``error`` when the call was refused (nothing changed); ``done`` when the environment ends the episode."""

    text: str
    content: Any = None
    error: bool = False
    done: bool = False


@runtime_checkable
class TextEpisode(Protocol):
    """One rollout of one task in text (see the module's doc for the order of calls)."""

    tools: Sequence[Tool]

    def reset(self) -> str:
        """The instruction: the conversation's first user message. Called once, first."""
        ...

    def call(self, call: ToolCall) -> ToolResult | Awaitable[ToolResult]:
        """Run one tool call. Never raises for the agent's mistakes (see the module's doc)."""
        ...

    def outcome(self) -> Outcome:
        """The grade, once the episode has ended."""
        ...


@runtime_checkable
class TextEnvironment(Protocol):
    """Tasks per split, and text episodes over them."""

    def task_ids(self, split: str) -> list[str]:
        ...

    def task(self, task_id: str) -> Task:
        ...

    def episode(self, task: Task) -> TextEpisode:
        ...


def is_text_environment(env: Any) -> bool:
    """True when ``env`` speaks text: its class says ``speaks_text = True`` (an environment written for the token
    protocol of earlier releases shares ``task_ids``, ``task`` and ``episode``, so structure alone cannot tell)."""
    return bool(getattr(env, "speaks_text", False))


async def acall(episode: TextEpisode, call: ToolCall, *, timeout: float | None = None) -> ToolResult:
    """``episode.call(call)``, awaited when the environment answers with an awaitable, within ``timeout`` seconds
    in all (None: no limit; past it, ``ToolTimeout``: see ``platoon.live.envs.deadline``)."""
    began = time.monotonic()
    with blocking_deadline(call.name, timeout):
        result = episode.call(call)
    if not inspect.isawaitable(result):
        return result
    if timeout is None:
        return await result
    limit = asyncio.timeout(max(0.0, timeout - (time.monotonic() - began)))
    try:
        async with limit:
            return await result
    except TimeoutError as exc:
        if limit.expired():
            raise tool_timeout(call.name, timeout) from exc
        raise
