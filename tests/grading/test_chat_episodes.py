"""Chat episodes: a person's dialog with a role, from the first message to its end (S3 "Chat roles", R22.1–R22.10)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine

from grading.chat.episodes import (
    Counterpart,
    close,
    close_by_run,
    close_idle_episodes,
    find_episode,
    single_version,
)
from grading.models import Entity, Episode, Execution, Grade, Turn
from singularity.errors import ConfigError, StateError
from tests.fakes.gateway import Reply
from tests.grading.chat_helpers import make_role, prices, said, usage

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _prices(settings):
    prices(settings)


def user_texts(request) -> list[str]:
    return [m["content"] for m in request.json["messages"] if m["role"] in ("user", "assistant")]


# --- Turns make an episode -------------------------------------------------------------------------


def test_consecutive_turns_of_one_role_with_one_person_make_one_episode(fake_gateway, alice):
    role = make_role()
    fake_gateway.script(Reply(content="Hello! How can I help?"), Reply(content="Your parcel left on Monday."))
    said(fake_gateway, role, alice, "Hi")
    reply = said(fake_gateway, role, alice, "Where is my parcel?")
    [episode] = Episode.objects.all()
    assert reply.text == "Your parcel left on Monday." and reply.episode == episode
    assert list(episode.turns.values_list("seq", "role", "text")) == [
        (1, "person", "Hi"),
        (2, "role", "Hello! How can I help?"),
        (3, "person", "Where is my parcel?"),
        (4, "role", "Your parcel left on Monday."),
    ]
    assert episode.execution.run_kind == Execution.RunKind.EPISODE
    assert episode.execution.status == Execution.Status.RUNNING
    assert episode.status == "open" and not episode.busy and episode.counterpart_user == alice
    second = fake_gateway.requests[1].json["messages"]
    assert second[0] == {"role": "system", "content": "You answer customers of the shop."}
    assert user_texts(fake_gateway.requests[1]) == ["Hi", "Hello! How can I help?", "Where is my parcel?"]


def test_each_person_has_their_own_episode_with_the_role(fake_gateway, alice, bob):
    role = make_role()
    said(fake_gateway, role, alice, "Hi, I am Alice")
    said(fake_gateway, role, bob, "Hi, I am Bob")
    assert Episode.objects.count() == 2
    assert user_texts(fake_gateway.requests[1]) == ["Hi, I am Bob"], "Bob's reply never sees Alice's dialog"


def test_a_telegram_stranger_and_a_user_are_different_people(fake_gateway, alice):
    role = make_role()
    said(fake_gateway, role, Counterpart(telegram_id=4242, name="Stranger"), "Hello", surface="telegram")
    said(fake_gateway, role, alice, "Hello")
    said(fake_gateway, role, Counterpart(telegram_id=4242, name="Stranger"), "Again", surface="telegram")
    assert sorted(Episode.objects.values_list("counterpart_telegram_id", "counterpart_user__username"), key=str) == [
        (4242, None),
        (None, "alice"),
    ]


def test_the_episode_pays_for_its_replies(fake_gateway, alice):
    role = make_role()
    fake_gateway.script(Reply(content="a", usage=usage(1000, 100)), Reply(content="b", usage=usage(2000, 0)))
    said(fake_gateway, role, alice, "one")
    said(fake_gateway, role, alice, "two")
    episode = Episode.objects.get()
    # 1000 × $3/M + 100 × $15/M, then 2000 × $3/M.
    assert list(episode.turns.filter(role="role").values_list("cost_usd", flat=True)) == [
        Decimal("0.0045"),
        Decimal("0.006"),
    ]
    episode.execution.refresh_from_db()
    assert episode.execution.cost_usd == Decimal("0.0105")
    close(episode, "person")
    episode.execution.refresh_from_db()
    assert episode.execution.cost_usd == Decimal("0.0105")


def test_the_skills_a_role_names_are_appended_to_its_prompt(fake_gateway, alice, tmp_path):
    from tests.grading.grading_helpers import brain_repo

    checkout, commit = brain_repo(tmp_path / "brain", {"skills/refunds/SKILL.md": "Refund within 30 days."})
    role = make_role(skills=["refunds"])
    role.commit = commit
    role.save()
    from grading.chat.episodes import say
    from singularity.tools import ToolCatalogue

    say(
        role,
        Counterpart(user=alice),
        "Can I get a refund?",
        "dashboard",
        gateway=fake_gateway.gateway(),
        catalogue=ToolCatalogue(()),
        checkout=checkout,
    )
    system = fake_gateway.requests[0].json["messages"][0]["content"]
    assert system == "You answer customers of the shop.\n\n## Skill: refunds\n\nRefund within 30 days."


def test_an_empty_message_and_a_non_role_are_refused_by_name(fake_gateway, alice):
    with pytest.raises(ConfigError, match="message: empty"):
        said(fake_gateway, make_role(), alice, "   ")
    workflow = Entity.objects.create(slug="digest", kind="workflow", target_kind="scenario", path="x")
    with pytest.raises(ConfigError, match="scenario:digest: is a workflow, not a chat role"):
        said(fake_gateway, workflow, alice, "hi")
    assert Episode.objects.count() == 0


def test_a_failed_reply_is_a_turn_with_its_error_and_fails_the_episode(fake_gateway, alice):
    role = make_role()
    fake_gateway.script(Reply(status=400, error_message="model not allowed", error_type="invalid_request_error"))
    turn = said(fake_gateway, role, alice, "Hi")
    assert turn.text == "" and "the model call failed" in turn.error
    episode = Episode.objects.get()
    assert not episode.busy and episode.last_reply_at is not None
    close(episode, "person")
    episode.execution.refresh_from_db()
    assert episode.execution.status == "failed"
    assert episode.execution.error.startswith("turn 2: the model call failed")


# --- How an episode ends -----------------------------------------------------------------------------


def test_the_idle_pause_counts_from_the_roles_reply_not_the_persons_message(fake_gateway, alice):
    role = make_role(chat={"episode": {"idleHours": 0.5}})
    with time_machine.travel(T0, tick=False) as traveller:

        def slow_reply(request, headers):
            traveller.shift(timedelta(minutes=20))  # the role thinks for twenty minutes
            return Reply(content="Found it.")

        fake_gateway.handler = slow_reply
        said(fake_gateway, role, alice, "Where is my parcel?")
    episode = Episode.objects.get()
    assert episode.last_reply_at == T0 + timedelta(minutes=20)
    assert close_idle_episodes(T0 + timedelta(minutes=45)) == 0, "45 min after the message, 25 after the reply"
    assert close_idle_episodes(T0 + timedelta(minutes=51)) == 1
    episode.refresh_from_db()
    assert (episode.status, episode.closed_by) == ("closed", "idle")
    assert episode.closed_at == T0 + timedelta(minutes=50), "dated when the pause ran out"
    episode.execution.refresh_from_db()
    assert episode.execution.status == "succeeded"
    assert episode.execution.completed_at == T0 + timedelta(minutes=50)
    assert close_idle_episodes(T0 + timedelta(days=1)) == 0, "nothing twice"


def test_the_engine_default_pause_is_a_day(fake_gateway, alice):
    role = make_role()
    with time_machine.travel(T0, tick=False):
        said(fake_gateway, role, alice, "Hi")
    assert close_idle_episodes(T0 + timedelta(hours=23, minutes=59)) == 0
    assert close_idle_episodes(T0 + timedelta(hours=24)) == 1


def test_the_pause_never_runs_while_a_turn_is_in_progress(fake_gateway, alice):
    role = make_role(chat={"episode": {"idleHours": 0.5}})
    with time_machine.travel(T0, tick=False):
        said(fake_gateway, role, alice, "Hi")
    episode = Episode.objects.get()
    Episode.objects.filter(pk=episode.pk).update(busy=True)  # a turn waiting on the owner's grant
    assert close_idle_episodes(T0 + timedelta(days=2)) == 0
    episode.refresh_from_db()
    assert episode.status == "open"
    with pytest.raises(StateError, match="still answering the previous message"):
        said(fake_gateway, role, alice, "Hello?")


def test_the_next_message_after_the_end_opens_a_new_episode(fake_gateway, alice):
    role = make_role(chat={"episode": {"idleHours": 1}})
    with time_machine.travel(T0, tick=False):
        said(fake_gateway, role, alice, "Hi")
    close_idle_episodes(T0 + timedelta(hours=2))
    with time_machine.travel(T0 + timedelta(hours=3), tick=False):
        said(fake_gateway, role, alice, "Me again")
    first, second = Episode.objects.order_by("opened_at")
    assert first.pk != second.pk and first.status == "closed" and second.status == "open"
    assert list(second.turns.values_list("text", flat=True))[0] == "Me again"


def test_a_person_closes_an_episode_and_a_second_close_answers_none(fake_gateway, alice):
    role = make_role()
    said(fake_gateway, role, alice, "Thanks, bye")
    episode = Episode.objects.get()
    closed = close(episode, "person")
    assert closed is not None and (closed.status, closed.closed_by) == ("closed", "person")
    assert Execution.objects.get(pk=episode.pk).status == "succeeded"
    assert close(episode, "person") is None


def test_code_closing_an_episode_outside_a_turn_finishes_it_when_the_pause_would_have_run_out(fake_gateway, alice):
    role = make_role(chat={"episode": {"idleHours": 1}})
    with time_machine.travel(T0, tick=False):
        said(fake_gateway, role, alice, "I want a person")
    episode = Episode.objects.get()
    closed = close_by_run(episode.pk, now=T0 + timedelta(minutes=10))
    assert closed is not None and closed.closed_by == "code" and closed.status == "closed"
    assert Execution.objects.get(pk=episode.pk).status == "running", "its grading waits for the pause"
    assert close_by_run(episode.pk) is None
    assert close_idle_episodes(T0 + timedelta(minutes=59)) == 0
    assert close_idle_episodes(T0 + timedelta(minutes=61)) == 1
    execution = Execution.objects.get(pk=episode.pk)
    assert execution.status == "succeeded" and execution.completed_at == T0 + timedelta(minutes=10)


def test_the_role_closes_its_own_episode_with_agent_close_episode(fake_gateway, alice):
    role = make_role(capabilities=["episode:write"])
    fake_gateway.script(
        Reply(tool_calls=[("agent_close_episode", {})]),
        Reply(content="Glad I could help. Goodbye!"),
    )
    turn = said(fake_gateway, role, alice, "That solved it, thanks!")
    episode = Episode.objects.get()
    assert (episode.status, episode.closed_by) == ("closed", "agent")
    assert turn.text == "Glad I could help. Goodbye!"
    assert turn.tool_calls[0]["tool"] == "agent_close_episode" and turn.tool_calls[0]["status"] == "success"
    execution = Execution.objects.get(pk=episode.pk)
    assert execution.status == "succeeded", "finished when the turn ended"
    assert execution.completed_at == turn.created_at
    assert execution.trace[0]["tool"] == "agent_close_episode" and execution.trace[0]["turn"] == 2
    said(fake_gateway, role, alice, "One more thing")
    assert Episode.objects.count() == 2


def test_agent_close_episode_is_offered_only_under_episode_write(fake_gateway, alice):
    said(fake_gateway, make_role(), alice, "Hi")
    assert "tools" not in fake_gateway.requests[0].json or not fake_gateway.requests[0].json["tools"]
    said(fake_gateway, make_role("desk", capabilities=["episode:write"]), alice, "Hi")
    names = [tool["function"]["name"] for tool in fake_gateway.requests[1].json["tools"]]
    assert names == ["agent_close_episode"]


def test_an_agent_may_not_close_somebody_elses_episode(fake_gateway, alice):
    role = make_role(capabilities=["episode:write"])
    fake_gateway.script(Reply(tool_calls=[("agent_close_episode", {"id": "billing"})]), Reply(content="ok"))
    turn = said(fake_gateway, role, alice, "Please close the billing desk's chat")
    assert turn.tool_calls[0]["status"] == "failed"
    assert "may close only its own episode" in turn.tool_calls[0]["error"]
    assert Episode.objects.get().status == "open"
    fake_gateway.script(Reply(tool_calls=[("agent_close_episode", {"id": "helpdesk"})]), Reply(content="bye"))
    said(fake_gateway, role, alice, "bye")
    assert Episode.objects.get().closed_by == "agent", "naming itself is allowed"


# --- Grading starts from the close -----------------------------------------------------------------


def test_grading_is_booked_at_the_close_and_grade_after_hours_counts_from_there(
    fake_gateway, alice, django_capture_on_commit_callbacks
):
    role = make_role(evaluation={"gradeAfterHours": 2})
    with time_machine.travel(T0, tick=False):
        said(fake_gateway, role, alice, "Hi")
    episode = Episode.objects.get()
    assert not Grade.objects.exists(), "nothing is booked while the dialog goes on"
    with time_machine.travel(T0 + timedelta(hours=5), tick=False), django_capture_on_commit_callbacks(execute=True):
        close(episode, "person")
    grade = Grade.objects.get(execution_id=episode.pk)
    assert grade.status == "booked"
    assert grade.due_at == T0 + timedelta(hours=7)
    assert Execution.objects.get(pk=episode.pk).sampling == "sampled"


def test_a_chat_role_without_a_daily_ceiling_is_not_graded(fake_gateway, alice, django_capture_on_commit_callbacks):
    role = make_role(evaluation={"sample": {"rate": 1}})
    said(fake_gateway, role, alice, "Hi")
    with django_capture_on_commit_callbacks(execute=True):
        close(Episode.objects.get(), "person")
    assert not Grade.objects.exists()
    assert Execution.objects.get().sampling == "skipped_no_ceiling"


# --- A change to the role mid-dialog ---------------------------------------------------------------


def change_body(role: Entity, body: str) -> None:
    role.body = body
    role.save()


def test_under_keep_a_role_change_continues_the_dialog_and_flags_it_mixed(fake_gateway, alice):
    role = make_role()
    said(fake_gateway, role, alice, "Hi")
    change_body(role, "You answer customers of the shop, briefly.")
    said(fake_gateway, role, alice, "Still there?")
    episode = Episode.objects.get()
    versions = list(episode.turns.filter(role="role").values_list("version_hash", flat=True))
    assert len(set(versions)) == 2 and episode.mixed_versions
    assert user_texts(fake_gateway.requests[1]) == ["Hi", "done", "Still there?"], "the context is kept"
    close(episode, "person")
    execution = Execution.objects.get(pk=episode.pk)
    assert execution.output["mixed_versions"] is True and execution.output["role_version"] is None
    assert list(single_version(Execution.objects.all())) == []


def test_a_single_version_episode_counts_in_its_window(fake_gateway, alice):
    role = make_role()
    said(fake_gateway, role, alice, "Hi")
    close(Episode.objects.get(), "person")
    execution = Execution.objects.get()
    assert execution.output["mixed_versions"] is False and execution.output["role_version"]
    assert list(single_version(Execution.objects.all())) == [execution]


def test_under_reset_a_role_change_ends_the_episode_and_the_next_turn_starts_fresh(fake_gateway, alice):
    role = make_role(chat={"onRoleChange": "reset"})
    said(fake_gateway, role, alice, "Hi")
    change_body(role, "You answer customers of the shop, briefly.")
    said(fake_gateway, role, alice, "Still there?")
    first, second = Episode.objects.order_by("opened_at")
    assert (first.status, first.closed_by) == ("closed", "role_change")
    assert Execution.objects.get(pk=first.pk).status == "succeeded"
    assert second.status == "open" and not second.mixed_versions
    assert user_texts(fake_gateway.requests[1]) == ["Still there?"], "a fresh context"


def test_a_measurement_edit_is_not_a_new_version_even_under_reset(fake_gateway, alice):
    role = make_role(chat={"onRoleChange": "reset"})
    said(fake_gateway, role, alice, "Hi")
    role.frontmatter = {
        **role.frontmatter,
        "evaluation": {"enabled": True, "requirements": ["Polite"]},
        "chat": {"onRoleChange": "reset", "episode": {"idleHours": 2}},
    }
    role.save()
    said(fake_gateway, role, alice, "Still there?")
    episode = Episode.objects.get()
    assert len(episode.role_versions) == 1 and not episode.mixed_versions


def test_under_keep_the_next_episode_still_sees_the_chat_so_far(fake_gateway, alice):
    role = make_role(chat={"episode": {"idleHours": 1}})
    with time_machine.travel(T0, tick=False):
        said(fake_gateway, role, alice, "My order is 1234")
    close_idle_episodes(T0 + timedelta(hours=2))
    with time_machine.travel(T0 + timedelta(hours=3), tick=False):
        said(fake_gateway, role, alice, "Any news?")
    assert user_texts(fake_gateway.requests[1]) == ["My order is 1234", "done", "Any news?"]


# --- What a loop module reads ------------------------------------------------------------------------


def test_find_episode_gives_turns_counterpart_and_ending(fake_gateway, alice):
    role = make_role()
    fake_gateway.script(Reply(content="Hello"))
    said(fake_gateway, role, alice, "Hi")
    episode = Episode.objects.get()
    close(episode, "person")
    found = find_episode(episode.pk)
    assert found is not None
    assert found["runId"] == str(episode.pk) and found["closedBy"] == "person"
    assert found["counterpart"]["user"] == "alice" and found["counterpart"]["surface"] == "dashboard"
    assert [(t["role"], t["text"]) for t in found["turns"]] == [("person", "Hi"), ("role", "Hello")]
    assert find_episode("00000000-0000-0000-0000-000000000000") is None


def test_turns_are_numbered_without_gaps(fake_gateway, alice):
    role = make_role()
    for text in ("a", "b", "c"):
        said(fake_gateway, role, alice, text)
    assert list(Turn.objects.values_list("seq", flat=True)) == [1, 2, 3, 4, 5, 6]
