"""The admin for grading: entities with their load errors, runs, grades and ratings, all read-only.

Entities change only through the brain sync, runs through the executions
module, grades through the grader and ratings through the one door
(``grading.ratings.rate``), so nothing here edits them.
"""

from __future__ import annotations

from django.contrib import admin

from grading.models import Entity, Execution, Grade, RateSkip, Rating
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
