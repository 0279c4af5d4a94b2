"""Where the loop waits for a person: the one list over stored facts, its page, the navigation's count, loop_status
and the daily digest (seed 003 "Where the loop waits for a person"; R21.1-R21.3, R21.12).

Every state is built from real rows (cycles, rounds, cards, supervision rows,
waiting windows) the way the loop's own modules leave them.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from evolution.models import Cycle, Idea, Round, Supervision
from evolution.reads import fleet
from evolution.steering import cadence, needs_you
from hitl.models import Card, Notice
from singularity.models import ApiToken
from tests.evolution.page_helpers import in_loop, make_card, make_cycle, make_round

pytestmark = pytest.mark.django_db


@pytest.fixture
def web(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


def gates_of(found: list[dict]) -> list[str]:
    return sorted(item["gate"] for item in found)


def deciding(slug: str = "digest", *, kind: str = Card.Kind.DECIDE, **card) -> tuple[Cycle, Round, Card]:
    entity = in_loop(slug)
    cycle = make_cycle(entity, phase=Cycle.Phase.DECIDING, claim=False)
    rnd = make_round(cycle, status=Round.Status.PROPOSED if kind == Card.Kind.DECIDE else Round.Status.FAILED)
    return cycle, rnd, make_card(rnd, kind=kind, **card)


def merge_waiting(slug: str = "merging", *, gate: str = "human") -> Cycle:
    now = timezone.now()
    cycle = make_cycle(in_loop(slug), phase=Cycle.Phase.MERGE_WAIT, applied_at=now - timedelta(hours=1),
                       merge_deadline=now + timedelta(days=14))  # fmt: skip
    make_round(cycle, status=Round.Status.APPLIED, decided_by="alice", pr_number=7,
               pr_url="http://testserver/evolution/pulls/7/", merge_gate=gate)  # fmt: skip
    return cycle


def reverting(slug: str = "reverting", *, gate: str = "human", outcome: str = "") -> Cycle:
    now = timezone.now()
    cycle = make_cycle(in_loop(slug), phase=Cycle.Phase.REVERTING, status=Cycle.Status.REGRESSED)
    make_round(cycle, status=Round.Status.MERGED, merge_sha="m" * 40, pr_number=8, revert_pr_number=9,
               revert_opened_at=now - timedelta(hours=2), revert_deadline=now + timedelta(days=14),
               revert_merge_gate=gate, revert_outcome=outcome)  # fmt: skip
    return cycle


def regressed_twice(slug: str = "broken") -> object:
    """An entity the breaker paused: two regressed settles of shipped changes in a row."""
    entity = in_loop(slug)
    now = timezone.now()
    for days in (3, 2):
        cycle = make_cycle(entity, phase=Cycle.Phase.SETTLED, status=Cycle.Status.REGRESSED,
                           at=now - timedelta(days=days), merged_at=now - timedelta(days=days))  # fmt: skip
        make_round(cycle, status=Round.Status.MERGED, merge_sha="m" * 40, pr_number=100 + days)
    return entity


# --- Each gate, from its rows ----------------------------------------------------------


def test_a_pending_decide_card_is_a_decide_item_until_its_card_closes() -> None:
    cycle, rnd, card = deciding()
    [item] = needs_you.items()
    assert item["gate"] == "decide" and item["cycleId"] == cycle.pk and item["round"] == 1
    assert item["cardId"] == str(card.pk) and item["card"]["url"].endswith(card.get_absolute_url())
    assert item["since"] == card.created_at and item["until"] == card.expires_at
    assert item["targetKind"] == "scenario" and item["targetId"] == "digest"
    assert item["next"].startswith(f"a person answers the decide card of cycle {cycle.pk} · r1")
    Card.objects.filter(pk=card.pk).update(status=Card.Status.ANSWERED)
    assert needs_you.items() == []


def test_a_card_past_its_deadline_no_longer_waits_even_before_the_expiry_task_closes_it() -> None:
    _, _, card = deciding()
    with time_machine.travel(card.expires_at + timedelta(minutes=1)):
        assert needs_you.items() == []


def test_a_pending_retry_card_is_a_retry_item() -> None:
    cycle, _, _ = deciding(kind=Card.Kind.RETRY)
    [item] = needs_you.items()
    assert item["gate"] == "retry" and "Retry / Skip" in item["next"] and item["cycleId"] == cycle.pk


def test_approval_cards_of_the_loops_producers_are_grant_items_naming_their_entity() -> None:
    entity = in_loop("held")
    later = timezone.now() + timedelta(hours=72)
    supervise = Card.objects.create(producer="loop-supervise", kind=Card.Kind.GRANT, key="s:1", subject="held",
                                    title="Approve: re-arm scenario:held", expires_at=later,
                                    payload={"op": "rearm", "entity": entity.pk, "cycle": None})  # fmt: skip
    idea_card = Card.objects.create(producer="loop-idea", kind=Card.Kind.GRANT, key="i:1", subject="held",
                                    title="Idea for Held: let it start a cycle?", expires_at=later)  # fmt: skip
    Idea.objects.create(entity=entity, text="ask for the date first", author="bot", approved=False, card=idea_card)
    # A rating card is not the loop's wait.
    Card.objects.create(producer="grading", kind=Card.Kind.RATING, key="r:1", subject="run", title="Rate this run",
                        expires_at=later)  # fmt: skip
    found = needs_you.items()
    assert [(i["gate"], i["targetId"], i["cardId"]) for i in found] == [
        ("grant", "held", str(supervise.pk)),
        ("grant", "held", str(idea_card.pk)),
    ]
    assert found[0]["next"].startswith("a person approves or declines “Approve: re-arm scenario:held” in the inbox")


def test_a_grant_card_naming_no_entity_is_still_listed_for_the_fleet() -> None:
    Card.objects.create(producer="loop-settings", kind=Card.Kind.WIDEN, key="w:1", subject="MANIFEST",
                        title="Widen the manifest's autonomy", expires_at=timezone.now() + timedelta(hours=1))  # fmt: skip
    [item] = needs_you.items()
    assert item["gate"] == "grant" and item["targetKind"] is None


def test_a_pr_under_a_human_merge_gate_is_a_merge_item_until_its_deadline() -> None:
    cycle = merge_waiting()
    [item] = needs_you.items()
    assert item["gate"] == "merge" and item["pr"] == {"number": 7, "url": "http://testserver/evolution/pulls/7/"}
    assert item["since"] == cycle.applied_at and item["until"] == cycle.merge_deadline
    assert item["url"] == item["pr"]["url"] and item["next"].startswith("a person merges or closes PR #7")
    with time_machine.travel(cycle.merge_deadline + timedelta(seconds=1)):
        assert needs_you.items() == []


def test_an_armed_auto_merge_waits_on_nobody() -> None:
    merge_waiting(gate="auto")
    assert needs_you.items() == []


def test_a_revert_followed_under_a_human_merge_is_a_revert_item() -> None:
    cycle = reverting()
    [item] = needs_you.items()
    rnd = cycle.rounds.get()
    assert item["gate"] == "revert" and item["pr"]["number"] == 9
    assert (item["since"], item["until"]) == (rnd.revert_opened_at, rnd.revert_deadline)
    Round.objects.filter(pk=rnd.pk).update(revert_outcome="merged")
    assert needs_you.items() == []


def test_an_auto_merged_revert_waits_on_nobody() -> None:
    reverting(gate="auto")
    assert needs_you.items() == []


def test_the_breakers_pause_is_a_rearm_item_until_a_rearm() -> None:
    entity = regressed_twice()
    [item] = needs_you.items()
    assert item["gate"] == "rearm" and item["targetId"] == "broken" and "2 regressed settles" in item["clause"]
    assert item["until"] is None and "re-arms" in item["next"]
    Supervision.objects.create(kind=Supervision.Kind.REARM, entity=entity, actor="alice", reason="read them")
    assert needs_you.items() == []


def test_a_failed_cycle_waits_until_it_is_dismissed() -> None:
    entity = in_loop()
    failed = make_cycle(entity, phase=Cycle.Phase.SETTLED, status=Cycle.Status.FAILED, reason="the proposer broke")
    [item] = needs_you.items()
    assert item["gate"] == "failure" and item["cycleId"] == failed.pk and item["clause"] == "the proposer broke"
    assert item["url"].endswith(f"/evolution/go/cycle:{failed.pk}/")
    Supervision.objects.create(kind=Supervision.Kind.DISMISS, entity=entity, cycle=failed, actor="alice", reason="ok")
    assert needs_you.items() == []


def test_an_entity_whose_definition_does_not_load_is_a_config_item() -> None:
    in_loop("faulty", load_error="features/faulty/faulty.scenario.md: loop.trigger.every: must be above 0")
    [item] = needs_you.items()
    assert item["gate"] == "config" and "must be above 0" in item["next"]


def test_a_healthy_fleet_under_full_autonomy_needs_nobody() -> None:
    entity = in_loop("auto", loop={"autonomy": {"decide": "auto", "merge": "auto"}})
    make_cycle(entity, phase=Cycle.Phase.WATCHING)
    merge_waiting("armed", gate="auto")
    assert needs_you.items() == [] and needs_you.count() == 0


def test_every_gate_together_oldest_first_in_a_fixed_number_of_queries(django_assert_max_num_queries) -> None:
    def everything(prefix: str) -> None:
        deciding(f"{prefix}-d")
        merge_waiting(f"{prefix}-m")
        reverting(f"{prefix}-r")
        regressed_twice(f"{prefix}-b")
        entity = in_loop(f"{prefix}-w")
        cadence.record_window(entity, {"ready": False, "reason": "r", "awaitingPerson": {"what": "score PR #1"}})
        make_cycle(in_loop(f"{prefix}-f"), phase=Cycle.Phase.SETTLED, status=Cycle.Status.FAILED)

    everything("a")
    with django_assert_max_num_queries(12) as few:
        found = needs_you.items()
    assert gates_of(found) == ["decide", "failure", "merge", "rearm", "revert", "window"]
    everything("b")
    with django_assert_max_num_queries(len(few.captured_queries)):
        found = needs_you.items()
    assert len(found) == 12
    since = [i["since"] for i in found if i["since"] is not None]
    assert since == sorted(since)
    assert all(i["next"] and i["url"] for i in found)


# --- loop_status, the API, the page, the navigation -------------------------------------


def test_loop_status_carries_the_same_items_as_the_list() -> None:
    cycle, _, card = deciding()
    merge_waiting()
    regressed_twice()
    answer = fleet.loop_status()
    assert answer["needsYou"] == len(needs_you.items()) == 3
    assert gates_of(answer["needsYouItems"]) == ["decide", "merge", "rearm"]
    rows = {row["targetId"]: row for row in answer["entities"]}
    assert [i["gate"] for i in rows["broken"]["needsYou"]] == ["rearm"] and rows["broken"]["state"] == "paused"
    one = fleet.loop_status(cycle.entity)
    assert one["needsYou"] == 1 and [i["cardId"] for i in one["entities"][0]["needsYou"]] == [str(card.pk)]


def test_the_api_answers_needs_you_with_who_acts_and_where(alice) -> None:
    deciding()
    regressed_twice()
    _, key = ApiToken.issue(alice, "bot", is_agent=True)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    body = api.get("/api/loop/status/").json()
    assert body["needsYou"] == 2 and len(body["needsYouItems"]) == 2
    rearm = next(i for i in body["needsYouItems"] if i["gate"] == "rearm")
    assert rearm["cycleId"] is None and rearm["targetId"] == "broken" and rearm["next"] and rearm["url"]
    one = api.get("/api/loop/status/", {"targetKind": "scenario", "targetId": "broken"}).json()
    assert [i["gate"] for i in one["entities"][0]["needsYou"]] == ["rearm"]


def test_the_page_lists_each_wait_with_who_acts_and_where(web) -> None:
    cycle, _, card = deciding()
    merge_waiting()
    html = web.get("/evolution/needs-you/").content.decode()
    assert "2 need you" in html
    assert html.count('class="needs-you-item"') == 2
    assert f"A person answers the decide card of cycle {cycle.pk} · r1" in html
    assert card.get_absolute_url() in html and "PR #7" in html


def test_the_page_says_when_nothing_needs_you(web) -> None:
    html = web.get("/evolution/needs-you/").content.decode()
    assert 'id="nothing-needs-you"' in html


def test_the_navigation_loads_the_count_after_the_page(web, django_assert_max_num_queries) -> None:
    html = web.get("/evolution/needs-you/").content.decode()
    assert 'hx-get="/evolution/needs-you/count/"' in html and 'href="/evolution/needs-you/"' in html
    assert web.get("/evolution/needs-you/count/").content.decode().strip().endswith(">Needs you</span>")
    deciding()
    merge_waiting()
    reverting()
    count = web.get("/evolution/needs-you/count/").content.decode()
    assert ">3 need you</span>" in count and 'hx-trigger="every 60s"' in count


def test_the_count_needs_a_signed_in_person(client: Client) -> None:
    assert client.get("/evolution/needs-you/count/").status_code == 302


def test_the_fleet_lists_window_items_beside_cycle_gates(web) -> None:
    entity = in_loop("waiting")
    cadence.record_window(entity, {"ready": False, "reason": "r", "awaitingPerson": {"what": "score PR #16"}})
    deciding()
    html = web.get("/evolution/").content.decode()
    assert "waiting on you: score PR #16" in html and 'href="/evolution/needs-you/"' in html


# --- The daily digest -------------------------------------------------------------------


def test_the_digest_lists_every_wait_in_one_notice() -> None:
    cycle, _, _ = deciding()
    merge_waiting()
    notice = needs_you.digest()
    assert notice is not None and notice.producer == "loop" and notice.kind == "needs-you-digest"
    assert notice.title == "2 need you" and notice.url.endswith("/evolution/needs-you/")
    lines = notice.text.splitlines()
    assert len(lines) == 2
    assert any(f"decide · scenario:digest — a person answers the decide card of cycle {cycle.pk}" in x for x in lines)
    assert any(x.startswith("• merge · scenario:merging — a person merges or closes PR #7") for x in lines)


def test_no_digest_when_nothing_waits() -> None:
    assert needs_you.digest() is None
    assert not Notice.objects.exists()


def test_the_digest_is_posted_once_a_day() -> None:
    from evolution.tasks import needs_you_digest

    deciding()
    now = timezone.now()
    with time_machine.travel(now, tick=False):
        assert needs_you_digest.apply().get() is True
    with time_machine.travel(now + timedelta(hours=2), tick=False):
        assert needs_you_digest.apply().get() is False
    with time_machine.travel(now + timedelta(hours=24), tick=False):
        Card.objects.update(expires_at=now + timedelta(days=5))
        assert needs_you_digest.apply().get() is True
    assert Notice.objects.filter(kind="needs-you-digest").count() == 2
