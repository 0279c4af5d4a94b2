"""Episodes: a person's dialog with a chat role, from the first message to its end, graded whole.

``say`` puts a person's message into the open episode of that role with that
person (opening one, and its execution, when there is none), runs the role's
reply through the shared agent loop and records both turns. An episode ends
one of four ways: ``chat.episode.idleHours`` of silence after the role's
reply (``close_idle_episodes``; never while a turn is in progress), the role
calling ``agent_close_episode``, a person or code closing it (``close``,
``close_by_run``), or a change of the role under ``chat.onRoleChange:
reset``. The next message opens a new episode.

At the end the execution is finished (``finish_execution``), which books its
grading: ``gradeAfterHours`` counts from the close. A close that lands during
a turn is finished when the turn ends; code's close from outside a turn is
finished when the idle pause would have run out.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, QuerySet, Value
from django.utils import timezone

from grading.chat.tools import TurnTools
from grading.chat.versions import RoleVersion, role_version, system_prompt
from grading.executions import finish_execution, start_execution
from grading.models import Entity, Episode, Execution, Turn
from singularity.agent import COMPLETED, AgentHooks, AgentLoop, Prices
from singularity.errors import ConfigError, StateError, UpstreamError
from singularity.fields import MoneyField
from singularity.money import Debit
from singularity.tools.outcome import FAILED, INDETERMINATE

logger = logging.getLogger("grading.chat")

#: The longest message a person may send in one turn.
MAX_MESSAGE = 16_000
#: How many earlier turns of the chat the role sees as its conversation.
MAX_HISTORY_TURNS = 40
#: A tool call's arguments and answer are kept clipped to this many characters.
CLIP = 500

ClosedBy = Episode.ClosedBy


@dataclass(frozen=True)
class Counterpart:
    """The one person of a dialog: a Django user when known, else a Telegram account (with the name it shows)."""

    user: Any = None
    telegram_id: int | None = None
    name: str = ""

    def __post_init__(self) -> None:
        if self.user is None and self.telegram_id is None:
            raise ConfigError("counterpart: a dialog needs a person: a user or a Telegram account id")

    def lookup(self) -> dict[str, Any]:
        """Return the filter of this person's episodes (a known user on any surface, else the Telegram account)."""
        if self.user is not None:
            return {"counterpart_user": self.user}
        return {"counterpart_user__isnull": True, "counterpart_telegram_id": self.telegram_id}

    def fields(self) -> dict[str, Any]:
        return {
            "counterpart_user": self.user,
            "counterpart_telegram_id": self.telegram_id,
            "counterpart_name": self.name[:200],
        }


# --- Terms -------------------------------------------------------------------------------------


def idle_pause(role: Entity) -> timedelta:
    """Return the role's resolved ``chat.episode.idleHours`` as a timedelta."""
    hours = ((role.terms.get("chat") or {}).get("episode") or {}).get("idleHours", 24)
    return timedelta(hours=float(Decimal(str(hours))))


def on_role_change(role: Entity) -> str:
    """Return the role's resolved ``chat.onRoleChange``: "keep" or "reset"."""
    return str((role.terms.get("chat") or {}).get("onRoleChange") or "keep")


def check_role(role: Entity) -> None:
    """Raise ``ConfigError`` naming the entity when people cannot chat with it."""
    if role.kind != Entity.Kind.ROLE:
        raise ConfigError(f"{role}: is a {role.kind}, not a chat role; only a role has dialogs")
    if not role.present:
        raise ConfigError(f"{role}: is no longer in the brain")
    if role.load_error:
        raise ConfigError(f"{role}: its definition failed to load: {role.load_error}")


# --- Reading -----------------------------------------------------------------------------------


def open_episode(role: Entity, counterpart: Counterpart) -> Episode | None:
    """Return the open episode of ``role`` with ``counterpart``, or None."""
    return Episode.objects.filter(role=role, status=Episode.Status.OPEN, **counterpart.lookup()).first()


