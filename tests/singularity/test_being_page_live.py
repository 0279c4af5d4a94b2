"""The being page is live: its summary polls with the version it shows, and every other part follows a change."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import pytest
from django.test import Client

from singularity.being.actions import create_being
from singularity.models import Being, Cycle, Event
from tests.singularity.test_views import add_cycles, add_event

pytestmark = pytest.mark.django_db

PARTS = ("summary", "plots", "cycles", "mind", "journal")


@pytest.fixture
def web(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


def htmx(web: Client, path: str, target: str):
    return web.get(path, HTTP_HX_REQUEST="true", HTTP_HX_TARGET=target)


def changed(response) -> bool:
    """Whether the answer tells the page its being changed (the htmx client event)."""
    return "HX-Trigger" in response and "being-changed" in json.loads(response["HX-Trigger"])


def shown_version(html: str) -> str:
    match = re.search(r'id="summary" hx-get="[^"?]*\?version=(\w+)"', html)
    assert match, "the summary polls with the version it shows"
    return match.group(1)


def test_every_part_of_the_page_refreshes_itself(web: Client) -> None:
    create_being("nova")
    html = web.get("/beings/nova/").content.decode()
    assert 'id="summary" hx-get="/beings/nova/?version=' in html and 'hx-trigger="every 3s"' in html
    for part in ("plots", "cycles", "mind", "journal"):
        tag = re.search(rf'<[a-z]+ id="{part}"[^>]*>', html)
        assert tag, part
        assert 'hx-trigger="being-changed from:body"' in tag.group(0), part
        assert 'hx-swap="outerHTML"' in tag.group(0), part


@pytest.mark.parametrize("part", PARTS)
def test_htmx_gets_each_part_alone(web: Client, part: str) -> None:
    being = create_being("nova")
    add_cycles(being, ["0.01"])
    body = htmx(web, "/beings/nova/", part).content.decode()
    assert re.match(rf'\s*(\{{% load [^%]+%\}})?\s*<[a-z]+ id="{part}"', body), body[:200]
    assert "<html" not in body


def test_a_poll_with_the_shown_version_changes_nothing(web: Client) -> None:
    create_being("nova")
    version = shown_version(web.get("/beings/nova/").content.decode())
    response = htmx(web, f"/beings/nova/?version={version}", "summary")
    assert not changed(response)
    assert shown_version(response.content.decode()) == version


def test_a_page_opened_before_the_first_cycle_shows_it_without_a_reload(web: Client) -> None:
    being = create_being("nova", starting="10")
    page = web.get("/beings/nova/").content.decode()
    assert "No cycles yet." in page
    version = shown_version(page)

    add_cycles(being, ["0.0052", "0.0049"])
    poll = htmx(web, f"/beings/nova/?version={version}", "summary")
    assert changed(poll)  # the other parts fetch themselves again
    assert shown_version(poll.content.decode()) != version

    cycles = htmx(web, "/beings/nova/?page=1", "cycles").content.decode()
    assert "No cycles yet." not in cycles
    assert '<span class="money" title="0.0052 USD">$0.0052</span>' in cycles
    plots = htmx(web, "/beings/nova/", "plots").content.decode()
    assert "Balance at cycle 2: $9.9899" in plots


def test_a_cycle_that_ends_changes_the_version_though_no_event_says_so(web: Client) -> None:
    being = create_being("nova")
    cycle = Cycle.objects.create(being=being, number=1)
    version = shown_version(web.get("/beings/nova/").content.decode())
    Cycle.objects.filter(pk=cycle.pk).update(status=Cycle.Status.COMPLETED, balance_after=Decimal("9.99"))
    assert changed(htmx(web, f"/beings/nova/?version={version}", "summary"))


def test_a_new_memory_or_journal_line_changes_the_version(web: Client) -> None:
    being = create_being("nova")
    version = shown_version(web.get("/beings/nova/").content.decode())
    Being.objects.filter(pk=being.pk).update(memories={"plan": "check sales"})
    second = shown_version(htmx(web, f"/beings/nova/?version={version}", "summary").content.decode())
    assert second != version
    assert "check sales" in htmx(web, "/beings/nova/", "mind").content.decode()
    being.refresh_from_db()
    add_event(being, Event.Kind.WARNING, {"message": "late news"})
    third = htmx(web, f"/beings/nova/?version={second}", "summary")
    assert changed(third)
    assert "late news" in htmx(web, "/beings/nova/", "journal").content.decode()


def test_an_empty_being_has_no_plot_spanning_minus_one_to_one(web: Client) -> None:
    create_being("nova")
    plots = htmx(web, "/beings/nova/", "plots").content.decode()
    assert plots.count(">No cycles yet</text>") == 2
    assert "-$1" not in plots and ">-1<" not in plots


def test_the_balance_axis_fits_the_spending(web: Client) -> None:
    being = create_being("nova", starting="10")
    add_cycles(being, ["0.0052", "0.0049", "0.0056"])
    balance = htmx(web, "/beings/nova/", "plots").content.decode().split('id="flow-chart-title"')[0]
    ticks = [Decimal(t) for t in re.findall(r'text-anchor="end">\$([0-9.]+)</text>', balance)]
    assert min(ticks) >= Decimal("9.98"), ticks  # not $0..$10, where the spend is a flat line
    assert "Empty: $0.00" not in balance  # the $0 line is far off the axis
    assert "Start: $10.00" in balance


def test_the_flow_axis_of_a_being_that_spent_nothing_starts_at_zero(web: Client) -> None:
    being = create_being("nova", starting="10")
    add_cycles(being, ["0", "0"])
    flow = htmx(web, "/beings/nova/", "plots").content.decode().split('id="flow-chart-title"')[1]
    ticks = re.findall(r'text-anchor="end">(-?\$[0-9.]+)</text>', flow)
    assert ticks[0] == "$0.00" and not any(t.startswith("-") for t in ticks)
