"""The dashboard's "N need you": the page listing every wait on a person, and the navigation's count.

Both read ``evolution.needs_you.items`` — the same list ``loop_status``'s
``needsYou`` and the daily digest are built on. The navigation loads its
count with HTMX once the page has rendered (and every minute), so no page
pays for the list in its own queries.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from evolution.steering import needs_you

#: A gate → the badge colour the stylesheet already has.
GATE_BADGE = {"failure": "failed", "config": "failed", "rearm": "stopped", "stall": "stopped"}


#: Waits one page lists (the list grows with the fleet; the count heads every page).
PER_PAGE = 50


@login_required
def needs_you_page(request: HttpRequest) -> HttpResponse:
    """Every place the loop waits for a person, oldest first, each saying who acts and where: 50 a page."""
    text = request.GET.get("page", "")
    asked = int(text) if text.isdigit() and int(text) > 0 else 1
    count, shown = needs_you.page(start=(asked - 1) * PER_PAGE, stop=asked * PER_PAGE)
    pages = max(1, -(-count // PER_PAGE))
    page = min(asked, pages)
    if page != asked:  # past the last page: the last one (built only once the count is known)
        count, shown = needs_you.page(start=(page - 1) * PER_PAGE, stop=page * PER_PAGE)
    for item in shown:
        item["badge"] = GATE_BADGE.get(item["gate"], "warning")
    context = {"items": shown, "count": count, "page": page, "pages": pages}
    return render(request, "evolution/needs_you.html", context)


@login_required
def needs_you_count(request: HttpRequest) -> HttpResponse:
    """The navigation's "N need you" (an HTMX fragment that keeps itself fresh)."""
    return render(request, "evolution/partials/needs_you_count.html", {"count": needs_you.count()})
