"""When each evolve window of a batch became ready, in one statement (issue 18: the trigger's evolve path).

``evolve.ready_at`` answers for many entities with one read of the marks and one short indexed read per
entity: a batch of landings on a hundred evolve entities cost a hundred statements. On Postgres ``ready_at``
here reads every entity's answer in one statement — a ``LATERAL`` join over the entities, their window's
start and its size, each a short walk of the entity's grades after its start that stops at the
``windowRuns``-th (the same rows ``evolve.ready_at`` counts: graded, never a loop replay, observed, through
``now``). Elsewhere it is ``evolve.ready_at``. ``tests/evolution/test_evolve_ready.py`` compares the two.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from django.db import connection

from evolution.presets import evolve
from evolution.steering import groups
from grading.models import Entity, Grade

READY = """
SELECT t.entity_id, g.graded_at FROM unnest(%s::bigint[], %s::timestamptz[], %s::int[]) AS t(entity_id, since, size)
CROSS JOIN LATERAL (
    SELECT gg.graded_at FROM grading_grade gg JOIN grading_execution e ON e.id = gg.execution_id
    WHERE gg.entity_id = t.entity_id AND gg.status = %s AND NOT e.loop_launched AND gg.graded_at <= %s
      AND (t.since IS NULL OR gg.graded_at > t.since)
      AND (e.awaiting_rating_until IS NULL OR e.awaiting_rating_until <= %s
           OR EXISTS (SELECT 1 FROM grading_rating r WHERE r.execution_id = gg.execution_id))
    ORDER BY gg.graded_at, gg.execution_id
    OFFSET t.size - 1 LIMIT 1
) g
"""


def ready_at(entities: Mapping[int, Entity], *, now: datetime) -> dict[int, datetime | None]:
    """``evolve.ready_at`` for ``entities``: one read of the marks, then one statement for all on Postgres."""
    if connection.vendor != "postgresql" or not entities:
        return evolve.ready_at(entities, now=now)
    found = evolve.marks(list(entities))
    ids, starts, sizes = [], [], []
    for pk, entity in entities.items():
        start = found.get(pk)
        changed = groups.changed_at(entity)
        if changed is not None and (start is None or changed > start):
            start = changed
        ids.append(pk)
        starts.append(start)
        sizes.append(max(1, int(evolve.cadence(entity.terms or {}))))
    answers: dict[int, datetime | None] = dict.fromkeys(ids)
    with connection.cursor() as cursor:
        cursor.execute(READY, [ids, starts, sizes, Grade.Status.GRADED.value, now, now])
        for pk, at in cursor.fetchall():
            answers[pk] = at
    return answers
