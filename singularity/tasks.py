"""Celery tasks: thin wrappers that take ids and call actions.

Each logs one INFO line when it did something (a cycle ran) and nothing at
INFO when it did not (a wake with no being due): Celery's own lines for these
routine tasks are dropped by ``singularity.log_filters``.
"""

import logging

from celery import shared_task

from singularity.being.worker import run_worker_cycle, wake_due_beings
from singularity.display import usd_text
from singularity.models import Cycle

log = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def wake_beings() -> int:
    """Enqueue one cycle for every worker-hosted being that is due."""
    ids = wake_due_beings()
    for being_id in ids:
        log.debug("woke being %s", being_id)
        run_being_cycle.delay(being_id)
    return len(ids)


@shared_task(ignore_result=True)
def settle_reservations() -> int:
    """Debit in full the reservations of beings whose process died and that no one resumed."""
    from singularity.being.sweep import settle_abandoned_reservations

    return len(settle_abandoned_reservations())


@shared_task(ignore_result=True)
def run_being_cycle(being_id: int) -> bool:
    ran = run_worker_cycle(being_id)
    if ran:
        _log_cycle(being_id)
    else:
        log.debug("being %s: no cycle (held elsewhere, stopped or gone)", being_id)
    return ran


def _log_cycle(being_id: int) -> None:
    """Log the being's latest cycle as one line: its number, status, spend, earnings and the balance after."""
    cycle = Cycle.objects.filter(being_id=being_id).select_related("being").order_by("-number").first()
    if cycle is None:
        return
    being = cycle.being
    log.info(
        "being %s: cycle %d %s, spent %s, earned %s, balance %s",
        being.name,
        cycle.number,
        cycle.status.replace("_", " "),
        usd_text(cycle.spent),
        usd_text(cycle.earned),
        usd_text(being.remaining),
    )
