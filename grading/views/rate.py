"""Rate runs: the newest runs with the judge and people side by side, and the viewer's own rating.

The rating is given or changed inline with HTMX; every form also works without
JavaScript (a POST, then a redirect back). Every rating goes through
``grading.ratings.rate`` — the one door.
"""

from __future__ import annotations

import json
import statistics
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.db.models import BooleanField, Exists, F, Field, Func, OuterRef, Q, QuerySet, Value
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.middleware.csrf import get_token
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.formats import localize
from django.utils.safestring import SafeString, mark_safe
from django.utils.timezone import template_localtime
from django.views.decorators.http import require_http_methods

from grading.calibration import calibration, calibration_many
from grading.models import Entity, Execution, Grade, RateSkip, Rating
from grading.people import human_rated, rubric_words
from grading.ratings import human_metrics, rate, scale_of
from grading.run_view import render_run_view, run_view
from grading.views.rate_html import (
    calibrations_html,
    esc,
    metric_nav_html,
    nav_html,
    rate_row_html,
    rate_rows_html,
    waiting_html,
)
from grading.views.values import _decimal, _plain, _uuid, rated_on_scale

#: Rate runs shows at most this many of the newest terminal runs.
RATE_RUNS = 30
#: A scale with at most this many steps is rated with one button per answer.
MAX_BUTTONS = 8


@dataclass
class RateCell:
    """One human-rated metric of one run on Rate runs: the judge's, people's and the viewer's own numbers."""

    metric_id: str
    spec: dict[str, Any]
    judge: str
    people: str
    people_count: int
    mine: Rating | None
    choices: list[tuple[str, str]]
    scale: dict[str, Any]
    key: str = field(default_factory=lambda: uuid.uuid4().hex)
    #: Who rated it and what, oldest first: (their name, the value on the scale, their note).
    given_by: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def mine_value(self) -> str:
        return _plain(self.mine.value) if self.mine else ""

    @property
    def buttons(self) -> list[tuple[str, str, bool]]:
        """(value, label, whether it is the viewer's own rating) per step of ``choices``."""
        mine = self.mine_value
        return [(value, label, value == mine) for value, label in self.choices]

    @property
    def buttons_html(self) -> SafeString:
        """``buttons`` as the row's submit buttons, each value escaped as ``format_html`` escapes it (built here: a
        template loop costs more than the row's rest)."""
        return mark_safe(  # noqa: S308 - ``esc``
            "".join(
                f'<button type="submit" name="value" value="{esc(value)}" class="{"chosen" if on else "secondary"}" '
                f'aria-pressed="{"true" if on else "false"}">{esc(label)}</button>'
                for value, label, on in self.buttons
            )
        )

    @property
    def range(self) -> str:
        """``<kind> · <min>..<max>``, as the template would render the three (localized)."""
        return f"{self.spec.get('kind', '')} · {localize(self.scale.get('min', ''))}..{localize(self.scale.get('max', ''))}"


@dataclass
class RateRow:
    """One run on Rate runs; ``graded`` is False for a run with no judge's numbers (e.g. the sampler passed it by)."""

    run: Execution
    cells: list[RateCell]
    graded: bool
    answer: dict[str, Any] | None = None
    #: What the row's header shows of the run, as the template would render it (``rate_rows``).
    head: dict[str, str] = field(default_factory=dict)
    #: The run itself — input, output, expected answer, the judge's verdicts — drawn (``grading.run_view``).
    view_html: str = ""


def scale_choices(scale: dict[str, Any]) -> list[tuple[str, str]]:
    """Return (value, label) per step when the scale has at most ``MAX_BUTTONS`` steps, else [] (a number input)."""
    step = _decimal(scale.get("step"))
    low, high = _decimal(scale["min"]), _decimal(scale["max"])
    if not step or low is None or high is None or (high - low) / step + 1 > MAX_BUTTONS:
        return []
    choices, value = [], low
    while value <= high:
        words = rubric_words(scale, value)
        choices.append((_plain(value), f"{_plain(value)} · {words}" if words else _plain(value)))
        value += step
    return choices


