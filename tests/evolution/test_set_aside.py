"""Decisions recorded as made (issue 31, item 5): a person's Accept set aside by the lock stays their Accept.

R19.6 sets aside an Accept that loses the lock group, skipped, naming the holder. The record says whose Accept it
was and what set it aside; its lesson is "set aside", never a person's rejection; the card loses its buttons.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from evolution.loop import lessons, machine
from evolution.loop.brief import lessons_doc
from evolution.models import Cycle, Lesson, Round
from hitl.actions import answer_card, run_handler
from hitl.models import Card
from tests.evolution.loop_helpers import looped, proposed_round
from tests.evolution.watch_helpers import HOUR

pytestmark = pytest.mark.django_db


def member(slug: str):
    """A repair workflow in lock group ``support`` that waits while the group is busy."""
    return looped(slug, manifest={"loop": {"groups": {"support": {"repair": "wait"}}, "group": ["support"]}})


def reverting(entity) -> Cycle:
    """A regressed change of ``entity`` whose revert PR #3 is awaited: it holds the group."""
    now = timezone.now()
    cycle = Cycle.objects.create(
        entity=entity,
        key=f"test:{entity.pk}:reverting",
        claim=entity.pk,
        origin=Cycle.Origin.GRADE,
        phase=Cycle.Phase.REVERTING,
        status=Cycle.Status.REGRESSED,
        analysed=True,
        started_at=now - HOUR,
        moved_at=now - HOUR,
        merged_at=now - HOUR,
    )
    Round.objects.create(
        cycle=cycle, number=1, status=Round.Status.MERGED, pr_number=2, merge_sha="b" * 40, revert_pr_number=3
    )
    return cycle


def carded(entity, **fields) -> Round:
    """A proposal of ``entity`` waiting on a person's decide card."""
    cycle = Cycle.objects.create(
        entity=entity,
        key=f"test:{entity.pk}:deciding:{Cycle.objects.count()}",
        origin=Cycle.Origin.GRADE,
        phase=Cycle.Phase.ANALYSING,
        analysed=True,
    )
    rnd = proposed_round(cycle, status=Round.Status.PROPOSED, **fields)
    return machine.ask_decide(rnd, now=timezone.now())


def press(card: Card, user: User, choice: str, **kwargs) -> None:
    result = answer_card(card.pk, user=user, is_agent=False, choice=choice, via="dashboard", **kwargs)
    assert result.ok, result.detail
    run_handler(card.pk)


@pytest.fixture
def admin(db) -> User:
    return User.objects.create_superuser("admin", "admin@example.org", "admin-password")


@pytest.fixture
def set_aside(admin):
    """Support held by triage's revert; admin Accepts an urgency card."""
    holder = reverting(member("triage"))
    rnd = carded(member("urgency"))
    press(rnd.card, admin, "accept")
    rnd.refresh_from_db()
    return rnd, holder


def test_an_accept_the_lock_sets_aside_reads_as_the_persons_accept_on_the_cycle_page(client, admin, set_aside):
    rnd, holder = set_aside
    client.force_login(admin)
    page = client.get(rnd.cycle.get_absolute_url()).content.decode()
    decision = page.split('class="decision"', 1)[1].split("</dd>", 1)[0]
    assert "Skipped by admin" not in decision
    assert "Accepted by admin" in decision
    assert "set aside: lock group support is held by a change to workflow triage" in decision
    assert f"revert PR #3, cycle {holder.pk}" in decision


def test_the_set_aside_round_keeps_the_accept_and_names_what_set_it_aside(set_aside):
    rnd, holder = set_aside
    assert (rnd.status, rnd.decided_by, rnd.rejection) == (Round.Status.SKIPPED, "admin", Round.Rejection.ASIDE)
    assert rnd.acceptance == "person"
    assert rnd.set_aside.startswith("lock group support is held by a change to workflow triage")
    cycle = rnd.cycle
    cycle.refresh_from_db()
    assert cycle.status == Cycle.Status.SKIPPED
    assert cycle.reason.startswith("Accepted by admin; set aside: lock group support is held by")


def test_its_lesson_is_set_aside_never_handed_to_the_proposer_as_a_rejection(set_aside):
    rnd, _ = set_aside
    lesson = Lesson.objects.get(round=rnd)
    assert lesson.outcome == Cycle.Status.SKIPPED and lesson.rejection == Round.Rejection.ASIDE
    [shown] = lessons_doc([lesson])
    assert shown["rejection"] is None
    assert shown["setAside"] == {"acceptedBy": "admin", "reason": rnd.set_aside}
    # A person's Skip is recalled first; a set-aside Accept ranks by recency like the rest.
    skipped = carded(member("billing"))
    assert [lesson.pk] == [x.pk for x in lessons.recall(rnd.cycle.entity, 5)]
    assert skipped.card.status == Card.Status.PENDING


def test_the_answered_card_has_no_buttons_left_on_the_web(client, admin, set_aside):
    rnd, _ = set_aside
    card = Card.objects.get(pk=rnd.card_id)
    assert card.status == Card.Status.ANSWERED and card.answer["choice"] == "accept"
    client.force_login(admin)
    page = client.get(card.get_absolute_url()).content.decode()
    assert 'value="accept"' not in page and 'value="skip"' not in page


def test_the_proposal_line_and_the_learn_chapter_say_set_aside_not_turned_down(client, admin, set_aside):
    from evolution.loop.brief import proposals_doc

    rnd, _ = set_aside
    later = carded(rnd.cycle.entity)
    [shown] = [p for p in proposals_doc(rnd.cycle.entity, later) if p["cycle"] == rnd.cycle_id]
    assert shown["rejection"] is None and shown["setAside"] == rnd.set_aside
    client.force_login(admin)
    page = client.get(rnd.cycle.get_absolute_url()).content.decode()
    learn = page.split('id="chapter-learn"', 1)[1]
    assert "Set aside, not turned down: Accepted by admin; set aside: lock group support is held by" in learn
    assert "Turned down by" not in learn
