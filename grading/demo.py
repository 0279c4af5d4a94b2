"""The demo driver: keeps the demo brain's entities running so grades and cycles appear on their own.

Every ``DEMO_EVERY_SECS`` a periodic task calls ``drive_demo``: it starts the
next run of each keyword classifier — support triage and support urgency
(round-robin over the labelled tickets in the ``tickets.jsonl`` beside each,
read from the brain at the entity's commit) — and one
pricing run (its seed the number of demo pricing runs so far), each through
``grading.runners.run_entity`` with source ``demo``. The entities are found by
their paths in the demo brain, so a brain of your own with a "triage" of its
own is never driven.

The counters are the database's own counts of demo runs, so a restart loses
nothing. A run started less than half an interval ago makes the driver skip
that entity: a task delivered twice, or two schedulers, add no extra runs.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from pathlib import PurePosixPath
from typing import Any

from django.conf import settings
from django.utils import timezone

from grading.models import Entity, Execution
from singularity.brain.git import Checkout, GitError
from singularity.errors import ConfigError

log = logging.getLogger(__name__)

DEMO_EVERY_SECS = 20
TRIAGE_PATH = "features/support/triage/triage.scenario.md"
URGENCY_PATH = "features/support/urgency/urgency.scenario.md"
#: The demo's keyword classifiers, each driven over the labelled tickets beside it.
CLASSIFIER_PATHS = (TRIAGE_PATH, URGENCY_PATH)
PRICING_PATH = "features/pricing/pricing.scenario.md"
TICKETS_NAME = "tickets.jsonl"


class DemoError(ConfigError):
    """A demo entity cannot be driven (its labelled inputs are missing or malformed)."""


def _demo_entity(path: str) -> Entity | None:
    """Return the loaded, present entity defined at ``path``; None when the brain has none, or it is switched off."""
    entity = Entity.objects.filter(path=path, present=True, load_error="").first()
    return None if entity is None or entity.switched_off else entity


def _demo_runs(entity: Entity) -> int:
    """Return how many demo runs of ``entity`` were ever started."""
    return Execution.objects.filter(entity=entity, source=Execution.Source.DEMO).count()


def _started_recently(entity: Entity, now: datetime) -> bool:
    """Return whether a demo run of ``entity`` started less than half an interval before ``now``."""
    since = now - timedelta(seconds=DEMO_EVERY_SECS / 2)
    return Execution.objects.filter(
        entity=entity, source=Execution.Source.DEMO, started_at__gt=since, started_at__lte=now
    ).exists()


def read_tickets(checkout: Checkout, entity: Entity) -> list[dict[str, Any]]:
    """Return the labelled tickets beside ``entity``'s file, as of its commit; DemoError naming the file when unreadable."""
    path = str(PurePosixPath(entity.path).parent / TICKETS_NAME)
    try:
        raw = checkout.read_at(entity.commit, path)
    except GitError:
        raise DemoError(f"{entity}: no {path} at commit {entity.commit[:12]}") from None
    tickets: list[dict[str, Any]] = []
    for number, line in enumerate(raw.decode().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            ticket = json.loads(line)
        except ValueError as exc:
            raise DemoError(f"{entity}: {path} line {number} is not JSON: {exc}") from None
        if not isinstance(ticket, dict) or not isinstance(ticket.get("text"), str):
            raise DemoError(f'{entity}: {path} line {number} has no "text" string')
        tickets.append(ticket)
    if not tickets:
        raise DemoError(f"{entity}: {path} holds no tickets")
    return tickets


def next_triage_input(checkout: Checkout, entity: Entity) -> dict[str, Any]:
    """Return the ticket after the last one the driver sent (round-robin by the count of demo runs)."""
    tickets = read_tickets(checkout, entity)
    return tickets[_demo_runs(entity) % len(tickets)]


def next_pricing_input(entity: Entity) -> dict[str, Any]:
    """Return {"seed": n}, n the number of demo pricing runs so far: every run meets a new market."""
    return {"seed": _demo_runs(entity)}


def drive_demo(now: datetime | None = None) -> int:
    """Start the next run of each demo classifier and a pricing run; return how many runs were started.

    Does nothing (returns 0) when ``settings.DEMO_DRIVER`` is off or the brain
    has no demo entities. A demo entity whose inputs cannot be read raises
    DemoError after the other one was driven.
    """
    if not settings.DEMO_DRIVER:
        return 0
    from grading.runners import run_entity
    from grading.sync import current_checkout

    now = now or timezone.now()
    started = 0
    errors: list[str] = []
    for path in CLASSIFIER_PATHS:
        classifier = _demo_entity(path)
        if classifier is None or _started_recently(classifier, now):
            continue
        try:
            ticket = next_triage_input(current_checkout(), classifier)
        except DemoError as exc:
            errors.append(str(exc))
        else:
            run_entity(classifier, input=ticket, source=Execution.Source.DEMO)
            started += 1
    pricing = _demo_entity(PRICING_PATH)
    if pricing is not None and not _started_recently(pricing, now):
        run_entity(pricing, input=next_pricing_input(pricing), source=Execution.Source.DEMO)
        started += 1
    if errors:
        raise DemoError("; ".join(errors))
    log.debug("demo driver started %d run(s)", started)
    return started
