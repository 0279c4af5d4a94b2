"""The GitHub forge: the brain's repository on GitHub (or GitHub Enterprise Server) — the only module that imports PyGithub.

It does for the loop what the local forge does (``evolution.forges.base.Forge``):

- ``remote_url`` is the repository's HTTPS git URL. git authenticates through
  ``git_env()``: an ``http.<remote>.extraHeader`` passed in ``GIT_CONFIG_*``
  variables to each git command, so the token is never on a command line, in a
  remote URL, in git's errors, in a log line or on disk.
- ``open_pull``, ``get_pull``, ``close_pull``, ``set_status``, ``list_pulls``
  over REST. A read is conditional: the ETag and the answer are kept on the
  ``GitHubPull`` row, so a poll of an unchanged PR is a 304 that GitHub does not
  count against the rate limit, whichever worker asks.
- ``merge_checked``: the merge endpoint with ``sha`` and ``merge_method``, for
  a request GitHub refused to arm because it was already clean (issue 32).
- ``arm_auto_merge`` / ``disarm_auto_merge``: GitHub-native auto-merge over
  GraphQL (PyGithub's ``enable_automerge`` / ``disable_automerge``), with the
  merge method and the expected head. GitHub refuses an arm with HTTP 200 and a
  GraphQL ``errors`` entry (type ``UNPROCESSABLE``: "Pull request is in clean
  status", "Auto merge is not allowed for this repository", …): the errors are
  read, never only the status. GitHub keeps an arm when a writer pushes to the
  branch; the loop vouched for one commit only, so a read that finds the head
  moved past the armed commit takes the arm out (as the local forge does).
- the doctor's facts: the base branch's required statuses (classic protection
  and rulesets), ``allow_auto_merge``, whether the credential may post a status.

Errors are ``GitHubError`` (a ``ForgeError``): permanent — 401, a 403 that is
no rate limit, 404, 422, a GraphQL refusal — or temporary — 5xx, 429, primary
and secondary rate limits (``Retry-After`` honoured), connection errors — the
temporary ones retried here with backoff before they surface. The outcome of
every call about a PR is saved on its ``GitHubPull`` row (``last_error``,
``attempts``, ``read_at``).

Credentials: ``GITHUB_TOKEN`` or ``GH_TOKEN`` (or their ``_FILE``) first; else the GitHub
App's installation token, which PyGithub mints and refreshes before it expires.
"""

from __future__ import annotations

import base64
import email.utils
import http.client
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import github
import requests
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from github import Auth, Github, GithubException

from evolution.forges.base import ForgeError, PullInfo, fit, pull_event
from evolution.models import GitHubPull, GitHubRateLimit
from singularity.forge_env import git_remote

log = logging.getLogger(__name__)
# PyGithub logs whole responses at DEBUG — an App's installation token among them.
logging.getLogger("github").setLevel(max(logging.getLogger("github").level, logging.INFO))

T = TypeVar("T")

#: The loop's merge methods in GraphQL's words.
METHODS = {"merge": "MERGE", "squash": "SQUASH", "rebase": "REBASE"}
STATES = ("pending", "success", "failure", "error")
#: GraphQL error types that pass (everything else — UNPROCESSABLE, FORBIDDEN, NOT_FOUND, … — is a refusal).
TEMPORARY_GRAPHQL = frozenset({"RATE_LIMITED", "INTERNAL", "SERVICE_UNAVAILABLE", "TIMEOUT"})
#: A commit that cannot exist: the status-permission probe posts on it (GitHub writes nothing either way).
NO_COMMIT = "0" * 40
#: GitHub's status descriptions stop at 140 characters.
DESCRIPTION_MAX = 140

#: The REST API version every request names (GitHub's current one; without it GitHub picks its default).
API_VERSION = "2022-11-28"
#: A secondary limit without Retry-After waits at least this long, doubling per consecutive limit (GitHub's docs).
SECONDARY_FLOOR_S = 60.0

#: How a wait is spent; tests replace it to read the waits without sleeping them.
_sleep: Callable[[float], None] = time.sleep


class GitHubError(ForgeError):
    """GitHub refused or failed a call: ``status`` (HTTP; 200 for a GraphQL refusal), GitHub's own words in
    ``reason``, and for a temporary error how long GitHub asked to wait (``retry_after``, seconds) when it said.
    """

    def __init__(
        self,
        message: str,
        *,
        permanent: bool,
        status: int | None = None,
        reason: str = "",
        retry_after: float | None = None,
        limit: str = "",
        until: datetime | None = None,
    ) -> None:
        super().__init__(message, permanent=permanent)
        self.status = status
        self.reason = reason or message
        self.retry_after = retry_after
        #: "primary" (X-RateLimit-Remaining: 0), "secondary" (any other rate limit), or "" (no rate limit).
        self.limit = limit
        self.until = until


# --- The credential --------------------------------------------------------------------------


