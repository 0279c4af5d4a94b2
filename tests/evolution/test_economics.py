"""What the loop cost and what it moved (issue 16): a cycle's cost to the quantum, the monthly ceiling, the
summary, the fleet, needs-you and the entity page.

Run on both databases: ``DATABASE_URL=postgres://… pytest tests/evolution/test_economics.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.utils import timezone

from evolution.core import spend
from evolution.loop import machine
from evolution.models import Cycle, Replay, Round
from grading.models import Grade
from singularity.brain.terms import TermsError
from tests.evolution.loop_helpers import graded, looped
from tests.grading.grading_helpers import make_run

pytestmark = pytest.mark.django_db

Q = Decimal("1e-12")  # the money quantum
CEILING = {"loop": {"budget": {"maxUsdPerMonth": "10"}}}
#: Nothing but the monthly ceiling refuses these entities' openings.
FREE = {"cooldownHours": 0, "maxAnalysesPerDay": None}


def capped(slug: str = "triage", *, ceiling: str = "10", **kwargs) -> object:
    return looped(
        slug, loop={**FREE, **kwargs.pop("loop", {})}, manifest={"loop": {"budget": {"maxUsdPerMonth": ceiling}}}
    )


def spent_cycle(entity, *, at: datetime, proposer: str = "0", status: str = Cycle.Status.VALIDATED, **fields) -> Cycle:
    """A settled analysed cycle of ``entity`` opened at ``at`` whose proposer spent ``proposer``."""
    return Cycle.objects.create(
        entity=entity,
        key=f"test:{entity.pk}:{at.isoformat()}:{status}:{proposer}",
        origin=Cycle.Origin.GRADE,
        phase=Cycle.Phase.SETTLED,
        status=status,
        analysed=True,
        spent_usd=Decimal(proposer),
        started_at=at,
        completed_at=at + timedelta(minutes=5),
        moved_at=at + timedelta(minutes=5),
        **fields,
    )


def judged(run, *, cost: str, reason: str, at: datetime) -> Grade:
    return Grade.objects.create(
        execution=run,
        entity=run.entity,
        status=Grade.Status.GRADED,
        reason=reason,
        holds_slot=False,
        day=at.date(),
        booked_at=at,
        due_at=at,
        graded_at=at,
        passed=True,
        cost_usd=Decimal(cost),
    )


def replayed(rnd: Round, *, slot: int, side: str, run_cost: str, judge_cost: str, at: datetime) -> Replay:
    run = make_run(rnd.cycle.entity, cost_usd=run_cost, loop_launched=True, completed_at=at)
    judged(run, cost=judge_cost, reason=f"exempt:check:{rnd.cycle_id}", at=at)
    return Replay.objects.create(round=rnd, side=side, slot=slot, commit="a" * 40, execution=run)


def open_on_bad(entity, *, now: datetime):
    landed = graded(entity, bad=True, at=now)
    return machine.open_cycle(entity, origin=Cycle.Origin.GRADE, anchor=landed.execution, now=now)


# --- A cycle's cost --------------------------------------------------------------------------


def test_a_cycle_carries_its_cost_to_the_last_decimal():
    entity = looped()
    at = timezone.now() - timedelta(days=1)
    cycle = spent_cycle(entity, at=at, proposer="0.100000000001")
    rnd = Round.objects.create(cycle=cycle, number=1, status=Round.Status.MERGED)
    replayed(rnd, slot=0, side="candidate", run_cost="0.000000000001", judge_cost="0.020000000003", at=at)
    replayed(rnd, slot=0, side="incumbent", run_cost="1.000000000002", judge_cost="0.000000000007", at=at)
    # The watch's exempt gradings of the entity's own runs count; a sampled grade and another cycle's do not.
    judged(make_run(entity), cost="0.300000000009", reason=f"exempt:watch:{cycle.pk}", at=at + timedelta(hours=1))
    other = spent_cycle(entity, at=at + timedelta(minutes=1), proposer="0")
    judged(make_run(entity), cost="5", reason=f"exempt:watch:{other.pk}", at=at + timedelta(hours=1))
    judged(make_run(entity), cost="7", reason="sampled", at=at + timedelta(hours=1))
    judged(make_run(entity), cost="9", reason=f"exempt:watch:{cycle.pk}0", at=at + timedelta(hours=1))

    cost = spend.cost_of(cycle)

    assert cost == {
        "proposer_usd": Decimal("0.100000000001"),
        "replays_usd": Decimal("1.000000000003"),
        "check_judge_usd": Decimal("0.020000000010"),
        "watch_judge_usd": Decimal("0.300000000009"),
        "total_usd": Decimal("1.420000000023"),
    }
    assert spend.cost_of(other)["total_usd"] == Decimal(5)


def test_a_cycle_that_spent_nothing_costs_exactly_zero():
    cycle = spent_cycle(looped(), at=timezone.now())
    assert spend.cost_of(cycle) == {name: Decimal(0) for name in (*spend.PARTS, "total_usd")}


def test_a_month_sums_every_cycle_it_opened_to_the_quantum_and_no_other():
    entity, neighbour = looped("triage"), looped("digest")
    start = datetime(2026, 3, 1, tzinfo=UTC)
    for day in range(30):
        spent_cycle(entity, at=start + timedelta(days=day, hours=1), proposer="0.000000000001")
    spent_cycle(entity, at=start - timedelta(seconds=1), proposer="100")  # February's
    spent_cycle(entity, at=datetime(2026, 4, 1, tzinfo=UTC), proposer="100")  # April's
    spent_cycle(neighbour, at=start + timedelta(days=2), proposer="0.5")
    with time_machine.travel(datetime(2026, 3, 15, tzinfo=UTC), tick=False):
        month = spend.spent_many([entity.pk, neighbour.pk], now=timezone.now())
    assert month == {entity.pk: Decimal("0.000000000030"), neighbour.pk: Decimal("0.5")}


# --- The term ----------------------------------------------------------------------------------


def test_the_monthly_ceiling_is_read_from_the_manifest_even_when_the_entity_owns_its_budget_block():
    entity = looped(loop={"budget": {"maxUsdPerRun": 1}}, manifest=CEILING)
    assert entity.terms["loop"]["budget"] == {"maxUsdPerRun": "1", "maxUsdPerMonth": "10"}
    assert entity.provenance["loop.budget.maxUsdPerMonth"] == "manifest"
    assert spend.month_ceiling(entity) == Decimal(10)


def test_no_ceiling_is_the_engine_default():
    entity = looped()
    assert entity.terms["loop"]["budget"]["maxUsdPerMonth"] is None and spend.month_ceiling(entity) is None


def test_an_entity_writing_the_monthly_ceiling_is_refused_naming_the_key():
    with pytest.raises(TermsError) as refused:
        looped(loop={"budget": {"maxUsdPerMonth": 5}})
    assert "loop.budget.maxUsdPerMonth: brain-wide only: set it in constitution/MANIFEST.yaml" in str(refused.value)


@pytest.mark.parametrize("bad", ["ten dollars", -1, True])
def test_a_bad_monthly_ceiling_in_the_manifest_is_refused_naming_the_dotted_key(bad):
    with pytest.raises(TermsError) as refused:
        looped(manifest={"loop": {"budget": {"maxUsdPerMonth": bad}}})
    assert "constitution/MANIFEST.yaml: loop.budget.maxUsdPerMonth: must" in str(refused.value)


# --- The monthly ceiling at its boundary ---------------------------------------------------------


def test_the_monthly_ceiling_refuses_exactly_at_the_boundary_and_the_next_month_opens_again():
    entity = capped(ceiling="10")
    first = datetime(2026, 3, 2, 9, tzinfo=UTC)
    earlier = spent_cycle(entity, at=first, proposer="9.999999999999")
    # One quantum below the ceiling: it opens.
    with time_machine.travel(datetime(2026, 3, 20, tzinfo=UTC), tick=False):
        below = open_on_bad(entity, now=timezone.now())
        assert below.opened, below.reason
        machine.settle(below.cycle, Cycle.Status.SKIPPED, reason="test", now=timezone.now())
    # That cycle's check spent the last quantum: the month's spend is at the ceiling.
    rnd = Round.objects.create(cycle=earlier, number=2, status=Round.Status.CLOSED)
    replayed(rnd, slot=0, side="candidate", run_cost="0.000000000001", judge_cost="0", at=first)
    with time_machine.travel(datetime(2026, 3, 31, 23, 59, 59, tzinfo=UTC), tick=False):
        at = open_on_bad(entity, now=timezone.now())
        assert not at.opened
        assert at.reason == (
            "maxUsdPerMonth: the loop spent $10.00 on this entity this month, the brain's ceiling is $10.00 "
            "(loop.budget.maxUsdPerMonth); new cycles open again on Apr 1"
        )
        assert at.cycle.status == Cycle.Status.SKIPPED and not at.cycle.analysed
        # Analyze now is exempt from the frequency bounds, never from a spend ceiling.
        from evolution.loop.trigger import analyze_now

        assert not analyze_now(entity).opened
    with time_machine.travel(datetime(2026, 4, 1, tzinfo=UTC), tick=False):
        assert open_on_bad(entity, now=timezone.now()).opened


def test_the_batch_of_landings_meets_the_same_ceiling():
    from evolution.loop import opening

    capped_entity, free = capped("triage", ceiling="1"), looped("digest", loop=FREE, manifest={})
    now = timezone.now()
    spent_cycle(capped_entity, at=spend.month_of(now)[0], proposer="1")
    answers = opening.refusals_many([capped_entity, free], origin=Cycle.Origin.GRADE, now=now, holders={})
    assert answers[capped_entity.pk].startswith("maxUsdPerMonth: the loop spent $1.00")
    assert answers[free.pk] is None


# --- What it moved: loop_summary ---------------------------------------------------------------

EVOLVED = {
    "verdict": "validated",
    "comparator": "evolve",
    "n": 12,
    "perMetric": [
        {"metric": "accuracy", "role": "objective", "gain": "0.125", "spread": [0.05, 0.2], "confidence": 0.9},
    ],
}
COUNTED = {"verdict": "validated", "comparator": "count", "n": 5, "bad": 0, "tally": "5 of 5 graded runs, 0 bad"}
REGRESSED = {"verdict": "regressed", "comparator": "count", "n": 5, "bad": 3, "tally": "5 of 5 graded runs, 3 bad"}


def shipped(entity, *, at, status, record, proposer, revert=""):
    """A cycle whose round merged and whose watch settled on ``record``."""
    cycle = spent_cycle(entity, at=at, proposer=proposer, status=status, watch_verdict=record)
    Round.objects.create(
        cycle=cycle, number=1, status=Round.Status.MERGED, merge_sha="b" * 40, pr_number=cycle.pk, revert_outcome=revert
    )
    return cycle


@pytest.fixture
def person(alice):
    from rest_framework.test import APIClient

    from singularity.models import ApiToken

    _, key = ApiToken.issue(alice, "script", is_agent=False)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


@pytest.fixture
def march():
    """One entity's March: an evolve gain, a repair count, a reverted regression, a skip that bought nothing."""
    entity = looped(manifest=CEILING)
    day = datetime(2026, 3, 3, tzinfo=UTC)
    made = {
        "gain": shipped(entity, at=day, status="validated", record=EVOLVED, proposer="0.25"),
        "count": shipped(entity, at=day + timedelta(days=1), status="validated", record=COUNTED, proposer="0.5"),
        "regressed": shipped(
            entity, at=day + timedelta(days=2), status="regressed", record=REGRESSED, proposer="1", revert="merged"
        ),
        "nothing": spent_cycle(entity, at=day + timedelta(days=3), proposer="0.000000000001", status="skipped"),
    }
    Cycle.objects.create(  # a refusal row: a skipped settle that cost nothing and opened no analysis
        entity=entity,
        key="refused",
        origin="grade",
        phase=Cycle.Phase.SETTLED,
        status="skipped",
        reason="cooldown: rests",
        refusals=4,
        started_at=day + timedelta(days=4),
        completed_at=day + timedelta(days=4),
    )
    judged(make_run(entity), cost="0.03", reason=f"exempt:watch:{made['gain'].pk}", at=day + timedelta(hours=2))
    return entity, made


