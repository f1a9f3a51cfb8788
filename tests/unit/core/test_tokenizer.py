"""The byte-level tokenizer: exact ids, exact round trips, loud failures."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compactsim.harness.core import tokenizer as tok
from compactsim.harness.core.errors import ConfigError

_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)


def test_vocab_is_32_specials_then_256_bytes():
    assert tok.VOCAB_SIZE == 288
    assert len(tok.SPECIAL_TOKENS) == 32
    assert tok.SPECIAL_TOKENS[tok.THINK_START] == "<think>"
    assert tok.SPECIAL_TOKENS[tok.THINK_END] == "</think>"
    assert tok.special_id("<|turn_end|>") == 4
    assert tok.IMAGE_PATCH_TOKENS == 4


def test_encode_text_is_one_token_per_utf8_byte():
    assert tok.encode_text("aé") == [32 + 0x61, 32 + 0xC3, 32 + 0xA9]
    assert tok.encode_text("") == []


def test_text_spelling_a_special_token_stays_bytes():
    ids = tok.encode_text("<think>")
    assert ids == [32 + b for b in b"<think>"]
    assert tok.THINK_START not in ids


def test_tokenizing_a_concatenation_concatenates_tokenizations():
    assert tok.encode_text("ab" + "cd") == tok.encode_text("ab") + tok.encode_text("cd")


@given(st.lists(st.integers(min_value=0, max_value=tok.VOCAB_SIZE - 1), max_size=60))
def test_decode_then_encode_returns_any_id_sequence(ids):
    assert tok.encode(tok.decode(ids)) == ids


@given(_TEXT)
def test_encode_text_then_decode_text_returns_the_text(text):
    assert tok.decode_text(tok.encode_text(text)) == text


@given(st.lists(st.integers(min_value=tok.BYTE_OFFSET, max_value=tok.VOCAB_SIZE - 1), max_size=60))
def test_decode_text_then_encode_text_returns_any_byte_ids(ids):
    assert tok.encode_text(tok.decode_text(ids)) == ids


def test_every_id_decodes_to_its_own_string():
    strings = [tok.decode([i]) for i in range(tok.VOCAB_SIZE)]
    assert len(set(strings)) == tok.VOCAB_SIZE


def test_invalid_utf8_bytes_decode_to_escape_surrogates():
    assert tok.decode_text([32 + 0xC3]) == "\udcc3"
    assert tok.encode_text("\udcc3") == [32 + 0xC3]


def test_encode_text_rejects_lone_surrogate_outside_escape_range():
    with pytest.raises(ConfigError) as err:
        tok.encode_text("a\ud800")
    assert err.value.code == "invalid_argument"
    assert "lone surrogate U+D800 at index 1" in str(err.value)


def test_decode_text_rejects_special_ids():
    with pytest.raises(ConfigError) as err:
        tok.decode_text([40, tok.THINK_START])
    assert err.value.code == "invalid_argument"
    assert "ids[1]=9" in str(err.value)


def test_check_token_id_rejects_out_of_range_and_bool():
    for bad in (-1, 288, True, "5"):
        with pytest.raises(ConfigError) as err:
            tok.check_token_id(bad)
        assert err.value.code == "invalid_argument"
    assert tok.check_token_id(287) == 287


def test_special_id_rejects_unknown_names():
    with pytest.raises(ConfigError) as err:
        tok.special_id("<nope>")
    assert "name='<nope>': not a special token" in str(err.value)


def test_token_repr_and_describe_are_readable():
    assert tok.token_repr(tok.THINK_START) == "<think>"
    assert tok.token_repr(32 + ord("a")) == "a"
    assert tok.token_repr(32 + ord("<")) == "<0x3C>"
    assert tok.token_repr(32 + 0xC3) == "<0xC3>"
    ids = [tok.TURN_START, tok.ROLE_USER, *tok.encode_text("hi"), tok.TURN_END]
    assert tok.describe(ids) == "<|turn_start|> <|user|> 'hi' <|turn_end|>"
