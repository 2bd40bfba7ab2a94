"""The ``chat_template`` renderer: a Hugging Face tokenizer's own chat template, tool calls parsed by a named parser.

It keeps the renderer contract of ``platoon.live.agent.renderer``: the ids the model sampled are never re-encoded.

- ``prompt``: the template's text of the whole conversation with its generation prompt, encoded (what
  ``apply_chat_template(..., add_generation_prompt=True, tokenize=True)`` gives);
- ``extend``: the difference of two renders, encoded: the conversation up to the assistant's message (no
  generation prompt), and the same conversation with the new messages and the next generation prompt. The new
  ids are what the second writes after the assistant's end-of-turn token (Qwen's ``"\\n"`` after
  ``<|im_end|>``, the new turns, the generation prompt); when the completion was cut off (``closed=False``), the
  end-of-turn token itself first, so the context reads as the template would have it. The token is found by
  count (the first render's number of them), not by position, because templates rewrite earlier turns' text
  once messages follow them (Qwen3 drops the reasoning of turns before the last user message, and writes an empty
  reasoning block only into the last message); a template with no end-of-turn token must render the first as a
  prefix of the second;
- ``parse``: the completion decoded (special tokens kept), its trailing stop sequence split off, tool calls
  parsed by ``tool_call_parser`` (``platoon.live.agent.tool_parsers``: one per format in use): what parses becomes a
  ``ToolCall`` and leaves the content; a malformed call stays in the content and is not a call; reasoning blocks
  (``reasoning_markers``, ``<think>``...``</think>`` by default) are never searched for calls. Given the episode's
  ``tools``, the plain-text parser takes calls of their names only;
- ``stop_sequences``: the tokenizer's end-of-sequence token, the template's end-of-turn token (the special
  token it writes after an assistant message's content) and Llama 3.x's ``<|eom_id|>`` where the tokenizer has it
  (the end of a message that made a ``<|python_tag|>`` call), or ``end_tokens`` when set.

At construction (once per run) the template is probed (``platoon.live.agent.template_check``): with no
``tool_call_parser`` named, the parser is the one whose syntax the template writes for a call (``choice`` says which,
for the run's log), and the call's arguments go to the template in the form it writes (a mapping, or a JSON string);
a template that writes no call syntax, or drops the tool list or tool results, is refused (``ValueError`` naming it
and the options) unless ``tool_fallback: system_message``: then platoon describes the tools (hermes syntax) in a
system message, at the head of the first user message where the template takes no system role, and hands results to
the template as user messages. Then a probe episode built turn by turn is held against the whole render
(``check_turns``). A parse that leaves a call marker in the text sets the message's ``call_error``.

``renderer_kwargs`` (``train.renderer_kwargs``) set the attributes ``ATTRIBUTES``; any other name is a
``ValueError`` naming it. ``HFTokenizer`` adapts a Hugging Face tokenizer to the ``Tokenizer`` protocol.
``transformers`` itself is never imported here: the tokenizer object comes from the caller
(``platoon.live.inference.hf.load_tokenizer``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from platoon.live.agent import template_check
from platoon.live.agent.messages import Message
from platoon.live.agent.tool_parsers import (
    PARSERS,
    REASONING_MARKERS,
    Parsed,
    call_error,
    parse,
    parse_auto,
    parse_hermes,
    parse_text,
)
from platoon.live.envs.text import Tool

__all__ = ["ATTRIBUTES", "PARSERS", "ChatTemplateRenderer", "HFTokenizer", "Parsed", "parse_auto", "parse_hermes",
           "parse_text"]


class HFTokenizer:
    """A Hugging Face tokenizer as a renderer's ``Tokenizer``: ``encode`` adds no special tokens (but reads the
    special tokens a template writes, such as ``<|im_end|>``, as their ids), ``decode`` keeps them and changes no
    spacing, ``vocab_size`` counts the added tokens (``len(tokenizer)``)."""

    def __init__(self, tokenizer: Any) -> None:
        self.hf = tokenizer
        self.vocab_size = len(tokenizer)

    def encode(self, text: str) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


ATTRIBUTES = ("tool_call_parser", "chat_template_kwargs", "end_tokens", "reasoning_markers", "chat_template",
              "tool_fallback")
"""What ``train.renderer_kwargs`` may set: ``tool_call_parser`` (a name of ``PARSERS``; unset: the one whose syntax
the template writes), ``chat_template_kwargs`` (extra variables for the template, e.g. ``{"enable_thinking":
false}`` for Qwen3), ``end_tokens`` (the strings that end a completion, replacing the eos and end-of-turn tokens),
``reasoning_markers`` (pairs of ``[open, close]`` around the model's reasoning, never searched for calls; default
``[["<think>", "</think>"]]``, ``[]``: none), ``chat_template`` (a template of your own: a Jinja file's path, or the
template's text, used instead of the tokenizer's) and ``tool_fallback`` (``system_message``: for a template without
tools, platoon describes them in a system message and hands results over as user messages)."""

TOOL_FALLBACKS = ("system_message",)
FALLBACK_PARSERS = ("hermes", "qwen3", "auto")
"""The parsers that read what ``tool_fallback``'s description asks the model to write."""

