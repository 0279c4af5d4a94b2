"""Rating cards: grading asks a person to rate a run (seed 003, "Rating cards — evaluation.human.ask").

When a run's grading is booked, ``maybe_card`` decides by the entity's
``evaluation.human.ask`` whether a person is asked: ``never`` asks nobody,
``always`` asks for every graded live run, ``until-calibrated`` asks while
any judged ``human: true`` metric is not calibrated (and every time when the
entity has a ``reported`` metric), then only a ``spotCheck`` share chosen by
hashing the run id. Only entities with human-rated metrics are asked; a loop
replay never is.

A carded run waits: ``Execution.awaiting_rating_until`` is set with the
decision and is the card's deadline, so the run stays out of every observed
window (``observed``) until the answer lands or the deadline passes — one
clock. The card itself is opened after commit by a keyed task
(``rating:<run id>``): never twice, and ``open_missing_cards`` opens one a
lost task never did. The answer goes through ``grading.ratings.rate`` as the
person who gave it: hitl calls ``grading.ratings.on_rating_card``, which
sits by the door rather than here because the door books a grading and the
booking asks here. An expired card writes nothing and the judge's number
stands.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.template.loader import render_to_string
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerError

from grading.calibration import calibration
from grading.models import Execution, Grade, Rating
from grading.people import human_metrics, rubric_words, scale_of
from grading.run_view import as_text, expected_of, render_run_view, run_view
from hitl.actions import MAX_RATING_BUTTONS, open_card
from hitl.models import Card
from singularity.brain.defaults import EVALUATION
from singularity.queue import enqueue

log = logging.getLogger(__name__)

PRODUCER = "grading"
KIND = "rating"  # Card.Kind.RATING, as the registry keys it (a plain str)
TEMPLATE = "grading/cards/rating.txt"
#: The run's own summary on a card is cut here, and the card says so.
SUMMARY_CHARS = 1500
#: ... and its input here (a Telegram message holds 4,096 characters).
INPUT_CHARS = 600
#: A continuous scale (no step) is answered on a card to two decimals.
CONTINUOUS_STEP = Decimal("0.01")
SWEEP_BATCH = 500
#: The Celery task that opens a carded run's card (grading.tasks.cards), enqueued by name: it imports this module.
POST_CARD_TASK = "grading.tasks.cards.post_rating_card"


# --- Deciding -----------------------------------------------------------------


def card_key(execution_id: Any) -> str:
    """Return the card's idempotency key for a run: ``rating:<run id>``."""
    return f"rating:{execution_id}"


def human_terms(entity: Any) -> dict[str, Any]:
    """Return the resolved ``evaluation.human`` block, engine values filling any key it lacks."""
    engine = EVALUATION["human"]
    human = (entity.terms.get("evaluation") or {}).get("human") or {}
    return {**engine, **human}


#: What the spot check hashes before the run id, so it draws independently of the sampler (R4.19).
SPOT_CHECK_SALT = b"spot-check\0"


def in_spot_check(execution_id: Any, share: float) -> bool:
    """True when the run falls in the ``share`` spot-checked: SHA-256 of ``SPOT_CHECK_SALT`` and its id, first 8
    bytes, below share × 2⁶⁴.

    The same run id always decides the same. The salt keeps the draw independent of the sampler's (which hashes
    the bare id): without it only runs whose hash fell under ``sample.rate`` are graded, and of those the share
    under ``spotCheck`` is spotCheck / rate — every graded run once rate ≤ spotCheck.
    """
    digest = hashlib.sha256(SPOT_CHECK_SALT + str(execution_id).encode()).digest()
    return int.from_bytes(digest[:8], "big") < Decimal(str(share)) * 2**64


