"""GitHub's rate limits as GitHub documents them (issue 32), on the fake GitHub with time travel.

"Rate limits for the REST API": a secondary limit (403/429) waits Retry-After
when GitHub names it, else at least a minute, growing exponentially; a primary
limit (X-RateLimit-Remaining: 0) is not retried before X-RateLimit-Reset.
The reset is recorded in the database, so every process — the poll, the
apply, the check, a withdraw — waits until then, and the fleet's needs-you
list says so. Every request names X-GitHub-Api-Version: 2022-11-28.
"""

from __future__ import annotations

from datetime import UTC, timedelta

import pytest
import time_machine
from django.utils import timezone

from evolution.forges import github as github_forge
from evolution.forges.base import DIFF_GATE, VALIDATION
from evolution.forges.github import GitHubError, GitHubForge
from evolution.loop import machine, recovery
from evolution.models import Cycle, GitHubRateLimit, Round
from evolution.steering import needs_you
from hitl.models import Notice
from tests.evolution.demo_helpers import drive_until_card, press, tickets, triage
from tests.evolution.github_helpers import GitHubBrain, github_brain

SECONDARY = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
PRIMARY = "API rate limit exceeded for user ID 1."


@pytest.fixture
def waits(monkeypatch) -> list[float]:
    """The waits the forge spends, read instead of slept."""
    spent: list[float] = []
    monkeypatch.setattr(github_forge, "_sleep", spent.append)
    return spent


@pytest.fixture
def gb(tmp_path, settings, github_on) -> GitHubBrain:
    return github_brain(tmp_path, settings, github_on)


def api(fake, method: str, part: str) -> list:
    return [r for r in fake.requests if r.method == method and part in r.path]


# --- The forge ---------------------------------------------------------------------------------------


def midday():
    """Today at 12:00 UTC: a reset 40 minutes on is still today, as the titles' "until 12:40 UTC" assume (from
    23:20 on it would be tomorrow, and the title names the date)."""
    return timezone.now().astimezone(UTC).replace(hour=12, minute=0, second=0, microsecond=0)


@pytest.fixture(autouse=True)
def _at_midday():
    """Every test here runs from today's 12:00 UTC on (the clock ticking): the limits' "until HH:MM UTC" words
    hold only while the reset is today."""
    with time_machine.travel(midday(), tick=True):
        yield


@pytest.mark.django_db
def test_every_request_names_the_api_version(gb, github_on):
    head = gb.push("loop/digest-v", {"features/digest/notes.md": "x\n"})
    gb.forge.set_status(head, DIFF_GATE, "success", "ok")
    gb.forge.open_pull(head="loop/digest-v", base="main", title="t", body="b")
    calls = [r for r in github_on.requests if "/api/" in r.path]
    assert calls and {r.api_version for r in calls} == {"2022-11-28"}


@pytest.mark.django_db
def test_a_secondary_limit_without_retry_after_waits_a_minute_then_two_never_seconds(gb, github_on, waits, settings):
    settings.GITHUB_RETRY_MAX_WAIT_SECS = 600
    head = gb.push("loop/digest-s", {"features/digest/notes.md": "x\n"})
    github_on.fail("POST", "/statuses/", 403, SECONDARY, times=2)
    gb.forge.set_status(head, VALIDATION, "success", "checked")
    assert waits == [60.0, 120.0]
    assert [r.status for r in api(github_on, "POST", "/statuses/")] == [403, 403, 201]
    assert GitHubRateLimit.objects.get().strikes == 0  # the call that got through starts the count again


@pytest.mark.django_db
def test_a_secondary_limit_longer_than_a_step_waits_stops_every_caller_until_it_passes(gb, github_on, waits):
    # The fixture's steps wait at most 5 s: the minute GitHub asks for is recorded, not slept in a worker.
    head = gb.push("loop/digest-s2", {"features/digest/notes.md": "x\n"})
    with time_machine.travel(midday(), tick=False) as clock:
        github_on.fail("POST", "/statuses/", 429, SECONDARY)
        with pytest.raises(GitHubError) as limited:
            gb.forge.set_status(head, VALIDATION, "success", "checked")
        assert not limited.value.permanent and waits == []
        assert limited.value.until == timezone.now() + timedelta(seconds=60)
        asked = len(github_on.requests)
        with pytest.raises(GitHubError, match="GitHub rate limit until"):
            GitHubForge().get_pull(1)  # another caller: refused before any request
        assert len(github_on.requests) == asked
        clock.shift(timedelta(seconds=61))
        gb.forge.set_status(head, VALIDATION, "success", "checked")
    assert github_on.statuses(head) == {VALIDATION: "success"}


