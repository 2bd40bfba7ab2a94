"""The tiny model's tokenizer: words, bytes for the rest, and text that always decodes back to itself."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from platoon.live.agent.renderer import Tokenizer
from platoon.live.agent.tokenizer import MARKERS, UNLIKELY, TinyTokenizer

WORDS = ("guess", "higher", "lower", "1", "16", "ab", "a")


def test_declared_words_are_single_tokens_after_the_markers_and_spaces_between_them_are_free():
    tok = TinyTokenizer(WORDS + ("guess",))
    assert isinstance(tok, Tokenizer)
    assert tok.pieces[: len(MARKERS)] == MARKERS and tok.words == WORDS
    assert tok.vocab_size == len(MARKERS) + len(WORDS) + 256
    assert tok.encode("guess 16") == [tok.token("guess"), tok.token("16")]
    assert tok.encode("user: higher <eot>") == [tok.token("user:"), tok.token("higher"), tok.token("<eot>")]


def test_other_text_is_spelt_in_bytes_with_the_spaces_next_to_it():
    tok = TinyTokenizer(WORDS)
    space = tok.first_byte + 0x20
    assert tok.encode("guess 17") == [tok.token("guess"), space, tok.first_byte + ord("1"), tok.first_byte + ord("7")]
    assert tok.encode("é") == [tok.first_byte + b for b in "é".encode()]
    assert tok.encode("") == [] and tok.decode([]) == ""


PIECES = st.sampled_from(["guess", "ab", "a", "b", " ", "  ", "x", "é", "\n", "16", "<eot>"])


@given(st.lists(PIECES, max_size=12).map("".join) | st.text(max_size=30))
def test_any_text_decodes_back_to_itself(text):
    tok = TinyTokenizer(WORDS)
    assert tok.decode(tok.encode(text)) == text


def test_the_same_text_has_several_encodings():
    tok = TinyTokenizer(WORDS)
    as_bytes = [tok.first_byte + ord("a"), tok.first_byte + ord("b")]
    assert tok.decode(as_bytes) == "ab" and tok.encode("ab") == [tok.token("ab")] != as_bytes


def test_bad_words_and_ids_are_refused():
    with pytest.raises(ValueError, match="no whitespace"):
        TinyTokenizer(["two words"])
    with pytest.raises(ValueError, match="no whitespace"):
        TinyTokenizer([""])
    with pytest.raises(ValueError, match="outside"):
        TinyTokenizer().decode([256 + len(MARKERS)])


def test_the_prior_favours_words_and_the_end_of_turn():
    tok = TinyTokenizer(WORDS)
    prior = tok.logit_prior()
    assert len(prior) == tok.vocab_size
    assert prior[tok.token("<eot>")] == 0.0 and all(prior[tok.token(w)] == 0.0 for w in WORDS)
    assert prior[tok.token("user:")] == UNLIKELY and prior[tok.first_byte] == UNLIKELY
