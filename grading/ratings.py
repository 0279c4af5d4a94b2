"""People's ratings of runs: the one door every writer goes through (seed 003, "Ratings from people").

The rating card (``on_rating_card``, below), the dashboard's Rate runs page
and the REST API all call ``rate()``. It validates the whole request before
writing anything (a refused rating books nothing), answers a retried
idempotency key with the stored answer and writes nothing, keeps one rating
per person per metric per run (a later one replaces it), and books the judge
on a run the sampler passed by. Several people are read by their median
(``people_value``).

People's numbers are read in ``grading.people``, below the booking (the
metric vector and calibration read them there); they are re-exported here
for the door's callers.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from grading.booking import book_for_rating
from grading.models import Execution, Grade, Rating, RatingSubmission
from grading.people import human_metrics as human_metrics
from grading.people import human_rated as human_rated
from grading.people import on_scale as on_scale
from grading.people import people_value as people_value
from grading.people import people_values as people_values
from grading.people import scale_of as scale_of
from hitl.models import Card
from singularity.nul import nul_refusal

#: The op's answer codes: gone → not_found, not gradable → precondition, off-scale → invalid, the rest → refused.
CODES = ("ok", "not_found", "precondition", "invalid", "refused")
MAX_NOTE_CHARS = 4000
MAX_KEY_CHARS = 200
#: Rating.value keeps six decimals; a finer value would be rounded by the database.
VALUE_PLACES = 6


@dataclass(frozen=True)
class RateAnswer:
    """What the door answered: ``code`` is one of ``CODES``; ``written`` counts the ratings stored."""

    ok: bool
    code: str
    detail: str
    written: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class RatingRefused(Exception):
    """The rating door refused a card's answer; hitl keeps the message on the card."""


class _Refusal(Exception):
    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code, self.detail = code, detail


