"""The admin: supervision of beings (start, stop), their read-only ledger and journal, and API tokens.

The budget changes only through the runtime and the run state only through
``singularity.being.actions``, so nothing here edits either directly.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    SolarSchedule,
)

from singularity.being.actions import request_stop, start_on_workers
from singularity.errors import ConfigError, StateError
from singularity.models import ApiToken, Being, Cycle, Event
from singularity.templatetags.singularity_tags import money

# The beat schedule is the brain's (``grading.schedules`` rewrites it from the entities' ``schedule:`` on every
# sync) plus the engine's own periodic tasks: an edit made in the admin would be overwritten, and its pages are
# the scheduler's internal task names. Change a heartbeat's cron in its file instead.
for _model in (PeriodicTask, IntervalSchedule, CrontabSchedule, SolarSchedule, ClockedSchedule):
    if admin.site.is_registered(_model):
        admin.site.unregister(_model)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Shows rows; never adds, changes or deletes them."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _apply(modeladmin: admin.ModelAdmin, request: HttpRequest, beings: QuerySet[Being], change: Any, done: str) -> None:
    """Call ``change`` on each being; report successes in one message and each refusal in its own."""
    changed = []
    for being in beings:
        try:
            change(being, by=request.user.get_username())
        except (StateError, ConfigError) as exc:
            modeladmin.message_user(request, str(exc), messages.ERROR)
        else:
            changed.append(being.name)
    if changed:
        modeladmin.message_user(request, f"{done}: {', '.join(changed)}", messages.SUCCESS)


@admin.register(Being)
class BeingAdmin(ReadOnlyAdmin):
    list_display = ["name", "status", "host", "cycle", "remaining_usd", "earned_usd", "parent"]
    list_filter = ["status", "host"]
    search_fields = ["name"]
    list_select_related = ["parent"]
    actions = ["start_selected", "stop_selected"]

    @admin.display(description="remaining", ordering="remaining")
    def remaining_usd(self, being: Being) -> str:
        return money(being.remaining)

    @admin.display(description="earned", ordering="earned")
    def earned_usd(self, being: Being) -> str:
        return money(being.earned)

    def has_run_permission(self, request: HttpRequest) -> bool:
        """Starting and stopping need the ordinary change permission, though no field is editable here."""
        return request.user.has_perm("singularity.change_being")

    @admin.action(description="Start on workers", permissions=["run"])
    def start_selected(self, request: HttpRequest, queryset: QuerySet[Being]) -> None:
        _apply(self, request, queryset, start_on_workers, "Started on the workers")

    @admin.action(description="Stop", permissions=["run"])
    def stop_selected(self, request: HttpRequest, queryset: QuerySet[Being]) -> None:
        _apply(self, request, queryset, request_stop, "Stopped or stopping")


@admin.register(Cycle)
class CycleAdmin(ReadOnlyAdmin):
    list_display = ["being", "number", "status", "rounds", "tool_calls", "spent_usd", "earned_usd", "started_at"]
    list_filter = ["status"]
    search_fields = ["being__name"]
    list_select_related = ["being"]

    @admin.display(description="spent", ordering="spent")
    def spent_usd(self, cycle: Cycle) -> str:
        return money(cycle.spent)

    @admin.display(description="earned", ordering="earned")
    def earned_usd(self, cycle: Cycle) -> str:
        return money(cycle.earned)


def said(value: Any, *, nested: bool = False) -> str:
    """A journal entry's data as a person reads it: ``key: value`` pairs, nested ones in parentheses, never JSON."""
    if isinstance(value, dict):
        pairs = " · ".join(f"{str(key).replace('_', ' ')}: {said(item, nested=True)}" for key, item in value.items())
        return (f"({pairs})" if nested else pairs) if pairs else "—"
    if isinstance(value, list):
        return ", ".join(said(item) for item in value) or "—"
    if value is None or value == "":
        return "—"
    return str(value)


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["being", "seq", "cycle", "kind", "created_at", "details"]
    list_filter = ["kind"]
    search_fields = ["being__name"]
    list_select_related = ["being"]
    readonly_fields = ["details"]
    exclude = ["data"]

    @admin.display(description="details")
    def details(self, event: Event) -> str:
        return said(event.data)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "prefix", "is_agent", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["is_agent", "revoked_at"]
    search_fields = ["name", "user__username", "prefix"]
    list_select_related = ["user"]
    actions = ["revoke"]

    def get_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> list[str]:
        if obj is None:
            return ["user", "name", "is_agent"]
        return ["user", "name", "is_agent", "prefix", "created_at", "last_used_at", "revoked_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> list[str]:
        if obj is None:
            return []
        return ["user", "is_agent", "prefix", "created_at", "last_used_at", "revoked_at"]

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        """On add, issue the token (only its hash is stored) and show its key once in a message."""
        if change:
            super().save_model(request, obj, form, change)
            return
        token, key = ApiToken.issue(obj.user, obj.name, is_agent=obj.is_agent)
        obj.pk = token.pk
        obj.refresh_from_db()
        self.message_user(
            request,
            f"The key of {token.name!r} is {key} — copy it now; it is not stored and will not be shown again.",
            messages.WARNING,
        )

    @admin.action(description="Revoke", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {count} token(s).", messages.SUCCESS)
