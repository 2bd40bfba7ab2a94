"""What a chat template does with tools, found once at start by rendering probe conversations through it.

Nothing here is taken on trust from a model's name: the template itself is asked.

- ``call_form(render, parse_as)``: the tool-call syntax the template writes. A probe conversation (a user message,
  an assistant message calling the probe tool, the tool's result) is rendered with the call's arguments as a
  mapping, then, where that fails or reads back wrong, as a JSON string (DeepSeek-R1-Distill's form); the
  assistant's text is handed to each parser of ``DETECTION_ORDER``, and the first that reads back exactly the probe
  call names the format. None: the template writes no call this project can read;
- ``drops(render)``: whether the template leaves the tool list or a tool's result out of the prompt (gemma-2,
  Phi-3.5 and DeepSeek-R1-Distill drop the list; Phi-3.5 drops results too);
- ``check_turns(renderer)``: every turn's ids are the template's own. A probe episode (a call, its result, a reply
  with no call, a user message after it) is built turn by turn the way the harness builds it (``prompt``, the
  completion as the template writes it, ``extend``) and compared with the whole render: where ``extend``'s ids
  start, the whole render's ids must break at the same place (a sentencepiece tokenizer that prepends ``▁`` to text
  standing alone would add a token there), and each message the harness rendered must appear as often turn by turn
  as in the whole render (Mistral's template moves the tool list before the last user message, so a growing
  conversation would hold it twice). A mismatch is a ``TemplateMismatch`` naming the template, the place and the
  text around it.

Assistant messages are left out of the comparison on purpose: a template may rewrite earlier assistant turns once
more messages follow (Qwen3 drops their reasoning), and training keeps what the model sampled, as it sampled it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from platoon.live.agent.messages import Message
from platoon.live.envs.text import Tool, ToolCall

__all__ = ["DETECTION_ORDER", "PROBE_TOOL", "TemplateMismatch", "call_form", "check_turns", "completion_text", "drops",
           "template_name"]

PROBE_TOOL = Tool("platoon_probe_tool", "platoon-probe-tool-description",
                  {"type": "object", "properties": {"probe_arg": {"type": "string"}}, "required": ["probe_arg"]})
PROBE_CALL = ToolCall("platoon_probe_tool", {"probe_arg": "platoon-probe-value"}, "pr0beCa11")  # Mistral: 9 alnum
PROBE_INSTRUCTION = "platoon-probe-instruction"
PROBE_RESULT = "platoon-probe-result"
PROBE_REPLY = "platoon-probe-reply"
PROBE_FOLLOW_UP = "platoon-probe-follow-up"

DETECTION_ORDER = ("hermes", "qwen3_coder", "mistral", "deepseek_v3", "llama3_json", "pythonic")
"""The parsers tried on a template's probe call, the ones with markers of their own first."""

Render = Callable[[Sequence[Message], Sequence[Tool], bool], str]
"""``render(messages, tools, generation_prompt)``: the template's text (its arguments form fixed)."""


class TemplateMismatch(ValueError):
    """The template cannot be followed turn by turn as it is; the message says where and what to change."""


def template_name(tokenizer: Any) -> str:
    """How an error names a tokenizer's chat template: by the checkpoint it came from, where known."""
    where = getattr(tokenizer, "name_or_path", "") or ""
    return f"the chat template of {where}" if where else "the tokenizer's chat template"


def _probe_episode() -> list[Message]:
    return [Message("user", PROBE_INSTRUCTION), Message("assistant", "", tool_calls=(PROBE_CALL,)),
            Message("tool", PROBE_RESULT, tool_call_id=PROBE_CALL.id, name=PROBE_CALL.name)]


def assistant_text(render: Render, messages: Sequence[Message], tools: Sequence[Tool]) -> str:
    """What the template writes for ``messages``' last (assistant) message: the render of the conversation past
    where it stops matching the render of the one before it with its generation prompt (the prompt the model
    completed); where it stops inside that prompt (Qwen3's empty ``<think></think>``, DeepSeek-R1's ``<think>``),
    back at the last marker's or line's end before it, so that no marker is cut in two."""
    before = render(messages[:-1], tools, True)
    whole = render(messages, tools, False)
    k = 0
    while k < min(len(before), len(whole)) and before[k] == whole[k]:
        k += 1
    if k < len(before):
        while k > 0 and whole[k - 1] not in "\n>]":
            k -= 1
    return whole[k:]


