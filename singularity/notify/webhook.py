"""The generic webhook: the event as JSON, signed with the destination's shared secret."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from singularity.notify import signing, transport

if TYPE_CHECKING:
    from singularity.notify.models import Delivery


def body(delivery: Delivery) -> bytes:
    """The JSON body sent: the delivery id, the event, when it was made and its fields."""
    document = {
        "id": str(delivery.pk),
        "event": delivery.event,
        "created_at": delivery.created_at.isoformat(),
        "title": delivery.title,
        **delivery.payload,
    }
    return json.dumps(document, sort_keys=True, ensure_ascii=False).encode()


def send(delivery: Delivery, url: str, secret: str) -> transport.Answer:
    raw = body(delivery)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Singularity-Notify/1",
        signing.DELIVERY_HEADER: str(delivery.pk),
        signing.EVENT_HEADER: delivery.event,
    }
    if secret:
        headers[signing.SIGNATURE_HEADER] = signing.sign(secret, raw)
    return transport.post(url, raw, headers)
