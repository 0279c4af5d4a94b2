"""The entities list: every entity a page at a time, with its run count and newest grade."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import OuterRef, QuerySet, Subquery
from django.db.models.expressions import RawSQL
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from grading.models import Entity, Grade, OtlpTrace, UnknownAgent
from grading.otlp_assemble import error_in_short, set_aside
from grading.otlp_ingest import file_to_add, resolve


def _newest_grade(field_name: str) -> Subquery:
    newest = Grade.objects.filter(entity=OuterRef("pk"), status=Grade.Status.GRADED).order_by("-graded_at")
    return Subquery(newest.values(field_name)[:1])


def entities_for_list(ids: list[int] | None = None) -> QuerySet[Entity]:
    """The entities (those of ``ids`` when given) with their run count and newest grade's outcome and time.

    One query; the counts and the newest grades are correlated subqueries per entity read (a page of them).
    """
    entities = Entity.objects.all() if ids is None else Entity.objects.filter(pk__in=ids)
    return entities.annotate(
        runs=RawSQL(COUNTED_RUNS, [RUNS_COUNTED_UP_TO + 1]),
        last_passed=_newest_grade("passed"),
        last_score=_newest_grade("score"),
        last_graded_at=_newest_grade("graded_at"),
    ).order_by("kind", "slug")


#: Entities on one page of the list.
ENTITIES_PER_PAGE = 50
#: The list counts an entity's runs up to here and shows more as "1,000+" (a count that does not grow with them).
RUNS_COUNTED_UP_TO = 1000
COUNTED_RUNS = (
    "SELECT count(*) FROM (SELECT 1 FROM grading_execution e WHERE e.entity_id = grading_entity.id LIMIT %s) counted"
)


def runs_label(count: int) -> str:
    """An entity's run count as the list shows it: "1,000+" past what it counts."""
    return f"{RUNS_COUNTED_UP_TO:,}+" if count > RUNS_COUNTED_UP_TO else f"{count:,}"


@login_required
def entity_list(request: HttpRequest) -> HttpResponse:
    """Every entity, a page at a time (by kind and id): its state, grading and loop, runs and newest grade."""
    page = Paginator(Entity.objects.order_by("kind", "slug").values_list("pk", flat=True), ENTITIES_PER_PAGE)
    shown = page.get_page(request.GET.get("page"))
    entities = list(entities_for_list(list(shown.object_list)))
    for entity in entities:
        entity.runs_label = runs_label(entity.runs)  # type: ignore[attr-defined]
    context = {"entities": entities, "page": shown, "unknown_agents": unknown_agents()}
    context["set_aside"], context["set_aside_count"] = traces_set_aside()
    return render(request, "grading/entity_list.html", context)


#: Agents listed as seen, not in the brain (the most recent first).
UNKNOWN_AGENTS_SHOWN = 50


def unknown_agents() -> list[UnknownAgent]:
    """The agents that sent traces naming no entity, newest first, each with the brain file that would add it.

    One whose name names an entity now (its file was added since) is left out.
    """
    agents = list(UnknownAgent.objects.order_by("-last_seen")[:UNKNOWN_AGENTS_SHOWN])
    found = resolve({agent.name for agent in agents})
    agents = [agent for agent in agents if not isinstance(found.get(agent.name), Entity)]
    for agent in agents:
        agent.file_to_add = file_to_add(agent.name)  # type: ignore[attr-defined]
    return agents


#: Traces set aside listed (the newest first); the count says how many there are in all.
SET_ASIDE_SHOWN = 20


def traces_set_aside() -> tuple[list[OtlpTrace], int]:
    """The newest traces that could not become runs (``grading.otlp_assemble.sweep_once``), each with its error in
    short, and how many there are."""
    traces = list(set_aside()[:SET_ASIDE_SHOWN])
    for trace in traces:
        trace.error_in_short = error_in_short(trace.assembly_error)  # type: ignore[attr-defined]
    return traces, (len(traces) if len(traces) < SET_ASIDE_SHOWN else set_aside().count())
