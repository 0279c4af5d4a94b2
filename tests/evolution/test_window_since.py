"""ctx.since is the same whoever asks (R6.19): the previous window's mark at a landing as at a look, under repair
as under evolve — None only for an entity no cycle has read yet."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from evolution.loop import trigger
from evolution.models import Cycle
from tests.evolution.loop_helpers import cycles_of, graded, history, looped
from tests.grading.grading_helpers import brain_repo

pytestmark = pytest.mark.django_db

PATH = "features/triage/triage.loop.py"


def with_window(tmp_path, settings):
    seen = tmp_path / "seen.jsonl"
    source = (
        "import json\n\n"
        "def window(ctx):\n"
        f"    with open({str(seen)!r}, 'a') as f:\n"
        "        f.write(json.dumps({'since': ctx.since, 'anchor': ctx.anchor is not None}) + '\\n')\n"
        "    return ctx.preset.window()\n"
    )
    checkout, commit = brain_repo(tmp_path / "brain", {PATH: source})
    settings.BRAIN_CHECKOUT = str(checkout.path)
    entity = looped(loop_module_path=PATH, commit=commit, loop={"cooldownHours": 0, "trigger": {"every": 24}})
    return entity, lambda: [json.loads(line) for line in seen.read_text().splitlines()]


def test_a_landing_and_a_look_hand_window_the_same_since(tmp_path, settings):
    entity, seen = with_window(tmp_path, settings)
    history(entity, "bbbb", start=timezone.now() - timedelta(hours=2))
    assert trigger.on_landed([graded(entity, bad=True, at=timezone.now() - timedelta(minutes=90)).pk]) == 1
    assert seen()[-1] == {"since": None, "anchor": True}  # no cycle has read a window yet
    [cycle] = cycles_of(entity)
    Cycle.objects.filter(pk=cycle.pk).update(claim=None, phase=Cycle.Phase.SETTLED, status=Cycle.Status.VALIDATED)
    mark = cycle.started_at.isoformat()
    trigger.on_landed([graded(entity, bad=True).pk])
    assert seen()[-1] == {"since": mark, "anchor": True}  # was None at every landing under repair
    newest = Cycle.objects.filter(entity=entity, analysed=True).latest("started_at")  # the landing opened one
    trigger.sample(entity, now=timezone.now())
    assert seen()[-1] == {"since": newest.started_at.isoformat(), "anchor": False}


def test_a_window_that_leaves_the_landed_run_out_moves_neither_the_anchor_nor_the_progress(tmp_path, settings):
    # R6.23: the row stores only the runs the window kept and the newest of them anchors the cycle; R6.24: the
    # progress never runs ahead of the runs kept ("4 of 5", not the preset's "5 of 5" over four).
    source = "def window(ctx):\n    w = ctx.preset.window()\n    w['runIds'] = w['runIds'][:-1]\n    return w\n"
    checkout, commit = brain_repo(tmp_path / "brain", {PATH: source})
    settings.BRAIN_CHECKOUT = str(checkout.path)
    entity = looped(loop_module_path=PATH, commit=commit)
    earlier = history(entity, "bbbbb", start=timezone.now() - timedelta(hours=1))
    landed = graded(entity, bad=True)
    assert trigger.on_landed([landed.pk]) == 1
    [cycle] = cycles_of(entity)
    assert str(landed.execution_id) not in cycle.window["runIds"] and len(cycle.window["runIds"]) == 4
    assert cycle.anchor_id == earlier[-1].execution_id
    assert cycle.window["progress"]["have"] == 4
