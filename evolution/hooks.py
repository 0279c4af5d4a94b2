"""Where the loop plugs into the layers below it (called once from AppConfig.ready).

- grading tells the loop, after commit, which grades landed: the trigger and
  the watch read them on a worker (``evolution.tasks.grades_landed``).
- grading asks the loop which merges and reverts changed an entity (the
  entity page's plot markers).
- grading asks the watch whether a run is graded whatever the sample, and
  under which pinned judge.
- hitl calls the loop back when a decide, retry, grant or widen card closes;
  the Telegram channel hands it ``/idea``.
- a forge tells the machine when a pull request moved; git commands carry the forge's credential.
- the machine starts its steps through the Celery tasks.
- the proposer agent gets its read-only tools from ``evolution.investigate``.
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
        from evolution.loop.trigger import on_landed

        on_landed(ids)


def _exempt(execution: Any) -> str | None:
    from evolution.loop import watch

    return watch.exempt(execution)


def _frozen(grade: Any) -> Any:
    from evolution.loop import check, watch

    return check.frozen_judge(grade) or watch.frozen_judge(grade)


def _card(card: Any) -> None:
    from evolution.loop import machine

    machine.on_card(card)


def _pull_moved(number: int) -> None:
    from evolution.loop import machine

    machine.on_pull_event(number)


def connect() -> None:
    """Register the loop's listeners with grading, its card handlers with hitl, and its steps with Celery."""
    from evolution import confinement_doctor, doctor, github_doctor, tasks  # noqa: F401 - doctor sections, steps
    from evolution.forges import git_env
    from evolution.forges.base import listen_to_pulls
    from evolution.investigate import toolbox
    from evolution.loop import analyze_ask, intake, proposer
    from evolution.reads.evidence import decide_card_detail
    from evolution.reads.trends import trend_markers
    from evolution.steering import ideas, supervision
    from evolution.steering import settings as settings_writes
    from evolution.views import telegram as ideas_telegram
    from grading import booking, grade, trends
    from hitl import registry
    from hitl.channels.telegram import register_message_handler
    from hitl.models import Card
    from singularity.brain.git import add_env_source

    grade.register_landed(_landed)
    booking.register_exemption(_exempt)
    grade.register_frozen_judge(_frozen)
    trends.register_trend_markers(trend_markers)  # the entity page's plots mark merges and reverts
    registry.register("loop", Card.Kind.DECIDE, _card)
    registry.register_detail("loop", Card.Kind.DECIDE, decide_card_detail)  # its page shows the evidence runs
    registry.register("loop", Card.Kind.RETRY, _card)
    registry.register(supervision.PRODUCER, Card.Kind.GRANT, supervision.on_card)
    registry.register(ideas.PRODUCER, Card.Kind.GRANT, intake.on_card)  # an agent's idea waits on its approval
    registry.register(analyze_ask.PRODUCER, Card.Kind.GRANT, analyze_ask.on_card)  # an agent's loop_analyze too
    registry.register(ideas.WITHDRAW_PRODUCER, Card.Kind.GRANT, ideas.on_withdraw_card)  # and someone else's idea
    register_message_handler(ideas_telegram.on_message)  # /idea in Telegram
    registry.register(settings_writes.PRODUCER, Card.Kind.WIDEN, settings_writes.on_widen_card)
    listen_to_pulls(_pull_moved)
    proposer.use_toolbox(toolbox.for_round)  # the proposer agent's read-only tools (evolution.investigate)
    add_env_source(git_env)  # the forge's git credential (GitHub: an HTTPS header, never on argv or disk)
