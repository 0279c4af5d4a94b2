"""GitHub's webhook receiver, /github/webhook/ (seed 003 "How the engine notices the PR landed"; R12.12, R12.23).

A delivery is verified by its X-Hub-Signature-256 (401 without a good one, and
401 for every delivery when no secret is configured), recorded once by its
X-GitHub-Delivery id (a redelivery does nothing), and a pull_request event
that can move the wait (closed, auto_merge_disabled, synchronize) only wakes
the wait — 200 and nothing done for anything else.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid

import pytest
from django.test import Client

from evolution.forges import base
from evolution.models import GitHubDelivery
from tests.fakes.github import WEBHOOK_SECRET

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/github/webhook/"


@pytest.fixture
def woken(settings, monkeypatch, celery_eager) -> list[int]:
    """The PR numbers the receiver wakes, heard instead of the machine's wait."""
    settings.GITHUB_REPOSITORY = "acme/brain"
    settings.GITHUB_WEBHOOK_SECRET = WEBHOOK_SECRET
    heard: list[int] = []
    monkeypatch.setattr(base, "PULL_LISTENERS", [heard.append])
    return heard


def event(action: str = "closed", number: int = 12, *, repository: str = "acme/brain") -> dict:
    return {
        "action": action,
        "number": number,
        "pull_request": {"number": number, "state": "closed", "merged": True},
        "repository": {"full_name": repository},
        "sender": {"login": "alice"},
    }


def post(
    payload,
    *,
    kind: str = "pull_request",
    delivery: str | None = None,
    secret: str = WEBHOOK_SECRET,
    signature: str | None = None,
    raw: bytes | None = None,
):
    body = raw if raw is not None else json.dumps(payload).encode()
    headers = {"X-GitHub-Event": kind, "X-GitHub-Delivery": delivery or str(uuid.uuid4())}
    if signature is None:
        signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if signature:
        headers["X-Hub-Signature-256"] = signature
    return Client().post(URL, data=body, content_type="application/json", headers=headers)


@pytest.mark.parametrize("action", ["closed", "auto_merge_disabled", "synchronize"])
def test_a_pull_request_event_that_moves_the_wait_wakes_it(woken, action):
    answer = post(event(action, 12))
    assert answer.status_code == 200 and woken == [12]
    row = GitHubDelivery.objects.get()
    assert (row.event, row.action, row.number) == ("pull_request", action, 12)
    assert row.outcome == f"woke the wait of PR #12 ({action})"


def test_a_missing_or_bad_signature_is_refused_401_and_nothing_is_recorded(woken):
    assert post(event(), signature="").status_code == 401
    assert post(event(), secret="not-the-secret").status_code == 401
    assert post(event(), signature="sha1=" + "0" * 40).status_code == 401
    assert woken == [] and not GitHubDelivery.objects.exists()


def test_with_no_secret_configured_every_signed_delivery_is_refused(woken, settings):
    settings.GITHUB_WEBHOOK_SECRET = ""
    answer = post(event(), secret="")
    assert answer.status_code == 401 and "GITHUB_WEBHOOK_SECRET" in answer.content.decode()
    assert woken == []


def test_a_redelivery_of_the_same_delivery_does_nothing(woken):
    delivery = str(uuid.uuid4())
    assert post(event(), delivery=delivery).status_code == 200
    again = post(event(), delivery=delivery)
    assert again.status_code == 200 and "handled already" in again.content.decode()
    assert woken == [12] and GitHubDelivery.objects.count() == 1


@pytest.mark.parametrize(
    ("kind", "payload", "why"),
    [
        ("push", {"ref": "refs/heads/main", "repository": {"full_name": "acme/brain"}}, "push event"),
        ("pull_request", event("labeled"), "pull_request labeled does not move the wait"),
        ("pull_request", event("opened"), "pull_request opened does not move the wait"),
        ("pull_request", event(repository="acme/other"), "acme/other is not acme/brain"),
        ("ping", {"zen": "Keep it logically awesome.", "hook_id": 1}, "ping"),
    ],
)
def test_an_event_the_loop_does_not_use_is_answered_200_and_nothing_done(woken, kind, payload, why):
    answer = post(payload, kind=kind)
    assert answer.status_code == 200 and woken == []
    assert why in GitHubDelivery.objects.get().outcome


def test_a_signed_body_that_is_not_json_is_a_bad_request(woken):
    assert post(None, raw=b"not json").status_code == 400
    assert woken == []


def test_only_a_post_is_read(woken):
    assert Client().get(URL).status_code == 405


def test_a_wake_that_fails_leaves_the_delivery_recorded_and_answered(woken, monkeypatch):
    def broken(number):
        raise RuntimeError("the machine fell over")

    monkeypatch.setattr(base, "PULL_LISTENERS", [broken])
    monkeypatch.setattr("singularity.queue.enqueue", lambda *a: (_ for _ in ()).throw(OSError("no broker")))
    assert post(event()).status_code == 200
    assert GitHubDelivery.objects.count() == 1
