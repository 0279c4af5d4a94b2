"""The entity page's Cycles section reads only what it shows (issue 18): its newest cycles as loop_history's
rows, its months of spend, its lessons — the same answers as the reads whole, after random histories, in a
bounded number of statements.

Run on both databases: ``DATABASE_URL=postgres://… pytest tests/evolution/test_entity_cycles_reads.py``.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from evolution.core import spend
from evolution.models import Cycle, Round
from evolution.reads import economics, history
from grading.models import Entity
from tests.evolution.page_helpers import in_loop, make_cycle, make_lesson, make_round
from tests.evolution.test_economics import judged, replayed
from tests.grading.grading_helpers import make_run

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 20, 12, tzinfo=UTC)
HX = {"HTTP_HX_REQUEST": "true"}
#: The statements the Cycles section sends (the session and the user included), whatever the history holds.
STATEMENTS = 19  # the people's pull requests the pre-merge check answered (issue 35): one read


#: An objective's entry of a comparator's record: its gain and interval (what ``moved_words`` says).
OBJECTIVE = {"role": "objective", "metric": "x", "gain": -0.2, "spread": [-0.3, -0.1], "confidence": 0.9}


def money(rng: random.Random) -> str:
    return str(Decimal(rng.randrange(0, 10**6)) / Decimal(10**12) + Decimal(rng.randrange(0, 3)))


def check_record(rng: random.Random) -> dict | None:
    """A pre-merge check's record of one of the shapes ``outcomes`` reads (or none)."""
    return rng.choice(
        [
            None,
            {"verdict": "regressed", "pairs": [{}] * rng.randrange(1, 4)},
            {"verdict": "regressed", "perMetric": [{"role": "objective", "gain": 0.3, "band": 0.1}]},
            {"verdict": "validated", "judged": rng.randrange(0, 3)},
            {"verdict": "validated", "inconclusive": True},
        ]
    )


def watch_record(rng: random.Random) -> dict | None:
    return rng.choice(
        [
            None,
            {"verdict": "validated", "comparator": "count", "n": rng.randrange(0, 6), "tally": "5 of 5"},
            {"verdict": "regressed", "comparator": "compare", "perMetric": [OBJECTIVE]},
            {"verdict": "unvalidated", "comparator": "compare", "perMetric": []},
        ]
    )


def history_of(rng: random.Random, entity: Entity) -> None:
    """Cycles over the last four months in every phase and end, with rounds, PRs, merges, checks and lessons."""
    for n in range(rng.randrange(8, 16)):
        phase = rng.choice([Cycle.Phase.SETTLED] * 4 + [Cycle.Phase.WATCHING, Cycle.Phase.REVERTING])
        status = rng.choice(Cycle.Status.values) if phase == Cycle.Phase.SETTLED else ""
        if phase == Cycle.Phase.REVERTING:
            status = Cycle.Status.REGRESSED
        at = NOW - timedelta(days=rng.randrange(0, 120), minutes=n)
        cycle = make_cycle(
            entity,
            phase=phase,
            status=status,
            at=at,
            reason=rng.choice(["", "the window was bad", "alice skipped it"]),
            spent_usd=Decimal(rng.randrange(0, 10**6)) / Decimal(10**9),
            watch_verdict=watch_record(rng),
            watch_window={"runIds": ["a"] * rng.randrange(0, 4)},
            confounded_by=rng.choice([None, None, {"cycle": 1}]),
            claim=False,
        )
        for number in range(1, rng.randrange(1, 4)):
            merged = rng.random() < 0.5
            rnd = make_round(
                cycle,
                number,
                status=rng.choice([Round.Status.MERGED, Round.Status.CLOSED, Round.Status.APPLIED]),
                decided_by=rng.choice(["", "alice", "loop:autonomy"]),
                pr_number=rng.choice([None, 100 + n * 10 + number]),
                pr_url=rng.choice(["", f"http://forge/pulls/{n}"]),
                merge_sha="m" * 40 if merged else "",
                check_verdict=check_record(rng),
                check_run_ids=["r"] * rng.randrange(0, 3),
                revert_outcome=rng.choice(["", "merged", "closed"]),
            )
            if rng.random() < 0.3:
                rejection = rng.choice(["", "human", "timeout"])
                make_lesson(rnd, outcome=status or Cycle.Status.SKIPPED, rejection=rejection, note="too risky",
                            helpful=rng.randrange(0, 3))  # fmt: skip
            for slot in range(rng.randrange(0, 2)):
                replayed(rnd, slot=slot, side="candidate", run_cost=money(rng), judge_cost=money(rng), at=at)
        if rng.random() < 0.5:
            judged(make_run(entity), cost=money(rng), reason=f"exempt:watch:{cycle.pk}", at=at + timedelta(hours=1))
    # A change that shipped and was neither kept nor reverted: whether it measured anything is read off its records.
    shipped = make_cycle(entity, phase=Cycle.Phase.SETTLED, status=Cycle.Status.UNVALIDATED, at=NOW - timedelta(days=1),
                         watch_verdict=watch_record(rng), confounded_by=rng.choice([None, {"cycle": 1}]), claim=False)  # fmt: skip
    rnd = make_round(shipped, status=Round.Status.MERGED, merge_sha="m" * 40, check_verdict=check_record(rng),
                     decided_by="alice")  # fmt: skip
    make_lesson(rnd, outcome=Cycle.Status.UNVALIDATED, rejection="human", note="not now")


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_newest_cycles_are_loop_historys_rows_read_in_three_statements(seed):
    rng = random.Random(seed)
    entity, neighbour = in_loop("digest"), in_loop("other")
    history_of(rng, entity)
    history_of(rng, neighbour)
    for limit in (2, 20):
        with CaptureQueriesContext(connection) as read:
            rows = history.recent_cycles(entity, limit=limit)
        assert len(read.captured_queries) == 3  # the cycles, their rounds, their lessons: no field read late
        assert rows == history.history("scenario", "digest", limit=limit)["cycles"]
    assert any(row["grade"] for row in rows) and any(row["pr"] for row in rows)  # the history holds some