def rateable_entities(entity: Entity | None = None) -> list[Entity]:
    """Entities with at least one human-rated metric and grading on, with what Rate runs reads of them
    (``RATE_READ``) and their terms (``rateable`` and then their terms: one more statement); any other field
    is read when asked for."""
    return with_terms(rateable(entity))


#: What Rate runs reads of an entity besides its terms (and only of the page's): the filters' links, a row's
#: header (a link and a name). The fleet's rateable ones are read with these alone.
RATE_READ = ("kind", "target_kind", "slug", "name")


def rateable(entity: Entity | None = None, *, metrics: bool = False) -> list[Entity]:
    """The entities ``rateable_entities`` answers, by kind and id, without their terms (a fleet's resolved terms
    are kilobytes an entity; Rate runs reads them for the entities on its page only, ``with_terms``).

    On Postgres one statement on the ``rateable`` column the database keeps from the terms (``RATED_PATH``),
    so no entity's terms are read, not even in the database. Elsewhere two: every entity's
    ``evaluation.metrics`` block alone, then the rateable ones. ``metrics`` hands each what ``rated_metrics``
    reads, in the same statement, so that it then reads nothing: on Postgres the ids of its rated metrics, which
    the database keeps (``Entity.rated_metric_ids``: a fleet's blocks are kilobytes each, issue 37); elsewhere its
    ``evaluation.metrics`` block (``metrics_block``).
    """
    entities = Entity.objects.filter(evaluation_enabled=True, load_error="")
    if entity is not None:
        entities = entities.filter(pk=entity.pk)
    if connection.vendor == "postgresql":
        read = entities.filter(rateable=True).only(*RATE_READ).order_by("kind", "slug")
        if metrics:
            read = read.annotate(rated_ids=F("rated_metric_ids"))
        return list(read)
    blocks = dict(entities.values_list("pk", "terms__evaluation__metrics"))
    wanted = [pk for pk, block in blocks.items() if isinstance(block, dict) and any(map(_rated_spec, block.values()))]
    if not wanted:
        return []
    found = list(entities.filter(pk__in=wanted).only(*RATE_READ).order_by("kind", "slug"))
    if metrics:
        for e in found:
            e.metrics_block = blocks[e.pk]  # type: ignore[attr-defined]
    return found


def _rated_spec(spec: Any) -> bool:
    """``human_rated`` of one spec of a metrics block; a spec that is not an object is no metric (as in SQL)."""
    return isinstance(spec, dict) and human_rated(spec)


def with_terms(entities: list[Entity]) -> list[Entity]:
    """``entities`` (read without their terms) with their terms, read in one statement (none for none)."""
    if entities:
        terms = dict(Entity.objects.filter(pk__in=[e.pk for e in entities]).values_list("pk", "terms"))
        for e in entities:
            e.terms = terms[e.pk]
    return entities