@dataclass
class Credential:
    """One lane: ``token`` (GITHUB_TOKEN) or ``app`` (an installation of the GitHub App), and how messages name it."""

    lane: str
    label: str
    auth: Any

    def token(self) -> str:
        """The token git and the API send now (an App's installation token is refreshed before it expires)."""
        return str(self.auth.token)


@dataclass
class _Connection:
    credential: Credential
    client: Github
    lock: threading.Lock = field(default_factory=threading.Lock)


_CONNECTIONS: dict[tuple[Any, ...], _Connection] = {}
_CONNECTIONS_LOCK = threading.Lock()


def _config() -> tuple[Any, ...]:
    return (
        settings.GITHUB_API_URL,
        settings.GITHUB_TOKEN,
        settings.GITHUB_APP_ID,
        settings.GITHUB_APP_PRIVATE_KEY_FILE,
        settings.GITHUB_APP_INSTALLATION_ID,
        settings.GITHUB_TIMEOUT_SECS,
        settings.GITHUB_SECONDS_BETWEEN_WRITES,
    )


def _credential() -> Credential:
    from singularity.errors import ConfigError

    if settings.GITHUB_TOKEN:
        label = getattr(settings, "GITHUB_TOKEN_VAR", "") or "GITHUB_TOKEN"
        return Credential("token", label, Auth.Token(settings.GITHUB_TOKEN))
    if settings.GITHUB_APP_ID:
        try:
            key = Path(settings.GITHUB_APP_PRIVATE_KEY_FILE).read_text()
        except OSError as exc:
            raise ConfigError(f"GITHUB_APP_PRIVATE_KEY_FILE: cannot read it: {exc.strerror}") from None
        app = Auth.AppAuth(settings.GITHUB_APP_ID, key)
        label = f"the GitHub App {settings.GITHUB_APP_ID} (installation {settings.GITHUB_APP_INSTALLATION_ID})"
        return Credential("app", label, Auth.AppInstallationAuth(app, int(settings.GITHUB_APP_INSTALLATION_ID)))
    raise ConfigError(
        "GITHUB_TOKEN: LOOP_FORGE=github needs a credential — GITHUB_TOKEN (or GITHUB_TOKEN_FILE), or a GitHub App "
        "(GITHUB_APP_ID, GITHUB_APP_PRIVATE_KEY_FILE, GITHUB_APP_INSTALLATION_ID)"
    )


def connection() -> _Connection:
    """The process's client for the configured credential (made once per configuration, shared by threads)."""
    key = _config()
    with _CONNECTIONS_LOCK:
        found = _CONNECTIONS.get(key)
        if found is None:
            credential = _credential()
            client = Github(
                auth=credential.auth,
                base_url=settings.GITHUB_API_URL,
                timeout=math.ceil(settings.GITHUB_TIMEOUT_SECS),
                retry=None,  # retried here, where the error is classified and the outcome saved
                per_page=100,
                seconds_between_requests=None,
                seconds_between_writes=settings.GITHUB_SECONDS_BETWEEN_WRITES or None,
                user_agent="singularity-loop",
                lazy=True,
                api_version=API_VERSION,
            )
            _CONNECTIONS.clear()
            found = _CONNECTIONS[key] = _Connection(credential, client)
        return found


def remote_url() -> str:
    """The brain's git remote: settings.BRAIN_REPO, else the repository's HTTPS URL on the configured GitHub."""
    return str(settings.BRAIN_REPO or git_remote(settings.GITHUB_API_URL, settings.GITHUB_REPOSITORY))


def git_env() -> dict[str, str]:
    """GIT_CONFIG_* variables sending the credential to the brain's HTTPS remote, and nowhere else.

    Empty for an ssh remote (git uses its keys there). The header is Basic
    ``x-access-token:<token>``, which GitHub takes for a personal token and an
    installation token alike.
    """
    remote = remote_url()
    if not remote.startswith(("https://", "http://")):
        return {}
    credential = connection().credential
    # git is not the REST API: a standing rate limit does not hold a fetch or a push (an App's token mint is
    # one request, made only when the token is due).
    token = call("mint the credential git sends", credential.token, credential=credential.label, held=False)
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    count = int(os.environ.get("GIT_CONFIG_COUNT", "0") or 0)
    return {
        "GIT_CONFIG_COUNT": str(count + 1),
        f"GIT_CONFIG_KEY_{count}": f"http.{remote}.extraHeader",
        f"GIT_CONFIG_VALUE_{count}": f"Authorization: Basic {basic}",
    }


# --- Errors ------------------------------------------------------------------------------------


def _said(data: Any) -> str:
    """GitHub's own words in an error body: its message, each validation error's, each GraphQL error's."""
    if not isinstance(data, dict):
        return str(data or "").strip()[:500]
    words = []
    if isinstance(data.get("message"), str) and data["message"]:
        words.append(data["message"])
    for error in data.get("errors") or []:
        if isinstance(error, dict):
            text = error.get("message") or " ".join(str(error.get(k, "")) for k in ("resource", "field", "code"))
            if text and text.strip() and text not in words:
                words.append(text.strip())
        elif isinstance(error, str):
            words.append(error)
    return "; ".join(words)[:500] or "(no message)"


