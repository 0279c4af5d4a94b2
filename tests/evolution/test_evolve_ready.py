"""When each evolve window became ready, for a batch in one statement (issue 18): what ``evolve.ready_at`` says."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from evolution.models import Cycle
from evolution.presets import evolve, ready
from grading.models import Execution
from tests.evolution.evolve_helpers import MINUTE, graded_at, shop

pytestmark = pytest.mark.django_db


def test_the_batch_read_answers_what_each_entitys_own_read_answers():
    rng = random.Random(18)
    now = timezone.now()
    start = now - timedelta(hours=5)
    entities = {}
    for i in range(12):
        entity = shop(f"shop-{i}", loop={"trigger": {"windowRuns": rng.choice([2, 3, 5])}})
        for k in range(rng.randint(0, 9)):
            grade = graded_at(entity, start + (k * 7 + i) * MINUTE, {"revenue": 1000.0, "conversion": 0.4})
            if rng.random() < 0.2:  # a loop replay never counts
                Execution.objects.filter(pk=grade.execution_id).update(loop_launched=True)
            if rng.random() < 0.15:  # a run still waiting for its rating is not observed yet
                Execution.objects.filter(pk=grade.execution_id).update(awaiting_rating_until=now + timedelta(hours=1))
        if rng.random() < 0.4:  # a previous cycle's mark: the next window starts there
            Cycle.objects.create(entity=entity, key=f"mark-{i}", origin="grade", phase="settled", status="validated",
                                 analysed=True, started_at=start + rng.randint(0, 40) * MINUTE)  # fmt: skip
        entities[entity.pk] = entity
    expected = evolve.ready_at(entities, now=now)
    with CaptureQueriesContext(connection) as read:
        answered = ready.ready_at(entities, now=now)
    assert answered == expected
    assert any(v is not None for v in answered.values()) and any(v is None for v in answered.values())
    if connection.vendor == "postgresql":
        assert len(read.captured_queries) == 2  # the marks, then every entity's answer
