"""The dashboard's "N need you": the page listing every wait on a person, and the navigation's count.

Both read ``evolution.needs_you.items`` — the same list ``loop_status``'s
``needsYou`` and the daily digest are built on. The navigation loads its
count with HTMX once the page has rendered (and every minute), so no page
pays for the list in its own queries.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe

from evolution.steering import needs_you
from evolution.views.pages import escaped

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
    context = {"items": shown, "rows_html": rows_html(shown), "count": count, "page": page, "pages": pages}
    return render(request, "evolution/needs_you.html", context)


@login_required
def needs_you_count(request: HttpRequest) -> HttpResponse:
    """The navigation's "N need you" (an HTMX fragment that keeps itself fresh)."""
    return render(request, "evolution/partials/needs_you_count.html", {"count": needs_you.count()})


def rows_html(items: list[dict[str, Any]]) -> SafeString:
    """The list's rows (a page of ``needs_you.page``'s items, badged) as one piece of HTML: what the template's loop
    over them rendered, each value escaped as the template escaped it (``pages.escaped``), built here without a template
    lookup or a filter's wrapper a value (a page's fifty rows cost their template a sixth of the page). A cycle's
    link is reversed once a page (an ``int`` converter's: ``str(id)`` in the path)."""
    from django.template.defaultfilters import capfirst

    from singularity.templatetags.singularity_tags import instant, local

    prefix, _, suffix = reverse("evolution:cycle", args=[987654321]).partition("987654321")
    parts = []
    for item in items:
        gate = escaped(item["gate"])
        cycle = ""
        if item["cycleId"]:
            rnd = f" · r{escaped(item['round'])}" if item["round"] else ""
            cycle = (
                f'<div class="small"><a href="{escaped(prefix)}{escaped(item["cycleId"])}{escaped(suffix)}">cycle '
                f"{escaped(item['cycleId'])}{rnd}</a></div>"
            )
        if item["targetKind"]:
            kind, slug = item["targetKind"], item["targetId"]
            entity = (
                f'<a href="{escaped(reverse("grading:entity", args=[kind, slug]))}">{escaped(item["name"] or slug)}</a>'
                f'<div class="muted small"><code>{escaped(kind)}:{escaped(slug)}</code></div>'
            )
        else:
            entity = '<span class="muted">—</span>'
        clause = f"<div>{escaped(item['clause'])}</div>" if item["clause"] else ""
        if item["card"]:
            where = "the card"
        elif item["pr"]:
            where = f"PR #{escaped(item['pr']['number'])}"
        else:
            where = "go there"
        since = escaped(instant(item["since"])) if item["since"] else ""
        until = escaped(instant(item["until"])) if item["until"] else '<span class="muted">until someone acts</span>'
        parts.append(
            f'\n    <tr class="needs-you-item" data-gate="{gate}">'
            f'\n      <td><span class="badge {escaped(item["badge"])}">{gate}</span>{cycle}</td>'
            f"\n      <td>{entity}</td>"
            f'\n      <td>{clause}<div class="small">{escaped(capfirst(item["next"]))} · '
            f'<a href="{escaped(local(item["url"]))}">{where}</a></div></td>'
            f'\n      <td class="small">{since}</td>'
            f'\n      <td class="small">{until}</td>'
            "\n    </tr>\n  "
        )
    return mark_safe("".join(parts))  # noqa: S308 - every value escaped (``escaped``)
