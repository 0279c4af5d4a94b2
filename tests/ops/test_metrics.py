"""/metrics: Prometheus' text format; counters that move when runs are reported; guarded; no secret in a label."""

from __future__ import annotations

from decimal import Decimal

import pytest
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from grading.booking import LOST
from grading.models import Grade
from singularity.being.actions import create_being
from singularity.models import ApiToken, Being
from tests.grading.grading_helpers import make_entity, make_run

pytestmark = pytest.mark.django_db

NO_JUDGE = {"method": "none", "metrics": {"cost_usd": {"role": "guard", "floor": 1}}}
PERSONS_TEXT = "Dear support, my invoice 4711 is wrong"


def scrape(client, **extra) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics", **extra)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def report(alice, body):
    _, key = ApiToken.issue(alice, "script")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    response = api.post("/api/runs/report/", body, format="json")
    assert response.status_code == 201, response.content
    return key


def test_reporting_runs_moves_the_counters(client, alice):
    entity = make_entity("triage", evaluation=NO_JUDGE)
    before = scrape(client)
    run = {
        "entity": f"scenario:{entity.slug}",
        "status": "succeeded",
        "startedAt": "2026-03-01T11:00:00Z",
        "completedAt": "2026-03-01T11:00:05Z",
        "costUsd": "0.0042",
        "input": {"ticket": PERSONS_TEXT},
        "output": {"label": "billing"},
    }
    key = report(alice, [run, run, run])
    after = scrape(client)
    assert (
        value(after, "singularity_runs_ingested_total", source="api")
        == value(before, "singularity_runs_ingested_total", source="api") + 3
    )
    settled = sum(value(after, "singularity_grades_total", outcome=o) for o in ("landed", "failed", "lost"))
    pending = sum(value(after, "singularity_grades_pending", state=s) for s in ("booked", "grading"))
    assert settled + pending == Grade.objects.count()  # every booking counted once, settled or not
    # The report itself was timed, by its view's name and status.
    report_view = [
        k for k in after if k[0] == "singularity_http_request_duration_seconds_count" and ("status", "201") in k[1]
    ]
    assert report_view, sorted(k for k in after if "duration" in k[0])
    text = client.get("/metrics").content.decode()
    assert key not in text and PERSONS_TEXT not in text and "invoice" not in text


def test_grades_landed_failed_and_lost_are_told_apart(client):
    entity = make_entity("triage", evaluation=NO_JUDGE)
    runs = [make_run(entity) for _ in range(4)]
    for run, status, error in zip(
        runs, ["graded", "graded", "failed", "failed"], ["", "", "judge: no structured output", LOST], strict=True
    ):
        Grade.objects.create(
            execution=run,
            entity=entity,
            status=status,
            error=error,
            day=run.started_at.date(),
            due_at=run.started_at,
            cost_usd=Decimal("0.25"),
        )
    samples = scrape(client)
    assert value(samples, "singularity_grades_total", outcome="landed") == 2
    assert value(samples, "singularity_grades_total", outcome="failed") == 1
    assert value(samples, "singularity_grades_total", outcome="lost") == 1
    assert value(samples, "singularity_judge_spend_usd_total") == 1.0


def test_beings_balances_and_spend_are_labelled_by_id_never_by_text(client):
    being = create_being("ada")
    Being.objects.filter(pk=being.pk).update(remaining=Decimal("7.5"), api_spent=Decimal("2.5"))
    samples = scrape(client)
    assert value(samples, "singularity_being_balance_usd", being=str(being.pk)) == 7.5
    assert value(samples, "singularity_being_spent_usd", being=str(being.pk)) == 2.5
    text = client.get("/metrics").content.decode()
    assert being.system_prompt[:40] not in text and '"ada"' not in text


def test_queue_depth_cards_and_cycles_are_there(client):
    samples = scrape(client)
    names = {name for name, _ in samples}
    for queue in ("grading", "loop", "beings", "celery"):
        assert ("singularity_queue_depth", (("queue", queue),)) in samples
    assert {"singularity_cards_pending", "singularity_needs_you"} <= names
    assert all(v == 1 for (n, _), v in samples.items() if n == "singularity_metrics_source_up")


def test_metrics_need_the_token_or_an_allowed_address(client, settings):
    settings.METRICS_TOKEN = "s3cret-scrape-token"
    settings.METRICS_ALLOW = []
    assert client.get("/metrics").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    scrape(client, HTTP_AUTHORIZATION="Bearer s3cret-scrape-token")
    settings.METRICS_ALLOW = ["10.0.0.9"]
    scrape(client, REMOTE_ADDR="10.0.0.9")
    assert client.get("/metrics", REMOTE_ADDR="10.0.0.10").status_code == 403
    text = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-scrape-token").content.decode()
    assert "s3cret" not in text