def rate_rows(user: Any, runs: list[Execution], *, metric: str = "") -> list[RateRow]:
    """Build the Rate runs rows for ``runs``: one query, the ratings of the runs with who gave them (people's
    medians and counts, who rated what, and the viewer's own ratings among them). ``metric`` keeps that metric's
    cells alone.

    What a row's cells show of a metric — its buttons, and a number on its scale — is worked out once a distinct
    spec (``_Specs``): a fleet's entities share their metrics' specs, and a page's runs few values.
    """
    ids = [run.pk for run in runs]
    given: dict[tuple[str, str], list[float]] = {}
    mine: dict[tuple[str, str], Rating] = {}
    by: dict[tuple[str, str], list[Rating]] = {}
    for rating in Rating.objects.filter(execution_id__in=ids).select_related("user").order_by("created_at", "pk"):
        key = (str(rating.execution_id), rating.metric_id)
        given.setdefault(key, []).append(rating.normalized)
        by.setdefault(key, []).append(rating)
        if rating.user_id == user.pk:
            mine[key] = rating
    people = {key: statistics.median(values) for key, values in given.items()}
    rows = []
    rate_url = reverse("grading:rate")
    skip_url = reverse("grading:rate-skip")
    run_url = _run_url()
    entity_urls: dict[int, str] = {}
    rated: dict[int, list[tuple[str, dict[str, Any], str | None, dict[str, Any], list[tuple[str, str]]]]] = {}
    specs = _Specs()
    for run in runs:
        entity = run.entity
        if entity.pk not in entity_urls:
            entity_urls[entity.pk] = entity.get_absolute_url()
            rated[entity.pk] = [
                (metric_id, spec, key, scale_of(spec), specs.choices(key, spec))
                for metric_id, spec in human_metrics(entity).items()
                if not metric or metric_id == metric
                for key in (specs.key(spec),)
            ]
        ended = template_localtime(run.completed_at)
        head = {
            "entity_url": entity_urls[entity.pk],
            "entity_label": entity.name or entity.slug,
            "run_url": run_url(run.id),
            "short_id": str(run.id)[:8],
            "ended_iso": ended.isoformat() if ended else "",  # what date_format(ended, "c") writes
            "ended_title": str(localize(ended)),
            "rate_url": rate_url,
            "skip_url": skip_url,
        }
        grade = getattr(run, "grade", None) if _has_grade(run) else None
        vector = (grade.metrics or {}) if grade and grade.status == Grade.Status.GRADED else {}
        run_id = str(run.pk)
        cells = []
        for metric_id, spec, key, scale, choices in rated[entity.pk]:
            judge = specs.shown(key, spec, vector.get(metric_id)) if spec.get("kind") == "judged" else ""
            given_here = given.get((run_id, metric_id))
            cells.append(
                RateCell(
                    metric_id=metric_id,
                    spec=spec,
                    judge=judge,
                    people=specs.shown(key, spec, people.get((run_id, metric_id))),
                    people_count=len(given_here) if given_here else 0,
                    mine=mine.get((run_id, metric_id)),
                    choices=choices,
                    scale=scale,
                    given_by=[
                        (r.user.get_username(), specs.shown(key, spec, r.normalized), r.note)
                        for r in by.get((run_id, metric_id), ())
                    ],
                )
            )
        view = render_run_view(run_view(run, grade if _has_grade(run) else None))
        rows.append(RateRow(run=run, cells=cells, graded=bool(vector), head=head, view_html=view))
    return rows


class _Specs:
    """A page's metric specs by their JSON text: a spec's buttons (``scale_choices`` of its scale) and a value on
    its scale (``rated_on_scale``) worked out once a distinct spec and value. A spec that is no JSON (``key`` None)
    is worked out every time."""

    def __init__(self) -> None:
        self._choices: dict[str, list[tuple[str, str]]] = {}
        self._shown: dict[tuple[str, type, Any], str] = {}

    @staticmethod
    def key(spec: dict[str, Any]) -> str | None:
        """The spec's JSON text, its keys in their order (a rubric's first matching band wins)."""
        try:
            return json.dumps(spec)
        except (TypeError, ValueError):
            return None

    def choices(self, key: str | None, spec: dict[str, Any]) -> list[tuple[str, str]]:
        if key is None:
            return scale_choices(scale_of(spec))
        if key not in self._choices:
            self._choices[key] = scale_choices(scale_of(spec))
        return self._choices[key]

    def shown(self, key: str | None, spec: dict[str, Any], value: Any) -> str:
        """``rated_on_scale(spec, value)``, remembered by the value and its type (True is not 1 here)."""
        if key is None:
            return rated_on_scale(spec, value)
        try:
            return self._shown[(key, type(value), value)]
        except KeyError:
            said = self._shown[(key, type(value), value)] = rated_on_scale(spec, value)
            return said
        except TypeError:  # a value that is no key (a list in a vector): worked out each time
            return rated_on_scale(spec, value)


