"""The being pages: list, create, detail (plot, cycles, journal, mind), start and stop."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from singularity.being.actions import create_being, start_on_workers
from singularity.models import Being, Cycle, Event
from singularity.templatetags.singularity_tags import money

pytestmark = pytest.mark.django_db


@pytest.fixture
def client_alice(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


def add_cycles(being: Being, spends: list[str], earnings: list[str] | None = None) -> None:
    """Record finished cycles 1..n directly, keeping the being's budget consistent with them."""
    earnings = earnings or ["0"] * len(spends)
    start = timezone.now() - timedelta(hours=1)
    balance = being.remaining
    for number, (spent, earned) in enumerate(zip(spends, earnings, strict=True), start=1):
        balance = balance - Decimal(spent) + Decimal(earned)
        Cycle.objects.create(
            being=being,
            number=number,
            status=Cycle.Status.COMPLETED,
            rounds=2,
            tool_calls=number,
            spent=Decimal(spent),
            earned=Decimal(earned),
            balance_after=balance,
            started_at=start + timedelta(minutes=number),
            finished_at=start + timedelta(minutes=number, seconds=12),
        )
    being.remaining = balance
    being.api_spent = sum((Decimal(s) for s in spends), Decimal(0))
    being.earned = sum((Decimal(e) for e in earnings), Decimal(0))
    being.cycle = len(spends)
    being.save()


def add_event(being: Being, kind: str, data: dict, cycle: int | None = 1) -> Event:
    being.event_seq += 1
    being.save(update_fields=["event_seq"])
    return Event.objects.create(being=being, seq=being.event_seq, cycle=cycle, kind=kind, data=data)


# --- money filter (the older six-decimal text, kept for callers not yet moved to usd) ---


@pytest.mark.parametrize(
    ("amount", "shown"),
    [
        (Decimal("9.984300000000"), "$9.9843"),
        (Decimal("10"), "$10.00"),
        (Decimal("0.1"), "$0.10"),
        (Decimal("0.0000004"), "<$0.000001"),
        (Decimal("1.2345675"), "$1.234568"),
        (Decimal("-0.25"), "-$0.25"),
        ("0.015", "$0.015"),
        (None, ""),
        ("n/a", "n/a"),
    ],
)
def test_money_shows_up_to_six_decimals_trimmed(amount: object, shown: str) -> None:
    assert money(amount) == shown


# --- list ----------------------------------------------------------------


def test_the_list_requires_login(client: Client) -> None:
    response = client.get(reverse("being-list"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_the_list_shows_each_being_with_formatted_money(client_alice: Client) -> None:
    parent = create_being("mother", starting="20")
    child = create_being("kid", starting="10", parent=parent)
    add_cycles(child, ["0.0157"], ["0.5"])
    add_event(child, Event.Kind.CYCLE_STARTED, {"balance": "10.00", "model": "demo"})
    response = client_alice.get(reverse("being-list"))
    body = response.content.decode()
    assert response.status_code == 200
    assert body.index(">kid<") < body.index(">mother<")  # ordered by name
    assert '<span class="money" title="10.4843 USD">$10.48</span>' in body  # balance after spend and earnings
    assert '<span class="money" title="0.50 USD">$0.50</span>' in body  # earned
    assert '<span class="money pos" title="0.4843 USD">+$0.48</span>' in body  # net profit
    assert 'href="/beings/mother/">mother</a>' in body  # the parent column links
    assert 'title="just now · ' in body  # last activity: the instant, how recent on hover


def test_the_list_makes_a_bounded_number_of_queries(client_alice: Client, django_assert_max_num_queries) -> None:
    parent = create_being("root")
    for index in range(12):
        being = create_being(f"b{index}", parent=parent)
        add_event(being, Event.Kind.STARTED, {"host": "worker", "by": "alice"})
    # session, user, count, page: whatever the number of beings, parents and events.
    with django_assert_max_num_queries(5):  # + the inbox count in the navigation
        response = client_alice.get(reverse("being-list"))
    body = response.content.decode()
    assert body.count('<td><a href="/beings/root/">root</a></td>') == 13  # its own row and 12 as a parent
    assert body.count("<td><a href=") == 25


def test_the_new_being_form_creates_and_redirects(client_alice: Client) -> None:
    response = client_alice.post(
        reverse("being-list"), {"name": "nova", "starting_usd": "2.50", "stimulus": "find revenue"}
    )
    being = Being.objects.get(name="nova")
    assert response.status_code == 302
    assert response["Location"] == "/beings/nova/"
    assert (being.starting, being.remaining, being.stimulus) == (Decimal("2.50"), Decimal("2.50"), "find revenue")


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"name": "bad name!", "starting_usd": "1"}, "name", "being&#x27;s name is 1-64"),
        ({"name": "ok", "starting_usd": "-1"}, "starting_usd", "must not be negative"),
        ({"name": "ok", "starting_usd": "ten"}, "starting_usd", "is not a decimal amount"),
        (
            {"name": "ok", "starting_usd": "1", "stimulus": "é" * 40000},
            "stimulus",
            "80000 bytes is over the 65536-byte limit",
        ),
        ({"name": "ok", "starting_usd": "2000000"}, "starting_usd", "at most 1000000 USD"),
    ],
)
def test_the_new_being_form_shows_errors_and_creates_nothing(
    client_alice: Client, data: dict, field: str, message: str
) -> None:
    response = client_alice.post(reverse("being-list"), data)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert list(response.context["form"].errors) == [field]
    assert not Being.objects.exists()


