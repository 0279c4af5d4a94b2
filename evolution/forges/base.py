"""The forge interface: what the loop needs from whoever hosts the brain's pull requests.

The loop never pushes to the default branch and never merges on its own
authority: it pushes a branch, opens a pull request, sets commit statuses,
reads the request back (polling with backoff), and — under ``merge: auto``,
issue 6 — arms the forge's own auto-merge. A forge refuses the arm on a
request that is already clean (every required check green on its head:
GitHub's "Pull request is in clean status"); then ``arm_or_merge`` merges it
through the forge bound to the same head and method — what the arm would have
done at that moment (issue 32, docs/decisions.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from singularity.errors import UpstreamError

DIFF_GATE = "singularity/diff-gate"
VALIDATION = "singularity/validation"
#: GitHub refuses a pull request body or a comment this long or longer (HTTP 422).
BODY_MAX = 65_536
#: Where a cut body stops: well below GitHub's bound, leaving room for the line that says where the rest is.
BODY_CUT = BODY_MAX - 1_000

#: What fixes a status the forge refuses: the permission the loop's credential needs (seed 003, "What your
#: repository must require").
STATUS_FIX = (
    "give the loop's credential permission to post commit statuses — statuses: write on the GitHub App's "
    "installation, Commit statuses: Read and write on a fine-grained GH_TOKEN (or GITHUB_TOKEN), repo on a classic "
    "one — and check it with the doctor (GitHub merge gate)"
)

#: GitHub's words refusing an arm on a request every required check already passed (the local forge says the same).
CLEAN_STATUS = "Pull request is in clean status"


class ForgeError(UpstreamError):
    """The forge refused or failed an operation; the message names which and why.

    ``until``: set when the forge is rate-limited until then (GitHub): a caller waits until it rather than failing.
    """

    until: datetime | None = None


@dataclass(frozen=True)
class PullInfo:
    number: int
    url: str
    state: str  # open | merged | closed
    head: str
    head_sha: str
    base: str
    merge_sha: str = ""
    merged_at: datetime | None = None
    merged_by: str = ""
    closed_at: datetime | None = None
    #: The armed auto-merge, when one stands: {"method": ..., "sha": ...}; empty otherwise.
    auto_merge: dict | None = None
    title: str = ""
    #: GitHub's word for whether it would merge now (clean, blocked, behind, dirty, unstable, unknown); "" elsewhere.
    mergeable_state: str = ""
    opened_at: datetime | None = None


class Forge(Protocol):
    name: str

    def remote_url(self) -> str:
        """The git URL the loop clones from and pushes branches to."""

    def default_branch(self) -> str:
        """The branch changes land on (the brain's BRAIN_BRANCH)."""

    def open_pull(self, *, head: str, base: str, title: str, body: str) -> PullInfo:
        """Open a pull request of the pushed branch ``head`` into ``base``."""

    def get_pull(self, number: int) -> PullInfo:
        """Read a pull request back as the forge holds it now."""

    def open_pull_of(self, head: str, base: str) -> PullInfo | None:
        """The open pull request of branch ``head`` into ``base``, or None (a retried step adopts it)."""

    def set_status(self, sha: str, context: str, state: str, description: str) -> None:
        """Set a commit status (pending | success | failure | error) on ``sha``."""

    def close_pull(self, number: int, *, by: str) -> PullInfo:
        """Close a pull request unmerged."""

    def comment(self, number: int, body: str, *, by: str) -> None:
        """Leave a comment (Markdown) on a pull request, open or closed."""

    def pull_url(self, number: int) -> str:
        """Where a person reads (and, on the local forge, merges) the request."""

    def arm_auto_merge(self, number: int, *, method: str, sha: str, by: str) -> PullInfo:
        """Arm the forge's own auto-merge bound to head ``sha`` (merge: auto); ForgeError with the refusal's reason."""

    def disarm_auto_merge(self, number: int) -> PullInfo:
        """Take an armed auto-merge back out (nothing when none stands)."""

    def merge_checked(self, number: int, *, method: str, sha: str, by: str) -> PullInfo:
        """Merge ``number`` with ``method`` only if its head is still ``sha`` and every required check passed."""

    def list_pulls(self, *, limit: int = 100) -> list[PullInfo]:
        """The forge's pull requests, newest first (the dashboard's list)."""


def fit(body: str, *, rest: str) -> str:
    """``body`` as GitHub takes it: under ``BODY_MAX`` characters, cut at a line where it is longer, with a last
    line saying it was cut and that the whole of it is at ``rest`` (the cycle's story).
    """
    if len(body) < BODY_MAX:
        return body
    head = body[:BODY_CUT]
    line = head.rfind("\n")
    if line > BODY_CUT // 2:
        head = head[:line]
    note = f"\n\n… cut here: GitHub takes at most {BODY_MAX:,} characters ({len(body):,} were written). The whole of it: {rest}\n"
    return head.rstrip() + note


def refused_clean(exc: BaseException) -> bool:
    """Whether ``exc`` is a forge refusing an arm because the request is already clean."""
    return CLEAN_STATUS.lower() in str(exc).lower()


def arm_or_merge(forge: Forge, number: int, *, method: str, sha: str, by: str) -> tuple[PullInfo, str]:
    """Arm ``number``'s auto-merge bound to ``sha``; on a clean refusal merge it at ``sha`` with ``method``.

    Returns the request and how it went: "armed" or "merged" (the clean-status
    merge). Any other refusal — and a refused merge (the head moved, a check
    turned) — raises the forge's ForgeError with its reason.
    """
    try:
        return forge.arm_auto_merge(number, method=method, sha=sha, by=by), "armed"
    except ForgeError as exc:
        if not refused_clean(exc):
            raise
    try:
        pull = forge.merge_checked(number, method=method, sha=sha, by=by)
    except ForgeError as exc:
        raise ForgeError(
            f"auto-merge unavailable: PR #{number} was clean, and its merge at {sha[:12]} was refused: {exc}",
            permanent=True,
        ) from None
    return pull, "merged"


# --- Who hears a pull request move --------------------------------------------------------

#: Called with a PR's number when the forge sees it move (merged, closed, disarmed); the loop registers its wait.
PULL_LISTENERS: list[Callable[[int], Any]] = []


def listen_to_pulls(listener: Callable[[int], Any]) -> None:
    """Call ``listener(number)`` whenever a forge sees a pull request move (registered once, at app start)."""
    if listener not in PULL_LISTENERS:
        PULL_LISTENERS.append(listener)


def pull_event(number: int) -> None:
    """Tell every listener that PR ``number`` moved (an event only wakes the wait: the read decides)."""
    for listener in PULL_LISTENERS:
        listener(number)
