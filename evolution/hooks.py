"""Where the loop plugs into the layers below it (called once from AppConfig.ready).

- grading tells the loop, after commit, which grades landed: the trigger and
  the watch read them on a worker (``evolution.tasks.grades_landed``).
- grading asks the watch whether a run is graded whatever the sample, and
  under which pinned judge.
- hitl calls the loop back when a decide or retry card closes.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def _landed(grade_ids: list[Any]) -> None:
    from evolution.tasks import grades_landed

    ids = [str(pk) for pk in grade_ids]
    try:
        grades_landed.delay(ids)
    except Exception as exc:  # noqa: BLE001 - a broker hiccup must not fail the grading that already committed
        log.warning("loop: could not hand %d landed grades to a worker (%s); reading them here", len(ids), exc)
        from evolution.trigger import on_landed

        on_landed(ids)


def _exempt(execution: Any) -> str | None:
    from evolution import watch

    return watch.exempt(execution)


def _frozen(grade: Any) -> Any:
    from evolution import watch

    return watch.frozen_judge(grade)


def _card(card: Any) -> None:
    from evolution import rounds

    rounds.on_card(card)


def connect() -> None:
    """Register the loop's listeners with grading and its card handlers with hitl."""
    from evolution import doctor  # noqa: F401 - registers the loop's doctor sections
    from grading import booking, grade
    from hitl import registry
    from hitl.models import Card

    grade.register_landed(_landed)
    booking.register_exemption(_exempt)
    grade.register_frozen_judge(_frozen)
    registry.register("loop", Card.Kind.DECIDE, _card)
    registry.register("loop", Card.Kind.RETRY, _card)
    from evolution import supervision

    registry.register(supervision.PRODUCER, Card.Kind.GRANT, supervision.on_card)
    from evolution import ideas

    ideas.connect()  # the idea approval card and /idea in Telegram
    from evolution import settings_writes

    registry.register(settings_writes.PRODUCER, Card.Kind.WIDEN, settings_writes.on_widen_card)