def test_loop_summary_counts_a_windows_settles_by_grade_and_carries_the_spend(person, march):
    entity, _ = march
    answer = person.get(
        "/api/loop/summary/",
        {
            "since": "2026-03-01T00:00:00Z",
            "until": "2026-04-01T00:00:00Z",
            "targetKind": "scenario",
            "targetId": entity.slug,
        },
    )
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["settled"] == 5 and body["refused"] == 4
    assert body["byGrade"] == {
        "improvement": 2,
        "regression": 1,
        "tradeoff": 0,
        "tie": 0,
        "inconclusive": 0,
        "ungraded": 2,
    }
    assert body["byStatus"] == {"validated": 2, "regressed": 1, "unvalidated": 0, "skipped": 2, "failed": 0}
    assert body["spentUsd"] == "1.780000000001"
    assert body["proposerUsd"] == "1.750000000001" and body["watchJudgeUsd"] == "0.03"
    assert body["spentByGradeUsd"]["improvement"] == "0.78"
    assert body["spentMeasuredNothingUsd"] == "0.000000000001"


def test_loop_summary_of_a_window_that_holds_nothing_counts_zero(person, march):
    body = person.get("/api/loop/summary/", {"since": "2026-05-01", "until": "2026-06-01"}).json()
    assert body["settled"] == 0 and body["spentUsd"] == "0.00" and body["targetKind"] is None


