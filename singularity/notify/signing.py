"""How a webhook body is signed, and how a receiver checks it (docs/notifications.md).

The header ``X-Singularity-Signature-256`` is ``sha256=`` and the hex HMAC-SHA256 of the raw body under the
destination's shared secret (GitHub's scheme). The body carries the delivery id and the instant it was made, so a
receiver can refuse a replay it already saw.
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-Singularity-Signature-256"
DELIVERY_HEADER = "X-Singularity-Delivery"
EVENT_HEADER = "X-Singularity-Event"


def sign(secret: str, body: bytes) -> str:
    """Return the signature header's value for ``body``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(secret: str, body: bytes, header: str) -> bool:
    """True when ``header`` is the signature of ``body`` under ``secret`` (compared in constant time)."""
    return hmac.compare_digest(sign(secret, body), header or "")
