"""The admin for the loop: its records read-only, supervision moves and auto-accept grants made here.

Cycles, rounds, lessons, pull requests, ideas, the action log and the rest
change only through the loop's own modules, so they are shown, never edited.
Two things a person does here:

- Supervision › Add: hold or release an entity or a lock group, re-arm an
  entity, or dismiss a failed cycle, with a reason. The write goes through
  ``evolution.supervision`` (the same door as the page and the API), stamped
  with the signed-in person. A standing hold's row links to its release form
  and a paused entity's to its re-arm form.
- Auto-accept grants › Add: ``loop:auto_accept`` for one entity, bounded by
  a number of calls and hours to live; the "Revoke" action ends it. A chat
  role is refused (its proposals always need a person).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from evolution.core.outcomes import phase_label
from evolution.models import (
    ActionLog,
    AutoAcceptGrant,
    CommitStatus,
    Cycle,
    Idea,
    Lesson,
    PullRequest,
    Recall,
    Round,
    Supervision,
    WaitingWindow,
    WidenGrant,
)
from evolution.steering import supervision
from grading.models import Entity
from singularity.admin import ReadOnlyAdmin

# --- Records, read-only ---------------------------------------------------------------


class RoundInline(admin.TabularInline):
    model = Round
    fk_name = "cycle"
    fields = ["number", "parent", "status", "author", "summary", "decided_by", "rejection", "pr_number", "merge_sha"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class PhaseFilter(admin.SimpleListFilter):
    """The cycle's phase filter in people's words ("Waiting for the merge", never "Merge Wait")."""

    title = "phase"
    parameter_name = "phase__exact"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(phase, phase_label(phase)) for phase in Cycle.Phase.values]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Cycle]) -> QuerySet[Cycle]:
        return queryset.filter(phase=self.value()) if self.value() else queryset


@admin.register(Cycle)
class CycleAdmin(ReadOnlyAdmin):
    list_display = ["id", "entity", "origin", "phase_said", "status", "reason", "started_at", "completed_at"]
    list_filter = ["status", PhaseFilter, "origin"]
    readonly_fields = ["phase_said"]
    search_fields = ["id", "entity__slug", "reason", "key"]
    list_select_related = ["entity"]
    date_hierarchy = "started_at"
    inlines = [RoundInline]

    @admin.display(description="phase", ordering="phase")
    def phase_said(self, cycle: Cycle) -> str:
        return phase_label(cycle.phase)

    def get_fields(self, request: HttpRequest, obj: Cycle | None = None) -> list[str]:
        fields = [f for f in super().get_fields(request, obj) if f != "phase_said"]
        return ["phase_said" if f == "phase" else f for f in fields]


@admin.register(Round)
class RoundAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "cycle", "number", "status", "author", "decided_by", "rejection", "pr_number"]
    list_filter = ["status", "rejection"]
    search_fields = ["cycle__id", "cycle__entity__slug", "summary"]
    list_select_related = ["cycle", "cycle__entity"]


@admin.register(Lesson)
class LessonAdmin(ReadOnlyAdmin):
    list_display = ["id", "entity", "cycle", "outcome", "summary", "helpful", "harmful", "created_at"]
    list_filter = ["outcome", "rejection"]
    search_fields = ["entity__slug", "summary", "hypothesis", "note"]
    list_select_related = ["entity"]


@admin.register(Recall)
class RecallAdmin(ReadOnlyAdmin):
    list_display = ["lesson", "round"]


@admin.register(PullRequest)
class PullRequestAdmin(ReadOnlyAdmin):
    list_display = ["number", "title", "state", "head", "base", "merged_by", "closed_by", "created_at"]
    list_filter = ["state"]
    search_fields = ["number", "title", "head"]


@admin.register(CommitStatus)
class CommitStatusAdmin(ReadOnlyAdmin):
    list_display = ["sha", "context", "state", "description", "updated_at"]
    list_filter = ["state", "context"]
    search_fields = ["sha"]


@admin.register(Idea)
class IdeaAdmin(ReadOnlyAdmin):
    list_display = ["id", "entity", "author", "status", "approved", "cycle", "created_at"]
    list_filter = ["status", "approved"]
    search_fields = ["entity__slug", "text", "author"]
    list_select_related = ["entity"]


@admin.register(ActionLog)
class ActionLogAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "actor", "op", "subject", "summary", "commit"]
    list_filter = ["op"]
    search_fields = ["actor", "subject", "summary"]
    date_hierarchy = "created_at"


@admin.register(WaitingWindow)
class WaitingWindowAdmin(ReadOnlyAdmin):
    list_display = ["entity", "have", "need", "unit", "reason", "moved_at", "sampled_at", "ended_at"]
    list_select_related = ["entity"]


# --- Supervision ------------------------------------------------------------------------


class SupervisionForm(forms.ModelForm):
    """One supervision move: what (hold, release, re-arm, dismiss), on what, and why."""

    kind = forms.ChoiceField(choices=Supervision.Kind.choices, label="Move")
    entity = forms.ModelChoiceField(
        queryset=Entity.objects.filter(present=True), required=False, help_text="The entity (or pick a group)."
    )
    group = forms.ChoiceField(
        required=False, help_text="A lock group declared under loop.groups (hold and release only)."
    )
    cycle = forms.ModelChoiceField(
        queryset=Cycle.objects.none(), required=False, help_text="The failed cycle (dismiss only)."
    )
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}), required=False, help_text="Why (a hold needs one)."
    )

    class Meta:
        model = Supervision
        fields = ["kind", "entity", "group", "cycle", "reason"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A row already written is shown read-only: its form has none of these fields.
        if "group" in self.fields:
            self.fields["group"].choices = [("", "—")] + [(g, g) for g in sorted(supervision.declared_groups())]
        if "cycle" in self.fields:
            self.fields["cycle"].queryset = supervision.failures_unread().select_related("entity")

    def clean(self) -> dict[str, Any]:
        """Check the move as the write will (target, reason, something to release or dismiss); write nothing."""
        data = super().clean()
        kind, entity, group = data.get("kind"), data.get("entity"), data.get("group")
        cycle, reason = data.get("cycle"), (data.get("reason") or "").strip()
        try:
            if kind in (Supervision.Kind.HOLD, Supervision.Kind.RELEASE):
                if bool(entity) == bool(group):
                    raise forms.ValidationError("Pick an entity or a lock group (one of them) to hold or release.")
                target = supervision.target_of(entity or {"group": group})
                if kind == Supervision.Kind.HOLD and not reason:
                    raise forms.ValidationError(
                        {"reason": f"A hold needs a reason: why stop the loop for {target.label}?"}
                    )
                if kind == Supervision.Kind.RELEASE:
                    supervision._check_release(target)
            elif kind == Supervision.Kind.REARM:
                if entity is None or group:
                    raise forms.ValidationError("A re-arm is for one entity: pick it (and no group).")
            elif kind == Supervision.Kind.DISMISS:
                if cycle is None:
                    raise forms.ValidationError({"cycle": "Pick the failed cycle to dismiss."})
                supervision._check_dismiss(cycle)
        except supervision.Refusal as refused:
            raise forms.ValidationError(refused.detail) from refused
        data["reason"] = reason
        return data


@admin.register(Supervision)
class SupervisionAdmin(admin.ModelAdmin):
    """Every hold, release, re-arm and dismissal; a new one is made with Add (the acting person is you)."""

    form = SupervisionForm
    list_display = ["created_at", "kind", "target", "cycle", "actor", "reason", "next_move"]
    list_filter = ["kind"]
    search_fields = ["entity__slug", "group", "actor", "reason"]
    list_select_related = ["entity", "cycle"]
    date_hierarchy = "created_at"

    def get_readonly_fields(self, request: HttpRequest, obj: Supervision | None = None) -> list[str]:
        return [] if obj is None else ["kind", "entity", "group", "cycle", "actor", "reason", "created_at"]

    def get_fields(self, request: HttpRequest, obj: Supervision | None = None) -> list[str]:
        if obj is None:
            return ["kind", "entity", "group", "cycle", "reason"]
        return ["kind", "entity", "group", "cycle", "actor", "reason", "created_at"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="on")
    def target(self, row: Supervision) -> str:
        return str(row.entity) if row.entity_id else f"lock group {row.group}"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Supervision]:
        """Each row with the newest hold/release of its target, so a standing hold is known without a query per row."""
        standing = Supervision.objects.filter(kind__in=(Supervision.Kind.HOLD, Supervision.Kind.RELEASE))
        order = ("-created_at", "-id")
        of_entity = standing.filter(entity_id=OuterRef("entity_id")).order_by(*order).values("pk")[:1]
        of_group = standing.filter(entity__isnull=True, group=OuterRef("group")).order_by(*order).values("pk")[:1]
        return (
            super()
            .get_queryset(request)
            .annotate(newest_of_entity=Subquery(of_entity), newest_of_group=Subquery(of_group))
        )

    @admin.display(description="")
    def next_move(self, row: Supervision) -> str:
        """A link to release a hold that still stands (the add form, filled in)."""
        if row.kind != Supervision.Kind.HOLD:
            return ""
        newest = getattr(row, "newest_of_entity", None) if row.entity_id else getattr(row, "newest_of_group", None)
        if newest != row.pk:
            return ""
        query = f"entity={row.entity_id}" if row.entity_id else f"group={row.group}"
        url = f"{reverse('admin:evolution_supervision_add')}?kind=release&{query}"
        return format_html('<a href="{}">Release…</a>', url)

    def save_model(self, request: HttpRequest, obj: Supervision, form: Any, change: bool) -> None:
        """Make the move through ``evolution.supervision`` as the signed-in person; a late refusal is a message."""
        data = form.cleaned_data
        target: Any = data.get("entity") or ({"group": data["group"]} if data.get("group") else None)
        try:
            row = supervision.move(
                data["kind"],
                target,
                actor=request.user.get_username(),
                reason=data.get("reason", ""),
                agent=False,
                cycle=data.get("cycle"),
            ).row
        except supervision.Refusal as refused:
            self.message_user(request, refused.detail, messages.ERROR)
            obj.pk = None
            return
        obj.pk = row.pk
        obj.refresh_from_db()

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        if obj.pk is None:
            return None
        return super().log_addition(request, obj, message)

    def response_add(
        self, request: HttpRequest, obj: Supervision, post_url_continue: str | None = None
    ) -> HttpResponse:
        if obj.pk is None:
            return HttpResponseRedirect(reverse("admin:evolution_supervision_changelist"))
        return super().response_add(request, obj, post_url_continue)


# --- Auto-accept grants -------------------------------------------------------------------


class AutoAcceptGrantForm(forms.ModelForm):
    """Issue ``loop:auto_accept``: one entity, how many accepts, for how many hours."""

    entity = forms.ModelChoiceField(queryset=Entity.objects.filter(present=True))
    max_calls = forms.IntegerField(min_value=1, initial=1, label="Max calls", help_text="Proposals it may accept.")
    ttl_hours = forms.DecimalField(
        min_value=0.01, initial=24, label="TTL (hours)", help_text="It expires this many hours from now."
    )

    class Meta:
        model = AutoAcceptGrant
        fields = ["entity", "max_calls"]

    def clean_entity(self) -> Entity:
        entity = self.cleaned_data["entity"]
        if entity.kind == Entity.Kind.ROLE:
            raise forms.ValidationError(
                f"{entity} is a chat role: loop:auto_accept is never issued for a chat role — "
                "a change to how it talks to people is always a person's to accept."
            )
        return entity


@admin.register(AutoAcceptGrant)
class AutoAcceptGrantAdmin(admin.ModelAdmin):
    """Issue a grant with Add; end one with the Revoke action. Grants are otherwise never edited."""

    form = AutoAcceptGrantForm
    list_display = ["entity", "issued_by", "used", "expires_at", "revoked_at", "standing", "created_at"]
    list_filter = ["revoked_at"]
    search_fields = ["entity__slug", "issued_by"]
    list_select_related = ["entity"]
    actions = ["revoke"]

    def get_fields(self, request: HttpRequest, obj: AutoAcceptGrant | None = None) -> list[str]:
        if obj is None:
            return ["entity", "max_calls", "ttl_hours"]
        return ["entity", "issued_by", "max_calls", "calls", "expires_at", "revoked_at", "created_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: AutoAcceptGrant | None = None) -> list[str]:
        return [] if obj is None else self.get_fields(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="calls")
    def used(self, grant: AutoAcceptGrant) -> str:
        return f"{grant.calls} / {grant.max_calls}"

    @admin.display(description="standing", boolean=True)
    def standing(self, grant: AutoAcceptGrant) -> bool:
        return grant.revoked_at is None and grant.expires_at > timezone.now() and grant.calls < grant.max_calls

    def save_model(self, request: HttpRequest, obj: AutoAcceptGrant, form: Any, change: bool) -> None:
        """Issue the grant as the signed-in person, expiring TTL hours from now; an action-log row says so."""
        if change:
            return  # every field is read-only once issued
        now = timezone.now()
        obj.issued_by = request.user.get_username()
        obj.expires_at = now + timedelta(hours=float(form.cleaned_data["ttl_hours"]))
        obj.created_at = now
        obj.save()
        ActionLog.objects.create(
            actor=obj.issued_by,
            op="auto_accept",
            subject=f"{obj.entity.target_kind}:{obj.entity.slug}",
            entity=obj.entity,
            summary=f"issued loop:auto_accept for {obj.entity}: {obj.max_calls} call(s), expires {obj.expires_at:%Y-%m-%d %H:%M %Z}",
        )

    @admin.action(description="Revoke the selected grants", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[AutoAcceptGrant]) -> None:
        now, who = timezone.now(), request.user.get_username()
        revoked = 0
        for grant in queryset.filter(revoked_at__isnull=True).select_related("entity"):
            if AutoAcceptGrant.objects.filter(pk=grant.pk, revoked_at__isnull=True).update(revoked_at=now):
                revoked += 1
                ActionLog.objects.create(
                    actor=who,
                    op="auto_accept_revoke",
                    subject=f"{grant.entity.target_kind}:{grant.entity.slug}",
                    entity=grant.entity,
                    summary=f"revoked loop:auto_accept for {grant.entity} ({grant.calls} of {grant.max_calls} used)",
                )
        self.message_user(request, f"Revoked {revoked} grant(s).", messages.SUCCESS)


@admin.register(WidenGrant)
class WidenGrantAdmin(admin.ModelAdmin):
    """An agent's loop:autonomy grants, minted by an approved widen card (R12.22): read them, end one with Revoke."""

    list_display = ["asker", "granted_by", "calls", "expires_at", "revoked_at", "created_at"]
    list_filter = ["revoked_at"]
    search_fields = ["asker"]
    list_select_related = ["granted_by"]
    actions = ["revoke"]
    readonly_fields = [
        "asker", "token", "card_id", "granted_by", "max_calls", "calls", "created_at", "expires_at", "revoked_at",
    ]  # fmt: skip

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # minted only by a person's Approve on the agent's widen card

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(description="Revoke the selected grants", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[WidenGrant]) -> None:
        now, who = timezone.now(), request.user.get_username()
        revoked = 0
        for grant in queryset.filter(revoked_at__isnull=True):
            if WidenGrant.objects.filter(pk=grant.pk, revoked_at__isnull=True).update(revoked_at=now):
                revoked += 1
                ActionLog.objects.create(
                    actor=who,
                    op="widen_grant_revoke",
                    subject=grant.asker,
                    summary=f"revoked loop:autonomy for {grant.asker} ({grant.calls} widening(s) made under it)",
                )
        self.message_user(request, f"Revoked {revoked} grant(s).", messages.SUCCESS)