def _graphql_types(data: Any) -> set[str]:
    """The types of a GraphQL response's errors (an empty set for a REST body)."""
    if not isinstance(data, dict) or not isinstance(data.get("errors"), list):
        return set()
    found = set()
    for error in data["errors"]:
        if isinstance(error, dict) and ("type" in error or "path" in error or "locations" in error):
            found.add(str(error.get("type") or "UNKNOWN"))
    return found


def _wait_asked(headers: dict[str, Any]) -> float | None:
    """How long GitHub asked to wait: Retry-After (seconds or a date), else the primary limit's reset when spent."""
    after = str(headers.get("retry-after") or "").strip()
    if after:
        if after.isdigit():
            return float(after)
        try:
            when = email.utils.parsedate_to_datetime(after)
        except (TypeError, ValueError):
            when = None
        if when is not None and when.tzinfo is not None:
            return max(0.0, (when - timezone.now()).total_seconds())
    if str(headers.get("x-ratelimit-remaining", "")).strip() == "0":
        reset = str(headers.get("x-ratelimit-reset") or "").strip()
        if reset.isdigit():
            return max(0.0, int(reset) - time.time())
    return None


def _rate_limited(words: str) -> bool:
    lowered = words.lower()
    return "rate limit" in lowered or lowered.endswith(("retry your request again later.", "before you try again."))


def ours(what: str, exc: BaseException, *, credential: str) -> GitHubError:
    """The GitHubError for ``exc`` raised while doing ``what``; a bug that is not GitHub's is raised again."""
    if isinstance(exc, GitHubError):
        return exc
    if isinstance(exc, GithubException):
        status = int(exc.status or 0)
        data = exc.data
        headers = {str(k).lower(): v for k, v in (exc.headers or {}).items()}
        said = _said(data)
        types = _graphql_types(data)
        if types:
            temporary = bool(types & TEMPORARY_GRAPHQL)
            return GitHubError(
                f"GitHub could not {what}: {said} (GraphQL {', '.join(sorted(types))})",
                permanent=not temporary,
                status=200,
                reason=said,
                retry_after=_wait_asked(headers) if temporary else None,
            )
        if status == 401:
            return GitHubError(
                f"GitHub refused the credential ({credential}) to {what}: {said} (HTTP 401)",
                permanent=True,
                status=status,
                reason=said,
            )
        wait = _wait_asked(headers)
        if status == 429 or (status == 403 and (wait is not None or _rate_limited(said))):
            spent = str(headers.get("x-ratelimit-remaining", "")).strip() == "0" and not headers.get("retry-after")
            reset = str(headers.get("x-ratelimit-reset") or "").strip()
            return GitHubError(
                f"GitHub rate-limited the attempt to {what}: {said} (HTTP {status})",
                permanent=False,
                status=status,
                reason=said,
                retry_after=wait,
                limit="primary" if spent else "secondary",
                until=datetime.fromtimestamp(int(reset), tz=UTC) if spent and reset.isdigit() else None,
            )
        if status >= 500:
            return GitHubError(
                f"GitHub failed to {what}: {said} (HTTP {status})", permanent=False, status=status, reason=said
            )
        if status == 403:
            return GitHubError(
                f"GitHub refused {credential} to {what}: {said} (HTTP 403)", permanent=True, status=status, reason=said
            )
        return GitHubError(
            f"GitHub refused to {what}: {said} (HTTP {status})", permanent=True, status=status, reason=said
        )
    if isinstance(exc, (requests.exceptions.RequestException, http.client.HTTPException, OSError)):
        return GitHubError(
            f"GitHub could not be reached at {settings.GITHUB_API_URL} to {what}: {type(exc).__name__}: {exc}",
            permanent=False,
        )
    raise exc


def _limit_key(credential: str) -> str:
    return f"{settings.GITHUB_API_URL} {credential}"[:300]


def clock(when: datetime) -> str:
    """A reset as people read it: "14:05 UTC" (the date too when it is not today)."""
    when = when.astimezone(UTC)
    today = timezone.now().astimezone(UTC).date()
    return f"{when:%H:%M} UTC" if when.date() == today else f"{when:%Y-%m-%d %H:%M} UTC"


def limited(credential: str | None = None) -> GitHubRateLimit | None:
    """The rate limit standing now (for ``credential``, else for any), or None: no call is made before its ``until``."""
    rows = GitHubRateLimit.objects.filter(until__gt=timezone.now())
    if credential is not None:
        rows = rows.filter(key=_limit_key(credential))
    return rows.order_by("-until").first()


def _held(what: str, row: GitHubRateLimit) -> GitHubError:
    return GitHubError(
        f"GitHub rate limit until {clock(row.until)}: did not {what} ({row.reason})",
        permanent=False,
        reason=row.reason,
        retry_after=max(0.0, (row.until - timezone.now()).total_seconds()),
        limit="held",
        until=row.until,
    )


