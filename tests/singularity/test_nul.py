"""singularity.nul: a run's evidence with its NULs as U+FFFD; a person's short text refused naming the field."""

from __future__ import annotations

from singularity.nul import holds_nul, nul_refusal, replaced


def test_every_nul_in_strings_and_keys_at_any_depth_becomes_the_replacement_character():
    value = {"a\x00": ["x\x00y", {"k": "\x00\x00"}, 1, None, 2.5, True], "plain": "ok"}
    assert replaced(value) == {"a\ufffd": ["x\ufffdy", {"k": "\ufffd\ufffd"}, 1, None, 2.5, True], "plain": "ok"}
    assert holds_nul(value) and not holds_nul(replaced(value))


def test_the_look_finds_a_nul_in_a_key_a_nested_string_or_plain_text_and_nothing_else():
    assert holds_nul({"deep": [[{"k\x00": 1}]]})
    assert holds_nul("a\x00")
    assert not holds_nul({"text": "no nul here", "n": 1, "list": ["\ufffd"]})
    assert not holds_nul("")


def test_the_six_characters_of_an_escaped_nul_are_looked_at_and_left_as_they_are():
    value = {"text": "\\u0000 is how JSON writes it"}
    assert holds_nul(value)  # a false alarm costs a walk that changes nothing
    assert replaced(value) == value


def test_a_persons_text_with_a_nul_is_refused_naming_the_field():
    assert nul_refusal("note", "good\x00") == "note: contains a NUL character"
    assert nul_refusal("note", "good") == ""
