"""The GitHub forge against the fake GitHub: the real PyGithub, the real git client, a real bare repository.

Seed 003 "What your repository must require" and "Choosing who answers the
gates" (R12.4–R12.6, R12.13, R12.15, R12.25): pushing with the token, opening
a PR, statuses, conditional reads, auto-merge arms and GitHub's refusals of
them (GraphQL errors on HTTP 200), errors marked permanent or temporary,
retries that honour Retry-After, the App lane's installation tokens, and every
outcome saved on the PR's row.
"""

from __future__ import annotations

import base64
import re
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from evolution.forges import get_forge, git_env
from evolution.forges import github as github_forge
from evolution.forges.base import DIFF_GATE, VALIDATION
from evolution.forges.github import GitHubError, GitHubForge
from evolution.models import GitHubPull
from singularity.brain.git import GitError, git
from singularity.errors import ConfigError
from tests.evolution.github_helpers import GitHubBrain, github_brain
from tests.fakes.github import TOKEN, Refused

pytestmark = pytest.mark.django_db

SECONDARY = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."


@pytest.fixture
def gb(tmp_path, settings, github_on) -> GitHubBrain:
    return github_brain(tmp_path, settings, github_on)


@pytest.fixture
def waits(monkeypatch) -> list[float]:
    """The waits the forge's retries spend, read instead of slept."""
    spent: list[float] = []
    monkeypatch.setattr(github_forge, "_sleep", spent.append)
    return spent


def opened(gb: GitHubBrain, branch: str = "loop/digest-0000aaaa", **files: str) -> tuple[int, str]:
    head = gb.push(branch, files or {"features/digest/notes.md": "Line one, edited.\n"})
    gb.forge.set_status(head, DIFF_GATE, "success", "The diff gate passed")
    pull = gb.forge.open_pull(head=branch, base="main", title="loop(digest): shorter", body="The proposal.\n")
    return pull.number, head


def api(fake, method: str | None = None, pattern: str = "") -> list:
    """The fake's API requests (not git's) of ``method`` whose path matches the regular expression ``pattern``."""
    return [
        r
        for r in fake.requests
        if r.path.startswith("/api/") and (method is None or r.method == method) and re.search(pattern, r.path)
    ]


# --- The forge, its remote and its credential ---------------------------------------------------


def test_get_forge_is_the_github_forge_on_the_repository(gb, github_on):
    forge = get_forge()
    assert isinstance(forge, GitHubForge) and forge.name == "github"
    assert forge.remote_url() == github_on.git_url
    assert forge.pull_url(7) == f"{github_on.origin}/acme/brain/pull/7"


def test_git_sends_the_token_as_a_header_scoped_to_the_brains_remote(gb, github_on, settings):
    env = git_env()
    key = next(k for k in env if k.startswith("GIT_CONFIG_KEY_"))
    assert env[key] == f"http.{github_on.git_url}.extraHeader"
    value = env[key.replace("KEY", "VALUE")]
    assert value == "Authorization: Basic " + base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    assert TOKEN not in github_on.git_url and TOKEN not in " ".join(env.keys())
    settings.BRAIN_REPO = "git@github.com:acme/brain.git"
    assert git_env() == {}  # an ssh remote authenticates with its keys
    settings.LOOP_FORGE = "local"
    assert git_env() == {}


def test_a_push_without_the_credential_is_refused_by_github_and_says_so_without_the_token(gb, github_on, tmp_path):
    github_on.tokens.clear()
    with pytest.raises(GitError) as refused:
        git("clone", "--quiet", github_on.git_url, str(tmp_path / "nope"))
    assert (
        "401" in str(refused.value) or "Authentication" in str(refused.value) or "could not read" in str(refused.value)
    )
    assert TOKEN not in str(refused.value)


def test_a_bad_token_is_a_permanent_error_naming_the_variable(gb, github_on):
    github_on.tokens.clear()
    with pytest.raises(GitHubError) as refused:
        gb.forge.get_pull(1)
    assert refused.value.permanent and refused.value.status == 401
    assert "GITHUB_TOKEN" in str(refused.value) and "Bad credentials" in str(refused.value)
    assert TOKEN not in str(refused.value)


