"""The loop facts the database keeps on each entity from its terms (issue 18): ``loop_grouped``,
``loop_month_ceiling`` and ``loop_autonomy`` equal what the terms say after every kind of write — the sync, the resolver's
``make_entity``, ``save``, ``bulk_create``, ``bulk_update``, a queryset ``update``, raw SQL — and the fleet's
reads that filter on them answer what reading the terms answers."""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from evolution.core import spend
from evolution.steering.supervision import may_join_groups
from grading.models import LOOP_GROUPED, Entity
from grading.sync import sync_brain
from tests.evolution.loop_helpers import looped
from tests.grading.brain_helpers import Brain, md

pytestmark = pytest.mark.django_db

GROUPS = {"groups": {"audience": {}}}


def _loop_terms(rng: random.Random) -> dict[str, Any]:
    """A random ``loop`` block: a group named or not (or empty, or null), groups declared or not, a ceiling."""
    loop: dict[str, Any] = {"enabled": True, "preset": "repair"}
    group = rng.choice(["absent", "empty", "null", "one", "two", "text"])
    if group != "absent":
        loop["group"] = {"empty": [], "null": None, "one": ["audience"], "two": ["a", "b"], "text": "audience"}[group]
    declared = rng.choice(["absent", "empty", "one", "null"])
    if declared != "absent":
        loop["groups"] = {"empty": {}, "one": {"audience": {"lock": True}}, "null": None}[declared]
    autonomy = rng.choice([None, {}, {"decide": "auto", "maxConsecutiveRegressions": 1}, {"onUnmeasured": "continue"}])
    if autonomy is not None:
        loop["autonomy"] = autonomy
    ceiling = rng.choice(["absent", "null", "text", "int", "float", "zero", "no-budget"])
    if ceiling != "no-budget":
        budget: dict[str, Any] = {"maxUsdPerRun": "1"}
        if ceiling != "absent":
            budget["maxUsdPerMonth"] = {"null": None, "text": "12.50", "int": 7, "float": 2.5, "zero": 0}[ceiling]
        loop["budget"] = budget
    return loop


def _resolved(slug: str, rng: random.Random) -> Entity:
    """An entity whose terms the resolver wrote: a group named on it or not, a brain-wide ceiling or not."""
    loop = {"group": rng.choice([[], ["audience"]])} if rng.random() < 0.7 else {}
    manifest: dict[str, Any] = {"loop": dict(GROUPS)}
    ceiling = rng.choice(["absent", None, "12.50", "0", "3"])
    if ceiling != "absent":
        manifest["loop"]["budget"] = {"maxUsdPerMonth": ceiling}
    return looped(slug, loop=loop, manifest=manifest)


def _grouped_by_terms(terms: dict[str, Any]) -> bool:
    """``LOOP_GROUPED`` read in Python: a ``loop.group`` key that is not [] and a ``loop.groups`` that is not {}."""
    loop = terms.get("loop")
    if not isinstance(loop, dict) or "group" not in loop or "groups" not in loop:
        return False
    return loop["group"] != [] and loop["groups"] != {}


def assert_facts_equal_terms() -> None:
    """Every entity's columns against a full recomputation from its terms, in SQL and in Python."""
    by_sql = set(Entity.objects.filter(LOOP_GROUPED).values_list("pk", flat=True))
    rows = list(Entity.objects.values_list("pk", "terms", "loop_grouped", "loop_month_ceiling", "loop_autonomy"))
    assert rows
    for pk, terms, grouped, ceiling_text, block in rows:
        loop = terms.get("loop") if isinstance(terms.get("loop"), dict) else {}
        assert block == loop.get("autonomy"), (pk, terms, block)
        assert bool(grouped) == (pk in by_sql) == _grouped_by_terms(terms), (pk, terms, grouped)
        entity = Entity(pk=pk, terms=terms)
        expected = spend.month_ceiling(entity)
        got = None if ceiling_text in (None, "null") else Decimal(str(ceiling_text))
        assert got == expected, (pk, terms, ceiling_text)
    assert set(Entity.objects.filter(may_join_groups()).values_list("pk", flat=True)) == by_sql


