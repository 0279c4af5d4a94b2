"""The MANIFEST's ``notify:`` block: read with the brain's YAML reader, refused naming the field, synced as rows."""

from __future__ import annotations

import pytest

from grading.sync import write_snapshot
from singularity.brain.loader import load_brain
from singularity.notify import manifest
from singularity.notify.models import AlertRule, Destination
from tests.grading.grading_helpers import brain_repo, commit_files

pytestmark = pytest.mark.django_db

GOOD = """\
notify:
  destinations:
    ops:
      kind: slack
      urlEnv: SLACK_OPS_URL
      events: [card.waiting, watch.settled]
    ci:
      kind: webhook
      url: https://ci.example.org/hooks/singularity
      secretEnv: CI_HOOK_SECRET
  alerts:
    triage-accuracy:
      kind: objective
      entity: scenario:triage
      metric: accuracy
      warning: 0.9
      alert: 0.8
"""


def test_a_brain_declares_its_destinations_and_rules_and_a_sync_writes_them(tmp_path):
    checkout, commit = brain_repo(tmp_path / "brain", {"constitution/MANIFEST.yaml": GOOD})
    snapshot = load_brain(checkout, commit)
    assert snapshot.errors == []
    write_snapshot(snapshot)
    ops, ci = Destination.objects.get(name="ops"), Destination.objects.get(name="ci")
    assert (ops.kind, ops.url, ops.url_env, ops.events) == (
        "slack",
        "",
        "SLACK_OPS_URL",
        ["card.waiting", "watch.settled"],
    )
    assert (ci.kind, ci.url, ci.secret, ci.secret_env) == (
        "webhook",
        "https://ci.example.org/hooks/singularity",
        "",
        "CI_HOOK_SECRET",
    )
    rule = AlertRule.objects.get(name="triage-accuracy")
    assert (rule.kind, rule.entity, str(rule.warning), str(rule.alert)) == (
        "objective",
        "scenario:triage",
        "0.900000",
        "0.800000",
    )
    assert {d.source for d in Destination.objects.all()} == {"manifest"}

    commit = commit_files(checkout, {"constitution/MANIFEST.yaml": GOOD.split("    ci:")[0]})
    write_snapshot(load_brain(checkout, commit))
    assert not Destination.objects.get(name="ci").active and Destination.objects.get(name="ops").active
    assert not AlertRule.objects.get(name="triage-accuracy").active


@pytest.mark.parametrize(
    ("block", "refusal"),
    [
        ("notify: [1]", "notify: must be a mapping (destinations, alerts)"),
        (
            "notify:\n  destinations:\n    ops: {kind: email, url: 'https://x.example'}",
            "notify.destinations.ops.kind: must be one of webhook | slack, not 'email'",
        ),
        (
            "notify:\n  destinations:\n    ci: {kind: webhook, url: 'https://x.example', secret: hunter2}",
            "notify.destinations.ci.secret: a secret is never written in the brain: name its environment variable "
            "with secretEnv",
        ),
        (
            "notify:\n  destinations:\n    ops: {kind: slack, url: 'https://hooks.slack.com/services/x'}",
            "notify.destinations.ops.url: a Slack webhook address is a secret: name its environment variable with urlEnv",
        ),
        (
            "notify:\n  destinations:\n    ops: {kind: slack, urlEnv: X, events: [card.opened]}",
            "notify.destinations.ops.events: 'card.opened' is not an event",
        ),
        (
            "notify:\n  alerts:\n    a: {kind: objective, entity: scenario:triage, metric: m, warning: 0.5, alert: 0.9}",
            "notify.alerts.a.alert: must be at or under warning (0.5): it is the worse level",
        ),
        (
            "notify:\n  alerts:\n    a: {kind: spend, warning: lots, alert: 10}",
            "notify.alerts.a.warning: must be a number, not 'lots'",
        ),
    ],
)
def test_a_bad_block_is_refused_naming_the_field(tmp_path, block, refusal):
    checkout, commit = brain_repo(tmp_path / "brain", {"constitution/MANIFEST.yaml": block + "\n"})
    snapshot = load_brain(checkout, commit)
    assert any(e.startswith(f"constitution/MANIFEST.yaml: {refusal}") for e in snapshot.errors), snapshot.errors
    write_snapshot(snapshot)
    assert not Destination.objects.exists() and not AlertRule.objects.exists()


def test_a_refused_manifest_leaves_the_destinations_it_declared_before():
    manifest.sync({"notify": {"destinations": {"ops": {"kind": "slack", "urlEnv": "SLACK_OPS_URL"}}}})
    manifest.sync({"notify": {"destinations": {"ops": {"kind": "nope"}}}})
    manifest.sync({}, ["constitution/MANIFEST.yaml: loop.trigger: unknown key"])
    assert Destination.objects.get(name="ops").active