_PROBE = "platoon-probe-content"
_MESSAGE_ENDS = ("<|eom_id|>",)
"""Special tokens that end an assistant message without ending its turn, where a tokenizer has them."""


class ChatTemplateRenderer:
    """The tokenizer's chat template as a ``Renderer`` (see the module's doc). ``tokenizer`` is a Hugging Face
    tokenizer with a chat template (or an ``HFTokenizer`` around one); ``attrs`` are ``ATTRIBUTES``."""

    def __init__(self, tokenizer: Any, *, tool_call_parser: str | None = None, **attrs: Any) -> None:
        unknown = sorted(set(attrs) - set(ATTRIBUTES))
        if unknown:
            raise ValueError(f"renderer chat_template has no attribute {', '.join(map(repr, unknown))} "
                             f"(it has {', '.join(ATTRIBUTES)})")
        if tool_call_parser is not None and tool_call_parser not in PARSERS:
            raise ValueError(f"renderer chat_template: tool_call_parser {tool_call_parser!r} is not one of "
                             f"{', '.join(PARSERS)}")
        self.tokenizer = tokenizer if isinstance(tokenizer, HFTokenizer) else HFTokenizer(tokenizer)
        self.template = _own_template(attrs.get("chat_template"))
        if not self.template and not getattr(self.tokenizer.hf, "chat_template", None):
            raise ValueError("renderer chat_template: the tokenizer has no chat template (use renderer role_colon, or "
                             "give one in train.renderer_kwargs.chat_template)")
        self.name = "the chat template given in renderer_kwargs" if self.template else \
            template_check.template_name(self.tokenizer.hf)
        template_kwargs = attrs.get("chat_template_kwargs") or {}
        if not isinstance(template_kwargs, Mapping):
            raise ValueError(f"renderer chat_template: chat_template_kwargs {template_kwargs!r} must be a mapping of "
                             "template variables")
        self.chat_template_kwargs = dict(template_kwargs)
        self.tool_fallback = attrs.get("tool_fallback")
        if self.tool_fallback not in (None, *TOOL_FALLBACKS):
            raise ValueError(f"renderer chat_template: tool_fallback {self.tool_fallback!r} is not one of "
                             f"{', '.join(TOOL_FALLBACKS)} (or unset)")
        self.arguments_as_json = False
        self._system_role = True
        try:
            self._probe(tool_call_parser, attrs)
        except ValueError:
            raise
        except Exception as exc:  # noqa: BLE001 - a template's own error while probing, named with its template
            raise ValueError(f"renderer chat_template: {self.name} failed on platoon's probe conversation "
                             f"({type(exc).__name__}: {exc}); docs/renderers.md says what the probe renders") from exc

    def _probe(self, tool_call_parser: str | None, attrs: Mapping[str, Any]) -> None:
        """The end tokens, the parser and the turn-by-turn check (the module's doc)."""
        if self.tool_fallback is not None:
            self._system_role = _takes_system_role(self._apply)
        ends = attrs.get("end_tokens") or self._default_end_tokens()
        self.end_tokens = (ends,) if isinstance(ends, str) else tuple(ends)
        if not self.end_tokens:
            raise ValueError(f"renderer chat_template: the tokenizer has no eos token and {self.name} no end-of-turn "
                             "token; set end_tokens in train.renderer_kwargs")
        if not all(isinstance(t, str) and t for t in self.end_tokens):
            raise ValueError(f"renderer chat_template: end_tokens {self.end_tokens!r} must be non-empty strings")
        self.stop_sequences = tuple(tuple(self.tokenizer.encode(t)) for t in self.end_tokens)
        self.reasoning_markers = _markers(attrs.get("reasoning_markers", REASONING_MARKERS))
        self.tool_call_parser, self.choice = self._choose_parser(tool_call_parser)
        template_check.check_turns(self, self._render, self.name)

    def _choose_parser(self, named: str | None) -> tuple[str, str]:
        """The parser, and a line saying how it was chosen; ``ValueError`` naming the template and the options when
        its tools would not reach the model or its calls could not be read."""
        if self.tool_fallback is not None:
            if named is not None and named not in FALLBACK_PARSERS:
                raise ValueError(f"renderer chat_template: tool_fallback {self.tool_fallback} asks the model for hermes "
                                 f"calls, which tool_call_parser {named} does not read (use {', '.join(FALLBACK_PARSERS)})")
            where = "a system message" if self._system_role else "the first user message (it takes no system role)"
            return named or "hermes", (f"{self.name}: tools described by platoon in {where}, results handed over as "
                                       f"user messages (tool_fallback); tool_call_parser {named or 'hermes'}")
        found, self.arguments_as_json = template_check.call_form(
            self._render_as, lambda name, text: parse(name, text, None, self.reasoning_markers)[0], self.end_tokens)
        tools_dropped, results_dropped = template_check.drops(self._render)
        missing = [what for what, gone in (("drops the tool list", tools_dropped),
                                           ("drops tool results", results_dropped),
                                           ("writes no tool-call syntax", found is None and named is None)) if gone]
        if missing:
            raise ValueError(
                f"renderer chat_template: {self.name} {', '.join(missing)}, so a model trained through "
                "it would never see its tools or be read calling them (every reward 0). Options: "
                "train.renderer_kwargs.tool_fallback: system_message (platoon describes the tools in a system message "
                "and hands results over as user messages), a template of your own (renderer_kwargs.chat_template: a "
                "Jinja file), or, for a template that renders tools but writes no call syntax, a tool_call_parser by "
                "name (docs/renderers.md)")
        form = "a JSON string" if self.arguments_as_json else "a mapping"
        if named is None:
            return found, f"{self.name} writes {found} tool calls (arguments as {form}): tool_call_parser {found}"
        agrees = "as" if found in (named, None) or PARSERS[named] is PARSERS[found] else f"while {found} writes"
        return named, (f"{self.name}: tool_call_parser {named}, named in train.renderer_kwargs ({agrees} the template "
                       f"writes{'' if found else ' no call of its own'})")

    # --- the contract --------------------------------------------------------------------------------------------

    def prompt(self, messages: Sequence[Message], tools: Sequence[Tool]) -> list[int]:
        return self.tokenizer.encode(self._render(messages, tools, True))

    def extend(self, messages: Sequence[Message], new: Sequence[Message], tools: Sequence[Tool], *,
               closed: bool) -> list[int]:
        return self.tokenizer.encode(self.extend_text(messages, new, tools, closed=closed))

    def extend_text(self, messages: Sequence[Message], new: Sequence[Message], tools: Sequence[Tool], *,
                    closed: bool) -> str:
        """The text ``extend`` encodes."""
        if not messages or messages[-1].role != "assistant":
            raise ValueError("extend: the conversation must end with the assistant's message the completion was")
        head = self._render(messages, tools, False)
        whole = self._render([*messages, *new], tools, True)
        found = self._after_turn(head, whole)
        if found is None:
            raise template_check.TemplateMismatch(
                f"renderer chat_template: {self.name} ends the assistant's message with none of the end tokens "
                f"{list(self.end_tokens)} and renders the conversation differently once messages follow it "
                f"(up to it: ...{head[-80:]!r}; with them: ...{whole[max(0, len(head) - 80):len(head) + 40]!r}), "
                "so the new messages cannot be appended on their own. Set train.renderer_kwargs.end_tokens to the "
                "token that ends its assistant messages, or give a template of your own (renderer_kwargs."
                "chat_template) that writes earlier messages the same whatever follows them")
        token, after = found
        return after if closed else token + after

    def completion(self, messages: Sequence[Message], tools: Sequence[Tool]) -> list[int]:
        """The ids of ``messages``' last (assistant) message as the template writes it after the generation prompt,
        up to and with its end token: what supervised fine-tuning trains on."""
        return self.tokenizer.encode(template_check.completion_text(self, self._render, messages, tools))

    def parse(self, completion: Sequence[int], tools: Sequence[Tool] | None = None) -> Message:
        """The contract's ``parse``; with ``tools``, the plain-text parser takes calls of their names only."""
        ids = list(completion)
        for stop in self.stop_sequences:
            if stop and len(ids) >= len(stop) and tuple(ids[-len(stop):]) == stop:
                ids = ids[:-len(stop)]
                break
        names = None if tools is None else {t.name for t in tools}
        calls, content = parse(self.tool_call_parser, self.tokenizer.decode(ids), names, self.reasoning_markers)
        error = None if calls else call_error(self.tool_call_parser, content, self.reasoning_markers)
        return Message("assistant", content, tool_calls=tuple(calls), call_error=error)

    # --- the template ----------------------------------------------------------------------------------------------

    def _render(self, messages: Sequence[Message], tools: Sequence[Tool], generation_prompt: bool) -> str:
        """The template's text of ``messages`` (with ``tool_fallback``, as ``fallback_messages`` gives them)."""
        if self.tool_fallback is not None:
            return self._apply(fallback_messages(messages, tools, system_role=self._system_role), [], generation_prompt)
        dicts = [message_dict(m, arguments_as_json=self.arguments_as_json) for m in messages]
        return self._apply(dicts, [t.schema() for t in tools], generation_prompt)

    def _render_as(self, arguments_as_json: bool) -> template_check.Render:
        def render(messages: Sequence[Message], tools: Sequence[Tool], generation_prompt: bool) -> str:
            dicts = [message_dict(m, arguments_as_json=arguments_as_json) for m in messages]
            return self._apply(dicts, [t.schema() for t in tools], generation_prompt)
        return render

    def _apply(self, dicts: list[dict[str, Any]], tools: list[dict[str, Any]], generation_prompt: bool) -> str:
        return self.tokenizer.hf.apply_chat_template(
            dicts, tools=tools or None, add_generation_prompt=generation_prompt, tokenize=False,
            **({"chat_template": self.template} if self.template else {}), **self.chat_template_kwargs)

    def _default_end_tokens(self) -> list[str]:
        """The eos token, and the special token the template writes right after an assistant message's content
        (its end of turn), when that is another."""
        hf = self.tokenizer.hf
        # with a tool: some templates (Hermes 3's tool_use) render no conversation without one
        text = self._render([Message("user", "?"), Message("assistant", _PROBE)], (template_check.PROBE_TOOL,), False)
        after = text[text.rfind(_PROBE) + len(_PROBE):].lstrip() if _PROBE in text else ""
        specials = {str(t) for t in hf.all_special_tokens}
        specials |= {t.content for t in getattr(hf, "added_tokens_decoder", {}).values() if t.special}
        turn_end = next((s for s in sorted(specials, key=len, reverse=True) if after.startswith(s)), None)
        # Llama 3.x ends a message that made a <|python_tag|> call with <|eom_id|>, not its end of turn
        message_end = [t for t in _MESSAGE_ENDS if t in specials]
        return [t for t in dict.fromkeys([hf.eos_token, turn_end, *message_end]) if t]

    def _after_turn(self, head: str, whole: str) -> tuple[str, str] | None:
        """The end token closing the assistant's message in ``head`` (the conversation up to it), and what
        ``whole`` (the conversation with the new messages) writes after that token: after as many of them as
        ``head`` holds, so that a template rewriting earlier turns' text (not their number) is followed. The last
        end token followed by nothing but blanks and other end tokens (Phi-3.5 writes its eos after ``<|end|>``
        when no generation prompt follows) and found as often in ``whole`` is it. Without such a token, ``""`` and
        what ``whole`` adds to ``head`` when it extends it; None when neither holds."""
        for at, token in sorted(((head.rfind(t), t) for t in self.end_tokens), reverse=True):
            tail = head[at + len(token):]
            for other in self.end_tokens:
                tail = tail.replace(other, "")
            if at < 0 or tail.strip():
                continue
            end = _nth(whole, token, head.count(token))
            if end is not None:
                return token, whole[end + len(token):]
        return ("", whole[len(head):]) if whole.startswith(head) else None


