"""A fake GitHub: a real HTTP server on loopback speaking the REST and GraphQL shapes the forge reads, and git.

Point ``GITHUB_API_URL`` at ``fake.api_url`` (GitHub Enterprise Server's
shape, ``/api/v3``; GraphQL at ``/api/graphql``) and ``BRAIN_REPO`` at
``fake.git_url``. The repository is a real bare repository
(``fake.repo_path``) served over smart HTTP by ``git http-backend``, behind
Basic auth with a token; a pull request's head is whatever its branch points
at there, and a push moves it (a ``synchronize`` event).

What it answers, as GitHub shapes it:

- ``GET /repos/{o}/{r}`` (``allow_auto_merge`` only when ``show_settings``),
  ``/branches/{b}`` (the protection summary), ``/rules/branches/{b}`` (paged;
  403 "Upgrade to GitHub Pro…" on a private repository without a plan);
- pull requests: create (422 bodies: missing branch, no commits, one already
  open), read with ``ETag`` / ``If-None-Match`` → 304, list (paged with
  ``Link``), close, merge (405 when a required status is not green, 409 when
  the head moved);
- ``POST /statuses/{sha}`` (403 "Resource not accessible…" for a credential
  without the permission, checked first; 422 "No commit found" for a commit
  that does not exist);
- ``POST /app/installations/{id}/access_tokens`` (a JWT signed by the App's
  key; installation tokens expire after ``app_token_lifetime``);
- GraphQL ``enablePullRequestAutoMerge`` / ``disablePullRequestAutoMerge``:
  a refusal is HTTP 200 with an ``errors`` entry of type ``UNPROCESSABLE``
  ("Pull request is in clean status", "Auto merge is not allowed for this
  repository", …). An armed request merges itself once every required status
  is success on its head; a push by a writer keeps the arm, as GitHub does.

``fake.fail(method, path_part, status, message, headers=…, times=…)`` scripts
errors (a secondary rate limit is ``403`` with ``Retry-After``). Every request
is kept in ``fake.requests`` (304s marked, since GitHub does not charge them).
Webhook deliveries (``pull_request`` opened, synchronize, closed,
auto_merge_enabled / _disabled), signed with ``webhook_secret``, queue in
``fake.outbox``: ``fake.deliver(client)`` posts them with Django's test
client, or ``fake.webhook_url = url`` has a thread post them over HTTP as
they happen; ``fake.dropping = True`` drops them.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import os
import queue
import re
import subprocess
import threading
import urllib.request
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qsl, urlencode, urlsplit

TOKEN = "ghp_FAKEtoken4TESTS000singularity0123456789"
OWNER, NAME = "acme", "brain"
WEBHOOK_SECRET = "github-webhook-secret-for-tests"
DOCS = "https://docs.github.com/rest"
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "GitHub",
    "GIT_AUTHOR_EMAIL": "noreply@github.test",
    "GIT_COMMITTER_NAME": "GitHub",
    "GIT_COMMITTER_EMAIL": "noreply@github.test",
    "GIT_TERMINAL_PROMPT": "0",
}


#: GitHub refuses a pull request's or a comment's body this long or longer.
BODY_MAX = 65_536


def _fits(body: Any, resource: str) -> None:
    """422 as GitHub answers a body over its bound."""
    if isinstance(body, str) and len(body) > BODY_MAX:
        error = {
            "resource": resource,
            "code": "custom",
            "field": "body",
            "message": f"body is too long (maximum is {BODY_MAX} characters)",
        }
        raise Refused(422, {"message": "Validation Failed", "errors": [error], "documentation_url": DOCS})


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _iso(value: datetime | None) -> str | None:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value else None


class Refused(Exception):
    def __init__(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        super().__init__(status, body)
        self.status, self.body, self.headers = status, body, headers or {}


@dataclass
class Pull:
    number: int
    title: str
    body: str
    head: str
    base: str
    head_sha: str
    author: str
    created_at: datetime
    state: str = "open"
    merged: bool = False
    merged_at: datetime | None = None
    merged_by: str = ""
    merge_commit_sha: str = ""
    closed_at: datetime | None = None
    auto_merge: dict[str, Any] | None = None
    comments: list[dict[str, Any]] = field(default_factory=list)

    @property
    def node_id(self) -> str:
        return f"PR_kwDOfake{self.number:06d}"


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    status: int
    token: str
    #: The X-GitHub-Api-Version the request named ("" when none).
    api_version: str = ""

    @property
    def conditional_hit(self) -> bool:
        """A 304: GitHub does not count it against the rate limit."""
        return self.status == 304


@dataclass
class Delivery:
    event: str
    action: str
    delivery: str
    body: bytes
    headers: dict[str, str]
    sent: bool = False
    answered: int | None = None


@dataclass
class Failure:
    method: str
    path_part: str
    status: int
    body: dict[str, Any]
    headers: dict[str, str]
    times: int


@dataclass
class App:
    app_id: int
    installation: int
    public_key: Any
    may_post_statuses: bool = True


@dataclass
class _State:
    pulls: dict[int, Pull] = field(default_factory=dict)
    statuses: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    outbox: list[Delivery] = field(default_factory=list)
    failures: deque[Failure] = field(default_factory=deque)
    installation_tokens: dict[str, datetime] = field(default_factory=dict)


class FakeGitHub:
    """GitHub on 127.0.0.1 for one repository, with a real bare repository behind it."""

    def __init__(self, root: Path, *, owner: str = OWNER, name: str = NAME, token: str = TOKEN) -> None:
        self.root = root
        self.owner, self.name = owner, name
        self.full_name = f"{owner}/{name}"
        self.repo_path = root / owner / f"{name}.git"
        #: Personal tokens the fake accepts, each with whether it may post commit statuses.
        self.tokens: dict[str, bool] = {token: True}
        self.app: App | None = None
        self.app_token_lifetime = timedelta(hours=1)
        self.private = False
        self.has_branch_rules_plan = True
        self.show_settings = True
        self.allow_auto_merge = True
        self.allow_merge_commit = True
        self.allow_squash_merge = True
        self.allow_rebase_merge = True
        #: Classic branch protection on the default branch: its required contexts (None: not protected).
        self.protection: list[str] | None = None
        #: Active rulesets on the default branch, each a list of required contexts.
        self.rulesets: list[list[str]] = []
        self.webhook_secret = WEBHOOK_SECRET
        self.webhook_url = ""
        self.dropping = False
        self._state = _State()
        self._lock = threading.RLock()
        self._numbers = itertools.count(1)
        self._status_ids = itertools.count(1)
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self._sender: threading.Thread | None = None
        self._sending: queue.Queue[Delivery | None] = queue.Queue()
        self._tips: dict[str, str] | None = None

    # --- The server -----------------------------------------------------------------------------

    def start(self, port: int = 0) -> Self:
        httpd = _Server(("127.0.0.1", port), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        self._sender = threading.Thread(target=self._send_forever, daemon=True, name="fake-github-hooks")
        self._sender.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._sending.put(None)
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def origin(self) -> str:
        assert self._httpd is not None, "the fake GitHub is not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def api_url(self) -> str:
        return f"{self.origin}/api/v3"

    @property
    def git_url(self) -> str:
        return f"{self.origin}/{self.full_name}.git"

    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._state.requests)

    @property
    def outbox(self) -> list[Delivery]:
        with self._lock:
            return list(self._state.outbox)

    # --- The repository ------------------------------------------------------------------------

    def seed(self, source: Path, branch: str = "main") -> None:
        """Make the repository a bare one holding one commit of ``source``'s files on ``branch``."""
        work = self.root / "seed-work"
        self.repo_path.parent.mkdir(parents=True, exist_ok=True)
        _git("init", "--quiet", "--bare", "--initial-branch", branch, str(self.repo_path))
        _git("init", "--quiet", "--initial-branch", branch, str(work))
        _git("--work-tree", str(source), "--git-dir", str(work / ".git"), "add", "--all", ".", cwd=source)
        _git("--work-tree", str(source), "--git-dir", str(work / ".git"), "commit", "--quiet", "-m", "Initial brain")
        _git("--git-dir", str(work / ".git"), "push", "--quiet", str(self.repo_path), f"{branch}:{branch}")
        _git("config", "http.receivepack", "true", cwd=self.repo_path)
        self.refs_changed()

    def tip(self, branch: str) -> str | None:
        """The commit ``branch`` points at in the bare repository now (None: no such branch)."""
        with self._lock:
            if self._tips is None:
                listed = _git(
                    "for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads", cwd=self.repo_path
                )
                self._tips = dict(line.rsplit(" ", 1) for line in listed.splitlines() if line.strip())
            return self._tips.get(branch)

    def refs_changed(self) -> None:
        """Forget the branch tips read so far (after a write to the repository that did not come through the fake)."""
        with self._lock:
            self._tips = None

    def show(self, commit: str, path: str) -> str:
        return _git("show", f"{commit}:{path}", cwd=self.repo_path)

    def required(self) -> list[str]:
        """Every context the default branch requires (classic protection and rulesets)."""
        found = list(self.protection or [])
        for ruleset in self.rulesets:
            found += [c for c in ruleset if c not in found]
        return found

    # --- Acting as GitHub or a person ------------------------------------------------------------

    def pull(self, number: int) -> Pull:
        with self._lock:
            return self._state.pulls[number]

    def statuses(self, sha: str) -> dict[str, str]:
        with self._lock:
            return {c: s["state"] for c, s in self._state.statuses.get(sha, {}).items()}

    def post_status(self, sha: str, context: str, state: str = "success", description: str = "") -> None:
        """A CI (or a person) posts a status; an armed request that turns green merges."""
        with self._lock:
            self._status(sha, context, state, description, creator="ci")
            self._land_armed()

    def merge(self, number: int, *, by: str = "alice", method: str = "merge") -> str:
        """A person presses Merge; return the merge commit (Refused as GitHub refuses it)."""
        with self._lock:
            return self._merge(self._state.pulls[number], method=method, by=by)

    def close(self, number: int, *, by: str = "alice") -> None:
        with self._lock:
            pull = self._state.pulls[number]
            pull.state, pull.closed_at = "closed", _now()
            self._emit("closed", pull, by)

    def disable_auto_merge(self, number: int, *, by: str = "alice") -> None:
        with self._lock:
            pull = self._state.pulls[number]
            pull.auto_merge = None
            self._emit("auto_merge_disabled", pull, by)

    def fail(
        self,
        method: str,
        path_part: str,
        status: int,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        times: int = 1,
        body: dict[str, Any] | None = None,
    ) -> None:
        """The next ``times`` requests of ``method`` whose path contains ``path_part`` answer ``status``."""
        answer = body if body is not None else {"message": message, "documentation_url": DOCS}
        with self._lock:
            self._state.failures.append(Failure(method, path_part, status, answer, headers or {}, times))

    def use_app(self, app_id: int, installation: int, public_key: Any) -> App:
        self.app = App(app_id, installation, public_key)
        return self.app

    # --- Webhooks --------------------------------------------------------------------------------

    def _emit(self, action: str, pull: Pull, sender: str) -> None:
        payload = {
            "action": action,
            "number": pull.number,
            "pull_request": self._pull_json(pull, single=True),
            "repository": {"full_name": self.full_name, "name": self.name, "owner": {"login": self.owner}},
            "sender": {"login": sender},
        }
        body = json.dumps(payload).encode()
        signature = "sha256=" + hmac.new(self.webhook_secret.encode(), body, hashlib.sha256).hexdigest()
        delivery = Delivery(
            event="pull_request",
            action=action,
            delivery=str(uuid.uuid4()),
            body=body,
            headers={
                "X-GitHub-Event": "pull_request",
                "X-GitHub-Delivery": "",
                "X-Hub-Signature-256": signature,
                "User-Agent": "GitHub-Hookshot/fake",
            },
        )
        delivery.headers["X-GitHub-Delivery"] = delivery.delivery
        self._state.outbox.append(delivery)
        if self.webhook_url and not self.dropping:
            delivery.sent = True
            self._sending.put(delivery)

    def _send_forever(self) -> None:
        while True:
            delivery = self._sending.get()
            if delivery is None:
                return
            request = urllib.request.Request(
                self.webhook_url,
                data=delivery.body,
                method="POST",
                headers={**delivery.headers, "Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    delivery.answered = answer.status
            except urllib.error.HTTPError as exc:
                delivery.answered = exc.code
            except OSError:
                delivery.answered = -1

    def deliver(self, client: Any, *, path: str = "/github/webhook/") -> list[int]:
        """Post every delivery not yet sent (none while ``dropping``) with a Django test client; their statuses."""
        with self._lock:
            waiting = [d for d in self._state.outbox if not d.sent]
            for delivery in waiting:
                delivery.sent = True
        if self.dropping:
            return []
        return [self.redeliver(client, delivery, path=path) for delivery in waiting]

    def redeliver(self, client: Any, delivery: Delivery, *, path: str = "/github/webhook/") -> int:
        """Post ``delivery`` again, as GitHub's Redeliver does (the same X-GitHub-Delivery id)."""
        answer = client.post(path, data=delivery.body, content_type="application/json", headers=delivery.headers)
        delivery.answered = answer.status_code
        return answer.status_code

    # --- Requests --------------------------------------------------------------------------------

    def handle(self, method: str, target: str, headers: Any, body: bytes) -> tuple[int, dict[str, str], bytes]:
        url = urlsplit(target)
        path, query = url.path, dict(parse_qsl(url.query))
        if path.startswith(f"/{self.full_name}.git/"):
            return self._git_http(method, path, url.query, headers, body)
        token = self._caller(headers.get("Authorization", ""), path)
        with self._lock:
            try:
                failure = self._scripted(method, path)
                if failure is not None:
                    raise Refused(failure.status, failure.body, failure.headers)
                if token is None:
                    raise Refused(401, {"message": "Bad credentials", "documentation_url": DOCS})
                status, answer, extra = self._route(method, path, query, headers, body, token)
            except Refused as refused:
                status, answer, extra = refused.status, refused.body, refused.headers
            version = str(headers.get("X-GitHub-Api-Version") or "")
            self._state.requests.append(Request(method, path, status, token or "", version))
            charged = sum(1 for r in self._state.requests if r.status != 304)
        extra = {
            "X-RateLimit-Limit": "5000",
            "X-RateLimit-Remaining": str(max(0, 5000 - charged)),
            "X-RateLimit-Reset": str(int(_now().timestamp()) + 3600),
            **extra,
        }
        if status == 304 or answer is None:
            return status, extra, b""
        return status, {"Content-Type": "application/json; charset=utf-8", **extra}, json.dumps(answer).encode()

    def _scripted(self, method: str, path: str) -> Failure | None:
        for failure in list(self._state.failures):
            if failure.method == method and failure.path_part in path:
                failure.times -= 1
                if failure.times <= 0:
                    self._state.failures.remove(failure)
                return failure
        return None

    def _caller(self, authorization: str, path: str) -> str | None:
        """The token a request carries, when the fake accepts it (an App's JWT only on /app/ paths)."""
        scheme, _, value = authorization.partition(" ")
        value = value.strip()
        if scheme.lower() == "bearer" and path.startswith("/api/v3/app/"):
            return value if self.app is not None else None
        if scheme.lower() not in ("token", "bearer"):
            return None
        with self._lock:
            if value in self.tokens:
                return value
            expires = self._state.installation_tokens.get(value)
            if expires is not None and expires > _now():
                return value
        return None

    def _route(
        self, method: str, path: str, query: dict[str, str], headers: Any, body: bytes, token: str
    ) -> tuple[int, Any, dict[str, str]]:
        data = json.loads(body or b"{}") if body else {}
        if path == "/api/graphql" and method == "POST":
            return 200, self._graphql(data, token), {}
        match = re.fullmatch(r"/api/v3/app/installations/(\d+)/access_tokens", path)
        if match and method == "POST":
            return 201, self._installation_token(int(match.group(1)), token), {}
        prefix = f"/api/v3/repos/{self.full_name}"
        if not path.startswith(prefix):
            raise Refused(404, {"message": "Not Found", "documentation_url": DOCS})
        rest = path[len(prefix) :]
        if rest == "" and method == "GET":
            return 200, self._repo_json(), {}
        if m := re.fullmatch(r"/branches/(.+)", rest):
            return 200, self._branch_json(m.group(1)), {}
        if m := re.fullmatch(r"/rules/branches/(.+)", rest):
            return self._rules(m.group(1), query, path)
        if rest == "/pulls" and method == "POST":
            return 201, self._create_pull(data, token), {}
        if rest == "/pulls" and method == "GET":
            return self._list_pulls(query, path)
        if m := re.fullmatch(r"/pulls/(\d+)", rest):
            pull = self._state.pulls.get(int(m.group(1)))
            if pull is None:
                raise Refused(404, {"message": "Not Found", "documentation_url": DOCS})
            if method == "PATCH":
                return 200, self._edit_pull(pull, data), {}
            answer = self._pull_json(pull, single=True)
            etag = 'W/"' + hashlib.sha1(json.dumps(answer, sort_keys=True).encode()).hexdigest() + '"'
            if headers.get("If-None-Match") == etag:
                return 304, None, {"ETag": etag}
            return 200, answer, {"ETag": etag}
        if (m := re.fullmatch(r"/pulls/(\d+)/merge", rest)) and method == "PUT":
            pull = self._state.pulls[int(m.group(1))]
            sha = self._merge(pull, method=data.get("merge_method") or "merge", by="api", sha=data.get("sha"))
            return 200, {"sha": sha, "merged": True, "message": "Pull Request successfully merged"}, {}
        if (m := re.fullmatch(r"/issues/(\d+)/comments", rest)) and method == "POST":
            pull = self._state.pulls.get(int(m.group(1)))
            if pull is None:
                raise Refused(404, {"message": "Not Found", "documentation_url": DOCS})
            if not isinstance(data.get("body"), str) or not data["body"]:
                raise Refused(422, {"message": "Validation Failed", "errors": [{"field": "body", "code": "missing"}]})
            _fits(data["body"], "IssueComment")
            comment = {
                "id": len(pull.comments) + 1,
                "body": data["body"],
                "user": {"login": "singularity-bot"},
                "created_at": _now().isoformat().replace("+00:00", "Z"),
                "html_url": f"{self.origin}/{self.full_name}/pull/{pull.number}#issuecomment-{len(pull.comments) + 1}",
            }
            pull.comments.append(comment)
            return 201, comment, {}
        if (m := re.fullmatch(r"/statuses/([0-9a-fA-F]+)", rest)) and method == "POST":
            return 201, self._post_status(m.group(1), data, token), {}
        if (m := re.fullmatch(r"/commits/([0-9a-fA-F]+)/status", rest)) and method == "GET":
            return 200, self._combined(m.group(1)), {}
        raise Refused(404, {"message": "Not Found", "documentation_url": DOCS})

    # --- Repository reads --------------------------------------------------------------------------

    def _repo_json(self) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "id": 4242,
            "node_id": "R_fake",
            "name": self.name,
            "full_name": self.full_name,
            "owner": {"login": self.owner},
            "private": self.private,
            "html_url": f"{self.origin}/{self.full_name}",
            "url": f"{self.api_url}/repos/{self.full_name}",
            "default_branch": "main",
            "permissions": {"admin": self.show_settings, "push": self.show_settings, "pull": True},
        }
        if self.show_settings:
            answer.update(
                allow_auto_merge=self.allow_auto_merge,
                allow_merge_commit=self.allow_merge_commit,
                allow_squash_merge=self.allow_squash_merge,
                allow_rebase_merge=self.allow_rebase_merge,
            )
        return answer

    def _branch_json(self, branch: str) -> dict[str, Any]:
        tip = self.tip(branch)
        if tip is None:
            raise Refused(404, {"message": "Branch not found", "documentation_url": DOCS})
        contexts = list(self.protection or []) if self._rules_allowed() else []
        return {
            "name": branch,
            "commit": {"sha": tip, "url": f"{self.api_url}/repos/{self.full_name}/commits/{tip}"},
            "protected": bool(contexts),
            "protection": {
                "enabled": bool(contexts),
                "required_status_checks": {
                    "enforcement_level": "non_admins" if contexts else "off",
                    "contexts": contexts,
                    "checks": [{"context": c, "app_id": None} for c in contexts],
                },
            },
            "protection_url": f"{self.api_url}/repos/{self.full_name}/branches/{branch}/protection",
        }

    def _rules_allowed(self) -> bool:
        return not self.private or self.has_branch_rules_plan

    def _rules(self, branch: str, query: dict[str, str], path: str) -> tuple[int, Any, dict[str, str]]:
        if not self._rules_allowed():
            raise Refused(
                403,
                {
                    "message": "Upgrade to GitHub Pro or make this repository public to enable this feature.",
                    "documentation_url": DOCS,
                },
            )
        rules = [
            {
                "type": "required_status_checks",
                "ruleset_source_type": "Repository",
                "ruleset_source": self.full_name,
                "ruleset_id": 100 + i,
                "parameters": {
                    "strict_required_status_checks_policy": False,
                    "required_status_checks": [{"context": c} for c in contexts],
                },
            }
            for i, contexts in enumerate(self.rulesets)
        ]
        rules += [{"type": "deletion", "ruleset_source_type": "Repository", "ruleset_id": 100}] if rules else []
        return self._paged(rules, query, path)

    def _paged(self, items: list[Any], query: dict[str, str], path: str) -> tuple[int, Any, dict[str, str]]:
        """One page of ``items`` with GitHub's Link header (per_page at most 100, 30 by default)."""
        per_page = max(1, min(100, int(query.get("per_page") or 30)))
        page = max(1, int(query.get("page") or 1))
        last = max(1, -(-len(items) // per_page))
        chunk = items[(page - 1) * per_page : page * per_page]
        links = []
        for rel, number in (("next", page + 1), ("last", last), ("first", 1), ("prev", page - 1)):
            if (rel == "next" and page >= last) or (rel == "prev" and page <= 1) or (rel == "last" and page >= last):
                continue
            if rel == "first" and page <= 1:
                continue
            links.append(f'<{self.origin}{path}?{urlencode({**query, "page": number})}>; rel="{rel}"')
        return 200, chunk, ({"Link": ", ".join(links)} if links else {})

    # --- Pull requests ---------------------------------------------------------------------------

    def _pull_json(self, pull: Pull, *, single: bool) -> dict[str, Any]:
        base_tip = self.tip(pull.base) or ""
        answer: dict[str, Any] = {
            "url": f"{self.api_url}/repos/{self.full_name}/pulls/{pull.number}",
            "id": 9000 + pull.number,
            "node_id": pull.node_id,
            "html_url": f"{self.origin}/{self.full_name}/pull/{pull.number}",
            "number": pull.number,
            "state": pull.state,
            "locked": False,
            "title": pull.title,
            "body": pull.body,
            "user": {"login": pull.author},
            "created_at": _iso(pull.created_at),
            "updated_at": _iso(pull.closed_at or pull.created_at),
            "closed_at": _iso(pull.closed_at),
            "merged_at": _iso(pull.merged_at),
            "merge_commit_sha": pull.merge_commit_sha or None,
            "draft": False,
            "head": {"label": f"{self.owner}:{pull.head}", "ref": pull.head, "sha": pull.head_sha},
            "base": {"label": f"{self.owner}:{pull.base}", "ref": pull.base, "sha": base_tip},
            "auto_merge": (
                {
                    "enabled_by": {"login": pull.auto_merge["by"]},
                    "merge_method": pull.auto_merge["method"],
                    "commit_title": pull.title,
                    "commit_message": "",
                }
                if pull.auto_merge
                else None
            ),
        }
        if single:  # GitHub answers these on a single pull request only
            answer.update(
                merged=pull.merged,
                mergeable=True if pull.state == "open" else None,
                mergeable_state=self._mergeable_state(pull),
                merged_by={"login": pull.merged_by} if pull.merged else None,
            )
        return answer

    def _mergeable_state(self, pull: Pull) -> str:
        if pull.state != "open":
            return "unknown"
        return "clean" if not self._blockers(pull) else "blocked"

    def _blockers(self, pull: Pull) -> list[str]:
        """What keeps ``pull`` from merging: each required status not success on its head."""
        on_head = self._state.statuses.get(pull.head_sha, {})
        blockers = []
        for context in self.required() if self._rules_allowed() else []:
            state = on_head.get(context, {}).get("state")
            if state != "success":
                blockers.append(f'Required status check "{context}" is {"expected" if state is None else state}.')
        return blockers

    def _create_pull(self, data: dict[str, Any], token: str) -> dict[str, Any]:
        head, base = str(data.get("head") or ""), str(data.get("base") or "")
        head = head.split(":", 1)[1] if ":" in head else head
        invalid = [f for f, ref in (("head", head), ("base", base)) if not ref or self.tip(ref) is None]
        if invalid:
            raise Refused(
                422, _validation([{"resource": "PullRequest", "field": f, "code": "invalid"} for f in invalid])
            )
        head_sha, base_tip = self.tip(head), self.tip(base)
        assert head_sha and base_tip
        _fits(data.get("body"), "Issue")
        if head == base or _is_ancestor(head_sha, base_tip, self.repo_path):
            raise Refused(422, _validation([_custom(f"No commits between {base} and {head}")]))
        for other in self._state.pulls.values():
            if other.state == "open" and other.head == head and other.base == base:
                raise Refused(422, _validation([_custom(f"A pull request already exists for {self.owner}:{head}.")]))
        pull = Pull(
            number=next(self._numbers),
            title=str(data.get("title") or ""),
            body=str(data.get("body") or ""),
            head=head,
            base=base,
            head_sha=head_sha,
            author="singularity-bot",
            created_at=_now(),
        )
        self._state.pulls[pull.number] = pull
        self._emit("opened", pull, pull.author)
        return self._pull_json(pull, single=True)

    def _list_pulls(self, query: dict[str, str], path: str) -> tuple[int, Any, dict[str, str]]:
        state = query.get("state") or "open"
        pulls = sorted(self._state.pulls.values(), key=lambda p: p.number, reverse=query.get("direction") != "asc")
        if state != "all":
            pulls = [p for p in pulls if p.state == state]
        if query.get("head"):
            pulls = [p for p in pulls if f"{self.owner}:{p.head}" == query["head"]]
        if query.get("base"):
            pulls = [p for p in pulls if p.base == query["base"]]
        return self._paged([self._pull_json(p, single=False) for p in pulls], query, path)

    def _edit_pull(self, pull: Pull, data: dict[str, Any]) -> dict[str, Any]:
        if data.get("state") == "closed" and pull.state == "open":
            pull.state, pull.closed_at, pull.auto_merge = "closed", _now(), None
            self._emit("closed", pull, "singularity-bot")
        elif data.get("state") == "closed" and pull.merged:
            raise Refused(422, _validation([_custom("Cannot close a merged pull request")]))
        return self._pull_json(pull, single=True)

    def _merge(self, pull: Pull, *, method: str, by: str, sha: str | None = None) -> str:
        if pull.state != "open":
            raise Refused(405, {"message": "Pull Request is not mergeable", "documentation_url": DOCS})
        if sha and sha != pull.head_sha:
            raise Refused(409, {"message": "Head branch was modified. Review and try the merge again."})
        allowed = {
            "merge": self.allow_merge_commit,
            "squash": self.allow_squash_merge,
            "rebase": self.allow_rebase_merge,
        }
        if not allowed.get(method, False):
            word = {"merge": "Merge commits", "squash": "Squash merges", "rebase": "Rebase merges"}.get(method, method)
            raise Refused(405, {"message": f"{word} are not allowed on this repository.", "documentation_url": DOCS})
        blockers = self._blockers(pull)
        if blockers:
            raise Refused(405, {"message": blockers[0], "documentation_url": DOCS})
        base_tip = self.tip(pull.base)
        assert base_tip
        try:
            tree = _git("merge-tree", "--write-tree", base_tip, pull.head_sha, cwd=self.repo_path).splitlines()[0]
        except subprocess.CalledProcessError:
            raise Refused(405, {"message": "Pull Request is not mergeable"}) from None
        if method == "merge":
            message = f"Merge pull request #{pull.number} from {self.owner}/{pull.head}\n\n{pull.title}\n"
            parents = ["-p", base_tip, "-p", pull.head_sha]
        else:
            message = f"{pull.title} (#{pull.number})\n"
            parents = ["-p", base_tip]
        commit = _git("commit-tree", tree, *parents, "-m", message, cwd=self.repo_path)
        _git("update-ref", f"refs/heads/{pull.base}", commit, base_tip, cwd=self.repo_path)
        self.refs_changed()
        pull.state, pull.merged, pull.merged_at, pull.closed_at = "closed", True, _now(), _now()
        pull.merged_by, pull.merge_commit_sha, pull.auto_merge = by, commit, None
        self._emit("closed", pull, by)
        return commit

    def _land_armed(self) -> None:
        for pull in list(self._state.pulls.values()):
            if pull.state == "open" and pull.auto_merge and not self._blockers(pull):
                self._merge(pull, method=pull.auto_merge["method"], by=pull.auto_merge["by"])

    def _refresh_heads(self) -> None:
        """After a push: every open request follows its branch (a writer's push keeps an arm, as on GitHub)."""
        with self._lock:
            self.refs_changed()
            for pull in self._state.pulls.values():
                if pull.state != "open":
                    continue
                sha = self.tip(pull.head)
                if sha and sha != pull.head_sha:
                    pull.head_sha = sha
                    self._emit("synchronize", pull, "pusher")

    # --- Statuses ----------------------------------------------------------------------------------

    def _status(self, sha: str, context: str, state: str, description: str, *, creator: str) -> dict[str, Any]:
        record = {
            "url": f"{self.api_url}/repos/{self.full_name}/statuses/{sha}",
            "id": next(self._status_ids),
            "state": state,
            "description": description,
            "context": context,
            "target_url": None,
            "created_at": _iso(_now()),
            "updated_at": _iso(_now()),
            "creator": {"login": creator},
        }
        self._state.statuses.setdefault(sha, {})[context] = record
        return record

    def _post_status(self, sha: str, data: dict[str, Any], token: str) -> dict[str, Any]:
        if not self._may_post_statuses(token):
            by = "integration" if token in self._state.installation_tokens else "personal access token"
            raise Refused(403, {"message": f"Resource not accessible by {by}", "documentation_url": DOCS})
        if len(sha) != 40 or not _commit_exists(sha, self.repo_path):
            raise Refused(422, {"message": f"No commit found for SHA: {sha}", "documentation_url": DOCS})
        state = data.get("state")
        if state not in ("pending", "success", "failure", "error"):
            raise Refused(422, _validation([{"resource": "Status", "field": "state", "code": "custom"}]))
        if len(str(data.get("description") or "")) > 140:
            raise Refused(422, _validation([_custom("description is too long (maximum is 140 characters)")]))
        record = self._status(
            sha, str(data.get("context") or "default"), state, str(data.get("description") or ""), creator="bot"
        )
        self._land_armed()
        return record

    def _may_post_statuses(self, token: str) -> bool:
        if token in self._state.installation_tokens:
            return self.app is not None and self.app.may_post_statuses
        return self.tokens.get(token, False)

    def _combined(self, sha: str) -> dict[str, Any]:
        statuses = list(self._state.statuses.get(sha, {}).values())
        states = {s["state"] for s in statuses}
        overall = "failure" if states & {"failure", "error"} else ("success" if states == {"success"} else "pending")
        return {"state": overall, "sha": sha, "statuses": statuses, "total_count": len(statuses)}

    # --- The App ---------------------------------------------------------------------------------

    def _installation_token(self, installation: int, jwt_token: str) -> dict[str, Any]:
        import jwt

        if self.app is None or installation != self.app.installation:
            raise Refused(404, {"message": "Not Found", "documentation_url": DOCS})
        try:
            claims = jwt.decode(jwt_token, self.app.public_key, algorithms=["RS256"])
        except jwt.PyJWTError as exc:
            raise Refused(401, {"message": f"A JSON web token could not be decoded ({exc})"}) from None
        if str(claims.get("iss")) != str(self.app.app_id):
            raise Refused(401, {"message": "'Issuer' claim ('iss') must be an Integer"})
        token = "ghs_" + uuid.uuid4().hex + uuid.uuid4().hex[:4]
        expires = _now() + self.app_token_lifetime
        self._state.installation_tokens[token] = expires
        return {
            "token": token,
            "expires_at": _iso(expires),
            "permissions": {"statuses": "write", "pull_requests": "write", "contents": "write"},
            "repository_selection": "selected",
        }

    @property
    def installation_tokens(self) -> dict[str, datetime]:
        with self._lock:
            return dict(self._state.installation_tokens)

    # --- GraphQL ---------------------------------------------------------------------------------

    def _graphql(self, data: dict[str, Any], token: str) -> dict[str, Any]:
        query = str(data.get("query") or "")
        variables = (data.get("variables") or {}).get("input") or {}
        for name in ("enablePullRequestAutoMerge", "disablePullRequestAutoMerge"):
            if f"{name}(" in query:
                try:
                    answer = self._enable(variables) if name.startswith("enable") else self._disable(variables)
                except _Unprocessable as refusal:
                    return {
                        "data": {name: None},
                        "errors": [
                            {
                                "type": refusal.kind,
                                "path": [name],
                                "locations": [{"line": 1, "column": 58}],
                                "message": str(refusal),
                            }
                        ],
                    }
                return {"data": {name: answer}}
        return {"errors": [{"message": "Unknown query", "type": "UNKNOWN"}]}

    def _by_node(self, node_id: str) -> Pull:
        for pull in self._state.pulls.values():
            if pull.node_id == node_id:
                return pull
        raise _Unprocessable(f"Could not resolve to a node with the global id of '{node_id}'", kind="NOT_FOUND")

    def _enable(self, variables: dict[str, Any]) -> dict[str, Any]:
        pull = self._by_node(str(variables.get("pullRequestId") or ""))
        method = str(variables.get("mergeMethod") or "MERGE").lower()
        if not self.allow_auto_merge:
            raise _Unprocessable("Auto merge is not allowed for this repository")
        if pull.state != "open":
            raise _Unprocessable("Pull request is not open")
        allowed = {
            "merge": self.allow_merge_commit,
            "squash": self.allow_squash_merge,
            "rebase": self.allow_rebase_merge,
        }
        if not allowed.get(method):
            word = {"merge": "Merge commits", "squash": "Squash merges", "rebase": "Rebase merges"}[method]
            raise _Unprocessable(f"{word} are not allowed on this repository.")
        if not self._rules_allowed() or not self.required():
            raise _Unprocessable("Protected branch rules not configured for this branch")
        expected = variables.get("expectedHeadOid")
        if expected and expected != pull.head_sha:
            raise _Unprocessable("Head branch was modified. Review and try the merge again.")
        if self._mergeable_state(pull) == "clean":
            raise _Unprocessable("Pull request is in clean status")
        pull.auto_merge = {"method": method, "by": "singularity-bot"}
        self._emit("auto_merge_enabled", pull, "singularity-bot")
        return {"actor": {"login": "singularity-bot"}, "clientMutationId": None}

    def _disable(self, variables: dict[str, Any]) -> dict[str, Any]:
        pull = self._by_node(str(variables.get("pullRequestId") or ""))
        if not pull.auto_merge:
            raise _Unprocessable("Auto merge is not enabled for this pull request")
        pull.auto_merge = None
        self._emit("auto_merge_disabled", pull, "singularity-bot")
        return {"actor": {"login": "singularity-bot"}, "clientMutationId": None}

    # --- git over HTTP -----------------------------------------------------------------------------

    def _git_http(
        self, method: str, path: str, query: str, headers: Any, body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        if not self._git_caller(headers.get("Authorization", "")):
            with self._lock:
                self._state.requests.append(Request(method, path, 401, ""))
            return 401, {"WWW-Authenticate": 'Basic realm="GitHub"', "Content-Type": "text/plain"}, b"Unauthorized\n"
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": path,
            "REQUEST_METHOD": method,
            "QUERY_STRING": query,
            "CONTENT_TYPE": headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": "x-access-token",
            "REMOTE_ADDR": "127.0.0.1",
        }
        if headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = headers["Content-Encoding"]
        if headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = headers["Git-Protocol"]
        proc = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, check=False)
        head, _, payload = proc.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = proc.stdout.partition(b"\n\n")
        status, out_headers = 200, {}
        for line in head.decode(errors="replace").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                out_headers[name.strip()] = value.strip()
        with self._lock:
            self._state.requests.append(Request(method, path, status, "git"))
        if method == "POST" and path.endswith("/git-receive-pack"):
            self._refresh_heads()
        return status, out_headers, payload

    def _git_caller(self, authorization: str) -> bool:
        import base64

        scheme, _, value = authorization.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            _user, _, password = base64.b64decode(value).decode().partition(":")
        except ValueError:
            return False
        return self._caller(f"token {password}", "/git") is not None


class _Unprocessable(Exception):
    def __init__(self, message: str, *, kind: str = "UNPROCESSABLE") -> None:
        super().__init__(message)
        self.kind = kind


def _validation(errors: list[dict[str, Any]]) -> dict[str, Any]:
    return {"message": "Validation Failed", "errors": errors, "documentation_url": DOCS}


def _custom(message: str) -> dict[str, Any]:
    return {"resource": "PullRequest", "code": "custom", "message": message}


def _git(*args: str, cwd: Path | str | None = None) -> str:
    out = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, check=True, env={**os.environ, **_GIT_ENV}, timeout=60
    )
    return out.stdout.decode().strip()


def _commit_exists(sha: str, repo: Path) -> bool:
    proc = subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=repo, capture_output=True, check=False)
    return proc.returncode == 0