@pytest.mark.parametrize(
    ("params", "status", "named"),
    [
        ({"since": "last tuesday"}, 400, "since: 'last tuesday' is not an ISO 8601 instant"),
        ({"since": "2026-03-02", "until": "2026-03-01"}, 400, "until: 2026-03-01T00:00:00+00:00 is not after since"),
        ({"targetKind": "scenario"}, 400, "targetId: name both targetKind and targetId"),
        ({"targetKind": "scenario", "targetId": "nobody"}, 404, "scenario:nobody names no entity"),
        ({"since": "0001-01-01T00:00:00+05:00"}, 400, "since: '0001-01-01T00:00:00+05:00' is outside"),
    ],
)
def test_loop_summary_refuses_bad_input_naming_it(person, params, status, named):
    answer = person.get("/api/loop/summary/", params)
    assert answer.status_code == status
    assert answer.json()["error"] == ("invalid" if status == 400 else "not_found")
    assert answer.json()["detail"].startswith(named)


def test_loop_summary_is_in_the_schema(person):
    schema = person.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    operation = schema["paths"]["/api/loop/summary/"]["get"]
    assert operation["operationId"] == "loop_summary"
    assert {p["name"] for p in operation["parameters"]} >= {"since", "until", "targetKind", "targetId"}


# --- The fleet ---------------------------------------------------------------------------------


