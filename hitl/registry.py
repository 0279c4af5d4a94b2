"""Which function hears the answer to which cards: one handler per (producer, kind).

Producers register in their ``AppConfig.ready()``. A handler takes the closed
card (answered, expired or cancelled) and returns nothing; it runs once, in
its own transaction, after the answer has committed. Heavy work belongs in a
task the handler enqueues.

A producer may also register a card's *detail* (``register_detail``): HTML the
card's own page shows of what the card is about (a rating card's run, a decide
card's evidence runs), drawn when the page is, so it shows the subject as it
stands. ``replaces_text`` shows it in place of the card's text (which Telegram
gets); otherwise after it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hitl.models import Card

Handler = Callable[["Card"], None]

_handlers: dict[tuple[str, str], Handler] = {}

#: A card's detail: the card → HTML (safe) the card's page shows.
Detail = Callable[["Card"], str]
_details: dict[tuple[str, str], tuple[Detail, bool]] = {}


def register(producer: str, kind: str, handler: Handler) -> None:
    """Make ``handler`` the one called for closed cards of ``producer`` and ``kind`` (replacing any before)."""
    _handlers[(producer, kind)] = handler


def unregister(producer: str, kind: str) -> None:
    """Forget the handler of ``producer`` and ``kind``, if any (for tests)."""
    _handlers.pop((producer, kind), None)


def handler_for(producer: str, kind: str) -> Handler | None:
    """Return the handler registered for ``producer`` and ``kind``, or None."""
    return _handlers.get((producer, kind))


def register_detail(producer: str, kind: str, detail: Detail, *, replaces_text: bool = False) -> None:
    """Make ``detail`` draw what the card's page shows of the subject of ``producer``'s ``kind`` cards."""
    _details[(producer, kind)] = (detail, replaces_text)


def unregister_detail(producer: str, kind: str) -> None:
    """Forget the detail of ``producer`` and ``kind``, if any (for tests)."""
    _details.pop((producer, kind), None)


def detail_for(producer: str, kind: str) -> tuple[Detail, bool] | None:
    """Return (the detail, whether it replaces the card's text) of ``producer`` and ``kind``, or None."""
    return _details.get((producer, kind))
