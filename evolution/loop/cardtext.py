"""The words of the loop's decide and retry cards (seed 003, "Where the loop waits for a person").

``decide_card(round)`` and ``retry_card(round)`` return what ``hitl.actions.open_card``
needs besides the buttons: title, subject, subject_url and the plain text
(templates ``evolution/cards/decide.txt`` and ``retry.txt``; Telegram shows it
as is). The decide card carries the proposal's summary and the context a
reviewer needs before tapping: its author, what the change is judged by with
each objective at the level its window stands at, the entity's recent pass
count (not under ``evaluation.method: none``), a failure category other
entities share, the spend so far and the files it changes — and a "Full
proposal" link to the round on the dashboard. A deploy with no
``SINGULARITY_PUBLIC_URL`` sends the cards without links.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import Count
from django.template.loader import render_to_string
from django.utils import timezone

from evolution.core.diffs import excerpt, file_diffs
from evolution.core.links import cycle_path, file_change
from evolution.models import Cycle, Round
from evolution.presets import evolve, power
from grading.metrics import aggregate, run_value, specs, to_number
from grading.models import Entity, Grade
from grading.ratings import on_scale, people_values
from singularity.display import usd_text

#: The recent pass count reads the entity's newest graded runs, this many.
RECENT_RUNS = 10
#: A failure category counts as shared when another entity's run hit it this recently.
SHARED_DAYS = 7
ARROW = {"max": "↑", "min": "↓"}
ICON = {"objective": "🎯 Optimizing", "guard": "🛡 Guarding"}
TITLE_CHARS = 200


def _link(path: str) -> str:
    """``path`` on the public dashboard, or "" when the deploy publishes none."""
    base = (settings.SINGULARITY_PUBLIC_URL or "").rstrip("/")
    return f"{base}{path}" if base else ""


def proposal_link(rnd: Round) -> str:
    """The round's "Full proposal" link: /evolution/go/cycle:<id>/?proposal=<round> ("" with no dashboard)."""
    return _link(f"{cycle_path(rnd.cycle_id)}?proposal={rnd.number}")


def cycle_link(cycle: Cycle) -> str:
    """The cycle's link: /evolution/go/cycle:<id>/ ("" with no dashboard)."""
    return _link(cycle_path(cycle.pk))


# --- What the change is judged by -------------------------------------------------


def on_own_scale(spec: dict[str, Any], value: Any) -> Decimal | None:
    """A rated metric's 0..1 value back on its own scale; any other value as a Decimal; None when absent."""
    number = to_number(value)
    if number is None:
        return None
    if spec.get("kind") in ("judged", "reported") and (spec.get("scale") or spec.get("human")):
        return on_scale(spec, float(number))
    return number if isinstance(number, Decimal) else Decimal(repr(number))


def _shown(spec: dict[str, Any], value: Decimal, *, level: bool) -> str:
    """A metric value as the card shows it: money as $, ms as seconds, a level to two places, a target as declared."""
    if spec.get("unit") == "usd":
        return usd_text(value)
    suffix = ""
    if spec.get("unit") == "ms":
        value, suffix = value / 1000, " s"
    if level:
        return f"{value.quantize(Decimal('0.01'))}{suffix}"
    text = format(value.normalize(), "f")
    return ("0" if text in ("-0", "") else text) + suffix


def _window_grades(cycle: Cycle) -> list[Grade]:
    ids = []
    for value in (cycle.window or {}).get("runIds") or []:
        try:
            ids.append(uuid.UUID(str(value)))
        except ValueError:
            continue  # a custom window may name something other than a run id
    if not ids:
        return []
    return list(Grade.objects.filter(execution_id__in=ids, status=Grade.Status.GRADED))


def _period_values(window: dict[str, Any]) -> dict[str, Any]:
    """Period metrics a window() laid over its vector: {id: value} or [{id|metricId, value}]."""
    laid = window.get("metrics")
    if isinstance(laid, dict):
        return dict(laid)
    found = {}
    for item in laid or []:
        if isinstance(item, dict) and (item.get("id") or item.get("metricId")) is not None:
            found[str(item.get("id") or item.get("metricId"))] = item.get("value")
    return found


def metric_lines(cycle: Cycle, grades: list[Grade]) -> list[str]:
    """Each objective and guard at the level the cycle's window stands at.

    "🎯 Optimizing: accuracy ↑ at 0.60 (target 0.9)" — the window's vector
    (each metric's median, or mean where declared, over its graded runs,
    people's ratings standing over the judge's), a period value the window
    laid over it winning.
    """
    entity = cycle.entity
    terms = cycle.terms or entity.terms or {}
    people = people_values([g.execution_id for g in grades]) if grades else {}
    for grade in grades:
        grade.entity = entity
    laid = _period_values(cycle.window or {})
    lines = []
    for role in ("objective", "guard"):
        for metric_id, spec in specs(terms).items():
            if spec.get("role") != role:
                continue
            if metric_id in laid:
                value = laid[metric_id]
            else:
                value = aggregate(
                    (run_value(g, metric_id, people.get(str(g.execution_id), {})) for g in grades),
                    spec.get("aggregate") or "median",
                )
            shown = on_own_scale(spec, value)
            level = f"at {_shown(spec, shown, level=True)}" if shown is not None else "not measured in its window"
            target = on_own_scale(spec, spec.get("target"))
            bar = f" (target {_shown(spec, target, level=False)})" if target is not None else ""
            arrow = ARROW.get(spec.get("direction") or "max", "")
            lines.append(f"{ICON[role]}: {metric_id} {arrow} {level}{bar}")
    return lines