def spending_fleet(n: int, *, start: int = 0, at: datetime) -> None:
    for i in range(start, start + n):
        entity = looped(f"spender-{i:03d}", manifest={"loop": {"budget": {"maxUsdPerMonth": "5"}}})
        for day in range(3):
            cycle = shipped(entity, at=at + timedelta(days=day), status="validated", record=COUNTED, proposer="0.1")
            replayed(cycle.rounds.get(), slot=0, side="candidate", run_cost="0.01", judge_cost="0.001", at=at)


def test_the_fleet_shows_each_entitys_spend_this_month_beside_what_it_moved(web):
    now = datetime(2026, 3, 20, 12, tzinfo=UTC)
    entity = looped("triage", loop=FREE, manifest=CEILING)
    shipped(entity, at=now - timedelta(days=3), status="validated", record=EVOLVED, proposer="1.5")
    shipped(entity, at=now - timedelta(days=2), status="regressed", record=REGRESSED, proposer="0.25", revert="merged")
    shipped(entity, at=now - timedelta(days=40), status="validated", record=EVOLVED, proposer="100")  # February
    with time_machine.travel(now, tick=False):
        page = web.get("/evolution/").content.decode()
    row = page[page.index('id="entity-scenario-triage"') :]
    row = row[: row.index("</tr>")]
    assert ">$1.75</span>" in row and "of <span" in row and ">$10.00</span>" in row
    assert "1 kept · 1 regressed · 2 cycles" in row