def test_a_nul_in_the_new_being_form_is_refused_by_the_input_guard_naming_the_field(client_alice: Client) -> None:
    response = client_alice.post(reverse("being-list"), {"name": "ok", "starting_usd": "1", "stimulus": "a\x00b"})
    assert response.status_code == 400
    assert response.content.decode() == "stimulus: contains a NUL character (U+0000), which no text here may hold"
    assert not Being.objects.exists()


def test_the_new_being_form_refuses_a_taken_name(client_alice: Client) -> None:
    create_being("nova")
    response = client_alice.post(reverse("being-list"), {"name": "nova", "starting_usd": "1"})
    assert response.status_code == 400
    assert "already exists" in response.content.decode()
    assert Being.objects.count() == 1


# --- detail --------------------------------------------------------------


def test_the_detail_page_requires_login(client: Client) -> None:
    create_being("nova")
    response = client.get("/beings/nova/")
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('login')}?next=/beings/nova/"


def test_an_unknown_being_is_404(client_alice: Client) -> None:
    assert client_alice.get("/beings/nobody/").status_code == 404


def test_the_detail_page_shows_budget_tiles_and_the_plot(client_alice: Client) -> None:
    being = create_being("nova", starting="10")
    add_cycles(being, ["0.0157", "0.25"], ["0", "1.5"])
    body = client_alice.get("/beings/nova/").content.decode()
    assert '<span class="money" title="11.2343 USD">$11.23</span>' in body  # balance: 10 - 0.2657 + 1.5
    assert '<span class="money" title="0.2657 USD">$0.27</span>' in body  # api spent
    assert '<span class="money pos" title="1.2343 USD">+$1.23</span>' in body  # net profit
    assert 'id="balance-chart-title"' in body and 'id="flow-chart-title"' in body
    assert "Balance at cycle 2: $11.2343" in body
    assert "Spent to date at cycle 2: $0.2657" in body
    assert "Earned to date at cycle 2: $1.50" in body
    assert "Start: $10.00" in body  # the reference line at the starting balance


def test_the_plot_keeps_running_sums_when_it_shows_only_the_latest_cycles(client_alice: Client, monkeypatch) -> None:
    monkeypatch.setattr("singularity.views.PLOT_CYCLES", 2)
    being = create_being("nova", starting="10")
    add_cycles(being, ["1", "1", "1"])
    body = client_alice.get("/beings/nova/").content.decode()
    assert "Spent to date at cycle 3: $3.00" in body
    assert "at cycle 1:" not in body


