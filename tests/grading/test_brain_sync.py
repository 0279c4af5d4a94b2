"""Syncing the brain into Entity rows: one row per entity, broken ones beside good ones, idempotent, removals kept."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from grading.models import Entity
from grading.sync import current_checkout, sync_brain
from grading.tasks.brain import sync_brain as sync_brain_task
from singularity.errors import ConfigError
from tests.grading.brain_helpers import HEARTBEAT, SCENARIO, Brain, md, write_files

pytestmark = pytest.mark.django_db

MANIFEST = "constitution/MANIFEST.yaml"


@pytest.fixture
def brain(tmp_path):
    return Brain(
        tmp_path,
        {
            MANIFEST: "evaluation:\n  sample: { rate: 0.2, maxPerDay: 20 }\n",
            "features/digest/digest.scenario.md": SCENARIO,
            "features/ops/pulse.heartbeat.md": HEARTBEAT,
            "features/broken/broken.scenario.md": md("evaluation:\n  enabled: true\n  sample: { rate: 2 }"),
        },
    )


def rows() -> dict[str, Entity]:
    return {e.slug: e for e in Entity.objects.all()}


def test_sync_writes_one_row_per_entity_with_its_terms_and_hashes(brain):
    report = sync_brain(checkout=brain.checkout)
    head = brain.checkout.head()
    assert report.commit == head
    entities = rows()
    digest = entities["digest"]
    assert (digest.target_kind, digest.kind, digest.path) == (
        "scenario",
        "workflow",
        "features/digest/digest.scenario.md",
    )
    assert digest.commit == head
    assert len(digest.definition_hash) == 64
    assert digest.terms["evaluation"]["sample"] == {"rate": 0.2, "maxPerDay": 20}
    assert digest.provenance["evaluation.sample.maxPerDay"] == "manifest"
    assert (digest.evaluation_enabled, digest.loop_enabled) == (True, True)
    assert digest.frontmatter["name"] == "Digest" and digest.body == "Do the work.\n"
    pulse = entities["pulse"]
    assert (pulse.kind, pulse.schedule, pulse.evaluation_enabled, pulse.loop_enabled) == (
        "heartbeat",
        "*/5 * * * *",
        True,
        False,
    )


def test_a_broken_entity_is_a_row_with_its_error_and_never_takes_the_others_down(brain):
    report = sync_brain(checkout=brain.checkout)
    broken = rows()["broken"]
    assert (
        broken.load_error
        == "features/broken/broken.scenario.md: evaluation.sample.rate: must be between 0 and 1, not 2"
    )
    assert (broken.evaluation_enabled, broken.loop_enabled, broken.terms) == (False, False, {})
    assert rows()["digest"].ok
    assert [line.label for line in report.entities if not line.ok] == ["scenario:broken"]
    assert report.errors == []


def test_sync_twice_changes_nothing(brain):
    first = sync_brain(checkout=brain.checkout)
    before = {slug: (e.pk, e.terms, e.definition_hash, e.commit) for slug, e in rows().items()}
    second = sync_brain(checkout=brain.checkout)
    after = {slug: (e.pk, e.terms, e.definition_hash, e.commit) for slug, e in rows().items()}
    assert after == before
    assert all(line.created for line in first.entities)
    assert not any(line.changed or line.created for line in second.entities)
    assert Entity.objects.count() == 3


def test_a_manifest_edit_reaches_every_entity_on_the_next_sync(brain):
    sync_brain(checkout=brain.checkout)
    brain.commit({MANIFEST: "evaluation:\n  sample: { rate: 0.5, maxPerDay: 20 }\n  enabled: false\n"})
    report = sync_brain(checkout=brain.checkout)
    digest = rows()["digest"]
    assert digest.terms["evaluation"]["sample"]["rate"] == 0.5
    assert digest.evaluation_enabled is False
    assert digest.commit == brain.work.head()
    assert {line.label for line in report.entities if line.changed} == {"scenario:digest", "heartbeat:pulse"}


def test_a_removed_file_keeps_its_row_marked_absent_and_returns_when_restored(brain):
    sync_brain(checkout=brain.checkout)
    pk = rows()["pulse"].pk
    brain.commit({"features/ops/pulse.heartbeat.md": None})
    report = sync_brain(checkout=brain.checkout)
    pulse = Entity.objects.get(pk=pk)
    assert (pulse.present, pulse.evaluation_enabled, pulse.loop_enabled) == (False, False, False)
    assert report.removed == ["heartbeat:pulse"]
    assert sync_brain(checkout=brain.checkout).removed == []
    brain.commit({"features/ops/pulse.heartbeat.md": HEARTBEAT})
    sync_brain(checkout=brain.checkout)
    pulse.refresh_from_db()
    assert (pulse.pk, pulse.present, pulse.evaluation_enabled) == (pk, True, True)


def test_a_scenario_that_gains_a_pipeline_keeps_its_row(brain):
    sync_brain(checkout=brain.checkout)
    pk = rows()["digest"].pk
    brain.commit({"features/digest/digest.pipeline.py": "def run(ctx, input):\n    return {}\n"})
    sync_brain(checkout=brain.checkout)
    digest = rows()["digest"]
    assert (digest.pk, digest.kind, digest.pipeline_path) == (pk, "pipeline", "features/digest/digest.pipeline.py")


def test_the_command_prints_a_line_per_entity(brain, settings):
    settings.BRAIN_CHECKOUT = brain.checkout.path
    out = StringIO()
    call_command("brain", "sync", stdout=out)
    text = out.getvalue()
    assert "ok     scenario:digest (features/digest/digest.scenario.md) (new)" in text
    assert "ok     heartbeat:pulse (features/ops/pulse.heartbeat.md) (new)" in text
    assert "error  scenario:broken (features/broken/broken.scenario.md)" in text
    assert "evaluation.sample.rate: must be between 0 and 1, not 2" in text


def test_the_command_exits_2_when_the_brain_itself_does_not_load(brain, settings):
    settings.BRAIN_CHECKOUT = brain.checkout.path
    brain.commit({MANIFEST: "loop:\n  preset: evolve\n  threshold: 0.8\n"})
    out = StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("brain", "sync", stdout=out)
    assert caught.value.returncode == 2
    assert "brain  constitution/MANIFEST.yaml: loop.threshold: refused under preset: evolve" in out.getvalue()


def test_current_checkout_clones_a_local_bare_repository_of_the_demo_brain(tmp_path, settings):
    demo = tmp_path / "demo"
    write_files(demo, {"features/digest/digest.scenario.md": SCENARIO})
    settings.BRAIN_REPO = ""
    settings.DEMO_BRAIN_DIR = demo
    settings.VAR_DIR = tmp_path / "var"
    settings.BRAIN_CHECKOUT = tmp_path / "var" / "brain"
    checkout = current_checkout()
    assert (tmp_path / "var" / "brain.git" / "HEAD").exists()
    assert checkout.path == tmp_path / "var" / "brain"
    assert checkout.files_at(checkout.head()) == ["features/digest/digest.scenario.md"]
    assert current_checkout().head() == checkout.head()
    summary = sync_brain_task()
    assert summary["entities"] == 1 and summary["errors"] == []
    assert rows()["digest"].commit == checkout.head()


def test_current_checkout_clones_brain_repo_when_set(brain, tmp_path, settings):
    settings.BRAIN_REPO = str(brain.origin)
    settings.VAR_DIR = tmp_path / "var"
    settings.BRAIN_CHECKOUT = tmp_path / "var" / "brain"
    checkout = current_checkout()
    assert checkout.head() == brain.work.head()
    assert not (tmp_path / "var" / "brain.git").exists()


def test_current_checkout_refuses_when_the_demo_brain_is_missing(tmp_path, settings):
    settings.BRAIN_REPO = ""
    settings.DEMO_BRAIN_DIR = tmp_path / "nowhere"
    settings.VAR_DIR = tmp_path / "var"
    settings.BRAIN_CHECKOUT = tmp_path / "var" / "brain"
    with pytest.raises(ConfigError, match="demo brain"):
        current_checkout()


def test_sync_puts_the_heartbeat_schedule_on_the_beat(brain):
    from django_celery_beat.models import PeriodicTask

    sync_brain(checkout=brain.checkout)
    task = PeriodicTask.objects.get(name="entity:heartbeat:pulse")
    assert task.task == "grading.tasks.runs.run_scheduled_entity"
    assert (task.crontab.minute, task.crontab.hour) == ("*/5", "*")
