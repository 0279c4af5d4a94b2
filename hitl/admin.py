"""Admin: cards and deliveries are read-only records; who may answer from Telegram is edited here."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from hitl.actions import retry_handler
from hitl.models import Card, Delivery, Notice, TelegramUpdate, TelegramUser


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows written by the application only: viewable, never added or edited by hand."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class DeliveryInline(admin.TabularInline):
    model = Delivery
    fields = ["channel", "status", "attempts", "last_error", "next_attempt_at", "sent_at", "edited_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Card)
class CardAdmin(ReadOnlyAdmin):
    list_display = [
        "title",
        "kind",
        "producer",
        "status",
        "subject",
        "expires_at",
        "responded_by",
        "answered_via",
        "handled_at",
    ]
    list_filter = ["status", "kind", "producer", "answered_via"]
    search_fields = ["title", "subject", "key"]
    date_hierarchy = "created_at"
    inlines = [DeliveryInline]
    actions = ["call_handler_again"]

    @admin.action(description="Call the producer's handler again (cards whose handler failed)")
    def call_handler_again(self, request: HttpRequest, queryset: QuerySet[Card]) -> None:
        ran = sum(retry_handler(card.pk) for card in queryset)
        self.message_user(request, f"Called the handler of {ran} card(s).", messages.SUCCESS)


@admin.register(Notice)
class NoticeAdmin(ReadOnlyAdmin):
    list_display = ["title", "kind", "producer", "subject", "created_at", "read_at"]
    list_filter = ["producer", "kind"]
    search_fields = ["title", "text", "subject"]


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "channel", "status", "attempts", "last_error", "next_attempt_at", "sent_at"]
    list_filter = ["channel", "status"]


@admin.register(TelegramUser)
class TelegramUserAdmin(admin.ModelAdmin):
    list_display = ["telegram_user_id", "user", "note"]
    search_fields = ["telegram_user_id", "user__username", "note"]
    autocomplete_fields = ["user"]


@admin.register(TelegramUpdate)
class TelegramUpdateAdmin(ReadOnlyAdmin):
    list_display = ["update_id", "received_at", "outcome"]
