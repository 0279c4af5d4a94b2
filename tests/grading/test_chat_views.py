"""The dashboard's chat pages: talk to a role, close the dialog, the role's episode list, Read the dialog (R22.20)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.urls import reverse

from grading.chat.episodes import close, close_idle_episodes
from grading.models import Episode, Grade
from tests.fakes.gateway import Reply
from tests.grading.chat_helpers import make_role, prices, said
from tests.grading.grading_helpers import make_entity

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def gateway(fake_gateway, settings):
    prices(settings)
    settings.BRAMA_BASE_URL = fake_gateway.base_url
    settings.BRAMA_MAX_RETRIES = 0
    settings.SINGULARITY_MCP_CONFIG = ""
    return fake_gateway


@pytest.fixture
def role(db):
    return make_role(chat={"episode": {"idleHours": 1}})


def test_the_chat_page_needs_a_login(client, role):
    response = client.get(reverse("grading:chat", args=[role.slug]))
    assert response.status_code == 302 and "/login" in response["Location"]


def test_the_chat_page_says_no_dialog_is_open(client, alice, role):
    client.force_login(alice)
    response = client.get(reverse("grading:chat", args=[role.slug]))
    assert response.status_code == 200
    assert "No open dialog: your next message starts one." in response.content.decode()


def test_sending_a_message_with_htmx_shows_the_reply_in_place(client, alice, role, gateway):
    gateway.script(Reply(content="Hello Alice, how can I help?"))
    client.force_login(alice)
    response = client.post(reverse("grading:chat", args=[role.slug]), {"text": "Hi <there>"}, **HTMX)
    page = response.content.decode()
    assert response.status_code == 200 and page.startswith('<div id="chat"')
    assert "Hi &lt;there&gt;" in page and "Hello Alice, how can I help?" in page
    episode = Episode.objects.get()
    assert (episode.counterpart_user, episode.surface) == (alice, "dashboard")


def test_sending_without_javascript_redirects_back_to_the_dialog(client, alice, role, gateway):
    gateway.script(Reply(content="Hello!"))
    client.force_login(alice)
    response = client.post(reverse("grading:chat", args=[role.slug]), {"text": "Hi"})
    assert response.status_code == 302 and response["Location"] == reverse("grading:chat", args=[role.slug])
    assert "Hello!" in client.get(response["Location"]).content.decode()


def test_an_empty_message_is_refused_in_place(client, alice, role, gateway):
    client.force_login(alice)
    response = client.post(reverse("grading:chat", args=[role.slug]), {"text": "  "}, **HTMX)
    assert "message: empty" in response.content.decode()
    assert not Episode.objects.exists()


def test_the_close_button_ends_the_persons_dialog(client, alice, role, gateway):
    client.force_login(alice)
    client.post(reverse("grading:chat", args=[role.slug]), {"text": "Hi"}, **HTMX)
    response = client.post(reverse("grading:chat-close", args=[role.slug]), **HTMX)
    assert "No open dialog" in response.content.decode()
    episode = Episode.objects.get()
    assert (episode.status, episode.closed_by) == ("closed", "person")
    again = client.post(reverse("grading:chat-close", args=[role.slug]), **HTMX)
    assert "There is no open dialog to close." in again.content.decode()


def test_a_person_only_sees_their_own_dialog(client, alice, bob, role, gateway):
    gateway.script(Reply(content="Bob's answer"))
    said(gateway, role, bob, "Bob's secret question")
    client.force_login(alice)
    page = client.get(reverse("grading:chat", args=[role.slug])).content.decode()
    assert "Bob's secret question" not in page and "No open dialog" in page


def test_the_roles_page_lists_its_episodes_newest_first_with_shape_grade_and_numbers(client, alice, bob, role, gateway):
    with time_machine.travel(T0, tick=False):
        said(gateway, role, alice, "First")
        said(gateway, role, alice, "Second")
    close_idle_episodes(T0 + timedelta(hours=2))
    first = Episode.objects.get()
    Grade.objects.create(
        execution=first.execution,
        entity=role,
        status=Grade.Status.GRADED,
        day=T0.date(),
        due_at=T0,
        score=0.8,
        passed=True,
        metrics={"quality": 0.8, "cost_usd": "0.0045", "duration_ms": 1200, "tool_failures": 0},
    )
    with time_machine.travel(T0 + timedelta(hours=3), tick=False):
        said(gateway, role, bob, "Third")
    client.force_login(alice)
    page = client.get(role.get_absolute_url()).content.decode()
    assert page.index(f"episode-{Episode.objects.get(status='open').pk}") < page.index(f"episode-{first.pk}")
    row = page[page.index(f'id="episode-{first.pk}"') :]
    row = row[: row.index("</tr>")]
    assert "went quiet" in row and '<td class="num">4</td>' in row and "<td>1 h</td>" in row
    assert "passed" in row and "<code>quality</code> 0.8" in row and "$0.0045" in row
    assert "Read the dialog" in row and first.get_absolute_url() in row
    assert "still open" in page
    assert reverse("grading:chat", args=[role.slug]) in page


def test_a_workflows_page_has_no_episodes(client, alice):
    entity = make_entity("digest")
    client.force_login(alice)
    page = client.get(entity.get_absolute_url()).content.decode()
    assert 'id="episodes"' not in page


def test_read_the_dialog_shows_the_transcript_with_its_tool_calls(client, alice, gateway):
    role = make_role(capabilities=["episode:write"])
    gateway.script(Reply(tool_calls=[("agent_close_episode", {})]), Reply(content="Goodbye!"))
    said(gateway, role, alice, "Thanks, that is all")
    episode = Episode.objects.get()
    client.force_login(alice)
    page = client.get(episode.get_absolute_url()).content.decode()
    assert "Thanks, that is all" in page and "Goodbye!" in page
    assert "<code>agent_close_episode</code>" in page and "closed by the role" in page


def test_a_person_may_close_the_dialog_and_the_role_page_says_so(client, alice, role, gateway):
    said(gateway, role, alice, "Hi")
    close(Episode.objects.get(), "person")
    client.force_login(alice)
    assert "closed by a person" in client.get(role.get_absolute_url()).content.decode()
