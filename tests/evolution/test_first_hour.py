"""A person's first hour (issue 15): the pages say what happened in people's words, and every action shows its effect."""

from __future__ import annotations

import pytest
from django.test import Client

from evolution.models import Cycle, Idea
from tests.evolution.page_helpers import in_loop, make_cycle, make_round

pytestmark = pytest.mark.django_db


@pytest.fixture
def web(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


def test_the_story_of_an_idea_cycle_quotes_the_idea_and_who_posted_it(web) -> None:
    entity = in_loop("digest")
    idea = Idea.objects.create(entity=entity, text="Refunds, overcharged, receipt -> billing", author="alice")
    cycle = make_cycle(entity, phase=Cycle.Phase.DECIDING)
    Cycle.objects.filter(pk=cycle.pk).update(origin=Cycle.Origin.IDEA, idea=idea)
    make_round(cycle)
    html = web.get(f"/evolution/cycles/{cycle.pk}/").content.decode()
    assert 'id="cycle-idea"' in html
    assert "Refunds, overcharged, receipt -&gt; billing" in html
    assert "alice" in html
