"""Settings → Policy defaults and the entity's Policy view: editors (dry run first, then Confirm), the kill switches,
Turn on, the resolved values with their tiers, the action log.
"""

from __future__ import annotations

import json

import pytest
import yaml
from django.test import Client

from evolution.models import ActionLog
from evolution.steering import settings as sw
from hitl.models import Card
from tests.evolution.settings_helpers import DIGEST, DIGEST_TEXT, MANIFEST, MANIFEST_TEXT, settings_brain

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}
PREVIEW, SAVE, JOIN = "/evolution/settings/preview/", "/evolution/settings/save/", "/evolution/settings/join/"
POLICY = "/evolution/entities/scenario/digest/policy/"


@pytest.fixture
def sb(tmp_path, settings):
    return settings_brain(tmp_path, settings)


@pytest.fixture
def web(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


def test_the_settings_page_shows_the_switches_and_each_knob_with_its_tier(sb, web) -> None:
    page = web.get("/evolution/settings/").content.decode()
    assert 'id="brain-loop-switch">on<' in page and 'id="pull-loop-switch"' in page
    assert 'id="knob-loop-preset"' in page and 'id="knob-loop-autonomy-decide"' in page
    row = page.split('id="knob-loop-threshold"')[1].split("</tr>")[0]
    assert "engine" in row  # the manifest does not write a threshold
    row = page.split('id="knob-loop-cooldownHours"')[1].split("</tr>")[0]
    assert "manifest" in row and "<code>6</code>" in row


def test_save_shows_the_dry_run_first_and_confirm_writes_it(sb, web) -> None:
    head = sb.head()
    preview = web.post(PREVIEW, {"key": "loop.threshold", "op": "set", "value": "0.7"}, **HX)
    text = preview.content.decode()
    assert preview.status_code == 200 and "+  threshold: 0.7" in text and "Confirm" in text
    assert sb.head() == head and not ActionLog.objects.exists()
    expect = json.loads(text.split('name="expect" value="')[1].split('"')[0].replace("&quot;", '"'))
    assert expect == {MANIFEST: sw.digest(MANIFEST_TEXT.encode())}
    saved = web.post(SAVE, {"key": "loop.threshold", "op": "set", "value": "0.7", "expect": json.dumps(expect)}, **HX)
    assert saved["HX-Refresh"] == "true"
    assert "  threshold: 0.7\n" in sb.show(MANIFEST)
    row = ActionLog.objects.get()
    assert (row.actor, row.op, row.subject) == ("alice", "loop_set", MANIFEST)
    page = web.get("/evolution/settings/").content.decode()
    assert "Saved: loop.threshold is now 0.7" in page and f"action-{row.pk}" in page


def test_confirm_over_a_file_that_changed_since_the_preview_answers_conflict(sb, web) -> None:
    preview = web.post(PREVIEW, {"key": "loop.threshold", "op": "set", "value": "0.7"}, **HX).content.decode()
    expect = preview.split('name="expect" value="')[1].split('"')[0].replace("&quot;", '"')
    sb.commit({MANIFEST: MANIFEST_TEXT + "# edited meanwhile\n"})
    saved = web.post(SAVE, {"key": "loop.threshold", "op": "set", "value": "0.7", "expect": expect}, **HX)
    assert 'data-code="conflict"' in saved.content.decode()
    assert "threshold" not in sb.show(MANIFEST)


def test_an_autonomy_knob_is_saved_through_loop_widen_by_the_person_at_the_page(sb, web) -> None:
    target = {"targetKind": "scenario", "targetId": "digest", "key": "loop.autonomy.decide", "op": "set"}
    preview = web.post(PREVIEW, {**target, "value": "auto"}, **HX).content.decode()
    assert "hands oversight to the machine" in preview and "loop.autonomy.decide" in preview
    assert "Confirm: I approve" in preview and "loop_widen" not in preview
    web.post(SAVE, {**target, "value": "auto"}, **HX)
    assert yaml.safe_load(sb.show(DIGEST).split("---\n")[1])["loop"]["autonomy"] == {"decide": "auto"}
    row = ActionLog.objects.get()
    assert (row.op, row.actor, row.entity) == ("loop_widen", "alice", sb.digest)
    assert not Card.objects.exists()


def test_a_refused_write_is_said_under_the_editor(sb, web) -> None:
    body = {
        "targetKind": "scenario",
        "targetId": "digest",
        "key": "loop.trigger.minFailures",
        "op": "set",
        "value": "9",
    }
    answer = web.post(PREVIEW, body, **HX).content.decode()
    assert 'data-code="refused"' in answer and "scenario:digest" in answer
    bad = web.post(PREVIEW, {**body, "value": "many"}, **HX).content.decode()
    assert 'data-code="invalid"' in bad and "not a number" in bad


def test_without_javascript_the_preview_is_a_page_and_the_switch_a_redirect(sb, web) -> None:
    page = web.post(PREVIEW, {"key": "loop.threshold", "op": "set", "value": "0.7"})
    assert page.status_code == 200 and "<h1>Confirm: loop.threshold" in page.content.decode()
    pulled = web.post(SAVE, {"key": "loop.enabled", "op": "set", "value": "false"})
    assert pulled.status_code == 302 and pulled["Location"] == "/evolution/settings/"
    assert yaml.safe_load(sb.show(MANIFEST))["loop"]["enabled"] is False
    page = web.get("/evolution/settings/").content.decode()
    assert "off for every entity" in page and 'id="restore-loop-switch"' in page
    assert not sb.digest.loop_enabled


def test_the_policy_view_shows_resolved_values_their_tiers_and_the_entitys_action_log(sb, web) -> None:
    sw.loop_set(sb.digest, "loop.maxChangedLines", value=100, actor="bob")
    sw.loop_set(None, "loop.threshold", value=0.7, actor="bob")
    fragment = web.get(POLICY, **HX).content.decode()
    assert fragment.startswith('<div id="entity-policy">')
    row = fragment.split('id="knob-loop-autonomy-decide"')[1].split("</tr>")[0]
    assert "human" in row and "entity" in row
    row = fragment.split('id="knob-loop-threshold"')[1].split("</tr>")[0]
    assert "0.7" in row and "manifest" in row
    assert "<code>loop.trigger.windowRuns</code></td><td><code>5</code></td>" in fragment
    assert "loop.maxChangedLines = 100" in fragment and "loop_set" not in fragment
    assert "loop.threshold = 0.7" not in fragment.split('id="action-log"')[1]  # the manifest's row is not the entity's
    assert 'id="pull-entity-switch"' in fragment
    page = web.get(POLICY)
    assert page.status_code == 200 and "<h1>" in page.content.decode()


def test_the_entity_page_loads_the_policy_view(sb, web) -> None:
    page = web.get(sb.digest.get_absolute_url()).content.decode()
    assert f'hx-get="{POLICY}"' in page


def test_the_entitys_own_switch_and_turn_on(sb, web) -> None:
    body = {"targetKind": "scenario", "targetId": "digest", "key": "loop.enabled", "op": "set", "value": "false"}
    pulled = web.post(SAVE, body)
    assert pulled.status_code == 302 and pulled["Location"] == sb.digest.get_absolute_url()
    assert not sb.digest.loop_enabled and sb.pricing.loop_enabled
    fragment = web.get(POLICY, **HX).content.decode()
    assert 'id="join-entity"' in fragment and "dailyCap" not in fragment
    web.post(JOIN, {"targetKind": "scenario", "targetId": "digest"})
    assert sb.digest.loop_enabled
    assert list(ActionLog.objects.order_by("created_at", "id").values_list("op", flat=True)) == [
        "loop_widen",  # the switch is saved through loop_widen's op (the person at the page approves)
        "loop_join",
    ]


def test_turn_on_asks_for_the_daily_cap_where_one_is_owed(sb, web) -> None:
    fragment = web.get("/evolution/entities/heartbeat/pulse/policy/", **HX).content.decode()
    assert 'name="dailyCap"' in fragment and "(and resume)" in fragment
    refused = web.post(JOIN, {"targetKind": "heartbeat", "targetId": "pulse"}, **HX).content.decode()
    assert 'data-code="precondition"' in refused
    joined = web.post(JOIN, {"targetKind": "heartbeat", "targetId": "pulse", "dailyCap": "12"}, **HX)
    assert joined["HX-Refresh"] == "true"
    pulse = sb.pulse
    assert pulse.loop_enabled and pulse.terms["evaluation"]["sample"]["maxPerDay"] == 12


def test_editors_are_for_staff(sb, client, charlie) -> None:
    client.force_login(charlie)
    page = client.get("/evolution/settings/").content.decode()
    assert 'id="pull-loop-switch"' not in page and "Save…" not in page
    assert client.post(SAVE, {"key": "loop.enabled", "op": "set", "value": "false"}).status_code == 403
    assert sb.show(DIGEST) == DIGEST_TEXT
