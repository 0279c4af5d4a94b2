"""Each entity's newest graded runs, read by index and bounded by its window size (issue 18).

What the fleet, loop_status and the entity pages show of an idle entity's
recent outcomes is the trigger's own count over the runs its window would
read: the entity's last ``trigger.windowRuns`` graded runs (observed, never a
loop replay), newest first. Read for many entities at once without ranking
their history: on Postgres one statement, a ``LATERAL`` join over the
entities with one short index scan each (``grading_grade_recent`` walks
``(entity, status, graded_at desc, execution desc)``, stopping after the
window's size); on SQLite a ``UNION ALL`` of one bounded indexed read per
entity, 100 entities a statement. The cost follows the window, not the
history: the same at a million grades as at ten thousand.

Nothing is kept: the rows are read as they stand, so a re-grade, a rating or
a rating card's deadline passing shows at the next read
(``tests/evolution/test_recent_outcomes.py`` compares with the trigger's own
window read per entity).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import connection

from evolution.presets.repair import WINDOW_COLUMNS, window_grades
from grading.models import Entity, Grade

#: The columns ``is_bad`` reads (with the entity's terms and people's ratings).
COLUMNS = ", ".join(f"gg.{name}" for name in WINDOW_COLUMNS)

#: One entity's runs the window counts (the rules of ``evolution.presets.repair.graded_window``).
WHERE = (
    "gg.status = %s AND NOT e.loop_launched AND (e.awaiting_rating_until IS NULL OR e.awaiting_rating_until <= %s "
    "OR EXISTS (SELECT 1 FROM grading_rating r WHERE r.execution_id = gg.execution_id))"
)

LATERAL = f"""
SELECT g.* FROM unnest(%s::bigint[], %s::int[]) AS t(entity_id, size)
CROSS JOIN LATERAL (
    SELECT {COLUMNS}
    FROM grading_grade gg JOIN grading_execution e ON e.id = gg.execution_id
    WHERE gg.entity_id = t.entity_id AND {WHERE}
    ORDER BY gg.graded_at DESC, gg.execution_id DESC
    LIMIT t.size
) g
"""

ONE = f"""SELECT * FROM (
    SELECT {COLUMNS} FROM grading_grade gg JOIN grading_execution e ON e.id = gg.execution_id
    WHERE gg.entity_id = %s AND {WHERE}
    ORDER BY gg.graded_at DESC, gg.execution_id DESC LIMIT %s
)"""

#: Entities per SQLite statement (its compound SELECT holds at most 500 terms).
CHUNK = 100


def newest_graded(sizes: dict[int, int], *, now: datetime) -> dict[int, list[Grade]]:
    """For each entity id in ``sizes``, its newest ``sizes[id]`` graded runs the window counts, newest first.

    One statement on Postgres; one per 100 entities on SQLite. The grades carry the columns ``is_bad`` reads.
    """
    ids = [pk for pk, size in sizes.items() if size > 0]
    if not ids:
        return {}
    graded = Grade.Status.GRADED.value
    rows: list[Grade] = []
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(LATERAL, [ids, [sizes[pk] for pk in ids], graded, now])
            rows = window_grades(cursor.fetchall(), share_text=True)
    else:
        for start in range(0, len(ids), CHUNK):
            chunk = ids[start : start + CHUNK]
            sql = " UNION ALL ".join([ONE] * len(chunk))
            params: list[object] = []
            for pk in chunk:
                params += [pk, graded, connection.ops.adapt_datetimefield_value(now), sizes[pk]]
            rows += list(Grade.objects.raw(sql, params))
    answer: dict[int, list[Grade]] = {pk: [] for pk in ids}
    for grade in rows:
        answer[grade.entity_id].append(grade)
    for grades in answer.values():
        grades.sort(key=lambda g: (g.graded_at, str(g.execution_id)), reverse=True)
    return answer


def attach(grades: Iterable[Grade], entities: dict[int, Entity]) -> None:
    """Hand each grade its entity (``is_bad`` reads the terms through it: no row read per grade)."""
    for grade in grades:
        grade.entity = entities[grade.entity_id]
