"""One paging style on every list under /api/ (issue 36): ``cursor`` and ``limit`` in, ``nextCursor`` out.

Every list operation of the schema (a GET taking ``limit``) is here with a way to make its rows. Each is paged
two rows at a time while rows are added between the pages — one between two rows already answered, one before
every row and one after every row — and must answer every row it had exactly once, nothing twice, and a null
``nextCursor`` on its last page. Offset paging fails that: a row added above the offset answers a row twice.
The answers are read by ``nextCursor``, the list key and each row's id only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from evolution.models import Cycle, Supervision
from grading.models import Episode, Execution, Rating
from hitl.models import Notice
from singularity.apikit.pagination import MAX_PAGE, PAGE_SIZE, keys
from singularity.being.actions import create_being
from singularity.models import Cycle as BeingCycle
from singularity.models import Event
from tests.evolution.page_helpers import graded_run, in_loop, make_cycle
from tests.grading.chat_helpers import make_role
from tests.grading.grading_helpers import make_entity, make_run
from tests.hitl.helpers import make_card

pytestmark = pytest.mark.django_db

#: Where ranks start: rank r is an instant ``r`` seconds after it, a name sorting by r, or a number.
BASE = timezone.now() - timedelta(days=2)


def _at(rank: int) -> Any:
    return BASE + timedelta(seconds=rank)


def _id(*names: str) -> Callable[[dict[str, Any]], Any]:
    """A row's id under the first of ``names`` it has (snake or camel spelling alike)."""

    def read(row: dict[str, Any]) -> Any:
        return next(row[name] for name in names if name in row)

    return read


@dataclass
class Lst:
    """A list operation: its URL (with what it needs), the key of its rows, how to read a row's id and make one."""

    url: str
    key: str
    ident: Callable[[dict[str, Any]], Any]
    make: Callable[[dict[str, Any], int], Any]  # (the world, rank) → the id the list answers for the row


def _being(world: dict[str, Any], rank: int) -> Any:
    return create_being(f"b-{rank:09d}").name


def _being_cycle(world: dict[str, Any], rank: int) -> Any:
    BeingCycle.objects.create(being=world["being"], number=rank)
    return rank


def _event(world: dict[str, Any], rank: int) -> Any:
    Event.objects.create(being=world["being"], seq=rank, cycle=1, kind="warning", data={})
    return rank


def _card(world: dict[str, Any], rank: int) -> Any:
    card = make_card(key=f"page:{rank}")
    type(card).objects.filter(pk=card.pk).update(created_at=_at(rank))
    return str(card.pk)


def _entity(world: dict[str, Any], rank: int) -> Any:
    return make_entity(f"e-{rank:09d}").slug


def _episode(world: dict[str, Any], rank: int) -> Any:
    run = make_run(world["role"])
    Episode.objects.create(execution=run, role=world["role"], surface=Episode.Surface.DASHBOARD, opened_at=_at(rank))
    return str(run.pk)


def _grade(world: dict[str, Any], rank: int) -> Any:
    return str(graded_run(world["entity"], at=_at(rank)).pk)


def _notice(world: dict[str, Any], rank: int) -> Any:
    return Notice.objects.create(producer="test", kind="page", title=f"n{rank}", created_at=_at(rank)).pk


def _rating(world: dict[str, Any], rank: int) -> Any:
    run = make_run(world["entity"])
    note = f"r{rank}"
    Rating.objects.create(
        execution=run, entity=world["entity"], metric_id="accuracy", user=world["user"], value=1, normalized=1.0,
        note=note, created_at=_at(rank), updated_at=_at(rank),
    )  # fmt: skip
    return note


def _run(world: dict[str, Any], rank: int) -> Any:
    run = make_run(world["entity"])
    Execution.objects.filter(pk=run.pk).update(started_at=_at(rank))
    return str(run.pk)


def _cycle(world: dict[str, Any], rank: int) -> Any:
    return make_cycle(world["entity"], phase=Cycle.Phase.SETTLED, status=Cycle.Status.SKIPPED, at=_at(rank)).pk


def _in_loop(world: dict[str, Any], rank: int) -> Any:
    return in_loop(f"s-{rank:09d}").slug


