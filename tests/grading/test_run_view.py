"""The run, everywhere it is judged (issue 28): Rate runs, the rating card, the check's side by side and the
decide card's evidence show the run's input, output, expected answer and the judge's verdicts; Rate runs is an
annotation queue (waiting counts, an entity and a metric filter, skip, who rated what); an entity's page lists its
newest ratings."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from grading.models import Entity, Execution, RateSkip, Rating
from grading.run_view import as_text, expected_of, pieces, run_view
from tests.grading.rating_helpers import LAYOUT_FIT, THUMBS, make_entity, make_grade, make_run, metric

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "run"}
#: The demo triage's people metric: a thumb on the label.
HELPFULNESS = metric(kind="reported", direction="max", unit="share", role="observe", aggregate="mean",
                     criterion="The label sends the ticket to the team that can answer it", scale=THUMBS)  # fmt: skip
ACCURACY = metric(kind="computed", direction="max", unit="share", role="objective", aggregate="mean")
TICKET = "I was charged twice for my March subscription, please fix it."


@pytest.fixture
def web(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


def triage(slug: str = "triage", **metrics_over) -> Entity:
    """An entity shaped like the demo triage: accuracy computed, helpfulness people's thumbs, a judged layout_fit."""
    metrics = {"accuracy": ACCURACY, "helpfulness": HELPFULNESS, "layout_fit": LAYOUT_FIT, **metrics_over}
    return make_entity(slug, kind="pipeline", name=slug.title(), metrics=metrics)


def ticket_run(entity: Entity, *, text: str = TICKET, label: str = "technical", expected: str = "billing",
               minutes_ago: float = 5) -> Execution:  # fmt: skip
    run = make_run(entity, completed_at=timezone.now() - timedelta(minutes=minutes_ago))
    run.input = {"text": text, "_expected": expected}
    run.output = {"result": label, "tasks": {}}  # as the workflow runner writes it
    run.save(update_fields=["input", "output"])
    make_grade(
        run,
        metrics={"accuracy": 0.0, "layout_fit": 0.5},
        criteria=[
            {
                "criterion": "The label fits the ticket",
                "scope": "run",
                "passed": False,
                "score": 0.333333333,
                "reasoning": "A double charge is a billing matter, not a technical one",
                "evidence": "output.result",
            }
        ],  # fmt: skip
    )
    return run


def row_of(html: str, run: Execution) -> str:
    row = html[html.index(f'id="run-{run.id}"') :]
    return row[: row.index("</article>")]


# --- The presentation -----------------------------------------------------------------------------


def test_the_expected_answer_is_taken_out_of_the_input_and_long_values_are_cut_with_the_whole_kept() -> None:
    assert expected_of({"text": "t", "_expected": "billing"}) == ("billing", {"text": "t"})
    assert expected_of({"text": "t"}) == (None, {"text": "t"})
    long = "word " * 400
    [text, data] = pieces({"text": long, "data": {"a": [1, 2]}})
    assert (text.name, text.is_json, text.long, text.text) == ("text", False, True, long)
    assert len(text.short) <= 601 and text.short.endswith("…")
    assert (data.is_json, data.text) == (True, '{\n  "a": [\n    1,\n    2\n  ]\n}')
    assert pieces(None) == [] and pieces({}) == []
    assert as_text({"text": "x" * 50}, 20) == "x" * 20 + "\n… (cut at 20 characters)"  # one text: itself
    assert as_text({"text": "hi", "n": [1]}, 100) == "text: hi\nn:\n[\n  1\n]"
    assert [p.name for p in pieces({"text": "hi"})] == [""]
    # a workflow's output: its result, its empty tasks left out
    assert [(p.name, p.text) for p in pieces({"result": "billing", "tasks": {}})] == [("", "billing")]


def test_a_run_view_carries_the_judges_verdicts_with_their_reasoning() -> None:
    run = ticket_run(triage())
    view = run_view(Execution.objects.select_related("grade").get(pk=run.pk))
    [verdict] = view.verdicts
    assert (verdict.criterion, verdict.passed, verdict.score) == ("The label fits the ticket", False, "0.333")
    assert verdict.reasoning == "A double charge is a billing matter, not a technical one"
    assert [p.text for p in view.expected] == ["billing"]
    assert [p.text for p in view.output] == ["technical"]


# --- Rate runs shows the run ----------------------------------------------------------------------


def test_rate_runs_shows_the_ticket_the_chosen_label_the_expected_label_and_the_judges_reasoning(web) -> None:
    run = ticket_run(triage())
    row = row_of(web.get("/evolution/rate/").content.decode(), run)
    assert TICKET in row
    assert re.search(r"<h4>Output</h4>.*technical", row, re.S)
    assert re.search(r"<h4>Expected</h4>.*billing", row, re.S)
    assert "A double charge is a billing matter, not a technical one" in row
    assert "_expected" not in row  # the input's grading key is not shown as input
    assert 'class="badge failed">failed' in row


def test_a_long_input_is_cut_with_a_show_all_fold_holding_the_whole(web) -> None:
    long = "My invoice is wrong. " * 100
    run = ticket_run(triage(), text=long)
    row = row_of(web.get("/evolution/rate/").content.decode(), run)
    assert "show all (2,100 characters)" in row
    assert long.strip() in row


def test_rate_runs_says_how_many_runs_wait_for_you(web, alice, bob) -> None:
    entity = triage()
    runs = [ticket_run(entity, minutes_ago=n + 1) for n in range(4)]
    Rating.objects.create(execution=runs[0], metric_id="helpfulness", user=alice, value=1, normalized=1.0)
    Rating.objects.create(execution=runs[1], metric_id="helpfulness", user=bob, value=0, normalized=0.0)
    RateSkip.objects.create(execution=runs[2], user=alice)
    html = web.get("/evolution/rate/").content.decode()
    assert "2 of 4 runs wait for you" in html  # runs[1] (bob's rating is not yours) and runs[3]