def decide(execution: Execution) -> tuple[bool, str]:
    """Return whether a person is asked to rate ``execution``, and why (in words)."""
    entity = execution.entity
    human = human_terms(entity)
    ask = human.get("ask") or "never"
    if ask == "never":
        return False, "evaluation.human.ask is never"
    if execution.loop_launched:
        return False, "a loop replay is never carded"
    if not entity.evaluation_enabled:
        return False, "grading is off"
    metrics = human_metrics(entity)
    if not metrics:
        return False, "no metric is rated by people"
    if ask == "always":
        return True, "evaluation.human.ask is always"
    if ask != "until-calibrated":
        return False, f"evaluation.human.ask {ask!r} is not never, always or until-calibrated"
    reported = [metric_id for metric_id, spec in metrics.items() if spec.get("kind") == "reported"]
    if reported:
        return True, f"reported metric {reported[0]!r}: only people rate it"
    low = [m.metric_id for m in calibration(entity) if m.status != "ok"]
    if low:
        return True, f"metric {low[0]!r} is not calibrated"
    share = float(human.get("spotCheck") or 0)
    if in_spot_check(execution.pk, share):
        return True, f"calibrated; in the {share:g} spot check"
    return False, f"calibrated; outside the {share:g} spot check"


def maybe_card(grade: Grade) -> bool:
    """Ask a person to rate the run of a booked ``grade`` when ``evaluation.human.ask`` says so; return whether asked.

    Called where the grading is booked, inside its transaction: the run is
    set waiting (``awaiting_rating_until``, the card's deadline) and the
    card is opened after commit by the keyed task. A run already carded is
    not carded again; a booking made by a person's rating asks nobody.
    """
    if grade.reason == "rated":
        return False
    execution = grade.execution
    carded, why = decide(execution)
    if not carded:
        return False
    if Card.objects.filter(key=card_key(execution.pk)).exists():
        return True
    until = timezone.now() + timedelta(hours=float(human_terms(execution.entity).get("expiresHours") or 0))
    if Execution.objects.filter(pk=execution.pk, awaiting_rating_until__isnull=True).update(
        awaiting_rating_until=until
    ):
        execution.awaiting_rating_until = until
    log.info("run %s of %s carded for a rating: %s", execution.pk, execution.entity, why)
    transaction.on_commit(lambda: _enqueue(execution.pk))
    return True


def maybe_card_many(grades: Iterable[Grade]) -> int:
    """Ask for ratings of a batch of booked grades as ``maybe_card`` does for each; return how many runs were carded.

    No query at all for an entity that asks nobody (``ask: never``, the default).
    """
    return sum(maybe_card(grade) for grade in grades)


def _enqueue(execution_id: Any) -> None:
    """Enqueue the card's opening; when the broker is down the periodic sweep opens it instead."""
    try:
        enqueue(POST_CARD_TASK, str(execution_id))
    except BrokerError as exc:
        log.warning("could not enqueue the rating card of run %s (%s); the sweep will open it", execution_id, exc)


# --- Waiting ------------------------------------------------------------------


def observed(queryset: QuerySet[Any], *, now: datetime | None = None) -> QuerySet[Any]:
    """Return ``queryset`` (of executions, or of grades) without the runs still waiting for a rating.

    A run waits while its card's deadline is ahead and nobody has rated it;
    once rated, or past the deadline, it is observed with whatever number stands.
    """
    now = now or timezone.now()
    prefix = "execution__" if queryset.model is Grade else ""
    run = OuterRef("execution_id" if prefix else "pk")
    return queryset.filter(
        Q(**{f"{prefix}awaiting_rating_until__isnull": True})
        | Q(**{f"{prefix}awaiting_rating_until__lte": now})
        | Q(Exists(Rating.objects.filter(execution_id=run)))
    )


def waiting_until(execution: Execution, *, now: datetime | None = None) -> datetime | None:
    """Return until when the run waits for a rating, or None when it does not (any more)."""
    until = execution.awaiting_rating_until
    if until is None or until <= (now or timezone.now()):
        return None
    if Rating.objects.filter(execution=execution).exists():
        return None
    return until


# --- The card -----------------------------------------------------------------


def _plain(number: Decimal) -> str:
    """Decimal text without exponent or trailing zeros."""
    text = format(number.normalize(), "f")
    return "0" if text in ("-0", "") else text


def _json_number(number: Decimal) -> int | float:
    return int(number) if number == number.to_integral_value() else float(number)


