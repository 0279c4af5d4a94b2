"""The local forge: the brain's bare repository is the remote, pull requests and commit statuses are rows.

This is the embedded default (DESIGN "Where state lives"). A pull request is
a branch of the bare repository plus a ``PullRequest`` row; a person merges it
from the dashboard (``/evolution/pulls/<n>/``). Branch protection is
``settings.LOCAL_FORGE_REQUIRED_STATUSES``: every context listed there must be
``success`` on the head commit before a merge is allowed. A merge is a real
merge commit (``--no-ff``) of the head into the base, made in a throwaway
clone under ``settings.LOOP_WORK_DIR`` and pushed to the bare repository.
"""

from __future__ import annotations

import logging
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.urls import reverse
from django.utils import timezone

from evolution.forges.base import CLEAN_STATUS, ForgeError, PullInfo
from evolution.forges.git import is_ancestor, throwaway_clone
from evolution.models import CommitStatus, PullRequest
from singularity.brain.git import GitError, git
from singularity.errors import ConfigError

log = logging.getLogger(__name__)

#: How many times a merge is redone on a base that moved while it was being made.
MERGE_ATTEMPTS = 5
#: How many times a pull request number is re-drawn after another request took it.
NUMBER_ATTEMPTS = 10


def refused(message: str) -> ForgeError:
    """A permanent ForgeError carrying ``message`` (a refusal is not retried)."""
    return ForgeError(message, permanent=True)


