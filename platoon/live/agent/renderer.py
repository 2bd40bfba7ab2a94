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
- ``parse(completion)``: the assistant message a completion's ids encode, its tool calls parsed. A malformed call is
  not an error: it is left in the content, and the message has no tool call for it;
- ``stop_sequences``: token-id sequences that end a completion (sampling stops after one, which stays in the
  completion).

A ``Tokenizer`` is the little of a tokenizer a renderer needs: ``encode``, ``decode`` and ``vocab_size``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from platoon.live.agent.messages import Message
from platoon.live.envs.text import Tool

__all__ = ["Renderer", "Tokenizer"]


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