def test_no_credential_at_all_is_a_config_error(settings, github_on):
    settings.GITHUB_TOKEN = ""
    with pytest.raises(ConfigError, match="GITHUB_TOKEN"):
        GitHubForge()


# --- Pull requests --------------------------------------------------------------------------


def test_open_pull_opens_the_pushed_branch_with_its_head_and_links_to_github(gb, github_on):
    number, head = opened(gb)
    pull = gb.forge.get_pull(number)
    assert (pull.state, pull.head, pull.head_sha, pull.base) == ("open", "loop/digest-0000aaaa", head, "main")
    assert pull.url == f"{github_on.origin}/acme/brain/pull/{number}" and pull.title == "loop(digest): shorter"
    assert github_on.pull(number).head_sha == head == github_on.tip("loop/digest-0000aaaa")
    assert github_on.pull(number).body == "The proposal.\n"
    assert github_on.statuses(head) == {DIFF_GATE: "success"}


def test_github_refusals_of_a_pull_request_are_permanent_in_githubs_words(gb, github_on):
    with pytest.raises(GitHubError, match="invalid") as missing:
        gb.forge.open_pull(head="loop/nowhere", base="main", title="t", body="")
    assert missing.value.permanent and missing.value.status == 422
    number, _ = opened(gb)
    with pytest.raises(GitHubError, match="already exists") as twice:
        gb.forge.open_pull(head="loop/digest-0000aaaa", base="main", title="t", body="")
    assert twice.value.permanent
    with pytest.raises(GitHubError, match="No commits between main and main"):
        gb.forge.open_pull(head="main", base="main", title="t", body="")
    assert gb.forge.get_pull(number).state == "open"


def test_a_create_whose_first_answer_was_lost_finds_the_request_it_opened(gb, github_on, waits):
    head = gb.push("loop/digest-lost", {"features/digest/notes.md": "edited\n"})
    original, landed = github_on._create_pull, []

    def land_then_fail(data, token):  # the first create lands, but GitHub answers 502; the retry hears "already exists"
        answer = original(data, token)
        landed.append(answer["number"])
        if len(landed) == 1:
            raise Refused(502, {"message": "Server Error"})
        return answer

    github_on._create_pull = land_then_fail
    pull = gb.forge.open_pull(head="loop/digest-lost", base="main", title="t", body="")
    assert landed == [1] and pull.number == 1 and pull.head_sha == head
    assert [r.status for r in api(github_on, "POST", "/pulls$")] == [502, 422]


def test_a_second_read_of_an_unchanged_request_is_a_304_answered_from_the_row(gb, github_on):
    number, head = opened(gb)
    first = gb.forge.get_pull(number)
    second = gb.forge.get_pull(number)
    reads = api(github_on, "GET", f"/pulls/{number}$")
    assert [r.status for r in reads] == [200, 304]
    assert second == first
    row = GitHubPull.objects.get(number=number)
    assert row.etag and row.data["head"]["sha"] == head and row.read_at is not None
    github_on.post_status(head, "ci/tests", "pending")
    assert gb.forge.get_pull(number).state == "open"
    assert [r.status for r in api(github_on, "GET", f"/pulls/{number}$")][-1] in (200, 304)


def test_a_merge_on_github_is_read_as_merged_with_githubs_merge_commit(gb, github_on):
    number, _ = opened(gb)
    gb.forge.get_pull(number)
    sha = github_on.merge(number, by="alice")
    pull = gb.forge.get_pull(number)
    assert (pull.state, pull.merge_sha, pull.merged_by) == ("merged", sha, "alice")
    assert pull.merged_at is not None and github_on.tip("main") == sha


def test_close_closes_an_open_request(gb, github_on):
    number, _ = opened(gb)
    pull = gb.forge.close_pull(number, by="loop")
    assert pull.state == "closed" and pull.closed_at is not None
    assert github_on.pull(number).state == "closed"