def test_an_entity_at_its_monthly_ceiling_is_paused_on_the_fleet_until_the_month_turns(web):
    entity = looped("triage", loop=FREE, manifest=CEILING)
    spent_cycle(entity, at=datetime(2026, 3, 2, tzinfo=UTC), proposer="10")
    with time_machine.travel(datetime(2026, 3, 20, tzinfo=UTC), tick=False):
        (row,) = [r for r in fleet_rows() if r["entity"].pk == entity.pk]
    assert row["state"] == "paused"
    assert row["next"] == (
        "Monthly spend ceiling reached: the loop spent $10.00 on this entity this month, the brain's ceiling is "
        "$10.00 (loop.budget.maxUsdPerMonth); new cycles open again on Apr 1."
    )
    with time_machine.travel(datetime(2026, 4, 1, tzinfo=UTC), tick=False):
        (row,) = [r for r in fleet_rows() if r["entity"].pk == entity.pk]
    assert row["state"] != "paused" and row["month"]["spent_usd"] == 0


def fleet_rows():
    from evolution.reads import fleet

    return fleet.fleet_page().rows


def test_the_fleets_month_costs_the_same_queries_with_ten_times_the_spending_entities(web):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    at = datetime(2026, 3, 2, tzinfo=UTC)
    spending_fleet(3, at=at)
    with time_machine.travel(at + timedelta(days=10), tick=False):
        with CaptureQueriesContext(connection) as few:
            web.get("/evolution/", HTTP_HX_REQUEST="true")
        spending_fleet(30, start=3, at=at)
        with CaptureQueriesContext(connection) as many:
            response = web.get("/evolution/", HTTP_HX_REQUEST="true")
    assert len(many.captured_queries) == len(few.captured_queries)
    assert all(row["month"]["spent_usd"] == Decimal("0.333") for row in response.context["rows"])


@pytest.fixture
def web(client, alice):
    client.force_login(alice)
    return client


# --- The entity page -------------------------------------------------------------------------


def test_the_entity_page_shows_each_months_spend_against_what_it_moved(web, march):
    entity, made = march
    with time_machine.travel(datetime(2026, 3, 25, tzinfo=UTC), tick=False):
        html = web.get(f"/evolution/entities/scenario/{entity.slug}/cycles/").content.decode()
    section = html[html.index('id="entity-spend"') :]
    section = section[: section.index("</section>")]
    assert "This month the loop spent" in section and ">$1.78</span>" in section
    assert "of the brain's monthly ceiling of" in section and ">$10.00</span>" in section
    march_row = section[
        section.index('id="spend-2026-03"') : section.index("</tr>", section.index('id="spend-2026-03"'))
    ]
    assert f"cycle {made['gain'].pk}</a> · accuracy 0.125 in [0.05, 0.2] at 90%" in march_row
    assert f"cycle {made['count'].pk}</a> · 5 of 5 graded runs, 0 bad" in march_row
    assert f"cycle {made['regressed'].pk}</a> · Reverted" in march_row
    assert "on 1 cycle" in march_row  # the skip that measured nothing
    assert "<svg" in section and "Monthly ceiling" in section
    assert "maxUsdPerMonth:" not in section  # the refusal's row words are not shown; the page says it in words


def test_the_entity_page_says_when_the_ceiling_refuses_and_when_it_opens_again(web):
    entity = looped("triage", loop=FREE, manifest=CEILING)
    spent_cycle(entity, at=datetime(2026, 3, 2, tzinfo=UTC), proposer="10")
    with time_machine.travel(datetime(2026, 3, 20, tzinfo=UTC), tick=False):
        html = web.get("/evolution/entities/scenario/triage/cycles/").content.decode()
    assert 'id="spend-refused"' in html and "No new cycle opens until" in html


# --- One cycle ---------------------------------------------------------------------------------


