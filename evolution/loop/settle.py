"""The settle: the one way a cycle ends — its terminal written once, its rounds closed, its lesson kept (seed 003).

The machine calls these in order (``evolution.loop.machine.settle``): the
terminal (``write_terminal``, a second settle of a settled cycle does
nothing), the revert when one is due, the phase and the claim (``close``),
the lesson (``write_lesson``: a lesson the archive refused is kept on
``lesson_error``, never dropped), then, after the transaction, what people
hear (``notify``, the breaker's announcement, the idea's author).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction

from evolution.core import cycles
from evolution.loop import lessons
from evolution.models import Cycle, Round

log = logging.getLogger(__name__)


def write_terminal(
    cycle: Cycle,
    status: str,
    *,
    reason: str,
    watch_verdict: dict[str, Any] | None,
    now: datetime,
    locked: bool = False,
) -> tuple[Cycle, bool]:
    """Lock the cycle's row and write its terminal; return (the row, whether this call settled it).

    Call inside a transaction. A cycle already settled is returned as it is, with False. ``locked``: the caller
    read ``cycle`` under its row lock in this same transaction (the watch's read), so it is the row as it stands and
    is written as it is rather than read again.
    """
    fresh = cycle if locked else Cycle.objects.select_for_update().get(pk=cycle.pk)
    if fresh.status:
        return fresh, False
    fields: dict[str, Any] = {
        "status": status,
        "reason": reason,
        "completed_at": now,
        "moved_at": now,
        "next_poll_at": None,
    }
    if watch_verdict is not None:
        fields["watch_verdict"] = watch_verdict
    Cycle.objects.filter(pk=cycle.pk).update(**fields)
    for name, value in fields.items():
        setattr(fresh, name, value)
    return fresh, True


def mark_reverted_by_policy(cycle: Cycle) -> None:
    Cycle.objects.filter(pk=cycle.pk).update(reverted_by_policy=True)
    cycle.reverted_by_policy = True


def close(cycle: Cycle, *, reverting: bool, now: datetime) -> None:
    """End the live phase (a cycle following its revert keeps the claim) and close its applied rounds."""
    if not reverting:
        cycles.advance(cycle, Cycle.Phase.SETTLED, claim=None, now=now)
    Round.objects.filter(cycle=cycle, status=Round.Status.APPLIED).update(status=Round.Status.CLOSED)


def write_lesson(cycle: Cycle) -> None:
    """Write the settled cycle's lesson and credit the lessons it cited; a refusal is kept on ``lesson_error``."""
    try:
        with transaction.atomic(), lessons.read_rounds_once(cycle):
            lessons.write_for(cycle)
            lessons.credit(cycle)
    except Exception as exc:  # noqa: BLE001 - a lesson the archive refused is kept on the row, never dropped silently
        log.exception("loop: the lesson of cycle %s was refused", cycle.pk)
        error = f"{type(exc).__name__}: {exc}"
        Cycle.objects.filter(pk=cycle.pk).update(lesson_error=error)
        cycle.lesson_error = error


WORDS = {
    Cycle.Status.VALIDATED: "kept: validated",
    Cycle.Status.UNVALIDATED: "unverified: kept without proof",
    Cycle.Status.SKIPPED: "skipped",
    Cycle.Status.FAILED: "failed",
}


def notify(cycle: Cycle) -> None:
    """Tell people how the cycle settled (a notice; a refusal row is not news)."""
    from hitl.actions import post_notice

    if cycle.status == Cycle.Status.SKIPPED and not cycle.analysed:
        return
    if cycle.status == Cycle.Status.REGRESSED:
        words = "regressed: revert opened" if cycle.phase == Cycle.Phase.REVERTING else "regressed"
    elif cycle.status == Cycle.Status.UNVALIDATED and cycle.reverted_by_policy:
        words = "unproven: reverted by policy (watch.onInconclusive: revert), revert opened"
    else:
        words = WORDS.get(cycle.status, cycle.status)
    post_notice(
        producer=cycles.NOTICE_PRODUCER,
        kind="settled",
        title=f"{cycle.entity.name or cycle.entity.slug}: cycle {cycle.pk} {words}",
        text=cycle.reason,
        url=f"{settings.SINGULARITY_PUBLIC_URL}{cycle.get_absolute_url()}" if settings.SINGULARITY_PUBLIC_URL else "",
        subject=f"cycle {cycle.pk}",
    )
