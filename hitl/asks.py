"""An agent's asks of people: how many of its approval cards may wait at once (issue 27; here since issue 29).

Every card an agent's call opens for a person's approval — a loop-settings
widen card, an idea's approval, a supervision move, a relayed rating — names the agent in its
payload (``asker``: "agent:<token name> of <username>"). At most
``LOOP_AGENT_MAX_PENDING_CARDS`` (20) of them wait at once, across producers;
the next ask is refused naming the cap and how many wait, with nothing written.
Asking again for a request whose card already waits finds that card and is
never refused (each producer looks for it first).
"""

from __future__ import annotations

from django.conf import settings
from django.utils import timezone

#: The payload key that names who asked.
ASKER = "asker"

#: The refusal's code (the APIs answer it 429).
TOO_MANY = "too_many_pending"

#: How many of one agent's asks may wait when settings.LOOP_AGENT_MAX_PENDING_CARDS says nothing.
MAX_PENDING = 20


def asker_for(username: str, token_name: str) -> str:
    """An agent's name as its cards carry it: "agent:<token name> of <username>" (200 characters at most)."""
    return f"agent:{token_name} of {username}"[:200]


def max_pending() -> int:
    """How many of one agent's asks may wait on people at once (settings.LOOP_AGENT_MAX_PENDING_CARDS)."""
    return int(getattr(settings, "LOOP_AGENT_MAX_PENDING_CARDS", MAX_PENDING))


def waiting(asker: str) -> int:
    """How many of ``asker``'s cards wait on a person now (pending and not past their deadline), any producer."""
    from hitl.models import Card

    return Card.objects.filter(status=Card.Status.PENDING, expires_at__gt=timezone.now(), payload__asker=asker).count()


def over_cap(asker: str) -> str | None:
    """The refusal's sentence when ``asker`` already has the most cards a person may be asked at once; else None."""
    cap, count = max_pending(), waiting(asker)
    if count < cap:
        return None
    return (
        f"{asker} has {count} asks waiting on a person (the cap is {cap}, LOOP_AGENT_MAX_PENDING_CARDS): "
        "nothing was asked; wait until a person answers some of them"
    )
