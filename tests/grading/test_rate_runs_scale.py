"""Rate runs at fleet scale (issue 18): a fixed number of queries as entities, runs and ratings grow; pages back."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import quote

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from grading.calibration import calibration, calibration_many
from grading.models import Execution, Rating
from grading.views import RATE_RUNS
from grading.views.rate import FEW_ENTITIES as FEW
from tests.grading.rating_helpers import JUDGE, make_entity, make_grade, make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def web(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


def fleet(entities: int, runs: int, person, start: int = 0) -> list:
    made = []
    for i in range(start, start + entities):
        entity = make_entity(f"e{i:03d}")
        for n in range(runs):
            run = make_run(entity, completed_at=timezone.now() - timedelta(hours=n + 1, minutes=i))
            make_grade(run, metrics={"layout_fit": 0.75}, judge=JUDGE)
            if n % 2 == 0:
                Rating.objects.create(execution=run, metric_id="layout_fit", user=person, value=3, normalized=0.5)
        made.append(entity)
    return made


def queries(web: Client, path: str) -> int:
    with CaptureQueriesContext(connection) as read:
        assert web.get(path).status_code == 200
    return len(read.captured_queries)


def test_rate_runs_costs_the_same_queries_with_ten_times_the_entities_and_runs(web, bob):
    fleet(2, 3, bob)
    few = queries(web, "/evolution/rate/")
    fleet(20, 12, bob, start=2)
    assert queries(web, "/evolution/rate/") == few
    assert queries(web, "/evolution/rate/?entity=scenario:e005") == few + 1  # the entity named


def test_calibration_of_many_entities_is_two_queries_and_each_as_alone(bob, django_assert_num_queries):
    entities = fleet(6, 8, bob)
    with django_assert_num_queries(2):
        many = calibration_many(entities)
    assert many == {e.pk: calibration(e) for e in entities}
    assert all(c.pairs == 4 for cs in many.values() for c in cs)


def test_rate_runs_pages_back_from_the_newest_without_repeating_a_run(web, bob):
    fleet(3, 25, bob)
    seen, path = [], "/evolution/rate/"
    while path:
        response = web.get(path)
        rows = [str(row.run.pk) for row in response.context["rows"]]
        assert len(rows) <= RATE_RUNS
        seen += rows
        older = response.context["older"]
        path = f"/evolution/rate/?before={quote(older)}" if older else ""
    newest_first = Execution.objects.order_by("-completed_at", "-id").values_list("id", flat=True)
    assert seen == [str(pk) for pk in newest_first]
    assert "Older runs" in web.get("/evolution/rate/").content.decode()


def test_a_page_that_is_not_one_is_refused_naming_it(web):
    response = web.get("/evolution/rate/?before=yesterday")
    assert response.status_code == 400
    assert "before: 'yesterday' is not a page of Rate runs" in response.content.decode()


def test_the_rateable_entities_are_found_from_the_metrics_blocks_and_only_they_are_read_whole():
    from grading.views import rateable, rateable_entities, with_terms

    rated = [make_entity(f"rated-{i}") for i in range(2)]
    for i in range(6):
        make_entity(f"plain-{i}", metrics={"accuracy": {"kind": "computed", "role": "objective"}})
    with CaptureQueriesContext(connection) as read:
        found = rateable()
    assert [e.slug for e in found] == [e.slug for e in rated]
    assert all("terms" in e.get_deferred_fields() for e in found)  # read for the entities on a page only
    with CaptureQueriesContext(connection) as more:
        assert [e.terms for e in with_terms(found[:1])] == [rated[0].terms]
    assert len(more.captured_queries) == 1 and found[0].get_deferred_fields() >= {"body"}
    assert [(e.slug, e.terms) for e in rateable_entities()] == [(e.slug, e.terms) for e in rated]
    whole = [q["sql"] for q in read.captured_queries if '"grading_entity"."slug"' in q["sql"].split(" FROM ")[0]]
    if connection.vendor == "postgresql":  # the database keeps the rateable ones (a generated column): one statement
        assert len(read.captured_queries) == 1 and len(whole) == 1 and "jsonb_path_exists" not in whole[0]
        assert whole[0].split(" WHERE ")[1].count('"grading_entity"."rateable"') == 1
        assert '"grading_entity"."terms",' not in whole[0].split(" FROM ")[0]
        return
    assert len(read.captured_queries) == 2 and len(whole) == 1
    assert whole[0].endswith(
        f'"grading_entity"."id" IN ({rated[0].pk}, {rated[1].pk})) ORDER BY "grading_entity"."kind" ASC, "grading_entity"."slug" ASC'
    )


def test_the_rateable_entities_are_those_a_metric_of_which_people_rate_whatever_shape_the_block_takes():
    """What the database keeps (Postgres's JSON path) is what ``human_rated`` says of every entity read whole."""
    from grading.people import human_metrics
    from grading.views import rateable_entities

    shapes = {
        "judged-human": {"m": {"kind": "judged", "human": True}},
        "judged-not-human": {"m": {"kind": "judged", "human": False}},
        "judged-human-text": {"m": {"kind": "judged", "human": "true"}},
        "judged-no-human": {"m": {"kind": "judged"}},
        "reported": {"m": {"kind": "reported"}},
        "reported-among-others": {"a": {"kind": "computed"}, "b": {"role": "guard"}, "c": {"kind": "reported"}},
        "computed": {"m": {"kind": "computed", "human": True}},
        "no-kind": {"m": {"human": True}},
        "none": {},
    }
    for slug, metrics in shapes.items():
        make_entity(slug, metrics=metrics)
    make_entity("off", metrics={"m": {"kind": "reported"}}, enabled=False)
    make_entity("broken", metrics={"m": {"kind": "reported"}}, load_error="x: bad")
    odd = make_entity("no-evaluation")
    odd.terms = {"loop": {}}
    odd.save()
    listed = make_entity("metrics-a-list")
    listed.terms = {"evaluation": {"metrics": [{"kind": "reported"}]}}
    listed.save()
    from grading.models import Entity

    every = Entity.objects.filter(evaluation_enabled=True, load_error="").order_by("kind", "slug")
    expected = [
        e.slug for e in every if isinstance((e.terms.get("evaluation") or {}).get("metrics"), dict) and human_metrics(e)
    ]
    assert [e.slug for e in rateable_entities()] == expected == ["judged-human", "reported", "reported-among-others"]


def test_rate_runs_reads_a_runs_entity_from_the_entities_it_was_given_and_not_its_json(bob):
    """One statement, no entity read again a run (issue 18); the run whole, as its row shows it (issue 28)."""
    from grading.views import rate_runs_for

    entities = fleet(3, 4, bob)
    with CaptureQueriesContext(connection) as read:
        runs = rate_runs_for(entities)
        assert all(run.entity in entities for run in runs) and len(runs) == 12
        assert [run.grade.status for run in runs] and [run.status for run in runs] and [r.sampling for r in runs]
    [sql] = [q["sql"] for q in read.captured_queries]
    assert "grading_entity" not in sql
    assert all(next(e for e in entities if e.pk == run.entity_id) is run.entity for run in runs)


def test_calibrations_pairs_come_newest_first_from_the_database_without_their_instants(bob):
    """The pairs statement sorts (newest graded first) and reads back no instant; the ratings come by their
    entity (``rating_entity_metric``, issue 18)."""
    entities = fleet(2, 6, bob)
    with CaptureQueriesContext(connection) as read:
        many = calibration_many(entities)
    pairs = read.captured_queries[-1]["sql"]
    assert '"grading_rating"' in pairs.split(" FROM ")[1] and "ORDER BY" in pairs
    assert "graded_at" not in pairs.split(" FROM ")[0] and "booked_at" not in pairs.split(" FROM ")[0]
    assert all(c.pairs == 3 for cs in many.values() for c in cs)


def test_the_rated_metrics_of_a_pages_entities_read_their_blocks_alone_not_the_fleets(bob):
    # At 1,000 entities the fleet's metrics blocks took 45 ms of the Rate runs page's 290 (issue 37).
    from grading.views.rate import rated_metrics

    entities = [make_entity(f"e{i:03d}") for i in range(6)]
    statements: list[tuple[str, tuple]] = []

    def record(execute, sql, params, many, context):
        statements.append((sql, tuple(params or ())))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        found = rated_metrics(entities[:2])
    assert set(found) == {entities[0].pk, entities[1].pk} and "layout_fit" in found[entities[0].pk]
    # One statement, asking for the two entities by id (SQLite's rowcount of a SELECT is -1, so the ids asked
    # for are what the test reads, on both databases).
    ((sql, params),) = statements
    asked = [p for p in params if isinstance(p, int)]
    assert " IN " in sql and sorted(asked) == sorted([entities[0].pk, entities[1].pk])


def test_rate_runs_reads_the_rateable_entities_and_their_metrics_blocks_in_one_statement(bob):
    """``rateable(metrics=True)`` hands each entity its metrics block: ``rated_metrics`` then reads nothing, and
    answers as it does reading the blocks itself."""
    from grading.views.rate import rateable, rated_metrics

    entities = [make_entity(f"e{i:03d}") for i in range(4)]
    with CaptureQueriesContext(connection) as read:
        every = rateable(metrics=True)
    with CaptureQueriesContext(connection) as after:
        found = rated_metrics(every)
    assert len(read.captured_queries) == (1 if connection.vendor == "postgresql" else 2)
    assert len(after.captured_queries) == 0
    assert found == rated_metrics(rateable()) and set(found) == {e.pk for e in entities}


def test_the_waiting_count_reads_the_newest_runs_up_to_the_cap_in_one_statement(alice, bob, monkeypatch):
    """``Waiting`` counts among the ``QUEUE_CAP`` newest runs only (``capped`` when an older one exists), neither
    rated by the viewer (on the metric filtered to) nor skipped by them; one statement (issue 37)."""
    from grading.models import RateSkip
    from grading.views import rate

    entity = make_entity("queue")
    runs = [make_run(entity, completed_at=timezone.now() - timedelta(minutes=n + 1)) for n in range(6)]
    Rating.objects.create(execution=runs[0], metric_id="layout_fit", user=alice, value=3, normalized=0.5)
    Rating.objects.create(execution=runs[1], metric_id="layout_fit", user=bob, value=3, normalized=0.5)
    RateSkip.objects.create(execution=runs[2], user=alice)
    Rating.objects.create(execution=runs[3], metric_id="other", user=alice, value=3, normalized=0.5)
    Rating.objects.create(execution=runs[5], metric_id="layout_fit", user=alice, value=3, normalized=0.5)
    make_run(entity, loop_launched=True)  # a loop replay is never in the queue
    make_run(entity, status=Execution.Status.RUNNING)  # nor a run still running
    with CaptureQueriesContext(connection) as read:
        assert rate.waiting_for(alice, [entity]) == rate.Waiting(2, 6, False)  # runs[1] and runs[4]
    assert len(read.captured_queries) == 1
    assert rate.waiting_for(alice, [entity], metric="layout_fit") == rate.Waiting(3, 6, False)  # and runs[3]
    assert rate.waiting_for(bob, [entity]) == rate.Waiting(5, 6, False)
    assert rate.waiting_for(alice, []) == rate.Waiting(0, 0, False)
    monkeypatch.setattr(rate, "QUEUE_CAP", 4)  # runs[4] and runs[5] are past the cap: counted neither way
    assert rate.waiting_for(alice, [entity]) == rate.Waiting(1, 4, True)
    assert rate.waiting_for(alice, [entity], metric="layout_fit") == rate.Waiting(2, 4, True)
    monkeypatch.setattr(rate, "QUEUE_CAP", 5)  # runs[4] waits, within the cap; runs[5] (rated) is past it
    assert rate.waiting_for(alice, [entity]) == rate.Waiting(2, 5, True)
    monkeypatch.setattr(rate, "QUEUE_CAP", 6)
    assert rate.waiting_for(alice, [entity]) == rate.Waiting(2, 6, False)


def test_the_rated_metrics_read_with_the_rateable_entities_are_the_ones_their_blocks_declare():
    """``rateable(metrics=True)`` answers each entity's rated metric ids (on Postgres from the database, not its
    metrics block read whole): those ``human_rated`` keeps of the block, in the block's order (issue 37)."""
    from grading.models import Entity
    from grading.people import human_rated
    from grading.views.rate import rateable, rated_metrics

    shapes = {
        "mixed": {
            "zeta": {"kind": "reported"},
            "alpha": {"kind": "judged", "human": True},
            "b": {"kind": "judged", "human": "true"},
            "c": {"kind": "judged", "human": 1},
            "d": {"kind": "computed", "human": True},
            "e": "reported",
            "f": None,
            "g": {},
            "h": {"kind": ["reported"]},
            "it's": {"kind": "reported"},
        },
        "one": {"m": {"kind": "judged", "human": True}},
        "none": {"m": {"kind": "judged"}},
    }
    for slug, metrics in shapes.items():
        make_entity(slug, metrics=metrics)
    every = rateable(metrics=True)
    blocks = dict(Entity.objects.values_list("pk", "terms__evaluation__metrics"))
    expected = {
        e.pk: [m for m, spec in blocks[e.pk].items() if isinstance(spec, dict) and human_rated(spec)] for e in every
    }
    assert rated_metrics(every) == expected
    assert {e.slug for e in every} == {"mixed", "one"}
    mixed = next(e for e in every if e.slug == "mixed")
    assert set(expected[mixed.pk]) == {"zeta", "alpha", "it's"}


def test_calibrations_pairs_leave_the_replays_out_by_their_index_without_reading_a_rated_run(bob):
    """The pairs statement joins each rating to its run's grade by key and leaves a loop replay out through the
    replays' own index (``execution_replays``): no rated run's row is read (issue 37)."""
    entities = fleet(2, 4, bob)
    replay = Execution.objects.filter(entity=entities[0]).order_by("-completed_at").first()
    Execution.objects.filter(pk=replay.pk).update(loop_launched=True)
    with CaptureQueriesContext(connection) as read:
        many = calibration_many(entities)
    assert [c.pairs for c in many[entities[0].pk]] == [1] and [c.pairs for c in many[entities[1].pk]] == [2]
    pairs = read.captured_queries[-1]["sql"]
    assert '"grading_execution"' not in pairs.split(" WHERE ")[0]  # joined to the grades alone
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        try:
            cursor.execute(f"EXPLAIN {pairs}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("SET enable_seqscan = on")
    assert "execution_replays" in plan and "grading_execution_pkey" not in plan and "execution_own" not in plan, plan


def test_rate_runs_sends_a_pinned_number_of_statements(web, bob):
    """The page's statements, counted (issue 37): the session and its user, the rateable entities (two elsewhere
    than on Postgres: their metrics blocks, then them), the page's runs, the page's entities' terms with their
    judges, the calibrations' pairs, the rows' ratings, the waiting count, and the inbox badge's count."""
    fleet(FEW + 1, 2, bob)
    with CaptureQueriesContext(connection) as read:
        response = web.get("/evolution/rate/")
    assert response.status_code == 200 and response.context["calibrations"]
    sent = [q["sql"] for q in read.captured_queries]
    assert len(sent) == (9 if connection.vendor == "postgresql" else 10), "\n".join(s[:120] for s in sent)
