"""Opt-in (``LOOP_CHECK_PULLS``): a GitHub pull request opened, pushed to or reopened starts the pre-merge check.

Read from ``github_webhook.receive`` for each new delivery (a redelivery does nothing twice). The task
(``evolution.tasks.check_person_pr``) leaves the loop's own PRs to the loop's check and runs
``evolution.prcheck.check_pr`` on every other one.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction

ACTIONS = frozenset({"opened", "synchronize", "reopened"})
TASK = "evolution.tasks.check_person_pr"


def on_delivery(event: str, action: str, payload: dict[str, Any]) -> None:
    """Inside the delivery's transaction: enqueue the check after commit when this event asks for one."""
    if not settings.LOOP_CHECK_PULLS or event != "pull_request" or action not in ACTIONS:
        return
    repository = str((payload.get("repository") or {}).get("full_name") or "")
    number = payload.get("number") or (payload.get("pull_request") or {}).get("number")
    if repository.lower() != settings.GITHUB_REPOSITORY.lower() or not isinstance(number, int):
        return
    from singularity.queue import enqueue

    transaction.on_commit(lambda: enqueue(TASK, number))
