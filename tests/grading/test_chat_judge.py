"""What an episode's judge reads: the dialog whole, earlier dialogs per evaluation.context, the privacy rule (R22.16–18)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from grading.booking import on_terminal
from grading.chat.episodes import Counterpart, close
from grading.chat.transcript import privacy_rule
from grading.grade import grade_now
from grading.models import Episode, Grade
from tests.fakes.gateway import Reply
from tests.grading.chat_helpers import BODY, make_role, prices, said
from tests.grading.grading_helpers import brain_repo, judge_reply

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def judge(fake_gateway, settings):
    """The fake gateway as the engine's (the judge's) gateway too."""
    prices(settings)
    settings.BRAMA_BASE_URL = fake_gateway.base_url
    settings.BRAMA_MAX_RETRIES = 0
    return fake_gateway


def judged(fake_gateway, episode: Episode) -> tuple[Grade, dict]:
    """Close ``episode`` if open, book and grade it; return the grade and the judge's request."""
    if episode.status == "open":
        close(episode, "person")
    episode.execution.refresh_from_db()
    fake_gateway.script(judge_reply(score=0.9))
    grade = grade_now(on_terminal(episode.execution))
    return grade, fake_gateway.requests[-1].json


def test_the_judge_reads_the_whole_dialog_in_order_with_tool_calls_and_never_the_roles_prompt(judge, alice):
    role = make_role(capabilities=["episode:write"], evaluation={"requirements": ["The issue is resolved"]})
    judge.script(
        Reply(content="Which order is it?"),
        Reply(tool_calls=[("agent_close_episode", {})]),
        Reply(content="Refunded. Goodbye!"),
    )
    said(judge, role, alice, "I want my money back")
    said(judge, role, alice, "Order 1234, thanks")
    grade, request = judged(judge, Episode.objects.get())
    assert grade.status == "graded", grade.error
    text = request["messages"][1]["content"]
    order = [
        text.index("[1] Person"),
        text.index("I want my money back"),
        text.index("[2] Role"),
        text.index("Which order is it?"),
        text.index("Order 1234, thanks"),
        text.index("tool agent_close_episode"),
        text.index("Refunded. Goodbye!"),
    ]
    assert order == sorted(order)
    assert "4 turns" in text and "(closed by the role)" in text
    assert "The issue is resolved" in text
    assert BODY not in text and BODY not in request["messages"][0]["content"]


def test_the_judge_grades_under_the_privacy_rule(judge, alice):
    role = make_role()
    said(judge, role, alice, "Hi")
    _, request = judged(judge, Episode.objects.get())
    system = request["messages"][0]["content"]
    assert "## Privacy" in system and "never the person" in system


def test_a_brain_rule_replaces_the_engines_and_a_blank_copy_removes_it(tmp_path, db):
    checkout, commit = brain_repo(tmp_path / "brain", {"constitution/Loop/chat-privacy.md": "Write no names.\n"})
    role = make_role()
    role.commit = commit
    assert privacy_rule(role, checkout=checkout) == "Write no names."
    checkout, blank = brain_repo(tmp_path / "blank", {"constitution/Loop/chat-privacy.md": "\n"})
    role.commit = blank
    assert privacy_rule(role, checkout=checkout) == ""


def test_by_default_no_earlier_dialog_is_read(judge, alice):
    role = make_role(chat={"episode": {"idleHours": 1}})
    with time_machine.travel(T0, tick=False):
        said(judge, role, alice, "First dialog: my parcel")
    close(Episode.objects.get(), "person")
    with time_machine.travel(T0 + timedelta(hours=3), tick=False):
        said(judge, role, alice, "Second dialog: my invoice")
    _, request = judged(judge, Episode.objects.get(status="open"))
    text = request["messages"][1]["content"]
    assert "Second dialog: my invoice" in text and "First dialog" not in text


def test_prior_episodes_with_the_same_person_are_read_as_context(judge, alice, bob):
    role = make_role(evaluation={"context": {"priorEpisodes": 2}})
    for hour, (person, text) in enumerate(
        [(alice, "Alice one"), (bob, "Bob one"), (alice, "Alice two"), (alice, "Alice three"), (alice, "Alice now")]
    ):
        with time_machine.travel(T0 + timedelta(hours=hour), tick=False):
            said(judge, role, person, text)
            if text != "Alice now":
                close(Episode.objects.get(status="open"), "person")
    _, request = judged(judge, Episode.objects.get(status="open"))
    text = request["messages"][1]["content"]
    assert "Earlier dialogs with the same person" in text
    assert "Alice two" in text and "Alice three" in text
    assert "Alice one" not in text, "only the last two"
    assert "Bob one" not in text, "never another person's"
    assert text.index("Alice now") < text.index("Alice two") < text.index("Alice three")


def test_the_transcript_is_cut_to_max_tokens_keeping_the_opening_and_the_end(judge, alice):
    role = make_role(evaluation={"context": {"priorEpisodes": 1, "maxTokens": 300}})
    said(judge, role, alice, "An earlier dialog")
    close(Episode.objects.get(), "person")
    for index in range(12):
        said(judge, role, alice, f"message {index} " + "x" * 100)
    _, request = judged(judge, Episode.objects.get(status="open"))
    text = request["messages"][1]["content"]
    dialog = text[text.index("## The dialog") : text.index("## Your answer")]
    assert len(dialog) < 300 * 4 + 200
    assert "message 0 " in dialog and "message 11 " in dialog
    assert "left out to fit the judge's budget" in dialog
    assert "An earlier dialog" not in dialog, "no room was left for context"


def test_a_telegram_strangers_episodes_are_matched_by_account(judge):
    role = make_role(evaluation={"context": {"priorEpisodes": 1}})
    stranger, other = Counterpart(telegram_id=1, name="A"), Counterpart(telegram_id=2, name="B")
    said(judge, role, stranger, "Stranger before", surface="telegram")
    close(Episode.objects.get(status="open"), "person")
    said(judge, role, other, "Other before", surface="telegram")
    close(Episode.objects.get(status="open"), "person")
    said(judge, role, stranger, "Stranger now", surface="telegram")
    _, request = judged(judge, Episode.objects.get(status="open"))
    text = request["messages"][1]["content"]
    assert "Stranger before" in text and "Other before" not in text
