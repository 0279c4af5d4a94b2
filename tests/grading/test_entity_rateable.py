"""``Entity.rateable`` (issue 18): the stored generated column Rate runs filters equals ``people.human_rated`` of
any metric of the terms' ``evaluation.metrics`` after every kind of write — ``save``, ``bulk_create``,
``bulk_update``, a queryset ``update``, raw SQL, the brain sync — on random and odd metric blocks (not an object,
specs that are not objects, ``human`` as text, ``kind`` missing). Postgres keeps it; SQLite cannot (NULL there),
and ``grading.views.rateable`` answers the same on both."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from django.db import connection

from grading.models import Entity
from grading.people import human_rated
from grading.sync import sync_brain
from grading.views import rateable
from tests.grading.brain_helpers import Brain, md

pytestmark = pytest.mark.django_db

POSTGRES = connection.vendor == "postgresql"


def _spec(rng: random.Random) -> Any:
    """One metric spec, often odd: any kind, ``human`` of any type, or not an object at all."""
    shape = rng.choice(["spec", "spec", "spec", "null", "text", "list", "empty"])
    if shape != "spec":
        return {"null": None, "text": "judged", "list": [{"kind": "reported"}], "empty": {}}[shape]
    spec: dict[str, Any] = {}
    kind = rng.choice(["judged", "reported", "computed", "absent", "Judged", None])
    if kind != "absent":
        spec["kind"] = kind
    human = rng.choice(["absent", True, False, "true", 1, None])
    if human != "absent":
        spec["human"] = human
    return spec


def _terms(rng: random.Random) -> dict[str, Any]:
    """Random terms: no evaluation, metrics absent, not an object, empty, or a few random specs."""
    shape = rng.choice(["none", "no-metrics", "null", "list", "text", "empty", "some", "some", "some"])
    if shape == "none":
        return {"loop": {"enabled": True}}
    evaluation: dict[str, Any] = {"enabled": True}
    if shape != "no-metrics":
        evaluation["metrics"] = {
            "null": None,
            "list": [{"kind": "reported"}],
            "text": "reported",
            "empty": {},
            "some": {f"m{i}": _spec(rng) for i in range(rng.randint(1, 4))},
        }[shape]
    return {"evaluation": evaluation}


def _by_python(terms: Any) -> bool:
    metrics = ((terms or {}).get("evaluation") or {}).get("metrics") if isinstance(terms, dict) else None
    return isinstance(metrics, dict) and any(human_rated(s) for s in metrics.values() if isinstance(s, dict))


def assert_rateable_equals_terms() -> None:
    rows = list(Entity.objects.values_list("pk", "terms", "rateable"))
    assert rows
    for pk, terms, column in rows:
        if POSTGRES:
            assert column is _by_python(terms), (pk, terms, column)
        else:
            assert column is None, (pk, terms, column)
    expected = {pk for pk, terms, _ in rows if _by_python(terms)}
    Entity.objects.update(evaluation_enabled=True, load_error="")
    assert {e.pk for e in rateable()} == expected
    if POSTGRES:
        assert set(Entity.objects.filter(rateable=True).values_list("pk", flat=True)) == expected


def _entity(slug: str, terms: dict[str, Any]) -> Entity:
    return Entity(slug=slug, kind="workflow", target_kind="scenario", path=slug, terms=terms)


def test_rateable_follows_every_write_of_the_terms():
    rng = random.Random(18)
    saved = []
    for i in range(15):
        entity = _entity(f"saved-{i}", _terms(rng))
        entity.save()
        saved.append(entity)
    assert_rateable_equals_terms()
    for i, entity in enumerate(saved):
        entity.terms = _terms(rng)
        entity.save(update_fields=["terms"]) if i % 2 else entity.save()
    assert_rateable_equals_terms()
    Entity.objects.bulk_create([_entity(f"bulk-{i}", _terms(rng)) for i in range(30)])
    assert_rateable_equals_terms()
    bulk = list(Entity.objects.filter(slug__startswith="bulk-"))
    for entity in bulk:
        entity.terms = _terms(rng)
    Entity.objects.bulk_update(bulk, ["terms"])
    assert_rateable_equals_terms()
    Entity.objects.filter(slug__startswith="saved-").update(
        terms={"evaluation": {"metrics": {"a": {"kind": "reported"}}}}
    )
    assert_rateable_equals_terms()
    assert all(e.slug.startswith("saved-") or _by_python(e.terms) for e in rateable())
    for slug, terms in (
        ("bulk-1", {"evaluation": {"metrics": {"q": {"kind": "judged", "human": True}}}}),
        ("bulk-2", {"evaluation": {"metrics": {"q": {"kind": "judged", "human": "true"}}}}),
        ("bulk-3", {"evaluation": {"metrics": []}}),
    ):
        with connection.cursor() as cursor:
            cursor.execute("UPDATE grading_entity SET terms = %s WHERE slug = %s", [json.dumps(terms), slug])
    assert_rateable_equals_terms()
    if POSTGRES:
        rated = dict(Entity.objects.filter(slug__in=["bulk-1", "bulk-2", "bulk-3"]).values_list("slug", "rateable"))
        assert rated == {"bulk-1": True, "bulk-2": False, "bulk-3": False}


def test_rateable_follows_the_brain_sync(tmp_path):
    rated = md(
        "name: A\nevaluation:\n  enabled: true\n  metrics:\n"
        "    q: { kind: reported, direction: max, role: objective, criterion: Solved }\n"
    )
    unrated = md(
        "name: B\nevaluation:\n  enabled: true\n  metrics:\n"
        "    q: { kind: judged, direction: max, role: objective, criterion: Solved }\n"
    )
    brain = Brain(tmp_path, {"features/a/a.scenario.md": rated, "features/b/b.scenario.md": unrated})
    sync_brain(checkout=brain.checkout)
    assert_rateable_equals_terms()
    assert [e.slug for e in rateable()] == ["a"]
    brain.commit(
        {
            "features/a/a.scenario.md": unrated.replace("name: B", "name: A"),
            "features/b/b.scenario.md": rated.replace("name: A", "name: B"),
        }
    )
    sync_brain(checkout=brain.checkout)
    assert_rateable_equals_terms()
    assert [e.slug for e in rateable()] == ["b"]