def _record_limit(credential: str, error: GitHubError) -> tuple[GitHubRateLimit, float]:
    """Record a rate limit where every process sees it: until GitHub's reset, its Retry-After, or — a secondary
    limit that named no wait — at least a minute, doubling with each consecutive one.
    """
    key = _limit_key(credential)
    now = timezone.now()
    with transaction.atomic():
        row, _ = GitHubRateLimit.objects.select_for_update().get_or_create(key=key)
        if row.until is None or row.until < now - timedelta(hours=1):
            row.strikes = 0  # the last limit is long past: this one is the first again
        if error.retry_after is not None:
            wait = error.retry_after
        else:
            wait = SECONDARY_FLOOR_S * (2 ** min(row.strikes, 6))
            row.strikes += 1
        until = error.until or now + timedelta(seconds=max(wait, 1.0))  # a primary limit: GitHub's reset itself
        if row.until is None or row.until < until:
            row.until = until
        row.reason = f"{error.reason} (HTTP {error.status})"[:2000]
        row.updated_at = now
        row.save()
    log.warning("github: rate limit until %s for %s: %s", clock(row.until), credential, error.reason)
    if wait > settings.GITHUB_RETRY_MAX_WAIT_SECS:
        _announce(row)
    return row, wait


def _announce(row: GitHubRateLimit) -> None:
    """A notice, once per limit: GitHub rate limit until HH:MM."""
    from hitl.actions import post_notice
    from hitl.models import Notice

    subject = f"github rate limit {row.until.isoformat()}"
    if Notice.objects.filter(kind="github-rate-limit", subject=subject).exists():
        return
    post_notice(
        producer="loop",
        kind="github-rate-limit",
        title=f"GitHub rate limit until {clock(row.until)}",
        text=f"GitHub asked the loop to wait: {row.reason}. Polls, applies, checks and withdraws wait until then.",
        subject=subject,
    )


def _cleared(credential: str) -> None:
    """A call got through after a limit: GitHub lifted it, and consecutive secondary limits count from zero."""
    GitHubRateLimit.objects.filter(key=_limit_key(credential)).filter(
        Q(strikes__gt=0) | Q(until__gt=timezone.now())
    ).update(strikes=0, until=None)


def call(what: str, fn: Callable[[], T], *, credential: str = "the credential", held: bool = True) -> T:
    """``fn()`` with GitHub's errors made ours; a temporary one is retried (GitHub's wait when it says).

    A rate limit standing for this credential (``GitHubRateLimit``, every
    process's) stops the call before it is made. A rate limit GitHub answers
    is recorded there: a primary one until ``X-RateLimit-Reset``, a secondary
    one for ``Retry-After`` or at least 60 s growing exponentially. A wait no
    longer than settings.GITHUB_RETRY_MAX_WAIT_SECS is slept here and the call
    tried again; a longer one raises a temporary GitHubError with ``until``,
    which the poll, the apply, the check and a withdraw wait out. Other
    temporary errors (5xx, a lost connection) back off from
    settings.GITHUB_RETRY_BACKOFF_SECS, up to settings.GITHUB_RETRIES retries.
    ``held=False`` skips the standing limit (git's credential: git is not the REST API).
    """
    attempt = 0
    while True:
        standing = limited(credential) if held and attempt == 0 else None  # a retry follows this call's own wait
        if standing is not None:
            wait = (standing.until - timezone.now()).total_seconds()
            if wait > settings.GITHUB_RETRY_MAX_WAIT_SECS:
                raise _held(what, standing)
            attempt += 1
            _sleep(max(wait, 0.0))
            continue
        try:
            answer = fn()
        except Exception as exc:  # noqa: BLE001 - classified by ``ours``; a bug is raised again there
            error = ours(what, exc, credential=credential)
        else:
            if attempt:
                _cleared(credential)
            return answer
        if error.limit:
            row, wait = _record_limit(credential, error)
            error.until = row.until
            if wait > settings.GITHUB_RETRY_MAX_WAIT_SECS or attempt >= settings.GITHUB_RETRIES:
                raise GitHubError(
                    f"GitHub rate limit until {clock(row.until)}: {error}",
                    permanent=False,
                    status=error.status,
                    reason=error.reason,
                    retry_after=wait,
                    limit=error.limit,
                    until=row.until,
                ) from None
            attempt += 1
            log.warning("github: %s; retry %d of %d at %s", error, attempt, settings.GITHUB_RETRIES, clock(row.until))
            _sleep(max(wait, 0.0))
            continue
        if error.permanent or attempt >= settings.GITHUB_RETRIES:
            raise error from None
        wait = error.retry_after
        if wait is None:
            wait = settings.GITHUB_RETRY_BACKOFF_SECS * (2**attempt)
        if wait > settings.GITHUB_RETRY_MAX_WAIT_SECS:
            raise GitHubError(
                f"{error}; GitHub asks to wait {wait:.0f}s, longer than this attempt waits",
                permanent=False,
                status=error.status,
                reason=error.reason,
                retry_after=wait,
            ) from None
        attempt += 1
        log.warning("github: %s; retry %d of %d in %.1fs", error, attempt, settings.GITHUB_RETRIES, wait)
        _sleep(wait)


