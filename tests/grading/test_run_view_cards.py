"""The run on the cards that judge it (issue 28): a rating card's Telegram message carries the run's input and
output as text, cut, with the run's link; its page shows the run as Rate runs does."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import Client

from grading.models import Grade
from hitl import registry
from singularity.celery import app as celery_app
from tests.grading.rating_helpers import LAYOUT_FIT, make_entity, make_grade, make_run

pytestmark = pytest.mark.django_db

TICKET = "I was charged twice for my March subscription, please fix it."


@pytest.fixture(autouse=True)
def eager_tasks() -> Iterator[None]:
    before = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = before


def asked_run(*, text: str = TICKET, label: str = "technical", **grade_fields):
    """A finished triage-like run of an entity that asks a person for every run, its grading booked."""
    entity = make_entity("triage", metrics={"layout_fit": LAYOUT_FIT}, evaluation={"human": {"ask": "always"}})
    run = make_run(entity)
    run.input = {"text": text, "_expected": "billing"}
    run.output = {"result": label, "tasks": {}}  # as the workflow runner writes it
    run.save()
    return make_grade(run, status=Grade.Status.BOOKED, **grade_fields)


def carded(grade, django_capture_on_commit_callbacks):
    from grading.cards import card_key, maybe_card
    from hitl.models import Card

    with django_capture_on_commit_callbacks(execute=True):
        maybe_card(grade)
    return Card.objects.get(key=card_key(grade.execution_id))


def test_the_telegram_message_of_a_rating_card_carries_the_input_the_expected_and_the_output_with_the_link(
    telegram_on, settings, django_capture_on_commit_callbacks
):
    settings.SINGULARITY_PUBLIC_URL = "https://singularity.example.org"
    grade = asked_run()
    carded(grade, django_capture_on_commit_callbacks)
    [sent] = telegram_on.calls_of("sendMessage")
    text = sent["text"]
    assert f"Input:\n{TICKET}" in text
    assert "Expected: billing" in text
    assert "Output:\ntechnical" in text
    assert f"https://singularity.example.org/evolution/runs/{grade.execution_id}/" in text
    assert "_expected" not in text


def test_a_long_input_is_cut_on_the_telegram_message_and_says_so(telegram_on, django_capture_on_commit_callbacks):
    long = "My invoice is wrong. " * 100
    grade = asked_run(text=long)
    carded(grade, django_capture_on_commit_callbacks)
    [sent] = telegram_on.calls_of("sendMessage")
    assert "… (cut at 600 characters)" in sent["text"]
    assert long.strip() not in sent["text"]
    assert len(sent["text"]) < 4096


def test_the_rating_cards_page_shows_the_run_as_rate_runs_does(
    client: Client, alice, django_capture_on_commit_callbacks
):
    grade = asked_run()
    card = carded(grade, django_capture_on_commit_callbacks)
    Grade.objects.filter(pk=grade.pk).update(
        status=Grade.Status.GRADED,
        criteria=[{"criterion": "The label fits", "scope": "run", "passed": False, "reasoning": "It is billing"}],
    )
    client.force_login(alice)
    html = client.get(f"/inbox/cards/{card.pk}/").content.decode()
    assert 'class="run-view"' in html and TICKET in html
    assert "<h4>Expected</h4>" in html and "It is billing" in html
    assert 'class="card-text"' not in html  # the run replaces the card's text on its page
    assert "<strong>Layout fit</strong> (1–5, step 1): The scenes follow the strategy" in html
    assert 'value="1"' in html or "1 · Unusable" in html  # still answerable
    # the inbox lists it without drawing the run (no query a card there)
    inbox = client.get("/inbox/").content.decode()
    assert 'class="run-view"' not in inbox


def test_a_detail_that_fails_is_said_on_the_card_and_the_card_stays(
    client: Client, alice, django_capture_on_commit_callbacks
):
    card = carded(asked_run(), django_capture_on_commit_callbacks)

    def broken(card):
        raise ValueError("no such run")

    registry.register_detail("grading", "rating", broken, replaces_text=True)
    try:
        client.force_login(alice)
        response = client.get(f"/inbox/cards/{card.pk}/")
    finally:
        from grading.cards import rating_card_detail

        registry.register_detail("grading", "rating", rating_card_detail, replaces_text=True)
    html = response.content.decode()
    assert response.status_code == 200
    assert "What this card is about could not be shown: no such run" in html
    assert 'class="card-text"' in html
