"""The needs-you list's rows are built in the view (``views.needs_you.rows_html``): each equals what the template's
loop over the items rendered before, on a fleet of every kind of wait and on odd values (markup in names and
clauses, links on the public address, a wait of no entity, of no cycle, with and without a deadline)."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.template import Context, Template
from django.utils import timezone

from evolution.steering import needs_you
from evolution.views.needs_you import GATE_BADGE, rows_html
from tests.evolution.page_helpers import in_loop
from tests.evolution.test_fleet_waits_scale import every_wait

pytestmark = pytest.mark.django_db

#: The template's loop, as it stood before the rows were built in the view.
OLD_ROWS = Template(
    "{% load singularity_tags %}"
    + '  {% for item in items %}\n    <tr class="needs-you-item" data-gate="{{ item.gate }}">\n      <td><span class="badge {{ item.badge }}">{{ item.gate }}</span>{% if item.cycleId %}<div class="small"><a href="{% url \'evolution:cycle\' item.cycleId %}">cycle {{ item.cycleId }}{% if item.round %} · r{{ item.round }}{% endif %}</a></div>{% endif %}</td>\n      <td>{% if item.targetKind %}<a href="{% url \'grading:entity\' item.targetKind item.targetId %}">{{ item.name|default:item.targetId }}</a><div class="muted small"><code>{{ item.targetKind }}:{{ item.targetId }}</code></div>{% else %}<span class="muted">—</span>{% endif %}</td>\n      <td>{% if item.clause %}<div>{{ item.clause }}</div>{% endif %}<div class="small">{{ item.next|capfirst }} · <a href="{{ item.url|local }}">{% if item.card %}the card{% elif item.pr %}PR #{{ item.pr.number }}{% else %}go there{% endif %}</a></div></td>\n      <td class="small">{% if item.since %}{{ item.since|instant }}{% endif %}</td>\n      <td class="small">{% if item.until %}{{ item.until|instant }}{% else %}<span class="muted">until someone acts</span>{% endif %}</td>\n    </tr>\n  {% endfor %}\n'
)


def old(items: list[dict]) -> str:
    return OLD_ROWS.render(Context({"items": items}))


def badged(items: list[dict]) -> list[dict]:
    for item in items:
        item["badge"] = GATE_BADGE.get(item["gate"], "warning")
    return items


@pytest.mark.parametrize("seed", [1, 2])
def test_a_real_fleets_rows_are_what_the_template_rendered(seed):
    every_wait(random.Random(seed), "w", 24)
    in_loop("odd", name="A <b>&</b> \"quoted\" 'one'", load_error="x.scenario.md: <bad> & " + "long " * 30)
    _, items = needs_you.page(start=0, stop=50)
    items = badged(items)
    assert len(items) >= 8 and {i["gate"] for i in items} >= {"decide", "config"}
    assert "  " + str(rows_html(items)) + "\n" == old(items)


def test_odd_items_are_what_the_template_rendered(settings):
    settings.SINGULARITY_PUBLIC_URL = "https://dash.example.org"
    now = timezone.now()
    base = {"gate": "grant", "targetKind": None, "targetId": None, "name": "", "cycleId": None, "round": None,
            "since": None, "until": None, "cardId": None, "card": None, "pr": None,
            "url": "https://dash.example.org/inbox/x/", "next": "a person <answers> & goes", "clause": ""}  # fmt: skip
    items = badged([
        base,
        {**base, "gate": "merge", "targetKind": "scenario", "targetId": "a-b", "name": "<i>A</i>", "cycleId": 7,
         "round": 2, "since": now, "until": now + timedelta(days=1), "pr": {"number": 9, "url": "https://x/p/9"},
         "url": "https://github.com/o/r/pull/9", "clause": "why <not> & more"},
        {**base, "gate": "decide", "targetKind": "heartbeat", "targetId": "hb", "name": "", "cycleId": 3,
         "card": {"id": "c", "url": "u"}, "since": now - timedelta(days=9)},
        {**base, "gate": "failure", "targetKind": "scenario", "targetId": "f", "name": "F", "cycleId": 4, "round": 0},
    ])  # fmt: skip
    assert "  " + str(rows_html(items)) + "\n" == old(items)