# --- The forge ---------------------------------------------------------------------------------


def _kept(data: dict[str, Any]) -> dict[str, Any]:
    """The fields of GitHub's pull request the forge reads, as the GitHubPull row keeps them."""
    head = data.get("head") or {}
    base = data.get("base") or {}
    auto = data.get("auto_merge")
    return {
        "number": data.get("number"),
        "node_id": data.get("node_id") or "",
        "url": data.get("url") or "",
        "html_url": data.get("html_url") or "",
        "title": data.get("title") or "",
        "state": data.get("state") or "",
        "merged": bool(data.get("merged")) or bool(data.get("merged_at")),
        "merged_at": data.get("merged_at"),
        "merge_commit_sha": data.get("merge_commit_sha") or "",
        "merged_by": ((data.get("merged_by") or {}).get("login")) or "",
        "closed_at": data.get("closed_at"),
        "created_at": data.get("created_at"),
        "head": {"ref": head.get("ref") or "", "sha": head.get("sha") or ""},
        "base": {"ref": base.get("ref") or ""},
        "mergeable_state": data.get("mergeable_state") or "",
        "auto_merge": {"merge_method": auto.get("merge_method") or ""} if isinstance(auto, dict) else None,
    }


def _when(text: Any) -> datetime | None:
    return parse_datetime(text) if isinstance(text, str) and text else None


@dataclass(frozen=True)
class Requirements:
    """What the base branch requires before a merge, as GitHub answers this credential.

    ``contexts``: every required status check's context; ``sources``: where each
    rule was found; ``unavailable``: GitHub's refusal when the plan has no branch
    rules for this repository; ``unreadable``: why a source could not be read.
    """

    contexts: frozenset[str]
    sources: tuple[str, ...] = ()
    unavailable: str = ""
    unreadable: tuple[str, ...] = ()


