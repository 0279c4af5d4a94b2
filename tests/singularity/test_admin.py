"""The admin: beings are supervised through the actions, the ledger and journal are read-only, tokens show once."""

from __future__ import annotations

import re
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from singularity.being.actions import create_being, start_on_workers
from singularity.models import ApiToken, Being, Cycle, Event

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


def test_the_being_list_shows_money_and_status(admin_client: Client) -> None:
    create_being("nova", starting="9.9843")
    body = admin_client.get("/admin/singularity/being/").content.decode()
    assert "$9.9843" in body
    assert 'class="field-status">Created<' in body


def test_a_being_cannot_be_added_or_edited_in_the_admin(admin_client: Client) -> None:
    being = create_being("nova", starting="5")
    assert admin_client.get("/admin/singularity/being/add/").status_code == 403
    response = admin_client.post(
        f"/admin/singularity/being/{being.pk}/change/", {"remaining": "500", "status": "running"}
    )
    assert response.status_code == 403
    being.refresh_from_db()
    assert (being.remaining, being.status) == (Decimal(5), "created")


def test_the_start_action_calls_start_on_workers(admin_client: Client) -> None:
    nova, broke = create_being("nova"), create_being("broke", starting="0")
    response = admin_client.post(
        "/admin/singularity/being/",
        {"action": "start_selected", "_selected_action": [nova.pk, broke.pk]},
        follow=True,
    )
    body = response.content.decode()
    nova.refresh_from_db()
    assert (nova.status, nova.host) == ("running", "worker")
    assert nova.events.get(kind="started").data["by"] == "alice"
    assert "Started on the workers: nova" in body
    assert "eing broke is exhausted: its balance is 0.00 USD" in body
    assert Being.objects.get(name="broke").status == "created"


def test_the_stop_action_calls_request_stop(admin_client: Client) -> None:
    being = start_on_workers(create_being("nova"), by="alice")
    admin_client.post("/admin/singularity/being/", {"action": "stop_selected", "_selected_action": [being.pk]})
    being.refresh_from_db()
    assert being.status == "stopped"


def test_a_teammate_without_permission_gets_no_actions(client: Client, bob) -> None:
    from django.contrib.auth.models import Permission

    bob.user_permissions.add(Permission.objects.get(codename="view_being"))
    being = create_being("nova")
    client.force_login(bob)
    response = client.get("/admin/singularity/being/")
    assert response.status_code == 200
    assert "start_selected" not in response.content.decode()
    client.post("/admin/singularity/being/", {"action": "start_selected", "_selected_action": [being.pk]})
    assert Being.objects.get(name="nova").status == "created"


def test_cycles_and_events_are_read_only(admin_client: Client) -> None:
    being = create_being("nova")
    cycle = Cycle.objects.create(being=being, number=1)
    event = Event.objects.create(being=being, seq=1, kind="warning", data={"message": "x"})
    assert admin_client.get(f"/admin/singularity/cycle/{cycle.pk}/change/").status_code == 200  # view only
    assert admin_client.get("/admin/singularity/event/add/").status_code == 403
    assert admin_client.get(f"/admin/singularity/event/{event.pk}/delete/").status_code == 403
    response = admin_client.post(f"/admin/singularity/event/{event.pk}/change/", {"kind": "stopped"})
    assert response.status_code == 403
    assert Event.objects.get(pk=event.pk).kind == "warning"


def test_the_journal_filters_by_kind_and_searches_by_being(admin_client: Client) -> None:
    nova, other = create_being("nova"), create_being("other")
    Event.objects.create(being=nova, seq=1, kind="warning", data={"message": "nova warns"})
    Event.objects.create(being=nova, seq=2, kind="started", data={"by": "nova starts"})
    Event.objects.create(being=other, seq=1, kind="warning", data={"message": "other warns"})
    by_kind = admin_client.get("/admin/singularity/event/?kind__exact=warning").content.decode()
    assert "nova warns" in by_kind and "other warns" in by_kind and "nova starts" not in by_kind
    by_name = admin_client.get("/admin/singularity/event/?q=other").content.decode()
    assert "other warns" in by_name and "nova warns" not in by_name


def test_adding_a_token_shows_the_key_once_and_stores_its_hash(admin_client: Client, alice) -> None:
    response = admin_client.post(
        "/admin/singularity/apitoken/add/", {"user": alice.pk, "name": "ci", "is_agent": "on"}, follow=True
    )
    body = response.content.decode()
    key = re.search(r"The key of &#x27;ci&#x27; is (sg_[A-Za-z0-9_-]+)", body).group(1)
    token = ApiToken.objects.get(name="ci")
    assert token.is_agent
    assert token.key_hash == ApiToken.hash_key(key) and key not in token.key_hash
    assert token.prefix == key[:8]
    page = admin_client.get(f"/admin/singularity/apitoken/{token.pk}/change/").content.decode()
    assert key not in page and token.key_hash not in page


def test_the_revoke_action_revokes(admin_client: Client, alice) -> None:
    token, key = ApiToken.issue(alice, "ci")
    admin_client.post("/admin/singularity/apitoken/", {"action": "revoke", "_selected_action": [token.pk]})
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert Client().get("/api/beings/", HTTP_AUTHORIZATION=f"Bearer {key}").status_code == 401


def test_the_api_token_command_prints_the_key_once(alice) -> None:
    out, err = StringIO(), StringIO()
    call_command("api_token", "--user", "alice", "--name", "ci", "--agent", stdout=out, stderr=err)
    key = out.getvalue().strip()
    token = ApiToken.objects.get(name="ci")
    assert key.startswith("sg_") and token.key_hash == ApiToken.hash_key(key)
    assert token.is_agent and token.user == alice
    assert "agent token 'ci' for alice" in err.getvalue()


def test_the_api_token_command_names_an_unknown_user(db) -> None:
    with pytest.raises(CommandError, match="--user: no user named 'nobody'"):
        call_command("api_token", "--user", "nobody", "--name", "ci")
    assert not ApiToken.objects.exists()


def test_the_journal_shows_an_entrys_data_in_words_never_json(admin_client: Client) -> None:
    being = create_being("nova")
    data = {"round": 1, "usage": {"prompt_tokens": 172, "completion_tokens": 1}, "error": None}
    event = Event.objects.create(being=being, seq=1, kind="model_completed", data=data)
    for url in ("/admin/singularity/event/", f"/admin/singularity/event/{event.pk}/change/"):
        html = admin_client.get(url).content.decode()
        # Postgres' jsonb keeps keys in its own order (shorter first), SQLite in the written one: each pair is there.
        for words in ("round: 1", "usage: (prompt tokens: 172 · completion tokens: 1)", "error: —"):
            assert words in html, (url, words)
        assert "{&quot;" not in html and "None" not in html.replace("None available", ""), url


def test_the_beat_schedules_internal_task_names_are_not_in_the_admin(admin_client: Client) -> None:
    assert "Periodic tasks" not in admin_client.get("/admin/").content.decode()
    assert admin_client.get("/admin/django_celery_beat/periodictask/").status_code == 404
