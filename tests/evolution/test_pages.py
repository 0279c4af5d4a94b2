"""The loop's pages: the fleet, an entity's cycles and lessons (and Analyze now), a cycle's story; and status.py.

Rows are built with the ORM in every phase a cycle can stand at; the pages
and the status functions read them in a fixed number of queries.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from evolution.models import Cycle, Round
from evolution.reads import fleet
from hitl.models import Card
from tests.evolution.page_helpers import (
    every_phase,
    graded_run,
    in_loop,
    make_card,
    make_cycle,
    make_lesson,
    make_round,
    recall,
    window_of,
)
from tests.grading.grading_helpers import make_entity

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def web(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


def row_of(rows: list[dict], slug: str) -> dict:
    return next(row for row in rows if row["targetId"] == slug)


# --- fleet.fleet and loop_status -------------------------------------------------


def test_the_fleet_lists_the_entities_in_the_loop_only() -> None:
    in_loop("digest")
    in_loop("gone", present=False)
    make_entity("quiet")  # loop off
    assert [row["targetId"] for row in fleet.fleet()] == ["digest"]


def test_each_phase_puts_its_entity_in_a_state_with_a_next_sentence() -> None:
    made = every_phase()
    rows = {row["targetId"]: row for row in fleet.fleet()}
    states = {phase: rows[cycle.entity.slug]["state"] for phase, cycle in made.items()}
    assert states == {
        "analysing": "analysing",
        "deciding": "waiting_on_you",
        "applying": "applying",
        "checking": "checking",
        "merge_wait": "pr_open",
        "watching": "watching",
        "reverting": "reverting",
        "settled": "idle",
    }
    deciding = rows[made["deciding"].entity.slug]
    assert deciding["next"].startswith(f"A person answers the decide card of cycle {made['deciding'].pk} · r1")
    assert "waits for a person to merge it" in rows[made["merge_wait"].entity.slug]["next"]
    assert (
        "is checking (0 of 0 pairs graded) before anyone may merge it" not in rows[made["checking"].entity.slug]["next"]
    )
    assert "is checking before anyone may merge it" in rows[made["checking"].entity.slug]["next"]
    assert "1 of 5 graded" in rows[made["watching"].entity.slug]["next"]
    assert "revert PR #" in rows[made["reverting"].entity.slug]["next"]
    assert rows[made["settled"].entity.slug]["live"] is None
    assert rows[made["watching"].entity.slug]["live"]["watch"]["progress"] == {
        "have": 1,
        "need": 5,
        "unit": "graded runs",
    }


def test_needs_you_names_the_card_the_merge_and_the_revert() -> None:
    made = every_phase()
    answer = fleet.loop_status()
    gates = {item["gate"]: item for row in answer["entities"] for item in row["needsYou"]}
    # The analysing and applying cycles' steps have been due for three days with no worker on them: stuck (issue 14).
    assert set(gates) == {"decide", "merge", "revert", "stuck"}
    assert answer["needsYou"] == 5
    decide = gates["decide"]
    card = Round.objects.get(cycle=made["deciding"]).card
    assert decide["cycleId"] == made["deciding"].pk and decide["round"] == 1
    assert decide["card"]["id"] == str(card.pk) and decide["until"] == card.expires_at
    assert gates["merge"]["pr"]["number"] == Round.objects.get(cycle=made["merge_wait"]).pr_number
    assert gates["revert"]["next"].startswith("a person merges or closes revert PR #")


def test_an_answered_card_no_longer_needs_you() -> None:
    entity = in_loop()
    cycle = make_cycle(entity, phase=Cycle.Phase.DECIDING)
    make_card(make_round(cycle), status=Card.Status.ANSWERED)
    (row,) = fleet.fleet()
    assert row["needsYou"] == [] and row["state"] == "waiting_on_you"  # the phase still says deciding
    assert row["next"] == f"Cycle {cycle.pk} · r1 waits on a person's answer."


def test_a_pending_card_wins_over_a_live_claim_holder() -> None:
    entity = in_loop()
    deciding = make_cycle(entity, phase=Cycle.Phase.DECIDING, at=timezone.now() - timedelta(hours=2))
    make_card(make_round(deciding))
    watching = make_cycle(entity, phase=Cycle.Phase.WATCHING)
    make_round(watching, status=Round.Status.MERGED, merge_sha="m" * 40)
    (row,) = fleet.fleet()
    assert row["state"] == "waiting_on_you"
    assert row["live"]["id"] == watching.pk  # the claim holder
    assert [c["id"] for c in row["inFlight"]] == [deciding.pk, watching.pk]


def test_an_idle_entity_counts_its_trigger_window() -> None:
    entity = in_loop(loop={"threshold": 0.5, "trigger": {"windowRuns": 5, "minFailures": 3}})
    start = timezone.now() - timedelta(hours=1)
    for minutes, passed in enumerate([True, False, True, False]):
        graded_run(entity, passed=passed, at=start + timedelta(minutes=minutes))
    (row,) = fleet.fleet()
    assert row["state"] == "window"
    assert row["next"].startswith("2 of the last 4 graded runs bad; a cycle opens when the newest graded run is bad")
    quiet = in_loop("quiet", loop={"threshold": 0.5})
    graded_run(quiet, passed=True)
    assert row_of(fleet.fleet(), "quiet")["state"] == "idle"


def test_a_settled_cycle_rests_the_entity_until_its_cooldown_ends() -> None:
    entity = in_loop()
    settled_at = timezone.now() - timedelta(hours=2)
    make_cycle(entity, phase=Cycle.Phase.SETTLED, status=Cycle.Status.REGRESSED, at=settled_at - timedelta(hours=1),
               completed_at=settled_at)  # fmt: skip
    (row,) = fleet.fleet()
    assert row["state"] == "idle" and row["next"].startswith("Resting until ")
    with time_machine.travel(settled_at + timedelta(hours=25)):
        (row,) = fleet.fleet()
        assert not row["next"].startswith("Resting")


def test_one_entity_is_answered_even_with_its_loop_off() -> None:
    quiet = make_entity("quiet")
    (row,) = fleet.loop_status(quiet)["entities"]
    assert row["state"] == "off" and row["enabled"] is False


def test_the_fleet_reads_in_a_fixed_number_of_queries(django_assert_max_num_queries) -> None:
    every_phase("a")
    # 10, and one statement for the monthly spend ceiling of every entity in scope (issue 16).
    with django_assert_max_num_queries(11) as few:
        fleet.fleet()
    for index in range(3):
        every_phase(f"more{index}")
    with django_assert_max_num_queries(len(few.captured_queries)):
        rows = fleet.fleet()
    assert len(rows) == 4 * len(Cycle.Phase.values)


# --- The fleet page -----------------------------------------------------------------


def test_pages_need_a_signed_in_person(client: Client) -> None:
    entity = in_loop()
    cycle = make_cycle(entity)
    for path in ("/evolution/", f"/evolution/cycles/{cycle.pk}/", "/evolution/entities/scenario/digest/cycles/"):
        assert client.get(path).status_code == 302


def test_the_fleet_page_shows_states_next_steps_and_cycles_in_flight(web) -> None:
    made = every_phase()
    html = web.get("/evolution/").content.decode()
    assert 'hx-trigger="every 10s"' in html
    assert "5 need you" in html
    deciding = made["deciding"]
    row = html[html.index(f'id="entity-scenario-{deciding.entity.slug}"') :]
    row = row[: row.index("</tr>")]
    assert "waiting on you" in row
    assert f'href="/evolution/cycles/{deciding.pk}/"' in row
    assert 'href="/evolution/entities/"' in html  # the grading pages stay a click away


def test_the_fleet_table_alone_answers_htmx(web) -> None:
    in_loop()
    html = web.get("/evolution/", **HX).content.decode()
    assert html.lstrip().startswith('<div id="fleet"') and "<html" not in html


# --- The entity page's cycles and lessons ------------------------------------------


def test_the_entity_page_loads_its_cycles_section(web) -> None:
    in_loop()
    html = web.get("/evolution/entities/scenario/digest/").content.decode()
    assert 'hx-get="/evolution/entities/scenario/digest/cycles/"' in html


def test_the_cycles_section_lists_cycles_and_lessons(web) -> None:
    entity = in_loop()
    skipped = make_cycle(entity, phase=Cycle.Phase.SETTLED, status=Cycle.Status.SKIPPED, reason="alice skipped it")
    rnd = make_round(skipped, status=Round.Status.SKIPPED, decided_by="alice", rejection="human",
                     decision_note="too risky")  # fmt: skip
    make_lesson(rnd, outcome=Cycle.Status.SKIPPED, rejection="human", note="too risky")
    fragment = web.get("/evolution/entities/scenario/digest/cycles/", **HX).content.decode()
    assert "<html" not in fragment
    assert f'id="cycle-{skipped.pk}"' in fragment and "alice skipped it" in fragment
    assert "Turned down by alice: “too risky”" in fragment
    page = web.get("/evolution/entities/scenario/digest/cycles/").content.decode()
    assert "<html" in page and f'id="cycle-{skipped.pk}"' in page


def test_the_cycles_section_says_why_analyze_now_is_off_from_the_breaker_it_read_once(web) -> None:
    """The breaker's pause comes from the loop's own row (its rearm wait): the section does not read it again,
    and says what ``cannot_analyze`` says; a hold still comes first (issue 18)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from evolution.models import Supervision
    from evolution.views.pages import cannot_analyze

    entity = in_loop()
    now = timezone.now()
    for days in (3, 2):
        cycle = make_cycle(entity, phase=Cycle.Phase.SETTLED, status=Cycle.Status.REGRESSED,
                           at=now - timedelta(days=days), merged_at=now - timedelta(days=days))  # fmt: skip
        make_round(cycle, status=Round.Status.MERGED, merge_sha="m" * 40, pr_number=100 + days)
    said = cannot_analyze(entity)
    assert said.startswith("paused by the breaker: 2 regressed settles in a row")
    path = "/evolution/entities/scenario/digest/cycles/"
    with CaptureQueriesContext(connection) as read:
        fragment = web.get(path, **HX).content.decode()
    assert f"Analyze now is off: {said}" in fragment
    settles = [q for q in read.captured_queries if "'rearm'" in q["sql"] and "evolution_cycle" in q["sql"]]
    assert len(settles) == 1  # the loop's row's, not the section's again
    Supervision.objects.create(kind=Supervision.Kind.HOLD, entity=entity, actor="alice", reason="campaign")
    held = cannot_analyze(entity)
    assert held.startswith("held by alice") and f"Analyze now is off: {held}" in web.get(path, **HX).content.decode()


