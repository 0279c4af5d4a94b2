"""Alert rules: each rule's measure read on the beat, its level (ok, warning, alert) stored, a change of level sent.

A level is sent once when it is reached and once when the rule is back to ok (``alert.resolved``), never on every
tick: the stored ``AlertState`` is what was last said. The measures live with the data they read; an app above
registers its own (``register``): grading the objective, the failing share and the day's spend; the queue backlog
is read here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from singularity.notify.events import emit
from singularity.notify.models import AlertRule, AlertState

log = logging.getLogger(__name__)

#: A measure answers the rule's current value, or None when there is nothing to read yet (the level is kept).
Measure = Callable[[AlertRule, datetime], Decimal | None]
MEASURES: dict[str, Measure] = {}


def register(kind: str, measure: Measure) -> None:
    MEASURES[kind] = measure


def _backlog(rule: AlertRule, now: datetime) -> Decimal | None:
    from singularity.queues import depth

    found = depth(rule.queue or "celery")
    return None if found is None else Decimal(found)


register(AlertRule.Kind.BACKLOG, _backlog)


def level_of(rule: AlertRule, value: Decimal) -> str:
    """The level ``value`` stands at: past the alert level, past the warning level, or ok."""
    alert, warning = Decimal(str(rule.alert)), Decimal(str(rule.warning))
    if rule.below:
        past_alert, past_warning = value < alert, value < warning
    else:
        past_alert, past_warning = value > alert, value > warning
    if past_alert:
        return AlertState.Level.ALERT
    return AlertState.Level.WARNING if past_warning else AlertState.Level.OK


def _words(rule: AlertRule, level: str, value: Decimal) -> tuple[str, str]:
    what = AlertRule.Kind(rule.kind).label
    subject = " ".join(p for p in (rule.entity, rule.metric, rule.queue) if p)
    if level == AlertState.Level.OK:
        return f"Resolved: {rule.name}", f"{what} ({subject}) is back within its levels: {value}."
    bound = rule.alert if level == AlertState.Level.ALERT else rule.warning
    side = "under" if rule.below else "over"
    return (
        f"{level.capitalize()}: {rule.name}",
        f"{what} ({subject}): {value}, {side} the {level} level {bound}.",
    )


def evaluate(rule: AlertRule, *, now: datetime | None = None) -> str | None:
    """Read the rule's measure; when its level changed, store it and send the change. Return the new level or None."""
    now = now or timezone.now()
    measure = MEASURES.get(rule.kind)
    if measure is None:
        log.warning("notify: alert rule %s: no measure is registered for %s", rule.name, rule.kind)
        return None
    value = measure(rule, now)
    if value is None:
        return None
    level = level_of(rule, value)
    with transaction.atomic():
        state, _ = AlertState.objects.select_for_update().get_or_create(rule=rule)
        state.value, state.evaluated_at = str(value), now
        if state.level == level:
            state.save(update_fields=["value", "evaluated_at"])
            return None
        state.level, state.changed_at, state.changes = level, now, state.changes + 1
        state.save()
        title, text = _words(rule, level, value)
        event = "alert.resolved" if level == AlertState.Level.OK else f"alert.{level}"
        emit(event, key=f"{rule.pk}:{state.changes}", title=title, text=text, rule=rule.name, value=str(value))
    return level


def evaluate_all(*, now: datetime | None = None) -> int:
    """Evaluate every active rule on its own (one failing measure does not stop the others); return the changes."""
    changed = 0
    for rule in AlertRule.objects.filter(active=True):
        try:
            changed += evaluate(rule, now=now) is not None
        except Exception:  # noqa: BLE001 - one rule's broken measure is logged; the other rules still run
            log.exception("notify: alert rule %s could not be evaluated", rule.name)
    return changed
