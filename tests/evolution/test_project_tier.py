"""The project tier of the loop's functions (R5.2: preset ← project ← entity): LOOP_SHOULD_OPEN, LOOP_WINDOW,
LOOP_MEASURE and LOOP_VERDICT answer for every entity whose own <id>.loop.py does not define the function, and the
entity's own wins."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from evolution.apps import _check_project_functions
from evolution.loop import trigger
from evolution.loop.check import _verdict_function
from evolution.models import Cycle
from grading.booking import on_terminal
from grading.grade import grade_now
from grading.models import Grade
from singularity.errors import ConfigError
from tests.evolution import project_tier
from tests.evolution.loop_helpers import cycles_of, graded, history, looped
from tests.grading.grading_helpers import brain_repo, make_entity, make_run

pytestmark = pytest.mark.django_db

METRIC = {"kind": "computed", "direction": "max", "role": "objective", "aggregate": "mean"}


@pytest.fixture(autouse=True)
def fresh():
    project_tier.ASKED.clear()


def test_the_projects_should_open_answers_for_an_entity_without_its_own(settings):
    settings.LOOP_SHOULD_OPEN = "tests.evolution.project_tier.should_open"
    entity = looped()
    history(entity, "bbbb")
    assert trigger.on_landed([graded(entity, bad=True).pk]) == 0
    assert cycles_of(entity) == [] and project_tier.ASKED and project_tier.ASKED[-1].startswith("should_open:")


def test_the_projects_window_answers_for_an_entity_without_its_own(settings):
    settings.LOOP_WINDOW = "tests.evolution.project_tier.window"
    entity = looped()
    history(entity, "bbbb")
    assert trigger.on_landed([graded(entity, bad=True).pk]) == 0  # the preset would open here
    assert cycles_of(entity) == []
    assert project_tier.ASKED == ["window:triage:trigger"]


def test_an_entitys_own_window_wins_over_the_projects(settings, tmp_path):
    settings.LOOP_WINDOW = "tests.evolution.project_tier.window"
    path = "features/triage/triage.loop.py"
    source = "def window(ctx):\n    return ctx.preset.window()\n"
    checkout, commit = brain_repo(tmp_path / "brain", {path: source})
    settings.BRAIN_CHECKOUT = str(checkout.path)
    entity = looped(loop_module_path=path, commit=commit)
    history(entity, "bbbb")
    assert trigger.on_landed([graded(entity, bad=True).pk]) == 1
    assert project_tier.ASKED == []


def test_the_projects_measure_answers_for_an_entity_without_a_loop_module(settings):
    settings.LOOP_MEASURE = "tests.evolution.project_tier.measure"
    entity = make_entity("outreach", kind="pipeline", evaluation={"method": "none", "metrics": {"replied": METRIC}})
    grade = grade_now(on_terminal(make_run(entity, output={})))
    assert grade.status == Grade.Status.GRADED, grade.error
    assert grade.metrics["replied"] == 0.5 and project_tier.ASKED == ["measure:outreach"]


def test_an_entitys_own_measure_wins_over_the_projects(settings, tmp_path):
    settings.LOOP_MEASURE = "tests.evolution.project_tier.measure"
    path = "features/outreach/outreach.loop.py"
    checkout, commit = brain_repo(
        tmp_path / "brain", {path: "def measure(run):\n    return [{'id': 'replied', 'value': 0.9}]\n"}
    )
    entity = make_entity(
        "outreach", kind="pipeline", evaluation={"method": "none", "metrics": {"replied": METRIC}},
        commit=commit, loop_module_path=path,
    )  # fmt: skip
    grade = grade_now(on_terminal(make_run(entity, output={})), checkout=checkout)
    assert grade.metrics["replied"] == 0.9 and project_tier.ASKED == []


def test_the_projects_verdict_answers_the_check_for_an_entity_without_its_own(settings):
    settings.LOOP_VERDICT = "tests.evolution.project_tier.verdict"
    entity = looped()
    cycle = Cycle(entity=entity)
    which, function = _verdict_function(cycle)
    assert which == "project" and function is project_tier.verdict


@pytest.mark.parametrize("name", ["LOOP_SHOULD_OPEN", "LOOP_COMPARE", "LOOP_WINDOW", "LOOP_VERDICT", "LOOP_MEASURE"])
def test_a_project_setting_that_names_nothing_importable_stops_the_boot_naming_it(settings, name):
    setattr(settings, name, "tests.evolution.project_tier.nothing_here")
    with pytest.raises((ConfigError, ImproperlyConfigured), match=name):
        _check_project_functions()
