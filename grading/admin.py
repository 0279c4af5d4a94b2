"""The admin for grading: entities with their load errors, runs, grades and ratings, all read-only; and the OTLP
traces set aside by the sweep, which a person removes or has taken again.

Entities change only through the brain sync, runs through the executions
module, grades through the grader and ratings through the one door
(``grading.ratings.rate``), so nothing here edits them.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from grading.models import Entity, Execution, Grade, OtlpTrace, RateSkip, Rating
from grading.otlp_assemble import set_aside, take_again
from singularity.admin import ReadOnlyAdmin
from singularity.templatetags.singularity_tags import money


@admin.register(Entity)
class EntityAdmin(ReadOnlyAdmin):
    list_display = [
        "slug",
        "target_kind",
        "kind",
        "loaded",
        "evaluation_enabled",
        "loop_enabled",
        "present",
        "synced_at",
    ]
    list_filter = ["kind", "evaluation_enabled", "loop_enabled", "present"]
    search_fields = ["slug", "name", "path", "load_error"]

    @admin.display(description="loaded", boolean=True, ordering="load_error")
    def loaded(self, entity: Entity) -> bool:
        return entity.ok


@admin.register(Execution)
class ExecutionAdmin(ReadOnlyAdmin):
    list_display = ["id", "entity", "run_kind", "status", "source", "sampling", "cost", "loop_launched", "started_at"]
    list_filter = ["status", "run_kind", "source", "sampling", "loop_launched"]
    search_fields = ["id", "entity__slug"]
    list_select_related = ["entity"]
    date_hierarchy = "started_at"

    @admin.display(description="cost", ordering="cost_usd")
    def cost(self, execution: Execution) -> str:
        return money(execution.cost_usd)


@admin.register(Grade)
class GradeAdmin(ReadOnlyAdmin):
    list_display = ["execution", "entity", "status", "reason", "score", "passed", "due_at", "graded_at"]
    list_filter = ["status", "reason", "passed"]
    search_fields = ["execution__id", "entity__slug", "error"]
    list_select_related = ["entity", "execution"]


@admin.register(Rating)
class RatingAdmin(ReadOnlyAdmin):
    list_display = ["execution", "metric_id", "user", "value", "normalized", "note", "updated_at"]
    list_filter = ["metric_id"]
    search_fields = ["execution__id", "metric_id", "user__username", "note"]
    list_select_related = ["user", "execution"]


@admin.register(RateSkip)
class RateSkipAdmin(ReadOnlyAdmin):
    """Runs people skipped on Rate runs (each out of that person's queue only)."""

    list_display = ["execution", "user", "created_at"]
    search_fields = ["execution__id", "user__username"]
    list_select_related = ["user", "execution"]


@admin.register(OtlpTrace)
class SetAsideTraceAdmin(ReadOnlyAdmin):
    """Traces sent to /v1/traces that could not become runs (``grading.otlp_assemble.sweep_once``), kept with their
    spans: removed once read, or taken again (after a fix) by the next sweep."""

    list_display = ["trace_id", "entity", "assembled_at", "assembly_error"]
    search_fields = ["trace_id", "entity__slug", "assembly_error"]
    list_select_related = ["entity"]
    actions = ["take_again"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[OtlpTrace]:
        return set_aside()

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("grading.delete_otlptrace")

    @admin.action(description="Take again at the next sweep", permissions=["delete"])
    def take_again(self, request: HttpRequest, queryset: QuerySet[OtlpTrace]) -> None:
        count = take_again(queryset)
        self.message_user(request, f"{count} trace(s) will be taken again by the next sweep", messages.SUCCESS)