def _run_url() -> Callable[[uuid.UUID], str]:
    """A run's address as ``Execution.get_absolute_url`` reverses it (a UUID is its own text in the path),
    reversed once a page rather than once a run."""
    sample = uuid.UUID(int=0)
    before, _, after = reverse("grading:run", args=[sample]).partition(str(sample))
    return lambda run_id: f"{before}{run_id}{after}"


def _has_grade(run: Execution) -> bool:
    """True when the run has a Grade row (read through select_related, so no query)."""
    return hasattr(run, "grade")


#: What a Rate runs row never shows of a run's grade (a row reads its status, metrics, criteria and feedback; and
#: the run whole: its input, output, error and trace are the run a person rates).
GRADE_UNSHOWN = ("judge", "error")
#: Rate runs counts the runs waiting for a person among at most this many of the newest.
QUEUE_CAP = 1000
#: Up to this many entities, Rate runs reads each one's runs through its own index (a rare entity's are few).
FEW_ENTITIES = 20


def rate_runs_for(
    entities: list[Entity], *, before: tuple[datetime, uuid.UUID] | None = None, user: Any = None
) -> list[Execution]:
    """The newest terminal runs (never loop replays) of ``entities``, older than ``before`` when given, without
    those ``user`` skipped.

    One query: ``RATE_RUNS + 1`` runs with their grade, newest first (the extra one says whether an older page
    exists), walked from the newest through ``grading_execution_newest``. Each run's entity is the one of
    ``entities`` (already read: not read again a run).
    """
    runs = _queue(entities)
    if user is not None:
        runs = runs.exclude(Exists(RateSkip.objects.filter(execution_id=OuterRef("pk"), user=user)))
    if before is not None:
        at, run_id = before
        runs = runs.filter(Q(completed_at__lt=at) | Q(completed_at=at, id__lt=run_id))
    by_id = {e.pk: e for e in entities}
    read = list(
        runs.select_related("grade")
        .defer(*(f"grade__{name}" for name in GRADE_UNSHOWN))
        .order_by("-completed_at", "-id")[: RATE_RUNS + 1]
    )
    for run in read:
        run.entity = by_id[run.entity_id]
    return read


def _queue(entities: list[Entity]) -> QuerySet[Execution]:
    """The terminal runs of ``entities`` people rate on Rate runs (never loop replays)."""
    runs = Execution.objects.filter(loop_launched=False, completed_at__isnull=False).exclude(
        status=Execution.Status.RUNNING
    )
    if len(entities) > FEW_ENTITIES:
        # Many entities: walk the newest runs (``execution_newest``) and keep theirs. ``entity_id + 0`` keeps a
        # planner (SQLite's) from reading every run of the entities through their own index and sorting them.
        ids = [e.pk for e in entities]
        if connection.vendor == "postgresql":  # the ids as one array, not a parameter each (issue 37)
            runs = runs.filter(_AnyOf(F("entity_id") + 0, ids))
        else:
            runs = runs.alias(entity_plus=F("entity_id") + 0).filter(entity_plus__in=ids)
    else:
        runs = runs.filter(entity__in=entities)
    return runs


class _AnyOf(Func):
    """``expression = ANY(values)`` with ``values`` one array parameter (Postgres): what ``__in`` asks, without
    preparing, sending and parsing a parameter per value (a fleet's rateable entities are hundreds)."""

    template = "(%(expressions)s))"
    arg_joiner = " = ANY("
    output_field = BooleanField()

    def __init__(self, expression: Any, values: list[Any]) -> None:
        super().__init__(expression, Value(list(values), output_field=Field()))


