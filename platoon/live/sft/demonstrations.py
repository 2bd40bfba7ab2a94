"""Demonstrations for supervised fine-tuning: conversations, where they come from, and the tokens a step trains on.

A demonstration is a ``Conversation``: its messages (a user's instruction first, then assistant messages, with tool
calls, and the tool results or user messages after each) and the tools it was played with. Two sources:

- **an environment** that offers ``demonstration(task_id)``: the assistant's turns of an expert's play of a task,
  each a ``ToolCall``, a list of them (one message's calls) or a string (a reply without a call). platoon plays them
  through a real episode (``environment_demonstrations``): the instruction is the episode's, each result is the
  environment's answer (cut as the harness cuts it), a turn without a call is answered with the harness's nudge,
  and only a play the environment grades a success is kept;
- **a JSONL file** (``read_demonstrations``), a conversation a line in the common ``messages`` form: ``{"messages":
  [{"role": "user", "content": ...}, {"role": "assistant", "content": ..., "tool_calls": [{"id": ..., "type":
  "function", "function": {"name": ..., "arguments": {...} or "<JSON>"}}]}, {"role": "tool", "tool_call_id": ...,
  "content": ...}, ...], "tools": [{"type": "function", "function": {"name", "description", "parameters"}}]}``.
  ``tools`` is required when the conversation calls one. Every problem is reported with its line, all at once
  (``ConfigError``: exit 78).

``conversation_tokens(renderer, conversation)`` lays a conversation out as RL's rollouts are laid out
(``platoon.live.agent.harness``): the renderer's prompt of the messages before the first assistant message, then,
per assistant message, its ids as the model writes them (``renderer.completion``: trained on, mask 1) and the
renderer's ``extend`` of the messages after it (mask 0). So the prompt, tool results and user messages are masked,
and the tokens trained on are the very ones a rollout samples.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from platoon.config.errors import ConfigError
from platoon.live.agent.harness import MAX_RESULT_CHARS, NUDGE, model_text
from platoon.live.agent.messages import Message
from platoon.live.envs.text import Tool, ToolCall, acall

__all__ = ["Conversation", "conversation_tokens", "environment_demonstrations", "read_demonstrations"]

ROLES = ("system", "user", "assistant", "tool")
MAX_PROBLEMS = 20
"""Problems of a demonstrations file a report lists (then how many more)."""


@dataclass(frozen=True)
class Conversation:
    """One demonstration: ``messages``, the ``tools`` offered, and where it came from (``source``: ``FILE:LINE`` or
    ``ENTRY/TASK``)."""

    messages: tuple[Message, ...]
    tools: tuple[Tool, ...]
    source: str


# ---------------------------------------------------------------------------------------------------- tokens
def conversation_tokens(renderer: Any, conversation: Conversation) -> tuple[list[int], list[int]]:
    """The ids of ``conversation`` as a rollout lays them out, and their mask (1: an assistant's token)."""
    messages = list(conversation.messages)
    tools = conversation.tools
    first = next(i for i, m in enumerate(messages) if m.role == "assistant")
    ids = list(renderer.prompt(messages[:first], tools))
    mask = [0] * len(ids)
    i = first
    while i < len(messages):
        completion = list(renderer.completion(messages[: i + 1], tools))
        ids += completion
        mask += [1] * len(completion)
        after = next((j for j in range(i + 1, len(messages)) if messages[j].role == "assistant"), len(messages))
        if after < len(messages):  # what follows the last assistant message trains nothing
            added = list(renderer.extend(messages[: i + 1], messages[i + 1: after], tools, closed=True))
            ids += added
            mask += [0] * len(added)
        i = after
    return ids, mask


# ------------------------------------------------------------------------------------------------ environment
def environment_demonstrations(env: Any, task_ids: Iterable[str], *, entry: str,
                               step_timeout: float | None = None) -> tuple[list[Conversation], list[str]]:
    """The demonstrations ``env`` offers for ``task_ids``, each played through an episode (the module's doc), and
    a line for each that was left out (it failed, or the environment raised). ``TypeError`` when ``env`` offers
    none."""
    if not callable(getattr(env, "demonstration", None)):
        raise TypeError(f"{type(env).__module__}:{type(env).__qualname__} offers no demonstrations (a method "
                        "demonstration(task_id)); give sft.demonstrations a JSONL file of conversations instead")
    return asyncio.run(_play_all(env, list(task_ids), entry, step_timeout))


async def _play_all(env: Any, task_ids: list[str], entry: str,
                    step_timeout: float | None) -> tuple[list[Conversation], list[str]]:
    kept: list[Conversation] = []
    left_out: list[str] = []
    for task_id in task_ids:
        try:
            played = await _play(env, task_id, step_timeout)
        except Exception as exc:  # noqa: BLE001 - the environment's failure on one task costs that task alone
            left_out.append(f"{entry}/{task_id}: {type(exc).__name__}: {exc}")
            continue
        if isinstance(played, str):
            left_out.append(f"{entry}/{task_id}: {played}")
        else:
            kept.append(Conversation(played[0], played[1], f"{entry}/{task_id}"))
    return kept, left_out


async def _play(env: Any, task_id: str, step_timeout: float | None) -> tuple[tuple[Message, ...], tuple[Tool, ...]] | str:
    """The conversation of ``env``'s demonstration of ``task_id``, or why it is not kept."""
    turns = list(env.demonstration(task_id))
    episode = env.episode(env.task(task_id))
    messages = [Message("user", episode.reset())]
    tools = tuple(episode.tools)
    ended = False
    for turn in turns:
        if ended:
            return "its demonstration goes on after the episode ended"
        calls = (turn,) if isinstance(turn, ToolCall) else () if isinstance(turn, str) else tuple(turn)
        messages.append(Message("assistant", turn if isinstance(turn, str) else "", tool_calls=calls))
        if not calls:
            messages.append(Message("user", NUDGE))
        for call in calls:
            result = await acall(episode, call, timeout=step_timeout)
            messages.append(Message("tool", model_text(result.text, MAX_RESULT_CHARS), tool_call_id=call.id,
                                    name=call.name))
            if result.done or any(t.terminal and t.name == call.name for t in tools):
                ended = True
                break
    if not turns:
        return "its demonstration is empty"
    outcome = episode.outcome()
    if not outcome.success:
        return f"its demonstration does not succeed (reward {outcome.reward:g})"
    return tuple(messages), tools


# ------------------------------------------------------------------------------------------------------- file
def read_demonstrations(path: str | Path) -> list[Conversation]:
    """The conversations of the JSONL file ``path`` (the module's doc); ``ConfigError`` naming each bad line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"sft.demonstrations: cannot read {path}: {exc}"]) from None
    conversations: list[Conversation] = []
    problems: list[str] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            conversations.append(_conversation(json.loads(line), where))
        except json.JSONDecodeError as exc:
            problems.append(f"{where}: not JSON ({exc.msg} at column {exc.colno})")
        except ValueError as exc:
            problems.append(f"{where}: {exc}")
    if problems:
        more = len(problems) - MAX_PROBLEMS
        raise ConfigError([f"sft.demonstrations: {p}" for p in problems[:MAX_PROBLEMS]]
                          + ([f"sft.demonstrations: and {more} more bad line(s) in {path}"] if more > 0 else []))
    if not conversations:
        raise ConfigError([f"sft.demonstrations: {path} holds no conversation"])
    return conversations


def _conversation(row: Any, where: str) -> Conversation:
    """A line's conversation; ``ValueError`` saying what is wrong with it."""
    if not isinstance(row, Mapping):
        raise ValueError(f"a line is a JSON object with 'messages', got {type(row).__name__}")
    unknown = sorted(set(row) - {"messages", "tools"})
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(map(repr, unknown))} (a line holds 'messages' and 'tools')")
    tools = tuple(_tool(t, k) for k, t in enumerate(_list(row.get("tools", []), "tools")))
    raw = _list(row.get("messages"), "messages")
    messages = [_message(m, k, {t.name for t in tools}) for k, m in enumerate(raw)]
    roles = [m.role for m in messages]
    if "assistant" not in roles:
        raise ValueError("messages: no assistant message (nothing to train on)")
    head = [r for r in roles[: roles.index("assistant")] if r != "system"]
    if not head or head[0] != "user" or "tool" in head:
        raise ValueError("messages: the conversation opens with a user message (a system message may come first)")
    called: set[str | None] = set()
    for k, m in enumerate(messages):
        if m.role == "assistant":
            called = {c.id for c in m.tool_calls}
        elif m.role == "tool" and (not called or (m.tool_call_id is not None and m.tool_call_id not in called)):
            raise ValueError(f"messages[{k}]: a tool result answers no call of the assistant message before it")
    return Conversation(tuple(messages), tools, where)