def single_version(executions: QuerySet[Execution]) -> QuerySet[Execution]:
    """Return ``executions`` without the episodes whose turns ran under two role versions (they count in no window)."""
    return executions.exclude(episode__mixed_versions=True)


def history(episode: Episode, *, before_seq: int) -> list[Turn]:
    """Return the chat's earlier turns the role sees: this person's episodes since the last fresh context.

    At most ``MAX_HISTORY_TURNS``, oldest first; a failed reply is left out.
    """
    same = Episode.objects.filter(role_id=episode.role_id, opened_at__lte=episode.opened_at)
    same = same.filter(counterpart_user_id=episode.counterpart_user_id)
    if episode.counterpart_user_id is None:
        same = same.filter(counterpart_telegram_id=episode.counterpart_telegram_id)
    if not episode.fresh_context:
        start = same.filter(fresh_context=True).order_by("-opened_at").values_list("opened_at", flat=True).first()
        same = same.filter(opened_at__gte=start) if start is not None else same
    else:
        same = same.filter(pk=episode.pk)
    turns = (
        Turn.objects.filter(episode__in=same.values("pk"), error="")
        .exclude(episode=episode, seq__gte=before_seq)
        .order_by("-episode__opened_at", "-seq")[:MAX_HISTORY_TURNS]
    )
    return list(turns)[::-1]


def find_episode(run_id: Any) -> dict[str, Any] | None:
    """Return an episode as a loop module reads it (findChatEpisode): turns, counterpart, how it ended; or None."""
    episode = Episode.objects.select_related("counterpart_user").filter(pk=run_id).first()
    if episode is None:
        return None
    return {
        "runId": str(episode.pk),
        "roleId": episode.role.slug,
        "status": episode.status,
        "counterpart": {
            "user": episode.counterpart_user.get_username() if episode.counterpart_user else None,
            "telegramId": episode.counterpart_telegram_id,
            "name": episode.counterpart_name,
            "surface": episode.surface,
        },
        "openedAt": episode.opened_at.isoformat(),
        "closedAt": episode.closed_at.isoformat() if episode.closed_at else None,
        "closedBy": episode.closed_by or None,
        "mixedVersions": episode.mixed_versions,
        "turns": [
            {
                "seq": turn.seq,
                "role": turn.role,
                "text": turn.text,
                "at": turn.created_at.isoformat(),
                "versionHash": turn.version_hash or None,
                "toolCalls": turn.tool_calls,
                "error": turn.error,
            }
            for turn in episode.turns.order_by("seq")
        ],
    }


# --- One turn ----------------------------------------------------------------------------------


def _clip(value: Any) -> str:
    """Return ``value`` as text clipped to ``CLIP`` characters (JSON values are written out first)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= CLIP else text[: CLIP - 1] + "…"


class _TurnHooks(AgentHooks):
    """Adds each completion's exact debit to the turn and records each tool call, clipped."""

    def __init__(self) -> None:
        self.cost = Decimal(0)
        self.tool_calls: list[dict[str, Any]] = []

    def after_completion(self, completion: Any, debit: Debit, round_number: int) -> None:
        self.cost += debit.total

    def after_tool(self, call: Any, outcome: Any, round_number: int) -> None:
        self.tool_calls.append(
            {
                "tool": call.name,
                "arguments": _clip(call.arguments),
                "status": outcome.status,
                "error": outcome.error,
                "result": _clip(outcome.result),
                "duration_ms": outcome.duration_ms,
            }
        )


