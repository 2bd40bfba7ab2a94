"""``role_colon``: each message as ``role: text <eot>``, and a tool call as the tool's name and its arguments.

A conversation renders as

```
system: [the system message] guess number <eot>         (the tools: each one's name and its parameters)
user: guess the number from 1 to 16 in 5 guesses <eot>
assistant: guess 8 <eot>
tool: higher 9 16 <eot>
assistant:                                                (the generation prompt)
```

with each piece encoded by the tokenizer on its own (the markers are single tokens of ``TinyTokenizer``; another
tokenizer spells them in its own ids). Completions stop at ``<eot>``.

**The call syntax**, compact enough for a small model to learn from scratch: an assistant message whose first word
names one of the tools is a call, ``name arg1 arg2 ...``, the arguments positional in the order of the tool's
schema ``properties``; calls are separated by the word ``;``. An argument is a JSON value (``8``, ``"oak planks"``,
``{"stick": 2}``) or, when what follows is not JSON, a bare word (``stick``: the string). Any other message is plain
text; so is a call with more arguments than its tool takes (malformed: it stays in the content, no call is made).
The format carries no call ids.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from platoon.live.agent.messages import Message
from platoon.live.envs.text import Tool, ToolCall

if TYPE_CHECKING:  # make_renderer (in renderer) imports this module when it builds one
    from platoon.live.agent.renderer import Tokenizer

__all__ = ["RoleColonRenderer", "call_text", "parse_calls"]

END = "<eot>"
SEPARATOR = ";"
_DECODER = json.JSONDecoder()


class RoleColonRenderer:
    """The ``role_colon`` renderer over ``tokenizer`` (see the module's doc). It takes no options."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._end = list(tokenizer.encode(END))
        self._markers = {role: list(tokenizer.encode(f"{role}:")) for role in ("system", "user", "assistant", "tool")}
        self.stop_sequences: tuple[tuple[int, ...], ...] = (tuple(self._end),)

    def prompt(self, messages: Sequence[Message], tools: Sequence[Tool]) -> list[int]:
        messages = list(messages)
        system = messages.pop(0).content if messages and messages[0].role == "system" else ""
        signatures = f" {SEPARATOR} ".join(_signature(t) for t in tools)
        ids: list[int] = []
        if system or signatures:
            ids += self._segment("system", " ".join(p for p in (system, signatures) if p))
        for m in messages:
            ids += self._message(m)
        return ids + self._markers["assistant"]

    def extend(self, messages: Sequence[Message], new: Sequence[Message], tools: Sequence[Tool], *,
               closed: bool) -> list[int]:
        ids = [] if closed else list(self._end)
        for m in new:
            ids += self._message(m)
        return ids + self._markers["assistant"]

    def parse(self, completion: Sequence[int], tools: Sequence[Tool] = ()) -> Message:
        """The assistant message of ``completion`` (its closing ``<eot>`` dropped); its calls need ``tools`` (the
        names that make a call, and each one's argument order)."""
        ids = list(completion)
        if ids[-len(self._end):] == self._end:
            ids = ids[: -len(self._end)]
        text = self.tokenizer.decode(ids).strip()
        calls = parse_calls(text, tools)
        return Message("assistant", "" if calls else text, tool_calls=calls)

    def _message(self, m: Message) -> list[int]:
        text = m.content
        if m.tool_calls:
            calls = f" {SEPARATOR} ".join(call_text(c) for c in m.tool_calls)
            text = f"{text} {calls}" if text else calls
        return self._segment(m.role, text)

    def _segment(self, role: str, text: str) -> list[int]:
        return self._markers[role] + (list(self.tokenizer.encode(text)) if text else []) + self._end


def _signature(tool: Tool) -> str:
    return " ".join([tool.name, *tool.parameters.get("properties", {})])


def call_text(call: ToolCall) -> str:
    """A call in the syntax ``parse_calls`` reads: its name, then its arguments' values in their order."""
    return " ".join([call.name, *(_value_text(v) for v in call.arguments.values())])


def _value_text(value: Any) -> str:
    if isinstance(value, str) and value not in ("", SEPARATOR) and value == _read_value(value, 0)[0]:
        return value  # a bare word reads back as itself
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def parse_calls(text: str, tools: Sequence[Tool]) -> tuple[ToolCall, ...]:
    """The calls ``text`` makes (see the module's doc); () when it is plain text or malformed."""
    by_name: Mapping[str, Tool] = {t.name: t for t in tools}
    calls: list[ToolCall] = []
    pos = 0
    while True:
        pos = _skip_spaces(text, pos)
        name, pos = _read_word(text, pos)
        tool = by_name.get(name)
        if tool is None:
            return ()
        params = list(tool.parameters.get("properties", {}))
        args: list[Any] = []
        while (pos := _skip_spaces(text, pos)) < len(text) and _read_word(text, pos)[0] != SEPARATOR:
            value, pos = _read_value(text, pos)
            args.append(value)
        if len(args) > len(params):
            return ()
        calls.append(ToolCall(tool.name, dict(zip(params, args, strict=False))))
        if pos >= len(text):
            return tuple(calls)
        pos += len(SEPARATOR)


def _skip_spaces(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _read_word(text: str, pos: int) -> tuple[str, int]:
    end = pos
    while end < len(text) and not text[end].isspace():
        end += 1
    return text[pos:end], end


def _read_value(text: str, pos: int) -> tuple[Any, int]:
    """A JSON value that ends at a space or the end of the text, else the bare word at ``pos``."""
    try:
        value, end = _DECODER.raw_decode(text, pos)
    except json.JSONDecodeError:
        return _read_word(text, pos)
    if end < len(text) and not text[end].isspace():
        return _read_word(text, pos)
    return value, end