def _markers(value: Any) -> tuple[tuple[str, str], ...]:
    """``reasoning_markers`` as pairs of non-empty strings; ``ValueError`` naming the value otherwise."""
    pairs = tuple(tuple(p) for p in value) if isinstance(value, Sequence) and not isinstance(value, str) else None
    if pairs is None or not all(len(p) == 2 and all(isinstance(m, str) and m for m in p) for p in pairs):
        raise ValueError(f"renderer chat_template: reasoning_markers {value!r} must be a list of [open, close] "
                         "pairs of non-empty strings (e.g. [[\"<think>\", \"</think>\"]]; []: none)")
    return pairs  # type: ignore[return-value]


def message_dict(message: Message, *, arguments_as_json: bool = False) -> dict[str, Any]:
    """A message as chat templates take it (OpenAI's shape: tool calls as ``{"type": "function", "function":
    {"name", "arguments"}}``, the arguments a mapping, or a JSON string where the template wants one)."""
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [
            {"type": "function", "function": {"name": c.name, "arguments": _arguments(c, arguments_as_json)},
             **({"id": c.id} if c.id is not None else {})}
            for c in message.tool_calls]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        out["name"] = message.name
    return out


def _arguments(call: Any, as_json: bool) -> Any:
    return json.dumps(dict(call.arguments), ensure_ascii=False) if as_json else dict(call.arguments)


