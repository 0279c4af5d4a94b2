"""The grading pages: entities, one entity, one run, Rate runs (inline HTMX and without JavaScript)."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from grading.models import Entity, Execution, Grade, Rating
from grading.views import scale_choices, show_metric
from tests.grading.rating_helpers import (
    HELPFUL,
    JUDGE,
    LAYOUT_FIT,
    SCORE100,
    make_entity,
    make_grade,
    make_run,
    metric,
)

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "run"}


@pytest.fixture
def web(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


def graded(entity: Entity, *, hours_ago: float = 1, layout_fit: float = 0.75, **fields) -> Execution:
    run = make_run(entity, completed_at=timezone.now() - timedelta(hours=hours_ago), **fields)
    make_grade(run, metrics={"layout_fit": layout_fit, "quality": 0.8, "cost_usd": "0.0123", "duration_ms": 3200})
    return run


def rate_form(html: str, run: Execution, metric_id: str) -> dict[str, str]:
    """The hidden fields of the rating form of one metric of one run, as the page rendered them."""
    row = html[html.index(f'id="run-{run.id}"') :]
    row = row[row.index(f'name="metric_id" value="{metric_id}"') - 600 :]
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', row[:1200]))
    assert fields["metric_id"] == metric_id
    return fields


# --- Entities -----------------------------------------------------------------------------------


def test_pages_need_a_signed_in_person(client: Client) -> None:
    for path in ("/evolution/entities/", "/evolution/rate/"):
        assert client.get(path).status_code == 302


def test_evolution_is_the_loops_fleet_and_links_the_entities(web) -> None:
    response = web.get("/evolution/")
    assert response.status_code == 200
    assert 'href="/evolution/entities/"' in response.content.decode()


def test_the_list_shows_every_entity_with_status_switches_runs_and_last_grade(web, django_assert_max_num_queries):
    digest = make_entity("digest")
    graded(digest, hours_ago=2)
    newest = graded(digest, hours_ago=1)
    Grade.objects.filter(execution=newest).update(passed=False, score=0.31)
    make_entity(
        "pulse", kind="heartbeat", enabled=False, load_error="features/pulse/pulse.heartbeat.md: schedule: required"
    )
    for n in range(5):
        make_entity(f"other-{n}")
    with django_assert_max_num_queries(8):  # two of them: the agents seen, not in the brain; the traces set aside
        response = web.get("/evolution/entities/")
    html = response.content.decode()
    assert response.status_code == 200
    digest_row = html[html.index("scenario:digest") :]
    digest_row = digest_row[: digest_row.index("</tr>")]
    assert ">2<" in digest_row  # two runs
    assert "failed" in digest_row and "0.31" in digest_row
    assert "schedule: required" in html
    assert 'badge error">error' in html


# --- One entity ---------------------------------------------------------------------------------


def test_the_entity_page_shows_terms_with_their_tier_plots_calibration_and_runs(web) -> None:
    entity = make_entity(
        provenance={"evaluation.enabled": "entity", "evaluation.sample.rate": "manifest"},
    )
    run = graded(entity)
    Rating.objects.create(execution=run, metric_id="layout_fit", user=entity_user(web), value=4, normalized=0.75)
    html = web.get(entity.get_absolute_url()).content.decode()
    assert re.search(
        r"evaluation\.sample\.rate</code></td><td><code>1\.0</code></td><td><span class=\"badge tier manifest", html
    )
    assert re.search(
        r"evaluation\.gradeAfterHours</code></td><td><code>0</code></td><td><span class=\"badge tier engine", html
    )
    assert 'data-metric="layout_fit"' in html and "<svg" in html
    assert "Target: 0.5" in html  # the target line on the layout_fit plot
    assert "low: 1 of 5 pairs" in html
    assert str(run.id)[:8] in html and ">Sampled<" in html
    assert "Run now" in html


def entity_user(web: Client):
    from django.contrib.auth.models import User

    return User.objects.get(username="alice")


def test_a_heartbeat_has_no_run_now_button(web) -> None:
    entity = make_entity("pulse", kind="heartbeat")
    assert "Run now" not in web.get(entity.get_absolute_url()).content.decode()


def test_run_now_starts_a_run_on_the_workers_after_commit(web, monkeypatch, django_capture_on_commit_callbacks):
    from grading.tasks import runs

    if not hasattr(runs, "run_entity_task"):
        pytest.skip("grading.tasks.runs.run_entity_task (engineer B) not written yet")
    sent = []
    monkeypatch.setattr(runs.run_entity_task, "delay", lambda *args, **kwargs: sent.append((args, kwargs)))
    entity = make_entity()
    with django_capture_on_commit_callbacks(execute=True):
        response = web.post(f"{entity.get_absolute_url()}run/", {"input": '{"topic": "launch"}'})
    assert response.status_code == 302
    assert sent == [((entity.pk,), {"input": {"topic": "launch"}, "source": "manual", "user_id": entity_user(web).pk})]


def test_run_now_refuses_input_that_is_not_a_json_object(web, django_capture_on_commit_callbacks) -> None:
    entity = make_entity()
    with django_capture_on_commit_callbacks() as callbacks:
        response = web.post(f"{entity.get_absolute_url()}run/", {"input": "[1, 2]"}, follow=True)
    assert callbacks == []
    assert "input: expected a JSON object, got list" in response.content.decode()
    assert "[1, 2]" in response.content.decode()  # kept in the textarea


def test_an_unknown_entity_is_404(web) -> None:
    assert web.get("/evolution/entities/scenario/nope/").status_code == 404


# --- One run ------------------------------------------------------------------------------------


def test_the_run_page_shows_criteria_units_ratings_beside_the_judge_and_the_pin(web, bob) -> None:
    entity = make_entity()
    run = graded(entity)
    Grade.objects.filter(execution=run).update(
        criteria=[
            {
                "criterion": "Names every blocked task",
                "scope": "run",
                "passed": True,
                "score": 0.9,
                "reasoning": "All three named",
                "evidence": "output.summary",
            }
        ]  # fmt: skip
    )
    Rating.objects.create(execution=run, metric_id="layout_fit", user=bob, value=5, normalized=1.0, note="great")
    Rating.objects.create(execution=run, metric_id="layout_fit", user=entity_user(web), value=3, normalized=0.5)
    html = web.get(run.get_absolute_url()).content.decode()
    assert "Names every blocked task" in html and "All three named" in html and "output.summary" in html
    assert ">$0.0123<" in html
    assert ">3.2 s<" in html
    row = html[html.index('data-metric="layout_fit"') :]
    row = row[: row.index("</tr>")]
    assert "4 · Good" in row  # the judge's 0.75 on 1–5
    assert "4 · Good" in row.split('class="num people">')[1]  # median of 5 and 3
    assert "bob: <strong>5</strong> — great" in row
    assert JUDGE["model"] in html and "Grade now" in html
    assert "sampled" in html


def test_grade_now_calls_eval_start_and_reports_a_refusal(web) -> None:
    pytest.importorskip("grading.booking")
    run = make_run(make_entity(enabled=False))
    response = web.post(f"{run.get_absolute_url()}grade/", follow=True)
    assert "evaluation.enabled is false" in response.content.decode()
    assert not Grade.objects.exists()


def test_units_read_as_people_read_them() -> None:
    assert show_metric(metric(unit="usd"), "0.0123") == "$0.0123"
    assert show_metric(metric(unit="ms"), 3200) == "3.2 s"
    assert show_metric(LAYOUT_FIT, 0.75) == "4 · Good"
    assert show_metric(HELPFUL, 1.0) == "1 · 👍"
    assert show_metric(metric(unit="count"), 2) == "2"
    assert show_metric(metric(unit="usd"), None) == "—"


def test_small_scales_are_buttons_and_others_a_number_input() -> None:
    assert [v for v, _ in scale_choices({"min": 1, "max": 5, "step": 1})] == ["1", "2", "3", "4", "5"]
    assert scale_choices({"min": 1, "max": 10, "step": 1}) == []
    assert scale_choices({"min": 0, "max": 100, "step": None}) == []
    assert scale_choices(HELPFUL["scale"]) == [("0", "0 · 👎"), ("1", "1 · 👍")]


# --- Rate runs ----------------------------------------------------------------------------------


def test_rate_runs_shows_judge_and_people_side_by_side_and_people_only_on_an_unsampled_run(web, bob) -> None:
    entity = make_entity()
    sampled = graded(entity, hours_ago=2)
    Rating.objects.create(execution=sampled, metric_id="layout_fit", user=bob, value=2, normalized=0.25)
    skipped = make_run(entity, sampling=Execution.Sampling.SKIPPED_RATE)
    make_entity("quiet", metrics={"relevance": metric(kind="judged", direction="max", role="guard")})
    html = web.get("/evolution/rate/").content.decode()
    sampled_row = html[html.index(f'id="run-{sampled.id}"') :]
    sampled_row = sampled_row[: sampled_row.index("</article>")]
    assert 'class="num judge">4 · Good' in sampled_row
    assert 'class="num people">2 · Poor' in sampled_row
    skipped_row = html[html.index(f'id="run-{skipped.id}"') :]
    skipped_row = skipped_row[: skipped_row.index("</article>")]
    assert "passed by: outside sample.rate" in skipped_row
    assert 'class="num judge"><span class="muted">—' in skipped_row
    assert "Quiet" not in html  # no metric people rate
    assert html.count('name="value" value="') >= 5 + 2  # 1–5 buttons and 👍/👎 per run


def test_rating_inline_swaps_the_row_and_the_calibration_in_place(web) -> None:
    entity = make_entity(evaluation={"human": {"agreement": {"minPairs": 1}}})
    run = graded(entity)
    form = rate_form(web.get("/evolution/rate/").content.decode(), run, "layout_fit")
    response = web.post("/evolution/rate/", {**form, "value": "4", "note": "good pacing"}, **HX)
    html = response.content.decode()
    assert response.status_code == 200 and response["X-Rate-Code"] == "ok"
    assert html.startswith(f'\n<article class="card rate-run" id="run-{run.id}"') or f'id="run-{run.id}"' in html[:200]
    assert "Saved." in html
    assert 'class="num people">4 · Good' in html
    assert 'aria-pressed="true">4 · Good' in html
    assert f'id="calibration-{entity.pk}" class="calibration" hx-swap-oob="true"' in html
    assert '<span class="badge ok">ok</span>' in html
    rating = Rating.objects.get()
    assert (rating.value, rating.note) == (Decimal(4), "good pacing")
    # the key changes on every render: the next press is a new gesture
    assert rate_form(html, run, "layout_fit")["idempotency_key"] != form["idempotency_key"]


def test_a_double_press_with_the_same_key_writes_once(web) -> None:
    run = graded(make_entity())
    form = rate_form(web.get("/evolution/rate/").content.decode(), run, "layout_fit")
    web.post("/evolution/rate/", {**form, "value": "4"}, **HX)
    web.post("/evolution/rate/", {**form, "value": "2"}, **HX)
    assert Rating.objects.get().value == Decimal(4)


def test_rating_works_without_javascript(web) -> None:
    run = graded(make_entity(metrics={"overall": SCORE100}))
    form = rate_form(web.get("/evolution/rate/").content.decode(), run, "overall")
    response = web.post("/evolution/rate/", {**form, "value": "62.5"})
    assert response.status_code == 302 and response["Location"] == f"/evolution/rate/#run-{run.id}"
    assert Rating.objects.get().normalized == 0.625
    assert "Saved." in web.get("/evolution/rate/").content.decode()


def test_an_off_scale_rating_is_shown_in_place_and_writes_nothing(web) -> None:
    run = graded(make_entity(metrics={"overall": SCORE100}))
    form = rate_form(web.get("/evolution/rate/").content.decode(), run, "overall")
    response = web.post("/evolution/rate/", {**form, "value": "120"}, **HX)
    assert response["X-Rate-Code"] == "invalid"
    assert (
        "Not saved (invalid): metric &#x27;overall&#x27;: value 120 is off the scale 0..100"
        in response.content.decode()
    )
    assert not Rating.objects.exists()


def test_the_page_filters_to_one_entity(web) -> None:
    one, two = make_entity("one"), make_entity("two")
    a, b = graded(one), graded(two)
    html = web.get("/evolution/rate/?entity=scenario:one").content.decode()
    assert f"run-{a.id}" in html and f"run-{b.id}" not in html


def test_rate_runs_reads_a_bounded_number_of_queries(web, bob, django_assert_max_num_queries) -> None:
    entity = make_entity()
    for n in range(12):
        run = graded(entity, hours_ago=n + 1)
        Rating.objects.create(execution=run, metric_id="layout_fit", user=bob, value=3, normalized=0.5)
    with django_assert_max_num_queries(16):
        assert web.get("/evolution/rate/").status_code == 200


# --- Admin --------------------------------------------------------------------------------------


def test_the_admin_lists_grading_rows_read_only(web) -> None:
    entity = make_entity("pulse", kind="heartbeat", load_error="schedule: required")
    run = graded(entity)
    Rating.objects.create(execution=run, metric_id="layout_fit", user=entity_user(web), value=4, normalized=0.75)
    for model in ("entity", "execution", "grade", "rating", "rateskip"):
        response = web.get(f"/admin/grading/{model}/")
        assert response.status_code == 200, model
        assert f"/admin/grading/{model}/add/" not in response.content.decode()
    assert "schedule: required" in web.get(f"/admin/grading/entity/{entity.pk}/change/").content.decode()
    assert web.post(f"/admin/grading/entity/{entity.pk}/delete/", {"post": "yes"}).status_code == 403


def test_rate_runs_filter_offers_every_rated_entity_in_one_select_and_marks_the_chosen_one(web) -> None:
    first = make_entity("first", name="First")
    make_entity("second", name="")
    graded(first)
    html = web.get("/evolution/rate/?entity=scenario:first").content.decode()
    assert html.count('<select name="entity">') == 1  # one line, however many entities
    assert '<option value="scenario:first" selected>First</option>' in html
    assert '<option value="scenario:second">second</option>' in html  # no name: the slug
    assert '<option value="">every entity people rate</option>' in html  # the filtered page can go back to all
    assert '<option value="" selected>' in web.get("/evolution/rate/").content.decode()
    assert f'action="/evolution/rate/" hx-post="/evolution/rate/" hx-target="#run-{first.executions.get().id}"' in html


def test_rate_runs_refuses_an_entity_that_is_not_one_and_names_it(web) -> None:
    graded(make_entity("first"))
    response = web.get("/evolution/rate/?entity=scenario:nobody")
    assert response.status_code == 400
    assert response.content.decode().startswith("entity: 'scenario:nobody' is not an entity")
    assert web.get("/evolution/rate/?entity=").status_code == 200  # the select's "every entity": all of them