def test_list_pulls_pages_through_githubs_link_headers_newest_first(gb, github_on, monkeypatch):
    for i in range(3):
        opened(gb, f"loop/digest-{i:08x}", **{"features/digest/notes.md": f"edit {i}\n"})
    assert [p.number for p in gb.forge.list_pulls(limit=10)] == [3, 2, 1]
    assert len(api(github_on, "GET", "/pulls$")) == 1
    monkeypatch.setattr(github_forge.connection().client, "per_page", 2)  # smaller pages: rel="next" is followed
    assert [p.number for p in GitHubForge().list_pulls(limit=3)] == [3, 2, 1]
    assert len(api(github_on, "GET", "/pulls$")) == 3


# --- Statuses -------------------------------------------------------------------------------------


def test_a_status_github_refuses_with_403_fails_at_once_without_retries(gb, github_on, waits):
    head = gb.push("loop/digest-403", {"features/digest/notes.md": "x\n"})
    github_on.tokens[TOKEN] = False  # the permission revoked
    with pytest.raises(GitHubError) as refused:
        gb.forge.set_status(head, DIFF_GATE, "success", "ok")
    assert refused.value.permanent and refused.value.status == 403
    assert "Resource not accessible by personal access token" in str(refused.value)
    assert len(api(github_on, "POST", "/statuses/")) == 1 and waits == []


def test_a_secondary_rate_limit_is_retried_after_the_wait_github_asks(gb, github_on, waits):
    head = gb.push("loop/digest-rl", {"features/digest/notes.md": "x\n"})
    github_on.fail("POST", "/statuses/", 403, SECONDARY, headers={"Retry-After": "3"})
    gb.forge.set_status(head, VALIDATION, "success", "checked")
    assert waits == [3.0]
    assert [r.status for r in api(github_on, "POST", "/statuses/")] == [403, 201]
    assert github_on.statuses(head) == {VALIDATION: "success"}


def test_a_primary_rate_limit_waits_until_its_reset(gb, github_on, waits):
    head = gb.push("loop/digest-prl", {"features/digest/notes.md": "x\n"})
    reset = str(int(timezone.now().timestamp()) + 2)
    github_on.fail(
        "POST",
        "/statuses/",
        403,
        "API rate limit exceeded for installation ID 1.",
        headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": reset},
    )
    gb.forge.set_status(head, DIFF_GATE, "success", "ok")
    assert len(waits) == 1 and 0 <= waits[0] <= 3


def test_a_wait_longer_than_the_step_waits_fails_it_as_temporary(gb, github_on, waits, settings):
    settings.GITHUB_RETRY_MAX_WAIT_SECS = 30
    github_on.fail("GET", "/pulls/", 429, "Too many requests", headers={"Retry-After": "600"})
    with pytest.raises(GitHubError) as later:
        gb.forge.get_pull(1)
    assert not later.value.permanent and later.value.retry_after == 600 and waits == []


def test_server_errors_are_retried_with_backoff_and_then_surface_as_temporary(gb, github_on, waits, settings):
    number, _ = opened(gb)
    github_on.fail("GET", f"/pulls/{number}", 502, "Server Error", times=2)
    assert gb.forge.get_pull(number).state == "open"
    assert waits == [0.01, 0.02]
    github_on.fail("GET", f"/pulls/{number}", 503, "Unavailable", times=10)
    with pytest.raises(GitHubError) as down:
        gb.forge.get_pull(number)
    assert not down.value.permanent and down.value.status == 503
    assert waits[2:] == [0.01, 0.02, 0.04]


def test_a_github_nobody_can_reach_is_a_temporary_error_after_the_retries(gb, settings, waits):
    settings.GITHUB_API_URL = "http://127.0.0.1:9/api/v3"  # discard: nothing listens
    with pytest.raises(GitHubError) as unreachable:
        GitHubForge().get_pull(1)
    assert not unreachable.value.permanent and "could not be reached" in str(unreachable.value)
    assert len(waits) == settings.GITHUB_RETRIES