def test_the_facts_follow_every_write_of_the_terms():
    rng = random.Random(18)
    # make_entity: the resolver's terms written by create()
    made = [_resolved(f"made-{i}", rng) for i in range(12)]
    assert_facts_equal_terms()
    # save() of a changed row, whole and with update_fields
    for i, entity in enumerate(made):
        entity.terms = {**entity.terms, "loop": _loop_terms(rng)}
        entity.save(update_fields=["terms"]) if i % 2 else entity.save()
    assert_facts_equal_terms()
    # bulk_create (bench/dashboard_scale.make_entities' path) and bulk_update
    now = timezone.now()
    bulk = Entity.objects.bulk_create(
        [
            Entity(
                slug=f"bulk-{i}",
                kind="workflow",
                target_kind="scenario",
                path=f"b{i}",
                terms={"loop": _loop_terms(rng)},
            )
            for i in range(20)
        ]
    )
    assert_facts_equal_terms()
    bulk = list(Entity.objects.filter(slug__startswith="bulk-"))
    for entity in bulk:
        entity.terms = {"loop": _loop_terms(rng)}
        entity.synced_at = now
    Entity.objects.bulk_update(bulk, ["terms", "synced_at"])
    assert_facts_equal_terms()
    # the breaker's policy read off the column equals the one off the whole row (``autonomy.policy``)
    from evolution.steering import autonomy

    for entity in Entity.objects.all():
        assert dict(entity.loop_autonomy or {}) == autonomy.policy(entity)
    # a queryset update, and raw SQL that Django never sees
    Entity.objects.filter(slug__startswith="made-").update(terms={"loop": _loop_terms(rng)})
    assert_facts_equal_terms()
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE grading_entity SET terms = %s WHERE slug LIKE %s",
            [
                '{"loop": {"group": ["audience"], "groups": {"audience": {}}, "budget": {"maxUsdPerMonth": "3"}}}',
                "bulk-1%",
            ],
        )
    assert_facts_equal_terms()
    assert Entity.objects.filter(slug="bulk-1", loop_grouped=True, loop_month_ceiling="3").exists()


def test_the_facts_follow_the_brain_sync(tmp_path):
    manifest = "loop:\n  groups:\n    audience: {}\n  budget:\n    maxUsdPerMonth: '25'\n"
    grouped = md("name: A\nevaluation:\n  enabled: true\nloop:\n  enabled: true\n  group: [audience]\n")
    alone = md("name: B\nevaluation:\n  enabled: true\nloop:\n  enabled: true\n")
    brain = Brain(
        tmp_path,
        {
            "constitution/MANIFEST.yaml": manifest,
            "features/a/a.scenario.md": grouped,
            "features/b/b.scenario.md": alone,
        },
    )
    sync_brain(checkout=brain.checkout)
    assert_facts_equal_terms()
    facts = dict(Entity.objects.values_list("slug", "loop_grouped"))
    assert facts["a"] is True and not facts["b"]
    assert set(Entity.objects.values_list("loop_month_ceiling", flat=True)) == {"25"}
    # The brain changes: the group leaves a, joins b, the ceiling goes; a sync rewrites the rows.
    brain.commit(
        {
            "constitution/MANIFEST.yaml": "loop:\n  groups:\n    audience: {}\n",
            "features/a/a.scenario.md": alone.replace("name: B", "name: A"),
            "features/b/b.scenario.md": grouped.replace("name: A", "name: B"),
        }
    )
    sync_brain(checkout=brain.checkout)
    assert_facts_equal_terms()
    facts = dict(Entity.objects.values_list("slug", "loop_grouped"))
    assert facts["b"] is True and not facts["a"]
    assert set(Entity.objects.values_list("loop_month_ceiling", flat=True)) <= {None, "null"}  # SQLite: "null"


def test_month_refusals_in_equals_the_terms_read(monkeypatch):
    """The column-read refusals equal ``month_refusals`` over the entities read whole (their terms)."""
    rng = random.Random(7)
    for i in range(15):
        _resolved(f"c-{i}", rng)
    now = timezone.now()
    monkeypatch.setattr(spend, "spent_many", lambda ids, now: {pk: Decimal("5") for pk in ids})
    whole = spend.month_refusals(list(Entity.objects.all()), now=now)
    assert spend.month_refusals_in(Entity.objects.all(), now=now) == whole
    assert whole  # some ceilings at or below 5 (0, 2.5) refuse
