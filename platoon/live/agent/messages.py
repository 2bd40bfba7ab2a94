"""A conversation as the agent loop keeps it: system, user, assistant (with tool calls) and tool messages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from platoon.live.envs.text import ToolCall

__all__ = ["Message", "Role"]

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class Message:
    """One message. An assistant message may carry ``tool_calls``, and ``call_error`` when its text meant a call
    that did not parse (what to tell the model); a tool message answers the call ``tool_call_id`` of tool ``name``
    with ``content``."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    call_error: str | None = None
