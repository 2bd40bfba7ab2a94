"""Tool-call parsers: a completion's text in, the calls it makes and the text left out (``PARSERS``, by name).

One parser per format in use (vLLM's tool parsers go by the same names):

- ``hermes`` (Qwen2.5, Qwen3, Hermes): ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks;
- ``llama3_json`` (Llama 3.1, 3.2): a JSON object ``{"name": ..., "parameters": {...}}`` (several joined by ``;``)
  as the whole message, or after ``<|python_tag|>``;
- ``pythonic`` (Llama 3.2 and 4's other form): ``[get_weather(city="Paris"), finish()]`` as the whole message;
- ``mistral``: ``[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]`` (v0.3) or ``[TOOL_CALLS]name[ARGS]{...}``
  (later tokenizers); each call gets the 9-character alphanumeric id Mistral's template demands, derived from the
  call's text and place (the same completion, the same ids: runs stay deterministic), which the tool's result
  carries back;
- ``deepseek_v3`` (DeepSeek V3, R1 and its distills): ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME`` and a
  fenced JSON block, or ``NAME<｜tool▁sep｜>{...}`` (V3.1), between ``<｜tool▁call▁end｜>`` markers;
- ``qwen3_coder``: ``<tool_call><function=NAME><parameter=KEY>VALUE</parameter>...</function></tool_call>``, each
  value JSON when it reads as JSON, else the text;
- ``text``: the plain-text fallback (``craft({"target": "plank"})`` on a line of its own), for the tools' names
  only; ``auto``: hermes blocks when there are any, else ``text``.

Rules every parser keeps: it never raises; what parses becomes a ``ToolCall`` and leaves the text, a malformed
call stays in the text and is no call; and **reasoning is never searched for calls** (``outside_reasoning``): the
text inside ``<think>``...``</think>`` (or the markers a renderer names), and before a closing marker that no
opening one precedes (a template that opens the block in its generation prompt), stays as it is, so a call the model
only drafted while thinking is not run.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from platoon.live.envs.text import ToolCall

__all__ = ["PARSERS", "REASONING_MARKERS", "Parsed", "outside_reasoning", "parse"]

Parsed = tuple[list[ToolCall], str]
"""A parser's answer: the calls found, and the text left once they are taken out (stripped)."""

Names = Collection[str] | None
"""The tool names a parser may take a plain-text call for (None: any)."""

Parser = Callable[[str, Names], Parsed]

REASONING_MARKERS: tuple[tuple[str, str], ...] = (("<think>", "</think>"),)
"""The reasoning blocks of the model families in use (Qwen3, DeepSeek-R1, QwQ, ...)."""

_DECODER = json.JSONDecoder()


def _json_call(obj: Any, *, call_id: str | None = None) -> ToolCall | None:
    """``{"name": ..., "arguments": {...}}`` (arguments may also come as a JSON string, or as ``parameters``; none
    is ``{}``) as a ``ToolCall``; None when it is not that."""
    if isinstance(obj, str):
        try:
            obj = json.loads(obj)
        except ValueError:
            return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    return ToolCall(obj["name"], args, call_id) if isinstance(args, dict) else None


def _taken(text: str, found: Sequence[tuple[int, int, ToolCall]]) -> Parsed:
    """The calls of ``found`` (their spans of ``text``, in order) and the text outside them."""
    kept, pos = [], 0
    for start, end, _ in found:
        kept.append(text[pos:start])
        pos = end
    kept.append(text[pos:])
    return [call for *_, call in found], "".join(kept).strip()


def _blocks(pattern: re.Pattern[str], read: Callable[[re.Match[str]], ToolCall | None]) -> Parser:
    """A parser taking each match of ``pattern`` that ``read`` makes a call of."""
    def parser(text: str, names: Names = None) -> Parsed:
        found = [(m.start(), m.end(), call) for m in pattern.finditer(text) if (call := read(m)) is not None]
        return _taken(text, found)
    return parser


# --- hermes, qwen3_coder, deepseek_v3: calls between markers ------------------------------------------------------