def steps(scale: dict[str, Any]) -> list[Decimal] | None:
    """Return every answer on the scale from min to max, or None when it is continuous or has too many to list."""
    if not scale.get("step"):
        return None
    low, high, step = (Decimal(str(scale[k])) for k in ("min", "max", "step"))
    if step <= 0 or (high - low) / step + 1 > MAX_RATING_BUTTONS:
        return None
    values, value = [], low
    while value <= high:
        values.append(value)
        value += step
    return values


def metric_label(metric_id: str) -> str:
    """Return a metric's name as a person reads it: "layout_fit" → "Layout fit"."""
    return metric_id.replace("_", " ").replace("-", " ").strip().capitalize() or metric_id


def options_for(metrics: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Return the card's options: a button per answer for one metric on at most eight steps, else a form.

    Buttons are ``[{value, label, metric_id}]`` ("4 · Good"); a form is
    ``[{metric_id, label, min, max, step, labels}]``.
    """
    if len(metrics) == 1:
        [(metric_id, spec)] = metrics.items()
        scale = scale_of(spec)
        answers = steps(scale)
        if answers is not None:
            buttons = []
            for value in answers:
                words = rubric_words(scale, value)
                label = f"{_plain(value)} · {words}" if words else _plain(value)
                buttons.append({"value": _plain(value), "label": label, "metric_id": metric_id})
            return buttons
    form = []
    for metric_id, spec in metrics.items():
        scale = scale_of(spec)
        step = Decimal(str(scale["step"])) if scale.get("step") else CONTINUOUS_STEP
        form.append(
            {
                "metric_id": metric_id,
                "label": metric_label(metric_id),
                "min": _json_number(Decimal(str(scale["min"]))),
                "max": _json_number(Decimal(str(scale["max"]))),
                "step": _json_number(step),
                "labels": dict(scale.get("labels") or {}),
            }
        )
    return form


def summary_of(execution: Execution) -> str:
    """Return the run's own summary: a workflow's or tick's result, a pipeline's output, or why it failed."""
    output = execution.output
    if isinstance(output, dict) and isinstance(output.get("result"), str):
        text = output["result"]
    elif isinstance(output, str):
        text = output
    elif output is None or output == {}:
        text = ""
    else:
        text = json.dumps(output, ensure_ascii=False, indent=2)
    if execution.status == Execution.Status.FAILED:
        text = f"The run failed: {execution.error}".strip() + (f"\n\n{text}" if text else "")
    return text.strip()


def episode_shape(execution: Execution) -> dict[str, Any]:
    """Return an episode's shape — its turns and how long it took — never the dialog's words."""
    output = execution.output if isinstance(execution.output, dict) else {}
    turns = output.get("turns")
    if isinstance(turns, list):
        turns = len(turns)
    if not isinstance(turns, int) or isinstance(turns, bool):
        turns = None
    return {"turns": turns, "duration_ms": execution.duration_ms}


def run_link(execution: Execution) -> str:
    """Return the whole run's permanent short link, ``/go/run:<id>`` (R4.23; absolute on SINGULARITY_PUBLIC_URL
    when set): it answers with the run's page."""
    from grading.views.go import short_link

    base = (settings.SINGULARITY_PUBLIC_URL or "").rstrip("/")
    return f"{base}{short_link(execution)}"


def _rubric(spec: dict[str, Any]) -> dict[str, Any]:
    scale = scale_of(spec)
    low, high = Decimal(str(scale["min"])), Decimal(str(scale["max"]))
    return {
        "range": f"{_plain(low)}–{_plain(high)}",
        "step": _plain(Decimal(str(scale["step"]))) if scale.get("step") else "",
        "labels": [(str(key), str(words)) for key, words in (scale.get("labels") or {}).items()],
    }


