"""The entity page's Supervision section: holds, releases, re-arms and dismissals, and the forms that make them.

The section is a fragment the entity page loads with HTMX (a page of its
own without it). Hold, Release, Re-arm and Dismiss are POST forms for staff,
each going through ``evolution.supervision.move`` as the signed-in person —
the door the API and the admin use. With HTMX the answer is the section
again with what happened; without it, a redirect back to the entity page.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from evolution.models import Cycle, Supervision
from evolution.steering import supervision
from grading.models import Entity

SHOWN_ROWS = 30


def _get_entity(target_kind: str, slug: str) -> Entity:
    return get_object_or_404(Entity, target_kind=target_kind, slug=slug)


def supervision_context(entity: Entity) -> dict[str, Any]:
    """What the section shows: the standing hold, the breaker's pause, the groups, the rows, unread failures."""
    from evolution.steering import autonomy

    answer = supervision.overview(entity, limit=SHOWN_ROWS)
    return {
        "entity": entity,
        "held": answer["held"],
        "own_hold": supervision.standing_hold(entity),
        "paused": autonomy.paused(entity),
        "last_rearm": answer["lastRearm"],
        "groups": answer["groups"],
        "rows": supervision.rows_for(entity, limit=SHOWN_ROWS),
        "failures": list(supervision.failures_unread(entity)[:SHOWN_ROWS]),
    }


@login_required
def entity_supervision(request: HttpRequest, target_kind: str, slug: str) -> HttpResponse:
    """The entity's Supervision section: the fragment the entity page loads, or a page of its own."""
    entity = _get_entity(target_kind, slug)
    template = "evolution/_entity_supervision.html" if request.htmx else "evolution/entity_supervision.html"
    return render(request, template, supervision_context(entity))


def _target(entity: Entity, raw: str) -> Any:
    """The form's target: "entity" (this entity) or "group:<id>"."""
    if raw.startswith("group:"):
        return {"group": raw.removeprefix("group:")}
    return entity


def _answered(request: HttpRequest, entity: Entity, said: str, ok: bool) -> HttpResponse:
    if request.htmx:
        # A hold or a release changes what the Loop section offers too (Analyze now): it is swapped out of band.
        from evolution.views.pages import entity_cycles_context

        context = {**supervision_context(entity), "said": said, "said_ok": ok}
        section = render(request, "evolution/_entity_supervision.html", context)
        cycles = render(request, "evolution/_entity_cycles.html", {**entity_cycles_context(entity), "oob": True})
        section.content += cycles.content
        return section
    (messages.success if ok else messages.error)(request, said)
    return redirect(entity)


def _move(request: HttpRequest, target_kind: str, slug: str, op: str) -> HttpResponse:
    """Make one supervision move from the section's form as the signed-in staff person."""
    if not request.user.is_staff:
        return HttpResponseForbidden("Only staff supervise the loop.")
    entity = _get_entity(target_kind, slug)
    reason = request.POST.get("reason", "")
    cycle = None
    target: Any = entity
    try:
        if op == Supervision.Kind.DISMISS:
            cycle = Cycle.objects.filter(pk=request.POST.get("cycle") or 0, entity=entity).first()
            if cycle is None:
                raise supervision.Refusal("not_found", f"no cycle {request.POST.get('cycle')!r} of {entity}")
        elif op in (Supervision.Kind.HOLD, Supervision.Kind.RELEASE):
            target = _target(entity, request.POST.get("target", "entity"))
        row = supervision.move(
            op, target, actor=request.user.get_username(), reason=reason, agent=False, cycle=cycle
        ).row
    except supervision.Refusal as refused:
        return _answered(request, entity, refused.detail, False)
    what = (
        f"cycle {row.cycle_id}" if row.cycle_id else (str(row.entity) if row.entity_id else f"lock group {row.group}")
    )
    done = {"hold": "Held", "release": "Released", "rearm": "Re-armed", "dismiss": "Dismissed the failure of"}[op]
    return _answered(request, entity, f"{done} {what}.", True)


@login_required
@require_POST
def entity_hold(request: HttpRequest, target_kind: str, slug: str) -> HttpResponse:
    """Hold: no new cycle opens for the entity (or its group) until a release."""
    return _move(request, target_kind, slug, Supervision.Kind.HOLD)


@login_required
@require_POST
def entity_release(request: HttpRequest, target_kind: str, slug: str) -> HttpResponse:
    """Release the hold standing on the entity (or its group)."""
    return _move(request, target_kind, slug, Supervision.Kind.RELEASE)


@login_required
@require_POST
def entity_rearm(request: HttpRequest, target_kind: str, slug: str) -> HttpResponse:
    """Re-arm: lift the breaker's pause."""
    return _move(request, target_kind, slug, Supervision.Kind.REARM)


@login_required
@require_POST
def entity_dismiss(request: HttpRequest, target_kind: str, slug: str) -> HttpResponse:
    """Dismiss one of the entity's failed cycles from the unread failures."""
    return _move(request, target_kind, slug, Supervision.Kind.DISMISS)
