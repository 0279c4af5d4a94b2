"""The fleet's waits read without every entity (issue 18): the same answer as reading them all, at a fixed cost.

The fleet, loop_status, needs-you and its count read only what stands on some entity — live cycles, pending
cards, standing windows, load errors, the breaker's settles, holds, lock groups. Each test here builds a
random fleet of every kind of wait and compares with the full recomputation (every entity read whole, as the
reads did before), then grows the idle part of the fleet and checks that nothing more is read.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from evolution.models import Cycle, Round, Supervision
from evolution.reads import fleet
from evolution.steering import autonomy, cadence, groups, needs_you, supervision
from grading.models import Entity
from hitl.models import Card
from tests.evolution.loop_helpers import looped
from tests.evolution.page_helpers import in_loop, make_card, make_cycle, make_round

pytestmark = pytest.mark.django_db

GROUPED = {"loop": {"groups": {"audience": {"repair": "wait"}}, "group": ["audience"]}}


def every_wait(rng: random.Random, prefix: str, n: int) -> None:
    """``n`` entities, each given at random one of: nothing, a decide card, a PR in a human merge wait, a
    regressed pair of settles (the breaker), a hold, a load error, a standing window, a failure, a lock group
    (some with a member's change holding it)."""
    now = timezone.now()
    for i in range(n):
        slug = f"{prefix}-{i:02d}"
        what = rng.choice(
            ["idle", "idle", "decide", "merge", "breaker", "hold", "config", "window", "failure", "group"]
        )
        if what == "group":
            entity = looped(slug, manifest=GROUPED)
            if rng.random() < 0.5:
                cycle = make_cycle(entity, phase=Cycle.Phase.WATCHING)
                make_round(cycle, status=Round.Status.MERGED, merge_sha="m" * 40, pr_number=300 + i)
            continue
        entity = in_loop(slug, load_error="x.scenario.md: bad" if what == "config" else "")
        if what == "decide":
            cycle = make_cycle(entity, phase=Cycle.Phase.DECIDING)
            make_card(make_round(cycle, status=Round.Status.PROPOSED))
        elif what == "merge":
            cycle = make_cycle(entity, phase=Cycle.Phase.MERGE_WAIT, applied_at=now - timedelta(hours=1),
                               merge_deadline=now + timedelta(days=3))  # fmt: skip
            make_round(cycle, status=Round.Status.APPLIED, pr_number=100 + i, merge_gate="human")
        elif what == "breaker":
            for days in (3, 2):
                cycle = make_cycle(entity, phase=Cycle.Phase.SETTLED, status=Cycle.Status.REGRESSED,
                                   at=now - timedelta(days=days), merged_at=now - timedelta(days=days))  # fmt: skip
                make_round(cycle, status=Round.Status.MERGED, merge_sha="m" * 40, pr_number=200 + i + days)
        elif what == "hold":
            Supervision.objects.create(kind=Supervision.Kind.HOLD, entity=entity, actor="alice", reason="wait")
        elif what == "window":
            cadence.record_window(entity, {"ready": False, "reason": "r", "awaitingPerson": {"what": f"score {i}"}})
        elif what == "failure":
            make_cycle(entity, phase=Cycle.Phase.SETTLED, status=Cycle.Status.FAILED, reason="broke")


def idle(prefix: str, n: int) -> None:
    for i in range(n):
        in_loop(f"{prefix}-{i:03d}")


def whole_fleet() -> list[Entity]:
    return list(Entity.objects.filter(loop_enabled=True, present=True).select_related("waiting_window").order_by("pk"))


def recomputed_items() -> list[dict]:
    """needs-you over every entity read whole (what the list read before issue 18)."""
    return needs_you.public(needs_you.collect(timezone.now(), entities=whole_fleet(), whole=True))


def recomputed_order() -> list[str]:
    """The fleet's attention order from every entity's state computed whole (``state_of`` over all of them)."""
    entities = whole_fleet()
    now = timezone.now()
    live: dict[int, list[Cycle]] = {}
    for cycle in Cycle.objects.exclude(phase=Cycle.Phase.SETTLED).order_by("started_at", "id"):
        live.setdefault(cycle.entity_id, []).append(cycle)
    breaker, held = needs_you.pauses(entities)
    found = needs_you.collect(now, entities=entities, whole=False)
    mine: dict[int, list[dict]] = {}
    for item in found:
        mine.setdefault(item["_entity"], []).append(item)
    grouped = groups.holders_many([e for e in entities if e.pk not in live])

    def key(entity: Entity) -> tuple:
        needs = mine.get(entity.pk, [])
        state, _, _ = fleet.state_of(
            entity, live.get(entity.pk, []), needs, None, now, {**held, **breaker}.get(entity.pk, ""),
            grouped.get(entity.pk, ""),
        )  # fmt: skip
        return (*fleet.attention(state, needs), (entity.name or entity.slug).lower(), entity.slug)

    return [e.slug for e in sorted(entities, key=key)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_needs_you_and_the_fleets_order_are_what_reading_every_entity_gives(seed):
    every_wait(random.Random(seed), "w", 24)
    assert needs_you.items() == recomputed_items()
    order = recomputed_order()
    pages = [fleet.fleet_page(per_page=5, page=p) for p in range(1, 6)]  # 24 entities: five pages
    assert [row["targetId"] for page in pages for row in page.rows] == order
    scope = Entity.objects.filter(loop_enabled=True, present=True)
    entities = whole_fleet()
    assert supervision.holds_in(scope) == supervision.holds_many(entities)
    assert autonomy.pauses_of(autonomy.settles_in(scope)) == autonomy.paused_many(entities)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_page_of_the_waits_is_that_slice_of_the_list_built_alone(seed):
    """The needs-you page builds only the waits it shows: the same items, count and order as the whole list, with
    stuck analyses (every live cycle waits when no worker runs) among cards, merges, failures and windows."""
    every_wait(random.Random(seed), "w", 24)
    for i in range(6):  # analyses nobody started: stuck once a few ticks have passed
        make_round(make_cycle(in_loop(f"stuck-{i}"), phase=Cycle.Phase.ANALYSING), status=Round.Status.ANALYSING,
                   brief={})  # fmt: skip
    with time_machine.travel(timezone.now() + timedelta(minutes=30), tick=False):
        whole = needs_you.items()
        assert any(item["gate"] == "stuck" for item in whole) and len(whole) > 10
        for start, stop in ((0, 5), (3, 11), (0, None), (len(whole) - 2, len(whole) + 5), (len(whole) + 1, None)):
            assert needs_you.page(start=start, stop=stop) == (len(whole), whole[start:stop])


def test_a_group_hold_reaches_its_members_through_the_fleets_read():
    member = looped("member", manifest=GROUPED)
    loner = in_loop("loner")
    Supervision.objects.create(kind=Supervision.Kind.HOLD, group="audience", actor="alice", reason="campaign")
    scope = Entity.objects.filter(loop_enabled=True, present=True)
    assert supervision.holds_in(scope) == supervision.holds_many([member, loner]) != {}
    assert set(supervision.holds_in(scope)) == {member.pk}


def test_a_re_grade_of_the_facts_shows_at_the_next_read():
    """Nothing is kept: a card answered, a hold released, a window ended show at once."""
    every_wait(random.Random(7), "w", 20)
    Card.objects.filter(status=Card.Status.PENDING).update(status=Card.Status.ANSWERED)
    Supervision.objects.filter(kind=Supervision.Kind.HOLD).delete()
    cadence.WaitingWindow.objects.update(ended_at=timezone.now())
    assert needs_you.items() == recomputed_items()
    assert [r["targetId"] for r in fleet.fleet_page(per_page=100).rows] == recomputed_order()


def test_the_waits_read_only_the_entities_that_can_raise_one():
    every_wait(random.Random(4), "w", 20)
    scope = Entity.objects.filter(loop_enabled=True, present=True)
    before = {e.pk for e in needs_you.fleet_collect(timezone.now(), scope).read}
    idle("quiet", 40)
    after = {e.pk for e in needs_you.fleet_collect(timezone.now(), scope).read}
    assert before == after and len(after) < 20


@pytest.fixture
def web(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


@pytest.mark.parametrize(
    "path,htmx",
    [
        ("/evolution/", False),
        ("/evolution/", True),
        ("/evolution/needs-you/", False),
        ("/evolution/needs-you/count/", True),
        ("/api/loop/status/", False),
    ],
)
def test_the_fleet_wide_pages_cost_the_same_queries_with_ten_times_the_idle_entities(web, path, htmx):
    every_wait(random.Random(5), "w", 12)
    idle("quiet", 5)
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    web.get(path, **headers)
    with CaptureQueriesContext(connection) as few:
        assert web.get(path, **headers).status_code == 200
    idle("zz-more", 60)  # after the others by id: loop_status's first page (50) still holds every wait's entity
    with CaptureQueriesContext(connection) as many:
        assert web.get(path, **headers).status_code == 200
    assert len(many.captured_queries) == len(few.captured_queries) <= 20


def test_the_needs_you_page_lists_fifty_waits_a_page_oldest_first(web):
    for i in range(55):
        in_loop(f"faulty-{i:02d}", load_error=f"x{i}.scenario.md: bad")
    first = web.get("/evolution/needs-you/").content.decode()
    assert first.count('class="needs-you-item"') == 50 and "Page 1 of 2" in first and "55 need you" in first
    second = web.get("/evolution/needs-you/?page=2").content.decode()
    assert second.count('class="needs-you-item"') == 5 and "← Previous" in second
    assert web.get("/evolution/needs-you/?page=banana").status_code == 200


@pytest.mark.parametrize(
    "path,htmx,built",
    [
        ("/evolution/", False, 3),  # the session, its user, the navigation's pending cards
        ("/evolution/", True, 2),
        ("/evolution/needs-you/", False, 3),
        ("/api/loop/status/", False, 3),
    ],
)
def test_the_fleet_wide_pages_build_their_statements_once_a_process(web, path, htmx, built, monkeypatch):
    """Issue 37: building and compiling a statement cost the fleet's pages more CPU than the database spent on
    it. A page asked again runs the same statements (as many, the same text), and the ORM builds only the few
    whose text follows what they read (the session's, the navigation's, a page's own rows); the rest run as
    compiled the first time (``singularity.written``)."""
    from django.db.models.sql.compiler import SQLCompiler

    every_wait(random.Random(7), "c", 12)
    idle("calm", 5)
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    with CaptureQueriesContext(connection) as first:
        assert web.get(path, **headers).status_code == 200
    compiled = SQLCompiler.execute_sql
    runs: list[str] = []

    def counted(self, *args, **kwargs):
        runs.append(self.query.model.__name__ if self.query.model else "?")
        return compiled(self, *args, **kwargs)

    monkeypatch.setattr(SQLCompiler, "execute_sql", counted)
    with CaptureQueriesContext(connection) as again:
        assert web.get(path, **headers).status_code == 200
    assert len(again.captured_queries) == len(first.captured_queries)
    assert len(runs) <= built, runs