_HERMES_OPEN, _HERMES_CLOSE = re.compile(r"<tool_call>\s*"), re.compile(r"\s*</tool_call>")


def parse_hermes(text: str, names: Names = None) -> Parsed:
    """Hermes / Qwen blocks, several allowed, anywhere outside reasoning: ``<tool_call>``, one JSON object read as
    JSON (so a ``</tool_call>`` inside one of its strings does not end it), ``</tool_call>``. Any name is taken (the
    block says it is a call; the environment answers an unknown tool with an error the model sees)."""
    found: list[tuple[int, int, ToolCall]] = []
    pos = 0
    while (opened := _HERMES_OPEN.search(text, pos)) is not None:
        pos = opened.end()
        try:
            obj, end = _DECODER.raw_decode(text, opened.end())
        except ValueError:
            continue
        closed = _HERMES_CLOSE.match(text, end)
        call = _json_call(obj) if closed is not None else None
        if call is not None:
            found.append((opened.start(), closed.end(), call))
            pos = closed.end()
    return _taken(text, found)

_CODER_PARAM = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.DOTALL)


def _coder_call(m: re.Match[str]) -> ToolCall | None:
    args: dict[str, Any] = {}
    for p in _CODER_PARAM.finditer(m.group(2)):
        try:
            args[p.group(1).strip()] = json.loads(p.group(2))
        except ValueError:
            args[p.group(1).strip()] = p.group(2)
    return ToolCall(m.group(1).strip(), args)


parse_qwen3_coder = _blocks(
    re.compile(r"<tool_call>\s*<function=([^>\n]+)>(.*?)</function>\s*</tool_call>", re.DOTALL), _coder_call)

_DS_CALL = re.compile(r"<｜tool▁call▁begin｜>(?:(\w+)<｜tool▁sep｜>(.+?)\s*```(?:json)?\s*(.*?)\s*```"
                      r"|([^<]+?)<｜tool▁sep｜>(.*?))\s*<｜tool▁call▁end｜>", re.DOTALL)


def _deepseek_call(m: re.Match[str]) -> ToolCall | None:
    if m.group(2) is not None:  # V3 and R1: function<sep>NAME then a fenced JSON block
        name, body = m.group(2).strip(), m.group(3)
    else:  # V3.1: NAME<sep>{...}
        name, body = m.group(4).strip(), m.group(5)
    try:
        args = json.loads(body)
    except ValueError:
        return None
    return ToolCall(name, args) if name and isinstance(args, dict) else None


_parse_deepseek_calls = _blocks(_DS_CALL, _deepseek_call)


def parse_deepseek_v3(text: str, names: Names = None) -> Parsed:
    """DeepSeek's call blocks; the ``<｜tool▁calls▁begin｜>``/``end｜>`` around them leave the text with them."""
    calls, rest = _parse_deepseek_calls(text, names)
    if calls:
        rest = rest.replace("<｜tool▁calls▁begin｜>", "").replace("<｜tool▁calls▁end｜>", "").strip()
    return calls, rest


# --- llama3_json, pythonic, mistral: the message's calls after a marker, or the whole message ---------------------

_PYTHON_TAG = "<|python_tag|>"


def _json_objects(text: str, start: int, sep: str) -> tuple[list[Any], int] | None:
    """The JSON values from ``start`` on, joined by ``sep`` (and blanks), running to the text's end; None else."""
    values, i = [], start
    while True:
        i = len(text) - len(text[i:].lstrip())
        try:
            value, i = _DECODER.raw_decode(text, i)
        except ValueError:
            return None
        values.append(value)
        rest = text[i:].lstrip()
        if not rest:
            return values, len(text)
        if not rest.startswith(sep):
            return None
        i = len(text) - len(rest) + len(sep)