def test_the_cycles_section_of_an_entity_nothing_pauses_reads_no_hold_and_no_breaker_of_its_own(web) -> None:
    """The loop's row says the entity is not paused: neither a hold nor the breaker's pause stands (issue 18)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from evolution.models import Supervision

    entity = in_loop()
    path = "/evolution/entities/scenario/digest/cycles/"
    with CaptureQueriesContext(connection) as read:
        fragment = web.get(path, **HX).content.decode()
    assert "Analyze now is off" not in fragment
    holds = [q for q in read.captured_queries if q["sql"].startswith('SELECT "evolution_supervision"')]
    assert len(holds) == 1  # the loop's row's
    Supervision.objects.create(kind=Supervision.Kind.HOLD, group="", entity=entity, actor="bob", reason="wait")
    assert "Analyze now is off: held by bob" in web.get(path, **HX).content.decode()


def test_analyze_now_opens_a_cycle_and_says_so(web, alice) -> None:
    entity = in_loop()
    graded_run(entity, passed=False)
    response = web.post("/evolution/entities/scenario/digest/analyze/", **HX)
    cycle = Cycle.objects.get(entity=entity)
    assert cycle.origin == Cycle.Origin.REQUEST and cycle.requested_by == alice
    assert f"Cycle {cycle.pk} opened." in response.content.decode()


def test_analyze_now_shows_the_refusal(web) -> None:
    entity = in_loop()
    live = make_cycle(entity, phase=Cycle.Phase.WATCHING)
    response = web.post("/evolution/entities/scenario/digest/analyze/", follow=True)
    assert f"No cycle: cycle {live.pk} is live" in response.content.decode()


# --- A cycle's story -----------------------------------------------------------------


def test_every_phase_renders_its_story(web) -> None:
    for phase, cycle in every_phase().items():
        response = web.get(f"/evolution/cycles/{cycle.pk}/")
        assert response.status_code == 200, phase
        html = response.content.decode()
        for chapter in ("window", "hypothesize", "ship", "watch", "learn"):
            assert f'id="chapter-{chapter}"' in html, (phase, chapter)


def shipped_story() -> tuple[Cycle, list]:
    """A validated cycle: a window of three runs, a refined round 1 and a merged round 2, watched and learnt."""
    entity = in_loop()
    now = timezone.now()
    window = [
        graded_run(entity, passed=False, metrics={"accuracy": 0.5}, at=now - timedelta(hours=h)) for h in (9, 8, 7)
    ]
    cycle = make_cycle(entity, phase=Cycle.Phase.SETTLED, status=Cycle.Status.VALIDATED, window=window_of(window),
                       at=now - timedelta(hours=6), proposed_at=now - timedelta(hours=5),
                       applied_at=now - timedelta(hours=4), completed_at=now)  # fmt: skip
    first = make_round(cycle, 1, status=Round.Status.REFINED, decided_by="bob", summary="Ask for the date")
    second = make_round(cycle, 2, parent=first, status=Round.Status.MERGED, decided_by="alice",
                        summary="Ask for the date and the place", refinement="also the place",
                        pr_number=7, pr_url="http://testserver/evolution/pulls/7/", merge_sha="m" * 40,
                        gate={"paths": ["features/digest/digest.scenario.md"], "lines": 3},
                        check_run_ids=["c1", "c2"], baseline_run_ids=["b1", "b2"])  # fmt: skip
    watched = [graded_run(entity, passed=True, metrics={"accuracy": 0.9}, at=now - timedelta(hours=h)) for h in (3, 2)]
    Cycle.objects.filter(pk=cycle.pk).update(
        watch_opened_at=now - timedelta(hours=4), watch_tally="2 of 2 graded",
        watch_window={"runIds": [str(r.pk) for r in watched], "progress": {"have": 2, "need": 2}},
        watch_verdict={"verdict": "validated", "comparator": "count", "n": 2, "reason": "0 of 2 bad"},
    )  # fmt: skip
    cycle.refresh_from_db()
    lesson = make_lesson(second)
    return cycle, [first, second, lesson, window, watched]


def test_the_story_tells_every_chapter(web) -> None:
    cycle, (first, second, lesson, window, watched) = shipped_story()
    older = make_cycle(cycle.entity, phase=Cycle.Phase.SETTLED, status=Cycle.Status.SKIPPED,
                       at=cycle.started_at - timedelta(days=2))  # fmt: skip
    old_round = make_round(older, status=Round.Status.SKIPPED, decided_by="carol", rejection="human",
                           decision_note="not now")  # fmt: skip
    recall(make_lesson(old_round, outcome=Cycle.Status.SKIPPED, rejection="human", note="not now"), first)
    later = make_cycle(cycle.entity, phase=Cycle.Phase.SETTLED, status=Cycle.Status.VALIDATED,
                       at=cycle.started_at + timedelta(days=1))  # fmt: skip
    recall(lesson, make_round(later, status=Round.Status.SKIPPED))
    html = web.get(f"/evolution/cycles/{cycle.pk}/").content.decode()
    assert "Kept" in html and "Improvement · n = 2" in html
    for run in window:
        assert f'href="/evolution/runs/{run.pk}/"' in html
    assert "Refined by bob" in html and "Accepted by alice" in html and "also the place" in html
    assert 'href="http://testserver/evolution/pulls/7/"' in html
    assert 'href="/evolution/runs/c1/?compare=b1"' in html
    assert 'id="watch-plot"' in html and "<svg" in html and "Window median" in html
    assert "2 of 2 graded" in html
    assert f'id="lesson-{lesson.pk}"' in html
    remembered = html[html.index('id="remembered"') :]
    assert f"cycle {older.pk} · r1 · skipped" in remembered and "turned down by carol: “not now”" in remembered
    recalled = html[html.index('id="recalled-by"') :]
    assert f"cycle {later.pk} · r1 · kept" in recalled


def test_the_story_reads_its_rounds_once(web) -> None:
    """The rounds the story's detail read (with their cards) draw the proposed files' diffs too: not read again."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    cycle, _ = shipped_story()
    with CaptureQueriesContext(connection) as read:
        html = web.get(f"/evolution/cycles/{cycle.pk}/").content.decode()
    assert "features/digest/digest.scenario.md" in html  # a round's file, drawn as a diff
    rounds = [q["sql"] for q in read.captured_queries if q["sql"].startswith('SELECT "evolution_round"."id"')]
    assert len(rounds) == 1, rounds


