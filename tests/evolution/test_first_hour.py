"""A person's first hour (issue 15): the pages say what happened in people's words, and every action shows its effect."""

from __future__ import annotations

import re

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


# --- No raw words on the main pages ----------------------------------------------------------------------

#: Internal names a person should never read on a page (outside attributes, scripts and form values).
RAW_WORDS = re.compile(
    r"\b(?:merge_wait|Merge Wait|loop_set|loop_widen|loop_join|null|None|analysing_|deciding_)\b|\{&quot;|\{\"[a-z]"
)


def visible_text(html: str) -> str:
    """The page's text as a person reads it: tags, attributes, scripts and styles dropped."""
    html = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.DOTALL)
    return re.sub(r"<[^>]+>", " ", html)


def test_the_main_pages_show_no_raw_phase_status_or_null_words(web) -> None:
    from tests.evolution.page_helpers import every_phase
    from tests.evolution.test_pages import shipped_story

    made = every_phase()
    cycle, _ = shipped_story()
    pages = ["/evolution/", "/evolution/needs-you/", "/evolution/pulls/", "/evolution/settings/", "/inbox/"]
    pages += [f"/evolution/cycles/{c.pk}/" for c in [*made.values(), cycle]]
    for c in made.values():
        entity = c.entity
        pages += [
            f"/evolution/entities/{entity.target_kind}/{entity.slug}/",
            f"/evolution/entities/{entity.target_kind}/{entity.slug}/cycles/",
        ]
    wrong = []
    for url in pages:
        response = web.get(url, follow=True)
        assert response.status_code == 200, url
        text = visible_text(response.content.decode())
        for named in [*made.values(), cycle]:
            text = text.replace(named.entity.name, "")  # a test entity's name ("E Merge Wait") is not a raw word
        found = sorted(set(RAW_WORDS.findall(text)))
        if found:
            wrong.append(f"{url}: {found}")
    assert wrong == [], "\n".join(wrong)


def test_the_watch_plot_names_the_aggregate_the_metric_declares(web) -> None:
    from tests.evolution.test_pages import shipped_story

    cycle, _ = shipped_story()
    terms = cycle.entity.terms
    terms["evaluation"]["metrics"]["accuracy"]["aggregate"] = "mean"
    type(cycle.entity).objects.filter(pk=cycle.entity_id).update(terms=terms)
    Cycle.objects.filter(pk=cycle.pk).update(terms=terms)
    html = web.get(f"/evolution/cycles/{cycle.pk}/").content.decode()
    assert "Window mean" in html and "Window median" not in html


def test_the_admin_names_commit_statuses_in_good_english(web) -> None:
    html = web.get("/admin/").content.decode()
    assert "Commit statuses" in html and "Commit statuss" not in html


# --- Every action refreshes what it changed; disabled actions say why -------------------------------------


def test_a_hold_swaps_the_loop_section_too_and_analyze_now_says_why_it_is_off(web) -> None:
    entity = in_loop("digest")
    page = web.get("/evolution/entities/scenario/digest/cycles/", HTTP_HX_REQUEST="true").content.decode()
    assert "analyze-blocked" not in page and "disabled" not in page.split("Analyze now")[0].rsplit("<button", 1)[1]
    answer = web.post(
        "/evolution/entities/scenario/digest/supervision/hold/",
        {"target": "entity", "reason": "looking into it"},
        HTTP_HX_REQUEST="true",
    ).content.decode()
    oob = answer.split('<div id="entity-cycles" hx-swap-oob="true">')[1]
    button = oob.split("Analyze now")[0].rsplit("<button", 1)[1]
    assert "disabled" in button and "release it under Supervision" in button
    assert 'id="analyze-blocked"' in oob and "Analyze now is off:" in oob
    entity.refresh_from_db()


def test_an_answer_in_the_inbox_updates_the_waiting_count_on_the_page(web, alice) -> None:
    from tests.hitl.helpers import make_card, recording_handler

    with recording_handler():
        first = make_card(key="decide:1")
        make_card(key="decide:2")
        page = web.get("/inbox/").content.decode()
        assert 'Waiting for you (<span id="pending-count">2</span>)' in page
        answer = web.post(f"/inbox/cards/{first.pk}/answer/", {"choice": "accept"}, HTTP_HX_REQUEST="true")
    assert '<span id="pending-count" hx-swap-oob="true">1</span>' in answer.content.decode()


def test_an_answer_in_the_inbox_moves_the_card_to_history_at_once(web, alice) -> None:
    from tests.hitl.helpers import make_card, recording_handler

    with recording_handler():
        first = make_card(key="decide:1", title="Shorter triage rules")
        make_card(key="decide:2", title="Longer triage rules")
        assert "No answered or expired cards yet." in web.get("/inbox/").content.decode()
        answer = web.post(
            f"/inbox/cards/{first.pk}/answer/",
            {"choice": "accept"},
            HTTP_HX_REQUEST="true",
            HTTP_HX_CURRENT_URL="http://testserver/inbox/",
        ).content.decode()
    history = answer.split('<section id="history" hx-swap-oob="true">')[1].split("</section>\n")[0]
    assert f'id="card-{first.pk}"' in history and "Answered by" in history
    assert "No answered or expired cards yet." not in history and "Longer triage rules" not in history
    assert '<span id="pending-count" hx-swap-oob="true">1</span>' in answer
    assert answer.count(f'id="card-{first.pk}"') == 1  # gone from "Waiting for you", not shown twice


def test_an_answer_on_the_card_page_stays_in_place(web, alice) -> None:
    from tests.hitl.helpers import make_card, recording_handler

    with recording_handler():
        card = make_card(key="decide:1", title="Shorter triage rules")
        answer = web.post(
            f"/inbox/cards/{card.pk}/answer/",
            {"choice": "accept"},
            HTTP_HX_REQUEST="true",
            HTTP_HX_CURRENT_URL=f"http://testserver/inbox/cards/{card.pk}/",
        ).content.decode()
    assert f'id="card-{card.pk}"' in answer
    assert 'id="history"' not in answer and "Answered by" in answer
