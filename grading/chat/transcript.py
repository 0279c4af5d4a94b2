"""What an episode's judge reads: the whole dialog in order, earlier dialogs with the same person, the privacy rule.

The dialog is every message the person sent, every reply, and every tool
call the role made in its turns (arguments and answers clipped) — never the
role's instructions. ``evaluation.context.priorEpisodes`` adds the last
closed episodes of the role with the same person as context, and
``evaluation.context.maxTokens`` bounds the whole transcript (tokens
estimated as characters / 4; the episode itself comes first, then the
earlier ones while they fit). The privacy rule is
``constitution/Loop/chat-privacy.md`` at the role's commit, else the
engine's; a blank copy in the brain means no rule.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.utils import timezone

from grading.methods import brain_checkout
from grading.models import Entity, Episode, Execution, Turn
from singularity.brain.git import GitError

PRIVACY_PATH = "constitution/Loop/chat-privacy.md"
BUNDLED_PRIVACY = Path(__file__).resolve().with_name("chat_privacy.md")
CHARS_PER_TOKEN = 4
#: An earlier dialog is not shown in less room than this (characters).
MIN_PRIOR_CHARS = 400


def privacy_rule(entity: Entity, *, checkout: Any | None = None) -> str:
    """Return the chat privacy rule the judge grades under ("" when the brain's copy is blank)."""
    if entity.commit:
        try:
            return brain_checkout(checkout).read_at(entity.commit, PRIVACY_PATH).decode("utf-8").strip()
        except GitError:
            pass  # the brain has no rule of its own: the engine's applies
    return BUNDLED_PRIVACY.read_text(encoding="utf-8").strip()


def context_terms(entity: Entity) -> tuple[int, int]:
    """Return the role's ``evaluation.context``: (priorEpisodes, maxTokens)."""
    context = entity.evaluation().get("context") or {}
    return int(context.get("priorEpisodes") or 0), int(context.get("maxTokens") or 20000)


def _at(moment: Any) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M") if moment else "?"


def turn_lines(turn: Turn) -> list[str]:
    """Return one turn as the judge reads it: who said what, then the role's tool calls (clipped)."""
    if turn.role == Turn.Speaker.PERSON:
        return [f"[{turn.seq}] Person ({_at(turn.created_at)}): {turn.text}"]
    lines = [
        f"    tool {call.get('tool')} {call.get('arguments', '')} → {call.get('status')}: "
        + str(call.get("error") or call.get("result") or "")
        for call in turn.tool_calls or []
    ]
    said = turn.text if not turn.error else f"(no reply: {turn.error})"
    return [*lines, f"[{turn.seq}] Role ({_at(turn.created_at)}): {said}"]


def shape_line(episode: Episode, turns: int) -> str:
    """Return how the episode went, without its words: turns, when it began and ended, and how."""
    ending = episode.get_closed_by_display() if episode.closed_by else "still open"
    line = f"{turns} turns, began {_at(episode.opened_at)}, ended {_at(episode.closed_at)} ({ending})"
    if episode.mixed_versions:
        line += "; its turns ran under two versions of the role"
    return line


def _fit(lines: list[str], budget: int) -> list[str]:
    """Return ``lines`` cut to ``budget`` characters: the opening and the end kept, the middle left out."""
    if sum(len(line) + 1 for line in lines) <= budget:
        return lines
    head: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) + 1 > budget // 3:
            break
        head.append(line)
        used += len(line) + 1
    tail: list[str] = []
    for line in reversed(lines[len(head) :]):
        if used + len(line) + 1 > budget - 80:
            break
        tail.insert(0, line)
        used += len(line) + 1
    left_out = len(lines) - len(head) - len(tail)
    if not head and not tail and lines:
        return [lines[-1][: max(0, budget - 80)] + "…", f"[… {left_out} earlier lines left out to fit the budget …]"]
    return [*head, f"[… {left_out} lines left out to fit the judge's budget …]", *tail]


def _dialog(episode: Episode) -> list[str]:
    turns = list(episode.turns.order_by("seq"))
    return [shape_line(episode, len(turns)), *[line for turn in turns for line in turn_lines(turn)]]


def prior_episodes(episode: Episode, count: int) -> list[Episode]:
    """Return the last ``count`` closed episodes of the role with the same person before this one, oldest first."""
    if count <= 0:
        return []
    earlier = Episode.objects.filter(
        role_id=episode.role_id,
        status=Episode.Status.CLOSED,
        counterpart_user_id=episode.counterpart_user_id,
        opened_at__lt=episode.opened_at,
    ).exclude(pk=episode.pk)
    if episode.counterpart_user_id is None:
        earlier = earlier.filter(counterpart_telegram_id=episode.counterpart_telegram_id)
    return list(earlier.order_by("-opened_at")[:count])[::-1]


def evidence(entity: Entity, execution: Execution) -> list[str]:
    """Return the judge's evidence of an episode: the dialog whole, then earlier dialogs as context, in budget."""
    episode = Episode.objects.filter(pk=execution.pk).first()
    if episode is None:
        return ["## The dialog", "(no turns were recorded for this episode)"]
    prior_count, max_tokens = context_terms(entity)
    budget = max_tokens * CHARS_PER_TOKEN
    dialog = _fit(_dialog(episode), budget)
    room = budget - sum(len(line) + 1 for line in dialog)
    parts = [f"## The dialog (episode {episode.pk}, {execution.status})", "\n".join(dialog)]
    earlier: list[str] = []
    for prior in reversed(prior_episodes(episode, prior_count)):
        if room < MIN_PRIOR_CHARS:
            break
        lines = _fit(_dialog(prior), room)
        room -= sum(len(line) + 1 for line in lines)
        earlier.insert(0, f"### Episode {prior.pk}\n" + "\n".join(lines))
    if earlier:
        parts += [
            "## Earlier dialogs with the same person (context only: grade the dialog above)",
            *earlier,
        ]
    return parts