def test_proposal_opens_that_round_expanded(web) -> None:
    cycle, _ = shipped_story()
    html = web.get(f"/evolution/cycles/{cycle.pk}/?proposal=1").content.decode()
    assert re.search(r'id="round-1" open', html) and not re.search(r'id="round-2" open', html)
    newest = web.get(f"/evolution/cycles/{cycle.pk}/").content.decode()
    assert re.search(r'id="round-2" open', newest)


def test_a_skip_note_is_quoted_under_the_decision(web) -> None:
    entity = in_loop()
    cycle = make_cycle(entity, phase=Cycle.Phase.SETTLED, status=Cycle.Status.SKIPPED)
    make_round(cycle, status=Round.Status.SKIPPED, decided_by="alice", rejection="human",
               decision_note="we tried this in July")  # fmt: skip
    html = web.get(f"/evolution/cycles/{cycle.pk}/").content.decode()
    assert "Skipped by alice" in html and "“we tried this in July”" in html
    assert 'id="set-aside"' in html and "Turned down by alice" in html


def _archive_refuses() -> None:
    """The lessons' table refuses every insert (a database trigger), as a full disk or a broken archive would."""
    from django.db import connection

    from evolution.models import Lesson

    table = connection.ops.quote_name(Lesson._meta.db_table)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "CREATE FUNCTION lesson_refused() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'disk full'; END $$ "
                "LANGUAGE plpgsql"
            )
            cursor.execute(
                f"CREATE TRIGGER lesson_refused BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION lesson_refused()"
            )
        else:
            cursor.execute(
                f"CREATE TRIGGER lesson_refused BEFORE INSERT ON {table} BEGIN SELECT RAISE(ABORT, 'disk full'); END"
            )


def test_a_lesson_the_archive_refused_is_said(web) -> None:
    from evolution.loop import machine

    entity = in_loop()
    cycle = make_cycle(entity, phase=Cycle.Phase.DECIDING)
    make_round(cycle, status=Round.Status.FAILED, error="the apply failed")  # a proposal behind it: a lesson is owed
    _archive_refuses()
    machine.settle(cycle, Cycle.Status.FAILED, reason="the apply failed")  # the real settle writes the lesson
    cycle.refresh_from_db()
    assert cycle.status == Cycle.Status.FAILED and not cycle.lessons.exists()
    assert "disk full" in cycle.lesson_error
    html = web.get(f"/evolution/cycles/{cycle.pk}/").content.decode()
    assert f"could not be written: {cycle.lesson_error}" in html


def test_go_cycle_redirects_to_the_story_keeping_the_proposal(web) -> None:
    response = web.get("/evolution/go/cycle:12/?proposal=2")
    assert response.status_code == 302 and response["Location"] == "/evolution/cycles/12/?proposal=2"
