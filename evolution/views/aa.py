"""The A/A panel of an entity's Policy view (issue 31): the last reports, and a form that records one (staff).

Calls ``evolution.loop.aa.request`` — the function the API and the command
call; the report runs on a worker and the panel shows it running until it
is done. The form works without JavaScript (a redirect back).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render

from evolution.loop import aa, freeze
from evolution.models import AaReport
from grading.models import Entity

SHOWN = 5


def settings_words(entity: Entity) -> str:
    """The check's and the watch's settings the reports calibrate, in words."""
    from evolution.loop import watch

    check = freeze.check_terms(entity)
    runs, failures = watch.sizes(entity)
    said = []
    if freeze.check_mode(entity) == freeze.REPLAY:
        said.append(f"the check replays {check.get('inputs')} inputs × {check.get('trials') or 1}")
    else:
        said.append("no pre-merge check")
    said.append(f"the watch reads {runs} runs and regresses at {failures} bad")
    return "; ".join(said)


def context(entity: Entity, **extra: Any) -> dict[str, Any]:
    return {
        "entity": entity,
        "aa_reports": list(AaReport.objects.filter(entity=entity)[:SHOWN]),
        "aa_settings": settings_words(entity),
        **extra,
    }


@login_required
def entity_aa(request: HttpRequest, target_kind: str, slug: str) -> HttpResponse:
    """GET: the panel. POST (staff): record an A/A report (a worker runs it), then show the panel again."""
    entity = get_object_or_404(Entity, target_kind=target_kind, slug=slug)
    if request.method != "POST":
        return render(request, "evolution/partials/aa_panel.html", context(entity))
    if not request.user.is_staff:
        return HttpResponseForbidden("Only staff run A/A calibrations.")
    error = ""
    try:
        trials = int((request.POST.get("trials") or "20").strip())
    except ValueError:
        error = f"trials: {request.POST.get('trials')!r} is not a whole number"
    else:
        try:
            aa.request(entity, trials=trials, actor=request.user.get_username())
        except aa.AaRefused as exc:
            error = str(exc)
    if not request.htmx:
        if error:
            from django.contrib import messages

            messages.error(request, error)
        return redirect(entity)
    return render(request, "evolution/partials/aa_panel.html", context(entity, aa_error=error))
