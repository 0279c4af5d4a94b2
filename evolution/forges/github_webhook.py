"""GitHub's webhook deliveries to /github/webhook/: verified, recorded once, and a pull request event wakes the wait.

Seed 003, "How the engine notices the PR landed": an event only makes the
merge wait read the PR at once — the read decides. So a delivery is:

- refused 401 without a valid ``X-Hub-Signature-256`` (HMAC-SHA256 of the body
  under GITHUB_WEBHOOK_SECRET); with no secret configured every delivery is
  refused, and the wait stays on its poll;
- recorded by its ``X-GitHub-Delivery`` id (a redelivery carries the same id,
  and is answered 200 with nothing done);
- for a ``pull_request`` event of this repository whose action is closed,
  auto_merge_disabled or synchronize: ``pull_event(number)`` after the
  delivery's row commits, on a worker (``evolution.tasks.pull_moved``);
- a signed delivery that cannot be read (not JSON, text no database holds, a
  field the receiver reads of the wrong shape: ``github_shape``): 400 naming
  the field, nothing recorded;
- anything else: 200, nothing done, the row saying why.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from evolution.forges import github_pr_check, github_shape
from evolution.models import GitHubDelivery

log = logging.getLogger(__name__)

#: The pull request actions that can end or change the merge wait.
WAKING = frozenset({"closed", "auto_merge_disabled", "synchronize"})
#: Delivery rows older than this are dropped (a redelivery that late is not GitHub's practice).
KEEP = timedelta(days=30)
#: The task a woken wait runs on (``evolution.tasks.pull_moved``).
TASK = "evolution.tasks.pull_moved"


@dataclass(frozen=True)
class Answer:
    status: int
    text: str


def signed(secret: str, body: bytes, signature: str) -> bool:
    """Whether ``signature`` is ``sha256=<hex HMAC-SHA256 of body under secret>``."""
    # compare_digest refuses a str past ASCII (TypeError): such a signature matches nothing.
    if not secret or not signature.startswith("sha256=") or not signature.isascii():
        return False
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature.strip())


def _number(payload: dict[str, Any]) -> int | None:
    """The event's PR number (``github_shape.read`` checked it is one), from ``number`` or ``pull_request.number``."""
    number = payload.get("number")
    if number is None:
        number = (payload.get("pull_request") or {}).get("number")
    return number


def _outcome(event: str, payload: dict[str, Any]) -> tuple[str, int | None, str]:
    """(action, the PR number to wake or None, what was done in words)."""
    action = str(payload.get("action") or "")[:60]
    if event == "ping":
        return action, None, "ping: the webhook reaches this deployment"
    if event != "pull_request":
        return action, None, f"ignored: the {event or 'unnamed'} event is not one the loop reads"
    repository = str((payload.get("repository") or {}).get("full_name") or "")
    if repository.lower() != settings.GITHUB_REPOSITORY.lower():
        return action, None, f"ignored: {repository or 'no repository'} is not {settings.GITHUB_REPOSITORY}"
    number = _number(payload)
    if number is None:
        return action, None, "ignored: the event names no pull request number"
    if action not in WAKING:
        return action, None, f"ignored: pull_request {action or '(no action)'} does not move the wait"
    return action, number, f"woke the wait of PR #{number} ({action})"


def receive(headers: Any, body: bytes) -> Answer:
    """Verify, record and act on one delivery; return the HTTP answer (never raises for a bad delivery)."""
    secret = settings.GITHUB_WEBHOOK_SECRET
    if not secret:
        return Answer(401, "no webhook secret is configured (GITHUB_WEBHOOK_SECRET): every delivery is refused")
    if not signed(secret, body, headers.get("X-Hub-Signature-256", "")):
        return Answer(401, "the X-Hub-Signature-256 is missing or does not match this deployment's secret")
    event = str(headers.get("X-GitHub-Event", ""))[:60]
    delivery = str(headers.get("X-GitHub-Delivery", "")).strip()[:100] or "body:" + hashlib.sha256(body).hexdigest()
    for name, value in (("X-GitHub-Event", event), ("X-GitHub-Delivery", delivery)):
        if problem := github_shape.header_problem(name, value):
            return Answer(400, problem)
    try:
        payload = github_shape.read(body, event)
    except github_shape.Unreadable as exc:
        return Answer(400, str(exc))
    action, number, outcome = _outcome(event, payload)
    try:
        with transaction.atomic():
            GitHubDelivery.objects.create(
                delivery=delivery, event=event, action=action, number=number, outcome=outcome[:300]
            )
            if number is not None:
                transaction.on_commit(lambda: wake(number))
            github_pr_check.on_delivery(event, action, payload)  # opt-in: a person's PR starts the check
    except IntegrityError:
        return Answer(200, f"delivery {delivery} was handled already: nothing done")
    GitHubDelivery.objects.filter(received_at__lt=timezone.now() - KEEP).delete()
    log.info("github webhook: %s %s (%s): %s", event, action, delivery, outcome)
    return Answer(200, outcome)


def wake(number: int) -> None:
    """Ring the wait of PR ``number`` on a worker; read it here when no worker can be reached."""
    from evolution.forges.base import pull_event
    from singularity.queue import enqueue

    try:
        enqueue(TASK, number)
    except Exception as exc:  # noqa: BLE001 - a broker hiccup must not lose the event; the read happens here
        log.warning("github webhook: could not hand PR #%s to a worker (%s); reading it here", number, exc)
        try:
            pull_event(number)
        except Exception:  # the delivery stands; the wait's poll reads the PR on its next round
            log.exception("github webhook: reading PR #%s here failed; its poll will read it", number)


def last_delivery() -> GitHubDelivery | None:
    """The newest verified delivery (what the doctor reports), or None when GitHub never delivered."""
    return GitHubDelivery.objects.order_by("-received_at").first()
