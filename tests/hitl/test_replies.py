"""Reading ratings out of a person's words."""

from __future__ import annotations

import pytest

from hitl.models import Card
from hitl.replies import read_rating
from tests.hitl.helpers import RATING_BUTTONS, RATING_FORM

BUTTONS = Card(kind="rating", options=RATING_BUTTONS)
THUMBS = Card(
    kind="rating",
    options=[{"value": "1", "label": "👍", "metric_id": "ok"}, {"value": "0", "label": "👎", "metric_id": "ok"}],
)
FORM = Card(kind="rating", options=RATING_FORM)


@pytest.mark.parametrize(
    ("text", "choice", "note"),
    [
        ("4 good pacing", "4", "good pacing"),
        ("4/5 - good pacing", "4", "good pacing"),
        ("  5  ", "5", ""),
        ("pacing was fine, 3.", "3", "pacing was fine"),
    ],
)
def test_a_reply_rates_a_button_card_with_a_note(text, choice, note):
    reading = read_rating(BUTTONS, text)
    assert (reading.choice, reading.note, reading.error) == (choice, note, "")


def test_a_number_off_the_scale_is_refused_naming_the_scale():
    assert read_rating(BUTTONS, "9 great").error == "9 is not one of: 1, 2, 3, 4, 5."
    assert read_rating(BUTTONS, "great").error == "Start the reply with a rating: 1, 2, 3, 4, 5."


def test_a_thumb_is_read_by_its_label():
    assert read_rating(THUMBS, "👎 too long").choice == "0"
    assert read_rating(THUMBS, "👎 too long").note == "too long"


def test_several_numbers_fill_a_form_in_order():
    reading = read_rating(FORM, "7 55 clear but slow")
    assert (reading.choice, reading.values, reading.note) == (
        "rate",
        {"clarity": "7", "pacing": "55"},
        "clear but slow",
    )
    assert "I need 2 number(s)" in read_rating(FORM, "7 only").error