@dataclass
class Waiting:
    """How many of the queue's runs wait for a person: neither rated by them (on the metric filtered to, if any)
    nor skipped. ``of`` counts at most ``QUEUE_CAP`` of the newest (``capped`` when there are more)."""

    waiting: int
    of: int
    capped: bool


def waiting_for(user: Any, entities: list[Entity], *, metric: str = "") -> Waiting:
    """``Waiting`` of ``user`` on the runs of ``entities``: one query, whatever the history holds."""
    if not entities:
        return Waiting(0, 0, False)
    mine = Rating.objects.filter(execution_id=OuterRef("pk"), user=user)
    if metric:
        mine = mine.filter(metric_id=metric)
    skipped = RateSkip.objects.filter(execution_id=OuterRef("pk"), user=user)
    # The two flags of the newest ``QUEUE_CAP + 1`` (the extra one says ``capped``), counted here: the database walks
    # the same runs either way, and a count it makes over them (numbered by a window, to leave the extra one out)
    # costs more to build and to run than reading the thousand pairs of flags (issue 37, measured).
    seen = list(
        _queue(entities)
        .order_by("-completed_at", "-id")
        .annotate(rated=Exists(mine), skipped=Exists(skipped))
        .values_list("rated", "skipped")[: QUEUE_CAP + 1]
    )
    capped = len(seen) > QUEUE_CAP
    seen = seen[:QUEUE_CAP]
    return Waiting(sum(1 for rated, skip in seen if not rated and not skip), len(seen), capped)


def rated_metrics(entities: list[Entity]) -> dict[int, list[str]]:
    """The ids of the metrics people rate, an entity of ``entities``: one statement reading their metrics blocks
    alone (``entities`` are read without their terms), none when ``rateable(metrics=True)`` read them."""
    if not entities:
        return {}
    if all("rated_ids" in e.__dict__ for e in entities):  # read with them: ``rateable(metrics=True)``'s, Postgres
        return {e.pk: json.loads(e.rated_ids) for e in entities}  # type: ignore[attr-defined]
    if all("metrics_block" in e.__dict__ for e in entities):  # read with them: ``rateable(metrics=True)``'s, graded
        blocks = [(e.pk, e.metrics_block) for e in entities]  # type: ignore[attr-defined]
    else:
        wanted = {e.pk for e in entities}
        blocks = Entity.objects.filter(pk__in=wanted, evaluation_enabled=True, load_error="").values_list(
            "pk", "terms__evaluation__metrics"
        )
    return {
        pk: [metric_id for metric_id, spec in metrics.items() if _rated_spec(spec)]
        for pk, metrics in blocks
        if isinstance(metrics, dict)
    }


def _entity_filter(request: HttpRequest) -> Entity | None:
    return _entity_filter_key(request.GET.get("entity") or request.POST.get("entity_filter") or "")


def rate_cursor(run: Execution) -> str:
    """The ``before`` of the page after ``run``: its completion instant and id."""
    return f"{run.completed_at.isoformat()}~{run.pk}"


def parse_rate_cursor(text: str) -> tuple[datetime, uuid.UUID]:
    """``before`` read back; ValueError naming what is wrong."""
    at_text, _, id_text = text.partition("~")
    try:
        at = datetime.fromisoformat(at_text)
        run_id = uuid.UUID(id_text)
    except ValueError:
        raise ValueError(f"before: {text!r} is not a page of Rate runs (an instant and a run id)") from None
    if at.tzinfo is None:
        raise ValueError(f"before: {text!r} has no time zone")
    return at, run_id


def _calibration_context(entity: Entity) -> dict[str, Any]:
    return {"entity": entity, "calibration": calibration(entity)}


