"""A being living under Celery: beat wakes it, one cycle at a time, the database deciding who runs it."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from singularity.being import lease
from singularity.being.actions import finish_stopped
from singularity.being.runtime import Runtime
from singularity.being.storable import storable_text
from singularity.errors import UpstreamError
from singularity.models import Being, Cycle

log = logging.getLogger(__name__)

#: A woken being is not woken again for this long unless its cycle finishes first.
DISPATCH_HOLD = timedelta(seconds=60)


def wake_due_beings() -> list[int]:
    """Claim every worker-hosted being whose next cycle is due; returns their ids to enqueue."""
    now = timezone.now()
    due = Being.objects.filter(
        Q(status=Being.Status.RUNNING, next_cycle_at__lte=now) | Q(status=Being.Status.STOPPING),
        host=Being.Host.WORKER,
    ).values_list("pk", "next_cycle_at")
    claimed = []
    for pk, when in due:
        # Conditional update: two beats racing claim each being once.
        if Being.objects.filter(pk=pk, next_cycle_at=when).update(next_cycle_at=now + DISPATCH_HOLD) == 1:
            claimed.append(pk)
    return claimed


def run_worker_cycle(being_id: int) -> bool:
    """Run one cycle of a worker-hosted being if no one else holds it. Returns whether a cycle ran."""
    from singularity.gateway import get_gateway
    from singularity.tools import build_catalogue

    being = Being.objects.filter(pk=being_id).first()
    if being is None:
        return False
    owner = lease.owner_id("worker")
    hosted = Q(status__in=[Being.Status.RUNNING, Being.Status.STOPPING], host=Being.Host.WORKER)
    if not lease.acquire(being, owner, extra=hosted):
        return False
    try:
        being.refresh_from_db()
        if being.status == Being.Status.STOPPING:
            finish_stopped(being, by=owner, owner=owner)
            return False
        with build_catalogue() as catalogue:
            runtime = Runtime(
                being,
                gateway=get_gateway(),
                catalogue=catalogue,
                owner=owner,
                should_stop=lambda: lease.stop_requested(being),
            )
            try:
                report = runtime.run_cycle()
            except UpstreamError as exc:
                if exc.permanent:
                    finish_stopped(being, by=owner, reason=storable_text(str(exc))[:2000], owner=owner)
                    return True
                log.warning("being %s: cycle failed, will retry next interval: %s", being.name, exc)
                report = None
        being.refresh_from_db()
        exhausted = report is not None and report.status == Cycle.Status.BUDGET_EXHAUSTED
        if being.status == Being.Status.STOPPING or exhausted:
            finish_stopped(being, by=owner, owner=owner, exhausted=exhausted)
        else:
            next_at = timezone.now() + timedelta(seconds=settings.SINGULARITY_CYCLE_INTERVAL_SECS)
            Being.objects.filter(pk=being_id, status=Being.Status.RUNNING, lease_owner=owner).update(
                next_cycle_at=next_at
            )
        return True
    finally:
        lease.release(being, owner)
