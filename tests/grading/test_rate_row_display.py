"""Rate runs' rows carry what their header, scale and buttons show, built in the view (``rate_rows``,
``RateCell.buttons_html`` and ``range``): each equals what the template's own lookups and filters rendered
before, on odd names, labels and scales (markup in them, a missing kind, decimals)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.template import Context, Template

from grading.views import RateCell, rate_rows
from tests.grading.rating_helpers import make_entity, make_run

pytestmark = pytest.mark.django_db

OLD_HEAD = Template(
    "{% load humanize %}"
    '<a href="{{ row.run.entity.get_absolute_url }}">{{ row.run.entity.name|default:row.run.entity.slug }}</a>'
    '<a href="{{ row.run.get_absolute_url }}"><code>{{ row.run.id|stringformat:"s"|slice:":8" }}</code></a>'
    '<time datetime="{{ row.run.completed_at|date:\'c\' }}" title="{{ row.run.completed_at }}">'
)
NEW_HEAD = Template(
    '<a href="{{ row.head.entity_url }}">{{ row.head.entity_label }}</a>'
    '<a href="{{ row.head.run_url }}"><code>{{ row.head.short_id }}</code></a>'
    '<time datetime="{{ row.head.ended_iso }}" title="{{ row.head.ended_title }}">'
)
OLD_CELL = Template(
    "{{ c.spec.kind }} · {{ c.scale.min }}..{{ c.scale.max }}|"
    '{% for value, label, chosen in c.buttons %}<button type="submit" name="value" value="{{ value }}" '
    'class="{% if chosen %}chosen{% else %}secondary{% endif %}" '
    'aria-pressed="{% if chosen %}true{% else %}false{% endif %}">{{ label }}</button>{% endfor %}'
)
NEW_CELL = Template("{{ c.range }}|{{ c.buttons_html }}")


@pytest.mark.parametrize("name", ["", "A <b>&</b> \"quoted\" 'one'"])
def test_a_rows_header_is_what_the_template_rendered(bob, name):
    entity = make_entity("odd-one")
    entity.name = name
    entity.save()
    run = make_run(entity)
    run.entity = entity
    (row,) = rate_rows(bob, [run])
    assert NEW_HEAD.render(Context({"row": row})) == OLD_HEAD.render(Context({"row": row}))


class _Mine:
    def __init__(self, value):
        self.value, self.note = value, ""


@pytest.mark.parametrize(
    ("spec", "scale", "choices", "mine"),
    [
        ({"kind": "judged"}, {"min": 0, "max": 1}, [("0", "0 · 👎"), ("1", "1 · 👍")], "1"),
        ({"kind": "reported"}, {"min": Decimal("0.5"), "max": 2.5}, [("1", '1 · <a & "b">')], None),
        ({}, {"min": "lo", "max": "<hi>"}, [], None),
    ],
)
def test_a_cells_scale_and_buttons_are_what_the_template_rendered(spec, scale, choices, mine):
    cell = RateCell(
        metric_id="m",
        spec=spec,
        judge="",
        people="",
        people_count=0,
        mine=_Mine(mine) if mine else None,
        choices=choices,
        scale=scale,
    )
    assert NEW_CELL.render(Context({"c": cell})) == OLD_CELL.render(Context({"c": cell}))
