"""The inbox: cards waiting for a person, their history, notices; and the Telegram webhook.

Answering works with HTMX (the card's partial is swapped in place, with the
notices and the navigation count out of band) and without JavaScript (a plain
POST and a redirect back). The cards waiting and the history are paged apart
(``?pending=`` and ``?page=``), each pager keeping the other's page.
"""

from __future__ import annotations

import hmac
import logging
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from hitl.actions import answer_card, mark_notice_read
from hitl.channels import telegram_enabled
from hitl.models import Card, Notice
from singularity import json_input

logger = logging.getLogger(__name__)

PENDING_PER_PAGE = 20
HISTORY_PER_PAGE = 20
NOTICES_SHOWN = 20


def _cards() -> QuerySet[Card]:
    return Card.objects.select_related("responded_by").prefetch_related("deliveries")


def _get_card(card_id: UUID) -> Card:
    return get_object_or_404(_cards(), pk=card_id)


def _notices() -> list[Notice]:
    """Return the newest notices, unread first."""
    return list(Notice.objects.order_by("read_at", "-created_at")[:NOTICES_SHOWN])


def _back(request: HttpRequest) -> HttpResponse:
    """Redirect to ``next`` when it is a safe local address, else to the inbox."""
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = ""
    return redirect(target or "hitl-inbox")


def _pending_page(number: Any) -> Any:
    """One page of the cards waiting for a person, the newest first (``?pending=``).

    A page, not every one: each pending card carries its answer form, and at fleet scale some 80 wait at once.
    Like the history's page, a number that is not one reads as the first page and one out of range as the last.
    """
    pending = _cards().filter(status=Card.Status.PENDING).order_by("-created_at")
    return Paginator(pending, PENDING_PER_PAGE).get_page(number)


def _history_page(number: Any) -> Any:
    """One page of answered, expired and cancelled cards, the newest answer first."""
    history = _cards().exclude(status=Card.Status.PENDING).order_by("-responded_at", "-created_at")
    return Paginator(history, HISTORY_PER_PAGE).get_page(number)


def _path(url: str) -> str:
    return urlsplit(url).path


@login_required
def inbox(request: HttpRequest) -> HttpResponse:
    pending = _pending_page(request.GET.get("pending"))
    context = {
        "pending": pending,
        "history": _history_page(request.GET.get("page")),
        "notices": _notices(),
        # The pager's count is the navigation's: counted once, not again by the context processor.
        "inbox_pending": pending.paginator.count,
        # Each pager keeps the other's page in its links (``{% querystring inbox_query ... %}``).
        "inbox_query": request.GET,
    }
    return render(request, "hitl/inbox.html", context)


@login_required
def card_detail(request: HttpRequest, card_id: UUID) -> HttpResponse:
    # The card's own page draws what its producer shows of its subject (a rating card's run); the inbox does not.
    return render(request, "hitl/card.html", {"card": _get_card(card_id), "with_detail": True})


def _answer_inputs(request: HttpRequest, card: Card) -> dict[str, Any]:
    """Return the answer's fields from the posted form (a value per metric for a form card)."""
    values = {str(m["metric_id"]): request.POST.get(f"value_{m['metric_id']}", "") for m in card.metrics}
    return {
        "choice": request.POST.get("choice", ""),
        "note": request.POST.get("note", ""),
        "refinement": request.POST.get("refinement", ""),
        "values": values,
    }


@login_required
@require_POST
def card_answer(request: HttpRequest, card_id: UUID) -> HttpResponse:
    card = _get_card(card_id)
    result = answer_card(
        card.pk, user=request.user, is_agent=False, via=Card.Via.DASHBOARD, **_answer_inputs(request, card)
    )
    if request.htmx:
        context = {
            "card": _get_card(card_id),
            "result": result,
            "notices": _notices(),
            "inbox_pending": Card.objects.filter(status=Card.Status.PENDING).count(),
            "oob": True,
        }
        if (
            result.ok
            and request.htmx.current_url_abs_path
            and _path(request.htmx.current_url_abs_path) == reverse("hitl-inbox")
        ):
            # In the inbox the answered card moves from "Waiting for you" to the top of History (its first page),
            # and the count of pending cards follows out of band. The freed slot on the page of pending cards is
            # not refilled with the next one (nor is the "Showing 1–20" line redrawn) until the next load.
            context["history"] = _history_page(None)
            inbox_query = QueryDict(urlsplit(request.htmx.current_url_abs_path).query, mutable=True)
            inbox_query.pop("page", None)
            context["inbox_query"] = inbox_query
            return render(request, "hitl/partials/answered_in_inbox.html", context)
        return render(request, "hitl/partials/card.html", context)
    if result.ok:
        messages.success(request, f"{card.title}: {result.detail}.")
    else:
        messages.error(request, f"{card.title}: {result.detail}.")
    return _back(request)


@login_required
@require_POST
def notice_read(request: HttpRequest, notice_id: int) -> HttpResponse:
    notice = get_object_or_404(Notice, pk=notice_id)
    mark_notice_read(notice.pk)
    if request.htmx:
        notice.refresh_from_db()
        return render(request, "hitl/partials/notice.html", {"notice": notice})
    return _back(request)


@csrf_exempt
@require_POST
def telegram_webhook(request: HttpRequest) -> HttpResponse:
    """Receive one Telegram update: 404 when Telegram is off, 403 without the secret, 200 for anything else."""
    if not telegram_enabled():
        raise Http404("Telegram is not configured")
    secret = settings.TELEGRAM_WEBHOOK_SECRET
    given = request.headers.get("X-Telegram-Bot-Api-Secret-Token", "")
    # Compared as bytes (compare_digest refuses a str past ASCII); surrogatepass: no header text can raise here.
    if not secret or not hmac.compare_digest(given.encode("utf-8", "surrogatepass"), secret.encode()):
        return HttpResponseForbidden("bad or missing secret token")
    try:
        data = json_input.loads(request.body)
    except json_input.JsonRefused as exc:
        return HttpResponse(f"ignored: {exc}", content_type="text/plain")
    from hitl.channels.telegram import handle_update

    outcome = handle_update(data)
    logger.info("telegram update: %s", outcome)
    return HttpResponse(outcome, content_type="text/plain")
