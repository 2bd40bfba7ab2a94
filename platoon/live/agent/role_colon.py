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
``{"stick": 2}``), a bare word (``stick``: the string), or a container in **word form**: ``{ stick: 2, coal: 1 }``,
``[ torch, 4 ]`` (nested the same way), each key, value and bracket a word of its own, a key ending in ``:``, every
value but the last in ``,``. Any other message is plain text; so is a call with more arguments than its tool takes,
or a malformed container (it stays in the content, no call is made). The format carries no call ids.

A call renders (``call_text``: a demonstration's calls, a conversation's earlier turns) with its containers in word
form wherever every key and string in them is a word that reads back as itself, else in JSON. The word form is for
the tiny tokenizer (``platoon.live.agent.tokenizer``), which gives each word an environment declares one token:
``craft { t0_i30: 2, t0_i37: 4 } [ t1_i99, 2 ]`` is 17 tokens where its JSON is about 45 bytes (TextCraft declares
each item before ``:`` and ``,`` and each count before ``,`` as words).
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

    def completion(self, messages: Sequence[Message], tools: Sequence[Tool]) -> list[int]:
        """The ids of ``messages``' last (assistant) message as a model writes it after the generation prompt, its
        ``<eot>`` last: what supervised fine-tuning trains on."""
        return self._message(messages[-1])[len(self._markers["assistant"]):]

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
    if isinstance(value, Mapping | list) and value and (words := _word_form(value)) is not None:
        return words
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


_BRACKETS = ("{", "}", "[", "]")


def _word_form(value: Any) -> str | None:
    """``value`` (a container) in word form, or None when a key or a string in it is not a word that reads back as
    itself there (a space in it, an ending ``:`` or ``,``, a bracket, a word that reads as a number)."""
    if isinstance(value, Mapping):
        keys = [k for k in value if isinstance(k, str) and _word(k)]
        if len(keys) < len(value):
            return None
        inner = [f"{k}: {text}" if (text := _item_text(v)) is not None else None for k, v in value.items()]
        opener, closer = "{", "}"
    else:
        inner = [_item_text(v) for v in value]
        opener, closer = "[", "]"
    if not inner or None in inner:
        return None
    return f"{opener} {', '.join(inner)} {closer}"  # type: ignore[arg-type]


def _item_text(value: Any) -> str | None:
    if isinstance(value, Mapping | list):
        return _word_form(value) if value else None
    if isinstance(value, str):
        return value if _word(value) else None
    text = json.dumps(value)
    return text if _scalar(text) == value and type(_scalar(text)) is type(value) else None


def _word(text: str) -> bool:
    """Whether ``text`` stands in word form as the string itself."""
    return (bool(text) and not any(c.isspace() for c in text) and text[-1] not in ":," and text[0] not in "{}[]"
            and text != SEPARATOR and _scalar(text) == text)


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
    """A JSON value that ends at a space or the end of the text, else a container in word form, else the bare word
    at ``pos``."""
    try:
        value, end = _DECODER.raw_decode(text, pos)
    except json.JSONDecodeError:
        pass
    else:
        if end >= len(text) or text[end].isspace():
            return value, end
    word, end = _read_word(text, pos)
    if word in ("{", "["):
        read = _read_container(text, pos)
        if read is not None and not read[2]:
            return read[0], read[1]
    return word, end


def _read_container(text: str, pos: int) -> tuple[Any, int, bool] | None:
    """The word-form container opening at ``pos``: its value, where it ends, and whether a ``,`` closed it (it is
    an item of a container around it); None when it is malformed."""
    closer = "}" if text[pos] == "{" else "]"
    items: list[Any] = []
    keys: list[str] = []
    pos, more = pos + 1, True
    while True:
        pos = _skip_spaces(text, pos)
        piece, end = _read_word(text, pos)
        if piece in (closer, closer + ","):
            if more and items:  # "a, }": a comma with nothing after it
                return None
            return (dict(zip(keys, items, strict=True)) if closer == "}" else items), end, piece.endswith(",")
        if not piece or not more:
            return None
        if closer == "}":
            if len(piece) < 2 or not piece.endswith(":"):
                return None
            keys.append(piece[:-1])
            pos = _skip_spaces(text, end)
            piece, end = _read_word(text, pos)
            if not piece:
                return None
        if piece in ("{", "["):
            read = _read_container(text, pos)
            if read is None:
                return None
            value, pos, more = read
        else:
            more = len(piece) > 1 and piece.endswith(",")
            value, pos = _scalar(piece[:-1] if more else piece), end
        items.append(value)


def _scalar(piece: str) -> Any:
    """A word-form piece's value: its JSON (a number, ``true``, a quoted string), else the word itself."""
    try:
        return json.loads(piece)
    except json.JSONDecodeError:
        return piece