def test_every_outcome_of_a_call_about_a_request_is_saved_on_its_row(gb, github_on, waits):
    number, _ = opened(gb)
    github_on.fail("GET", f"/pulls/{number}", 404, "Not Found")
    with pytest.raises(GitHubError):
        gb.forge.get_pull(number)
    row = GitHubPull.objects.get(number=number)
    assert row.attempts == 1 and "Not Found" in row.last_error and row.failed_at is not None
    gb.forge.get_pull(number)
    row.refresh_from_db()
    assert row.attempts == 0 and row.last_error == ""


def test_the_probe_asks_github_whether_the_credential_may_post_a_status(gb, github_on):
    may, why = gb.forge.may_post_statuses()
    assert may is True and "422" in why
    github_on.tokens[TOKEN] = False
    may, why = gb.forge.may_post_statuses()
    assert may is False and "Resource not accessible" in why
    assert all(len(sha) != 40 or github_on.statuses(sha) == {} for sha in ["0" * 40])


# --- Auto-merge ----------------------------------------------------------------------------------


def test_an_arm_is_held_until_every_required_status_is_green_then_github_merges(gb, github_on):
    github_on.protection = [DIFF_GATE, "ci/tests"]
    number, head = opened(gb)
    pull = gb.forge.arm_auto_merge(number, method="squash", sha=head, by="loop")
    assert pull.auto_merge == {"method": "squash", "sha": head} and pull.mergeable_state == "blocked"
    assert GitHubPull.objects.get(number=number).armed_sha == head
    github_on.post_status(head, "ci/tests", "success")
    merged = gb.forge.get_pull(number)
    assert merged.state == "merged" and merged.merged_by == "singularity-bot"
    assert len(github_on.pull(number).merge_commit_sha) == 40


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        (lambda f: setattr(f, "protection", [DIFF_GATE]), "Pull request is in clean status"),
        (lambda f: setattr(f, "protection", None), "Protected branch rules not configured for this branch"),
        (
            lambda f: (setattr(f, "protection", [DIFF_GATE, "ci"]), setattr(f, "allow_auto_merge", False)),
            "Auto merge is not allowed for this repository",
        ),
        (
            lambda f: (setattr(f, "protection", [DIFF_GATE, "ci"]), setattr(f, "allow_squash_merge", False)),
            "Squash merges are not allowed on this repository.",
        ),
    ],
)
def test_github_refuses_an_arm_with_a_graphql_error_on_http_200_and_the_refusal_is_permanent(
    gb, github_on, setup, reason
):
    setup(github_on)
    number, head = opened(gb)
    with pytest.raises(GitHubError) as refused:
        gb.forge.arm_auto_merge(number, method="squash", sha=head, by="loop")
    assert refused.value.permanent and refused.value.reason == reason
    assert str(refused.value) == f"auto-merge unavailable: GitHub refused to arm PR #{number}: {reason}"
    graphql = [r for r in github_on.requests if r.path == "/api/graphql"]
    assert [r.status for r in graphql] == [200]
    assert github_on.pull(number).auto_merge is None
    assert reason in GitHubPull.objects.get(number=number).last_error


def test_an_arm_is_bound_to_the_expected_head(gb, github_on):
    github_on.protection = [DIFF_GATE, "ci/tests"]
    number, head = opened(gb)
    gb.push("loop/digest-0000aaaa", {"features/digest/style.md": "Pushed after.\n"})
    with pytest.raises(GitHubError, match="Head branch was modified"):
        gb.forge.arm_auto_merge(number, method="merge", sha=head, by="loop")