def test_loop_get_cycle_and_the_cycle_page_carry_its_cost_by_part(person, web, march):
    _, made = march
    cycle = made["gain"]
    body = person.get(f"/api/loop/cycles/{cycle.pk}/").json()
    assert body["cost"] == {
        "totalUsd": "0.28",
        "proposerUsd": "0.25",
        "replaysUsd": "0.00",
        "checkJudgeUsd": "0.00",
        "watchJudgeUsd": "0.03",
    }
    html = web.get(f"/evolution/cycles/{cycle.pk}/").content.decode()
    stat = html[html.index('id="cycle-cost"') :]
    assert ">$0.28</span>" in stat[:400] and "judging the watch" in stat[:900]


def test_the_doctor_names_an_entity_at_its_monthly_ceiling():
    from grading.doctor import run_doctor

    entity = looped("triage", loop=FREE, manifest=CEILING)
    looped("digest", loop=FREE, manifest=CEILING)
    spent_cycle(entity, at=datetime(2026, 3, 2, tzinfo=UTC), proposer="10")
    with time_machine.travel(datetime(2026, 3, 20, tzinfo=UTC), tick=False):
        found = [f.line() for f in run_doctor(only=["Loop ceilings"]) if f.level != "pass"]
    assert len(found) == 1 and "scenario:triage: Monthly spend ceiling reached" in found[0]


def test_the_ceiling_is_read_for_a_whole_scope_in_four_queries_and_one_when_none_is_set(django_assert_num_queries):
    from grading.models import Entity

    at_it, below = capped("triage", ceiling="2.5"), capped("digest", ceiling="2.5")
    looped("free", loop=FREE)  # no ceiling: nothing summed for it
    spent_cycle(at_it, at=datetime(2026, 3, 2, tzinfo=UTC), proposer="2.5")
    spent_cycle(below, at=datetime(2026, 3, 2, tzinfo=UTC), proposer="2.499999999999")
    with time_machine.travel(datetime(2026, 3, 20, tzinfo=UTC), tick=False), django_assert_num_queries(4):
        refused = spend.month_refusals_in(Entity.objects.all(), now=timezone.now())
    assert list(refused) == [at_it.pk] and refused[at_it.pk].startswith("maxUsdPerMonth: the loop spent $2.50")
    with django_assert_num_queries(1):
        assert spend.month_refusals_in(Entity.objects.filter(slug="free"), now=timezone.now()) == {}


# --- Needs you ---------------------------------------------------------------------------------


def test_needs_you_lists_an_entity_at_its_monthly_ceiling_until_the_month_turns(web):
    from evolution.steering import needs_you

    entity = looped("triage", loop=FREE, manifest=CEILING)
    looped("digest", loop=FREE, manifest=CEILING)  # below its ceiling: nothing waits
    spent_cycle(entity, at=datetime(2026, 3, 2, tzinfo=UTC), proposer="10")
    with time_machine.travel(datetime(2026, 3, 20, tzinfo=UTC), tick=False):
        fleet_items = needs_you.items()
        own = needs_you.items(entity=entity)
        page = web.get("/evolution/needs-you/").content.decode()
    (item,) = fleet_items
    assert own == fleet_items
    assert item["gate"] == "budget" and item["targetId"] == "triage"
    assert item["until"] == datetime(2026, 4, 1, tzinfo=UTC)
    assert item["clause"].startswith("Monthly spend ceiling reached: the loop spent $10.00")
    assert item["next"].startswith("a person raises loop.budget.maxUsdPerMonth in constitution/MANIFEST.yaml")
    assert "Monthly spend ceiling reached" in page
    with time_machine.travel(datetime(2026, 4, 1, tzinfo=UTC), tick=False):
        assert needs_you.items() == []


def test_a_live_cycle_at_the_ceiling_asks_nobody_it_carries_on():
    from evolution.steering import needs_you

    entity = looped("triage", loop=FREE, manifest=CEILING)
    live = spent_cycle(entity, at=datetime(2026, 3, 2, tzinfo=UTC), proposer="10")
    Cycle.objects.filter(pk=live.pk).update(phase=Cycle.Phase.WATCHING, status="", claim=entity.pk)
    with time_machine.travel(datetime(2026, 3, 20, tzinfo=UTC), tick=False):
        assert [i["gate"] for i in needs_you.items()] == []