@pytest.mark.django_db
def test_a_primary_limit_stops_every_caller_until_its_reset_and_is_announced(gb, github_on, waits):
    head = gb.push("loop/digest-p", {"features/digest/notes.md": "x\n"})
    with time_machine.travel(midday(), tick=False) as clock:
        reset = timezone.now() + timedelta(minutes=40)
        github_on.fail(
            "POST",
            "/statuses/",
            403,
            PRIMARY,
            headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(reset.timestamp()))},
        )
        with pytest.raises(GitHubError) as limited:
            gb.forge.set_status(head, DIFF_GATE, "success", "ok")
        assert limited.value.until == reset and waits == []
        words = f"GitHub rate limit until {reset:%H:%M} UTC"
        assert Notice.objects.filter(kind="github-rate-limit", title=words).count() == 1
        asked = len(github_on.requests)
        clock.shift(timedelta(minutes=39))
        with pytest.raises(GitHubError, match=words):
            GitHubForge().set_status(head, DIFF_GATE, "success", "ok")
        assert len(github_on.requests) == asked
        clock.shift(timedelta(minutes=2))
        gb.forge.set_status(head, DIFF_GATE, "success", "ok")
    assert github_on.statuses(head) == {DIFF_GATE: "success"}


# --- The loop ----------------------------------------------------------------------------------------


