"""The pull requests page, whichever forge it is; the local forge's request pages with its diff, Merge and Close.

On GitHub the list is the repository's newest requests, each linking to its
page on GitHub (where a person merges); ``/evolution/pulls/<n>/`` sends there.

Merging and closing go through ``evolution.pulls`` (as ``/api/forge/pulls/``
does): ``LocalForge.merge_pull`` — the one door, with branch protection —
then the brain synced and the loop's merge wait rung. A refusal is shown on
the request's page in the forge's own words.
"""

from __future__ import annotations

import logging
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from evolution import prcheck, pulls
from evolution.forges import get_forge
from evolution.forges.local import LocalForge
from evolution.models import PullRequest
from singularity.errors import SingularityError

log = logging.getLogger(__name__)

#: The diff shows at most this many lines; the rest is named, not drawn.
DIFF_LINES = 5000
#: How many of a remote forge's newest pull requests the list shows.
REMOTE_LIMIT = 100


@login_required
def pull_list(request: HttpRequest) -> HttpResponse:
    """The forge's pull requests: the local forge's rows (open first) or, on GitHub, the repository's newest."""
    forge = get_forge()
    if forge.name != "local":
        return _remote_list(request, forge)
    rows = pulls.rows(list(pulls.open_first()))
    return render(request, "evolution/pull_list.html", {"rows": rows, "required": LocalForge().required_statuses()})


def _remote_list(request: HttpRequest, forge: Any) -> HttpResponse:
    """The pull requests a remote forge lists (GitHub: newest first), each linking to its page there."""
    problem = ""
    listed: list[Any] = []
    try:
        listed = forge.list_pulls(limit=REMOTE_LIMIT)
    except SingularityError as exc:
        problem = str(exc)
    context = {"pulls": listed, "forge": forge.name, "problem": problem, "limit": REMOTE_LIMIT}
    return render(request, "evolution/pull_list_remote.html", context)


@login_required
def pull_detail(request: HttpRequest, number: int) -> HttpResponse:
    """One pull request: its body, branches, statuses (required ones marked), diff, and Merge / Close for staff.

    On a remote forge the request lives there: this address sends the person to its page.
    """
    remote = get_forge()
    if remote.name != "local":
        return redirect(remote.pull_url(number))
    forge = LocalForge()
    pull = get_object_or_404(PullRequest, number=number)
    problem = ""
    diff_lines: list[tuple[str, str]] = []
    try:
        forge.get_pull(number)  # follows a head branch that moved
        pull.refresh_from_db()
        diff_lines = diff_classes(forge.diff(number))
    except SingularityError as exc:
        problem = str(exc)
    required = forge.required_statuses()
    statuses = pulls.marked(forge.statuses(pull.head_sha), required)
    blockers = forge.merge_blockers(pull) if pull.state == PullRequest.State.OPEN else []
    context = {
        "pull": pull,
        "statuses": statuses,
        "missing_required": [c for c in required if c not in {s["status"].context for s in statuses}],
        "blockers": blockers,
        "diff_lines": diff_lines[:DIFF_LINES],
        "diff_cut": max(0, len(diff_lines) - DIFF_LINES),
        "problem": problem,
        "can_act": request.user.is_staff and pull.state == PullRequest.State.OPEN,
        "unproven": _unproven(number),
        "checked": prcheck.latest(number),
    }
    return render(request, "evolution/pull_detail.html", context)


def _unproven(number: int) -> str:
    """The check's reason when this PR's check could not show the change works and a person may merge anyway."""
    from evolution.loop import check
    from evolution.models import Round

    rnd = Round.objects.filter(pr_number=number).order_by("-cycle_id", "-number").first()
    if rnd is None or not check.vouchable(rnd):
        return ""
    return str((rnd.check_verdict or {}).get("reason") or "the check could not show the change works")


@login_required
@require_POST
def pull_merge(request: HttpRequest, number: int) -> HttpResponse:
    """Merge the request (staff only); a refusal is shown on its page in the forge's words."""
    if not request.user.is_staff:
        return HttpResponseForbidden("Only staff may merge a pull request.")
    get_object_or_404(PullRequest, number=number)
    try:
        moved = pulls.merge(number, by=request.user.get_username(), anyway=request.POST.get("anyway") == "1")
    except SingularityError as exc:  # ForgeError, or the forge's repository unreachable
        messages.error(request, f"Not merged: {exc}")
        return redirect("evolution:pull", number=number)
    messages.success(request, f"Merged PR #{number} as {moved.info.merge_sha[:12]}.")
    for problem in moved.problems:
        messages.warning(request, problem)
    return redirect("evolution:pull", number=number)


@login_required
@require_POST
def pull_check(request: HttpRequest, number: int) -> HttpResponse:
    """Run the pre-merge check on the request ("Check this PR"); its answer is shown on the page and posted on it."""
    get_object_or_404(PullRequest, number=number)
    try:
        checked = prcheck.check_pr(number, by=request.user.get_username())
    except SingularityError as exc:  # not open, the forge or git unreachable
        messages.error(request, f"Not checked: {exc}")
        return redirect("evolution:pull", number=number)
    messages.success(request, f"The pre-merge check answered {checked.verdict}: {checked.reason}")
    return redirect("evolution:pull", number=number)


@login_required
@require_POST
def pull_close(request: HttpRequest, number: int) -> HttpResponse:
    """Close the request unmerged (staff only)."""
    if not request.user.is_staff:
        return HttpResponseForbidden("Only staff may close a pull request.")
    get_object_or_404(PullRequest, number=number)
    try:
        moved = pulls.close(number, by=request.user.get_username())
    except SingularityError as exc:  # ForgeError, or the forge's repository unreachable
        messages.error(request, f"Not closed: {exc}")
        return redirect("evolution:pull", number=number)
    messages.success(request, f"Closed PR #{number}.")
    for problem in moved.problems:
        messages.warning(request, problem)
    return redirect("evolution:pull", number=number)


def diff_classes(diff: str) -> list[tuple[str, str]]:
    """Each line of a unified diff with a CSS class: file, meta, hunk, add, del or ctx."""
    out: list[tuple[str, str]] = []
    for line in diff.splitlines():
        if line.startswith("diff --git"):
            css = "file"
        elif line.startswith(("+++", "---", "index ", "new file", "deleted file", "similarity", "rename ", "Binary")):
            css = "meta"
        elif line.startswith("@@"):
            css = "hunk"
        elif line.startswith("+"):
            css = "add"
        elif line.startswith("-"):
            css = "del"
        else:
            css = "ctx"
        out.append((css, line))
    return out
