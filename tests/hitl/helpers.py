"""Cards of a test producer, and a handler that records every call it gets."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.utils import timezone

from hitl import registry
from hitl.actions import open_card, post_notice
from hitl.models import Card

PRODUCER = "test"
DECIDE = [{"value": "accept", "label": "Accept"}, {"value": "skip", "label": "Skip"}]
RATING_BUTTONS = [{"value": str(n), "label": str(n), "metric_id": "quality"} for n in range(1, 6)]
RATING_FORM = [
    {"metric_id": "clarity", "label": "Clarity", "min": 1, "max": 10, "step": 1},
    {"metric_id": "pacing", "label": "Pacing", "min": 0, "max": 100, "step": 5},
]


def make_card(
    kind: str = "decide",
    key: str = "decide:1",
    *,
    options: list[dict[str, Any]] | None = None,
    hours: float = 3,
    **kwargs: Any,
) -> Card:
    """Open a card of the test producer, due in ``hours``."""
    defaults = {"decide": DECIDE, "retry": [{"value": "retry", "label": "Retry"}, {"value": "skip", "label": "Skip"}]}
    return open_card(
        producer=PRODUCER,
        kind=kind,
        key=key,
        title=kwargs.pop("title", f"Proposal {key}"),
        subject=kwargs.pop("subject", "cycle 7 of triage"),
        subject_url=kwargs.pop("subject_url", "/evolution/cycles/7/"),
        text=kwargs.pop("text", "Shorter rules for the triage classifier."),
        options=options if options is not None else defaults.get(kind, DECIDE),
        expires_at=timezone.now() + timedelta(hours=hours),
        **kwargs,
    )


@dataclass
class Recorder:
    """What the test handler was called with: (card id, status, answer, responded_by username) per call."""

    calls: list[tuple[Any, str, dict[str, Any], str | None]] = field(default_factory=list)
    fail_with: Exception | None = None
    post_notices: bool = False
    #: Called with no arguments on each call, before anything else (a test looks at the world as the handler sees it).
    on_call: Callable[[], None] | None = None

    def __call__(self, card: Card) -> None:
        if self.on_call is not None:
            self.on_call()
        self.calls.append(
            (card.pk, card.status, dict(card.answer), card.responded_by.username if card.responded_by else None)
        )
        if self.post_notices:
            post_notice(
                producer=PRODUCER, kind="heard", title=f"Heard: {card.title} — {card.choice_label or card.status}"
            )
        if self.fail_with is not None:
            raise self.fail_with


@contextmanager
def recording_handler() -> Iterator[Recorder]:
    """Register a recording handler for every kind of the test producer; unregistered on exit."""
    recorder = Recorder()
    for kind in Card.Kind.values:
        registry.register(PRODUCER, kind, recorder)
    yield recorder
    for kind in Card.Kind.values:
        registry.unregister(PRODUCER, kind)