def _list(value: Any, key: str) -> list[Any]:
    if not isinstance(value, list) or (key == "messages" and not value):
        raise ValueError(f"{key}: {'missing' if value is None else 'must be a non-empty list'}"
                         if key == "messages" else f"{key}: must be a list")
    return value


def _tool(value: Any, k: int) -> Tool:
    spec = value.get("function", value) if isinstance(value, Mapping) else None
    if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str) or not spec["name"]:
        raise ValueError(f"tools[{k}]: a tool is {{'type': 'function', 'function': {{'name', 'description', "
                         "'parameters'}}")
    parameters = spec.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(parameters, Mapping):
        raise ValueError(f"tools[{k}].parameters: must be a JSON schema object")
    return Tool(spec["name"], str(spec.get("description", "")), dict(parameters))


def _message(value: Any, k: int, tools: set[str]) -> Message:
    at = f"messages[{k}]"
    if not isinstance(value, Mapping) or value.get("role") not in ROLES:
        raise ValueError(f"{at}: a message has a role, one of {', '.join(ROLES)}")
    role = value["role"]
    content = value.get("content")
    if content is None:
        content = ""
    if not isinstance(content, str):
        raise ValueError(f"{at}.content: must be text")
    calls = tuple(_call(c, f"{at}.tool_calls[{j}]", tools) for j, c in enumerate(value.get("tool_calls") or []))
    if calls and role != "assistant":
        raise ValueError(f"{at}: only an assistant message makes tool calls")
    if role == "assistant" and not calls and not content:
        raise ValueError(f"{at}: an assistant message has content or tool_calls")
    call_id, name = value.get("tool_call_id"), value.get("name")
    return Message(role, content, tool_calls=calls, tool_call_id=call_id if isinstance(call_id, str) else None,
                   name=name if isinstance(name, str) else None)


def _call(value: Any, at: str, tools: set[str]) -> ToolCall:
    spec = value.get("function", value) if isinstance(value, Mapping) else None
    if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
        raise ValueError(f"{at}: a call is {{'type': 'function', 'function': {{'name', 'arguments'}}}}")
    if spec["name"] not in tools:
        raise ValueError(f"{at}: calls {spec['name']!r}, which the line's tools do not list"
                         + ("" if tools else " (it lists none: add 'tools')"))
    arguments = spec.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            raise ValueError(f"{at}.function.arguments: not JSON") from None
    if not isinstance(arguments, Mapping):
        raise ValueError(f"{at}.function.arguments: must be an object (or its JSON)")
    call_id = value.get("id") if isinstance(value, Mapping) else None
    return ToolCall(spec["name"], dict(arguments), call_id if isinstance(call_id, str) else None)

