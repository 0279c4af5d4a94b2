"""The decide card shows the change before anyone accepts it (issue 15): the real diff, its real line counts.

On the demo brain the fixer adds a keyword or two to the triage's 31-line
file: the card says "+1 −1" (or so), not "31 lines", and carries the diff.
"""

from __future__ import annotations

import pytest
import time_machine
from django.utils import timezone

from grading.demo import TRIAGE_PATH
from tests.evolution.demo_helpers import drive_until_card, tickets

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_the_demo_decide_card_carries_the_diff_and_its_changed_line_count(embedded):
    with time_machine.travel(timezone.now(), tick=True):
        card, _failed = drive_until_card(tickets())
    text = card.text
    line = next(row for row in text.splitlines() if row.startswith(f"• {TRIAGE_PATH} — "))
    added, removed = (int(part.strip("+−")) for part in line.rsplit(" — ", 1)[1].split())
    assert 1 <= added <= 3 and removed <= 2, line  # a keyword or two, not the file's length
    assert "The change:" in text and f"--- a/{TRIAGE_PATH}" in text
    changed = [row for row in text.splitlines() if row.startswith(("+-", "--")) and "->" in row]
    assert changed, text  # the rule lines that moved are on the card


def test_the_full_proposal_page_shows_the_whole_diff_and_the_hypothesis(embedded, client, alice):
    from evolution.models import Cycle

    with time_machine.travel(timezone.now(), tick=True):
        drive_until_card(tickets())
    cycle = Cycle.objects.get(analysed=True)
    client.force_login(alice)
    page = client.get(f"/evolution/go/cycle:{cycle.pk}/?proposal=1", follow=True).content.decode()
    rnd = cycle.rounds.get(number=1)
    assert "The change" in page and f"a/{TRIAGE_PATH}" in page and 'class="diff-add"' in page
    assert rnd.hypothesis[:30] in page


def test_the_inbox_shows_the_cards_diff_as_a_diff(embedded, client, alice):
    with time_machine.travel(timezone.now(), tick=True):
        card, _failed = drive_until_card(tickets())
    client.force_login(alice)
    html = client.get("/inbox/").content.decode()
    article = html.split(f'id="card-{card.pk}"')[1].split("</article>")[0]
    block = article.split('<details class="diff" open>')[1].split("</details>")[0]
    assert f'<summary class="small">{TRIAGE_PATH} — ' in block and '<pre class="diff">' in block
    assert '<span class="diff-file">--- a/' in block and '<span class="diff-hunk">@@ ' in block
    assert '<span class="diff-add">+- ' in block and '<span class="diff-del">-- ' in block
    assert "Full proposal: " in article.split("</details>")[1]  # the text after the diff stays text


def test_an_answered_decide_card_shows_its_answer_and_no_buttons_at_once(embedded, client, alice):
    """The HTMX answer swaps the card for its answer: no button, no "Accept or Skip" left in its words."""
    with time_machine.travel(timezone.now(), tick=True):
        card, _failed = drive_until_card(tickets())
    client.force_login(alice)
    pending = client.get("/inbox/").content.decode().split(f'id="card-{card.pk}"')[1].split("</article>")[0]
    assert 'name="choice" value="accept"' in pending
    swapped = client.post(
        f"/inbox/cards/{card.pk}/answer/", {"choice": "accept"}, headers={"HX-Request": "true"}
    ).content.decode()
    article = swapped.split(f'id="card-{card.pk}"')[1].split("</article>")[0]
    assert "Answered by <strong>alice</strong>: <strong>Accept</strong>" in article
    assert "<button" not in article and "Accept or Skip" not in article
