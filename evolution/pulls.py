"""The local forge's pull requests as a person reads and moves them: the PR pages and ``/api/forge/pulls/`` both call here.

``rows`` lists them (open first, each with its statuses, the required ones
marked), ``merge`` and ``close`` go through ``LocalForge`` — the one door,
with branch protection — and then do what follows a person's merge or close:
sync the brain at once after a merge and ring the cycle that waits on the
request (``evolution.loop.machine.on_pull_event``), so it moves without
waiting for its poll. Neither follow-up undoes the merge when it fails: the
``Moved`` answer says what did not happen, and the next sync and the wait's
own poll catch up.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Case, IntegerField, QuerySet, Value, When

from evolution.forges.base import PullInfo
from evolution.forges.local import LocalForge, go_live
from evolution.models import CommitStatus, PullRequest

log = logging.getLogger(__name__)


@dataclass
class Moved:
    """What a merge or a close did: the request as the forge answered it, and each follow-up that did not happen."""

    info: PullInfo
    problems: list[str] = field(default_factory=list)


def open_first(state: str | None = None) -> QuerySet[PullRequest]:
    """The local forge's requests, open ones first, then newest first; only ``state`` when given."""
    pulls = PullRequest.objects.annotate(
        open_first=Case(
            When(state=PullRequest.State.OPEN, then=Value(0)), default=Value(1), output_field=IntegerField()
        )
    ).order_by("open_first", "-number")
    return pulls.filter(state=state) if state else pulls


def marked(statuses: list[CommitStatus], required: list[str]) -> list[dict[str, Any]]:
    """Statuses as rows: each with whether branch protection requires it."""
    return [{"status": s, "required": s.context in required} for s in statuses]


def rows(pulls: list[PullRequest]) -> list[dict[str, Any]]:
    """``[{pull, statuses}]`` for ``pulls``, every head's statuses read in one query."""
    by_sha: dict[str, list[CommitStatus]] = {}
    for status in CommitStatus.objects.filter(sha__in={p.head_sha for p in pulls}).order_by("context"):
        by_sha.setdefault(status.sha, []).append(status)
    required = LocalForge().required_statuses()
    return [{"pull": p, "statuses": marked(by_sha.get(p.head_sha, []), required)} for p in pulls]


def merge(number: int, *, by: str, anyway: bool = False) -> Moved:
    """Merge PR ``number`` as ``by``, sync the brain and ring its cycle; ForgeError (nothing merged) naming why not.

    ``anyway``: the person merges a PR whose pre-merge check could not show the change works, on their word
    (``singularity/validation`` turns success "merged on <by>'s word" first; a PR without such a check is
    merged as it stands, branch protection deciding).
    """
    if anyway:
        from evolution.loop.machine import vouch_for_merge

        vouch_for_merge(number, by=by)
    info = LocalForge().merge_pull(number, by=by)
    moved = Moved(info)
    failed = go_live(number)
    if failed:
        moved.problems.append(f"The brain was not synced at once ({failed}); the next sync picks the merge up.")
    _ring(number, moved)
    return moved


def close(number: int, *, by: str) -> Moved:
    """Close PR ``number`` unmerged as ``by`` and ring its cycle; ForgeError (nothing closed) naming why not."""
    moved = Moved(LocalForge().close_pull(number, by=by))
    _ring(number, moved)
    return moved


def _ring(number: int, moved: Moved) -> None:
    """Tell the loop's merge wait the request moved; a failure is logged and said, the wait's poll reads it."""
    from evolution.loop.machine import on_pull_event

    try:
        on_pull_event(number)
    except Exception:  # noqa: BLE001 - the merge itself stands; the wait's poll will read it
        log.exception("evolution.loop.machine.on_pull_event(%s) failed", number)
        moved.problems.append("The cycle was not told at once; it will notice on its next poll.")
