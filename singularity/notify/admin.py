"""The admin: destinations and alert rules (the manifest's are rewritten at every sync), the delivery log, redelivery."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from singularity.notify.deliver import redeliver
from singularity.notify.models import AlertRule, AlertState, Delivery, Destination


class DestinationForm(forms.ModelForm):
    url = forms.URLField(required=False, assume_scheme="https", max_length=500)
    secret = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="The shared secret a webhook is signed with (left blank: unchanged). Never shown again.",
    )

    class Meta:
        model = Destination
        fields = ["name", "kind", "url", "url_env", "secret", "secret_env", "events", "active"]

    def clean_secret(self) -> str:
        return self.cleaned_data["secret"] or (self.instance.secret if self.instance.pk else "")


@admin.register(Destination)
class DestinationAdmin(admin.ModelAdmin):
    form = DestinationForm
    list_display = ["name", "kind", "source", "active"]
    list_filter = ["kind", "source", "active"]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # switched off instead: a process may still hold it for CACHE_SECS, and its log stays


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ["created_at", "destination", "event", "title", "status", "attempts", "answer_status"]
    list_filter = ["status", "event", "destination"]
    readonly_fields = [f.name for f in Delivery._meta.fields]
    actions = ["send_again"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(description="Send again (a new delivery id, the same body)")
    def send_again(self, request: HttpRequest, queryset: QuerySet[Delivery]) -> None:
        for delivery in queryset:
            redeliver(delivery.pk)
        messages.success(request, f"{queryset.count()} sent again; see the log.")


class AlertStateInline(admin.StackedInline):
    model = AlertState
    readonly_fields = ["level", "value", "changed_at", "evaluated_at", "changes"]
    can_delete = False
    extra = 0


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "entity", "metric", "warning", "alert", "source", "active"]
    list_filter = ["kind", "source", "active"]
    inlines = [AlertStateInline]