def _is_ancestor(ancestor: str, descendant: str, repo: Path) -> bool:
    proc = subprocess.run(["git", "merge-base", "--is-ancestor", ancestor, descendant], cwd=repo, check=False)
    return proc.returncode == 0


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 — the base class's name
        return

    def _answer(self) -> None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = self._chunked()
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, headers, payload = self.server.owner.handle(self.command, self.path, self.headers, body)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if payload:
            self.wfile.write(payload)

    def _chunked(self) -> bytes:
        parts = []
        while True:
            size = int(self.rfile.readline().strip().split(b";")[0], 16)
            if size == 0:
                self.rfile.readline()
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline()

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer  # noqa: N815 — the base class's names


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: FakeGitHub


def main() -> None:
    """Serve a fake GitHub holding a brain until Ctrl-C, and print the environment that points Singularity at it."""
    import argparse
    import tempfile
    import time

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--seed", default="demo_brain", help="the folder whose files are the repository's main")
    parser.add_argument("--require", default="singularity/diff-gate", help="required contexts on main, comma-separated")
    parser.add_argument("--webhook", default="http://127.0.0.1:8000/github/webhook/", help="where deliveries go")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="fake-github-"))
    fake = FakeGitHub(root).start(args.port)
    fake.seed(Path(args.seed).resolve())
    fake.protection = [c.strip() for c in args.require.split(",") if c.strip()] or None
    fake.webhook_url = args.webhook
    print(f"# A fake GitHub on {fake.origin}, the repository {fake.full_name} seeded from {args.seed}; deliveries")
    print(f"# go to {args.webhook}. Export these where the dashboard, the worker and beat run:")
    print("export LOOP_FORGE=github")
    print(f"export GITHUB_API_URL={fake.api_url}")
    print(f"export GITHUB_REPOSITORY={fake.full_name}")
    print(f"export GITHUB_TOKEN={TOKEN}")
    print(f"export GITHUB_WEBHOOK_SECRET={fake.webhook_secret}")
    print(f"export BRAIN_CHECKOUT={root / 'checkout'}")
    print("# A person merges PR 1 (or a CI posts a status) with:")
    print(f"#   curl -X PUT -H 'Authorization: token {TOKEN}' {fake.api_url}/repos/{fake.full_name}/pulls/1/merge")
    print(
        f'#   curl -X POST -H \'Authorization: token {TOKEN}\' -d \'{{"state": "success", "context": '
        f'"ci/tests"}}\' {fake.api_url}/repos/{fake.full_name}/statuses/<sha>'
    )
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        fake.stop()


if __name__ == "__main__":
    main()
