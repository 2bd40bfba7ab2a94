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

``renderer_kwargs`` (``train.renderer_kwargs``) set the attributes ``ATTRIBUTES``; any other name is a
``ValueError`` naming it. ``HFTokenizer`` adapts a Hugging Face tokenizer to the ``Tokenizer`` protocol.
``transformers`` itself is never imported here: the tokenizer object comes from the caller
(``platoon.live.hf.load_tokenizer``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from platoon.live.agent.messages import Message
from platoon.live.agent.tool_parsers import (
    PARSERS,
    REASONING_MARKERS,
    Parsed,
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


ATTRIBUTES = ("tool_call_parser", "chat_template_kwargs", "end_tokens", "reasoning_markers")
"""What ``train.renderer_kwargs`` may set: ``tool_call_parser`` (a name of ``PARSERS``), ``chat_template_kwargs``
(extra variables for the template, e.g. ``{"enable_thinking": false}`` for Qwen3), ``end_tokens`` (the
strings that end a completion, replacing the eos and end-of-turn tokens) and ``reasoning_markers`` (pairs of
``[open, close]`` around the model's reasoning, never searched for calls; default ``[["<think>", "</think>"]]``,
``[]``: none)."""

_PROBE = "platoon-probe-content"
_MESSAGE_ENDS = ("<|eom_id|>",)
"""Special tokens that end an assistant message without ending its turn, where a tokenizer has them."""


class ChatTemplateRenderer:
    """The tokenizer's chat template as a ``Renderer`` (see the module's doc). ``tokenizer`` is a Hugging Face
    tokenizer with a chat template (or an ``HFTokenizer`` around one); ``attrs`` are ``ATTRIBUTES``."""

    def __init__(self, tokenizer: Any, *, tool_call_parser: str = "hermes", **attrs: Any) -> None:
        unknown = sorted(set(attrs) - set(ATTRIBUTES))
        if unknown:
            raise ValueError(f"renderer chat_template has no attribute {', '.join(map(repr, unknown))} "
                             f"(it has {', '.join(ATTRIBUTES)})")
        if tool_call_parser not in PARSERS:
            raise ValueError(f"renderer chat_template: tool_call_parser {tool_call_parser!r} is not one of "
                             f"{', '.join(PARSERS)}")
        self.tokenizer = tokenizer if isinstance(tokenizer, HFTokenizer) else HFTokenizer(tokenizer)
        if not getattr(self.tokenizer.hf, "chat_template", None):
            raise ValueError("renderer chat_template: the tokenizer has no chat template (use renderer role_colon)")
        self.tool_call_parser = tool_call_parser
        template_kwargs = attrs.get("chat_template_kwargs") or {}
        if not isinstance(template_kwargs, Mapping):
            raise ValueError(f"renderer chat_template: chat_template_kwargs {template_kwargs!r} must be a mapping of "
                             "template variables")
        self.chat_template_kwargs = dict(template_kwargs)
        ends = attrs.get("end_tokens") or self._default_end_tokens()
        self.end_tokens = (ends,) if isinstance(ends, str) else tuple(ends)
        if not self.end_tokens:
            raise ValueError("renderer chat_template: the tokenizer has no eos token and its template no end-of-turn "
                             "token; set end_tokens in train.renderer_kwargs")
        if not all(isinstance(t, str) and t for t in self.end_tokens):
            raise ValueError(f"renderer chat_template: end_tokens {self.end_tokens!r} must be non-empty strings")
        self.stop_sequences = tuple(tuple(self.tokenizer.encode(t)) for t in self.end_tokens)
        self.reasoning_markers = _markers(attrs.get("reasoning_markers", REASONING_MARKERS))

    # --- the contract --------------------------------------------------------------------------------------------

    def prompt(self, messages: Sequence[Message], tools: Sequence[Tool]) -> list[int]:
        return self.tokenizer.encode(self._render(messages, tools, generation_prompt=True))

    def extend(self, messages: Sequence[Message], new: Sequence[Message], tools: Sequence[Tool], *,
               closed: bool) -> list[int]:
        if not messages or messages[-1].role != "assistant":
            raise ValueError("extend: the conversation must end with the assistant's message the completion was")
        head = self._render(messages, tools, generation_prompt=False)
        whole = self._render([*messages, *new], tools, generation_prompt=True)
        found = self._after_turn(head, whole)
        if found is None:
            raise ValueError("renderer chat_template: the template writes no end-of-turn token after the assistant's "
                             "message and renders the conversation differently once messages are added, so new "
                             "messages cannot be rendered on their own (set end_tokens)")
        token, after = found
        return self.tokenizer.encode(after if closed else token + after)

    def parse(self, completion: Sequence[int], tools: Sequence[Tool] | None = None) -> Message:
        """The contract's ``parse``; with ``tools``, the plain-text parser takes calls of their names only."""
        ids = list(completion)
        for stop in self.stop_sequences:
            if stop and len(ids) >= len(stop) and tuple(ids[-len(stop):]) == stop:
                ids = ids[:-len(stop)]
                break
        names = None if tools is None else {t.name for t in tools}
        calls, content = parse(self.tool_call_parser, self.tokenizer.decode(ids), names, self.reasoning_markers)
        return Message("assistant", content, tool_calls=tuple(calls))

    # --- the template ----------------------------------------------------------------------------------------------

    def _render(self, messages: Sequence[Message], tools: Sequence[Tool], *, generation_prompt: bool) -> str:
        return self.tokenizer.hf.apply_chat_template(
            [message_dict(m) for m in messages], tools=[t.schema() for t in tools] or None,
            add_generation_prompt=generation_prompt, tokenize=False, **self.chat_template_kwargs)

    def _default_end_tokens(self) -> list[str]:
        """The eos token, and the special token the template writes right after an assistant message's content
        (its end of turn), when that is another."""
        hf = self.tokenizer.hf
        text = self._render([Message("user", "?"), Message("assistant", _PROBE)], (), generation_prompt=False)
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
        ``head`` holds, so that a template rewriting earlier turns' text (not their number) is followed. Without
        such a token, ``""`` and what ``whole`` adds to ``head`` when it extends it; None when neither holds."""
        at, token = max((head.rfind(t), t) for t in self.end_tokens)
        if at >= 0 and not head[at + len(token):].strip():
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


def message_dict(message: Message) -> dict[str, Any]:
    """A message as chat templates take it (OpenAI's shape: tool calls as ``{"type": "function", "function":
    {"name", "arguments"}}`` with the arguments a mapping)."""
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [
            {"type": "function", "function": {"name": c.name, "arguments": dict(c.arguments)},
             **({"id": c.id} if c.id is not None else {})}
            for c in message.tool_calls]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        out["name"] = message.name
    return out


def _nth(text: str, token: str, n: int) -> int | None:
    """Where the ``n``-th (from 1) occurrence of ``token`` in ``text`` starts; None when there are fewer."""
    at = -len(token)
    for _ in range(n):
        at = text.find(token, at + len(token))
        if at < 0:
            return None
    return at if n > 0 else None
