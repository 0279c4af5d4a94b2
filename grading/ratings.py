"""People's ratings of runs: the one door every writer goes through (seed 003, "Ratings from people").

The rating card, the dashboard's Rate runs page and the REST API all call
``rate()``. It validates the whole request before writing anything (a
refused rating books nothing), answers a retried idempotency key with the
stored answer and writes nothing, keeps one rating per person per metric per
run (a later one replaces it), and books the judge on a run the sampler
passed by. Several people are read by their median (``people_value``).
"""

from __future__ import annotations

import statistics
import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from grading.models import Entity, Execution, Grade, Rating, RatingSubmission
from singularity.brain.defaults import DEFAULT_HUMAN_SCALE

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


class _Refusal(Exception):
    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code, self.detail = code, detail


def human_rated(spec: dict[str, Any] | None) -> bool:
    """True for a metric people rate: ``kind: reported``, or ``kind: judged`` with ``human: true``."""
    if not spec:
        return False
    return spec.get("kind") == "reported" or (spec.get("kind") == "judged" and spec.get("human") is True)


def human_metrics(entity: Entity) -> dict[str, dict[str, Any]]:
    """Return the entity's human-rated metrics by id, in declaration order."""
    metrics = (entity.terms.get("evaluation") or {}).get("metrics") or {}
    return {metric_id: spec for metric_id, spec in metrics.items() if human_rated(spec)}


def scale_of(spec: dict[str, Any]) -> dict[str, Any]:
    """Return the scale a person rates ``spec`` on: its own, or the engine's 1–5 rubric when it declares none."""
    return dict(spec.get("scale") or DEFAULT_HUMAN_SCALE)


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
        raise _Refusal("invalid", "idempotency_key: required")
    if len(idempotency_key) > MAX_KEY_CHARS:
        raise _Refusal("invalid", f"idempotency_key: at most {MAX_KEY_CHARS} characters")
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
            raise _Refusal("invalid", f"ratings[{index}]: expected an object with metric_id, value and note")
        metric_id = item.get("metric_id", item.get("metricId"))
        if not isinstance(metric_id, str) or not metric_id:
            raise _Refusal("invalid", f"ratings[{index}].metric_id: required")
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
        value, normalized = check_value(metric_id, metrics[metric_id], item.get("value"))
        rows.append((metric_id, value, normalized, note.strip()))
    return execution, rows


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
            from grading.booking import book_for_rating

            book_for_rating(execution)
        answer = RateAnswer(
            ok=True, code="ok", detail=f"{len(rows)} rating(s) recorded on {execution}", written=len(rows)
        )
        submission.answer = answer.as_dict()
        submission.save(update_fields=["answer"])
    return answer


def people_value(execution: Execution, metric_id: str) -> float | None:
    """Return people's number for one metric of one run on 0..1: the median of their ratings; None if nobody rated."""
    values = list(Rating.objects.filter(execution=execution, metric_id=metric_id).values_list("normalized", flat=True))
    return statistics.median(values) if values else None


def people_values(execution_ids: Iterable[Any]) -> dict[str, dict[str, float]]:
    """Return people's medians for many runs in one query: ``{str(execution_id): {metric_id: median on 0..1}}``."""
    collected: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    rows = Rating.objects.filter(execution_id__in=list(execution_ids)).values_list(
        "execution_id", "metric_id", "normalized"
    )
    for execution_id, metric_id, normalized in rows:
        collected[str(execution_id)][metric_id].append(normalized)
    return {
        run: {metric: statistics.median(values) for metric, values in by_metric.items()}
        for run, by_metric in collected.items()
    }


def on_scale(spec: dict[str, Any], normalized: float | None) -> Decimal | None:
    """Return a 0..1 value back on the metric's own scale (for showing a median as people read it)."""
    if normalized is None:
        return None
    scale = scale_of(spec)
    low, high = Decimal(str(scale["min"])), Decimal(str(scale["max"]))
    shown = low + (high - low) * Decimal(repr(float(normalized)))
    return shown.quantize(Decimal("0.01")).normalize() if shown != shown.to_integral_value() else shown.quantize(1)