def test_rate_runs_shows_who_rated_what_with_their_notes(web, bob) -> None:
    run = ticket_run(triage())
    Rating.objects.create(execution=run, metric_id="helpfulness", user=bob, value=0, normalized=0.0, note="wrong team")
    row = row_of(web.get("/evolution/rate/").content.decode(), run)
    people = row[row.index('data-metric="helpfulness"') :]
    people = people[people.index('class="num people"') :]
    assert "bob: 0 · 👎" in people and "wrong team" in people


def test_the_metric_filter_narrows_the_rows_to_one_metric_and_the_entities_that_have_it(web) -> None:
    with_it = ticket_run(triage())
    other = make_entity("storyboard", name="Storyboard", metrics={"layout_fit": LAYOUT_FIT})
    without = make_run(other, completed_at=timezone.now() - timedelta(minutes=1))
    page = web.get("/evolution/rate/").content.decode()
    assert '<select name="metric">' in page
    assert '<option value="helpfulness">helpfulness</option>' in page
    html = web.get("/evolution/rate/?metric=helpfulness").content.decode()
    assert f"run-{with_it.id}" in html and f"run-{without.id}" not in html
    row = row_of(html, with_it)
    assert 'data-metric="helpfulness"' in row and 'data-metric="layout_fit"' not in row
    assert '<option value="helpfulness" selected>' in html
    response = web.get("/evolution/rate/?metric=nonsense")
    assert response.status_code == 400
    assert response.content.decode().startswith("metric: 'nonsense' is no metric people rate")


def test_skip_takes_a_run_out_of_your_queue_only_and_is_remembered(web, client, alice, bob) -> None:
    entity = triage()
    kept, skipped = ticket_run(entity, minutes_ago=1), ticket_run(entity, minutes_ago=2)
    response = web.post("/evolution/rate/skip/", {"run_id": str(skipped.id)}, **HX)
    # nothing in the row's place (HTMX removes it); the waiting count swapped in out of band
    assert response.status_code == 200
    assert response.content.decode().startswith('<p id="rate-waiting" class="rate-waiting" hx-swap-oob="true">')
    assert "1 of 2 runs wait for you" in response.content.decode()
    assert RateSkip.objects.filter(user=alice, execution=skipped).count() == 1
    web.post("/evolution/rate/skip/", {"run_id": str(skipped.id)}, **HX)  # twice is once
    assert RateSkip.objects.count() == 1
    assert not Rating.objects.exists()  # a skip is no rating
    html = web.get("/evolution/rate/").content.decode()
    assert f'id="run-{kept.id}"' in html and f'id="run-{skipped.id}"' not in html
    assert "1 of 2 runs wait for you" in html
    # bob still has it
    other = Client()
    other.force_login(bob)
    assert f'id="run-{skipped.id}"' in other.get("/evolution/rate/").content.decode()
    # without JavaScript: a redirect back
    response = web.post("/evolution/rate/skip/", {"run_id": str(kept.id), "entity_filter": "scenario:triage"})
    assert response.status_code == 302 and response["Location"] == "/evolution/rate/?entity=scenario:triage"
    assert web.post("/evolution/rate/skip/", {"run_id": "nope"}).status_code == 400


def test_rate_runs_reads_a_bounded_number_of_queries_with_many_rows(web, bob, django_assert_max_num_queries) -> None:
    entities = [triage(f"triage{n}") for n in range(3)]
    for n in range(30):
        run = ticket_run(entities[n % 3], minutes_ago=n + 1)
        Rating.objects.create(execution=run, metric_id="helpfulness", user=bob, value=1, normalized=1.0, note="ok")
    with django_assert_max_num_queries(14):  # 12 measured, with 3 rows as with 30
        html = web.get("/evolution/rate/").content.decode()
    assert html.count(TICKET) == 30 and html.count("bob: 1 · 👍") == 30


# --- The entity page lists its newest ratings -----------------------------------------------------


def test_the_entity_page_lists_its_newest_ratings_with_who_gave_them_their_values_and_notes(web, bob) -> None:
    entity = triage()
    run = ticket_run(entity)
    Rating.objects.create(execution=run, metric_id="helpfulness", user=bob, value=0, normalized=0.0, note="wrong team")
    html = web.get(entity.get_absolute_url()).content.decode()
    section = html[html.index('id="ratings"') :]
    section = section[: section.index("</section>")]
    assert "bob" in section and "0 · 👎" in section and "wrong team" in section and "helpfulness" in section
    assert run.get_absolute_url() in section
    # and the plot's hover names who rated the run
    plot = html[html.index('<figure class="plot" data-metric="helpfulness">') :]
    plot = plot[: plot.index("</figure>")]
    assert re.search(r"<title>[^<]*: people [^<]*\(bob\)</title>", plot)


# --- The check's side by side ---------------------------------------------------------------------


def test_the_side_by_side_shows_both_runs_inputs_outputs_expected_and_verdicts(web) -> None:
    entity = triage()
    first, second = ticket_run(entity, label="technical"), ticket_run(entity, label="billing", minutes_ago=1)
    html = web.get(f"{second.get_absolute_url()}?compare={first.pk}").content.decode()
    section = html[html.index('id="compare"') :]
    section = section[: section.index("<h2>Grade</h2>")]
    assert section.count('class="run-view"') == 2
    assert section.count(TICKET) == 2
    assert "A double charge is a billing matter" in section