def _limit(fake, reset) -> None:
    fake.fail(
        "GET",
        "/pulls/",
        403,
        PRIMARY,
        headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(reset.timestamp()))},
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.no_check
def test_the_merge_wait_waits_for_the_reset_and_needs_you_says_so(on_github, alice, waits):
    card, _ = drive_until_card(tickets())
    press(card, alice, "accept")
    cycle = Cycle.objects.get(entity=triage(), analysed=True)
    assert cycle.phase == Cycle.Phase.MERGE_WAIT
    with time_machine.travel(midday() + timedelta(minutes=3), tick=False) as clock:
        reset = timezone.now() + timedelta(minutes=30)
        _limit(on_github, reset)
        machine.poll_due()
        cycle.refresh_from_db()
        assert cycle.next_poll_at == reset  # not two minutes later: that poll would be refused too
        words = f"GitHub rate limit until {reset:%H:%M} UTC"
        (item,) = [i for i in needs_you.items() if i["gate"] == "forge"]
        assert item["clause"].startswith(words) and item["until"] == reset
        assert needs_you.count() == len(needs_you.items())
        asked = len(on_github.requests)
        clock.shift(timedelta(minutes=29))
        machine.poll_due()
        assert len(on_github.requests) == asked  # nothing due, nothing asked
        clock.shift(timedelta(minutes=2))
        machine.poll_due()
        assert len(on_github.requests) > asked
        assert not [i for i in needs_you.items() if i["gate"] == "forge"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.no_check
def test_an_apply_under_a_limit_pushes_nothing_and_runs_after_the_reset(on_github, alice, waits):
    card, _ = drive_until_card(tickets())
    with time_machine.travel(midday(), tick=False) as clock:
        until = timezone.now() + timedelta(minutes=10)
        GitHubRateLimit.objects.create(key="other process", until=until, reason="API rate limit exceeded (HTTP 403)")
        press(card, alice, "accept")
        cycle = Cycle.objects.get(entity=triage(), analysed=True)
        rnd = cycle.rounds.get(number=1)
        assert rnd.status == Round.Status.ACCEPTED and rnd.pr_number is None
        assert not [r for r in on_github.requests if r.method == "POST" and "/api/" in r.path]  # no status, no PR
        assert not [r for r in on_github.requests if "receive-pack" in r.path]  # no branch pushed
        clock.shift(timedelta(minutes=9))
        assert recovery.sweep() == 0  # still within the limit: not handed over
        clock.shift(timedelta(minutes=2))
        assert recovery.sweep() == 1
    rnd.refresh_from_db()
    assert rnd.status == Round.Status.APPLIED and rnd.pr_number is not None
    assert len([r for r in on_github.requests if r.method == "POST" and r.path.endswith("/pulls")]) == 1


@pytest.mark.django_db
def test_the_fleets_status_says_github_is_rate_limited(github_on):
    from evolution.reads.fleet import loop_status

    until = timezone.now() + timedelta(minutes=20)
    GitHubRateLimit.objects.create(key="k", until=until, reason="API rate limit exceeded (HTTP 403)")
    status = loop_status()
    (item,) = [i for i in status["needsYouItems"] if i["gate"] == "forge"]
    assert item["clause"].startswith(f"GitHub rate limit until {until:%H:%M} UTC") and status["needsYou"] >= 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.no_check
def test_an_arm_refused_by_a_rate_limit_waits_for_the_reset_then_is_placed(on_github, tmp_path, waits):
    from evolution.loop.merge import ARM_WAITS
    from tests.evolution.test_loop_github import CI, go_autonomous, until_cycle

    on_github.protection = [DIFF_GATE, CI]
    go_autonomous(on_github, tmp_path)
    reset = timezone.now().replace(microsecond=0) + timedelta(minutes=10)
    on_github.fail(
        "POST",
        "/api/graphql",
        403,
        PRIMARY,
        headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(reset.timestamp()))},
    )
    cycle, _ = until_cycle(tickets())
    rnd = cycle.rounds.get(number=1)
    cycle.refresh_from_db()
    assert rnd.merge_gate == "auto" and rnd.gate_note.startswith(ARM_WAITS), rnd.gate_note  # not a person's
    assert on_github.pull(rnd.pr_number).auto_merge is None and cycle.next_poll_at == reset
    assert not Notice.objects.filter(kind="merge-demoted").exists()
    with time_machine.travel(reset + timedelta(seconds=5), tick=False):
        machine.poll_due()
    rnd.refresh_from_db()
    assert rnd.merge_gate == "auto" and rnd.gate_note == ""
    assert on_github.pull(rnd.pr_number).auto_merge is not None
    on_github.post_status(rnd.head_sha, CI, "success")
    assert on_github.pull(rnd.pr_number).merged


@pytest.mark.django_db
def test_the_needs_you_page_shows_githubs_rate_limit(github_on, alice, client):
    until = timezone.now() + timedelta(minutes=20)
    GitHubRateLimit.objects.create(key="k", until=until, reason="API rate limit exceeded (HTTP 403)")
    client.force_login(alice)
    page = client.get("/evolution/needs-you/").content.decode()
    assert 'data-gate="forge"' in page and f"GitHub rate limit until {until:%H:%M} UTC" in page


@pytest.mark.django_db
def test_a_standing_limit_does_not_hold_git(gb, github_on):
    from evolution.forges import git_env

    GitHubRateLimit.objects.create(
        key=f"{github_on.api_url} GITHUB_TOKEN", until=timezone.now() + timedelta(hours=1), reason="limited"
    )
    assert git_env()  # the credential header is still made: a fetch or a push is no REST request


@pytest.mark.django_db
def test_the_fleet_page_shows_githubs_rate_limit_and_counts_it(github_on, alice, client):
    client.force_login(alice)
    assert "GitHub rate limit" not in client.get("/evolution/").content.decode()
    until = timezone.now() + timedelta(minutes=20)
    GitHubRateLimit.objects.create(key="k", until=until, reason="API rate limit exceeded (HTTP 403)")
    page = client.get("/evolution/").content.decode()
    assert 'id="forge-limit"' in page and f"GitHub rate limit until {until:%H:%M} UTC" in page
    assert "1 needs you" in page  # the count the navigation shows counts it too
    table = client.get("/evolution/", headers={"HX-Request": "true"}).content.decode()  # the 10 s refresh
    assert 'id="forge-limit"' in table