class GitHubForge:
    """The Forge protocol over a repository on GitHub (settings.GITHUB_REPOSITORY at settings.GITHUB_API_URL)."""

    name = "github"

    def __init__(self) -> None:
        self.repository = settings.GITHUB_REPOSITORY
        self.key = self.repository.lower()
        self._connection = connection()
        self.credential = self._connection.credential
        self.client = self._connection.client
        self.requester = self.client.requester
        self.repo = self.client.get_repo(self.repository)

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        return call(what, fn, credential=self.credential.label)

    # --- the repository ------------------------------------------------------------------------

    def remote_url(self) -> str:
        """The brain's HTTPS git remote (settings.BRAIN_REPO, else derived from the API's address)."""
        return remote_url()

    def default_branch(self) -> str:
        """The branch changes land on: settings.BRAIN_BRANCH."""
        return settings.BRAIN_BRANCH

    def pull_url(self, number: int) -> str:
        """Where a person reads and merges the request: its page on GitHub."""
        return git_remote(settings.GITHUB_API_URL, self.repository).removesuffix(".git") + f"/pull/{number}"

    # --- pull requests ---------------------------------------------------------------------------

    def open_pull(self, *, head: str, base: str, title: str, body: str) -> PullInfo:
        """Open a pull request of the pushed branch ``head`` into ``base``; GitHubError with GitHub's reason.

        A create that GitHub answers "already exists" after a retried attempt
        (the first one landed but its answer was lost) returns the open request.
        """
        what = f"open a pull request of {head} into {base} on {self.repository}"
        tries: list[int] = []

        def create() -> Any:
            tries.append(1)
            return self.repo.create_pull(
                base=base, head=head, title=title[:256], body=fit(body, rest=f"the loop's record of branch {head}")
            )

        try:
            made = self._call(what, create)
        except GitHubError as exc:
            if len(tries) > 1 and exc.status == 422 and "already exists" in exc.reason.lower():
                standing = self.open_pull_of(head, base)
                if standing is not None:
                    log.info("github: the pull request of %s already stood: #%s", head, standing.number)
                    return standing
            raise
        kept = _kept(made.raw_data)
        row = self._store(kept, etag="")
        log.info("github: opened PR #%s (%s -> %s at %s)", kept["number"], head, base, kept["head"]["sha"][:12])
        return self._info(kept, row)

    def open_pull_of(self, head: str, base: str) -> PullInfo | None:
        """The open request of ``head`` into ``base`` (``GET /pulls?head=owner:branch&state=open``), or None."""
        owner = self.repository.split("/")[0]

        def first() -> dict[str, Any] | None:
            for pull in self.repo.get_pulls(state="open", head=f"{owner}:{head}", base=base):
                return dict(pull.raw_data)
            return None

        data = self._call(f"find the open pull request of {head}", first)
        if data is None:
            return None
        kept = _kept(data)
        return self._info(kept, self._store(kept, etag=""))

    def get_pull(self, number: int) -> PullInfo:
        """The request as GitHub holds it now (a conditional read); an arm whose head moved on is taken out.

        When the read is the first to find the request merged, the brain is
        synced before it returns (as the local forge syncs before it rings the
        wait), so the watch opens on a checkout that has the merge and the
        entity's next runs execute it.
        """
        row = self._row(number)
        was_merged = bool(row and (row.data or {}).get("merged"))
        kept, row = self._read(number, row)
        if kept["merged"] and not was_merged:
            _went_live(number)
        if kept["state"] == "open" and kept["auto_merge"] and row.armed_sha and kept["head"]["sha"] != row.armed_sha:
            log.info(
                "github: PR #%s's head moved %s -> %s past the armed commit: taking the auto-merge out",
                number,
                row.armed_sha[:12],
                kept["head"]["sha"][:12],
            )
            try:
                self._disarm(number, kept)
            except GitHubError as exc:
                self._failed(number, exc)
                log.warning("github: PR #%s: the arm could not be taken out (tried again next read): %s", number, exc)
            kept = {**kept, "auto_merge": None}
        return self._info(kept, row)

    def _read(self, number: int, row: GitHubPull | None) -> tuple[dict[str, Any], GitHubPull]:
        """GET the request with If-None-Match the stored ETag: a 304 answers with the stored fields."""
        conditional = {"If-None-Match": row.etag} if row is not None and row.etag and row.data else {}
        path = f"/repos/{self.repository}/pulls/{number}"

        def fetch() -> tuple[dict[str, Any] | None, dict[str, Any]]:
            status, headers, output = self.requester.requestJson("GET", path, headers=dict(conditional))
            if status == 304:
                return None, headers
            data = json.loads(output) if output else None
            if status >= 400:
                raise GithubException(status, data, headers)
            return data, headers

        try:
            data, headers = self._call(f"read PR #{number} of {self.repository}", fetch)
        except GitHubError as exc:
            self._failed(number, exc)
            raise
        if data is None and row is not None:
            GitHubPull.objects.filter(pk=row.pk).update(read_at=timezone.now(), last_error="", attempts=0)
            return dict(row.data), row
        kept = _kept(data or {})
        return kept, self._store(kept, etag=str(headers.get("etag") or ""))

    def _row(self, number: int) -> GitHubPull | None:
        return GitHubPull.objects.filter(repository=self.key, number=number).first()

    def _store(self, kept: dict[str, Any], *, etag: str) -> GitHubPull:
        """Save what a read (or a write's answer) found on the request's row; its last call succeeded."""
        now = timezone.now()
        row, _ = GitHubPull.objects.update_or_create(
            repository=self.key,
            number=int(kept["number"]),
            defaults={"data": kept, "etag": etag[:200], "read_at": now, "last_error": "", "attempts": 0},
        )
        return row

    def _failed(self, number: int, error: GitHubError) -> None:
        """Save a failed call on the request's row: the error in our words, one more attempt."""
        now = timezone.now()
        updated = GitHubPull.objects.filter(repository=self.key, number=number).update(
            last_error=str(error)[:2000], attempts=F("attempts") + 1, failed_at=now
        )
        if not updated:
            GitHubPull.objects.get_or_create(
                repository=self.key,
                number=number,
                defaults={"last_error": str(error)[:2000], "attempts": 1, "failed_at": now},
            )

    def _info(self, kept: dict[str, Any], row: GitHubPull | None) -> PullInfo:
        merged = bool(kept.get("merged"))
        state = "merged" if merged else ("closed" if kept.get("state") == "closed" else "open")
        auto = kept.get("auto_merge")
        armed = None
        if state == "open" and auto:
            sha = row.armed_sha if row is not None and row.armed_sha else kept["head"]["sha"]
            armed = {"method": (auto.get("merge_method") or "").lower(), "sha": sha}
        number = int(kept["number"])
        return PullInfo(
            number=number,
            url=kept.get("html_url") or self.pull_url(number),
            state=state,
            head=kept["head"]["ref"],
            head_sha=kept["head"]["sha"],
            base=kept["base"]["ref"],
            merge_sha=kept.get("merge_commit_sha", "") if merged else "",
            merged_at=_when(kept.get("merged_at")),
            merged_by=kept.get("merged_by") or "",
            closed_at=_when(kept.get("closed_at")),
            auto_merge=armed,
            title=kept.get("title") or "",
            mergeable_state=kept.get("mergeable_state") or "",
            opened_at=_when(kept.get("created_at")),
        )

    def close_pull(self, number: int, *, by: str) -> PullInfo:
        """Close the request unmerged; GitHubError with GitHub's reason (a merged request cannot be closed)."""
        pull = self.repo.get_pull(number)  # lazy: no request
        try:
            self._call(f"close PR #{number}", lambda: pull.edit(state="closed"))
        except GitHubError as exc:
            self._failed(number, exc)
            raise
        log.info("github: closed PR #%s (for %s)", number, by)
        kept, row = self._read(number, self._row(number))
        return self._info(kept, row)

    def comment(self, number: int, body: str, *, by: str) -> None:
        """Leave a comment on the request (GitHub's issue comments); GitHubError with GitHub's reason."""
        issue = self.repo.get_issue(number)  # lazy: no request; a pull request's comments are its issue's
        said = fit(body, rest=self.pull_url(number))
        self._call(f"comment on PR #{number}", lambda: issue.create_comment(said))
        log.info("github: commented on PR #%s (for %s)", number, by)

    def list_pulls(self, *, limit: int = 100) -> list[PullInfo]:
        """The repository's pull requests, newest first, at most ``limit`` (paged as GitHub pages them)."""

        def newest() -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = []
            for pull in self.repo.get_pulls(state="all", sort="created", direction="desc"):
                found.append(dict(pull.raw_data))
                if len(found) >= limit:
                    break
            return found

        rows = {r.number: r for r in GitHubPull.objects.filter(repository=self.key)}
        pulls = self._call(f"list the pull requests of {self.repository}", newest)
        return [self._info(_kept(data), rows.get(int(data.get("number") or 0))) for data in pulls]

    # --- statuses ------------------------------------------------------------------------------

    def set_status(self, sha: str, context: str, state: str, description: str) -> None:
        """Set the commit status ``context`` on ``sha``; a 403 that is no rate limit fails at once (permanent)."""
        if state not in STATES:
            raise GitHubError(f"commit status {context}: {state!r} is not one of {', '.join(STATES)}", permanent=True)
        if len(sha) != 40:
            raise GitHubError(f"commit status {context}: {sha!r} is not a full commit id", permanent=True)
        payload = {"state": state, "context": context, "description": description[:DESCRIPTION_MAX]}
        self._call(
            f"set {context} to {state} on {sha[:12]} of {self.repository}",
            lambda: self.requester.requestJsonAndCheck(
                "POST", f"/repos/{self.repository}/statuses/{sha}", input=payload
            ),
        )
        log.info("github: %s is %s on %s", context, state, sha[:12])

    def may_post_statuses(self) -> tuple[bool | None, str]:
        """Ask GitHub whether this credential may post a status: post one on a commit that cannot exist.

        Returns (True, why) on 422 (it may: only the commit is missing), (False,
        GitHub's words) on a 403 that is no rate limit, (None, why) when GitHub
        could not say. GitHub writes nothing either way.
        """
        try:
            self.set_status(NO_COMMIT, "singularity/probe", "pending", "probe: may this credential post a status?")
        except GitHubError as exc:
            if exc.status == 422:
                return True, f"GitHub answered 422 ({exc.reason}) on a commit that cannot exist"
            if exc.status in (401, 403) and exc.permanent:
                return False, exc.reason
            return None, str(exc)
        return None, "GitHub accepted a status on a commit that cannot exist (not GitHub's documented answer)"

    # --- auto-merge ----------------------------------------------------------------------------

    def _graphql_pull(self, number: int, kept: dict[str, Any]) -> Any:
        """A PyGithub pull request object carrying the node id the mutations need (no request made)."""
        return github.PullRequest.PullRequest(
            self.requester,
            {},
            {"node_id": kept["node_id"], "url": f"{self.repo.url}/pulls/{number}", "number": number},
            completed=True,
        )

    def arm_auto_merge(self, number: int, *, method: str, sha: str, by: str) -> PullInfo:
        """Arm GitHub-native auto-merge on ``number`` with ``method``, bound to the head ``sha``.

        GitHub merges it once every required check is green. A refusal —
        GraphQL errors on an HTTP 200, or any permanent error — is a permanent
        GitHubError "auto-merge unavailable: …" with GitHub's reason.
        """
        graphql_method = METHODS.get(method)
        if graphql_method is None:
            raise GitHubError(
                f"auto-merge unavailable: merge method {method!r} is not one of {', '.join(METHODS)}", permanent=True
            )
        kept, _row = self._read(number, self._row(number))
        if not kept.get("node_id"):
            raise GitHubError(f"auto-merge unavailable: GitHub gave PR #{number} no node id", permanent=True)
        pull = self._graphql_pull(number, kept)
        try:
            self._call(
                f"arm auto-merge ({method}) on PR #{number} at {sha[:12]}",
                lambda: pull.enable_automerge(merge_method=graphql_method, expected_head_oid=sha),
            )
        except GitHubError as exc:
            self._failed(number, exc)
            if exc.until is not None:
                raise  # a rate limit is no refusal: the arm is tried again after its reset
            raise GitHubError(
                f"auto-merge unavailable: GitHub refused to arm PR #{number}: {exc.reason}",
                permanent=True,
                status=exc.status,
                reason=exc.reason,
            ) from None
        GitHubPull.objects.filter(repository=self.key, number=number).update(
            armed_sha=sha, armed_method=method, armed_at=timezone.now(), armed_by=by[:200]
        )
        log.info("github: PR #%s armed for auto-merge (%s at %s, for %s)", number, method, sha[:12], by)
        return self.get_pull(number)

    def merge_checked(self, number: int, *, method: str, sha: str, by: str) -> PullInfo:
        """Merge ``number`` through GitHub's merge endpoint with ``sha`` (GitHub refuses with 409 if the head moved)
        and ``merge_method``: what the armed auto-merge would have done on a request GitHub found clean.
        """
        if method not in METHODS:
            raise GitHubError(f"merge method {method!r} is not one of {', '.join(METHODS)}", permanent=True)
        payload = {"sha": sha, "merge_method": method}
        try:
            self._call(
                f"merge PR #{number} ({method}) at {sha[:12]}",
                lambda: self.requester.requestJsonAndCheck(
                    "PUT", f"/repos/{self.repository}/pulls/{number}/merge", input=payload
                ),
            )
        except GitHubError as exc:
            self._failed(number, exc)
            raise
        log.info("github: merged PR #%s (%s at %s, for %s): it was clean", number, method, sha[:12], by)
        pull = self.get_pull(number)  # the first read to find it merged syncs the brain
        transaction.on_commit(lambda: pull_event(number))
        return pull

    def disarm_auto_merge(self, number: int) -> PullInfo:
        """Take an armed auto-merge back out (nothing when none stands); return the request as it is then."""
        kept, _row = self._read(number, self._row(number))
        if kept.get("state") == "open" and kept.get("auto_merge"):
            self._disarm(number, kept)
        else:
            GitHubPull.objects.filter(repository=self.key, number=number).update(armed_sha="", armed_method="")
        return self.get_pull(number)

    def _disarm(self, number: int, kept: dict[str, Any]) -> None:
        pull = self._graphql_pull(number, kept)
        self._call(f"take the auto-merge of PR #{number} out", lambda: pull.disable_automerge())
        GitHubPull.objects.filter(repository=self.key, number=number).update(armed_sha="", armed_method="")
        log.info("github: PR #%s's auto-merge taken out", number)

    # --- what the doctor reads -----------------------------------------------------------------

    def repository_facts(self) -> dict[str, Any]:
        """The repository as this credential sees it: private, allow_auto_merge (None when GitHub does not show
        it: that takes push or admin access), the merge methods allowed, the default branch.
        """
        _, data = self._call(
            f"read the repository {self.repository}",
            lambda: self.requester.requestJsonAndCheck("GET", f"/repos/{self.repository}"),
        )
        data = data or {}
        allowed = [m for m in METHODS if data.get(f"allow_{m}_merge" if m != "merge" else "allow_merge_commit")]
        return {
            "private": bool(data.get("private")),
            "allow_auto_merge": data.get("allow_auto_merge"),
            "methods": allowed,
            "default_branch": data.get("default_branch") or "",
        }

    def requirements(self, branch: str) -> Requirements:
        """The status checks ``branch`` requires: its classic protection and every active ruleset rule on it."""
        contexts: set[str] = set()
        sources: list[str] = []
        unreadable: list[str] = []
        unavailable = ""
        escaped = quote(branch, safe="")
        try:
            _, data = self._call(
                f"read the branch {branch}",
                lambda: self.requester.requestJsonAndCheck("GET", f"/repos/{self.repository}/branches/{escaped}"),
            )
            checks = ((data or {}).get("protection") or {}).get("required_status_checks") or {}
            classic = {str(c) for c in checks.get("contexts") or []} | {
                str(c["context"]) for c in checks.get("checks") or [] if isinstance(c, dict) and c.get("context")
            }
            if classic:
                contexts |= classic
                sources.append("branch protection")
        except GitHubError as exc:
            unreadable.append(f"branch protection: {exc}")
        try:
            for rule in self._call(f"read the rules on {branch}", lambda: list(self._rules(escaped))):
                if rule.get("type") != "required_status_checks":
                    continue
                found = {
                    str(c["context"])
                    for c in (rule.get("parameters") or {}).get("required_status_checks") or []
                    if isinstance(c, dict) and c.get("context")
                }
                if found:
                    contexts |= found
                    sources.append(f"ruleset {rule.get('ruleset_id', '?')}")
        except GitHubError as exc:
            if exc.status == 403 and "upgrade" in exc.reason.lower():
                unavailable = exc.reason
            else:
                unreadable.append(f"rulesets: {exc}")
        return Requirements(frozenset(contexts), tuple(sources), unavailable, tuple(unreadable))

    def _rules(self, escaped: str) -> Iterator[dict[str, Any]]:
        page = 1
        while True:
            _, data = self.requester.requestJsonAndCheck(
                "GET", f"/repos/{self.repository}/rules/branches/{escaped}", parameters={"per_page": 100, "page": page}
            )
            rules = [r for r in data or [] if isinstance(r, dict)]
            yield from rules
            if len(rules) < 100:
                return
            page += 1


def _went_live(number: int) -> None:
    """After GitHub merged PR ``number``: sync the brain at once (the next sync tick catches up on a failure)."""
    from evolution.forges.local import go_live

    go_live(number)
