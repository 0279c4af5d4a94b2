"""The sweep: a reservation whose process died and whose being no one resumed is debited in full (issue 34)."""

from __future__ import annotations

import logging

from django.db.models import Q

from singularity.being import lease
from singularity.being.runtime import Runtime
from singularity.models import Being

log = logging.getLogger(__name__)


def settle_abandoned_reservations() -> list[str]:
    """Settle every reservation left by a process that is gone; return the names of the beings settled.

    A being a living process holds is left alone (its call may still be in
    flight); the lease is taken for the settlement, so a process resuming at
    the same moment waits for it or finds it done.
    """
    settled = []
    held = Being.objects.filter(Q(reserved_api__gt=0) | Q(reserved_instance__gt=0))
    for being in held:
        if lease.is_live(being):
            continue
        owner = lease.owner_id("sweep")
        if not lease.acquire(being, owner):
            continue
        try:
            being.refresh_from_db()
            Runtime(being, gateway=None, catalogue=None, owner=owner).settle_interrupted()  # type: ignore[arg-type]
            settled.append(being.name)
            log.info("being %s: an abandoned reservation was debited in full", being.name)
        finally:
            lease.release(being, owner)
    return settled