def _supervision(world: dict[str, Any], rank: int) -> Any:
    row = Supervision.objects.create(
        kind=Supervision.Kind.REARM, entity=world["entity"], actor="alice", reason=f"r{rank}", created_at=_at(rank)
    )
    return row.pk


RUN_ID = _id("run_id", "runId")
LISTS = {
    "/api/beings/": Lst("/api/beings/", "results", _id("name"), _being),
    "/api/beings/{name}/cycles/": Lst("/api/beings/ada/cycles/", "results", _id("number"), _being_cycle),
    "/api/beings/{name}/events/": Lst("/api/beings/ada/events/", "results", _id("seq"), _event),
    "/api/cards/": Lst("/api/cards/", "results", _id("id"), _card),
    "/api/entities/": Lst("/api/entities/?kind=workflow", "results", _id("slug"), _entity),
    "/api/episodes/": Lst("/api/episodes/?role=helpdesk", "results", RUN_ID, _episode),
    "/api/grades/": Lst("/api/grades/?entity=scenario:digest", "results", RUN_ID, _grade),
    "/api/notices/": Lst("/api/notices/", "results", _id("id"), _notice),
    "/api/ratings/": Lst("/api/ratings/", "results", _id("note"), _rating),
    "/api/runs/": Lst("/api/runs/?entity=scenario:digest", "results", _id("id"), _run),
    "/api/loop/history/": Lst("/api/loop/history/", "cycles", _id("id"), _cycle),
    "/api/loop/get/": Lst("/api/loop/get/?targetKind=scenario&targetId=digest", "cycles", _id("id"), _cycle),
    "/api/loop/status/": Lst("/api/loop/status/", "entities", _id("targetId"), _in_loop),
    "/api/loop/supervision/": Lst("/api/loop/supervision/", "rows", _id("id"), _supervision),
}


@pytest.fixture
def world(alice) -> dict[str, Any]:
    """What the lists' rows hang on: a being (no cycles, no events), a role, an entity in the loop, a person."""
    return {
        "being": create_being("ada"),
        "role": make_role(),
        "entity": in_loop("digest"),
        "user": alice,
    }


@pytest.fixture
def api(alice) -> APIClient:
    client = APIClient()
    client.force_authenticate(alice)
    return client


def _with(url: str, **params: Any) -> str:
    return f"{url}{'&' if '?' in url else '?'}{urlencode(params)}"


def list_operations() -> set[str]:
    """The paths of the schema's list operations: every GET that takes ``limit``."""
    generator = SchemaGenerator()
    schema = generator.get_schema(request=None, public=True)
    found = set()
    for path, operations in schema["paths"].items():
        get = operations.get("get") or {}
        if any(p["name"] == "limit" and p["in"] == "query" for p in get.get("parameters", [])):
            found.add(path)
    return found


def test_every_list_of_the_schema_is_paged_here():
    """A new list joins LISTS, and so every test below."""
    assert list_operations() == set(LISTS)


def test_every_list_documents_cursor_and_limit_with_the_same_bounds_and_answers_next_cursor():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    for path in LISTS:
        operation = schema["paths"][path]["get"]
        params = {p["name"]: p for p in operation["parameters"] if p["in"] == "query"}
        assert "offset" not in params and "cursor" in params, path
        bounds = params["limit"]["schema"]
        assert (bounds.get("minimum"), bounds.get("maximum"), bounds.get("default")) == (1, MAX_PAGE, PAGE_SIZE), path
        answer = operation["responses"]["200"]["content"]["application/json"]["schema"]
        name = answer["$ref"].rsplit("/", 1)[1]
        properties = schema["components"]["schemas"][name]["properties"]
        assert "nextCursor" in properties and "next" not in properties and "previous" not in properties, path


