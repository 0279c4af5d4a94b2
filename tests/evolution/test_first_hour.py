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


# --- One knob pins seven: the Policy view says what a wholesale write copies ------------------------------

PREVIEW = "/evolution/settings/preview/"
HX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def sb(tmp_path, settings):
    from tests.evolution.settings_helpers import settings_brain

    return settings_brain(tmp_path, settings)


def test_a_one_key_write_into_a_wholesale_block_says_before_confirm_what_it_copies(sb, web) -> None:
    form = {"targetKind": "scenario", "targetId": "pricing", "key": "loop.autonomy.decide", "op": "set"}
    text = web.post(PREVIEW, {**form, "value": "auto"}, **HX).content.decode()
    note = text.split('id="wholesale-note">')[1].split("</p>")[0]
    assert "This writes the whole loop.autonomy block into Pricing: its 6 other values" in note
    assert "5 from the engine&#x27;s defaults, 1 from the brain&#x27;s manifest" in note
    assert "mergeMethod" in note and "decide" not in note.split("(")[1].split(")")[0]
    assert text.index('id="wholesale-note"') < text.index("Confirm")


def test_a_write_the_entity_already_owns_the_block_of_copies_nothing_and_says_nothing(sb, web) -> None:
    form = {"targetKind": "scenario", "targetId": "digest", "key": "loop.autonomy.decide", "op": "set"}
    text = web.post(PREVIEW, {**form, "value": "auto"}, **HX).content.decode()
    assert "Confirm" in text and "wholesale-note" not in text


def test_a_saved_policy_says_what_changed_in_words_and_the_resolved_values_are_never_json(sb, web) -> None:
    import json

    form = {"targetKind": "scenario", "targetId": "pricing", "key": "loop.threshold", "op": "set", "value": "0.6"}
    preview = web.post(PREVIEW, form, **HX).content.decode()
    expect = preview.split('name="expect" value="')[1].split('"')[0].replace("&quot;", '"')
    web.post("/evolution/settings/save/", {**form, "expect": expect}, **HX)
    page = web.get("/evolution/entities/scenario/pricing/policy/").content.decode()
    assert "Saved: loop.threshold is now 0.6 on" in page
    resolved = page.split('id="policy-resolved"')[1].split("</details>")[0]
    assert "&quot;" not in resolved and "null" not in resolved and "{" not in resolved
    assert json.loads(expect)  # the expect field stays the dry run's JSON (a hidden input, never shown)
