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


# --- Odd headers and payload shapes (issue 27): a refusal naming the field, never a 500 -------------------------


def test_a_signature_that_is_not_ascii_is_refused_401_like_any_bad_signature(woken):
    assert post(event(), signature="sha256=\xe9" + "0" * 63).status_code == 401
    assert post(event(), signature="sha256=\u20ac").status_code == 401
    assert woken == [] and not GitHubDelivery.objects.exists()


@pytest.mark.parametrize(
    ("header", "value"),
    [("X-GitHub-Delivery", "abc\x00def"), ("X-GitHub-Event", "pull_request\x00")],
)
def test_a_nul_in_a_header_the_receiver_records_is_refused_400_naming_it(woken, header, value):
    body = json.dumps(event()).encode()
    signature = "sha256=" + hmac.new(WEBHOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
    headers = {"X-GitHub-Event": "pull_request", "X-GitHub-Delivery": "d-1", "X-Hub-Signature-256": signature}
    headers[header] = value
    answer = Client().post(URL, data=body, content_type="application/json", headers=headers)
    assert answer.status_code == 400
    assert answer.content.decode().startswith(f"{header}: contains a NUL")
    assert woken == [] and not GitHubDelivery.objects.exists()


def odd(**changes) -> dict:
    payload = event()
    payload.update(changes)
    return payload


@pytest.mark.parametrize(
    ("payload", "named"),
    [
        (odd(repository="acme/brain"), "repository: expected an object, got text"),
        (odd(repository={"full_name": 7}), "repository.full_name: expected text, got an integer"),
        (odd(pull_request=[1, 2]), "pull_request: expected an object, got a list"),
        (odd(number=10**30), f"number: {10**30} is not a pull request number (1 to 2147483647)"),
        (odd(number=0), "number: 0 is not a pull request number (1 to 2147483647)"),
        (odd(number=-3), "number: -3 is not a pull request number (1 to 2147483647)"),
        (odd(number=True), "number: expected an integer, got a boolean"),
        (odd(number="12"), "number: expected an integer, got text"),
        (odd(number=1.5), "number: expected an integer, got a number"),
        (odd(number=None, pull_request={"number": True}), "pull_request.number: expected an integer, got a boolean"),
        (odd(action=["closed"]), "action: expected text, got a list"),
        (odd(action="clo\x00sed"), "action: contains a NUL character"),
        (odd(sender={"login": "\ud800"}), "sender.login: contains a lone surrogate (U+D800)"),
    ],
)
def test_a_signed_pull_request_event_of_an_odd_shape_is_refused_400_naming_the_field(woken, payload, named):
    answer = post(payload)
    assert answer.status_code == 400, answer.content
    assert answer.content.decode().startswith(named)
    assert woken == [] and not GitHubDelivery.objects.exists()


def test_a_lone_surrogate_escaped_in_the_json_is_refused_naming_the_field(woken):
    answer = post(None, raw=b'{"action": "closed", "number": 12, "title": "\\ud800"}')
    assert answer.status_code == 400 and answer.content.decode().startswith("title: contains a lone surrogate")
    assert woken == []


def test_a_body_nested_100000_deep_is_refused_400(woken):
    answer = post(None, raw=b'{"a":' * 100_000 + b"1" + b"}" * 100_000)
    assert answer.status_code == 400 and "nested more than" in answer.content.decode()
    assert woken == []


def test_a_body_that_is_not_utf8_is_refused_400(woken):
    answer = post(None, raw=b'{"action": "\xe9"}')
    assert answer.status_code == 400 and "not UTF-8" in answer.content.decode()


def test_an_event_the_loop_does_not_read_is_not_judged_by_the_pull_request_shape(woken):
    answer = post({"repository": "a string", "number": True}, kind="push")
    assert answer.status_code == 200 and woken == []
    assert "push event" in GitHubDelivery.objects.get().outcome


def test_the_largest_pull_request_number_is_woken(woken):
    assert post(event(number=2**31 - 1)).status_code == 200
    assert woken == [2**31 - 1]