def test_cycles_are_newest_first_and_paginated_by_25(client_alice: Client) -> None:
    being = create_being("nova", starting="100")
    add_cycles(being, ["0.01"] * 30)
    first = client_alice.get("/beings/nova/").context["cycles"]
    assert [c.number for c in first.object_list][:3] == [30, 29, 28]
    assert len(first.object_list) == 25
    second = client_alice.get("/beings/nova/?page=2").context["cycles"]
    assert [c.number for c in second.object_list] == [5, 4, 3, 2, 1]
    assert "12.0 s" in client_alice.get("/beings/nova/").content.decode()  # cycle duration


def test_the_detail_page_makes_a_bounded_number_of_queries(client_alice: Client, django_assert_max_num_queries) -> None:
    parent = create_being("mother")
    being = create_being("nova", starting="100", parent=parent)
    for name in ("c1", "c2", "c3"):
        create_being(name, parent=being)
    add_cycles(being, ["0.01"] * 30)
    for _ in range(60):
        add_event(being, Event.Kind.TOOL_FINISHED, {"tool": "finance__sell", "status": "success", "duration_ms": 3})
    # session, user, being, version, journal, cycle count, cycle page, children, plot: none per row.
    with django_assert_max_num_queries(10):  # + the inbox count in the navigation
        response = client_alice.get("/beings/nova/")
    assert response.status_code == 200


def test_the_journal_is_newest_first_and_readable(client_alice: Client) -> None:
    being = create_being("nova")
    add_event(
        being,
        Event.Kind.COST_DEBITED,
        {"amount": "0.0123", "api": "0.0120", "instance": "0.0003", "remaining": "9.9877"},
    )
    add_event(
        being,
        Event.Kind.TOOL_FINISHED,
        {"tool": "finance__sell", "status": "failed", "duration_ms": 40, "error": "boom"},
    )
    add_event(being, Event.Kind.REVENUE_CREDITED, {"amount": "1.5", "source": "finance__sell", "key": "revenue_usd"})
    add_event(being, Event.Kind.WARNING, {"message": "revenue_usd is not positive", "tool": "finance__x"})
    response = client_alice.get("/beings/nova/")
    assert [e.seq for e in response.context["events"]] == [4, 3, 2, 1]
    body = response.content.decode()
    assert 'spent <span class="money neg" title="0.0123 USD">$0.01</span>' in body
    assert '(api <span class="money" title="0.012 USD">$0.01</span>, instance' in body
    assert 'instance <span class="money" title="0.0003 USD">$0.0003</span>)' in body  # below a cent: more digits
    assert '<code>finance__sell</code> <span class="badge failed">failed</span>' in body
    assert "<span class='error'>boom</span>" in body
    assert 'earned <span class="money pos" title="1.50 USD">$1.50</span>' in body
    assert "<span class='warning-text'>⚠ revenue_usd is not positive</span>" in body


def test_the_journal_filters_by_kind(client_alice: Client) -> None:
    being = create_being("nova")
    add_event(being, Event.Kind.CYCLE_STARTED, {"balance": "10.00", "model": "demo"})
    add_event(being, Event.Kind.WARNING, {"message": "first warning"})
    add_event(being, Event.Kind.WARNING, {"message": "second warning"})
    response = client_alice.get("/beings/nova/?kind=warning")
    assert [e.kind for e in response.context["events"]] == ["warning", "warning"]
    assert 'href="?kind=warning#journal" class="active"' in response.content.decode()
    # An unknown kind shows everything rather than nothing.
    assert len(client_alice.get("/beings/nova/?kind=bogus").context["events"]) == 3


def test_the_journal_pages_back_with_before(client_alice: Client) -> None:
    being = create_being("nova")
    for _ in range(55):
        add_event(being, Event.Kind.WARNING, {"message": "w"})
    first = client_alice.get("/beings/nova/")
    assert first.context["more"] is True
    assert "before=6#journal" in first.content.decode()
    older = client_alice.get("/beings/nova/?before=6")
    assert [e.seq for e in older.context["events"]] == [5, 4, 3, 2, 1]
    assert older.context["more"] is False
    assert "hx-trigger" not in older.content.decode().split('id="journal"')[1][:200]


