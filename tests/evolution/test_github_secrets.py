"""The GitHub credential never shows: not in logs, errors, pages or the database (issue 17).

A whole human round on the fake GitHub, with a refusal on the way (the token
loses its status permission, the apply fails onto a Retry card, the person
retries), a merge noticed by the webhook, a bad webhook, a git push GitHub
refuses and a doctor run; then every log record (at DEBUG), every error
message, the pages a person reads and every row of every table are searched
for the token, for the Basic header git sends it in, and for the App lane's
installation tokens.
"""

from __future__ import annotations

import base64
import logging

import pytest
from django.apps import apps
from django.core import serializers
from django.test import Client

from evolution.forges.github import GitHubError, GitHubForge
from evolution.models import Cycle
from grading.doctor import run_doctor
from hitl.models import Card
from singularity.brain.git import GitError, git
from tests.evolution.demo_helpers import drive_until_card, pending_card, press, run, tickets, triage, wrong
from tests.fakes.github import TOKEN

pytestmark = [pytest.mark.django_db(transaction=True)]


def secrets_of(fake) -> list[str]:
    basic = base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    return [TOKEN, basic, TOKEN[4:20], *fake.installation_tokens]


def everything_stored() -> str:
    dumps = []
    for model in apps.get_models():
        dumps.append(serializers.serialize("json", model.objects.all()))
    return "\n".join(dumps)


def test_the_token_never_appears_in_logs_errors_pages_or_the_database(on_github, alice, caplog, tmp_path):
    caplog.set_level(logging.DEBUG)
    errors: list[str] = []

    # The token may not post statuses: the apply fails onto a Retry card in GitHub's words.
    on_github.tokens[TOKEN] = False
    card, failed = drive_until_card(tickets())
    press(card, alice, "accept")
    retry = pending_card(Card.Kind.RETRY)
    assert "Resource not accessible by personal access token" in retry.text
    errors.append(retry.text)

    # Given the permission back, the person retries; the PR opens; a merge on GitHub is noticed by the webhook.
    on_github.tokens[TOKEN] = True
    press(retry, alice, "retry")
    press(pending_card(Card.Kind.DECIDE), alice, "accept")
    cycle = Cycle.objects.get(entity=triage(), analysed=True)
    rnd = cycle.rounds.exclude(pr_number=None).get()
    on_github.merge(rnd.pr_number, by="alice")
    client = Client()
    on_github.deliver(client)
    for ticket in (failed * 10)[:10]:  # the demo triage's watch reads ten runs
        assert not wrong(run(ticket))
    cycle.refresh_from_db()
    assert cycle.status == Cycle.Status.VALIDATED

    # A forged delivery, a credential GitHub refuses, a push GitHub refuses.
    errors.append(client.post("/github/webhook/", data=b"{}", content_type="application/json").content.decode())
    on_github.tokens.clear()
    with pytest.raises(GitHubError) as refused:
        GitHubForge().get_pull(rnd.pr_number)
    errors.append(str(refused.value))
    with pytest.raises(GitError) as pushed:
        git("clone", "--quiet", on_github.git_url, str(tmp_path / "refused"))
    errors.append(str(pushed.value))
    on_github.tokens[TOKEN] = True
    errors += [finding.line() for finding in run_doctor(only=["GitHub merge gate"])]

    client.force_login(alice)
    pages = [
        client.get(path).content.decode()
        for path in (
            "/evolution/",
            f"/evolution/cycles/{cycle.pk}/",
            "/evolution/pulls/",
            "/evolution/needs-you/",
            "/inbox/",
            f"/api/loop/cycles/{cycle.pk}/",
        )
    ]
    stored = everything_stored()
    assert rnd.pr_url in stored and "Resource not accessible" in stored  # the search reads what was written
    for secret in secrets_of(on_github):
        assert secret not in caplog.text
        for text in errors + pages:
            assert secret not in text
        assert secret not in stored