def card_context(execution: Execution, metrics: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Return what the card's template needs: the summary (cut, saying so) or an episode's shape, link, rubrics."""
    is_episode = execution.run_kind == Execution.RunKind.EPISODE
    summary = "" if is_episode else summary_of(execution)
    cut = len(summary) > SUMMARY_CHARS
    expected, run_input = (None, None) if is_episode else expected_of(execution.input)
    return {
        # What the run read (cut at INPUT_CHARS, saying so) and the answer expected of it: never an episode's.
        "input_text": as_text(run_input, INPUT_CHARS) if run_input is not None else "",
        "expected_text": as_text(expected, INPUT_CHARS) if expected is not None else "",
        "run": execution,
        "entity": execution.entity,
        "is_episode": is_episode,
        "shape": episode_shape(execution) if is_episode else None,
        "duration_s": _plain(Decimal(execution.duration_ms) / 1000) if execution.duration_ms is not None else "",
        "summary": summary[:SUMMARY_CHARS],
        "cut": cut,
        "summary_chars": f"{SUMMARY_CHARS:,}",
        "link": run_link(execution),
        "metrics": [
            {
                "id": metric_id,
                "label": metric_label(metric_id),
                "criterion": spec.get("criterion") or "",
                **_rubric(spec),
            }
            for metric_id, spec in metrics.items()
        ],
    }


def post_card(execution_id: Any) -> Card | None:
    """Open the rating card of a carded run and return it; the existing one when opened before.

    Returns None when the run is gone or no longer waits (never carded, or
    its deadline passed before the card could be opened).
    """
    existing = Card.objects.filter(key=card_key(execution_id)).first()
    if existing is not None:
        return existing
    execution = Execution.objects.select_related("entity").filter(pk=execution_id).first()
    if execution is None:
        return None
    until = execution.awaiting_rating_until
    if until is None or until <= timezone.now():
        return None
    # By id: Postgres keeps no key order in JSON, and a typed reply on a form answers in the card's order.
    metrics = dict(sorted(human_metrics(execution.entity).items()))
    if not metrics:
        return None
    entity = execution.entity
    short = str(execution.pk)[:8]
    return open_card(
        producer=PRODUCER,
        kind=KIND,
        key=card_key(execution.pk),
        title=f"Rate {entity.name or entity.slug}: {execution.run_kind} {short}"[:200],
        subject=f"{execution.run_kind} {short} of {entity}"[:200],
        subject_url=execution.get_absolute_url(),
        expires_at=until,
        options=options_for(metrics),
        template=TEMPLATE,
        context=card_context(execution, metrics),
        payload={"run_kind": execution.run_kind, "run_id": str(execution.pk), "entity": str(entity)},
    )


def open_missing_cards(*, now: datetime | None = None) -> int:
    """Open the card of every waiting run whose opening task was lost; return how many were opened.

    Running it twice opens nothing twice: each card is keyed by its run.
    """
    now = now or timezone.now()
    waiting = list(
        Execution.objects.filter(awaiting_rating_until__gt=now)
        .order_by("awaiting_rating_until")
        .values_list("pk", flat=True)[:SWEEP_BATCH]
    )
    keys = {card_key(pk): pk for pk in waiting}
    opened = set(Card.objects.filter(key__in=list(keys)).values_list("key", flat=True))
    return sum(post_card(pk) is not None for key, pk in keys.items() if key not in opened)


# --- The card's page ------------------------------------------------------------


DETAIL_TEMPLATE = "grading/cards/rating_detail.html"


def rating_card_detail(card: Card) -> str:
    """What a rating card's page shows in place of its text: the run as Rate runs shows it (input, output, the
    expected answer, the judge's verdicts) and each metric's rubric; "" when the run is gone (the text stays)."""
    run = Execution.objects.select_related("entity", "grade").filter(pk=(card.payload or {}).get("run_id")).first()
    if run is None:
        return ""
    metrics = dict(sorted(human_metrics(run.entity).items()))
    return render_to_string(
        DETAIL_TEMPLATE,
        {
            "run": run,
            "is_episode": run.run_kind == Execution.RunKind.EPISODE,
            "view_html": "" if run.run_kind == Execution.RunKind.EPISODE else render_run_view(run_view(run)),
            "metrics": [
                {"label": metric_label(m), "criterion": spec.get("criterion") or "", **_rubric(spec)}
                for m, spec in metrics.items()
            ],
        },
    )