def test_htmx_gets_only_the_journal_partial(client_alice: Client) -> None:
    being = create_being("nova")
    add_event(being, Event.Kind.WARNING, {"message": "only warnings"})
    add_event(being, Event.Kind.STARTED, {"host": "worker", "by": "alice"})
    response = client_alice.get("/beings/nova/?kind=warning", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="journal")
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="journal" hx-get="/beings/nova/?kind=warning"')
    assert "only warnings" in body
    assert "by: alice" not in body
    assert "<html" not in body


def test_htmx_gets_the_summary_partial(client_alice: Client) -> None:
    create_being("nova", starting="3")
    response = client_alice.get("/beings/nova/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="summary")
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="summary"')
    assert "$3.00" in body and "<html" not in body


def test_the_mind_is_shown_with_children_and_parent(client_alice: Client) -> None:
    parent = create_being("mother")
    being = create_being("nova", parent=parent, system_prompt="Earn more than you spend.")
    create_being("kid", parent=being)
    being.rules = ["never spend twice"]
    being.learnings = ["selling works"]
    being.memories = {"items": "a memory named items", "goal": "profit"}
    being.save()
    body = client_alice.get("/beings/nova/").content.decode()
    assert "Earn more than you spend." in body
    assert "<li>never spend twice</li>" in body and "<li>selling works</li>" in body
    assert "<dt>goal</dt><dd>profit</dd>" in body and "<dt>items</dt><dd>a memory named items</dd>" in body
    assert '<a href="/beings/kid/">kid</a>' in body
    assert '<a href="/beings/mother/">mother</a>' in body


# --- start and stop ------------------------------------------------------


def test_start_runs_the_being_on_workers(client_alice: Client) -> None:
    create_being("nova")
    response = client_alice.post("/beings/nova/start/", follow=True)
    being = Being.objects.get(name="nova")
    assert (being.status, being.host) == ("running", "worker")
    assert being.events.get(kind="started").data == {"host": "worker", "by": "alice"}
    assert "nova is running on the workers." in response.content.decode()


def test_start_shows_a_refusal_as_a_message(client_alice: Client) -> None:
    create_being("broke", starting="0")
    response = client_alice.post("/beings/broke/start/", follow=True)
    assert Being.objects.get(name="broke").status == "created"
    assert "is exhausted: its balance is" in response.content.decode()


def test_stop_stops_a_running_being(client_alice: Client) -> None:
    being = start_on_workers(create_being("nova"), by="alice")
    response = client_alice.post("/beings/nova/stop/")
    assert response.status_code == 302 and response["Location"] == "/beings/nova/"
    being.refresh_from_db()
    assert being.status == "stopped"
    assert being.events.order_by("-seq").first().data == {"status": "stopped", "by": "alice"}


def test_stop_of_a_stopped_being_is_refused_with_a_message(client_alice: Client) -> None:
    create_being("nova")
    response = client_alice.post("/beings/nova/stop/", follow=True)
    assert "is not running (status created)" in response.content.decode()


def test_start_and_stop_refuse_get(client_alice: Client) -> None:
    create_being("nova")
    assert client_alice.get("/beings/nova/start/").status_code == 405
    assert client_alice.get("/beings/nova/stop/").status_code == 405
    assert Being.objects.get(name="nova").status == "created"


def test_start_requires_login_and_csrf(client: Client, alice) -> None:
    create_being("nova")
    assert client.post("/beings/nova/start/").status_code == 302
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(alice)
    assert strict.post("/beings/nova/start/").status_code == 403
    assert Being.objects.get(name="nova").status == "created"


def test_buttons_follow_the_status(client_alice: Client) -> None:
    being = create_being("nova")
    assert ">Start</button>" in client_alice.get("/beings/nova/").content.decode()
    start_on_workers(being, by="alice")
    assert ">Stop</button>" in client_alice.get("/beings/nova/").content.decode()
    client_alice.post("/beings/nova/stop/")
    assert ">Resume</button>" in client_alice.get("/beings/nova/").content.decode()
