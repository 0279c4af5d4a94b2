"""loop:autonomy grants: one approved loop_widen card covers the asking agent's further widenings (R12.22).

The seed scopes a grant to the context that asked — 24 hours for one agent or
scenario, 30 days for a heartbeat, a hook or a bare MCP session's principal.
Here the only agent surface of loop_widen is the REST API, where the context is
one agent token: a grant covers that token for ``HOURS`` with no call limit.
A person's Approve on a widen card that widened oversight mints it (``mint``);
"Approve once" makes the write and mints nothing, so the next widening asks
again. While a grant stands (``active``), the agent's widening is made unasked,
stamped with the grant and who approved it, and counted (``use``). It covers
widenings of oversight only: a write that also loosens spend, the check or the
watch (issue 27's gate) still waits on a card.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import F, Q
from django.utils import timezone

from evolution.models import WidenGrant

#: How long a grant lasts: the seed's lifetime for one agent.
HOURS = 24
#: The widen card's button that makes the write without minting a grant (the seed's custom flow, maxCalls 1).
APPROVE_ONCE = "approve_once"


def _standing(now: datetime) -> Q:
    return Q(revoked_at=None, expires_at__gt=now) & (Q(max_calls=None) | Q(calls__lt=F("max_calls")))


def active(token_id: Any, *, now: datetime | None = None) -> WidenGrant | None:
    """The standing grant of the agent token ``token_id`` (the newest), or None (also for no token)."""
    if token_id is None:
        return None
    now = now or timezone.now()
    return (
        WidenGrant.objects.select_related("granted_by")
        .filter(_standing(now), token_id=token_id)
        .order_by("-expires_at")
        .first()
    )


def use(grant: WidenGrant) -> bool:
    """Count one widening made under ``grant``; False when it stopped standing meanwhile."""
    return bool(WidenGrant.objects.filter(_standing(timezone.now()), pk=grant.pk).update(calls=F("calls") + 1))


def actor_under(grant: WidenGrant, asker: str) -> str:
    """Who made a write under ``grant``, as the action log and the commit carry it."""
    person = grant.granted_by.get_username() if grant.granted_by is not None else "someone"
    return f"{asker} (grant {grant.pk} approved by {person})"


def mint(card: Any) -> WidenGrant | None:
    """The grant an approved widen card mints for the agent token that asked (its payload's ``scope``), or None
    when the card asked no widening of oversight or names no agent token."""
    payload = card.payload or {}
    token_id = payload.get("scope")
    if token_id is None or not payload.get("widened"):
        return None
    from singularity.models import ApiToken

    if not ApiToken.objects.filter(pk=token_id).exists():
        return None
    now = timezone.now()
    grant, _ = WidenGrant.objects.get_or_create(
        card_id=card.pk,
        defaults={
            "asker": str(payload.get("asker") or "")[:200],
            "token_id": token_id,
            "granted_by": card.responded_by,
            "created_at": now,
            "expires_at": now + timedelta(hours=HOURS),
        },
    )
    return grant
