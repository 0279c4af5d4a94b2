"""The loop's outbound events that no hitl notice carries (the others go out with their notice, ``hitl.actions``).

One function an event, called in one line where the thing happens; ``singularity.notify.events.emit`` writes the
deliveries in the caller's transaction (idempotent on its key) and sends them after commit.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from singularity.notify.events import emit


def _name(entity: Any) -> str:
    return entity.name or entity.slug


def check_answered(cycle: Any, rnd: Any, verdict: str, reason: str) -> None:
    emit(
        "check.answered",
        key=f"{cycle.pk}:{rnd.number}:{rnd.checked_sha}",
        title=f"{_name(cycle.entity)}: the pre-merge check of PR #{rnd.pr_number} answered {verdict}",
        text=reason,
        url=cycle.get_absolute_url(),
        verdict=verdict,
        pr=rnd.pr_number,
        pr_url=rnd.pr_url,
        cycle=cycle.pk,
        entity=f"{cycle.entity.target_kind}:{cycle.entity.slug}",
    )


def reverted(cycle: Any, rnd: Any) -> None:
    emit(
        "reverted",
        key=f"{cycle.pk}:{rnd.revert_pr_number}",
        title=f"{_name(cycle.entity)}: cycle {cycle.pk}'s change was reverted (PR #{rnd.revert_pr_number} merged)",
        text=cycle.reason,
        url=cycle.get_absolute_url(),
        cycle=cycle.pk,
        entity=f"{cycle.entity.target_kind}:{cycle.entity.slug}",
    )


def judge_unhealthy(cycle: Any, reason: str) -> None:
    emit(
        "judge.unhealthy",
        key=f"watch:{cycle.pk}",
        title=f"{_name(cycle.entity)}: the judge is unhealthy (cycle {cycle.pk}'s watch)",
        text=reason,
        url=cycle.get_absolute_url(),
        cycle=cycle.pk,
        entity=f"{cycle.entity.target_kind}:{cycle.entity.slug}",
    )


def month_reached(entity: Any, words: str | None, now: datetime) -> str | None:
    """Send "the monthly ceiling reached" once an entity and month when ``words`` (the refusal) says so; return it."""
    if words:
        emit(
            "budget.ceiling",
            key=f"{entity.pk}:{now:%Y-%m}",
            title=f"{_name(entity)}: the loop's monthly spend ceiling is reached",
            text=words,
            url=entity.get_absolute_url(),
            entity=f"{entity.target_kind}:{entity.slug}",
        )
    return words
