"""Slack's incoming webhook: ``text`` (the notification's fallback) and ``blocks``.

Slack answers 200 ``ok``; 400 ``invalid_payload`` and 403/404/410 ``no_service``/``channel_not_found``… are
permanent; 429 with ``Retry-After`` and 5xx are tried again.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from singularity.notify import transport

if TYPE_CHECKING:
    from singularity.notify.models import Delivery

#: Slack refuses a section's text over 3,000 characters and a header over 150.
SECTION_CHARS = 3000
HEADER_CHARS = 150


def _escape(text: str) -> str:
    """Slack's mrkdwn escapes: &, < and > (a link is written by us, never taken from the text)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def payload(delivery: Delivery) -> dict[str, Any]:
    data = delivery.payload
    title = delivery.title
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title[:HEADER_CHARS], "emoji": True}}
    ]
    if text := str(data.get("text") or ""):
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": _escape(text)[:SECTION_CHARS]}})
    if url := str(data.get("url") or ""):
        blocks.append(
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": data.get("link_text") or "Open"},
                        "url": url,
                    }
                ],
            }
        )
    return {"text": f"{_escape(title)} <{url}|open>" if url else _escape(title), "blocks": blocks}


def send(delivery: Delivery, url: str) -> transport.Answer:
    raw = json.dumps(payload(delivery), ensure_ascii=False).encode()
    return transport.post(url, raw, {"Content-Type": "application/json"})