def parse_llama3_json(text: str, names: Names = None) -> Parsed:
    """Llama 3.x's JSON calls: after ``<|python_tag|>``, or as the whole message (starting with ``{``)."""
    tag = text.find(_PYTHON_TAG)
    start = tag + len(_PYTHON_TAG) if tag >= 0 else len(text) - len(text.lstrip())
    if tag < 0 and not text.startswith("{", start):
        return [], text.strip()
    found = _json_objects(text, start, ";")
    calls = [_json_call(v) for v in found[0]] if found is not None else [None]
    if not calls or any(c is None for c in calls):
        return [], text.strip()
    return calls, text[:max(tag, 0) if tag >= 0 else start].strip()


def parse_pythonic(text: str, names: Names = None) -> Parsed:
    """``[f(a=1), g()]`` as the message (after ``<|python_tag|>`` when it has one): keyword arguments of literal
    values only; anything else is text."""
    tag = text.find(_PYTHON_TAG)
    head, body = (text[:tag], text[tag + len(_PYTHON_TAG):]) if tag >= 0 else ("", text)
    try:
        tree = ast.parse(body.strip(), mode="eval").body
    except (SyntaxError, ValueError):
        return [], text.strip()
    items = tree.elts if isinstance(tree, ast.List) else [tree]
    calls = []
    for item in items:
        if not (isinstance(item, ast.Call) and not item.args and _dotted(item.func)):
            return [], text.strip()
        try:
            args = {k.arg: ast.literal_eval(k.value) for k in item.keywords if k.arg is not None}
        except (ValueError, TypeError, SyntaxError, RecursionError):
            return [], text.strip()
        if len(args) != len(item.keywords):
            return [], text.strip()
        calls.append(ToolCall(_dotted(item.func), args))
    return (calls, head.strip()) if calls else ([], text.strip())


