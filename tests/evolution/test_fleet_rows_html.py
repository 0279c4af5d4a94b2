"""The fleet table's rows are built in the view (``pages.fleet_rows_html``, issue 18): each equals what the
template's loop over the rows rendered before, on real fleets of every phase and wait and on odd values (markup
in names and clauses, a long clause, a ceiling, one cycle or many, links on the public address)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.template import Context, Template

from evolution.reads import fleet
from evolution.views.pages import _badged, fleet_rows_html
from grading.models import Entity
from tests.evolution.page_helpers import every_phase, in_loop
from tests.evolution.test_fleet_live_read import more_waits

pytestmark = pytest.mark.django_db

#: The template's loop, as it stood before the rows were built in the view.
OLD_ROWS = Template(
    "{% load singularity_tags loop_words %}{% for row in rows %}\n"
    '      <tr id="entity-{{ row.targetKind }}-{{ row.targetId }}" data-state="{{ row.state }}">\n'
    '        <td><a href="{{ row.entity.get_absolute_url }}">{{ row.name }}</a><div class="muted small"><code>'
    "{{ row.targetKind }}:{{ row.targetId }}</code></div></td>\n"
    '        <td><span class="badge {{ row.badge }}">{{ row.stateLabel }}</span></td>\n'
    '        <td class="small">{{ row.next }}</td>\n'
    '        <td class="small">{% for c in row.inFlight %}<div><a href="{{ c.url|local }}">cycle {{ c.id }}</a>'
    "{% if c.round %} · r{{ c.round }}{% endif %} · {{ c.phase|phase_words }}{% if c.pr %} · "
    '<a href="{{ c.pr.url|local }}">PR #{{ c.pr.number }}</a>{% endif %}</div>{% empty %}'
    '<span class="muted">none</span>{% endfor %}</td>\n'
    '        <td class="small month-spend">{% with m=row.month %}<div>{{ m.spent_usd|usd }}'
    '{% if m.ceiling_usd is not None %} <span class="muted">of {{ m.ceiling_usd|usd }}</span>{% endif %}</div>'
    '{% if m.cycles %}<div class="muted">{{ m.validated }} kept · {{ m.regressed }} regressed · {{ m.cycles }} '
    'cycle{{ m.cycles|pluralize }}</div>{% else %}<div class="muted">no cycle</div>{% endif %}{% endwith %}</td>\n'
    '        <td class="small">{% for item in row.needsYou %}<div><a href="{{ item.url|local }}">{{ item.gate }}</a>'
    "{% if item.cycleId %} · <a href=\"{% url 'evolution:cycle' item.cycleId %}\">cycle {{ item.cycleId }}"
    "{% if item.round %} · r{{ item.round }}{% endif %}</a>{% elif item.clause %} · "
    "{{ item.clause|truncatechars:80 }}{% endif %}</div>{% endfor %}</td>\n"
    "      </tr>\n"
    "    {% endfor %}"
)


def old(rows: list[dict]) -> str:
    return OLD_ROWS.render(Context({"rows": rows}))


def test_a_real_fleets_rows_are_what_the_template_rendered():
    every_phase("a")
    more_waits("b")
    in_loop("odd", name="A <b>&</b> \"quoted\" 'one'", load_error="x.scenario.md: <bad> & " + "long " * 30)
    rows = _badged(fleet.fleet_page(per_page=100).rows)
    assert len(rows) >= 10
    assert str(fleet_rows_html(rows)) == old(rows)


@pytest.mark.parametrize("cycles", [0, 1, 2])
def test_odd_rows_are_what_the_template_rendered(settings, cycles):
    settings.SINGULARITY_PUBLIC_URL = "https://dash.example.org"
    entity = in_loop("odd-<one>")
    live = {
        "id": 7,
        "round": None if cycles == 1 else 3,
        "phase": "merge_wait" if cycles else "made_up_phase",
        "url": "https://dash.example.org/evolution/cycles/7/",
        "pr": {"number": 12, "url": "https://forge.example.org/pulls/12?a=1&b=<2>"} if cycles != 1 else None,
    }
    items = [
        {"gate": "decide", "url": "https://dash.example.org/inbox/card/9/", "cycleId": 7, "round": 3, "clause": ""},
        {"gate": "merge", "url": "/evolution/pulls/12/", "cycleId": 7, "round": None, "clause": "x"},
        {"gate": "config", "url": "/e/", "cycleId": None, "round": None, "clause": "<b>" + "why & " * 30},
        {"gate": "rearm", "url": "/e/", "cycleId": None, "round": None, "clause": ""},
    ]
    month = {
        "spent_usd": Decimal("0.0052") if cycles else Decimal("0"),
        "ceiling_usd": Decimal("12.5") if cycles == 2 else None,
        "validated": cycles,
        "regressed": 1,
        "cycles": cycles,
    }
    row = {
        "entity": Entity.objects.get(pk=entity.pk),
        "targetKind": "scenario",
        "targetId": 'odd-"<one>"',
        "name": "Odd & <one>",
        "state": "pr_open",
        "badge": "warning",
        "stateLabel": "PR <open>",
        "next": 'It waits on "you" & <them>.',
        "inFlight": [live] * cycles,
        "month": month,
        "needsYou": items[: cycles + 2],
    }
    assert str(fleet_rows_html([row, row])) == old([row, row])
    assert str(fleet_rows_html([])) == old([]) == ""