@login_required
@require_http_methods(["GET", "POST"])
def rate_runs(request: HttpRequest) -> HttpResponse:
    """Rate runs: the newest runs — each shown whole — with the judge and people side by side, and the viewer's
    own rating; how many wait for the viewer, filters by entity and by metric, and a skip.

    A page of ``RATE_RUNS`` runs (``?before=`` pages back) and the calibration of the entities on it, in a
    fixed number of queries whatever the fleet or its history holds.
    """
    if request.method == "POST":
        return _rate_post(request)
    try:
        before = parse_rate_cursor(request.GET["before"]) if request.GET.get("before") else None
    except ValueError as exc:
        return HttpResponseBadRequest(str(exc))
    every = rateable(metrics=True)  # their terms are read for the entities on the page only
    chosen = _entity_filter(request)
    if chosen is None and request.GET.get("entity"):
        named = request.GET["entity"][:100]
        return HttpResponseBadRequest(f"entity: {named!r} is not an entity (its kind and id, as kind:id)")
    entities = [e for e in every if chosen is not None and e.pk == chosen.pk] if chosen else every
    metrics_of = rated_metrics(entities)
    metric_ids = sorted({m for ids in metrics_of.values() for m in ids})
    metric = request.GET.get("metric") or ""
    if metric and metric not in metric_ids:
        where = f"{chosen.name or chosen.slug}" if chosen else "any entity"
        return HttpResponseBadRequest(f"metric: {metric[:100]!r} is no metric people rate on {where}")
    if metric:
        entities = [e for e in entities if metric in metrics_of.get(e.pk, ())]
    runs = rate_runs_for(entities, before=before, user=request.user)
    older = rate_cursor(runs[RATE_RUNS - 1]) if len(runs) > RATE_RUNS else ""
    runs = runs[:RATE_RUNS]
    shown = {run.entity_id: run.entity for run in runs}
    if chosen is not None and entities:
        shown.setdefault(chosen.pk, entities[0])
    # Their terms (the rows' metrics and the calibrations read them) come with the calibrations' judges.
    calibrations = calibration_many(list(shown.values()), read_terms=True)
    nav = [(f"{e.target_kind}:{e.slug}", e.name or e.slug, chosen is not None and chosen.pk == e.pk) for e in every]
    chosen_key = f"{chosen.target_kind}:{chosen.slug}" if chosen else ""
    rows = rate_rows(request.user, runs, metric=metric)
    items = [
        {"entity": e, "calibration": calibrations[e.pk], "url": e.get_absolute_url(), "label": e.name or e.slug}
        for e in sorted(shown.values(), key=lambda e: (e.kind, e.slug))
        if calibrations.get(e.pk)
    ]
    # One token for the page's forms and its navigation, as the template's lazy one was (read once a render).
    token = get_token(request)
    filters = {"entity": chosen_key, "metric": metric}
    context = {
        "rows": rows,
        # The rows and the calibrations' tables (built here: two includes a row cost more than reading them).
        "rows_html": rate_rows_html(rows, csrf_token=token, entity_filter=chosen_key, metric_filter=metric),
        "calibrations": items,
        "calibrations_html": calibrations_html(items),
        "csrf_token": token,
        # The filters' options, one an entity and one a metric (built here: a template's lookups cost more).
        "nav_html": nav_html(nav),
        "metric_nav_html": metric_nav_html(metric_ids, metric),
        "waiting_html": waiting_html(waiting_for(request.user, entities, metric=metric)),
        "chosen": chosen,
        "chosen_key": chosen_key,
        "metric": metric,
        "filter_query": "&".join(f"{k}={quote(v, safe=':')}" for k, v in filters.items() if v),
        "older": older,
        "paged": before is not None,
    }
    return render(request, "grading/rate.html", context)


def _filters_of(post: Any) -> tuple[list[Entity], str]:
    """The entities and the metric a posted form's page was filtered to (its hidden fields), for its counter."""
    chosen = _entity_filter_key(post.get("entity_filter", ""))
    entities = [chosen] if chosen is not None else rateable()
    metric = post.get("metric_filter", "")
    if metric:
        metrics_of = rated_metrics(entities)
        entities = [e for e in entities if metric in metrics_of.get(e.pk, ())]
    return entities, metric