class LocalForge:
    """The Forge protocol over a local bare repository and the ``PullRequest``/``CommitStatus`` rows."""

    name = "local"

    # --- the repository ---------------------------------------------------------------------

    def remote_url(self) -> str:
        """The bare repository's path: settings.BRAIN_REPO, or the demo repository made from the bundled brain."""
        if settings.BRAIN_REPO:
            return str(settings.BRAIN_REPO)
        from grading.sync import demo_repository

        return str(demo_repository())

    def repository(self) -> Path:
        """The bare repository as a local directory; ConfigError when BRAIN_REPO is not one."""
        url = self.remote_url()
        path = Path(url.removeprefix("file://"))
        if not path.is_dir():
            raise ConfigError(
                f"LOOP_FORGE local: BRAIN_REPO {url!r} is not a local git repository (the local forge hosts "
                "pull requests in a repository on this machine; use a path to a bare repository)"
            )
        return path

    def default_branch(self) -> str:
        """The branch changes land on: settings.BRAIN_BRANCH."""
        return settings.BRAIN_BRANCH

    def branch_sha(self, branch: str) -> str | None:
        """The commit ``branch`` points at in the bare repository now, or None when there is no such branch."""
        try:
            out = git("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}", cwd=self.repository())
        except GitError:
            return None
        return out.decode().strip() or None

    # --- pull requests ----------------------------------------------------------------------

    def open_pull(self, *, head: str, base: str, title: str, body: str) -> PullInfo:
        """Open a pull request of the pushed branch ``head`` into ``base``; ForgeError naming what is missing.

        Refused when either branch is missing from the bare repository, when
        head and base are the same branch, or when an open request of the same
        head into the same base already stands (as GitHub refuses it).
        """
        if head == base:
            raise refused(f"cannot open a pull request of {head} into itself")
        head_sha = self.branch_sha(head)
        if head_sha is None:
            raise refused(f"cannot open a pull request: branch {head!r} is not in {self.remote_url()}")
        base_tip = self.branch_sha(base)
        if base_tip is None:
            raise refused(f"cannot open a pull request: base branch {base!r} is not in {self.remote_url()}")
        repo = self.repository()
        if is_ancestor(head_sha, base_tip, cwd=repo):
            raise refused(f"cannot open a pull request: {head} has no commits that {base} lacks")
        standing = PullRequest.objects.filter(head=head, base=base, state=PullRequest.State.OPEN).first()
        if standing is not None:
            raise refused(f"a pull request of {head} into {base} is already open: #{standing.number}")
        cut_from = git("merge-base", base_tip, head_sha, cwd=repo).decode().strip()
        row = self._create(
            title=title[:300], body=body, head=head, base=base, head_sha=head_sha, base_sha=cut_from or base_tip
        )
        log.info("local forge: opened PR #%s (%s -> %s at %s)", row.number, head, base, head_sha[:12])
        return self._info(row)

    def open_pull_of(self, head: str, base: str) -> PullInfo | None:
        """The open request of ``head`` into ``base``, or None."""
        row = PullRequest.objects.filter(head=head, base=base, state=PullRequest.State.OPEN).first()
        return None if row is None else self._info(row)

    def _create(self, **fields: str) -> PullRequest:
        """Insert a pull request under the next free number (max + 1), re-drawing when a racing opener took it."""
        for _ in range(NUMBER_ATTEMPTS):
            number = (PullRequest.objects.aggregate(top=Max("number"))["top"] or 0) + 1
            try:
                with transaction.atomic():
                    return PullRequest.objects.create(number=number, **fields)
            except IntegrityError:
                continue
        raise refused(f"could not take a pull request number after {NUMBER_ATTEMPTS} tries (too many openers at once)")

    def _row(self, number: int, *, lock: bool = False) -> PullRequest:
        """The request's row (locked for update when ``lock``); ForgeError when there is none."""
        query = PullRequest.objects.select_for_update() if lock else PullRequest.objects
        try:
            return query.get(number=number)
        except PullRequest.DoesNotExist:
            raise refused(f"there is no pull request #{number} on the local forge") from None

    def get_pull(self, number: int) -> PullInfo:
        """The request as the forge holds it now; an open request's head is re-read from its branch."""
        row = self._row(number)
        self._follow_head(row)
        return self._info(row)

    def _follow_head(self, row: PullRequest) -> None:
        """Move an open request's ``head_sha`` to where its branch points now (someone pushed to it).

        An auto-merge armed on the old head is dropped, as GitHub drops an arm whose head moved.
        """
        if row.state != PullRequest.State.OPEN:
            return
        sha = self.branch_sha(row.head)
        if sha and sha != row.head_sha:
            log.info("local forge: PR #%s head %s moved %s -> %s", row.number, row.head, row.head_sha[:12], sha[:12])
            dropped = bool(row.auto_merge)
            PullRequest.objects.filter(pk=row.pk, state=PullRequest.State.OPEN).update(head_sha=sha, auto_merge={})
            row.head_sha, row.auto_merge = sha, {}
            if dropped:
                log.info("local forge: PR #%s's auto-merge dropped: its head moved", row.number)

    # --- auto-merge (the arm GitHub offers) ---------------------------------------------------

    def merge_methods(self) -> list[str]:
        """The merge methods the repository allows (settings.LOCAL_FORGE_MERGE_METHODS; the local forge makes merge commits)."""
        return list(getattr(settings, "LOCAL_FORGE_MERGE_METHODS", ["merge"]))

    def arm_auto_merge(self, number: int, *, method: str, sha: str, by: str) -> PullInfo:
        """Arm auto-merge on ``number`` bound to ``sha``: the forge merges once every required status there is success.

        Refused (ForgeError with the reason) when nothing is required on the base branch (no auto-merge is held on
        a request nothing gates), when ``method`` is not allowed, when the head is no longer ``sha``, or — as
        GitHub refuses it — when every required status is already success on the head ("Pull request is in
        clean status"): the loop then merges it with ``merge_checked``.
        """
        if not self.required_statuses():
            raise refused("auto-merge unavailable: the base branch requires no status check")
        if method not in self.merge_methods():
            raise refused(
                f"auto-merge unavailable: merge method {method!r} is not allowed "
                f"(this repository allows {', '.join(self.merge_methods()) or 'none'})"
            )
        with transaction.atomic():
            row = self._row(number, lock=True)
            if row.state != PullRequest.State.OPEN:
                raise refused(f"auto-merge unavailable: PR #{number} is {row.state}")
            self._follow_head(row)
            if row.head_sha != sha:
                raise refused(f"auto-merge unavailable: PR #{number}'s head moved to {row.head_sha[:12]}")
            if not self.merge_blockers(row):
                raise refused(f"auto-merge unavailable: {CLEAN_STATUS}")
            row.auto_merge = {"method": method, "sha": sha, "by": by[:200]}
            row.save(update_fields=["auto_merge"])
        log.info("local forge: PR #%s armed for auto-merge (%s at %s)", number, method, sha[:12])
        return self._info(row)

    def merge_checked(self, number: int, *, method: str, sha: str, by: str) -> PullInfo:
        """Merge ``number`` as GitHub's merge endpoint does with ``sha`` and ``merge_method``: refused (ForgeError)
        when the method is not allowed, the head is no longer ``sha``, or a required status is not success.
        """
        if method not in self.merge_methods():
            raise refused(
                f"PR #{number} cannot be merged: merge method {method!r} is not allowed "
                f"(this repository allows {', '.join(self.merge_methods()) or 'none'})"
            )
        head = self.get_pull(number).head_sha
        if head != sha:
            raise refused(
                f"PR #{number} cannot be merged: Head branch was modified (it is {head[:12]}, not {sha[:12]})"
            )
        merged = self.merge_pull(number, by=f"clean-status merge ({by})", sha=sha)
        transaction.on_commit(lambda: _went_live(number))
        return merged

    def disarm_auto_merge(self, number: int) -> PullInfo:
        """Take an armed auto-merge back out (nothing when none stands)."""
        PullRequest.objects.filter(number=number).update(auto_merge={})
        return self.get_pull(number)

    def _land_armed(self, row: PullRequest) -> PullInfo | None:
        """Merge an armed request whose armed head is its head and green; return the merged request, or None."""
        arm = row.auto_merge or {}
        if row.state != PullRequest.State.OPEN or not arm or arm.get("sha") != row.head_sha:
            return None
        if self.merge_blockers(row):
            return None
        try:
            merged = self.merge_pull(row.number, by=f"auto-merge ({arm.get('by', '')})")
        except ForgeError as exc:
            log.warning("local forge: armed PR #%s could not merge: %s", row.number, exc)
            return None
        transaction.on_commit(lambda: _went_live(row.number))
        return merged

    def land_armed(self, sha: str | None = None) -> int:
        """Merge every armed request whose required statuses are green (on ``sha`` only, when given)."""
        rows = PullRequest.objects.filter(state=PullRequest.State.OPEN).exclude(auto_merge={})
        if sha:
            rows = rows.filter(head_sha=sha)
        return sum(1 for row in rows if self._land_armed(row) is not None)

    def comment(self, number: int, body: str, *, by: str) -> None:
        """Leave a comment on request ``number`` (open or closed); ForgeError when there is no such request."""
        with transaction.atomic():
            row = self._row(number, lock=True)
            row.comments = [*(row.comments or []), {"by": by, "body": body, "at": timezone.now().isoformat()}]
            row.save(update_fields=["comments"])

    def close_pull(self, number: int, *, by: str) -> PullInfo:
        """Close an open request unmerged (closing a closed one changes nothing); ForgeError for a merged one."""
        with transaction.atomic():
            row = self._row(number, lock=True)
            if row.state == PullRequest.State.MERGED:
                raise refused(f"PR #{number} is already merged (as {row.merge_sha[:12]}): it cannot be closed")
            if row.state == PullRequest.State.OPEN:
                row.state = PullRequest.State.CLOSED
                row.closed_by = by[:200]
                row.closed_at = timezone.now()
                row.save(update_fields=["state", "closed_by", "closed_at"])
        return self._info(row)

    def merge_pull(self, number: int, *, by: str, sha: str = "") -> PullInfo:
        """Merge an open request with a merge commit pushed to its base; ForgeError naming every reason it cannot.

        Refused when the request is not open, when a required status
        (settings.LOCAL_FORGE_REQUIRED_STATUSES) is not ``success`` on the
        head commit (each one named), or when the head conflicts with the
        base (the conflicting paths named). A base that moved while the merge
        was made is merged again from its new tip.
        """
        with transaction.atomic():
            row = self._row(number, lock=True)
            if row.state != PullRequest.State.OPEN:
                raise refused(f"PR #{number} is {row.state}, not open: there is nothing to merge")
            self._follow_head(row)
            if sha and row.head_sha != sha:
                raise refused(f"PR #{number} cannot be merged: Head branch was modified (it is {row.head_sha[:12]})")
            blockers = self.merge_blockers(row)
            if blockers:
                raise refused(f"PR #{number} cannot be merged: " + "; ".join(blockers))
            try:
                merge_sha = self._landed_as(row) or self._merge(row)
            except GitError as exc:
                raise refused(f"PR #{number} cannot be merged: {exc}") from None
            row.state = PullRequest.State.MERGED
            row.merge_sha = merge_sha
            row.merged_by = by[:200]
            row.merged_at = timezone.now()
            row.save(update_fields=["state", "merge_sha", "merged_by", "merged_at", "head_sha"])
        log.info("local forge: merged PR #%s as %s (by %s)", number, merge_sha[:12], by)
        return self._info(row)

    def merge_blockers(self, row: PullRequest) -> list[str]:
        """What branch protection has against merging ``row`` now: one sentence per required status not success."""
        latest = {s.context: s for s in CommitStatus.objects.filter(sha=row.head_sha)}
        blockers = []
        for context in self.required_statuses():
            status = latest.get(context)
            if status is None:
                blockers.append(f"required status {context} is missing on {row.head_sha[:12]}")
            elif status.state != CommitStatus.State.SUCCESS:
                why = f" ({status.description})" if status.description else ""
                blockers.append(f"required status {context} is {status.state} on {row.head_sha[:12]}{why}")
        return blockers

    def required_statuses(self) -> list[str]:
        """The contexts branch protection requires (settings.LOCAL_FORGE_REQUIRED_STATUSES)."""
        return list(settings.LOCAL_FORGE_REQUIRED_STATUSES)

    def _landed_as(self, row: PullRequest) -> str:
        """The commit that already brought the head into the base (a merge pushed whose row never saved), or ""."""
        repo = self.repository()
        tip = self.branch_sha(row.base)
        if tip is None:
            raise refused(f"PR #{row.number} cannot be merged: its base branch {row.base!r} is gone")
        if not is_ancestor(row.head_sha, tip, cwd=repo):
            return ""
        merges = git("rev-list", "--merges", "--ancestry-path", "--reverse", f"{row.head_sha}..{tip}", cwd=repo)
        first = merges.decode().split()
        return first[0] if first else row.head_sha

    def _merge(self, row: PullRequest) -> str:
        """Make the merge commit in a throwaway clone and push it to the base; return its sha."""
        message = f"Merge pull request #{row.number} from {row.head}\n\n{row.title}\n"
        with throwaway_clone(self.remote_url(), row.base, label=f"merge-{row.number}") as clone:
            for _ in range(MERGE_ATTEMPTS):
                onto = git("rev-parse", "HEAD", cwd=clone).decode().strip()
                try:
                    git("merge", "--no-ff", "--quiet", "-m", message, row.head_sha, cwd=clone)
                except GitError as exc:
                    raise self._conflict(row, clone, exc) from None
                try:
                    git("push", "--quiet", "origin", f"HEAD:refs/heads/{row.base}", cwd=clone)
                except GitError:
                    git("fetch", "--quiet", "origin", row.base, cwd=clone)
                    moved = git("rev-parse", "FETCH_HEAD", cwd=clone).decode().strip()
                    if moved == onto:
                        raise
                    log.info("local forge: %s moved under PR #%s's merge; merging again", row.base, row.number)
                    git("reset", "--quiet", "--hard", moved, cwd=clone)
                    continue
                return git("rev-parse", "HEAD", cwd=clone).decode().strip()
        raise refused(f"PR #{row.number} cannot be merged: {row.base} kept moving ({MERGE_ATTEMPTS} tries)")

    def _conflict(self, row: PullRequest, clone: Path, exc: GitError) -> ForgeError:
        """The refusal for a merge git could not make: the conflicting paths, or git's own words."""
        conflicted = git("diff", "--name-only", "--diff-filter=U", cwd=clone).decode().split()
        try:
            git("merge", "--abort", cwd=clone)
        except GitError as abort:
            log.warning("local forge: merge --abort after PR #%s failed: %s", row.number, abort)
        if conflicted:
            return refused(
                f"PR #{row.number} cannot be merged: {row.head} conflicts with {row.base} in " + ", ".join(conflicted)
            )
        return refused(f"PR #{row.number} cannot be merged: {exc}")

    # --- statuses, diff, links --------------------------------------------------------------

    def set_status(self, sha: str, context: str, state: str, description: str) -> None:
        """Set the status ``context`` of commit ``sha`` (the latest set wins); ForgeError for an unknown state."""
        if state not in CommitStatus.State.values:
            raise refused(f"commit status {context}: {state!r} is not one of {', '.join(CommitStatus.State.values)}")
        if len(sha) != 40:
            raise refused(f"commit status {context}: {sha!r} is not a full commit id")
        fields = {"state": state, "description": description[:300], "updated_at": timezone.now()}
        if CommitStatus.objects.filter(sha=sha, context=context).update(**fields):
            if state == CommitStatus.State.SUCCESS:
                self.land_armed(sha)
            return
        try:
            with transaction.atomic():
                CommitStatus.objects.create(sha=sha, context=context, **fields)
        except IntegrityError:
            CommitStatus.objects.filter(sha=sha, context=context).update(**fields)
        if state == CommitStatus.State.SUCCESS:
            self.land_armed(sha)

    def statuses(self, sha: str) -> list[CommitStatus]:
        """Every status set on ``sha`` (the latest per context), by context."""
        return list(CommitStatus.objects.filter(sha=sha).order_by("context"))

    def diff(self, number: int) -> str:
        """The request's unified diff, base_sha..head_sha (for an open request, its head as it is now)."""
        row = self._row(number)
        self._follow_head(row)
        try:
            out = git("diff", "--no-color", "--no-ext-diff", row.base_sha, row.head_sha, cwd=self.repository())
        except GitError as exc:
            raise refused(f"PR #{number}: the diff cannot be read: {exc}") from None
        return out.decode(errors="replace")

    def list_pulls(self, *, limit: int = 100) -> list[PullInfo]:
        """The local forge's pull requests, newest first, at most ``limit``."""
        return [self._info(row) for row in PullRequest.objects.order_by("-number")[:limit]]

    def pull_url(self, number: int) -> str:
        """The dashboard page where a person reads and merges the request."""
        return settings.SINGULARITY_PUBLIC_URL.rstrip("/") + reverse("evolution:pull", args=[number])

    def _info(self, row: PullRequest) -> PullInfo:
        return PullInfo(
            number=row.number,
            url=self.pull_url(row.number),
            state=row.state,
            head=row.head,
            head_sha=row.head_sha,
            base=row.base,
            merge_sha=row.merge_sha,
            merged_at=row.merged_at,
            merged_by=row.merged_by,
            closed_at=row.closed_at,
            auto_merge=dict(row.auto_merge) or None,
            title=row.title,
            opened_at=row.created_at,
        )


def go_live(number: int) -> str:
    """After PR ``number`` merged into the brain: sync it at once, so the entity's next runs execute the merge.

    Returns "" or, when the sync failed (the next sync tick picks the merge up), what went wrong.
    """
    from grading.sync import sync_brain
    from singularity.errors import SingularityError

    try:
        sync_brain()
    except SingularityError as exc:
        log.warning("local forge: the brain could not be synced after PR #%s merged: %s", number, exc)
        return str(exc)
    return ""


def _went_live(number: int) -> None:
    """After an auto-merge landed: sync the brain and ring the cycle that waits on it."""
    from evolution.forges.base import pull_event

    go_live(number)
    pull_event(number)
