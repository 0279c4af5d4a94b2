"""An agent relaying a person's rating becomes a person's approval card, not a 403 (R4.8, issue 29): the card shows
the ratings relayed; the person's Approve records them as that person's through the one door; a Decline records
nothing; a rating the door would refuse is refused at once, with no card; the agent's asks are capped."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone
from djangorestframework_camel_case.util import underscoreize
from rest_framework.test import APIClient

from grading.models import Execution, Rating
from hitl.actions import answer_card, run_handler
from hitl.models import Card, Notice
from singularity.models import ApiToken
from tests.grading.rating_helpers import make_entity, make_grade, make_run

pytestmark = pytest.mark.django_db


def client_for(user, name: str = "bot", *, agent: bool = True) -> APIClient:
    _, key = ApiToken.issue(user, name, is_agent=agent)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


def graded_run(slug: str = "digest") -> Execution:
    run = make_run(make_entity(slug), completed_at=timezone.now() - timedelta(hours=1))
    make_grade(run, metrics={"layout_fit": 0.75, "quality": 0.8})
    return run


def relayed(run: Execution, value: object = 2, key: str = "k1") -> dict:
    rating = {"metricId": "layout_fit", "value": value, "note": "bob said the scenes wander"}
    return {"runKind": run.run_kind, "runId": str(run.id), "idempotencyKey": key, "ratings": [rating]}


def answer(card: Card, person, choice: str) -> None:
    result = answer_card(card.pk, user=person, is_agent=False, choice=choice, via="dashboard")
    assert result.ok, result.detail
    run_handler(card.pk)


def test_an_agents_rating_waits_on_a_persons_card_and_a_retry_finds_it(alice) -> None:
    run = graded_run()
    bot = client_for(alice)
    response = bot.post("/api/ratings/", relayed(run), format="json")
    assert response.status_code == 202, response.json()
    body = response.json()
    assert (body["ok"], body["code"], body["written"]) == (False, "pending", 0) and body["cardId"]
    card = Card.objects.get(pk=body["cardId"])
    assert card.is_pending and card.kind == Card.Kind.GRANT and card.payload["asker"] == "agent:bot of alice"
    assert "agent:bot of alice relays a rating" in card.text and "layout_fit: 2" in card.text
    assert "bob said the scenes wander" in card.text
    assert not Rating.objects.exists()
    again = bot.post("/api/ratings/", relayed(run), format="json")
    assert again.status_code == 202 and again.json()["cardId"] == body["cardId"]
    assert Card.objects.count() == 1


def test_a_persons_approve_records_the_rating_as_theirs_and_a_decline_records_nothing(alice, bob) -> None:
    run = graded_run()
    bot = client_for(alice)
    declined = Card.objects.get(pk=bot.post("/api/ratings/", relayed(run, key="a"), format="json").json()["cardId"])
    answer(declined, bob, "decline")
    assert not Rating.objects.exists()
    card = Card.objects.get(pk=bot.post("/api/ratings/", relayed(run, key="b"), format="json").json()["cardId"])
    answer(card, bob, "approve")
    rating = Rating.objects.get()
    assert (rating.user, rating.metric_id, rating.normalized) == (bob, "layout_fit", 0.25)
    assert rating.note == "bob said the scenes wander"
    assert Notice.objects.get(kind="rated").text.startswith("bob approved agent:bot of alice's rating")


def test_a_rating_the_door_refuses_is_refused_at_once_with_no_card(alice) -> None:
    run = graded_run()
    off_scale = client_for(alice).post("/api/ratings/", relayed(run, value=9), format="json")
    assert off_scale.status_code == 400 and off_scale.json()["code"] == "invalid"
    assert "off the scale" in off_scale.json()["detail"]
    assert not Card.objects.exists() and not Rating.objects.exists()


def test_an_approved_rating_the_door_refuses_by_then_is_said(alice, bob) -> None:
    run = graded_run()
    card = Card.objects.get(pk=client_for(alice).post("/api/ratings/", relayed(run), format="json").json()["cardId"])
    Execution.objects.filter(pk=run.pk).update(status=Execution.Status.RUNNING)  # the door would refuse it now
    answer(card, bob, "approve")
    assert not Rating.objects.exists()
    notice = Notice.objects.get(kind="not_applied")
    assert "still running" in notice.text


@override_settings(LOOP_AGENT_MAX_PENDING_CARDS=1)
def test_an_agents_rating_asks_are_capped_with_its_other_asks(alice) -> None:
    bot = client_for(alice)
    assert bot.post("/api/ratings/", relayed(graded_run(), key="a"), format="json").status_code == 202
    over = bot.post("/api/ratings/", relayed(graded_run("brief"), key="b"), format="json")
    assert over.status_code == 429 and over.json()["code"] == "too_many_pending"
    assert Card.objects.count() == 1


def test_the_door_itself_still_never_records_an_agents_rating(alice) -> None:
    from grading.ratings import rate

    run = graded_run()
    answer_ = rate(actor_user=alice, is_agent=True, **underscoreize(relayed(run)))  # the body as the API reads it
    assert (answer_.ok, answer_.code) == (False, "refused") and not Rating.objects.exists()


def test_the_cards_page_shows_the_relayed_rating_and_the_run_it_rates(alice, bob, client) -> None:
    run = graded_run()
    card_id = client_for(alice).post("/api/ratings/", relayed(run), format="json").json()["cardId"]
    client.force_login(bob)
    page = client.get(f"/inbox/cards/{card_id}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "agent:bot of alice relays a rating of this run of scenario:digest" in html
    assert "bob said the scenes wander" in html and "weekly" in html  # the run's input, drawn below the text
    assert "Approve" in html and "Decline" in html