def call_form(render_as: Callable[[bool], Render], parse_as: Callable[[str, str], list[ToolCall]],
              end_tokens: Sequence[str]) -> tuple[str | None, bool]:
    """The parser whose syntax the template writes for the probe call, and whether it wants the arguments as a JSON
    string; ``(None, False)`` when no parser reads the call back. ``render_as(arguments_as_json)`` renders;
    ``parse_as(parser, text)`` parses outside reasoning."""
    for as_json in (False, True):
        try:
            text = assistant_text(render_as(as_json), _probe_episode()[:2], (PROBE_TOOL,))
        except Exception:  # noqa: BLE001 - a template that raises on one form may take the other
            continue
        cut = min((i for t in end_tokens if (i := text.find(t)) >= 0), default=len(text))
        for name in DETECTION_ORDER:
            calls = parse_as(name, text[:cut])
            if [(c.name, dict(c.arguments)) for c in calls] == [(PROBE_CALL.name, dict(PROBE_CALL.arguments))]:
                return name, as_json
    return None, False


def drops(render: Render) -> tuple[bool, bool]:
    """Whether the template leaves out (the tool list, a tool's result) of the probe episode's render."""
    try:
        prompt = render(_probe_episode()[:1], (PROBE_TOOL,), True)
    except Exception:  # noqa: BLE001 - a template that raises on tools does not render them
        prompt = ""
    try:
        whole = render(_probe_episode(), (PROBE_TOOL,), True)
    except Exception:  # noqa: BLE001 - nor one that raises on a tool message its results
        whole = ""
    return PROBE_TOOL.description not in prompt, PROBE_RESULT not in whole


def check_turns(renderer: Any, render: Render, name: str) -> None:
    """``TemplateMismatch`` unless the probe episode built turn by turn (``renderer.prompt``, the completion as the
    template writes it, ``renderer.extend``) breaks where the whole render's ids break, with each message the
    harness renders as often as the whole render holds it. ``render`` is the renderer's own; ``name`` the template's
    name for the message."""
    tools = (PROBE_TOOL,)
    turns = [_probe_episode()[:2], [_probe_episode()[2]],
             [Message("assistant", PROBE_REPLY)], [Message("user", PROBE_FOLLOW_UP)]]
    messages = list(turns[0][:1])
    built = render(messages, tools, True)
    encode = renderer.tokenizer.encode
    for completion, new in ((turns[0][1], turns[1]), (turns[2][0], turns[3])):
        messages.append(completion)
        text = completion_text(renderer, render, messages, tools)
        after = renderer.extend_text(messages, new, tools, closed=True)
        added = encode(after)
        messages += new
        whole = render(messages, tools, True)
        head = whole[:len(whole) - len(after)]
        if not whole.endswith(after):
            raise TemplateMismatch(f"{name}: the text platoon appends after an assistant turn is not the end of the "
                                   f"whole conversation's render: {_around(whole, len(head))}")
        whole_ids, head_ids = encode(whole), encode(head)
        if whole_ids != head_ids + list(added):
            at = _first_difference(whole_ids, head_ids + list(added))
            raise TemplateMismatch(
                f"{name}: its tokenizer encodes the text platoon appends after an assistant turn differently from "
                f"the same text inside the whole conversation (token {at}: the whole render has "
                f"{renderer.tokenizer.decode(whole_ids[at:at + 3])!r}, turn by turn "
                f"{renderer.tokenizer.decode((head_ids + list(added))[at:at + 3])!r}; {_around(whole, len(head))}). "
                "A sentencepiece tokenizer that prepends '▁' to text standing alone does this: use a tokenizer whose "
                "pre-tokenizer adds no prefix space (prepend_scheme 'first' or 'never', legacy: false off)")
        built += text + after
    _check_counts(built, whole, name)


def completion_text(renderer: Any, render: Render, messages: Sequence[Message], tools: Sequence[Tool]) -> str:
    """``messages``' last (assistant) message as the template writes it after the generation prompt, up to and with
    its first end token (all of it for a template that writes none)."""
    text = assistant_text(render, messages, tools)
    ends = [i + len(t) for t in renderer.end_tokens if (i := text.find(t)) >= 0]
    return text[:min(ends)] if ends else text


def _check_counts(built: str, whole: str, name: str) -> None:
    for what, probe in (("the tool list", PROBE_TOOL.description), ("the instruction", PROBE_INSTRUCTION),
                        ("a tool's result", PROBE_RESULT), ("a user message", PROBE_FOLLOW_UP)):
        if built.count(probe) != whole.count(probe):
            at = built.find(probe, built.find(probe) + 1) if built.count(probe) > 1 else built.find(probe)
            raise TemplateMismatch(
                f"{name}: turn by turn the conversation holds {what} {built.count(probe)} time(s), the whole render "
                f"{whole.count(probe)}: the template moves it once messages follow (Mistral's writes the tool list "
                f"before the last user message), so the contexts platoon trains on would not be the template's "
                f"({_around(built, max(at, 0))}). Give a template of your own that keeps it in place "
                "(train.renderer_kwargs.chat_template: a Jinja file; docs/renderers.md)")


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _around(text: str, at: int, width: int = 60) -> str:
    return f"at character {at}, around {text[max(0, at - width):at]!r} | {text[at:at + width]!r}"
