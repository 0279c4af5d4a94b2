"""Routes of the inbox, the Telegram webhook and (under ``api/``) the cards API."""

from django.urls import include, path

from hitl import views

urlpatterns = [
    path("inbox/", views.inbox, name="hitl-inbox"),
    path("inbox/cards/<uuid:card_id>/", views.card_detail, name="hitl-card"),
    path("inbox/cards/<uuid:card_id>/answer/", views.card_answer, name="hitl-card-answer"),
    path("inbox/notices/<int:notice_id>/read/", views.notice_read, name="hitl-notice-read"),
    path("telegram/webhook/", views.telegram_webhook, name="hitl-telegram-webhook"),
    path("api/", include("hitl.api_urls")),
]
