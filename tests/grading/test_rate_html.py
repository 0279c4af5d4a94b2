"""Rate runs' rows and calibration tables are built in the view (``grading.views.rate_html``, issue 18): each
equals what the templates' loops and includes rendered before (with, since issue 28, the run itself, who rated
what and the skip button), on odd names, notes, answers, scales, filters and
calibrations (markup in them, a missing kind, decimals, no token)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
import time_machine
from django.db.models import Count
from django.template import Context, Template
from django.template.loader import get_template
from django.utils import timezone
from django.utils.html import format_html_join
from django.utils.safestring import mark_safe

from grading.calibration import MetricCalibration, calibration
from grading.models import Execution, Rating
from grading.people import people_values
from grading.views import rate_rows, rated_on_scale
from grading.views.rate_html import calibration_html, calibrations_html, nav_html, rate_row_html, rate_rows_html
from tests.grading.rating_helpers import HELPFUL, LAYOUT_FIT, SCORE100, make_entity, make_grade, make_run, metric

pytestmark = pytest.mark.django_db

#: ``grading/partials/rate_row.html`` as it stood before the rows were built in the view.
OLD_ROW = Template(
    """{% load humanize %}{% with rate_url=row.head.rate_url %}
<article class="card rate-run" id="run-{{ row.run.id }}">
  <header class="titlebar">
    <div>
      <strong><a href="{{ row.head.entity_url }}">{{ row.head.entity_label }}</a></strong>
      · <a href="{{ row.head.run_url }}">run <code>{{ row.head.short_id }}</code></a>
      · <span class="badge {{ row.run.status }}">{{ row.run.status }}</span>
      · <span class="muted small">ended <time datetime="{{ row.head.ended_iso }}" title="{{ row.head.ended_title }}">{{ row.run.completed_at|naturaltime }}</time></span>
    </div>
    <span class="muted small">{% if row.graded %}graded{% else %}not graded: {{ row.run.get_sampling_display|default:"no booking" }}{% endif %}</span>{% if row.head.skip_url %}
    <form method="post" action="{{ row.head.skip_url }}" hx-post="{{ row.head.skip_url }}" hx-target="#run-{{ row.run.id }}" hx-swap="outerHTML" class="rate-skip">{% csrf_token %}<input type="hidden" name="run_id" value="{{ row.run.id }}">{% if entity_filter %}<input type="hidden" name="entity_filter" value="{{ entity_filter }}">{% endif %}<button type="submit" class="secondary" title="Leave it out of your queue without a rating">Skip this run</button></form>{% endif %}
  </header>
  {% if row.answer %}<p class="answer {% if row.answer.ok %}ok{% else %}error{% endif %}" role="status">{% if row.answer.ok %}Saved.{% else %}Not saved ({{ row.answer.code }}): {{ row.answer.detail }}{% endif %}</p>{% endif %}
  {{ row.view_html }}
  <table class="rate">
    <thead><tr><th>Metric</th><th class="num">Judge</th><th class="num">People</th><th>Yours</th></tr></thead>
    <tbody>
    {% for c in row.cells %}
      <tr data-metric="{{ c.metric_id }}">
        <td><code>{{ c.metric_id }}</code> <span class="muted small">{{ c.range }}</span>{% if c.spec.criterion %}<div class="muted small">{{ c.spec.criterion }}</div>{% endif %}</td>
        <td class="num judge">{% if c.spec.kind != "judged" %}<span class="muted" title="only people rate it">no judge</span>{% elif row.graded %}{{ c.judge }}{% else %}<span class="muted">—</span>{% endif %}</td>
        <td class="num people">{{ c.people }}{% if c.people_count %} <span class="muted small">(n={{ c.people_count }})</span>{% endif %}{% for who, value, note in c.given_by %}<div class="given small">{{ who }}: {{ value }}{% if note %} — {{ note }}{% endif %}</div>{% endfor %}</td>
        <td class="mine">
          <form method="post" action="{{ rate_url }}" hx-post="{{ rate_url }}" hx-target="#run-{{ row.run.id }}" hx-swap="outerHTML" class="rate-form">
            {% csrf_token %}
            <input type="hidden" name="run_kind" value="{{ row.run.run_kind }}">
            <input type="hidden" name="run_id" value="{{ row.run.id }}">
            <input type="hidden" name="metric_id" value="{{ c.metric_id }}">
            <input type="hidden" name="idempotency_key" value="{{ c.key }}">
            {% if entity_filter %}<input type="hidden" name="entity_filter" value="{{ entity_filter }}">{% endif %}
            <input type="text" name="note" placeholder="note (optional)" value="{{ c.mine.note|default:'' }}" aria-label="note on {{ c.metric_id }}" maxlength="4000">
            {% if c.choices %}
              <span class="choices" role="group" aria-label="{{ c.metric_id }} rating">
              {{ c.buttons_html }}
              </span>
            {% else %}
              <input type="number" name="value" min="{{ c.scale.min }}" max="{{ c.scale.max }}" step="{{ c.scale.step|default:'any' }}" value="{{ c.mine_value }}" aria-label="{{ c.metric_id }} on {{ c.scale.min }}..{{ c.scale.max }}" required>
              <button type="submit">Save</button>
            {% endif %}
          </form>
          {% if c.mine %}<div class="muted small">yours: {{ c.mine_value }}</div>{% endif %}
        </td>
      </tr>
    {% endfor %}
    </tbody>
  </table>