def _entity_filter_key(wanted: str) -> Entity | None:
    target_kind, _, slug = wanted.partition(":")
    return Entity.objects.filter(target_kind=target_kind, slug=slug).first() if slug else None


@login_required
@require_http_methods(["POST"])
def rate_skip(request: HttpRequest) -> HttpResponse:
    """Skip a run on Rate runs: it leaves the viewer's queue without a rating (remembered for them alone).

    HTMX gets nothing in the row's place and the waiting count out of band; a browser a redirect back.
    """
    run_id = _uuid(request.POST.get("run_id"))
    run = Execution.objects.filter(pk=run_id).only("pk").first() if run_id else None
    if run is None:
        return HttpResponseBadRequest(f"run_id: {request.POST.get('run_id', '')[:60]!r} is not a run")
    RateSkip.objects.get_or_create(execution=run, user=request.user)
    if not request.htmx:
        back = reverse("grading:rate")
        query = "&".join(
            f"{name}={quote(request.POST[field], safe=':')}"
            for name, field in (("entity", "entity_filter"), ("metric", "metric_filter"))
            if request.POST.get(field)
        )
        messages.success(request, "Skipped: it left your queue.")
        return redirect(f"{back}?{query}" if query else back)
    entities, metric = _filters_of(request.POST)
    return HttpResponse(waiting_html(waiting_for(request.user, entities, metric=metric), oob=True))


def _rate_post(request: HttpRequest) -> HttpResponse:
    """One metric of one run rated through the one door; HTMX gets the run's row back, a browser a redirect."""
    post = request.POST
    answer = rate(
        actor_user=request.user,
        is_agent=False,
        run_kind=post.get("run_kind", ""),
        run_id=post.get("run_id", ""),
        idempotency_key=post.get("idempotency_key", ""),
        ratings=[
            {"metric_id": post.get("metric_id", ""), "value": post.get("value", ""), "note": post.get("note", "")}
        ],
    )
    status = {"ok": 200, "not_found": 404, "precondition": 409, "invalid": 400, "refused": 403}[answer.code]
    if not request.htmx:
        (messages.success if answer.ok else messages.error)(request, _said(answer.as_dict()))
        back = reverse("grading:rate")
        query = "&".join(
            f"{name}={quote(post[field], safe=':')}"
            for name, field in (("entity", "entity_filter"), ("metric", "metric_filter"))
            if post.get(field)
        )
        return redirect(f"{back}{'?' + query if query else ''}#run-{post.get('run_id', '')}")
    run = Execution.objects.select_related("entity", "grade").filter(pk=_uuid(post.get("run_id"))).first()
    if run is None:
        return HttpResponse(_said(answer.as_dict()), status=status)
    (row,) = rate_rows(request.user, [run], metric=post.get("metric_filter", ""))
    row.answer = answer.as_dict()
    entities, metric = _filters_of(post)
    # The page shows (and so holds a target for) only an entity with something to calibrate: swap that one only.
    swapped = _calibration_context(run.entity)
    # An answer the page shows in place: HTMX swaps 2xx only, so a refusal is still 200 with its code in the row.
    response = HttpResponse(
        rate_row_html(
            row,
            csrf_token=get_token(request),
            entity_filter=post.get("entity_filter", ""),
            metric_filter=post.get("metric_filter", ""),
            oob=swapped if swapped["calibration"] else None,
        )
        + waiting_html(waiting_for(request.user, entities, metric=metric), oob=True)
    )
    response["X-Rate-Code"] = answer.code
    return response


def _said(answer: dict[str, Any]) -> str:
    return "Saved." if answer["ok"] else f"Not saved ({answer['code']}): {answer['detail']}"
