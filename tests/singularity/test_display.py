"""One money format and one instant format for the whole site, and the template filters that show them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.template import Context, Template
from django.test import override_settings

from singularity import display
from singularity.display import ago_text, instant_text, usd_plain, usd_text

NOW = datetime(2025, 3, 14, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("amount", "shown"),
    [
        (Decimal("9.984300000001"), "$9.98"),
        (Decimal("10"), "$10.00"),
        (Decimal("0.1"), "$0.10"),
        (Decimal("0.015"), "$0.02"),  # half-even to the cent
        (Decimal("0.025"), "$0.02"),
        (Decimal("-0.25"), "-$0.25"),
        (Decimal("1234567.891"), "$1,234,567.89"),
        (Decimal("0"), "$0.00"),
        (Decimal("-0.000"), "$0.00"),
        ("0.0123", "$0.01"),
        (0.5, "$0.50"),
    ],
)
def test_money_has_two_decimals(amount: object, shown: str) -> None:
    assert usd_text(amount) == shown


@pytest.mark.parametrize(
    ("amount", "shown"),
    [
        (Decimal("0.0052"), "$0.0052"),
        (Decimal("0.004873"), "$0.0049"),
        (Decimal("0.0003"), "$0.0003"),
        (Decimal("0.000000000001"), "$0.000000000001"),
        (Decimal("-0.0052"), "-$0.0052"),
        (Decimal("0.00999"), "$0.01"),  # rounds up to a cent: shown as one
    ],
)
def test_a_cost_below_a_cent_keeps_two_significant_digits(amount: object, shown: str) -> None:
    assert usd_text(amount) == shown


def test_what_is_not_money_is_shown_as_it_is() -> None:
    assert usd_text(None) == ""
    assert usd_text("n/a") == "n/a"


def test_plot_labels_are_exact_with_the_cents() -> None:
    assert usd_plain(Decimal("9.9843")) == "$9.9843"
    assert usd_plain(Decimal("10")) == "$10.00"
    assert usd_plain(Decimal("-0.5")) == "-$0.50"


def render(text: str, **context: object) -> str:
    return Template("{% load singularity_tags %}" + text).render(Context(context))


def test_usd_shows_two_decimals_with_the_exact_amount_on_hover() -> None:
    html = render("{{ x|usd }}", x=Decimal("9.984300000001"))
    assert html == '<span class="money" title="9.984300000001 USD">$9.98</span>'


def test_usd_of_nothing_is_empty_so_a_default_shows() -> None:
    assert render('{{ x|usd|default:"—" }}', x=None) == "—"


def test_signed_usd_has_a_sign_and_its_colour() -> None:
    assert render("{{ x|signed_usd }}", x=Decimal("1.2343")) == (
        '<span class="money pos" title="1.2343 USD">+$1.23</span>'
    )
    assert render("{{ x|signed_usd }}", x=Decimal("-0.0157")) == (
        '<span class="money neg" title="-0.0157 USD">-$0.02</span>'
    )
    assert render("{{ x|signed_usd }}", x=Decimal("0")) == '<span class="money zero" title="0.00 USD">$0.00</span>'


def test_usd_text_is_plain_for_attributes() -> None:
    assert render('<b title="{{ x|usd_text }}">', x=Decimal("0.0052")) == '<b title="$0.0052">'


@override_settings(TIME_ZONE="Europe/Berlin")
def test_an_instant_is_shown_in_the_configured_time_zone() -> None:
    assert instant_text(NOW) == "2025-03-14 13:00 CET"
    html = render("{{ t|instant }}", t=NOW)
    assert html == (
        '<time datetime="2025-03-14T13:00:00+01:00" title="2025-03-14 13:00:00 CET">2025-03-14 13:00 CET</time>'
    )


@pytest.mark.parametrize(
    ("before", "shown"),
    [
        (timedelta(seconds=3), "just now"),
        (timedelta(seconds=45), "45 s ago"),
        (timedelta(minutes=3, seconds=50), "3 min ago"),
        (timedelta(hours=2, minutes=59), "2 h ago"),
        (timedelta(days=1, hours=3), "1 day ago"),
        (timedelta(days=6), "6 days ago"),
        (timedelta(days=8), "2025-03-06 12:00 UTC"),  # past a week, recency no longer matters
        (-timedelta(minutes=5), "in 5 min"),
    ],
)
def test_ago_says_how_recent_an_instant_is(before: timedelta, shown: str) -> None:
    assert ago_text(NOW - before, now=NOW) == shown


@time_machine.travel(NOW, tick=False)
def test_one_date_format_the_instant_with_the_relative_on_hover() -> None:
    """Issue 28: ``instant`` and ``ago`` read the same: the instant, and how long ago it was in its title."""
    expected = '<time datetime="2025-03-14T11:57:00+00:00" title="3 min ago · 2025-03-14 11:57:00 UTC">2025-03-14 11:57 UTC</time>'
    assert render("{{ t|ago }}", t=NOW - timedelta(minutes=3)) == expected
    assert render("{{ t|instant }}", t=NOW - timedelta(minutes=3)) == expected
    assert display.instant_title(NOW - timedelta(days=9), now=NOW) == "2025-03-05 12:00:00 UTC"


def test_instants_of_nothing_are_empty() -> None:
    assert render("{{ t|instant }}{{ t|ago }}", t=None) == ""


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "America/St_Johns", "Asia/Kathmandu", "Australia/Lord_Howe"])
def test_an_instant_reads_as_djangos_date_format_of_it_in_any_zone(zone: str) -> None:
    """instant_text writes out what ``date_format`` gave for its two formats: random instants, the hours around
    each daylight-saving change (ambiguous and skipped wall-clock times), naive ones, and years before 1000."""
    import random
    from zoneinfo import ZoneInfo

    from django.utils import timezone
    from django.utils.dateformat import format as date_format

    from singularity.display import INSTANT_FORMAT, INSTANT_TITLE_FORMAT

    rng = random.Random(zone)
    instants = [datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=rng.randint(-(10**9), 10**9)) for _ in range(300)]
    for year in (2025, 2026):  # every quarter hour of the days a zone changes its clock, in UTC and local
        for month, day in ((3, 29), (3, 30), (3, 8), (4, 5), (10, 4), (10, 25), (10, 26), (11, 1)):
            start = datetime(year, month, day, tzinfo=UTC) - timedelta(hours=14)
            instants += [start + timedelta(minutes=15 * k) for k in range(28 * 4)]
    instants += [datetime(987, 6, 5, 4, 3, 2, tzinfo=UTC), datetime(2026, 3, 29, 2, 30), datetime(2026, 10, 25, 2, 30)]
    instants += [datetime(2026, 10, 25, 2, 30, tzinfo=ZoneInfo("Europe/Berlin"), fold=1)]
    with override_settings(TIME_ZONE=zone), timezone.override(zone):
        for instant in instants:
            local = timezone.localtime(instant) if timezone.is_aware(instant) else instant
            assert instant_text(instant) == date_format(local, INSTANT_FORMAT), instant
            assert instant_text(instant, seconds=True) == date_format(local, INSTANT_TITLE_FORMAT), instant
            if not timezone.is_aware(instant):
                continue  # how long ago a naive instant was is not asked (``ago_text`` subtracts an aware now)
            # What the ``instant`` filter writes, its local time worked out once: the same three parts.
            now = instant + timedelta(minutes=rng.choice([0, 3, -90, 3000, 60 * 24 * 8]))
            parts = (display.iso(instant), display.instant_title(instant, now=now), instant_text(instant))
            assert display.instant_parts(instant, now=now) == parts, instant


# --- Numbers (issue 28): one format, at most three significant decimals, shares as percentages ------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.666666666667, "0.667"),
        ("0.666666666667", "0.667"),
        (0.333333333, "0.333"),
        (0.0412345, "0.0412"),
        (2.3333, "2.33"),
        (112.0, "112"),
        (-481, "-481"),
        (Decimal("752.5"), "752.5"),
        (0, "0"),
        (None, "—"),
        ("", "—"),
        ("n/a", "n/a"),
        (True, "True"),
        (float("nan"), "nan"),
    ],
)
def test_a_number_reads_with_at_most_three_significant_decimals(value, text) -> None:
    assert display.number_text(value) == text


def test_a_movement_carries_its_sign() -> None:
    assert [display.signed_number_text(v) for v in ("0.666666666667", "-481", 0, None)] == ["+0.667", "-481", "0", "—"]


@pytest.mark.parametrize(
    ("share", "text"), [(0.666666, "67%"), (1, "100%"), (0, "0%"), (0.004, "0.4%"), ("0.5", "50%"), (None, "—")]
)
def test_a_share_reads_as_a_percentage(share, text) -> None:
    assert display.percent_text(share) == text


def test_the_template_filters_use_the_one_format() -> None:
    page = Template(
        "{% load singularity_tags %}{{ a|number }} {{ b|signed_number }} {{ c|percent }} {{ d|reading:'cost_usd' }} "
        "{{ a|reading:'accuracy' }}"
    ).render(Context({"a": 0.666666666667, "b": "0.666666666667", "c": 0.25, "d": "0.0052"}))
    assert page == "0.667 +0.667 25% $0.0052 0.667"


def test_one_word_per_graded_runs_outcome_on_every_page() -> None:
    from evolution.presets import pairs

    assert [display.outcome_word(p) for p in (True, False, None)] == ["passed", "bad", "not graded"]
    assert (pairs.STATE_WORDS[pairs.VIABLE], pairs.STATE_WORDS[pairs.FAILED]) == ("passed", "bad")
    page = Template("{% load singularity_tags %}{{ a|outcome_badge }} {{ b|outcome_badge }}").render(
        Context({"a": True, "b": False})
    )
    assert page == '<span class="badge ok">passed</span> <span class="badge bad">bad</span>'
    for name in ("grading/partials/grade_badge.html", "grading/runs.html", "evolution/cycle.html"):
        from django.template.loader import get_template

        source = get_template(name).template.source
        assert ">failed</span>" not in source and ">ok</span>" not in source, name
