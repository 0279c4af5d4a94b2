"""The one HTTP post every destination makes, and the errors it raises: permanent or temporary."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx
from django.utils import timezone

TIMEOUT_SECS = 10.0
#: How much of an answer's body the log keeps.
ANSWER_CHARS = 500


@dataclass
class Answer:
    status: int
    text: str


class SendError(Exception):
    """A try that did not deliver; ``permanent`` stops the retries, ``retry_at`` is when the service asked for one."""

    def __init__(self, message: str, *, permanent: bool, status: int | None = None, retry_at: datetime | None = None):
        super().__init__(message)
        self.permanent = permanent
        self.status = status
        self.retry_at = retry_at


def retry_after(value: str | None) -> datetime | None:
    """The instant a ``Retry-After`` header of seconds names, or None when it names none."""
    try:
        seconds = int((value or "").strip())
    except ValueError:
        return None
    return timezone.now() + timedelta(seconds=max(0, seconds))


def post(url: str, body: bytes, headers: dict[str, str]) -> Answer:
    """POST ``body`` to ``url``; return the 2xx answer, else raise SendError (4xx permanent, 429 and 5xx not)."""
    try:
        response = httpx.post(url, content=body, headers=headers, timeout=TIMEOUT_SECS, follow_redirects=False)
    except httpx.HTTPError as exc:
        raise SendError(f"no answer: {exc.__class__.__name__}: {exc}", permanent=False) from exc
    text = response.text[:ANSWER_CHARS]
    if 200 <= response.status_code < 300:
        return Answer(response.status_code, text)
    temporary = response.status_code == 429 or response.status_code >= 500 or response.status_code == 408
    raise SendError(
        f"HTTP {response.status_code}: {text}",
        permanent=not temporary,
        status=response.status_code,
        retry_at=retry_after(response.headers.get("Retry-After")) if response.status_code == 429 else None,
    )