FALLBACK_TOOLS = (
    "# Tools\n\nYou may call one or more functions. Their signatures are within <tools></tools>:\n<tools>\n{tools}\n"
    "</tools>\n\nFor each call, write a JSON object within <tool_call></tool_call> tags:\n<tool_call>\n"
    '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>')
"""``tool_fallback``'s description of the tools (``{tools}``: one JSON schema a line), in hermes syntax."""


def fallback_messages(messages: Sequence[Message], tools: Sequence[Tool], *, system_role: bool) -> list[dict[str, Any]]:
    """``messages`` for a template without tools (``tool_fallback: system_message``): the tools described in a
    system message first (or at the head of the first user message when the template takes no system role), each
    assistant message's calls written into its text in hermes syntax, and each run of tool results and user
    messages after an assistant message merged into one user message (results as ``<tool_response>`` blocks), so
    that roles alternate as such templates demand."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "assistant":
            calls = "".join(f'\n<tool_call>\n{json.dumps({"name": c.name, "arguments": dict(c.arguments)})}\n</tool_call>'
                            for c in m.tool_calls)
            out.append({"role": "assistant", "content": (m.content + calls).strip()})
            continue
        text = f"<tool_response>\n{m.content}\n</tool_response>" if m.role == "tool" else m.content
        if out and out[-1]["role"] == "user" and m.role != "system":
            out[-1]["content"] += "\n" + text
        else:
            out.append({"role": "user" if m.role == "tool" else m.role, "content": text})
    if tools:
        described = FALLBACK_TOOLS.format(tools="\n".join(json.dumps(t.schema()) for t in tools))
        if system_role:
            out.insert(0, {"role": "system", "content": described})
        elif out:
            out[0]["content"] = described + "\n\n" + out[0]["content"]
    return out


def _takes_system_role(apply: Any) -> bool:
    """Whether the template renders a system message (gemma-2's raises on one)."""
    try:
        return "platoon-probe-system" in apply([{"role": "system", "content": "platoon-probe-system"},
                                                {"role": "user", "content": "?"}], [], True)
    except Exception:  # noqa: BLE001 - the template's own refusal
        return False


def _own_template(value: Any) -> str | None:
    """``chat_template``'s template text: the file it names, or the text itself (it holds Jinja); None unset."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"renderer chat_template: chat_template {value!r} must be a Jinja file's path or a template")
    if "{{" in value or "{%" in value:
        return value
    path = Path(value).expanduser()
    if not path.is_file():
        raise ValueError(f"renderer chat_template: chat_template {value!r} is no file (and holds no Jinja)")
    return path.read_text(encoding="utf-8")


def _nth(text: str, token: str, n: int) -> int | None:
    """Where the ``n``-th (from 1) occurrence of ``token`` in ``text`` starts; None when there are fewer."""
    at = -len(token)
    for _ in range(n):
        at = text.find(token, at + len(token))
        if at < 0:
            return None
    return at if n > 0 else None
