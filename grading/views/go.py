"""The permanent short link of a run (seed 003, R4.23): ``/evolution/go/run:<id>/`` answers with the run's page,
wherever that page lives now — what a rating card and a notice carry, so the link outlives a change of routes."""

from __future__ import annotations

import uuid

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect

from grading.models import Execution


@login_required
def go_run(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """Redirect to run ``run_id``'s page; 404 when no run has that id."""
    execution = Execution.objects.filter(pk=run_id).only("pk", "run_kind").first()
    if execution is None:
        raise Http404(f"run {run_id} names no run")
    return redirect(execution.get_absolute_url())


def short_link(execution: Execution) -> str:
    """The run's permanent short link (a path)."""
    from django.urls import reverse

    return reverse("grading:go-run", args=[execution.pk])
