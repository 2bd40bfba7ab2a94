"""Renderers: a conversation to prompt token ids, and a sampled completion back to an assistant message.

The contract that keeps training on-policy: the harness never re-tokenises what the model sampled. A turn's context
is the previous context, plus the sampled ids exactly as sampled, plus ``renderer.extend(...)`` for what came after
(tool results and the next generation prompt). So a renderer renders *new* messages to ids, and parses a completion
only to act on it; the parsed text is never encoded again for training.

- ``prompt(messages, tools)``: the ids of a whole conversation, ending with the assistant's generation prompt;
- ``extend(messages, new, tools, closed=)``: the ids to append after an assistant completion that the harness kept
  as sampled (``messages`` ends with that assistant message): the ``new`` messages and the next generation prompt.
  ``closed`` says whether the completion ended with one of ``stop_sequences``; when it did not (the token budget
  ran out), the renderer first closes the assistant's turn;
- ``parse(completion, tools=())``: the assistant message a completion's ids encode, its tool calls parsed. A
  malformed call is not an error: it is left in the content, and the message has no tool call for it. ``tools`` are
  the episode's: a syntax that needs them (``role_colon``'s positional arguments) reads them; a renderer whose
  ``parse`` takes no ``tools`` is called without (``parse_completion``);
- ``stop_sequences``: token-id sequences that end a completion (sampling stops after one, which stays in the
  completion);
- ``completion(messages, tools)`` (optional; ``platoon sft`` needs it): the ids of ``messages``' last message, an
  assistant's, as the model writes it after the generation prompt, its stop sequence last; ``parse`` reads them
  back to that message. Supervised fine-tuning trains on them, so it trains on the very layout RL samples in.

A ``Tokenizer`` is the little of a tokenizer a renderer needs: ``encode``, ``decode`` and ``vocab_size``.

``make_renderer(name, tokenizer, **renderer_kwargs)`` builds the renderer ``train.renderer_name`` names:
``role_colon`` (``platoon.live.agent.role_colon``, the tiny model's) or ``chat_template`` (the tokenizer's own chat
template, ``platoon.live.agent.chat_template``); 0.4.0's cookbook names (``qwen3``, ``llama3``, ...) read as
``chat_template`` with the template variables they set (``CHAT_TEMPLATE_ALIASES``), and the ones this project
cannot honour are refused by name (``platoon.config.components.UNSUPPORTED_RENDERERS``).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from platoon.config.components import CHAT_TEMPLATE_ALIASES, RENDERER_NAMES, renderer_name_problem
from platoon.live.agent.messages import Message
from platoon.live.envs.text import Tool

__all__ = ["CHAT_TEMPLATE_ALIASES", "RENDERER_NAMES", "Renderer", "Tokenizer", "ends_with_stop", "make_renderer",
           "parse_completion", "renderer_name_problem"]

@runtime_checkable
class Tokenizer(Protocol):
    vocab_size: int

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` with no special tokens added."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        ...


@runtime_checkable
class Renderer(Protocol):
    """See the module's doc for the contract."""

    tokenizer: Tokenizer
    stop_sequences: tuple[tuple[int, ...], ...]

    def prompt(self, messages: Sequence[Message], tools: Sequence[Tool]) -> list[int]:
        ...

    def extend(self, messages: Sequence[Message], new: Sequence[Message], tools: Sequence[Tool], *,
               closed: bool) -> list[int]:
        ...

    def parse(self, completion: Sequence[int]) -> Message:
        ...


def make_renderer(name: str, tokenizer: Tokenizer, **renderer_kwargs: Any) -> Renderer:
    """The renderer ``name`` over ``tokenizer`` with ``renderer_kwargs`` (``train.renderer_kwargs``). ``ValueError``
    for an unknown name; ``ImportError`` when ``chat_template``'s module is missing; ``TypeError`` for options the
    renderer does not take."""
    problem = renderer_name_problem(name)
    if problem is not None:
        raise ValueError(f"train.renderer_name: {problem}")
    if name == "role_colon":
        from platoon.live.agent.role_colon import RoleColonRenderer

        return RoleColonRenderer(tokenizer, **renderer_kwargs)
    try:
        from platoon.live.agent.chat_template import ChatTemplateRenderer
    except ImportError as exc:
        raise ImportError(f"train.renderer_name {name!r} renders with the tokenizer's chat template, and this "
                          f"platoon lacks platoon.live.agent.chat_template ({exc})") from exc
    alias = CHAT_TEMPLATE_ALIASES.get(name, {})
    if alias:  # the family's template variables, under the user's own
        renderer_kwargs = {**renderer_kwargs, "chat_template_kwargs": {
            **alias, **(renderer_kwargs.get("chat_template_kwargs") or {})}}
    return ChatTemplateRenderer(tokenizer, **renderer_kwargs)


def ends_with_stop(completion: Sequence[int], stop_sequences: Sequence[Sequence[int]]) -> bool:
    """Whether ``completion`` ends with one of ``stop_sequences`` (it was closed, not cut by its token budget)."""
    tail = list(completion)
    return any(len(s) and tail[-len(s):] == list(s) for s in stop_sequences)


def parse_completion(renderer: Renderer, completion: Sequence[int], tools: Sequence[Tool]) -> Message:
    """``renderer.parse(completion, tools=tools)``, or without ``tools`` when its ``parse`` takes none."""
    if "tools" in inspect.signature(renderer.parse).parameters:
        return renderer.parse(completion, tools=tools)
    return renderer.parse(completion)
