"""The long-running loop of ``being run`` and ``being once`` (seed 000, "How the loop continues and ends")."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from django.db import close_old_connections

from singularity.being import lease
from singularity.being.actions import finish_stopped
from singularity.being.runtime import CatalogueLike, CycleReport, GatewayLike, Runtime
from singularity.errors import StateError, UpstreamError
from singularity.models import Being, Cycle, Event

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """How a hosted run ended: the last report, and the error that aborted it, if any."""

    report: CycleReport | None
    error: Exception | None = None


class Host:
    """Runs a being in this process until it is exhausted, stopped, or (for ``once``) one cycle is done."""

    def __init__(
        self,
        being: Being,
        *,
        gateway: GatewayLike,
        catalogue: CatalogueLike,
        stop: threading.Event,
        interval: float,
        close_catalogue: callable,  # type: ignore[valid-type]
    ) -> None:
        self.being = being
        self.stop = stop
        self.interval = interval
        self.owner = lease.owner_id("cli")
        self.close_catalogue = close_catalogue
        self.runtime = Runtime(being, gateway=gateway, catalogue=catalogue, owner=self.owner, should_stop=stop.is_set)

    def _begin(self) -> None:
        being = self.being
        if not lease.acquire(being, self.owner):
            being.refresh_from_db()
            raise StateError(
                f"being {being.name} is being run by {being.lease_owner} until {being.lease_until:%Y-%m-%d %H:%M:%S %Z}"
            )
        Being.objects.filter(pk=being.pk).update(status=Being.Status.RUNNING, host=Being.Host.CLI, last_error="")
        being.status, being.host = Being.Status.RUNNING, Being.Host.CLI
        journal = self.runtime.journal
        journal.emit(Event.Kind.STARTED, {"host": "cli", "owner": self.owner})
        journal.save(owner=self.owner)

    def run(self, *, once: bool) -> Outcome:
        """Run cycles; always shut down cleanly (stopping, close tools within the grace, stopped event)."""
        self._begin()
        outcome = Outcome(report=None)
        try:
            outcome = self._cycles(once=once)
        except Exception as exc:
            outcome.error = exc
            Being.objects.filter(pk=self.being.pk).update(last_error=str(exc)[:2000])
            raise
        finally:
            self._shutdown(outcome)
        return outcome

    def _cycles(self, *, once: bool) -> Outcome:
        outcome = Outcome(report=None)
        while not self.stop.is_set():
            close_old_connections()
            try:
                outcome.report = self.runtime.run_cycle()
            except UpstreamError as exc:
                if exc.permanent:
                    outcome.error = exc
                    return outcome
                log.warning("being %s: cycle failed, will retry: %s", self.being.name, exc)
                if once:
                    outcome.error = exc
                    return outcome
            if outcome.report is not None and outcome.report.status == Cycle.Status.BUDGET_EXHAUSTED:
                return outcome
            if once:
                return outcome
            self.stop.wait(self.interval)
        return outcome

    def _shutdown(self, outcome: Outcome) -> None:
        being = self.being
        Being.objects.filter(pk=being.pk, lease_owner=self.owner).update(status=Being.Status.STOPPING)
        try:
            self.close_catalogue()
        finally:
            reason = str(outcome.error) if outcome.error else ""
            self.runtime.journal.discard()
            finish_stopped(being, by=self.owner, reason=reason)
            lease.release(being, self.owner)