</article>{% endwith %}
{% if oob %}{% include "grading/partials/calibration.html" with entity=oob.entity calibration=oob.calibration oob=True %}{% endif %}
"""
)
#: The page's loop over the rows, as it stood.
OLD_ROWS = Template("{% for row in rows %}\n  {% include old_row with entity_filter=chosen_key %}\n{% endfor %}")
#: The page's loop over the calibrations, as it stood.
OLD_CALIBRATIONS = Template(
    "{% for item in calibrations %}\n"
    '  <h3 class="small"><a href="{{ item.url }}">{{ item.label }}</a></h3>\n'
    '  {% include "grading/partials/calibration.html" with entity=item.entity calibration=item.calibration %}\n'
    "{% endfor %}"
)
ODD = "A <b>&</b> \"quoted\" 'one'"


def odd_fleet(alice, bob) -> list[Execution]:
    """Runs of every shape a row shows: graded or passed by, failed, rated by the viewer and others, three scales,
    a metric without a kind, names and notes with markup."""
    odd_spec = metric(human=True, criterion=ODD, scale={"min": 0.5, "max": 2.5, "step": 0.5, "labels": None})
    odd_spec.pop("kind")
    plain = make_entity("plain", metrics={"layout_fit": LAYOUT_FIT, "helpful": HELPFUL, "overall": SCORE100})
    odd = make_entity("odd-one", name=ODD, metrics={"layout_fit": LAYOUT_FIT, "odd<m>": odd_spec})
    nameless = make_entity("nameless", name="")
    now = timezone.now()
    runs = []
    for n, entity in enumerate([plain, odd, nameless, plain, odd]):
        run = make_run(
            entity,
            completed_at=now - timedelta(minutes=5 * n, seconds=n),
            status=Execution.Status.FAILED if n == 3 else Execution.Status.SUCCEEDED,
            sampling=Execution.Sampling.SKIPPED_CAP if n == 4 else Execution.Sampling.SAMPLED,
        )
        if n != 4:
            make_grade(run, metrics={"layout_fit": 0.75, "overall": 0.625})
        runs.append(run)
    Rating.objects.create(execution=runs[0], metric_id="layout_fit", user=alice, value=4, normalized=0.75, note=ODD)
    Rating.objects.create(execution=runs[0], metric_id="layout_fit", user=bob, value=2, normalized=0.25)
    Rating.objects.create(execution=runs[0], metric_id="overall", user=alice, value="62.5", normalized=0.625)
    Rating.objects.create(execution=runs[1], metric_id="odd<m>", user=alice, value="1.5", normalized=0.5)
    Rating.objects.create(execution=runs[3], metric_id="helpful", user=bob, value=1, normalized=1.0)
    for run in runs:
        run.refresh_from_db()
    return runs


@pytest.mark.filterwarnings("ignore:Calling format_html:DeprecationWarning")  # the old tag, with NOTPROVIDED
@pytest.mark.parametrize("token", ["tok3n", "", "NOTPROVIDED"])
@pytest.mark.parametrize("chosen_key", ["", "scenario:odd-<one>"])
def test_a_pages_rows_are_what_the_templates_rendered(alice, bob, token, chosen_key):
    runs = odd_fleet(alice, bob)
    with time_machine.travel(timezone.now(), tick=False):
        rows = rate_rows(alice, runs)
        old = OLD_ROWS.render(
            Context({"rows": rows, "old_row": OLD_ROW, "chosen_key": chosen_key, "csrf_token": token})
        )
        assert str(rate_rows_html(rows, csrf_token=token, entity_filter=chosen_key)) == old
    assert str(rate_rows_html([], csrf_token=token, entity_filter=chosen_key)) == ""


@pytest.mark.parametrize(
    "answer",
    [
        {"ok": True, "code": "ok", "detail": ""},
        {"ok": False, "code": "invalid", "detail": "metric 'overall': value <120> is off the scale & more"},
    ],
)
def test_a_rated_rows_answer_with_its_calibration_is_what_the_template_rendered(alice, bob, answer):
    runs = odd_fleet(alice, bob)
    with time_machine.travel(timezone.now(), tick=False):
        for run in runs:
            (row,) = rate_rows(alice, [run])
            row.answer = answer
            oob = {"entity": run.entity, "calibration": calibration(run.entity)}
            context = {"row": row, "oob": oob, "entity_filter": "scenario:odd", "csrf_token": "t"}
            old = OLD_ROW.render(Context(context))
            new = rate_row_html(row, csrf_token="t", entity_filter="scenario:odd", oob=oob)
            assert str(new) == old


CALIBRATIONS = [
    [],
    [MetricCalibration("layout_fit", "low", 0, None, "low: 0 of 5 pairs under the current judge")],
    [
        MetricCalibration("a<b>", "ok", 8, 0.125, "ok: 1 of 8 pairs agree within 0.25 & <more>"),
        MetricCalibration("c", "low", 3, 2 / 3, "low: 3 of 5 pairs"),
        MetricCalibration("d", "ok", 1234, 1.0, "ok"),
        MetricCalibration("e", "ok", 20, 0.005, "ok"),
    ],
]


@pytest.mark.parametrize("items", CALIBRATIONS)
@pytest.mark.parametrize("oob", [False, True])
def test_a_calibration_table_is_what_its_template_renders(items, oob):
    old = get_template("grading/partials/calibration.html").render(
        {"entity": {"pk": 1234}, "calibration": items, "oob": oob}
    )
    assert str(calibration_html(1234, items, oob=oob)) == old


def test_the_pages_calibrations_are_what_the_templates_rendered():
    entity = make_entity("odd-one", name=ODD)
    items = [
        {"entity": entity, "calibration": c, "url": f"/e/{i}/?a=1&b=<2>", "label": ODD if i else "plain"}
        for i, c in enumerate(CALIBRATIONS)
    ]
    assert str(calibrations_html(items)) == OLD_CALIBRATIONS.render(Context({"calibrations": items}))
    assert str(calibrations_html([])) == ""


def test_the_filters_options_are_what_format_html_join_builds():
    nav = [("scenario:plain", "Plain", False), ("scenario:odd-<one>", ODD, True), ("pulse:x&y", "x&y", False)]
    old = format_html_join(
        "",
        '<option value="{}"{}>{}</option>',
        ((key, mark_safe(" selected") if on else "", label) for key, label, on in nav),
    )
    assert str(nav_html(nav)) == str(old)
    assert str(nav_html([])) == ""


def test_a_pages_rows_read_the_ratings_once_and_show_what_reading_them_three_times_showed(
    alice, bob, charlie, django_assert_num_queries
):
    """People's median and count and the viewer's own rating come from one read of the runs' ratings; a number
    on a scale worked out once a value is what it is each time (True is no 1, a list no number)."""
    runs = odd_fleet(alice, bob)
    for n, judged in enumerate([True, 1, 1.0, [0.5], 0.25, "0.75"]):
        run = make_run(runs[0].entity, completed_at=timezone.now() - timedelta(days=1, minutes=n))
        make_grade(run, metrics={"layout_fit": judged, "overall": judged})
        runs.append(run)
    Rating.objects.create(execution=runs[0], metric_id="layout_fit", user=charlie, value=5, normalized=1.0)
    read = Execution.objects.select_related("entity", "grade").in_bulk([run.pk for run in runs])
    runs = [read[run.pk] for run in runs]  # as rate_runs_for hands them: entity and grade read
    with django_assert_num_queries(1):
        rows = rate_rows(alice, runs)
    ids = [run.pk for run in runs]
    medians = people_values(ids)
    counts = {
        (str(e), m): n
        for e, m, n in Rating.objects.filter(execution_id__in=ids)
        .values("execution_id", "metric_id")
        .annotate(n=Count("id"))
        .values_list("execution_id", "metric_id", "n")
    }
    mine = {(str(r.execution_id), r.metric_id): r for r in Rating.objects.filter(execution_id__in=ids, user=alice)}
    seen = set()
    for row in rows:
        vector = row.run.grade.metrics if row.graded else {}
        for c in row.cells:
            key = (str(row.run.pk), c.metric_id)
            assert c.people == rated_on_scale(c.spec, medians.get(key[0], {}).get(c.metric_id))
            assert c.people_count == counts.get(key, 0)
            assert c.mine == mine.get(key)
            if c.spec.get("kind") == "judged":
                assert c.judge == rated_on_scale(c.spec, vector.get(c.metric_id))
            seen.add((c.people_count, c.judge))
    assert (3, "4 · Good") in seen and (0, "—") in seen and (0, "5 · Excellent") in seen


def test_a_spec_that_is_no_json_is_worked_out_each_time(alice):
    """A spec held in memory with a Decimal (no JSON text to remember it by) still shows its buttons and numbers."""
    entity = make_entity("decimal", metrics={"layout_fit": LAYOUT_FIT})
    run = make_run(entity)
    make_grade(run, metrics={"layout_fit": 0.625})
    run = Execution.objects.select_related("entity", "grade").get(pk=run.pk)
    scale = {"min": Decimal(0), "max": Decimal(10), "step": Decimal(5), "labels": {"5": "<half>"}}
    run.entity.terms["evaluation"]["metrics"]["layout_fit"]["scale"] = scale
    rows = rate_rows(alice, [run, run])
    assert [(c.judge, c.choices) for row in rows for c in row.cells] == [
        ("6.25", [("0", "0"), ("5", "5 · <half>"), ("10", "10")])
    ] * 2