def check_words(cycle: Cycle) -> str:
    """What the pre-merge check will do before any merge ("" when the cycle froze nothing to check on)."""
    frozen = cycle.frozen or {}
    slots = frozen.get("slots") or []
    if frozen.get("mode") != "replay" or not slots:
        return ""
    trials = int((frozen.get("terms") or {}).get("trials") or 1)
    held = frozen.get("heldOut") or {}
    times = f" × {trials} trials" if trials > 1 else ""
    planned = power.planned_power(cycle.entity.terms or {}, frozen)
    can = f" — {planned['words']} —" if planned else ""
    return (
        f"a pre-merge check first replays the candidate and the incumbent on {len(slots)} frozen input"
        f"{'s' if len(slots) != 1 else ''}{times} (held-out {held.get('k', 0)} of {held.get('n', 0)}){can} before "
        "anyone may merge; then "
    )


def judged_by(cycle: Cycle) -> str:
    """The sentence saying what settles the change: the pre-merge check where there is one, then the watch."""
    return check_words(cycle) + watched_by(cycle)


def watched_by(cycle: Cycle) -> str:
    """The sentence saying what settles the change after its merge."""
    loop = (cycle.terms or cycle.entity.terms or {}).get("loop") or {}
    watch, trigger = loop.get("watch") or {}, loop.get("trigger") or {}
    runs = watch.get("windowRuns") or trigger.get("windowRuns") or 5
    if watch.get("mode") == "none":
        return "nothing after the merge (watch.mode: none): it ships unvalidated, by design"
    if (loop.get("preset") or "repair") == "repair":
        bad = watch.get("minFailures") or trigger.get("minFailures") or 2
        return f"the entity's next {runs} graded runs after the merge ({bad} bad reverts it)"
    return evolve.promise(cycle.terms or cycle.entity.terms or {})


# --- The entity's recent record ---------------------------------------------------


def pass_count(entity: Entity) -> str:
    """ "Recent runs: 3 of the last 10 graded passed." ("" with no graded run)."""
    recent = list(
        Grade.objects.filter(entity=entity, status=Grade.Status.GRADED, execution__loop_launched=False)
        .order_by("-graded_at", "-execution_id")
        .values_list("passed", flat=True)[:RECENT_RUNS]
    )
    if not recent:
        return ""
    passed = sum(1 for value in recent if value is True)
    return f"Recent runs: {passed} of the last {len(recent)} graded passed."


def shared_failure(entity: Entity, grades: list[Grade], *, now: datetime | None = None) -> str:
    """The window's failure category that most other entities hit in the last week, as a sentence ("" if none)."""
    categories = {g.failure_category for g in grades if g.failure_category}
    if not categories:
        return ""
    since = (now or timezone.now()) - timedelta(days=SHARED_DAYS)
    shared = (
        Grade.objects.filter(failure_category__in=categories, graded_at__gte=since, status=Grade.Status.GRADED)
        .exclude(entity=entity)
        .values("failure_category")
        .annotate(entities=Count("entity_id", distinct=True))
        .order_by("-entities", "failure_category")
        .first()
    )
    if shared is None:
        return ""
    n = shared["entities"]
    return (
        f"Shared failure: “{shared['failure_category']}” also hit {n} other "
        f"entit{'y' if n == 1 else 'ies'} in the last {SHARED_DAYS} days."
    )


# --- The cards ------------------------------------------------------------------


def _name(entity: Entity) -> str:
    return entity.name or entity.slug


def _title(text: str) -> str:
    return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1] + "…"


def decide_card(rnd: Round) -> dict[str, str]:
    """The decide card of a proposed round: {title, subject, subject_url, text}."""
    cycle = rnd.cycle
    entity = cycle.entity
    grades = _window_grades(cycle)
    method = ((cycle.terms or entity.terms or {}).get("evaluation") or {}).get("method")
    link = proposal_link(rnd)
    context = {
        "entity": _name(entity),
        "cycle": cycle,
        "round": rnd,
        "summary": rnd.summary.strip() or "(the proposer gave no summary)",
        "author": rnd.author or "the proposer",
        "judged_by": judged_by(cycle),
        "metrics": metric_lines(cycle, grades),
        "passes": "" if method == "none" else pass_count(entity),
        "shared": shared_failure(entity, grades),
        "spend": usd_text(cycle.spent_usd),
        "files": [file_change(f) for f in rnd.files or [] if isinstance(f, dict)],
        "link": link,
    }
    diffs = file_diffs(rnd)
    context["diffs"] = diffs
    context["diff_lines"], context["diff_more"] = excerpt(diffs)
    headline = rnd.summary.strip().splitlines()[0] if rnd.summary.strip() else "a proposal"
    return {
        "title": _title(f"{_name(entity)}: {headline}"),
        "subject": f"cycle {cycle.pk} · r{rnd.number}",
        "subject_url": link,
        "text": render_to_string("evolution/cards/decide.txt", context).strip(),
    }


def retry_card(rnd: Round) -> dict[str, str]:
    """The retry card of a failed round: what failed, the offending paths, a link to the cycle."""
    cycle = rnd.cycle
    gate = rnd.gate or {}
    paths = gate.get("refused") or (gate.get("paths") if gate.get("message") else None) or []
    link = cycle_link(cycle)
    context = {
        "entity": _name(cycle.entity),
        "cycle": cycle,
        "round": rnd,
        "error": rnd.error.strip() or "the round failed without saying why",
        "paths": [str(p) for p in paths],
        "spend": usd_text(cycle.spent_usd),
        "link": link,
    }
    return {
        "title": _title(f"{_name(cycle.entity)}: cycle {cycle.pk} · r{rnd.number} failed"),
        "subject": f"cycle {cycle.pk} · r{rnd.number}",
        "subject_url": link,
        "text": render_to_string("evolution/cards/retry.txt", context).strip(),
    }
