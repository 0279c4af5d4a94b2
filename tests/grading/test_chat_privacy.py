"""Privacy: a rating card of an episode carries its shape and a link to the dialog, never its words (R22.19)."""

from __future__ import annotations

import pytest

from grading.booking import on_terminal
from grading.cards import post_card
from grading.chat.episodes import close
from grading.models import Episode, Execution
from hitl.channels.telegram import card_message
from tests.fakes.gateway import Reply
from tests.grading.chat_helpers import make_role, prices, said

pytestmark = pytest.mark.django_db

SECRET = "my card number is 4111 1111"
REPLY = "Thanks Dana, refunded to order 98765"


def test_an_episodes_rating_card_never_carries_the_dialogs_words(fake_gateway, alice, settings, client):
    prices(settings)
    role = make_role(
        evaluation={
            "gradeAfterHours": 1,
            "human": {"ask": "always"},
            "metrics": {"helpful": {"kind": "judged", "direction": "max", "role": "observe", "human": True}},
        }
    )
    fake_gateway.script(Reply(content=REPLY))
    said(fake_gateway, role, alice, SECRET)
    episode = Episode.objects.get()
    close(episode, "person")
    execution = Execution.objects.get(pk=episode.pk)
    assert on_terminal(execution) is not None
    card = post_card(execution.pk)
    assert card is not None
    sent = card_message(card)
    for text in (sent, card.title, card.subject, card.text, str(card.payload), str(card.options)):
        assert "4111" not in text and "98765" not in text and "Dana" not in text
    assert "2 turns" in sent
    assert str(execution.pk) in sent, "the card links to the run, whose page opens the dialog"
    client.force_login(alice)
    page = client.get(execution.get_absolute_url()).content.decode()
    assert f'href="{episode.get_absolute_url()}"' in page and "Read the dialog" in page
