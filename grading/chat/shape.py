"""An episode as the dashboard and the API list it: its shape, its grade, its numbers — never its words.

The shape is when it began and ended and why, how many turns it had, how
long it lasted, and whether its turns span two role versions. Beside it
stand the judge's grade, every number recorded on the grade (the judge's
metrics and ``measure()``'s), and people's ratings (medians on each metric's
own scale). Listing many episodes costs a fixed number of queries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db.models import Count, QuerySet
from django.utils import timezone

from grading.models import Entity, Episode, Grade
from grading.ratings import people_values

#: How an episode is said to have ended, in the dashboard's words.
ENDINGS = {
    Episode.ClosedBy.IDLE: "went quiet",
    Episode.ClosedBy.AGENT: "closed by the role",
    Episode.ClosedBy.PERSON: "closed by a person",
    Episode.ClosedBy.CODE: "closed by code",
    Episode.ClosedBy.ROLE_CHANGE: "role changed",
}


def ending(episode: Episode) -> str:
    """Return how the episode ended ("still open" while it goes on)."""
    return (
        ENDINGS.get(episode.closed_by, episode.closed_by) if episode.status == Episode.Status.CLOSED else "still open"
    )


@dataclass
class EpisodeRow:
    episode: Episode
    turns: int
    duration: timedelta
    ending: str
    grade: Grade | None
    metrics: dict[str, Any] = field(default_factory=dict)
    people: dict[str, float] = field(default_factory=dict)

    @property
    def closed(self) -> bool:
        return self.episode.status == Episode.Status.CLOSED

    def as_dict(self) -> dict[str, Any]:
        """Return the row as the API answers it (money as decimal text, instants as ISO-8601)."""
        episode, grade = self.episode, self.grade
        return {
            "run_id": str(episode.pk),
            "role": episode.role.slug if episode.role_id else None,
            "status": episode.status,
            "surface": episode.surface,
            "opened_at": episode.opened_at.isoformat(),
            "closed_at": episode.closed_at.isoformat() if episode.closed_at else None,
            "closed_by": episode.closed_by or None,
            "ending": self.ending,
            "turns": self.turns,
            "duration_ms": int(self.duration.total_seconds() * 1000),
            "mixed_versions": episode.mixed_versions,
            "run_status": episode.execution.status,
            "cost_usd": str(episode.execution.cost_usd),
            "grade": None
            if grade is None
            else {
                "status": grade.status,
                "score": grade.score,
                "passed": grade.passed,
                "failure_category": grade.failure_category,
                "error": grade.error,
            },
            "metrics": self.metrics,
            "people": self.people,
        }


def episodes_of(role: Entity) -> QuerySet[Episode]:
    """Return the role's episodes, newest first, with what a row needs joined in."""
    return (
        Episode.objects.filter(role=role)
        .select_related("execution", "execution__grade", "role", "counterpart_user")
        .annotate(turn_count=Count("turns"))
        .order_by("-opened_at", "-pk")
    )


def rows(episodes: list[Episode]) -> list[EpisodeRow]:
    """Return one row per episode (``episodes`` from ``episodes_of``): one more query for people's ratings."""
    people = people_values([episode.pk for episode in episodes])
    now = timezone.now()
    built = []
    for episode in episodes:
        execution = episode.execution
        grade = getattr(execution, "grade", None) if hasattr(execution, "grade") else None
        built.append(
            EpisodeRow(
                episode=episode,
                turns=episode.turn_count if hasattr(episode, "turn_count") else episode.turns.count(),
                duration=(episode.closed_at or now) - episode.opened_at,
                ending=ending(episode),
                grade=grade,
                metrics=dict(grade.metrics or {}) if grade is not None and grade.status == Grade.Status.GRADED else {},
                people=people.get(str(episode.pk), {}),
            )
        )
    return built