def _dotted(node: ast.expr) -> str:
    """``f`` or ``a.b.f`` as text ("" for anything else)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (base := _dotted(node.value)):
        return f"{base}.{node.attr}"
    return ""


_MISTRAL = "[TOOL_CALLS]"
_ID_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def mistral_call_id(text: str, index: int) -> str:
    """The 9-character alphanumeric id Mistral's template demands, derived from the completion and the call's index."""
    n = int.from_bytes(hashlib.sha256(f"{index}\0{text}".encode()).digest()[:8], "big")
    return "".join(_ID_CHARS[(n // 62 ** k) % 62] for k in range(9))


def parse_mistral(text: str, names: Names = None) -> Parsed:
    """``[TOOL_CALLS]`` then a JSON list of calls (v0.3), or ``name[ARGS]{...}`` once or more (later tokenizers)."""
    at = text.find(_MISTRAL)
    if at < 0:
        return [], text.strip()
    body = text[at + len(_MISTRAL):]
    calls: list[ToolCall | None]
    if body.lstrip().startswith("["):
        found = _json_objects(body, 0, ",")
        listed = found[0][0] if found is not None and len(found[0]) == 1 and isinstance(found[0][0], list) else None
        calls = [_json_call(v) for v in listed] if listed else [None]
    else:
        calls = [_json_call({"name": name.strip(), "arguments": args})
                 for name, args in _mistral_args(body)] or [None]
    if any(c is None for c in calls):
        return [], text.strip()
    return ([ToolCall(c.name, c.arguments, mistral_call_id(text, i)) for i, c in enumerate(calls) if c is not None],
            text[:at].strip())


def _mistral_args(body: str) -> list[tuple[str, Any]]:
    """``name[ARGS]{...}``, then again after each ``[TOOL_CALLS]``, to the body's end; [] when it is not that
    (the JSON read as JSON: a ``[TOOL_CALLS]`` inside one of its strings does not split it)."""
    out, pos = [], 0
    while True:
        at = body.find("[ARGS]", pos)
        name = body[pos:at].strip() if at >= 0 else ""
        if not name or "\n" in name:
            return []
        try:
            start = at + len("[ARGS]")
            value, pos = _DECODER.raw_decode(body, start + len(body[start:]) - len(body[start:].lstrip()))
        except ValueError:
            return []
        out.append((name, value))
        rest = body[pos:].lstrip()
        if not rest:
            return out
        if not rest.startswith(_MISTRAL):
            return []
        pos = len(body) - len(rest) + len(_MISTRAL)


# --- text and auto ----------------------------------------------------------------------------------------------

_TEXT_HEAD = re.compile(r"^[ \t]*([A-Za-z_][\w.-]*)[ \t]*(\(|(?=\{))", re.MULTILINE)


def _text_call_end(text: str, start: int, paren: bool) -> tuple[dict[str, Any], int] | None:
    """The arguments and end of a text call whose head ends at ``start``: ``)`` alone (no arguments) or a JSON
    object, then ``)`` when the head opened one; nothing but blanks may follow on the line. None otherwise."""
    i = start
    while i < len(text) and text[i] in " \t":
        i += 1
    if paren and text.startswith(")", i):
        args: Any = {}
        end = i + 1
    else:
        try:
            args, end = _DECODER.raw_decode(text, i)
        except ValueError:
            return None
        if not isinstance(args, dict):
            return None
        if paren:
            while end < len(text) and text[end] in " \t\n":
                end += 1
            if not text.startswith(")", end):
                return None
            end += 1
    if text[end:].split("\n", 1)[0].strip():
        return None
    return args, end


def parse_text(text: str, names: Names = None) -> Parsed:
    """The plain-text fallback: a line (after blanks) that is a tool name followed by ``(JSON object)``, ``()``
    or `` {JSON object}``, and nothing else, is a call: ``craft({"target": "plank"})``, ``view_inventory()``,
    ``finish {"message": "done"}``. The JSON may run over several lines. A name is letters, digits, ``_``, ``.``
    and ``-``, not starting with a digit; with ``names`` (the episode's tools), only those (plain text has no
    marker that says "this is a call", so ``Answer {"x": 1}`` would otherwise be one)."""
    found: list[tuple[int, int, ToolCall]] = []
    pos = 0
    for match in _TEXT_HEAD.finditer(text):
        if match.start() < pos or (names is not None and match.group(1) not in names):
            continue
        end_found = _text_call_end(text, match.end(), paren=match.group(2) == "(")
        if end_found is not None:
            args, pos = end_found
            found.append((match.start(), pos, ToolCall(match.group(1), args)))
    return _taken(text, found)


def parse_auto(text: str, names: Names = None) -> Parsed:
    """Hermes blocks when the text has any that parse, else the plain-text fallback."""
    calls, rest = parse_hermes(text, names)
    return (calls, rest) if calls else parse_text(text, names)


PARSERS: Mapping[str, Parser] = {
    "hermes": parse_hermes,
    "qwen3": parse_hermes,  # Qwen3 (and Qwen2.5) write hermes blocks
    "llama3_json": parse_llama3_json,
    "pythonic": parse_pythonic,
    "mistral": parse_mistral,
    "deepseek_v3": parse_deepseek_v3,
    "qwen3_coder": parse_qwen3_coder,
    "text": parse_text,
    "auto": parse_auto,
    # platoon 0.4.0's names for the same formats
    "llama3": parse_llama3_json,
    "deepseekv3": parse_deepseek_v3,
    "deepseekv31": parse_deepseek_v3,
}


# --- reasoning ----------------------------------------------------------------------------------------------------


def outside_reasoning(text: str, markers: Sequence[tuple[str, str]] = REASONING_MARKERS) -> list[tuple[bool, str]]:
    """``text`` as its pieces in order, each ``(is_reasoning, piece)``: a block from an opening marker through its
    closing one (or the text's end, the model still thinking), and, when a closing marker comes before any opening
    one, everything up to it (the template opened the block in its generation prompt)."""
    pieces: list[tuple[bool, str]] = []
    pos = 0
    for open_mark, close_mark in markers:
        first_close, first_open = text.find(close_mark), text.find(open_mark)
        if first_close >= 0 and (first_open < 0 or first_close < first_open):
            pos = first_close + len(close_mark)
            pieces.append((True, text[:pos]))
            break
    while pos < len(text):
        opened = min(((text.find(o, pos), o, c) for o, c in markers if text.find(o, pos) >= 0), default=None)
        if opened is None:
            pieces.append((False, text[pos:]))
            break
        at, _, close_mark = opened
        end = text.find(close_mark, at)
        end = len(text) if end < 0 else end + len(close_mark)
        if at > pos:
            pieces.append((False, text[pos:at]))
        pieces.append((True, text[at:end]))
        pos = end
    return pieces


def parse(name: str, text: str, names: Names = None,
          markers: Sequence[tuple[str, str]] = REASONING_MARKERS) -> Parsed:
    """Parser ``name`` over the text outside reasoning (``outside_reasoning``); the reasoning stays in the text."""
    parser = PARSERS[name]
    calls: list[ToolCall] = []
    kept: list[str] = []
    for reasoning, piece in outside_reasoning(text, markers):
        if reasoning:
            kept.append(piece)
            continue
        found, rest = parser(piece, names)
        calls.extend(found)
        kept.append(piece[:len(piece) - len(piece.lstrip())] + rest if found else piece)
    if name == "mistral":  # ids come from the whole completion, however reasoning split it
        calls = [ToolCall(c.name, c.arguments, mistral_call_id(text, i)) for i, c in enumerate(calls)]
    return calls, "".join(kept).strip()


# --- calls that did not parse -------------------------------------------------------------------------------------

CALL_MARKERS: Mapping[str, tuple[str, ...]] = {
    "hermes": ("<tool_call>",), "qwen3": ("<tool_call>",), "auto": ("<tool_call>",),
    "qwen3_coder": ("<tool_call>", "<function="),
    "mistral": (_MISTRAL,),
    "deepseek_v3": ("<｜tool▁call▁begin｜>", "<｜tool▁calls▁begin｜>"), "deepseekv3": ("<｜tool▁call▁begin｜>",),
    "deepseekv31": ("<｜tool▁call▁begin｜>",),
    "llama3_json": (_PYTHON_TAG, '{"name"'), "llama3": (_PYTHON_TAG, '{"name"'),
    "pythonic": (_PYTHON_TAG,),
}
"""What in a message's text says a call was meant, per parser: left in the text after parsing, the call was
malformed."""

CALL_FORMS: Mapping[str, str] = {
    "hermes": '<tool_call>\n{"name": "<tool>", "arguments": {...}}\n</tool_call>',
    "qwen3_coder": "<tool_call>\n<function=<tool>>\n<parameter=<name>>\n<value>\n</parameter>\n</function>\n</tool_call>",
    "mistral": '[TOOL_CALLS] [{"name": "<tool>", "arguments": {...}}]',
    "deepseek_v3": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜><tool>\n```json\n{...}\n```"
                   "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    "llama3_json": '{"name": "<tool>", "parameters": {...}}',
    "pythonic": '[<tool>(<name>=<value>)]',
}
"""How a parser's call is written, for the message that tells a model its call did not parse."""
_SAME_FORM = {"qwen3": "hermes", "auto": "hermes", "deepseekv3": "deepseek_v3", "deepseekv31": "deepseek_v3",
              "llama3": "llama3_json"}


def call_error(name: str, content: str, markers: Sequence[tuple[str, str]] = REASONING_MARKERS) -> str | None:
    """What to tell the model when ``content`` (a message's text once parser ``name`` took its calls out) still
    holds a call marker outside reasoning: the call it meant did not parse. None when it holds none."""
    meant = CALL_MARKERS.get(name, ())
    outside = "".join(piece for reasoning, piece in outside_reasoning(content, markers) if not reasoning)
    found = next((m for m in meant if m in outside), None)
    if found is None:
        return None
    at = outside.find(found)
    form = CALL_FORMS.get(_SAME_FORM.get(name, name), "")
    return (f"error: your tool call could not be read (at {outside[at:at + 80]!r}); no tool was run. "
            f"Write each call as {form}" if form else "error: your tool call could not be read; no tool was run.")
