"""A chat episode whose turns ran under two role versions counts in no window (R22.9): not the watch's (held
before) and not the trigger's either — on SQLite's per-entity read, Postgres' batch read, and evolve's window."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from evolution.presets.evolve import since_grades
from evolution.presets.repair import graded_window, windows_for
from grading.models import Episode, Execution
from tests.evolution.loop_helpers import graded, looped

pytestmark = pytest.mark.django_db


def role_with_episodes():
    role = looped("helpdesk", kind="role")
    start = timezone.now() - timedelta(hours=1)
    grades = []
    for i, mixed in enumerate([False, True, False, True, False]):
        grade = graded(role, bad=True, at=start + timedelta(minutes=i))
        Execution.objects.filter(pk=grade.execution_id).update(run_kind=Execution.RunKind.EPISODE)
        Episode.objects.create(
            execution_id=grade.execution_id, role=role, surface="dashboard", status="closed", mixed_versions=mixed
        )
        grades.append((grade, mixed))
    return role, grades


def test_the_trigger_window_leaves_out_an_episode_under_two_role_versions():
    role, grades = role_with_episodes()
    single = [g.execution_id for g, mixed in reversed(grades) if not mixed]
    now = timezone.now()
    assert [g.execution_id for g in graded_window(role, through=None, size=5, now=now)] == single
    newest = grades[-1][0]
    newest.entity = role
    batch = windows_for([newest], {role.pk: role}, now=now)[newest.pk]
    assert [g.execution_id for g in batch] == single
    assert [g.execution_id for g in since_grades(role, since=None, now=now)] == single


def test_a_scenario_keeps_every_run():
    entity = looped("triage")
    start = timezone.now() - timedelta(hours=1)
    grades = [graded(entity, bad=True, at=start + timedelta(minutes=i)) for i in range(3)]
    assert len(graded_window(entity, through=None, size=5, now=timezone.now())) == len(grades)