@pytest.mark.parametrize("path", sorted(LISTS))
def test_a_list_pages_through_every_row_once_while_rows_are_added(api, world, path):
    lst = LISTS[path]
    ranks: dict[Any, int] = {}
    for rank in range(1000, 6000, 1000):
        ranks[lst.make(world, rank)] = rank
    had = set(ranks)
    seen: list[Any] = []
    url, pages = _with(lst.url, limit=2), 0
    while url:
        response = api.get(url)
        assert response.status_code == 200, response.content
        body = response.json()
        rows = [lst.ident(row) for row in body[lst.key]]
        assert len(rows) <= 2 and "next" not in body and "previous" not in body, body
        seen += rows
        pages += 1
        assert pages < 20, "the pages never end"
        answered = sorted(ranks[row] for row in rows if row in ranks)  # not the world's own rows
        if len(answered) == 2:  # a row between two already answered, one before and one after every row
            low, high = answered
            for rank in ((low + high) // 2, min(ranks.values()) - 7, max(ranks.values()) + 7):
                if rank not in ranks.values():  # a pair answered again (as an offset would) has its row already
                    ranks[lst.make(world, rank)] = rank
        url = _with(lst.url, limit=2, cursor=body["nextCursor"]) if body["nextCursor"] else ""
    assert len(seen) == len(set(seen)), f"answered twice: {sorted(r for r in seen if seen.count(r) > 1)}"
    assert had <= set(seen), f"never answered: {had - set(seen)}"


@pytest.mark.parametrize("path", sorted(LISTS))
def test_a_list_answers_its_default_page_and_a_null_next_cursor_on_its_last(api, world, path):
    lst = LISTS[path]
    for rank in range(1, PAGE_SIZE + 2):
        lst.make(world, rank * 10)
    first = api.get(lst.url).json()
    assert len(first[lst.key]) == PAGE_SIZE and isinstance(first["nextCursor"], str)
    rest = api.get(_with(lst.url, cursor=first["nextCursor"])).json()
    assert len(rest[lst.key]) >= 1 and rest["nextCursor"] is None
    whole = api.get(_with(lst.url, limit=MAX_PAGE)).json()
    assert len(whole[lst.key]) == len(first[lst.key]) + len(rest[lst.key]) and whole["nextCursor"] is None


@pytest.mark.parametrize("path", sorted(LISTS))
def test_a_list_refuses_an_offset_saying_to_pass_cursor(api, world, path):
    response = api.get(_with(LISTS[path].url, offset=2))
    body = response.json()
    assert response.status_code == 400 and body["error"] == "invalid", body
    assert body["detail"].startswith("offset: ") and "cursor" in body["detail"], body


@pytest.mark.parametrize("path", sorted(LISTS))
def test_a_list_refuses_a_limit_out_of_bounds_naming_it(api, world, path):
    for limit in ("0", str(MAX_PAGE + 1), "201", "ten", "-1", "2.5", str(2**64)):
        response = api.get(_with(LISTS[path].url, limit=limit))
        body = response.json()
        assert response.status_code == 400 and body["error"] == "invalid", (limit, body)
        assert body["detail"].startswith("limit: "), (limit, body)


@pytest.mark.parametrize("path", sorted(LISTS))
def test_a_list_refuses_a_cursor_it_never_gave_naming_it(api, world, path):
    response = api.get(_with(LISTS[path].url, cursor="not-a-cursor!"))
    body = response.json()
    assert response.status_code == 400 and body["error"] == "invalid", body
    assert body["detail"].startswith("cursor: "), body


@pytest.mark.parametrize(
    "order,why",
    [
        ((), "ordered ending in a unique field"),
        (("-started_at",), "ordered ending in a unique field"),
        (("-completed_at", "-id"), "a nullable field"),
        (("-entity__slug", "-id"), "plain ordering fields"),
    ],
)
def test_a_list_whose_order_cannot_page_is_a_programming_error(order, why):
    runs = Execution.objects.order_by(*order) if order else Execution.objects.order_by()
    with pytest.raises(ImproperlyConfigured, match=why):
        keys(runs)


def test_a_cursor_is_read_by_every_field_of_the_order_so_equal_instants_neither_repeat_nor_vanish(api, world):
    """Runs started at the same instant are told apart by their id: a page boundary among them loses none."""
    instant = _at(500)
    made = {str(make_run(world["entity"]).pk) for _ in range(5)}
    Execution.objects.filter(pk__in=made).update(started_at=instant)
    seen, url = [], "/api/runs/?limit=2"
    while url:
        body = api.get(url).json()
        seen += [row["id"] for row in body["results"]]
        url = f"/api/runs/?limit=2&cursor={body['nextCursor']}" if body["nextCursor"] else ""
    assert sorted(seen) == sorted(made)
