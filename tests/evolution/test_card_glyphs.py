"""The decide card's glyphs: Telegram gets 🎯 and 🛡; the dashboard draws them as icons (Chromium on Debian has no emoji font)."""

from __future__ import annotations

import pytest
from django.test import Client

from evolution.loop.cardtext import decide_card
from hitl.channels.telegram import card_message
from hitl.models import Card
from tests.evolution.page_helpers import in_loop, make_card, make_cycle, make_round

pytestmark = pytest.mark.django_db

TARGET, SHIELD = "\U0001f3af", "\U0001f6e1"


@pytest.fixture
def card() -> Card:
    rnd = make_round(make_cycle(in_loop("digest")))
    made = make_card(rnd)
    Card.objects.filter(pk=made.pk).update(text=decide_card(rnd)["text"])
    made.refresh_from_db()
    assert f"{TARGET} Optimizing:" in made.text
    return made


def test_the_inbox_shows_the_objective_as_an_icon_not_a_glyph(client: Client, alice, card: Card) -> None:
    client.force_login(alice)
    html = client.get("/inbox/").content.decode()
    assert "Optimizing:" in html
    assert TARGET not in html and SHIELD not in html
    assert '<svg class="glyph" role="img" aria-label="objective"' in html
    assert 'aria-label="guard"' in html


def test_the_card_page_shows_the_icon_too(client: Client, alice, card: Card) -> None:
    client.force_login(alice)
    html = client.get(f"/inbox/cards/{card.pk}/").content.decode()
    assert TARGET not in html and 'aria-label="objective"' in html


def test_telegram_keeps_the_glyph(card: Card) -> None:
    assert f"{TARGET} Optimizing:" in card_message(card)