def _start_turn(
    role: Entity, counterpart: Counterpart, text: str, surface: str, version: RoleVersion
) -> tuple[Episode, Turn, Episode | None]:
    """Put the person's message into the open episode (opening one); return it, the turn and an episode reset."""
    for attempt in (1, 2):
        try:
            with transaction.atomic():
                return _start_turn_locked(role, counterpart, text, surface, version)
        except IntegrityError:
            # Two first messages raced to open the dialog: the loser joins the winner's episode.
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _start_turn_locked(
    role: Entity, counterpart: Counterpart, text: str, surface: str, version: RoleVersion
) -> tuple[Episode, Turn, Episode | None]:
    episode = (
        Episode.objects.select_for_update()
        .filter(role=role, status=Episode.Status.OPEN, **counterpart.lookup())
        .first()
    )
    if episode is not None and episode.busy:
        raise StateError(f"{role}: still answering the previous message of this dialog; send it again when it has")
    reset: Episode | None = None
    if (
        episode is not None
        and on_role_change(role) == "reset"
        and episode.role_versions
        and episode.role_versions[-1] != version.hash
    ):
        reset = _close_locked(episode, ClosedBy.ROLE_CHANGE, timezone.now())
        episode = None
    if episode is None:
        execution = start_execution(role, input={"surface": surface}, source=Execution.Source.MANUAL, user=None)
        earlier = Episode.objects.filter(role=role, **counterpart.lookup()).exists()
        episode = Episode.objects.create(
            execution=execution,
            role=role,
            surface=surface,
            opened_at=execution.started_at,
            fresh_context=reset is not None or not earlier,
            **counterpart.fields(),
        )
    seq = (episode.turns.order_by("-seq").values_list("seq", flat=True).first() or 0) + 1
    turn = Turn.objects.create(episode=episode, seq=seq, role=Turn.Speaker.PERSON, text=text, surface=surface)
    Episode.objects.filter(pk=episode.pk).update(busy=True)
    episode.busy = True
    return episode, turn, reset


def _reply(
    role: Entity,
    episode: Episode,
    person_turn: Turn,
    version: RoleVersion,
    *,
    gateway: Any,
    catalogue: Any,
) -> tuple[str, str, _TurnHooks]:
    """Run the role's reply through the agent loop; return its text, the error ("" when it answered), the hooks."""
    hooks = _TurnHooks()
    conversation = [
        {"role": "user" if turn.role == Turn.Speaker.PERSON else "assistant", "content": turn.text}
        for turn in history(episode, before_seq=person_turn.seq)
    ]
    tools = TurnTools(catalogue, role, close=lambda: close(episode, ClosedBy.AGENT) is not None)
    prompt = system_prompt(role, version)
    model = (role.frontmatter or {}).get("model")
    loop = AgentLoop(
        gateway=gateway,
        tools=tools.openai_tools(),
        call_tool=tools.call,
        model=model if isinstance(model, str) and model else settings.BRAMA_MODEL,
        system=lambda: {"role": "system", "content": prompt} if prompt else None,
        prices=Prices.from_settings(),
        max_rounds=settings.SINGULARITY_MAX_TOOL_ROUNDS,
        hooks=hooks,
    )
    try:
        result = loop.run([*conversation, {"role": "user", "content": person_turn.text}])
    except UpstreamError as exc:
        return "", f"the model call failed: {exc}", hooks
    if result.status != COMPLETED:
        return "", f"maximum tool rounds reached ({settings.SINGULARITY_MAX_TOOL_ROUNDS})", hooks
    return result.final_content, "", hooks


def _end_turn(episode: Episode, version: RoleVersion, text: str, error: str, hooks: _TurnHooks) -> Turn:
    """Record the role's turn, its version and cost; the pause counts from now. Return the turn."""
    with transaction.atomic():
        locked = Episode.objects.select_for_update().get(pk=episode.pk)
        seq = (locked.turns.order_by("-seq").values_list("seq", flat=True).first() or 0) + 1
        now = timezone.now()
        turn = Turn.objects.create(
            episode=locked,
            seq=seq,
            role=Turn.Speaker.ROLE,
            text=text,
            version_hash=version.hash,
            created_at=now,
            cost_usd=hooks.cost,
            tool_calls=hooks.tool_calls,
            error=error,
        )
        versions = list(locked.role_versions or [])
        if version.hash not in versions:
            versions.append(version.hash)
        Episode.objects.filter(pk=locked.pk).update(
            busy=False, last_reply_at=now, role_versions=versions, mixed_versions=len(versions) > 1
        )
        Execution.objects.filter(pk=locked.pk).update(
            cost_usd=F("cost_usd") + Value(hooks.cost, output_field=MoneyField())
        )
    return turn