def months_read_whole(entity: Entity, now: datetime) -> list[economics.Month]:
    """``entity_months``'s months built from the entity's cycles read whole, each one's cost read alone."""
    starts = economics._months_back(now, economics.MONTHS)
    by_start = {start: economics.Month(start) for start in starts}
    cycles = spend.opened_in(starts[-1], spend.month_of(now)[1]).filter(entity=entity).order_by("started_at", "id")
    for cycle in cycles:
        for name, amount in spend.cost_of(cycle).items():
            setattr(cycle, name, amount)
        by_start[spend.month_of(cycle.started_at)[0]].add(economics._line(cycle))
    return [by_start[start] for start in starts]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_months_of_spend_are_those_of_the_cycles_read_whole_in_two_statements(seed):
    rng = random.Random(seed)
    entity, neighbour = in_loop("digest"), in_loop("other")
    history_of(rng, entity)
    history_of(rng, neighbour)
    with CaptureQueriesContext(connection) as read:
        months = economics.entity_months(entity, now=NOW)["months"]
    assert len(read.captured_queries) == 2  # the cycles with their cost, their rounds: no field read late
    assert months == months_read_whole(entity, NOW)
    assert sum(m.cycles for m in months) and sum(m.parts["replays_usd"] for m in months)  # the history holds some
    assert any(line["moved"] and line["grade"] for m in months for line in m.validated + m.regressed)


@pytest.fixture
def web(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


def test_the_cycles_section_shows_what_the_reads_whole_show_in_a_bounded_number_of_statements(web):
    """The section's HTML is the same as with its cycles, lessons and months read whole; the loop's row, the
    cycles, the lessons and the spend cost at most ``STATEMENTS`` statements, whatever the history holds."""
    from django.template.loader import render_to_string

    from evolution.models import Lesson
    from evolution.views import pages

    entity = in_loop("digest")
    history_of(random.Random(5), entity)
    history_of(random.Random(6), in_loop("other"))
    path = "/evolution/entities/scenario/digest/cycles/"
    with time_machine.travel(NOW, tick=False):
        with CaptureQueriesContext(connection) as read:
            fragment = web.get(path, **HX).content.decode()
        context = pages.entity_cycles_context(entity)
        lessons = Lesson.objects.filter(entity=entity).select_related("round", "cycle").order_by("-created_at", "-id")
        whole = {
            **context,
            "cycles": history.history("scenario", "digest", limit=pages.ENTITY_CYCLES)["cycles"],
            "lessons": list(lessons[: pages.ENTITY_LESSONS]),
        }
        shown = render_to_string("evolution/_entity_cycles.html", context)
        assert shown == render_to_string("evolution/_entity_cycles.html", whole)
    assert len(read.captured_queries) <= STATEMENTS, "\n".join(q["sql"][:120] for q in read.captured_queries)
    assert context["cycles"] and context["lessons"]  # the history holds some
    for row in context["cycles"]:
        assert f'id="cycle-{row["id"]}"' in fragment
    for lesson in context["lessons"]:
        assert f'id="lesson-{lesson.pk}"' in fragment and f"· r{lesson.round.number}</a>" in fragment
