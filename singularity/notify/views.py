"""The people's page of outbound notifications: each destination with its delivery log."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from singularity.notify.events import EVENTS
from singularity.notify.models import Delivery, Destination

PER_PAGE = 50


@login_required
def destinations(request: HttpRequest) -> HttpResponse:
    rows = Destination.objects.annotate(
        sent=Count("deliveries", filter=Q(deliveries__status=Delivery.Status.SENT)),
        waiting=Count(
            "deliveries", filter=Q(deliveries__status__in=[Delivery.Status.PENDING, Delivery.Status.RETRYING])
        ),
        failed=Count("deliveries", filter=Q(deliveries__status=Delivery.Status.FAILED)),
    )
    return render(request, "notify/destinations.html", {"destinations": rows, "here": "notify"})


@login_required
def destination_log(request: HttpRequest, name: str) -> HttpResponse:
    destination = get_object_or_404(Destination, name=name)
    page = Paginator(destination.deliveries.order_by("-created_at"), PER_PAGE).get_page(request.GET.get("page"))
    return render(
        request,
        "notify/destination.html",
        {"destination": destination, "page": page, "events": EVENTS, "here": "notify"},
    )
