"""The tiny model's tokenizer: a token per word an environment declares, bytes for everything else.

``TinyTokenizer(words)`` has, in this order:

- the role and turn markers ``<eot>``, ``system:``, ``user:``, ``assistant:``, ``tool:`` (ids 0-4; ``role_colon``
  renders a conversation with them);
- one token per declared word (a word holds no whitespace), in the order given, duplicates dropped: environments
  declare theirs (``words``, e.g. number_search's numbers and answers) and the harness its nudge's;
- 256 byte tokens, so that any text encodes (an item name the vocabulary lacks, a JSON tool call).

Spaces are mostly implicit: a text is cut at each space, a cut piece that is a word becomes its token, and one space
between two word tokens costs no token; any other piece and every space next to it are spelt in bytes. So
``decode(encode(text)) == text`` for every string, and the same text may have several encodings (the bytes ``a``,
``b`` and the word ``ab``): the encoding ``encode`` picks is one of them, which is why training never re-encodes
what the model sampled (``platoon.live.agent.renderer``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["MARKERS", "TinyTokenizer"]

MARKERS = ("<eot>", "system:", "user:", "assistant:", "tool:")
"""The role and end-of-turn markers, ids 0-4."""

UNLIKELY = -6.0
"""The tiny model's initial read-out bias of a byte or role-marker token (words and ``<eot>`` start at 0)."""


class TinyTokenizer:
    """See the module's doc. ``words`` must hold no whitespace and not be empty (``ValueError``)."""

    def __init__(self, words: Iterable[str] = ()) -> None:
        pieces = list(MARKERS)
        seen = set(pieces)
        for word in words:
            word = str(word)
            if not word or any(c.isspace() for c in word):
                raise ValueError(f"a tokenizer word must be non-empty and hold no whitespace, got {word!r}")
            if word not in seen:
                seen.add(word)
                pieces.append(word)
        self.pieces: tuple[str, ...] = tuple(pieces)
        self.first_byte = len(pieces)
        self.vocab_size = self.first_byte + 256
        self._ids = {p: i for i, p in enumerate(pieces)}

    @property
    def words(self) -> tuple[str, ...]:
        """The declared words (the pieces after the markers)."""
        return self.pieces[len(MARKERS):]

    def token(self, piece: str) -> int:
        """The id of a marker or word (``KeyError`` for any other piece)."""
        return self._ids[piece]

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        after_word = False
        for k, part in enumerate(text.split(" ")):
            word = self._ids.get(part)
            if k and not (after_word and word is not None):
                ids.append(self.first_byte + 0x20)
            if word is not None:
                ids.append(word)
            else:
                ids += [self.first_byte + b for b in part.encode("utf-8")]
            after_word = word is not None
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (bytes that are not UTF-8 decode as U+FFFD); ``ValueError`` for an id out of range."""
        out: list[str] = []
        pending = bytearray()
        after_word = False
        for t in ids:
            t = int(t)
            if not 0 <= t < self.vocab_size:
                raise ValueError(f"decode: id {t} is outside this tokenizer's 0..{self.vocab_size - 1}")
            if t >= self.first_byte:
                pending.append(t - self.first_byte)
                after_word = False
                continue
            if pending:
                out.append(pending.decode("utf-8", errors="replace"))
                pending.clear()
            if after_word:
                out.append(" ")
            out.append(self.pieces[t])
            after_word = True
        if pending:
            out.append(pending.decode("utf-8", errors="replace"))
        return "".join(out)

    def logit_prior(self) -> list[float]:
        """The tiny model's initial read-out bias per id: 0 for the words and ``<eot>``, ``UNLIKELY`` for the role
        markers and the bytes. A randomly initialised model then starts out speaking the declared words (about 1.5%
        of its mass on the 256 bytes) rather than spreading most of it over bytes no environment reads."""
        prior = [UNLIKELY] * self.vocab_size
        prior[self.token("<eot>")] = 0.0
        for i in range(len(MARKERS), self.first_byte):
            prior[i] = 0.0
        return prior
