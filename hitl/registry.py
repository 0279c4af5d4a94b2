"""Which function hears the answer to which cards: one handler per (producer, kind).

Producers register in their ``AppConfig.ready()``. A handler takes the closed
card (answered, expired or cancelled) and returns nothing; it runs once, in
its own transaction, after the answer has committed. Heavy work belongs in a
task the handler enqueues.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hitl.models import Card

Handler = Callable[["Card"], None]

_handlers: dict[tuple[str, str], Handler] = {}


def register(producer: str, kind: str, handler: Handler) -> None:
    """Make ``handler`` the one called for closed cards of ``producer`` and ``kind`` (replacing any before)."""
    _handlers[(producer, kind)] = handler


def unregister(producer: str, kind: str) -> None:
    """Forget the handler of ``producer`` and ``kind``, if any (for tests)."""
    _handlers.pop((producer, kind), None)


def handler_for(producer: str, kind: str) -> Handler | None:
    """Return the handler registered for ``producer`` and ``kind``, or None."""
    return _handlers.get((producer, kind))
