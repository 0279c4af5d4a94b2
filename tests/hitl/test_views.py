"""The inbox: pending cards and history, answering with HTMX and without JavaScript, notices, the nav count."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from hitl.actions import answer_card, post_notice
from hitl.models import Card, Notice
from tests.hitl.helpers import RATING_FORM, make_card

pytestmark = pytest.mark.django_db


@pytest.fixture
def signed_in(client, alice):
    client.force_login(alice)
    return client


def test_the_inbox_needs_a_login(client):
    response = client.get("/inbox/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_the_inbox_lists_pending_cards_newest_first_then_history(signed_in, alice, handler):
    old = make_card(key="decide:old", title="Older proposal")
    new = make_card(key="decide:new", title="Newer proposal", hours=3)
    done = make_card(key="decide:done", title="Answered proposal")
    answer_card(done.pk, user=alice, is_agent=False, choice="accept", via="dashboard")
    page = signed_in.get("/inbox/").content.decode()
    pending, history = page.split('id="history"')
    assert pending.index("Newer proposal") < pending.index("Older proposal")
    assert "Answered proposal" in history and "Answered by <strong>alice</strong>: <strong>Accept</strong>" in history
    assert re.search(r'answer by <time datetime="[^"]+" title="in 2 h · ', pending), "a deadline as people read it"
    assert 'href="/evolution/cycles/7/"' in pending
    assert 'Inbox<span id="inbox-count"> (2)</span>' in page
    assert old.pk and new.pk


def test_answering_without_javascript_redirects_back_with_a_message(
    signed_in, handler, django_capture_on_commit_callbacks
):
    card = make_card()
    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in.post(f"/inbox/cards/{card.pk}/answer/", {"choice": "skip", "note": "off-brand"})
    assert response.status_code == 302 and response["Location"] == "/inbox/"
    card.refresh_from_db()
    assert card.answer == {"choice": "skip", "note": "off-brand", "values": {}, "refinement": ""}
    assert card.answered_via == "dashboard"
    assert "Skip" in signed_in.get("/inbox/").content.decode()
    assert len(handler.calls) == 1


@pytest.mark.django_db(transaction=True)
def test_htmx_swaps_the_card_with_the_notices_and_count_out_of_band(signed_in, handler):
    """Committed for real, so the handler's notice is there by the time the response renders."""
    handler.post_notices = True
    card = make_card()
    response = signed_in.post(
        f"/inbox/cards/{card.pk}/answer/", {"choice": "refine", "refinement": "shorter"}, headers={"HX-Request": "true"}
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith("<article") and f'id="card-{card.pk}"' in html
    assert "Answered by <strong>alice</strong>: <strong>Refine</strong>" in html and "shorter" in html
    assert 'id="notices" hx-swap-oob="true"' in html and "Heard: Proposal decide:1 — Refine" in html
    assert '<span id="inbox-count" hx-swap-oob="true"></span>' in html


def test_a_bad_answer_is_shown_on_the_card(signed_in, handler):
    card = make_card()
    html = signed_in.post(
        f"/inbox/cards/{card.pk}/answer/", {"choice": "refine"}, headers={"HX-Request": "true"}
    ).content.decode()
    assert "A refinement needs some text." in html
    assert Card.objects.get(pk=card.pk).is_pending


def test_a_rating_form_is_answered_with_number_inputs(signed_in, handler, django_capture_on_commit_callbacks):
    card = make_card(kind="rating", key="rating:form", options=RATING_FORM)
    page = signed_in.get("/inbox/").content.decode()
    assert 'name="value_clarity" min="1" max="10" step="1"' in page
    with django_capture_on_commit_callbacks(execute=True):
        signed_in.post(
            f"/inbox/cards/{card.pk}/answer/",
            {"choice": "rate", "value_clarity": "8", "value_pacing": "35", "note": "ok"},
        )
    card.refresh_from_db()
    assert card.answer == {"choice": "rate", "note": "ok", "values": {"clarity": 8, "pacing": 35}, "refinement": ""}


def test_decide_cards_offer_custom_and_a_skip_note(signed_in):
    make_card()
    page = signed_in.get("/inbox/").content.decode()
    assert "<summary>Custom…</summary>" in page and 'name="refinement"' in page
    assert 'placeholder="Note for Skip (optional)"' in page


def test_an_expired_card_is_history(signed_in, handler):
    make_card(title="Forgotten", hours=1)
    with time_machine.travel(timezone.now() + timedelta(hours=2)):
        from hitl.actions import expire_due_cards

        expire_due_cards()
        page = signed_in.get("/inbox/").content.decode()
    assert "Expired unanswered" in page.split('id="history"')[1]


def test_notices_are_listed_and_marked_read(signed_in):
    notice = post_notice(producer="loop", kind="skipped", title="Cycle 3 skipped", text="Nobody answered.")
    assert "Cycle 3 skipped" in signed_in.get("/inbox/").content.decode()
    signed_in.post(f"/inbox/notices/{notice.pk}/read/")
    assert Notice.objects.get(pk=notice.pk).read_at is not None


def test_the_card_page_shows_one_card(signed_in):
    card = make_card(title="Just this one")
    assert "Just this one" in signed_in.get(card.get_absolute_url()).content.decode()


def test_the_admin_lists_cards_read_only(client, alice):
    client.force_login(alice)
    card = make_card()
    assert client.get("/admin/hitl/card/").status_code == 200
    page = client.get(f"/admin/hitl/card/{card.pk}/change/").content.decode()
    assert 'name="title"' not in page, "not editable"
    assert client.get("/admin/hitl/telegramuser/add/").status_code == 200


def test_the_inbox_count_is_counted_only_where_a_page_shows_it(signed_in, handler):
    """The navigation's count is read when a template shows it: the fleet's HTMX table (every 10 s) sends no
    count of the pending cards; its whole page shows the count as before."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    make_card(key="decide:k1")

    def counts(**headers):
        with CaptureQueriesContext(connection) as seen:
            response = signed_in.get("/evolution/", **headers)
        assert response.status_code == 200
        return response.content.decode(), [q["sql"] for q in seen if "COUNT(*)" in q["sql"] and "hitl_card" in q["sql"]]

    page, sent = counts()
    assert 'Inbox<span id="inbox-count"> (1)</span>' in page
    assert len(sent) == 1
    table, sent = counts(HTTP_HX_REQUEST="true")
    assert "inbox-count" not in table
    assert sent == []


def _pending_cards(n: int) -> list[Card]:
    """Open ``n`` pending cards, "Card 1" the oldest (due soonest) and "Card n" the newest."""
    cards = []
    for i in range(1, n + 1):
        with time_machine.travel(timezone.now() + timedelta(seconds=i)):
            cards.append(make_card(key=f"decide:p{i}", title=f"Card {i:02d}"))
    return cards


def _answered_cards(alice, n: int) -> None:
    """Answer ``n`` cards, "Done n" the newest answer."""
    for i in range(1, n + 1):
        card = make_card(key=f"decide:h{i}", title=f"Done {i:02d}")
        with time_machine.travel(timezone.now() + timedelta(seconds=i)):
            answer_card(card.pk, user=alice, is_agent=False, choice="accept", via="dashboard")


def _shown(page: str, section: str) -> str:
    pending, history = page.split('id="history"')
    return pending if section == "pending" else history


def test_the_inbox_shows_a_page_of_pending_cards_newest_first(signed_in, handler):
    _pending_cards(25)
    page = signed_in.get("/inbox/").content.decode()
    pending = _shown(page, "pending")
    assert 'Waiting for you (<span id="pending-count">25</span>)' in pending
    assert "Showing 1–20, the newest first." in pending
    assert pending.count('class="card hitl-card pending"') == 20
    assert "Card 25" in pending and "Card 06" in pending and "Card 05" not in pending
    assert pending.index("Card 25") < pending.index("Card 06")
    assert 'href="?pending=2">Older →</a>' in pending and "Newer" not in pending
    assert 'Inbox<span id="inbox-count"> (25)</span>' in page

    pending = _shown(signed_in.get("/inbox/?pending=2").content.decode(), "pending")
    assert "Showing 21–25, the newest first." in pending
    assert pending.count('class="card hitl-card pending"') == 5
    assert "Card 05" in pending and "Card 01" in pending and "Card 06" not in pending
    assert 'href="?pending=1">← Newer</a>' in pending and "Older" not in pending


def test_one_page_of_pending_cards_has_no_pager(signed_in):
    _pending_cards(3)
    pending = _shown(signed_in.get("/inbox/").content.decode(), "pending")
    assert pending.count('class="card hitl-card pending"') == 3
    assert "Showing" not in pending and "pager" not in pending


def test_the_pending_cards_and_the_history_page_independently(signed_in, alice, handler):
    _pending_cards(25)
    _answered_cards(alice, 25)
    page = signed_in.get("/inbox/?pending=2&page=2").content.decode()
    pending, history = _shown(page, "pending"), _shown(page, "history")
    assert "Card 05" in pending and "Card 25" not in pending
    assert "Done 05" in history and "Done 25" not in history
    assert 'href="?pending=1&amp;page=2">← Newer</a>' in pending, "the history's page is kept"
    assert 'href="?pending=2&amp;page=1">← Newer</a>' in history, "the pending cards' page is kept"


@pytest.mark.parametrize("query", ["pending=abc", "pending=0", "pending=-1", "pending=999", "pending=", "pending=2.5"])
def test_a_bad_pending_page_is_clamped_like_the_historys(signed_in, query):
    """Not an integer: the first page; out of range: the last, as Paginator.get_page does for ``page``."""
    _pending_cards(25)
    response = signed_in.get(f"/inbox/?{query}")
    assert response.status_code == 200
    pending = _shown(response.content.decode(), "pending")
    assert pending.count('class="card hitl-card pending"') in (20, 5)
    assert "Card 25" in pending or "Card 01" in pending


def test_the_inbox_reads_as_many_statements_for_5_pending_cards_as_for_60(signed_in):
    """One page of pending cards is read and rendered, whatever waits: no statement a card, no unbounded list."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def inbox() -> tuple[int, str]:
        with CaptureQueriesContext(connection) as seen:
            response = signed_in.get("/inbox/")
        assert response.status_code == 200
        return len(seen), response.content.decode()

    _pending_cards(5)
    few, page = inbox()
    assert page.count('class="card hitl-card pending"') == 5
    Card.objects.all().delete()
    _pending_cards(60)
    many, page = inbox()
    assert page.count('class="card hitl-card pending"') == 20
    assert 'Waiting for you (<span id="pending-count">60</span>)' in page
    assert many == few


def test_htmx_answer_on_a_later_page_counts_every_pending_card(signed_in, alice, handler):
    """Answered on the second page of pending cards: the count out of band is of all that still wait, and the
    history swapped in keeps the pending cards' page in its links."""
    cards = _pending_cards(25)
    _answered_cards(alice, 20)
    with time_machine.travel(timezone.now() + timedelta(minutes=1)):
        html = signed_in.post(
            f"/inbox/cards/{cards[0].pk}/answer/",
            {"choice": "skip"},
            headers={"HX-Request": "true", "HX-Current-URL": "http://testserver/inbox/?pending=2&page=3"},
        ).content.decode()
    assert '<span id="pending-count" hx-swap-oob="true">24</span>' in html
    assert '<span id="inbox-count" hx-swap-oob="true"> (24)</span>' in html
    assert not html.lstrip().startswith("<article"), "the card leaves the pending cards"
    assert "Nothing waits for a person." not in html
    history = html.split('id="history" hx-swap-oob="true"')[1]
    assert "Card 01" in history and 'href="?pending=2&amp;page=2">Older →</a>' in history
