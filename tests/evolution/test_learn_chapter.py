"""The Learn chapter names the endings that write no lesson by design (R17.3): the kill switch, and a broken
round under decide: auto — not "no round reached a terminal with a proposal", which reads like a fault."""

from __future__ import annotations

import pytest
from django.test import Client

from evolution.loop import machine
from evolution.models import Cycle, Round
from tests.evolution.loop_helpers import graded, history, looped

pytestmark = pytest.mark.django_db


@pytest.fixture
def opened():
    entity = looped()
    history(entity, "bggg")
    landed = graded(entity, bad=True)
    return machine.open_cycle(entity, origin=Cycle.Origin.GRADE, anchor=landed.execution).cycle


def learn(client: Client, alice, cycle: Cycle) -> str:
    client.force_login(alice)
    page = client.get(cycle.get_absolute_url()).content.decode()
    return page[page.index('id="chapter-learn"') :]


def test_the_kill_switch_is_named_as_the_reason_there_is_no_lesson(opened, client, alice):
    opened.entity.loop_enabled = False
    opened.entity.save()
    machine.analyse(opened.rounds.get(number=1).pk)
    opened.refresh_from_db()
    assert opened.status == Cycle.Status.SKIPPED and not opened.lessons.exists()
    chapter = learn(client, alice, opened)
    assert "No lesson, by design: the loop was switched off during the analysis" in chapter
    assert "no round reached a terminal" not in chapter


def test_a_broken_unattended_round_is_named_as_the_reason_there_is_no_lesson(opened, client, alice):
    rnd = opened.rounds.get(number=1)
    Round.objects.filter(pk=rnd.pk).update(summary="Add 'invoice'", files=[{"path": "a.md", "content": "x"}])
    rnd.refresh_from_db()
    machine.fail(rnd, "the apply failed: the forge refused the push", unattended=True)
    opened.refresh_from_db()
    assert opened.status == Cycle.Status.FAILED and not opened.lessons.exists()
    chapter = learn(client, alice, opened)
    assert "No lesson, by design: a broken analysis or apply under decide: auto closes the cycle at once" in chapter