# --- End to end: the demo's check priced to the quantum ----------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_real_checked_cycle_costs_exactly_what_its_replays_and_their_grading_recorded(embedded, alice, monkeypatch):
    from tests.evolution.test_check_end_to_end import accept_first_card, held_steps

    started = held_steps(monkeypatch)
    cycle, rnd = accept_first_card(alice)
    for replay_id in started:
        machine.replay(replay_id)
    cycle.refresh_from_db()
    runs = list(Replay.objects.filter(round__cycle=cycle).values_list("execution_id", flat=True))
    assert len(runs) == 4 and Grade.objects.filter(execution_id__in=runs, status=Grade.Status.GRADED).count() == 4
    # The demo's runs and its computed grading are unpriced: price the rows the loop wrote, each a distinct
    # amount to the quantum, as a gateway's debit would have recorded them.
    from grading.models import Execution

    for n, run in enumerate(runs, start=1):
        Execution.objects.filter(pk=run).update(cost_usd=Decimal(n) * Decimal("0.010000000001"))
        Grade.objects.filter(execution_id=run).update(cost_usd=Decimal(n) * Q)
    from evolution.core.cycles import add_spend

    add_spend(cycle, Decimal("0.000000000007"))
    cost = spend.cost_of(cycle)
    assert cost == {
        "proposer_usd": cycle.spent_usd,
        "replays_usd": Decimal("0.100000000010"),
        "check_judge_usd": Decimal("0.000000000010"),
        "watch_judge_usd": Decimal(0),
        "total_usd": cycle.spent_usd + Decimal("0.100000000020"),
    }
    assert spend.spent_many([cycle.entity_id], now=timezone.now()) == {cycle.entity_id: cost["total_usd"]}


def test_the_month_turns_at_midnight_in_the_projects_time_zone(settings):
    settings.TIME_ZONE = "Europe/Paris"
    from django.utils import timezone as tz

    tz.deactivate()
    entity = capped("triage", ceiling="1")
    spent_cycle(entity, at=datetime(2026, 3, 31, 21, 30, tzinfo=UTC), proposer="1")  # 23:30 in Paris: March
    with time_machine.travel(datetime(2026, 3, 31, 21, 59, 59, tzinfo=UTC), tick=False):
        refused = open_on_bad(entity, now=tz.now())
        assert not refused.opened and refused.reason.endswith("new cycles open again on Apr 1")
    with time_machine.travel(datetime(2026, 3, 31, 22, 0, tzinfo=UTC), tick=False):  # midnight in Paris
        assert open_on_bad(entity, now=tz.now()).opened


def test_loop_status_carries_each_entitys_month_as_decimal_strings(person, march):
    entity, _ = march
    with time_machine.travel(datetime(2026, 3, 25, tzinfo=UTC), tick=False):
        body = person.get("/api/loop/status/", {"targetKind": "scenario", "targetId": entity.slug}).json()
    (row,) = body["entities"]
    assert row["month"] == {
        "spentUsd": "1.780000000001",
        "ceilingUsd": "10.00",
        "validated": 2,
        "regressed": 1,
        "cycles": 4,
    }


# --- Setting the ceiling -----------------------------------------------------------------------


def test_loop_set_writes_the_monthly_ceiling_in_the_manifest_and_refuses_it_on_an_entity(tmp_path, settings):
    from evolution.steering import settings as sw
    from tests.evolution.settings_helpers import MANIFEST, settings_brain

    sb = settings_brain(tmp_path, settings)
    sw.loop_set(None, "loop.budget.maxUsdPerMonth", value="25", actor="alice")
    assert "maxUsdPerMonth" in sb.show(MANIFEST)
    assert sb.digest.terms["loop"]["budget"]["maxUsdPerMonth"] == "25"
    assert sb.pricing.terms["loop"]["budget"]["maxUsdPerMonth"] == "25"
    with pytest.raises(sw.SettingsRefusal) as refused:
        sw.loop_set(sb.digest, "loop.budget.maxUsdPerMonth", value="5", actor="alice")
    assert refused.value.code == "refused" and "loop.budget.maxUsdPerMonth" in refused.value.detail