def say(
    role: Entity,
    counterpart: Counterpart,
    text: str,
    surface: str,
    *,
    gateway: Any = None,
    catalogue: Any = None,
    checkout: Any = None,
) -> Turn:
    """Put a person's message into its episode, run the role's reply, and return the role's turn.

    The reply runs under the role's current version (its body and named
    skills as the system prompt, the chat's earlier turns as the
    conversation, the MCP tools and — under ``episode:write`` —
    ``agent_close_episode``); its cost is the episode's. A failed model call
    is recorded as a turn with an ``error``. Raises ``ConfigError`` for a
    role people cannot chat with or an empty message, ``StateError`` while
    the role is still answering this person's previous message.
    ``gateway``/``catalogue`` default to the configured ones (closed after).
    """
    check_role(role)
    text = (text or "").strip()
    if not text:
        raise ConfigError(f"{role}: message: empty; say something")
    if len(text) > MAX_MESSAGE:
        raise ConfigError(f"{role}: message: {len(text)} characters; at most {MAX_MESSAGE}")
    if surface not in Episode.Surface.values:
        raise ConfigError(f"surface: {surface!r} is not one of {', '.join(Episode.Surface.values)}")
    version = role_version(role, checkout=checkout)
    episode, person_turn, reset = _start_turn(role, counterpart, text, surface, version)
    if reset is not None:
        finalize(reset)
    from grading.runners.context import _Resources

    resources = _Resources(gateway=gateway, catalogue=catalogue)
    try:
        reply, error, hooks = _reply(
            role, episode, person_turn, version, gateway=resources.gateway, catalogue=resources.catalogue
        )
    except BaseException:
        # The turn is over either way: record it so the pause can run, then let the bug surface.
        _end_turn(episode, version, "", "the turn broke off", _TurnHooks())
        finalize(episode)
        raise
    finally:
        resources.close()
    turn = _end_turn(episode, version, reply, error, hooks)
    if error:
        logger.info("episode %s: the role's turn %s failed: %s", episode.pk, turn.seq, error)
    finalize(episode)
    return turn


# --- Ending ------------------------------------------------------------------------------------


def _close_locked(episode: Episode, by: str, now: datetime, *, finish_after: datetime | None = None) -> Episode | None:
    """Close an open episode (caller's transaction); return it, or None when it had already ended."""
    closed = Episode.objects.filter(pk=episode.pk, status=Episode.Status.OPEN).update(
        status=Episode.Status.CLOSED, closed_at=now, closed_by=by, finish_after=finish_after or now
    )
    if not closed:
        return None
    return Episode.objects.select_related("role").get(pk=episode.pk)


def close(episode: Episode, by: str, *, now: datetime | None = None) -> Episode | None:
    """Close an open episode now and return the closed row; None when it had already ended.

    ``by`` is "agent", "person" or "code". Its grading is queued at once, or
    — when the close lands during a turn — when that turn ends. Code's close
    from outside a turn (``close_by_run``) is finished when the idle pause
    would have run out.
    """
    if by not in (ClosedBy.AGENT, ClosedBy.PERSON, ClosedBy.CODE):
        raise ConfigError(f"closed_by: {by!r} is not agent, person or code")
    now = now or timezone.now()
    with transaction.atomic():
        locked = Episode.objects.select_for_update().select_related("role").filter(pk=episode.pk).first()
        if locked is None:
            return None
        finish_after = now
        if by == ClosedBy.CODE and not locked.busy and locked.last_reply_at is not None:
            finish_after = max(now, locked.last_reply_at + idle_pause(locked.role))
        closed = _close_locked(locked, by, now, finish_after=finish_after)
    if closed is not None:
        finalize(closed, now=now)
    return closed


