"""The inbox's template tags: a card's detail, drawn by its producer (``hitl.registry.register_detail``)."""

from __future__ import annotations

import logging
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from hitl import registry

log = logging.getLogger(__name__)
register = template.Library()


@register.simple_tag
def card_detail(card: Any) -> dict[str, Any]:
    """``{"html", "replaces_text"}`` of the card's detail; ``html`` empty when its producer registered none.

    A detail that fails is said on the card (the card stays answerable), and logged.
    """
    entry = registry.detail_for(card.producer, card.kind)
    if entry is None:
        return {"html": "", "replaces_text": False}
    draw, replaces_text = entry
    try:
        html: SafeString = mark_safe(draw(card))  # noqa: S308 - the producer's template escaped it
    except Exception as exc:  # a producer's bug must not take the card's page down
        log.exception("the detail of card %s (%s %s) failed", card.pk, card.producer, card.kind)
        html = format_html('<p class="error small">What this card is about could not be shown: {}</p>', exc)
        replaces_text = False
    return {"html": html, "replaces_text": replaces_text and bool(html)}
