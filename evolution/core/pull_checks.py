"""A person's pull request checked before it merged (issue 35), as a watch it confounds names it.

``evolution.prcheck`` records each check (``PullCheck``); ``named`` adds to a confounding commit the check of the
PR that carried it — the PR whose checked head is that commit or has it in its history — so the watch's reason
says "… (PR #12, checked regressed before its merge)" instead of an unexplained hand edit.
"""

from __future__ import annotations

from typing import Any

from evolution.models import PullCheck

#: The newest checks read to find the one that carried a commit.
RECENT = 50


def _carried(sha: str, head: str) -> bool:
    from grading.methods import brain_checkout
    from singularity.brain.git import GitError, git

    try:
        git("merge-base", "--is-ancestor", sha, head, cwd=brain_checkout(None).path)
    except GitError:
        return False
    return True


def named(edit: dict[str, Any] | None) -> dict[str, Any] | None:
    """``edit`` with ``check`` ({number, verdict, reason, head}) when a checked PR carried its commit."""
    if not edit:
        return edit
    checks = list(PullCheck.objects.order_by("-created_at")[:RECENT])
    found = next((c for c in checks if c.head_sha == edit["sha"]), None)
    found = found or next((c for c in checks if _carried(edit["sha"], c.head_sha)), None)
    if found is None:
        return edit
    check = {"number": found.number, "verdict": found.verdict, "reason": found.reason, "head": found.head_sha}
    return {**edit, "check": check}


def words(edit: dict[str, Any]) -> str:
    """ " (PR #12, checked regressed before its merge)", or "" for a commit no check covered."""
    check = edit.get("check")
    return f" (PR #{check['number']}, checked {check['verdict']} before its merge)" if check else ""


def of_entity(entity: Any, *, limit: int = 5) -> list[PullCheck]:
    """The newest checks of pull requests that changed ``entity``'s files (its page's story), newest first."""
    key = f" {entity.target_kind}:{entity.slug} "
    return list(PullCheck.objects.filter(touched__contains=key).order_by("-created_at")[:limit])