def close_by_run(run_id: Any, *, now: datetime | None = None) -> Episode | None:
    """Close the episode with this run id as your code does (closeChatEpisode); return the row, or None when ended."""
    episode = Episode.objects.filter(pk=run_id).first()
    if episode is None:
        raise ConfigError(f"run {run_id}: no such chat episode")
    return close(episode, ClosedBy.CODE, now=now)


def _shape(episode: Episode, turns: list[Turn]) -> dict[str, Any]:
    versions = list(episode.role_versions or [])
    return {
        "turns": len(turns),
        "closed_by": episode.closed_by,
        "surface": episode.surface,
        "role_versions": versions,
        "role_version": versions[0] if len(versions) == 1 else None,
        "mixed_versions": len(versions) > 1,
    }


def finalize(episode: Episode, *, now: datetime | None = None) -> bool:
    """Finish a closed episode's execution (which books its grading); return whether this call did.

    Nothing happens while the episode is open or a turn is in progress,
    before its ``finish_after``, or when it was finished already. The
    execution ends at the close (or at the last reply, when the close came
    mid-turn), so ``gradeAfterHours`` counts from there.
    """
    now = now or timezone.now()
    episode = Episode.objects.select_related("execution").get(pk=episode.pk)
    execution = episode.execution
    if (
        episode.status != Episode.Status.CLOSED
        or episode.busy
        or (episode.finish_after and episode.finish_after > now)
        or execution.status != Execution.Status.RUNNING
    ):
        return False
    turns = list(episode.turns.order_by("seq"))
    trace = [{**call, "turn": turn.seq} for turn in turns for call in turn.tool_calls or []]
    failed = [turn for turn in turns if turn.role == Turn.Speaker.ROLE and turn.error]
    cost = sum((turn.cost_usd for turn in turns), Decimal(0))
    ended = max(filter(None, [episode.closed_at, episode.last_reply_at]))
    try:
        finish_execution(
            execution,
            status=Execution.Status.FAILED if failed else Execution.Status.SUCCEEDED,
            output=_shape(episode, turns),
            error="; ".join(f"turn {turn.seq}: {turn.error}" for turn in failed),
            cost_usd=cost,
            tool_failures=sum(1 for call in trace if call.get("status") in (FAILED, INDETERMINATE)),
            trace=trace,
            completed_at=ended,
        )
    except StateError:
        return False
    return True


def close_idle_episodes(now: datetime | None = None) -> int:
    """Close every episode whose idle pause ran out since the role's reply, finish what is due; return how many.

    The pause counts from the role's last reply and never runs while a turn
    is in progress. The close is dated when the pause ran out. Closed
    episodes whose execution is due (code's close after its pause, a close
    that landed mid-turn) are finished here too. Running it twice does
    nothing twice.
    """
    now = now or timezone.now()
    done = 0
    waiting = Episode.objects.filter(status=Episode.Status.OPEN, busy=False, last_reply_at__isnull=False)
    for episode in waiting.select_related("role").order_by("last_reply_at"):
        until = episode.last_reply_at + idle_pause(episode.role)
        if until > now:
            continue
        with transaction.atomic():
            closed = Episode.objects.filter(
                pk=episode.pk, status=Episode.Status.OPEN, busy=False, last_reply_at=episode.last_reply_at
            ).update(status=Episode.Status.CLOSED, closed_at=until, closed_by=ClosedBy.IDLE, finish_after=until)
        if closed:
            finalize(episode, now=now)
            done += 1
    due = Episode.objects.filter(
        status=Episode.Status.CLOSED, busy=False, finish_after__lte=now, execution__status=Execution.Status.RUNNING
    )
    for episode in due:
        done += finalize(episode, now=now)
    return done