def _number(value: Any) -> Decimal | None:
    """The exact decimal of a JSON number or numeric string (a float through its shortest text); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        value = repr(value)
    if isinstance(value, int | str | Decimal):
        try:
            number = Decimal(str(value).strip())
        except InvalidOperation:
            return None
        return number if number.is_finite() else None
    return None


def check_value(metric_id: str, spec: dict[str, Any], value: Any) -> tuple[Decimal, float]:
    """Return ``value`` as given (exact) and normalized to 0..1, or raise ``_Refusal("invalid")`` naming the metric.

    A value outside [min, max], or between the scale's steps, is off the scale.
    """
    scale = scale_of(spec)
    low, high = Decimal(str(scale["min"])), Decimal(str(scale["max"]))
    number = _number(value)
    where = f"metric {metric_id!r}"
    if number is None:
        raise _Refusal("invalid", f"{where}: value {value!r} is not a number")
    if number < low or number > high:
        raise _Refusal("invalid", f"{where}: value {value} is off the scale {low}..{high}")
    step = scale.get("step")
    if step and (number - low) % Decimal(str(step)) != 0:
        raise _Refusal("invalid", f"{where}: value {value} is between the steps of {low}..{high} step {step}")
    if number != round(number, VALUE_PLACES):
        raise _Refusal("invalid", f"{where}: value {value} has more than {VALUE_PLACES} decimals")
    normalized = float((number - low) / (high - low)) if high != low else 0.0
    return number, normalized


def _find_run(run_kind: str, run_id: str) -> Execution:
    try:
        pk = uuid.UUID(str(run_id))
    except ValueError:
        raise _Refusal("not_found", f"run {run_kind}:{run_id} not found") from None
    execution = Execution.objects.select_related("entity").filter(pk=pk, run_kind=run_kind).first()
    if execution is None:
        raise _Refusal("not_found", f"run {run_kind}:{run_id} not found")
    return execution


def _check_request(
    *, actor_user: Any, is_agent: bool, run_kind: str, run_id: str, idempotency_key: str, ratings: list[dict]
) -> tuple[Execution, list[tuple[str, Decimal, float, str]]]:
    """Validate the whole request; return the run and the checked rows, or raise ``_Refusal``."""
    if is_agent:
        raise _Refusal("refused", "unauthorized_responder: only a person rates")
    if actor_user is None or not getattr(actor_user, "is_authenticated", False):
        raise _Refusal("refused", "unauthorized_responder: only a signed-in person rates")
    if not isinstance(idempotency_key, str) or not idempotency_key.strip():
        raise _Refusal("invalid", "idempotencyKey: required")
    if refusal := nul_refusal("idempotencyKey", idempotency_key):  # PostgreSQL cannot hold it, whatever the door
        raise _Refusal("invalid", refusal)
    if len(idempotency_key) > MAX_KEY_CHARS:
        raise _Refusal("invalid", f"idempotencyKey: at most {MAX_KEY_CHARS} characters")
    if not isinstance(ratings, list) or not ratings:
        raise _Refusal("invalid", "ratings: at least one rating is required")
    execution = _find_run(run_kind, run_id)
    entity = execution.entity
    if execution.loop_launched:
        raise _Refusal("refused", f"run {run_kind}:{run_id} is a loop replay: nobody rates a replay")
    if not execution.terminal:
        raise _Refusal("precondition", f"run {run_kind}:{run_id} is still running: rate it once it has ended")
    if not entity.evaluation_enabled:
        raise _Refusal("precondition", f"entity {entity}: grading is off (evaluation.enabled: false)")
    metrics = (entity.terms.get("evaluation") or {}).get("metrics") or {}
    rows, seen = [], set()
    for index, item in enumerate(ratings):
        if not isinstance(item, dict):
            raise _Refusal("invalid", f"ratings[{index}]: expected an object with metricId, value and note")
        metric_id = item.get("metric_id", item.get("metricId"))
        if not isinstance(metric_id, str) or not metric_id:
            raise _Refusal("invalid", f"ratings[{index}].metricId: required")
        if metric_id not in metrics:
            raise _Refusal("invalid", f"ratings[{index}]: entity {entity} has no metric {metric_id!r}")
        if not human_rated(metrics[metric_id]):
            raise _Refusal(
                "invalid",
                f"ratings[{index}]: metric {metric_id!r} of entity {entity} is not rated by people "
                "(only kind: reported, or kind: judged with human: true)",
            )
        if metric_id in seen:
            raise _Refusal("invalid", f"ratings[{index}]: metric {metric_id!r} is rated twice in one request")
        seen.add(metric_id)
        note = item.get("note") or ""
        if not isinstance(note, str) or len(note) > MAX_NOTE_CHARS:
            raise _Refusal("invalid", f"ratings[{index}].note: text of at most {MAX_NOTE_CHARS} characters")
        if refusal := nul_refusal(f"ratings[{index}].note", note):
            raise _Refusal("invalid", refusal)
        value, normalized = check_value(metric_id, metrics[metric_id], item.get("value"))
        rows.append((metric_id, value, normalized, note.strip()))
    return execution, rows


def check_relayed(
    *, actor_user: Any, run_kind: str, run_id: str, idempotency_key: str, ratings: list[dict]
) -> RateAnswer | tuple[Execution, list[tuple[str, Decimal, float, str]]]:
    """The door's checks of a rating an agent relays for ``actor_user`` (``grading.rate_ask``), writing nothing:
    the run and the checked rows, or the door's refusal (the same codes a person's rating gets)."""
    try:
        return _check_request(
            actor_user=actor_user,
            is_agent=False,
            run_kind=run_kind,
            run_id=run_id,
            idempotency_key=idempotency_key,
            ratings=ratings,
        )
    except _Refusal as refusal:
        return RateAnswer(ok=False, code=refusal.code, detail=refusal.detail)


def rate(
    *,
    actor_user: Any,
    is_agent: bool,
    run_kind: str,
    run_id: str,
    idempotency_key: str,
    ratings: list[dict],
) -> RateAnswer:
    """Record a person's ratings of one run (the op eval.rate); return the door's answer.

    ``ratings`` is ``[{"metric_id", "value", "note"}]`` with values on each
    metric's own scale. Nothing is written unless the whole request is valid.
    A retry with the same ``idempotency_key`` (per person) writes nothing and
    returns the answer stored the first time. A run with no grade booked yet
    (the sampler passed it by) gets its grading booked, once.
    """
    try:
        execution, rows = _check_request(
            actor_user=actor_user,
            is_agent=is_agent,
            run_kind=run_kind,
            run_id=run_id,
            idempotency_key=idempotency_key,
            ratings=ratings,
        )
    except _Refusal as refusal:
        return RateAnswer(ok=False, code=refusal.code, detail=refusal.detail)

    with transaction.atomic():
        # One rater at a time per run, so two first ratings of an unsampled run book it once.
        Execution.objects.select_for_update().filter(pk=execution.pk).first()
        try:
            with transaction.atomic():
                submission = RatingSubmission.objects.create(
                    user=actor_user, idempotency_key=idempotency_key, execution=execution
                )
        except IntegrityError:
            stored = RatingSubmission.objects.get(user=actor_user, idempotency_key=idempotency_key)
            return RateAnswer(**stored.answer)
        now = timezone.now()
        for metric_id, value, normalized, note in rows:
            Rating.objects.update_or_create(
                execution=execution,
                metric_id=metric_id,
                user=actor_user,
                defaults={"value": value, "normalized": normalized, "note": note, "updated_at": now},
                create_defaults={
                    "value": value,
                    "normalized": normalized,
                    "note": note,
                    "created_at": now,
                    "updated_at": now,
                },
            )
        if not Grade.objects.filter(execution=execution).exists():
            book_for_rating(execution)
        answer = RateAnswer(
            ok=True, code="ok", detail=f"{len(rows)} rating(s) recorded on {execution}", written=len(rows)
        )
        submission.answer = answer.as_dict()
        submission.save(update_fields=["answer"])
    return answer


# --- The rating card's answer ---------------------------------------------------


def on_rating_card(card: Card) -> None:
    """Take a closed rating card: an answer is rated through the door as its person; an expiry writes nothing.

    Either way the run stops waiting. Raises ``RatingRefused`` (kept on the
    card by hitl, the wait left as it was) when the door refuses the answer.
    """
    run_id, run_kind = card.payload.get("run_id"), card.payload.get("run_kind")
    Execution.objects.filter(pk=run_id).update(awaiting_rating_until=None)
    if card.status != Card.Status.ANSWERED:
        return
    answer = card.answer if isinstance(card.answer, dict) else {}
    note = str(answer.get("note") or "")
    values = answer.get("values") or {}
    ratings = [{"metric_id": metric_id, "value": value, "note": note} for metric_id, value in values.items()]
    result = rate(
        actor_user=card.responded_by,
        is_agent=False,
        run_kind=str(run_kind),
        run_id=str(run_id),
        idempotency_key=f"card:{card.pk}",
        ratings=ratings,
    )
    if not result.ok:
        raise RatingRefused(f"the rating of {run_kind}:{run_id} was refused ({result.code}): {result.detail}")