def test_a_head_pushed_past_the_armed_commit_has_the_arm_taken_out_on_the_next_read(gb, github_on):
    github_on.protection = [DIFF_GATE, "ci/tests"]
    number, head = opened(gb)
    gb.forge.arm_auto_merge(number, method="merge", sha=head, by="loop")
    moved = gb.push("loop/digest-0000aaaa", {"features/digest/style.md": "Pushed after the loop vouched.\n"})
    assert github_on.pull(number).auto_merge is not None  # GitHub keeps a writer's push armed
    pull = gb.forge.get_pull(number)
    assert pull.head_sha == moved and pull.auto_merge is None
    assert github_on.pull(number).auto_merge is None  # the loop took it out
    github_on.post_status(moved, "ci/tests", "success")
    assert gb.forge.get_pull(number).state == "open"  # nothing armed, and the moved head has no diff gate


def test_disarm_takes_the_arm_out_and_is_a_no_op_when_none_stands(gb, github_on):
    github_on.protection = [DIFF_GATE, "ci/tests"]
    number, head = opened(gb)
    gb.forge.arm_auto_merge(number, method="merge", sha=head, by="loop")
    assert gb.forge.disarm_auto_merge(number).auto_merge is None
    assert github_on.pull(number).auto_merge is None
    assert gb.forge.disarm_auto_merge(number).auto_merge is None
    assert [o.action for o in github_on.outbox].count("auto_merge_disabled") == 1


# --- What the doctor reads ------------------------------------------------------------------------


def test_the_required_statuses_come_from_classic_protection_and_rulesets(gb, github_on):
    github_on.protection = [DIFF_GATE]
    github_on.rulesets = [[VALIDATION, "ci/tests"]]
    required = gb.forge.requirements("main")
    assert required.contexts == {DIFF_GATE, VALIDATION, "ci/tests"}
    assert required.sources == ("branch protection", "ruleset 100") and not required.unavailable


def test_a_private_repository_on_a_plan_without_branch_rules_is_named(gb, github_on):
    github_on.private, github_on.has_branch_rules_plan = True, False
    github_on.protection = [DIFF_GATE]
    required = gb.forge.requirements("main")
    assert required.contexts == frozenset() and "Upgrade to GitHub Pro" in required.unavailable


# --- The App lane ----------------------------------------------------------------------------------


def test_the_app_lane_mints_an_installation_token_and_refreshes_it_before_it_expires(
    tmp_path, settings, github_on, app_key
):
    key_file, public = app_key
    github_on.use_app(1234, 5678, public)
    github_on.app_token_lifetime = timedelta(minutes=2)
    settings.GITHUB_TOKEN = ""
    settings.GITHUB_APP_ID, settings.GITHUB_APP_INSTALLATION_ID = 1234, 5678
    settings.GITHUB_APP_PRIVATE_KEY_FILE = str(key_file)
    gb = github_brain(tmp_path, settings, github_on)  # the seed and the pushes go through the installation token
    assert gb.forge.credential.lane == "app" and "1234" in gb.forge.credential.label
    number, head = opened(gb)
    assert len(github_on.installation_tokens) == 1
    with time_machine.travel(timezone.now() + timedelta(seconds=110), tick=True):  # 10 s left: refreshed first
        assert GitHubForge().get_pull(number).head_sha == head
        assert len(github_on.installation_tokens) == 2
    used = [r.token for r in github_on.requests if r.path.startswith("/api/v3/repos/")]
    assert used[-1] != used[0] and all(t.startswith("ghs_") for t in used)


@pytest.fixture
def app_key(tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )
    path = tmp_path / "app.pem"
    path.write_bytes(pem)
    return path, key.public_key()


def test_an_installation_token_github_will_not_mint_fails_the_git_command_as_ours(
    tmp_path, settings, github_on, app_key
):
    key_file, _public = app_key
    settings.GITHUB_TOKEN = ""
    settings.GITHUB_APP_ID, settings.GITHUB_APP_INSTALLATION_ID = 1234, 5678
    settings.GITHUB_APP_PRIVATE_KEY_FILE = str(key_file)
    with pytest.raises(GitHubError) as refused:  # the fake knows no App: the JWT is refused
        git("ls-remote", github_on.git_url)
    assert refused.value.permanent and refused.value.status == 401
    assert "the GitHub App 1234 (installation 5678)" in str(refused.value)
