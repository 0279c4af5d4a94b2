"""The long-running loop of ``being run`` and ``being once`` (seed 000, "How the loop continues and ends")."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db import DatabaseError, InterfaceError, OperationalError, close_old_connections, connection

from singularity.being import lease
from singularity.being.actions import finish_stopped
from singularity.being.runtime import CatalogueLike, CycleReport, GatewayLike, Runtime
from singularity.being.storable import storable_text
from singularity.errors import StateError, UpstreamError
from singularity.models import Being, Cycle, Event

log = logging.getLogger(__name__)

#: How often the wait between cycles looks for a stop asked from the page or the API.
STOP_POLL_SECS = 0.5

#: Errors of the database itself (a lost connection, a lock not granted in time): state I/O, which passes.
STATE_IO_ERRORS = (OperationalError, InterfaceError)


@dataclass
class Outcome:
    """How a hosted run ended: the last report, and the error that aborted it, if any."""

    report: CycleReport | None
    error: Exception | None = None


class Host:
    """Runs a being in this process until it is exhausted, stopped, or (for ``once``) one cycle is done.

    Every write goes through the lease: once another process holds it, this
    one writes nothing more, its shutdown included.
    """

    def __init__(
        self,
        being: Being,
        *,
        gateway: GatewayLike,
        catalogue: CatalogueLike,
        stop: threading.Event,
        interval: float,
        close_catalogue: Callable[[], None],
        model: str = "",
    ) -> None:
        self.being = being
        #: A model a person chose on the command line (``--model``): the being thinks with it from now on.
        self.model = model
        self.stop = stop
        self.interval = interval
        self.owner = lease.owner_id("cli")
        self.close_catalogue = close_catalogue
        self.runtime = Runtime(
            being, gateway=gateway, catalogue=catalogue, owner=self.owner, should_stop=self._should_stop
        )

    def _should_stop(self) -> bool:
        """A signal to this process, or a stop asked from the page, the API or the admin (read from the row)."""
        return self.stop.is_set() or lease.stop_requested(self.being)

    def _begin(self) -> None:
        being = self.being
        if not lease.acquire(being, self.owner):
            being.refresh_from_db()
            raise StateError(
                f"being {being.name} is being run by {being.lease_owner} until {being.lease_until:%Y-%m-%d %H:%M:%S %Z}"
            )
        # Read what the previous holder wrote up to the moment we took over (its journal numbers, its budget).
        being.refresh_from_db()
        started = Being.objects.filter(pk=being.pk, lease_owner=self.owner).update(
            status=Being.Status.RUNNING, host=Being.Host.CLI, last_error=""
        )
        if not started:
            raise lease.LeaseLost(being)
        being.status, being.host = Being.Status.RUNNING, Being.Host.CLI
        journal = self.runtime.journal
        started: dict[str, str] = {"host": "cli", "owner": self.owner}
        if self.model and self.model != being.model:
            started.update(model=self.model, model_was=being.model)
            being.model = self.model
        journal.emit(Event.Kind.STARTED, started)
        journal.save(owner=self.owner)

    def run(self, *, once: bool) -> Outcome:
        """Run cycles; always shut down cleanly (stopping, close tools within the grace, stopped event)."""
        self._begin()
        outcome = Outcome(report=None)
        try:
            outcome = self._cycles(once=once)
        finally:
            self._shutdown(outcome)
        return outcome

    def _cycles(self, *, once: bool) -> Outcome:
        outcome = Outcome(report=None)
        while not self._stop_asked():
            close_old_connections()
            try:
                outcome.report = self.runtime.run_cycle()
            except UpstreamError as exc:
                if exc.permanent or once:
                    outcome.error = exc
                    return outcome
                log.warning("being %s: cycle failed, will retry: %s", self.being.name, exc)
            except STATE_IO_ERRORS as exc:
                if once:
                    outcome.error = StateError(f"being {self.being.name}: state I/O: {exc}")
                    return outcome
                # R1.27: journaled as a warning (now, or when the database answers again) and the loop goes on.
                log.warning("being %s: state I/O error, will retry after the interval: %s", self.being.name, exc)
                _drop_connection()
            except Exception as exc:  # noqa: BLE001 - recorded by the runtime; ends the run with its exit code
                outcome.error = exc
                return outcome
            if outcome.report is not None and outcome.report.status == Cycle.Status.BUDGET_EXHAUSTED:
                return outcome
            if once:
                return outcome
            self._wait()
        return outcome

    def _stop_asked(self) -> bool:
        """``_should_stop`` between cycles, where a database that does not answer means "not asked"."""
        try:
            return self._should_stop()
        except STATE_IO_ERRORS as exc:
            log.warning("being %s: cannot read a stop request: %s", self.being.name, exc)
            _drop_connection()
            return self.stop.is_set()

    def _wait(self) -> None:
        """Sleep the cycle interval, ending early on a signal or a stop asked from elsewhere."""
        deadline = time.monotonic() + self.interval
        while (left := deadline - time.monotonic()) > 0:
            if self.stop.wait(min(left, STOP_POLL_SECS)) or self._stop_asked():
                return

    def _shutdown(self, outcome: Outcome) -> None:
        """Stopping, close the tools, then stopped or exhausted with a final event — all only while we hold the lease."""
        try:
            self.close_catalogue()
        finally:
            self.runtime.journal.discard()
            if not isinstance(outcome.error, lease.LeaseLost):
                self._record_shutdown(outcome)

    def _record_shutdown(self, outcome: Outcome) -> None:
        try:
            self._finish(outcome)
        except lease.LeaseLost:
            log.warning("being %s: lease lost before shutdown; nothing written", self.being.name)
        except DatabaseError as exc:
            # The lease expires (or is taken over at once by --resume, our process being gone).
            log.warning("being %s: cannot record the shutdown: %s", self.being.name, exc)

    def _finish(self, outcome: Outcome) -> None:
        being = self.being
        close_old_connections()
        if not Being.objects.filter(pk=being.pk, lease_owner=self.owner).update(status=Being.Status.STOPPING):
            raise lease.LeaseLost(being)
        reason = storable_text(str(outcome.error))[:2000] if outcome.error else ""
        exhausted = outcome.report is not None and outcome.report.status == Cycle.Status.BUDGET_EXHAUSTED
        finish_stopped(being, by=self.owner, reason=reason, owner=self.owner, exhausted=exhausted)
        lease.release(being, self.owner)


def _drop_connection() -> None:
    """Close a database connection that failed, so the next query opens a fresh one."""
    try:
        connection.close()
    except DatabaseError as exc:
        log.warning("closing the failed database connection: %s", exc)
